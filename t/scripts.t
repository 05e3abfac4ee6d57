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
  t.skip("no CUDA device", 16)
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

code, out = t.run(cudalua .. " memory_resources --elements 4099")
t.is(code, 0, "memory_resources runs")
t.like(out, "All memory resource demos passed%.", "memory_resources verified")
local _, n = out:gsub("PASSED", "")
t.ok(n >= 2, "each demo reports PASSED")
os.remove(tmp); os.remove(trace)
t.done()
