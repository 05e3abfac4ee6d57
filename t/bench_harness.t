-- The NVBench-shaped harness: stopping criteria, the throttle watch with an
-- injected clock, axes and overrides in pure Lua; then, under the fake
-- driver, cudalua bench on the bundled example and on files made here
-- (a benchmark that raises, bad overrides, unwritable outputs, throttling).
local t = require "tap"
local criteria = require "cuda.bench.criteria"
local throttle = require "cuda.bench.throttle"
local axes = require "cuda.bench.axes"
local bench = require "cuda.bench"
local json = require "cuda.json"

t.seed()

-- --- stdrel ------------------------------------------------------------------------
local function two_pass_noise(xs)
  local n, sum = #xs, 0
  for _, x in ipairs(xs) do sum = sum + x end
  local mean, sq = sum / n, 0
  for _, x in ipairs(xs) do sq = sq + (x - mean) ^ 2 end
  return math.sqrt(sq / (n - 1)) / mean
end

local c = criteria.new("stdrel")
local xs = {}
for i = 1, 200 do
  xs[i] = 1e-3 * (1 + 0.2 * (math.random() - 0.5))
  c:add(xs[i])
end
t.near(c:noise(), two_pass_noise(xs), 1e-9, "stdrel: the incremental noise equals the two-pass one")
t.ok(not c:is_finished(), "stdrel: 0.2 s of GPU time is under min-time")
local quiet = criteria.new("stdrel", {["min-time"] = 0.01})
for _ = 1, 20 do quiet:add(1e-3 * (1 + 1e-4 * math.random())) end
t.ok(quiet:is_finished(), "stdrel: noise under 0.5% after min-time finishes")
local noisy = criteria.new("stdrel", {["min-time"] = 0.01, ["max-noise"] = 0.001})
for _ = 1, 20 do noisy:add(1e-3 * (1 + 0.5 * math.random())) end
t.ok(not noisy:is_finished(), "stdrel: noise above max-noise does not finish")
local few = criteria.new("stdrel", {["min-time"] = 0})
for _ = 1, 4 do few:add(1) end
t.is(few:noise(), math.huge, "stdrel: no noise estimate below 5 samples")
t.raises(function() criteria.new("nope") end, "unknown stopping criterion 'nope'", "an unknown criterion")
t.raises(function() criteria.new("stdrel", {["max-noise"] = "x"}) end, "must be a number", "a wrong-typed parameter")

-- --- entropy and sample_count --------------------------------------------------------
local e = criteria.new("entropy")
local finished_at
for i = 1, 5000 do
  e:add(({1e-3, 1.1e-3, 1.2e-3})[math.random(3)])
  if e:is_finished() then finished_at = i; break end
end
t.ok(finished_at and finished_at < 5000, "entropy: three repeating values settle (after " .. tostring(finished_at) .. ")")
local growing = criteria.new("entropy")
local done_early = false
for i = 1, 200 do growing:add(i * 1e-6); done_early = done_early or growing:is_finished() end
t.ok(not done_early, "entropy: ever new values keep the entropy growing")
local sc = criteria.new("sample_count", {["sample-count"] = 7})
for _ = 1, 6 do sc:add(1) end
t.ok(not sc:is_finished(), "sample_count: 6 of 7")
sc:add(1)
t.ok(sc:is_finished(), "sample_count: 7 of 7")

