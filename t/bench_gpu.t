-- cudalua bench on a real GPU: the example's copy reaches a plausible share
-- of the peak bandwidth, the sleep kernel measures at least its own length
-- (cold and batch) and not another kernel's, the clock probe reads a
-- plausible SM clock, and cuda-bench's schema holds. Skips without a
-- device. The bounds are loose: make check -j runs other GPU tests beside
-- this one (on the H200 the batch read 110.7 and 113.8 us there, 102.3
-- alone); how close cudalua comes to NVBench is bench/nvbench_compare.sh's
-- to show, not a test's.
local t = require "tap"
t.need_gpu()
local json = require "cuda.json"
local nvc = require "cuda.bench.compare"
local dir = t.tmpdir()
local src = os.getenv("CUDALUA_SRCDIR") or "."
local path = dir .. "/gpu.json"
local code, out, err = t.run(("%s bench '%s/scripts/bench_example.lua' --timeout 5 -b copy -a 'Bytes[pow2]=[26]' " ..
  "-a 'T=[uint32_t]' -b sleep -a 'Duration_us=[100]' --json '%s'"):format(t.cudalua(), src, path))
t.is(code, 0, "cudalua bench runs the example on the GPU" .. (code ~= 0 and err or ""))
t.diag(out)
local doc = json.decode(t.read_file(path) or "{}")
local copy, sleep = doc.benchmarks[1].states[1], doc.benchmarks[2].states[1]
local V = nvc.value
local util = V(copy, "nv/cold/bw/global/utilization")
t.ok(util and util > 0.3 and util < 1.05, ("copy of 64 MB: %.1f%% of the peak DRAM bandwidth"):format(100 * (util or 0)))
local cold, batch = V(sleep, "nv/cold/time/gpu/mean"), V(sleep, "nv/batch/time/gpu/mean")
t.ok(cold and cold > 99e-6 and cold < 200e-6, ("sleep 100 us: cold %.2f us"):format((cold or 0) * 1e6))
t.ok(batch and batch > 99e-6 and batch < 200e-6, ("sleep 100 us: batch %.2f us"):format((batch or 0) * 1e6))
local noise = V(sleep, "nv/cold/time/gpu/stdev/relative")
t.ok(noise and noise <= 0.1, ("sleep 100 us: noise %.3f%% (stdrel stops at 0.5%% or when it settles)"):format((noise or 1) * 100))
local clock = V(copy, "nv/cold/sm_clock_rate/mean")
local max = doc.devices[1].sm_default_clock_rate
t.ok(clock and clock > 0.5 * max and clock < 1.1 * max, ("the clock probe reads %.0f MHz (max %.0f)"):format(
  (clock or 0) / 1e6, max / 1e6))
t.is(V(copy, "nv/cold/throttle/discarded"), 0, "no sample discarded as throttled on an idle GPU")
os.execute("rm -rf '" .. dir .. "'")
t.done()
