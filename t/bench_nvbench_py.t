-- cuda-bench's own readers (BenchmarkResult, nvbench_json.reader) read what
-- `cudalua bench --json` writes. Runs where python3 imports cuda.bench.results
-- (PYTHONPATH from CUDALUA_CUDA_BENCH_PYTHONPATH, default /tmp/cb: the
-- cuda-bench 0.3.0 wheel unpacked there) and the fake driver is built; else skips.
local t = require "tap"
local so = os.getenv("CUDALUA_FAKE_LIBCUDA")
if not so or not io.open(so) then t.skip_all("no fake driver (CUDALUA_FAKE_LIBCUDA: run by make check)") end
local pypath = os.getenv("CUDALUA_CUDA_BENCH_PYTHONPATH") or "/tmp/cb"
local py = ("PYTHONPATH='%s' python3"):format(pypath)
local code = t.run(py .. " -c 'import cuda.bench.results' 2>/dev/null")
if code ~= 0 then t.skip_all("python3 with cuda.bench.results is not available (" .. pypath .. ")") end
local fake = require "fake"
local dir = t.tmpdir()
local src = os.getenv("CUDALUA_SRCDIR") or "."
local path = dir .. "/out.json"
local rc, _, err = t.run(("cd '%s' && %s %s bench '%s/scripts/bench_example.lua' --timeout 0.05 -q " ..
  "-b copy -a 'Bytes[pow2]=[16:20:4]' -b sleep -a 'Duration_us=[10]' -b cpu --jsonbin '%s'"):format(dir,
  fake.env("CUDALUA_BENCH_L2_BYTES=65536"), t.cudalua(), src, path))
t.is(rc, 0, "cudalua bench writes the JSON" .. err)
t.write_file(dir .. "/read.py", [[
import sys
from cuda.bench.results import BenchmarkResult
from cuda.bench.scripts.nvbench_json import reader
root = reader.read_file(sys.argv[1])
r = BenchmarkResult.from_json(sys.argv[1])
print("benches", len(r))
for name, sub in r.items():
    for st in sub:
        mean = st.summaries.get("nv/cold/time/gpu/mean") or st.summaries.get("nv/cpu_only/time/cpu/mean")
        print(name, "|", st.name(), "|", mean.value > 0, "|", None if st.samples is None else len(st.samples) > 0,
              "|", st.bw is not None)
]])
local out
rc, out, err = t.run(("%s '%s/read.py' '%s'"):format(py, dir, path))
t.is(rc, 0, "BenchmarkResult.from_json reads it" .. err)
t.ok(not out:find("WARNING"), "nvbench_json.reader: no version warning")
t.like(out, "benches 3", "three benchmarks")
t.like(out, "copy | T=uint32_t Bytes%[pow2%]=20 | True | True | True", "a copy state: axes, mean, samples, bandwidth")
t.like(out, "sleep | Duration_us=10 | True | True | False", "a sleep state")
t.like(out, "cpu | Iterations=1000 | True", "a cpu-only state")
-- nvbench_compare.py (where tabulate is importable too): a file with itself
if t.run(py .. " -c 'import tabulate' 2>/dev/null") == 0 then
  rc, out, err = t.run(("cd '%s' && %s -m cuda.bench.scripts.nvbench_compare --no-color '%s' '%s'"):format(dir, py, path, path))
  t.is(rc, 0, "nvbench_compare.py reads it" .. err)
  t.like(out, "Failure %(diff > min_noise%):  0", "nvbench_compare.py: the file against itself, no failure")
  t.like(out, "## %[0%] ", "nvbench_compare.py: a table per device")
else
  t.skip("python3 cannot import tabulate (nvbench_compare.py's)", 3)
end
os.execute("rm -rf '" .. dir .. "'")
t.done()
