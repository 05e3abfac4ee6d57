-- The bundled scripts: help and option errors everywhere; on a GPU, small
-- runs whose verification lines, efficiency figures and JSON are checked.
local t = require "tap"
local cuda = require "cuda"
local json = require "cuda.json"
local cudalua = t.cudalua()
local nodrv = "CUDALUA_LIBCUDA=/nonexistent " .. cudalua

local scripts = {"device_query", "streaming_overlap", "memory_resources", "launch_cost"}
for _, name in ipairs(scripts) do
  local code, out = t.run(nodrv .. " " .. name .. " --help")
  t.is(code, 0, name .. " --help exits 0 without a GPU")
  t.like(out, "Usage: cudalua " .. name, name .. " --help shows the usage")
  code, out = t.run(nodrv .. " " .. name .. " --no-such-option")
  t.is(code, 2, name .. ": unknown option exits 2")
end

local code, out, err = t.run(nodrv .. " streaming_overlap --streams 0")
t.is(code, 2, "--streams 0 is a usage error")
t.like(err, "streams", "the error names the option")
code, out, err = t.run(nodrv .. " streaming_overlap --elements -5")
t.is(code, 2, "--elements -5 is a usage error")
code, out, err = t.run(nodrv .. " streaming_overlap --pinned sometimes")
t.is(code, 2, "--pinned sometimes is a usage error")
-- The timing options: each bad value a usage error that says why.
for _, case in ipairs{
  {"streaming_overlap --precision x", "bad value for %-%-precision: 'x' is not a percentage"},
  {"memory_resources --max-time 0", "bad value for %-%-max%-time"},
  {"launch_cost --cpu first", "'first' is not a CPU number, auto or none"},
} do
  code, out, err = t.run(nodrv .. " " .. case[1])
  t.is(code, 2, case[1] .. " is a usage error")
  t.like(err, case[2], case[1] .. ": the error says why")
end
code, out, err = t.run(nodrv .. " memory_resources --device=1.5")
t.is(code, 2, "--device 1.5 is a usage error")
t.like(err, "not a device id", "and says why")
for _, name in ipairs{"streaming_overlap", "memory_resources"} do
  code, out, err = t.run(nodrv .. " " .. name)
  t.is(code, 2, name .. " without a driver exits 2")
  t.like(err, "^cudalua: no NVIDIA driver found", name .. " says why in one sentence")
  t.is(select(2, err:gsub("\n", "")), 1, name .. ": one line")
end

if not cuda.is_available() then
  t.skip("no CUDA device", 38)
  t.done()
end

local tmp = os.tmpname()
code, out, err = t.run(cudalua .. " streaming_overlap --elements 1000003 --streams 2,3 --runs 3 --warmup 1 --json " .. tmp)
t.is(code, 0, "streaming_overlap runs on a small odd size")
local _, passed = out:gsub("Verification: PASSED", "")
t.is(passed, 3, "sequential and both streamed configurations verified")
t.like(out, "2 streams: [%d.]+ ms %(\u{b1}[%d.]+%) %- speedup: [%d.]+x  efficiency: %d+%%", "streamed line with speedup and efficiency")
t.like(out, "Limit: +[%d.]+ ms", "limit line")
local f = io.open(tmp)
local report = f and json.decode(f:read("a"))
if f then f:close() end
t.ok(report and report.passed == true and #report.results == 3, "JSON has every result")
t.ok(report and report.limits.limit_ms > 0 and report.limits.h2d_gbps > 0, "JSON has the limits")
t.ok(report and report.results[2].efficiency > 0 and report.results[2].efficiency <= 1.05, "efficiency is a fraction of the limit")
t.is(report and report.elements, 1000003, "JSON records the size")
t.ok(report and report.precision == 0.01 and report.max_time == 1, "JSON: adaptive timing by default, 1% or 1 s")
t.ok(report and report.results[1].runs >= 6 and report.results[2].runs >= 6,
  "JSON: each configuration's runs, enough for the median's interval")

code, out = t.run(cudalua .. " streaming_overlap --elements 300000 --streams 2 --runs 4 --warmup 1 --precision 0 --quiet --json " .. tmp)
f = io.open(tmp)
report = f and json.decode(f:read("a"))
if f then f:close() end
t.ok(code == 0 and report and report.results[1].runs == 4 and report.results[2].runs == 4 and report.max_time == nil,
  "--precision 0: exactly --runs runs per configuration")

code, out = t.run(cudalua .. " streaming_overlap --elements 300000 --streams 2 --runs 2 --warmup 1 --graph --quiet")
t.is(code, 0, "--graph runs")
t.like(out, "Verification: PASSED", "--graph verified")

local trace = os.tmpname()
code, out = t.run(cudalua .. " streaming_overlap --elements 300000 --streams 4 --runs 2 --warmup 1 --timeline --trace " .. trace)
t.is(code, 0, "--timeline and --trace run")
t.like(out, "H2D", "the timeline shows copies")
f = io.open(trace)
local events = f and json.decode(f:read("a"))
if f then f:close() end
t.ok(events and (events.traceEvents or events)[1] ~= nil, "the trace is JSON with events")

-- --auto with a stand-in for bench/overlap_ref: every figure 2.0 ms, and
-- the arguments it was given written down.
local dir = t.tmpdir()
local fake = dir .. "/fake_ref"
t.write_file(fake, [[
#!/bin/sh
printf '%s\n' "$@" > "$(dirname "$0")/args"
while [ $# -gt 0 ]; do
  case $1 in --streams) streams=$2 ;; --chunks) chunks=$2 ;; esac
  shift
done
echo "# fake_ref"
for key in h2d d2h both kernel sequential; do echo "$key 2.0 1.0 3.0"; done
for k in $(echo "$streams" | tr , ' '); do echo "streams_$k 2.0 1.0 3.0"; done
for c in $(echo "$chunks" | tr , ' '); do echo "engines_$c 2.0 1.0 3.0"; echo "copies_$c 2.0 1.0 3.0"; done
]])
os.execute("chmod +x '" .. fake .. "'")
code, out, err = t.run(cudalua .. " streaming_overlap --elements 200000 --streams 2 --runs 2 --warmup 1 --auto --reference "
  .. fake .. " --json " .. tmp)