-- --- throttle watch with an injected clock --------------------------------------------
local readings = {1980, 1400, 1450, 1980, 1000, 1000, 1000, 1980}
local r, slept = 0, {}
local source = {name = "test", max = 1980, read = function() r = r + 1; return readings[r] end}
local w = throttle.watcher(source, {threshold = 0.75, recovery_delay = 0.01, sleep = function(s) slept[#slept + 1] = s end})
local kept = 0
for _ = 1, #readings do if w:check() then kept = kept + 1 end end
t.is(kept, 3, "throttle: samples at or above 75% of the max clock are kept")
t.is(w.discarded, 5, "throttle: the 5 throttled samples are discarded")
t.is(#slept, 5, "throttle: each discard waits out the recovery delay")
t.ok(slept[1] == 0.01 and slept[5] == 0.01, "throttle: three discards in a row wait the delay itself")
-- NVBench's dynamic delay: from the fourth discard in a row, delay += min(1.5 delay, 0.5), kept afterwards
do
  local base = 0.02 + 0.2 * math.random()
  local reads = {1000, 1000, 1000, 1000, 1000, 1000, 1980, 1000, 1000, 1000, 1000}
  local i, got = 0, {}
  local wd = throttle.watcher({max = 1980, read = function() i = i + 1; return reads[i] end},
    {recovery_delay = base, sleep = function(s) got[#got + 1] = s end})
  for _ = 1, #reads do wd:check() end
  local want, delay, run = {}, base, 0
  for _, mhz in ipairs(reads) do
    if mhz < 0.75 * 1980 then
      if run > 2 then delay = delay + math.min(1.5 * delay, 0.5) end
      want[#want + 1], run = delay, run + 1
    else
      run = 0
    end
  end
  local same = #got == #want
  for k = 1, #want do same = same and math.abs(got[k] - want[k]) < 1e-12 end
  t.ok(same, ("throttle: the delay grows as NVBench's and stays grown (%s)"):format(table.concat(got, " ")))
  t.like(wd:warning(3), "^GPU throttled below threshold %(1000%.00 MHz / 1980%.00 MHz%) %(51%% < 75%%%) on sample 3%. "
    .. "Discarding previous trial and pausing for %d%.%d%d%ds%.$", "throttle: NVBench's Warn text")
end
t.near(w:mean_clock(), 1980, 1e-9, "throttle: the mean clock of the kept samples")

-- --- axes ------------------------------------------------------------------------------
local ax = {axes.new("T", "type", {"float", "double"}), axes.new("Bytes", "int64", {16, 20}, "pow2"),
            axes.new("Op", "string", {"a", "b"})}
t.is(ax[2].values[2], 1 << 20, "pow2 axis: exponents become powers of two")
local states = axes.states(ax)
t.is(#states, 8, "the cartesian product of 2x2x2")
t.ok(states[1].T == 1 and states[2].T == 2 and states[1].Bytes == 1, "the first axis varies fastest")
t.is(#axes.states(ax, {{"T", "Op"}}), 4, "zipped axes walk together")
t.is(#axes.states(ax, nil, function() return {{T = "float", Bytes = 65536, Op = "b"}} end), 1,
  "a user-defined iteration space")
t.raises(function() axes.states(ax, nil, function() return {{T = "int"}} end) end, "gives axis 'T' no value",
  "a user space naming a missing value")
local name, new = axes.parse_override("Bytes[pow2]=[16:28:4]", ax)
t.is(table.concat(new.inputs, ","), "16,20,24,28", "override: a pow2 range " .. name)
local _, ints = axes.parse_override("Bytes=[1,2,3]", {axes.new("Bytes", "int64", {1})})
t.is(table.concat(ints.values, ","), "1,2,3", "override: a list")
local _, f = axes.parse_override("X=[0.5:1.5:0.5]", {axes.new("X", "float64", {1})})
t.is(#f.values, 3, "override: a float range")
t.raises(function() axes.parse_override("Nope=[1]", ax) end, "names no axis of this benchmark %(its axes: 'T', 'Bytes', 'Op'%)",
  "override: an axis that does not exist")
t.raises(function() axes.parse_override("Bytes=[1,x]", {axes.new("Bytes", "int64", {1})}) end, "'x' is not an integer",
  "override: a wrong-typed value")
t.raises(function() axes.parse_override("T=[int]", ax) end, "not one of the type axis's types", "override: an unknown type")
t.raises(function() axes.parse_override("Op[pow2]=[1]", ax) end, "'%[pow2%]' is not a flag of a string axis",
  "override: pow2 on a string axis")

-- --- registration: bad input ------------------------------------------------------------
local b = bench.register(function() end)
t.raises(function() b:add_int64_axis("N", {1, "x"}) end, "axis 'N': value 2 must be an integer", "a wrong-typed axis value")
t.raises(function() b:add_int64_axis("N", {}) end, "non%-empty list", "an empty axis")
t.raises(function() b:add_float64_axis("F", {0 / 0}) end, "must be a number", "NaN in a float axis")
t.raises(function() b:add_string_axis("S", {1}) end, "must be a string", "a number in a string axis")
t.raises(function() b:set_stopping_criterion("fast") end, "unknown criterion 'fast'", "an unknown criterion")
t.raises(function() b:set_min_samples(-1) end, "integer >= 0", "min_samples -1")
t.raises(function() b:set_timeout(-1) end, "'set_timeout' %(a number of seconds >= 0", "a negative timeout")
t.raises(function() bench.register(42) end, "a function expected", "register of a number")
t.is(b:add_int64_axis("N", {1, 2}):set_name("n"):set_stopping_criterion("entropy", {["max-angle"] = 0.1}):get_name(), "n",
  "the setters chain")

-- --- under the fake driver: cudalua bench ---------------------------------------------------
local so = os.getenv("CUDALUA_FAKE_LIBCUDA")
if not so or not io.open(so) then
  t.skip("no fake driver (CUDALUA_FAKE_LIBCUDA: run by make check)", 1)
  t.done()
  return
end
local fake = require "fake"
local cudalua = t.cudalua()
local src = os.getenv("CUDALUA_SRCDIR") or "."
local dir = t.tmpdir()
local env = fake.env("CUDALUA_BENCH_L2_BYTES=65536")
local function bench_cmd(file, opts)
  return ("cd '%s' && %s %s bench '%s' --timeout 0.05 %s"):format(dir, env, cudalua, file, opts or "")
end

local json_path = dir .. "/out.json"
-- as NVBench's, an -a after a -b applies to that benchmark alone
local code, out, err = t.run(bench_cmd(src .. "/scripts/bench_example.lua",
  "-b copy -a 'Bytes[pow2]=[16:18:2]' -b sleep -b cpu -a 'Iterations=[10]' --json '" .. json_path .. "' --csv '" ..
  dir .. "/out.csv'"))
t.is(code, 0, "the example runs under the fake" .. (code ~= 0 and err or ""))
t.like(out, "## copy", "markdown: the copy table")
t.like(out, "|%s+T%s+|%s+Bytes%s+| Samples |", "markdown: NVBench's columns")
t.like(out, "uint32_t | 2%^18 = 262144 |", "markdown: the type and pow2 axis values")
t.like(out, "BWUtil", "markdown: the bandwidth utilisation column")
t.like(out, "| Batch GPU |", "markdown: the batch column")
t.like(out, "## cpu", "markdown: the cpu-only table")
t.like(out, "# Log\n\n```\nRun:  %[1/10%] copy %[Device=0 T=uint8_t Bytes=2%^16%]", "the log: where the run is, in the document")
t.like(out, "\nPass: Cold: ", "the log: NVBench's Pass lines")
local doc = json.decode(t.read_file(json_path) or "{}")
t.is(doc.meta and doc.meta.version.json.string, "1.0.0", "json: NVBench's file version")
t.is(doc.benchmarks and #doc.benchmarks, 3, "json: the three benchmarks chosen")
local copy = doc.benchmarks and doc.benchmarks[1]
t.is(copy and #copy.states, 6, "json: 3 types x 2 sizes")
local tags = {}
for _, s in ipairs(copy and copy.states[1].summaries or {}) do tags[s.tag] = s end
t.ok(tags["nv/cold/time/gpu/mean"] and tags["nv/cold/time/gpu/stdev/relative"] and tags["nv/batch/time/gpu/mean"]
  and tags["nv/cold/bw/global/utilization"], "json: the cold, batch and bandwidth summaries")
t.like(t.read_file(dir .. "/out.csv") or "", "^Benchmark,Device,Device Name,T,Bytes %(pow2%),Bytes,Skipped,Samples,",
  "csv: a header line")

-- cudalua compare on two NVBench JSON files: noise-aware verdicts
local nvc = require "cuda.bench.compare"
t.is(nvc.verdict(1.0, 0.01, 0.995, 0.02), "same", "compare: a difference within the smaller noise is the same")
t.is(nvc.verdict(1.0, 0.01, 0.9, 0.02), "faster", "compare: 10% less time, 1% noise: faster")
t.is(nvc.verdict(1.0, 0.01, 1.1, 0.02), "slower", "compare: 10% more time: slower")
t.is(nvc.verdict(1.0, nil, 1.1, nil), "undecided", "compare: no noise estimate: undecided")
local doc2 = json.decode(t.read_file(json_path) or "{}")
for _, s in ipairs(doc2.benchmarks[1].states[1].summaries) do
  if s.tag == "nv/cold/time/gpu/mean" then s.data[1].value = tostring(tonumber(s.data[1].value) * 3) end
  if s.tag == "nv/cold/time/gpu/stdev/relative" then s.data[1].value = "0.01" end
end
for _, s in ipairs(doc.benchmarks[1].states[1].summaries) do
  if s.tag == "nv/cold/time/gpu/stdev/relative" then s.data[1].value = "0.01" end
end
t.write_file(dir .. "/ref.json", json.encode(doc))
t.write_file(dir .. "/cmp.json", json.encode(doc2))
code, out, err = t.run(("%s compare '%s/ref.json' '%s/cmp.json'"):format(cudalua, dir, dir))
t.is(code, 0, "compare: NVBench JSON files" .. err)
t.like(out, "| Device=0 T=uint8_t Bytes=2%^16 | [^\n]* | SLOWER |", "compare: three times the time is slower")
t.like(out, "%d+ states: ", "compare: a count of verdicts")

-- a benchmark that raises; the others still run
t.write_file(dir .. "/raises.lua", [[
local bench = require "cuda.bench"
bench.register(function(state) error("boom") end):set_name("bad")
bench.register(function(state) state:exec(function() end) end):set_name("good"):set_is_cpu_only(true)
bench.register(function(state) state:get_int64("Missing") end):set_name("missing")
bench.register(function(state) state:skip("not today") end):set_name("skipped")
]])
code, out, err = t.run(bench_cmd(dir .. "/raises.lua"))
t.is(code, 1, "a benchmark that raises: exit 1")
t.like(out, "\nFail: Unexpected error: [^\n]*boom", "the error is reported")
t.like(out, "## good\n\n| Samples |", "the other benchmarks still ran")
t.like(out, "no axis of that name", "a missing axis value is reported")
t.like(out, "\nSkip: not today\n", "a skipped state says why")

-- a blocking kernel that times out (the GPU's side simulated: the launch of
-- the blocking kernel sets its timed-out word) fails its state, the others run
t.write_file(dir .. "/blocked.lua", [[
local bench = require "cuda.bench"
local cuda = require "cuda"
local measure = require "cuda.bench.measure"
local launch = cuda.launch
cuda.launch = function(s, c, k, ...)
  local h = measure.helpers(s.device)
  local r = launch(s, c, k, ...)
  if k == h.block and os.getenv("BLOCK_TIMEOUT") then h.timed_out_view[1] = 1 end
  return r
end
bench.register(function(state) state:exec(function() end) end):set_name("held")
bench.register(function(state) state:exec(function(l, timer) timer:start(); timer:stop() end, {timer = true}) end)
  :set_name("timed")
]])
code, out, err = t.run((bench_cmd(dir .. "/blocked.lua", "--stopping-criterion sample_count"):gsub("&& ", "&& BLOCK_TIMEOUT=1 ", 1)))
t.is(code, 0, "a blocking kernel that timed out: the state is measured again without it (exit 0)")
t.like(out, "Warn: the blocking kernel timed out after 30 s", "the timeout is reported")
t.like(out, "## timed\n\n### [^\n]*\n\n| Samples |", "the timer-mode benchmark (no blocker) still ran")
code, out, err = t.run(bench_cmd(dir .. "/blocked.lua", "--stopping-criterion sample_count"))
t.is(code, 0, "without the timeout both run" .. err)

-- without a driver: GPU benchmarks say why (exit 2); cpu-only ones still run
local nodrv = ("cd '%s' && CUDALUA_LIBCUDA=/nonexistent %s bench '%s/scripts/bench_example.lua' --timeout 0.01 "):format(dir, cudalua, src)
code, out, err = t.run(nodrv .. "-q")
t.is(code, 2, "no driver: exit 2")
t.like(err, "no CUDA device to run on %(no NVIDIA driver found", "no driver: it says why")
code, out, err = t.run(nodrv .. "-b cpu -a 'Iterations=[3]'")
t.is(code, 0, "no driver: a cpu-only benchmark runs" .. err)
t.like(out, "|%s+3 |%s+%d+x |", "no driver: its row")

-- bad input before anything runs
code, out, err = t.run(bench_cmd(src .. "/scripts/bench_example.lua", "-a 'Nope=[1]'"))
t.is(code, 2, "an override naming no axis: exit 2")
t.like(err, "the benchmark 'copy' has no axis 'Nope'", "it says so")
t.is(out, "", "and nothing ran")
code, _, err = t.run(bench_cmd(src .. "/scripts/bench_example.lua", "--json /nonexistent/dir/x.json"))
t.is(code, 2, "an unwritable --json: exit 2 before running")
t.like(err, "cannot write /nonexistent/dir/x.json", "it names the path")
code, out = t.run(bench_cmd(src .. "/scripts/bench_example.lua", "--list"))
t.like(out, "\n%* `Bytes` : int64 %[pow2%]\n  %* `16` %(2%^16 = 65536%)\n", "--list shows the axes")

-- batched = "graph": the batch replays a graph of captured calls. Each call
-- adds 1 to every element (scale_and_bias, emulated by the fake), so the
-- buffer counts the executions: every call outside the capture, plus one per
-- launch of the batch's replays, while fn itself ran only the capture's times.
t.write_file(dir .. "/graph.lua", [[
local bench = require "cuda.bench"
local run = require "cuda.bench.run"
local cuda = require "cuda"
local calls, start, result = 0, nil, nil
local b = bench.register(function(state)
  local dev = state.device
  local k = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
  local x <close> = cuda.PinnedMemoryResource():allocate(64 * 4)
  local v = x:view("float32")
  start = math.random(1, 1000)
  v:fill(start)
  local cfg = cuda.LaunchConfig{grid = 1, block = 64}
  state:exec(function(launch)
    calls = calls + 1
    cuda.launch(launch.stream, cfg, k, x, cuda.f32(1), cuda.f32(1), cuda.u64(64))
  end, {batched = "graph"})
  state.stream:sync()
  result = {v[1], v[64]}
-- a short batch: the float32 sums stay exact (below 2^24) however fast the fake runs
end):set_name("g"):set_stopping_criterion("sample_count", {["sample-count"] = 7}):set_batch_target_time(0.005)
local plan = run.plan({b}, {}, {cuda.Device(0)})
local results = run.run(plan, {log = function() end, l2_bytes = 4096, clock_source = false})
local got = {}
for _, s in ipairs(results[1].states[1].summaries) do got[s.tag] = s.value end
print("calls", calls, "graph", got["cudalua/batch/graph_launches"], "batch", got["nv/batch/sample_size"],
  "added", result[1] - start, result[2] - start)
]])
code, out, err = t.run(("%s %s '%s'"):format(env, cudalua, dir .. "/graph.lua"))
local calls, per_graph, batch_n, added1, added64 =
  out:match("calls\t(%d+)\tgraph\t(%d+)\tbatch\t(%d+)\tadded\t(%d+)%.?%d*\t(%d+)")
calls, per_graph, batch_n = tonumber(calls), tonumber(per_graph), tonumber(batch_n)
t.ok(per_graph and per_graph >= 1 and batch_n >= per_graph, "graph batch: replays of a graph of "
  .. tostring(per_graph) .. " calls, " .. tostring(batch_n) .. " launches" .. err)
t.ok(batch_n and batch_n % per_graph == 0 and batch_n > calls,
  "graph batch: more launches than fn was called (" .. tostring(calls) .. ")")
t.is(tonumber(added1), calls and calls - per_graph + batch_n, "graph batch: every replayed launch ran (first element)")
t.is(added64, added1, "graph batch: and the last")

-- a function that cannot be captured (it synchronizes) is reported, and the others still run
t.write_file(dir .. "/uncapturable.lua", [[
local bench = require "cuda.bench"
bench.register(function(state)
  state:exec(function(launch) launch.stream:sync() end, {batched = "graph"})
end):set_name("synced")
bench.register(function(state) state:exec(function() end, {batched = "hot"}) end):set_name("badvalue")
bench.register(function(state) state:exec(function() end, {batched = "graph"}) end):set_name("empty")
]])
code, out, err = t.run(bench_cmd(dir .. "/uncapturable.lua", "--stopping-criterion sample_count"))
t.is(code, 1, "an uncapturable function: exit 1")
t.like(out, 'batched = "graph": the function could not be captured into a graph', "it says why")
t.like(out, 'batched must be true, false or "graph", not "hot"', "a bad batched value")
t.like(out, "## empty", "the others still ran")

-- throttling through the harness with an injected clock source, under the fake
t.write_file(dir .. "/throttle.lua", [[
local bench = require "cuda.bench"
local run = require "cuda.bench.run"
local b = bench.register(function(state) state:exec(function() end, {batched = false}) end)
  :set_name("t"):set_stopping_criterion("sample_count", {["sample-count"] = 20}):set_throttle_recovery_delay(0)
local cuda = require "cuda"
local plan = run.plan({b}, {}, {cuda.Device(0)})
local i = 0
local results = run.run(plan, {log = function() end, l2_bytes = 4096, clock_source = function()
  return {max = 2000, read = function() i = i + 1; return i % 3 == 0 and 1000 or 1900 end}
end})
local st = results[1].states[1]
for _, s in ipairs(st.summaries) do if s.tag == "nv/cold/throttle/discarded" or s.tag == "nv/cold/sample_size" then
  print(s.tag, s.value) end end
]])
code, out, err = t.run(("%s %s '%s'"):format(env, cudalua, dir .. "/throttle.lua"))
t.like(out, "nv/cold/sample_size\t20", "throttle: 20 samples kept" .. err)
local discarded = tonumber(out:match("discarded\t(%d+)"))
t.ok(discarded and discarded >= 9, "throttle: every third sample discarded and counted (" .. tostring(discarded) .. ")")

os.execute("rm -rf '" .. dir .. "'")
t.done()
