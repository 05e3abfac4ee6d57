-- nvbench_examples_model.lua: the JSON that cuda-bench 0.3.0 writes for NVBench's ten Python
-- examples, as far as it can be known without running them, for t/nvbench_examples.t.
-- SPDX-License-Identifier: MIT
--
-- M.document(name) returns an NVBench JSON document (as cuda.json decodes one)
-- for the example NAME (the base name of bench/nvbench_examples/NAME.lua):
-- its benchmarks, axes, states, skips and summaries, with no measured values.
-- Where the model could not establish NVBench's behaviour it says so in
-- the document itself: a summary with `_optional = true` may be absent, a
-- state's `_optional_keys` may be missing, a skip's `_reason_pattern`
-- replaces its exact reason. Each fact says where it comes from:
--   [run]    bench/recorded/nvbench-h200-2026-12-04/nvbench.json, cuda-bench
--            0.3.0 itself on an H200 (the cold, batch and state layout);
--   [source] NVBench's sources at python-0.3.0 (state.cxx, py_nvbench.cpp,
--            state_exec.cuh, runner.cuh, float64_axis.cxx) and the wheel's
--            headers and library strings;
--   [guess]  read from the library's strings without the order: the
--            cpu-only summaries are assumed to follow the cold ones' order.
-- Once cuda-bench's own output of the examples is recorded (bench/recorded/
-- nvbench-examples/NAME.json) the test compares with that instead, and
-- the GPU comparison reports where this model was wrong.
local M = {}

local HIDDEN = "Hidden by default."