t.is(code, 0, "--auto --reference runs")
t.like(out, "Best copy%-engine schedule %(%-%-auto, %d+ tried%)", "--auto reports the best copy-engine schedule")
t.like(out, "Its copies alone %(%d+ each way, all at once, no kernel, no waits%): [%d.]+ ms", "and its copies alone")
_, passed = out:gsub("Verification: PASSED", "")
local _, failed = out:gsub("Verification: FAILED", "")
t.ok(passed >= 4 and failed == 0, "every --auto result verified, the copies alone too")
f = io.open(tmp)
report = f and json.decode(f:read("a"))
if f then f:close() end
local copies = report and report.auto and report.auto.copies_alone
t.ok(copies and copies.verified and copies.median_ms > 0 and copies.chunks >= 3, "JSON: the copies alone")
local rows = report and report.reference and report.reference.rows or {}
local by_key = {}
for _, r in ipairs(rows) do by_key[r.key] = r end
t.ok(by_key.h2d and by_key.sequential and by_key.streams_2, "JSON: limits, sequential and streams compared with C")
local engines = copies and by_key["engines_" .. copies.chunks]
t.ok(engines and engines.c_ms == 2.0 and math.abs(engines.ratio - engines.cudalua_ms / 2.0) < 1e-12
  and engines.cudalua_ms == report.auto.copy_engines.median_ms,
  "JSON: the best copy-engine schedule against C's engine schedule with as many chunks")
local args_given = t.read_file(dir .. "/args") or ""
t.like(args_given, "%-%-elements\n200000\n", "the reference gets the problem size")
t.like(args_given, "%-%-chunks\n" .. (copies and copies.chunks or "?") .. "\n", "and the best schedule's chunk count")
local kernels = args_given:match("%-%-kernels\n([^\n]+)")
t.ok(kernels and io.open(kernels .. "/vector_scale.cu") ~= nil, "and the folder of the kernel we compiled")
t.like(out, "%-%-%- Against the raw C driver API", "the comparison is printed")

t.write_file(fake, "#!/bin/sh\necho 'h2d 2.0 1.0 3.0'\n")
code, out, err = t.run(cudalua .. " streaming_overlap --elements 100000 --streams 2 --runs 2 --warmup 1 --reference " .. fake)
t.is(code, 1, "a reference that leaves out a figure fails the run")
t.like(err, "did not report d2h", "and the error names the figure")
t.write_file(fake, "#!/bin/sh\necho broken >&2\nexit 4\n")
code, out, err = t.run(cudalua .. " streaming_overlap --elements 100000 --streams 2 --runs 2 --warmup 1 --reference " .. fake)
t.is(code, 1, "a failing reference fails the run")
t.like(err, "failed %(exit 4%)", "and the error says how")
os.execute("rm -rf '" .. dir .. "'")


code, out = t.run(cudalua .. " memory_resources --elements 4099")
t.is(code, 0, "memory_resources runs")
t.like(out, "All memory resource demos passed%.", "memory_resources verified")
local _, n = out:gsub("PASSED", "")
t.ok(n >= 2, "each demo reports PASSED")

code, out = t.run(cudalua .. " launch_cost --repeats 3 --rounds 1 --batch 10 --json " .. tmp)
t.is(code, 0, "launch_cost runs")
t.like(out, "grid 1, block 32; pinned to CPU %d+", "launch_cost pins itself by default")
f = io.open(tmp)
report = f and json.decode(f:read("a"))
if f then f:close() end
t.ok(report and math.type(report.cpu) == "integer", "JSON: the CPU it ran on")
code, out = t.run(cudalua .. " launch_cost --repeats 3 --rounds 1 --batch 10 --cpu none")
t.like(out, "grid 1, block 32; not pinned", "--cpu none does not pin")
os.remove(tmp); os.remove(trace)
t.done()
