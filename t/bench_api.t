-- cuda.bench as NVBench's Python API (cuda-bench 0.3.0): every Benchmark and
-- State method of its .pyi, axis names and -a overrides by NVBench's
-- grammar, state names that stay unique, benchmark names from the
-- function's name, set_stream, the summary columns, cpu-only states
-- without a device, and the run loop (errors, no exec, two execs, Ctrl-C).
-- Under the fake driver with two devices.
local t = require "tap"
local fake = require "fake"
local cuda = fake.start("FAKECUDA_DEVICES=2 ")
t.seed()
local bench = require "cuda.bench"
local harness = require "cuda.bench.harness"
local axes = require "cuda.bench.axes"
local run = require "cuda.bench.run"
local measure = require "cuda.bench.measure"
local json = require "cuda.json"

local dev0, dev1 = cuda.Device(0), cuda.Device(1)

-- A benchmark that measures quickly: 3 samples.
local function quick(b) return b:set_stopping_criterion("sample_count", {["sample-count"] = 3}):set_timeout(1) end

-- Plans and runs benchmarks on devices (default device 0); returns the
-- results, the failure count and the log.
local function run_all(list, opts)
  opts = opts or {}
  local lines = {}
  local plan = run.plan(list, opts.overrides or {}, opts.devices or {dev0})
  local results, failures = run.run(plan, {log = function(text) lines[#lines + 1] = text end, l2_bytes = 4096,
    clock_source = false})
  return results, failures, table.concat(lines)
end

local function tags_of(rec)
  local by = {}
  for _, s in ipairs(rec.summaries or {}) do by[s.tag] = s end
  return by
end

-- --- benchmark names: the function's name where it is registered ---------------------------
local function copy_kernel(state) end
t.is(bench.register(copy_kernel):get_name(), "copy_kernel", "name: a local function's name (NVBench: fn.__name__)")
local up_fn = function() end
local function register_upvalue() return bench.register(up_fn):get_name() end
t.is(register_upvalue(), "up_fn", "name: an upvalue's name")
function bench_api_global(state) end   -- luacheck: ignore (a global on purpose)
t.is(bench.register(bench_api_global):get_name(), "bench_api_global", "name: a global's name")
local module = {sweep = function() end}
t.is(bench.register(module.sweep):get_name(), "sweep", "name: a field's name")
local line = debug.getinfo(1, "l").currentline + 1
local anon = bench.register(function(state) end)
t.is(anon:get_name(), "bench_api.t:" .. line, "name: an anonymous function: file:line")
t.is(harness.register(copy_kernel):get_name(), "copy_kernel", "name: through cuda.bench.harness too")

-- --- axis names: any string, as NVBench's ----------------------------------------------------
local b = bench.register(copy_kernel):add_float64_axis("Duration (s)", {7e-5, 1e-4, 5e-4})
  :add_string_axis("a b=c, [d]", {"x"})
t.is(b.axes[1].name, "Duration (s)", "axis: a name with a space and parentheses")
t.raises(function() bench.register(copy_kernel):add_int64_axis("", {1}) end, "non%-empty string, got ''",
  "axis: an empty name is refused")

-- --- -a overrides by NVBench's grammar -------------------------------------------------------
local function override(spec, axis)
  local name, new = axes.parse_override(spec, {axis})
  return name, new
end
local name, new = override("  Duration (s) [] = [ 1e-4 , 2e-4 ] ", axes.new("Duration (s)", "float64", {1}))
t.is(name, "Duration (s)", "-a: a name with spaces, trimmed")
t.is(#new.values, 2, "-a: a list, spaces ignored")
local pow = axes.new("P", "int64", {1, 2}, "pow2")
_, new = override("P=3", pow)
t.ok(new.values[1] == 3 and new.flags == "", "-a: no [pow2] on a pow2 axis gives a plain int64 axis (P=3 is 3)")
_, new = override("P[ pow2 ]=[1:3]", pow)
t.is(table.concat(new.values, ","), "2,4,8", "-a: [ pow2 ] with spaces, a range of exponents")
_, new = override("P[pow2]=5", pow)
t.is(new.values[1], 32, "-a: [pow2] single value")
local big = axes.new("N", "int64", {1})
_, new = override("N=[9223372036854775800:9223372036854775807:5]", big)
t.ok(#new.values == 2 and new.values[1] == 9223372036854775800 and new.values[2] == 9223372036854775805,
  "-a: a range up to the int64 limit does not wrap")
_, new = override("N=[-9223372036854775808:9223372036854775807:4611686018427387904]", big)
t.is(table.concat(new.values, ","), ("%d,%d,0,%d"):format(math.mininteger, -(1 << 62), 1 << 62),
  "-a: the whole int64 range in four steps, exact")
for _ = 1, 20 do   -- ranges near either limit, against a count made by hand
  local near_top = math.random(2) == 1
  local span, step = math.random(0, 1 << 40), math.random(1, 1 << 38)
  local start = near_top and math.maxinteger - span or math.mininteger
  local stop = start + span
  local want = {}
  local v = start
  while true do
    want[#want + 1] = v
    if stop - v < step then break end
    v = v + step
  end
  if #want <= axes.MAX_RANGE_VALUES then
    _, new = override(("N=[%d:%d:%d]"):format(start, stop, step), big)
    t.is(table.concat(new.values, ","), table.concat(want, ","), ("-a: [%d:%d:%d], %d values"):format(start, stop, step, #want))
  end
end
t.raises(function() override("N=[0:9223372036854775807:1]", big) end, "the range gives more than 100000 values",
  "-a: a range too large is refused")
t.raises(function() override("N=[-9223372036854775808:9223372036854775807]", big) end, "more than 100000 values",
  "-a: the whole int64 range one by one is refused")
t.raises(function() override("N=[5:1]", big) end, "gives no values", "-a: start > stop")
t.raises(function() override("N=[1:5:-1]", big) end, "must be > 0", "-a: a negative step")
t.raises(function() override("N=[9223372036854775808]", big) end, "is not an integer", "-a: past int64")
local f = axes.new("F", "float64", {1})
_, new = override("F=[0:1.1:0.3]", f)
local want_f, x = {}, 0.0
while x <= 1.1 + 0.3 / 2 do want_f[#want_f + 1] = ("%.17g"):format(x); x = x + 0.3 end
local got_f = {}
for i, v in ipairs(new.values) do got_f[i] = ("%.17g"):format(v) end
t.is(table.concat(got_f, ","), table.concat(want_f, ","), "-a: a float range as NVBench's (accumulated, stop padded by step/2)")
t.is(#new.values, 5, "-a: so [0:1.1:0.3] reaches 1.2")
t.raises(function() override("F[pow2]=[1]", f) end, "not a flag of a float64 axis", "-a: flags on a float axis")
local s_axis = axes.new("S", "string", {"a", "b"})
t.raises(function() override("S=[a:b]", s_axis) end, "needs a numeric axis", "-a: no range for a string axis")
_, new = override("S=[a b, c]", s_axis)
t.is(table.concat(new.values, "|"), "a b|c", "-a: a string list")
for _, bad in ipairs{{"S=a,b", "is not a value"}, {"S=[a,,b]", "an empty value"}, {"A:B=1", "cannot hold ':'"},
                     {"=1", "no axis name"}, {"S", "NAME=VALUE"}, {"S=", "NAME=VALUE"}, {"S[pow2=1", "not closed"},
                     {"N=[1:2:3:4]", "2 or 3 parts"}, {"N=[1::2]", "an empty part"}, {"F=[nan]", "not a number"}} do
  t.raises(function() axes.parse_override(bad[1], {s_axis, big, f}) end, bad[2]:gsub("[%[%]%-%(%)]", "%%%0"),
    "-a: " .. bad[1] .. " is refused")
end
_, new = override("F=[inf]", f)
t.is(new.values[1], math.huge, "-a: inf is a float")

-- a global -a must name an axis of every benchmark (NVBench: Axis not found)
local with_n = quick(bench.register(function(state) state:exec(function() end) end)):set_name("with_n")
  :add_int64_axis("N", {1, 2}):set_is_cpu_only(true)
local without = quick(bench.register(function(state) state:exec(function() end) end)):set_name("without")
  :set_is_cpu_only(true)
t.raises(function() run.plan({with_n, without}, {"N=[3]"}, {}) end, "the benchmark 'without' has no axis 'N'",
  "-a: a global override naming an axis a benchmark lacks is an error")
local plan = run.plan({with_n, {bench = with_n, overrides = {"N=[7,8,9]"}}}, {"N=[3]"}, {})
t.ok(#plan[1].states == 1 and #plan[2].states == 3 and plan[2].axes[1].values[3] == 9,
  "-a: a configuration's own overrides come after the global ones (NVBench's -b)")

-- --- state names: unique and exact ---------------------------------------------------------
local close = axes.new("F", "float64", {1.000001, 1.0000049, 2})
t.is(table.concat(close.texts, " "), "1.000001 1.000005 2", "names: floats alike at %.5g get the fewest digits that part them")
local nv = axes.new("F", "float64", {7e-5, 1e-4, 1e-4 + 0.25e-3, 3.14159265})
t.is(table.concat(nv.texts, " "), "7e-05 0.0001 0.00035 3.1416", "names: NVBench's {:.5g} where it stays unique")
for _ = 1, 50 do
  local values, seen = {}, {}
  for i = 1, math.random(2, 8) do
    local v = 1 + math.random(0, 3) * 10 ^ -math.random(1, 12)
    if not seen[("%.17g"):format(v)] then values[#values + 1] = v; seen[("%.17g"):format(v)] = true end
    if i == 1 then values[#values + 1] = -v end
  end
  local axis = axes.new("F", "float64", values)
  local texts, unique, back = {}, true, true
  for i, text in ipairs(axis.texts) do
    unique = unique and not texts[text]
    texts[text] = true
    back = back and tonumber(text) ~= nil
  end
  t.ok(unique and back, "names: " .. #values .. " random floats read apart: " .. table.concat(axis.texts, " "))
end
t.raises(function() bench.register(copy_kernel):add_int64_axis("N", {1, 2, 1}) end,
  "values 1 and 3 are the same %(1%)", "names: a repeated value is refused")
t.raises(function() bench.register(copy_kernel):add_float64_axis("F", {0.5, 0.5}) end, "are the same",
  "names: a repeated float is refused")
local twice = bench.register(function() end):add_int64_axis("N", {1, 2})
  :set_iteration_space(function() return {{N = 1}, {N = 2}, {N = 1}} end)
t.raises(function() run.plan({twice}, {}, {dev0}) end, "states 1 and 3 are both 'N=1'",
  "names: an iteration space that repeats a state is refused")

-- errors name the caller's line, through every setter
local copy_kernel_bench = bench.register(copy_kernel)
for _, call in ipairs{function() bench.register(copy_kernel):add_int64_axis("N", {"x"}) end,
                      function() bench.register(copy_kernel):add_float64_axis("F", {1, 1}) end,
                      function() bench.register(copy_kernel):set_timeout(-1) end,
                      function() bench.register(copy_kernel):set_run_once(1) end,
                      function() bench.register(copy_kernel):set_min_samples(-1) end,
                      function() bench.register(copy_kernel):set_criterion_param_string("max-noise", "x") end,
                      function() bench.register(copy_kernel):set_criterion_param_int64(5, 1) end,
                      function() bench.register(copy_kernel):set_criterion_param_string("x", 5) end,
                      function() bench.register(copy_kernel):set_stopping_criterion("fast") end,
                      function() harness.new_state(copy_kernel_bench, {}, {}, {}, nil):get_int64_or_default("N", "x") end,
                      function() harness.new_state(copy_kernel_bench, {}, {}, {}, nil):get_int64("N") end,
                      function() harness.new_state(copy_kernel_bench, {}, {}, {}, nil):add_global_memory_reads(1, 5) end,
                      function() harness.new_state(copy_kernel_bench, {}, {}, {}, nil):set_stream(5) end,
                      function() harness.new_state(copy_kernel_bench, {}, {}, {}, nil):set_timeout(-1) end} do
  local _, why = pcall(call)
  t.like(tostring(why), "^[^:]*bench_api%.t:%d+: ", "errors name the caller's line: " .. tostring(why))
end

-- --- the Benchmark API of cuda-bench 0.3.0 ------------------------------------------------------
local BENCHMARK_METHODS = {"get_name", "add_int64_axis", "add_int64_power_of_two_axis", "add_float64_axis",
  "add_string_axis", "set_name", "set_run_once", "set_skip_time", "set_throttle_recovery_delay",
  "set_throttle_threshold", "set_timeout", "set_batch_target_time", "set_stopping_criterion",
  "set_criterion_param_float64", "set_criterion_param_int64", "set_criterion_param_string", "set_min_samples",
  "set_cold_warmup_runs", "set_cold_max_warmup_walltime", "set_is_cpu_only"}
local missing = {}
for _, m in ipairs(BENCHMARK_METHODS) do if type(harness.Benchmark[m]) ~= "function" then missing[#missing + 1] = m end end
t.is(table.concat(missing, ", "), "", "Benchmark: every method of cuda-bench 0.3.0's .pyi")
local STATE_METHODS = {"has_device", "has_printers", "get_device", "get_stream", "set_stream", "get_int64",
  "get_int64_or_default", "get_float64", "get_float64_or_default", "get_string", "get_string_or_default",
  "add_element_count", "set_element_count", "get_element_count", "skip", "is_skipped", "get_skip_reason",
  "add_global_memory_reads", "add_global_memory_writes", "get_benchmark", "get_throttle_threshold",
  "set_throttle_threshold", "get_min_samples", "set_min_samples", "get_cold_warmup_runs", "set_cold_warmup_runs",
  "get_cold_max_warmup_walltime", "set_cold_max_warmup_walltime", "get_disable_blocking_kernel",
  "set_disable_blocking_kernel", "get_run_once", "set_run_once", "get_timeout", "set_timeout",
  "get_batch_target_time", "set_batch_target_time", "get_blocking_kernel_timeout", "set_blocking_kernel_timeout",
  "exec", "get_short_description", "add_summary", "get_axis_values", "get_axis_values_as_string",
  "get_stopping_criterion"}
missing = {}
for _, m in ipairs(STATE_METHODS) do if type(harness.State[m]) ~= "function" then missing[#missing + 1] = m end end
t.is(table.concat(missing, ", "), "", "State: every method of cuda-bench 0.3.0's .pyi")

-- settings: range-checked where given, naming the setting; NVBench's meanings
local s = bench.register(copy_kernel)
for _, case in ipairs{{"set_timeout", -1}, {"set_timeout", 0 / 0}, {"set_batch_target_time", 0},
                      {"set_batch_target_time", math.huge}, {"set_throttle_threshold", 1.5},
                      {"set_throttle_threshold", -0.1}, {"set_throttle_recovery_delay", math.huge},
                      {"set_min_samples", -1}, {"set_min_samples", 1.5}, {"set_skip_time", 0 / 0},
                      {"set_cold_max_warmup_walltime", "1"}, {"set_blocking_kernel_timeout", 0 / 0},
                      {"set_cold_warmup_runs", 0.5}, {"set_run_once", 1}} do
  t.raises(function() s[case[1]](s, case[2]) end, "bad argument #1 to '" .. case[1] .. "'",
    ("%s(%s) is refused, naming the setting"):format(case[1], tostring(case[2])))
end
s:set_timeout(math.huge):set_min_samples(0):set_cold_warmup_runs(0):set_blocking_kernel_timeout(-1)
  :set_skip_time(math.huge):set_cold_max_warmup_walltime(-1):set_throttle_threshold(0)
local st = harness.new_state(s, {}, {}, {}, nil)
t.ok(st:get_timeout() == math.huge and st:get_min_samples() == 0, "Benchmark: timeout inf and min_samples 0 are taken")
t.is(st:get_cold_warmup_runs(), 1, "Benchmark: cold_warmup_runs 0 is clamped to 1, as NVBench's")
t.is(st:get_blocking_kernel_timeout(), -1.0, "Benchmark: a negative blocking-kernel timeout (none) is kept as given")
s:set_criterion_param_float64("max-noise", 0.1)
s:set_stopping_criterion("stdrel")
t.is(next(s.criterion_params), nil, "set_stopping_criterion starts the parameters again from the defaults, as NVBench's")
s:set_stopping_criterion("sample-count"):set_criterion_param_int64("target-samples", 4)
t.is(s:get_name(), "copy_kernel", "sample-count and target-samples: NVBench's names")
t.is(harness.criterion_params("sample-count", s.criterion_params)[
  harness.criterion_name("sample-count") == "sample-count" and "target-samples" or "sample-count"], 4,
  "target-samples reaches the criterion under its name there")
t.raises(function() s:set_criterion_param_string("max-noise", "x") end, "is a float64 parameter",
  "set_criterion_param_string on a float parameter is refused")
t.raises(function() s:set_criterion_param_float64("target-samples", 1.5) end, "is a int64 parameter",
  "set_criterion_param_float64 on an int parameter is refused")
t.is(s:set_criterion_param_string("flavour", "mild").criterion_params.flavour, "mild",
  "set_criterion_param_string (no built-in criterion reads one)")

-- --- the State API -------------------------------------------------------------------------------
local ab = bench.register(copy_kernel):set_name("ab"):add_int64_axis("N", {4, 5}):add_int64_power_of_two_axis("P", {3})
  :add_float64_axis("F", {0.25}):add_string_axis("S", {"x"}):set_min_samples(7)
local runner = {log = function() end, timeout = 3}
st = harness.new_state(ab, ab.axes, {N = 2, P = 1, F = 1, S = 1}, runner, dev0)
t.is(st:get_int64("N"), 5, "get_int64")
t.is(st:get_int64("P"), 8, "get_int64 of a pow2 axis: 2^e")
t.is(st:get_int64_or_default("S", 9), 9, "get_int64_or_default: an axis of another type gives the default (NVBench: any failure)")
t.is(st:get_float64_or_default("Nope", 1.5), 1.5, "get_float64_or_default: a missing axis gives the default")
t.is(st:get_string_or_default("N", "d"), "d", "get_string_or_default: another type gives the default")
t.raises(function() st:get_int64_or_default("N", "x") end, "bad argument #2 to 'get_int64_or_default'",
  "get_int64_or_default: a default of the wrong type is refused")
t.raises(function() st:get_float64("N") end, "the axis is a int64 axis", "get_float64 of an int axis")
local values = st:get_axis_values()
values.N = 99
t.ok(st:get_int64("N") == 5 and st:get_axis_values().N == 5 and values.F == 0.25, "get_axis_values: a copy")
t.is(st:get_axis_values_as_string(), "Device=0 N=5 P=2^3 F=0.25 S=x", "get_axis_values_as_string")
t.is(st:get_axis_values_as_string(true), "\27[3mDevice\27[0m=\27[1m0\27[0m \27[3mN\27[0m=\27[1m5\27[0m "
  .. "\27[3mP\27[0m=\27[1m2^3\27[0m \27[3mF\27[0m=\27[1m0.25\27[0m \27[3mS\27[0m=\27[1mx\27[0m",
  "get_axis_values_as_string(true): NVBench's italic names and bold values")
t.is(st:get_short_description(), "ab [Device=0 N=5 P=2^3 F=0.25 S=x]", "get_short_description")
t.is(st:get_benchmark(), ab, "get_benchmark")
t.ok(st:has_printers(), "has_printers")
t.ok(st:get_device() == 0 and math.type(st:get_device()) == "integer" and st.device == dev0,
  "get_device: the device id (NVBench's int); state.device the cuda.Device")
t.ok(st:get_min_samples() == 7 and st:get_timeout() == 3, "getters: the benchmark's value, the run's override")
t.ok(not st:is_skipped() and st:get_skip_reason() == "", "not skipped: get_skip_reason is \"\"")
st:skip("")
t.ok(not st:is_skipped(), "skip(\"\") is no reason: not skipped, as NVBench's")
st:skip("later")
t.ok(st:is_skipped() and st:get_skip_reason() == "later", "skip(reason)")
for _, pair in ipairs{{"min_samples", 3}, {"timeout", 2.5}, {"throttle_threshold", 0.5}, {"run_once", true},
                      {"disable_blocking_kernel", true}, {"blocking_kernel_timeout", -1.0}, {"cold_warmup_runs", 4},
                      {"cold_max_warmup_walltime", 1.5}, {"batch_target_time", 0.25}} do
  st["set_" .. pair[1]](st, pair[2])
  t.is(st["get_" .. pair[1]](st), pair[2], "state: set_" .. pair[1] .. " and get_" .. pair[1])
end
t.raises(function() st:set_batch_target_time(-1) end, "bad argument #1 to 'set_batch_target_time'", "state setters are checked too")

-- the summary columns, as NVBench's tags, names, hints and descriptions
st = harness.new_state(ab, ab.axes, {N = 1, P = 1, F = 1, S = 1}, runner, dev0)
local n = math.random(1, 1 << 40)
st:add_element_count(n, "Items")
st:add_element_count(3)
st:add_global_memory_reads(2 * n, "In")
st:add_global_memory_writes(n + 1, "Out")
st:add_summary("Type", "float")
st:add_summary("Ratio", 0.5)
st:add_summary("Count", 3)
local by = {}
for _, rec in ipairs(st.user_summaries) do by[rec.tag] = rec end
t.is(st:get_element_count(), n + 3, "add_element_count adds to the element count")
t.ok(by["nv/element_count/Items"] and by["nv/element_count/Items"].name == "Items"
  and by["nv/element_count/Items"].description == "Number of elements: Items" and by["nv/element_count/Items"].value == n
  and by["nv/element_count/Items"].type == "int64" and by["nv/element_count/Items"].hint == nil,
  "add_element_count(n, name): nv/element_count/NAME, \"Number of elements: NAME\"")
t.ok(by["nv/gmem/reads/In"] and by["nv/gmem/reads/In"].hint == "bytes" and by["nv/gmem/reads/In"].value == 2 * n
  and by["nv/gmem/reads/In"].name == "In", "add_global_memory_reads(n, name): nv/gmem/reads/NAME, hint bytes")
t.ok(by["nv/gmem/writes/Out"] and by["nv/gmem/writes/Out"].hint == "bytes" and by["nv/gmem/writes/Out"].value == n + 1,
  "add_global_memory_writes(n, name): nv/gmem/writes/NAME")
t.ok(by["nv/python/Type"] and by["nv/python/Type"].description == "User tag: Type" and by["nv/python/Type"].type == "string"
  and by["nv/python/Ratio"].type == "float64" and by["nv/python/Count"].type == "int64",
  "add_summary: nv/python/NAME, \"User tag: NAME\", int64, float64 or string")
t.is(#st.user_summaries, 6, "a count without a column name records no summary")
t.ok(st.user_summaries[1].before_exec and st.user_summaries[1].execs_before == 0, "summaries before exec say so")
for _, call in ipairs{{"add_element_count", {1, 5}}, {"add_global_memory_reads", {1, {}}},
                      {"add_global_memory_writes", {1, true}}} do
  t.raises(function() st[call[1]](st, table.unpack(call[2])) end, "bad argument #2 to '" .. call[1]
    .. "' %(a column name %(string%) or nil expected", call[1] .. ": a column name that is not a string")
end
t.raises(function() st:add_summary("X", true) end, "bad argument #2 to 'add_summary'", "add_summary: a boolean value")

-- --- cpu-only states are bound to no device --------------------------------------------------
local cpu_seen = {}
local cpu = quick(bench.register(function(state)
  cpu_seen = {has = state:has_device(), dev = state:get_device(), stream = state.stream, name = state.name,
    kernel = select(2, pcall(state.get_kernel, state, "x", "k")), get = select(2, pcall(state.get_stream, state))}
  state:exec(function() end)
end)):set_name("cpu"):set_is_cpu_only(true):add_int64_axis("N", {1})
local results, failures, log = run_all({cpu}, {devices = {dev0, dev1}})
t.is(failures, 0, "cpu-only: runs" .. log)
t.ok(cpu_seen.has == false and cpu_seen.dev == nil and cpu_seen.stream == nil, "cpu-only: has_device() false, get_device() nil, no stream")
t.is(cpu_seen.name, "N=1", "cpu-only: no Device= in the name")
t.like(tostring(cpu_seen.kernel), "a cpu%-only state has no device to compile", "cpu-only: get_kernel says why")
t.like(tostring(cpu_seen.get), "a cpu%-only state has no device, so no stream", "cpu-only: get_stream says why")
t.ok(#results[1].states == 1 and results[1].states[1].device == nil and #results[1].devices == 0,
  "cpu-only: one state per state, not per device")
t.like(log, "Run:  %[1/1%] cpu %[N=1%]", "cpu-only: the Run line has no device")

-- --- set_stream: the measurement times the caller's stream -------------------------------------
local timed = {}
local cold = measure.cold
measure.cold = function(fn, cfg) timed[#timed + 1] = cfg.stream; return cold(fn, cfg) end
local mine = dev0:create_stream()
local launched, own_made
local with_stream = quick(bench.register(function(state)
  state:set_stream(mine)
  own_made = rawget(state, "stream_own")
  state:exec(function(launch) launched = launch.stream end, {batched = false})
  t.is(state:get_stream(), mine, "set_stream: get_stream returns it")
end)):set_name("with_stream")
results, failures, log = run_all({with_stream})
t.is(failures, 0, "set_stream: runs" .. log)
t.ok(timed[1] == mine and launched == mine, "set_stream: exec times and launches on the stream given")
t.is(own_made, nil, "set_stream: the state makes no stream of its own")
measure.cold = cold
t.ok(pcall(function() return mine.device end), "set_stream: the caller's stream stays open after the state")

local closed = dev0:create_stream()
closed:close()
local foreign = dev1:create_stream()
local later = dev0:create_stream()
local cases = {
  {"closed", function(state) state:set_stream(closed) end, "the cuda%.Stream is closed"},
  {"foreign", function(state) state:set_stream(foreign) end, "the stream is on device 1; this state runs on device 0"},
  {"table", function(state) state:set_stream({__cuda_stream__ = function() return 0, 0 end}) end,
   "a cuda%.Stream expected, got table %(cudalua has no __cuda_stream__ protocol%)"},
  {"inside", function(state) state:exec(function() state:set_stream(later) end) end, "call it before state:exec"},
  {"closed later", function(state) state:set_stream(later); later:close(); state:exec(function() end) end,
   "the stream given to state:set_stream: the cuda%.Stream is closed"},
}
local list = {}
for _, case in ipairs(cases) do list[#list + 1] = quick(bench.register(case[2])):set_name(case[1]) end
list[#list + 1] = quick(bench.register(function(state) state:exec(function() end) end)):set_name("after")
results, failures, log = run_all(list)
t.is(failures, #cases, "set_stream: each bad stream fails its state")
for i, case in ipairs(cases) do
  t.like(results[i].states[1].skip_reason or "", "^Unexpected error: .*" .. case[3], "set_stream: " .. case[1])
end
local after = results[#results].states[1]
t.ok(not after.is_skipped and tags_of(after)["nv/cold/sample_size"], "set_stream: the other states keep their results")

-- --- the state's own stream: one per state, closed after it ----------------------------------
local streams = {}
local per_state = quick(bench.register(function(state)
  streams[#streams + 1] = state:get_stream()
  t.is(state.stream, streams[#streams], "own stream: state.stream is get_stream()")
  state:exec(function(launch) t.is(launch.stream, streams[#streams], "own stream: launch.stream") end, {batched = false})
end)):set_name("per_state"):add_int64_axis("N", {1, 2})
run_all({per_state})
t.ok(#streams >= 2 and streams[1] ~= streams[#streams], "own stream: each state makes its own (NVBench's)")
t.ok(not pcall(function() return streams[1].device end), "own stream: closed after its state")

-- --- the run loop -----------------------------------------------------------------------------
local raising = setmetatable({}, {__tostring = function() error("tostring raised") end})
local execs = 0
local loop = {
  quick(bench.register(function() error("boom") end)):set_name("boom"),
  quick(bench.register(function() error(raising) end)):set_name("bad_tostring"),
  quick(bench.register(function() error(setmetatable({}, {__tostring = function() return {} end})) end)):set_name("not_string"),
  quick(bench.register(function(state) state:add_summary("Before", 1) end)):set_name("no_exec"),
  quick(bench.register(function(state)
    state:exec(function() execs = execs + 1 end, {batched = false})
    state:add_summary("Between", 2)
    state:exec(function() execs = execs + 1 end, {batched = false})
  end)):set_name("two_execs"),
  quick(bench.register(function(state) state:skip("first"); error("then raised") end)):set_name("skip_raise"),
  quick(bench.register(function(state) state:add_summary("Kept", 1); error("after a summary") end)):set_name("kept"),
  quick(bench.register(function(state) state:exec(function() end) end)):set_name("last"),
}
results, failures, log = run_all(loop)
t.is(failures, 4, "run loop: four states raised" .. log)
t.like(log, "Fail: Unexpected error: [^\n]*boom\n", "run loop: NVBench's Fail: Unexpected error: <what>")
t.like(results[1].states[1].skip_reason, "^Unexpected error: .*boom$", "run loop: the skip reason says Unexpected error")
t.like(log, "Fail: Unexpected error: %(error object is a table value%)", "run loop: an error whose __tostring raises")
t.is(results[3].states[1].skip_reason, "Unexpected error: (error object is a table value)",
  "run loop: an error whose __tostring returns no string")
local no_exec = results[4].states[1]
t.ok(not no_exec.is_skipped and tags_of(no_exec)["nv/python/Before"] and not tags_of(no_exec)["nv/cold/sample_size"],
  "run loop: a function that returns without exec passes with no measurement (NVBench's)")
local two = results[5].states[1]
t.is(#two.state.measurements, 2, "run loop: exec twice measures twice (NVBench's)")
t.ok(execs >= 2 * (3 + 1), "run loop: both execs ran the function (" .. execs .. " calls)")
t.is(select(2, log:gsub("Pass: Cold:", "")), 1 + 2, "run loop: a Pass line per exec (last once, two_execs twice)")
local between
for _, rec in ipairs(two.state.user_summaries) do if rec.name == "Between" then between = rec end end
t.ok(between and between.before_exec == false and between.execs_before == 1, "run loop: a summary between the execs says so")
t.ok(results[6].states[1].skip_reason == "first" and log:find("Skip: first\n", 1, true),
  "run loop: a state skipped before it raised is reported as skipped (NVBench's)")
t.ok(tags_of(results[7].states[1])["nv/python/Kept"], "run loop: a failed state keeps its summaries (NVBench's)")
t.ok(tags_of(results[8].states[1])["nv/cold/sample_size"], "run loop: the last benchmark still ran")

-- M.summaries that raises: the state fails, the others run
local summaries = run.summaries
run.summaries = function(state) if state.bench.name == "sum_fails" then error("no summary") end return summaries(state) end
results, failures = run_all({quick(bench.register(function(state) state:exec(function() end) end)):set_name("sum_fails"),
  quick(bench.register(function(state) state:exec(function() end) end)):set_name("sum_ok")})
run.summaries = summaries
t.ok(failures == 1 and results[1].states[1].skip_reason:find("no summary", 1, true) and not results[2].states[1].is_skipped,
  "run loop: a state whose summaries raise fails alone")

-- Ctrl-C ("interrupted!") stops the runner loop, as NVBench's KeyboardInterrupt
local ran_after = 0
results, failures, log = run_all({
  quick(bench.register(function() error("interrupted!") end)):set_name("ctrl_c"),
  quick(bench.register(function() ran_after = ran_after + 1 end)):set_name("rest"):add_int64_axis("N", {1, 2})})
t.ok(ran_after == 0 and failures == 1, "Ctrl-C: the states after it do not run")
t.is(results[2].states[2].skip_reason, "Skipped because a previous state requested the runner loop to stop.",
  "Ctrl-C: NVBench's reason for the states after it")
t.like(log, "Run:  %[3/3%] rest %[Device=0 N=2%]\nSkip: Skipped because", "Ctrl-C: each is still listed, then skipped")

-- registering while the benchmarks run raises
results = run_all({quick(bench.register(function() bench.register(function() end) end)):set_name("registers")})
t.like(results[1].states[1].skip_reason, "cannot register a benchmark after the benchmarks ran",
  "register: not while the benchmarks run (NVBench: after the run)")
t.ok(pcall(bench.register, function() end), "register: again after the run")

-- exec{sync = true}: no blocking kernel and no throttle watch, kept by the state as NVBench's
local synced = {}
results = run_all({quick(bench.register(function(state)
  state:exec(function() end, {sync = true})
  synced = {state:get_disable_blocking_kernel(), state:get_throttle_threshold()}
end)):set_name("synced")})
t.ok(synced[1] == true and synced[2] == 0, "exec{sync = true}: the state's blocking kernel and throttle watch are off after")

-- --- bench.run_all_benchmarks and the default devices ----------------------------------------
local cudalua, env = t.cudalua(), fake.env("FAKECUDA_DEVICES=2 CUDALUA_BENCH_L2_BYTES=4096")
local code, out = t.run(cudalua .. [[ -e "local h = require 'cuda.bench.harness'; ]]
  .. [[local st = h.new_state(h.register(function() end), {}, {}, {}, nil); print(pcall(st.set_stream, st, 5))"]])
t.like(out, "a cuda%.Stream expected, got 5", "set_stream: a number is no stream, before cuda is loaded too")
local dir = t.tmpdir()
t.write_file(dir .. "/direct.lua", [[
local bench = require "cuda.bench"
local function gpu(state) state:exec(function() end) end
local function host(state) state:exec(function() end) end
bench.register(gpu):set_stopping_criterion("sample_count", {["sample-count"] = 3})
bench.register(host):set_is_cpu_only(true):set_stopping_criterion("sample_count", {["sample-count"] = 3})
bench.run_all_benchmarks(arg)
local ok, why = pcall(bench.run_all_benchmarks, arg)
io.stderr:write("second: ", tostring(ok), " ", tostring(why), "\n")
]])
local err
code, out, err = t.run(("cd '%s' && %s %s direct.lua --timeout 1"):format(dir, env, cudalua))
t.is(code, 0, "run_all_benchmarks: a file run directly runs its benchmarks" .. err)
t.ok(out:find("## gpu", 1, true) and out:find("## host", 1, true), "run_all_benchmarks: both tables, named after the functions")
t.ok(out:find("### [0]", 1, true) and out:find("### [1]", 1, true), "devices: GPU benchmarks run on all devices by default (NVBench's)")
t.like(err, "second: false [^\n]*already executed", "run_all_benchmarks: a second call raises")
code, out, err = t.run(("cd '%s' && %s %s bench direct.lua --timeout 1 -d 0"):format(dir, env, cudalua))
t.is(code, 0, "run_all_benchmarks: under cudalua bench" .. err)
t.is(select(2, out:gsub("Run:  ", "")), 2, "run_all_benchmarks: does nothing under cudalua bench (each state runs once)")
t.ok(not out:find("### [1]", 1, true), "devices: -d 0 chooses one")
t.raises(function() bench.run_all_benchmarks(5) end, "bad argument #1 to 'run_all_benchmarks'", "run_all_benchmarks: argv a number")
t.raises(function() return bench.axis.int64 end, "chain the setter on what bench.register returns: bench.register%(fn%):add_int64_axis",
  "bench.axis: the decorator form names the chained setter")
t.raises(function() return bench.option.min_samples end, ":set_min_samples", "bench.option: names the setter")

os.execute("rm -rf '" .. dir .. "'")
t.done()