-- [run] The cold and batch summaries, in order: {tag, name, hint, hide, description}.
local COLD = {
  {"nv/cold/sample_size", "Samples", "sample_size", nil, "Number of isolated kernel executions"},
  {"nv/cold/walltime", "Walltime", "duration", HIDDEN, "Walltime used for isolated measurements"},
  {"nv/cold/time/cpu/min", "Min CPU Time", "duration", HIDDEN, "Fastest isolated kernel execution time (measured on host CPU)"},
  {"nv/cold/time/cpu/max", "Max CPU Time", "duration", HIDDEN, "Slowest isolated kernel execution time (measured on host CPU)"},
  {"nv/cold/time/cpu/mean", "CPU Time", "duration", nil, "Mean isolated kernel execution time (measured on host CPU)"},
  {"nv/cold/time/cpu/stdev/absolute", "Noise", "duration", HIDDEN, "Standard deviation of isolated kernel execution CPU times"},
  {"nv/cold/time/cpu/stdev/relative", "Noise", "percentage", nil, "Relative standard deviation of isolated kernel execution CPU times"},
  {"nv/cold/time/cpu/q1", "Q1 CPU Time", "duration", HIDDEN, "First quartile of isolated kernel execution CPU times"},
  {"nv/cold/time/cpu/median", "Median CPU Time", "duration", HIDDEN, "Median of isolated kernel execution CPU times"},
  {"nv/cold/time/cpu/q3", "Q3 CPU Time", "duration", HIDDEN, "Third quartile of isolated kernel execution CPU times"},
  {"nv/cold/time/cpu/iqr/absolute", "IQR", "duration", HIDDEN, "Interquartile range of isolated kernel execution CPU times"},
  {"nv/cold/time/cpu/iqr/relative", "Rel IQR", "percentage", HIDDEN, "Relative interquartile range of isolated kernel execution CPU times"},
  {"nv/cold/time/gpu/min", "Min GPU Time", "duration", HIDDEN, "Fastest isolated kernel execution time (measured with CUDA events)"},
  {"nv/cold/time/gpu/max", "Max GPU Time", "duration", HIDDEN, "Slowest isolated kernel execution time (measured with CUDA events)"},
  {"nv/cold/time/gpu/mean", "GPU Time", "duration", nil, "Mean isolated kernel execution time (measured with CUDA events)"},
  {"nv/cold/time/gpu/stdev/absolute", "Noise", "duration", HIDDEN, "Standard deviation of isolated kernel execution GPU times"},
  {"nv/cold/time/gpu/stdev/relative", "Noise", "percentage", nil, "Relative standard deviation of isolated kernel execution GPU times"},
  {"nv/cold/time/gpu/q1", "Q1 GPU Time", "duration", HIDDEN, "First quartile of isolated kernel execution GPU times"},
  {"nv/cold/time/gpu/median", "Median GPU Time", "duration", HIDDEN, "Median of isolated kernel execution GPU times"},
  {"nv/cold/time/gpu/q3", "Q3 GPU Time", "duration", HIDDEN, "Third quartile of isolated kernel execution GPU times"},
  {"nv/cold/time/gpu/iqr/absolute", "IQR", "duration", HIDDEN, "Interquartile range of isolated kernel execution GPU times"},
  {"nv/cold/time/gpu/iqr/relative", "Rel IQR", "percentage", HIDDEN, "Relative interquartile range of isolated kernel execution GPU times"},
  {"nv/cold/bw/item_rate", "Elem/s", "item_rate", nil, "Number of input elements processed per second", when = "elements"},
  {"nv/cold/bw/global/bytes_per_second", "GlobalMem BW", "byte_rate", nil,
    "Number of bytes read/written per second to the CUDA device's global memory", when = "bytes"},
  {"nv/cold/bw/global/utilization", "BWUtil", "percentage", nil,
    "Global device memory utilization as a percentage of the device's peak bandwidth", when = "bytes"},
  -- [source] only where the SM clock was sampled; exec(sync=True) sets the throttle threshold to 0,
  -- and whether the clock is then still sampled is not established.
  {"nv/cold/sm_clock_rate/mean", "Clock Rate", "frequency", HIDDEN, "Mean SM clock rate", when = "clock"},
  {"nv/cold/sm_clock_rate/scaling/percent", "Clock Scaling", "percentage", HIDDEN,
    "Mean SM clock rate as a percentage of default clock rate.", when = "clock"},
}
local BATCH = {
  {"nv/batch/sample_size", "Samples", "sample_size", nil, "Number of batch kernel executions"},
  {"nv/batch/time/gpu/mean", "Batch GPU", "duration", nil, "Mean batch kernel execution time (measured by CUDA events)"},
  {"nv/batch/walltime", "Walltime", "duration", HIDDEN, "Walltime used for batch measurements"},
}
-- [source] the descriptions; [guess] the order.
local CPU_ONLY = {
  {"nv/cpu_only/sample_size", "Samples", "sample_size", nil, "Number of isolated kernel executions"},
  {"nv/cpu_only/walltime", "Walltime", "duration", HIDDEN, "Walltime used for isolated measurements"},
  {"nv/cpu_only/time/cpu/min", "Min CPU Time", "duration", HIDDEN, "Fastest CPU time of isolated kernel executions"},
  {"nv/cpu_only/time/cpu/max", "Max CPU Time", "duration", HIDDEN, "Slowest CPU time of isolated kernel executions"},
  {"nv/cpu_only/time/cpu/mean", "CPU Time", "duration", nil, "Mean CPU time of isolated kernel executions"},
  {"nv/cpu_only/time/cpu/stdev/absolute", "Noise", "duration", HIDDEN, "Standard deviation of isolated CPU times"},
  {"nv/cpu_only/time/cpu/stdev/relative", "Noise", "percentage", nil, "Relative standard deviation of isolated CPU times"},
  {"nv/cpu_only/time/cpu/q1", "Q1 CPU Time", "duration", HIDDEN, "First quartile of CPU times of isolated kernel executions"},
  {"nv/cpu_only/time/cpu/median", "Median CPU Time", "duration", HIDDEN, "Median of CPU times of isolated kernel executions"},
  {"nv/cpu_only/time/cpu/q3", "Q3 CPU Time", "duration", HIDDEN, "Third quartile of CPU times of isolated kernel executions"},
  {"nv/cpu_only/time/cpu/iqr/absolute", "IQR", "duration", HIDDEN, "Interquartile range of CPU times of isolated kernel executions"},
  {"nv/cpu_only/time/cpu/iqr/relative", "Rel IQR", "percentage", HIDDEN,
    "Relative interquartile range of CPU times of isolated kernel executions"},
}

local function measured(entry, type_)
  return {tag = entry[1], name = entry[2], hint = entry[3], hide = entry[4], description = entry[5],
    data = {{name = "value", type = type_ or (entry[3] == "sample_size" and "int64" or "float64")}}}
end

-- [source] The summaries a state adds before exec (state.cxx, py_nvbench.cpp), with their values.
local function element_count(column, n)
  return {tag = "nv/element_count/" .. column, name = column, description = "Number of elements: " .. column,
    data = {{name = "value", type = "int64", value = ("%d"):format(n)}}}
end
local function gmem(kind, column, n)
  return {tag = ("nv/gmem/%s/%s"):format(kind, column), name = column, hint = "bytes",
    data = {{name = "value", type = "int64", value = ("%d"):format(n)}}}
end
local function python_summary(column, value)
  return {tag = "nv/python/" .. column, name = column, description = "User tag: " .. column,
    data = {{name = "value", type = math.type(value) == "integer" and "int64" or type(value) == "number" and "float64"
      or "string", value = math.type(value) == "integer" and ("%d"):format(value) or tostring(value)}}}
end

-- The summaries of an outcome: before (the state's own), then the measurement's.
-- outcome: {measure = "cold+batch" | "cold" | "cpu_only", elements, bytes, sync, before = {...}}
local function summaries(outcome)
  local list = {}
  for _, s in ipairs(outcome.before or {}) do list[#list + 1] = s end
  if outcome.measure == "cpu_only" then
    for _, e in ipairs(CPU_ONLY) do list[#list + 1] = measured(e) end
    return list
  end
  for _, e in ipairs(COLD) do
    local keep = e.when == nil or (e.when == "elements" and (outcome.elements or 0) > 0)
      or (e.when == "bytes" and (outcome.bytes or 0) > 0) or e.when == "clock"
    if keep then
      local s = measured(e)
      s._optional = e.when == "clock" and outcome.sync or nil
      list[#list + 1] = s
    end
  end
  if outcome.measure == "cold+batch" then
    for _, e in ipairs(BATCH) do list[#list + 1] = measured(e) end
  end
  return list
end

-- --- axes and states ------------------------------------------------------------------

local function int64(name, values, pow2)
  return {name = name, type = "int64", flags = pow2 and "pow2" or "", values = values}
end
local function float64(name, values) return {name = name, type = "float64", flags = "", values = values} end
local function string_axis(name, values) return {name = name, type = "string", flags = "", values = values} end

-- [source] How NVBench writes an axis value: input_string, description, value.
local function axis_json(axis)
  local values = {}
  for i, v in ipairs(axis.values) do
    local input, value, description = tostring(v), v, ""
    if axis.flags == "pow2" then value, description = 1 << v, ("2^%d = %d"):format(v, 1 << v)
    elseif axis.type == "float64" then input = ("%.5g"):format(v) end
    values[i] = {input_string = input, description = description, value = value}
  end
  return {name = axis.name, type = axis.type, flags = axis.flags, values = values}
end

local function value_string(axis, v)
  if axis.flags == "pow2" then return ("%d"):format(1 << v) end
  if axis.type == "int64" then return ("%d"):format(v) end
  if axis.type == "float64" then return ("%.17g"):format(v) end
  return v
end

-- [source] A state's name: "Device=0 A=1 B=2^4 C=0.001" (floats {:.5g}); no Device for cpu-only.
local function state_name(axes, point, device)
  local words = {device and ("Device=%d"):format(device) or nil}
  for i, axis in ipairs(axes) do
    local v = point[i]
    words[#words + 1] = axis.name .. "=" .. (axis.flags == "pow2" and ("2^%d"):format(v)
      or axis.type == "float64" and ("%.5g"):format(v) or tostring(v))
  end
  return table.concat(words, " ")
end

-- The axis points in NVBench's order: the first axis varies fastest.
local function points(axes)
  local list, idx = {}, {}
  for i = 1, #axes do idx[i] = 1 end
  repeat
    local p = {}
    for i, axis in ipairs(axes) do p[i] = axis.values[idx[i]] end
    list[#list + 1] = p
    local i = 1
    while i <= #axes do
      idx[i] = idx[i] + 1
      if idx[i] <= #axes[i].values then break end
      idx[i] = 1
      i = i + 1
    end
  until i > #axes
  return list
end

-- [run] The fields of a state and a benchmark.
local function state_json(bench, axes, point, outcome)
  local device = not bench.cpu_only and 0 or nil
  local avs = {}
  for i, axis in ipairs(axes) do avs[i] = {name = axis.name, type = axis.type, value = value_string(axis, point[i])} end
  local st = {name = state_name(axes, point, device), min_samples = outcome.min_samples or 10, cold_warmup_runs = 1,
    cold_max_warmup_walltime = -1.0, batch_target_time = 0.5, skip_time = -1.0, timeout = 15.0,
    device = device, type_config_index = 0, axis_values = avs, is_skipped = false}
  -- [source] json_printer writes get_device()->get_id() even for a cpu-only state: not established
  if bench.cpu_only then st._optional_keys = {device = true} end
  if outcome.skip or outcome.error then
    st.is_skipped = true
    st.skip_reason = outcome.skip
    -- [source] the runner's "Unexpected error: <what>"; Python's text of <what> is not established
    st._reason_pattern = outcome.error and ("^Unexpected error: .*" .. outcome.error) or nil
    -- [source] summaries added before the failure stay; [guess] that the error keeps them
    st.summaries = {}
    for _, s in ipairs(outcome.before or {}) do
      s._optional = outcome.error and true or nil
      st.summaries[#st.summaries + 1] = s
    end
  else
    st.summaries = summaries(outcome)
  end
  return st
end

local function benchmark_json(index, bench)
  local axes = {}
  for i, axis in ipairs(bench.axes) do axes[i] = axis_json(axis) end
  local states = {}
  for _, point in ipairs(points(bench.axes)) do
    states[#states + 1] = state_json(bench, bench.axes, point, bench.state(table.unpack(point)))
  end
  return {name = bench.name, index = index, min_samples = 10, cold_warmup_runs = 1, cold_max_warmup_walltime = -1.0,
    batch_target_time = 0.5, skip_time = -1.0, timeout = 15.0, devices = bench.cpu_only and {} or {0},
    axes = axes, states = states, _optional_keys = bench.cpu_only and {devices = true} or nil}
end

-- --- the examples -----------------------------------------------------------------------
-- Each benchmark: its name (the function's __name__), axes, and state(axis values...) -> outcome,
-- worked out from the original's code.

local MiB = 1024 * 1024

-- throughput.py and study/without_blocking_krn.py: 128 MiB of int32 read, as many bytes written.
local function throughput(sync)
  local elements = 128 * MiB // 4
  return {name = "throughput_bench", axes = {int64("Stride", {1, 2, 4}), int64("ItemsPerThread", {1, 2, 3, 4})},
    state = function()
      return {measure = sync and "cold" or "cold+batch", sync = sync, elements = elements, bytes = 2 * elements * 4,
        before = {element_count("Elements", elements), gmem("reads", "Datasize", elements * 4)}}
    end}
end

local function sleep_state() return {measure = "cold+batch"} end

-- axes.py's copies: 256 MiB read and written, in values of `size` bytes.
local function copy_state(size)
  return {measure = "cold+batch", elements = 256 * MiB // size, bytes = 2 * 256 * MiB}
end
local COPY_TYPES = {[0] = {1, "cuda::std::uint8_t"}, {2, "cuda::std::uint16_t"}, {4, "cuda::std::uint32_t"},
  {8, "cuda::std::uint64_t"}, {4, "float"}, {8, "double"}}

local EXAMPLES = {
  throughput = {throughput(false)},
  without_blocking_krn = {throughput(true)},
  -- [source] cuda-bench 0.3.0's State has no collect_cupti_metrics (not in the .pyi nor the
  -- module's strings): the call raises AttributeError, after add_element_count.
  auto_throughput = {{name = "throughput_bench",
    axes = {int64("Stride", {1, 2, 4}), int64("ItemsPerThread", {1, 2, 3, 4})},
    state = function()
      return {error = "collect_cupti_metrics", before = {element_count("Elements", 128 * MiB // 4)}}
    end}},
  axes = {
    {name = "simple", axes = {}, state = function() return {measure = "cold+batch", min_samples = 1000} end},
    {name = "default_value", axes = {}, state = sleep_state},
    -- the axis is "Duration (s)" while the function reads "Duration": every state sleeps the default
    {name = "single_float64_axis", axes = {float64("Duration (s)", {7e-5, 1e-4, 5e-4})}, state = sleep_state},
    {name = "copy_sweep_grid_shape", axes = {int64("BlockSize", {64, 256}), int64("NumBlocks", {64, 256})},
      state = function() return copy_state(4) end},
    {name = "copy_type_sweep", axes = {int64("TypeID", {0, 1, 2, 3, 4, 5})},
      state = function(type_id)
        local outcome = copy_state(COPY_TYPES[type_id][1])
        outcome.before = {python_summary("Type", COPY_TYPES[type_id][2])}
        return outcome
      end},
  },
  skip = {{name = "runtime_skip",
    axes = {float64("Duration", (function()
      local d = {}
      for k = 0, 4 do d[#d + 1] = 1e-4 + k * 0.25e-3 end
      return d
    end)()), string_axis("Kramble", {"Foo", "Bar", "Baz"})},
    state = function(duration, kramble)
      if kramble == "Baz" and duration < 0.8e-3 then return {skip = "Short 'Baz' benchmarks are skipped"} end
      if kramble == "Foo" and duration > 0.3e-3 then return {skip = "Long 'Foo' benchmarks are skipped"} end
      return {measure = "cold+batch"}
    end}},
  -- batched=False: cold only; cupy.random.randint's int64 values, 8 bytes each, read and written
  stream = {{name = "elementwise_square", axes = {int64("Elements", {22, 24, 26}, true)},
    state = function(e) return {measure = "cold", elements = 1 << e, bytes = 2 * 8 * (1 << e)} end}},
  exec_tag_sync = {{name = "synchronizing_bench", axes = {},
    state = function()
      local n = 64 * MiB
      return {measure = "cold", sync = true, elements = n, bytes = 4 * n,
        before = {element_count("Items", n), gmem("writes", "Size", 4 * n)}}
    end}},
  -- timer=True: batched defaults to False
  exec_tag_timer = {{name = "mod2_inplace", axes = {},
    state = function() return {measure = "cold", elements = 16 * MiB, bytes = 2 * 64 * MiB} end}},
  cpu_only = {{name = "throughput_bench", axes = {}, cpu_only = true,
    state = function() return {measure = "cpu_only"} end}},
  cpu_activity = {
    {name = "cpu_only_sleep_bench", axes = {}, cpu_only = true, state = function() return {measure = "cpu_only"} end},
    {name = "mixed_sleep_bench", axes = {string_axis("Sync", {"Do not sync", "Do sync"})},
      state = function(sync)
        return {measure = sync == "Do sync" and "cold" or "cold+batch", sync = sync == "Do sync"}
      end},
  },
}

-- The examples' names, in the order NVBench's examples folder lists them.
M.NAMES = {"axes", "auto_throughput", "throughput", "without_blocking_krn", "exec_tag_sync", "exec_tag_timer",
  "skip", "stream", "cpu_only", "cpu_activity"}

-- The port's path under bench/nvbench_examples/, and the original's under NVBench's python/examples/.
function M.path(name) return name == "without_blocking_krn" and "study/without_blocking_krn" or name end

function M.document(name)
  local benches = assert(EXAMPLES[name], "no such example: " .. tostring(name))
  local list = {}
  for i, b in ipairs(benches) do list[i] = benchmark_json(i - 1, b) end
  return {meta = {argv = {}, version = {json = {major = 1, minor = 0, patch = 0, string = "1.0.0"},
      nvbench = {major = 0, minor = 1, patch = 0, string = "0.1.0"}}},
    devices = {{id = 0}}, benchmarks = list, _model = true}
end

return M
