-- cuda.bench.run: runs registered benchmarks, logs progress, and makes NVBench's summaries.
-- SPDX-License-Identifier: MIT
--
-- plan(benchmarks, overrides, devices) gives each benchmark (or
-- configuration {bench, overrides, devices}) its axes, states and devices;
-- run(plan, opts) walks every state on every device (cpu-only states on
-- none), calls fn(state) under pcall (a benchmark that raises is reported,
-- as NVBench's "Fail: Unexpected error: ...", and the others still run),
-- and returns the results: a list of
-- {bench, devices, axes, states = {{name, device, axis_values, summaries,
-- is_skipped, skip_reason, samples}}}. Progress lines go to opts.log
-- (stderr), in NVBench's words: "Run:  [3/12] copy [Device=0 T=double]",
-- "Pass: Cold: 0.012345ms GPU, ...".
local axes_mod = require "cuda.bench.axes"
local harness = require "cuda.bench.harness"
local measure = require "cuda.bench.measure"
local throttle = require "cuda.bench.throttle"

local M = {}

local MIN_SAMPLES_FOR_NOISE = 5   -- NVBench: fewer samples give no noise estimate

-- Peak DRAM bandwidth of dev in bytes/s: NVML's figure where cuda.system
-- has one, else NVBench's: 2 (DDR) x memory clock x bus width in bytes.
function M.peak_bandwidth(dev)
  local cuda = require "cuda"
  local system = cuda.system
  if system and system.is_available and system.is_available() then
    local ok, nd = pcall(system.Device, dev.id)
    local bw = ok and nd and nd.peak_memory_bandwidth
    if type(bw) == "number" and bw > 0 then return bw end
  end
  local p = dev.properties
  local khz, width = p.memory_clock_rate_khz or 0, p.memory_bus_width or 0
  return 2 * khz * 1000 * (width // 8)
end

-- --- summaries --------------------------------------------------------------------
--
-- NVBench's summaries, tag by tag as cuda-bench 0.3.0 writes them (names,
-- hints, descriptions, "Hidden by default." and the order), read from its
-- libnvbench (measure_cold.cu, measure_hot.cu, measure_cpu_only.cxx).

local HIDDEN = "Hidden by default."

-- Adds a summary; one without a value is left out (NVBench writes only
-- what it measured).
local function add(list, tag, name, hint, t, value, description, hide)
  if value == nil then return end
  list[#list + 1] = {tag = tag, name = name, hint = hint, type = t, value = value,
    description = description, hide = hide}
end

-- The statistics NVBench reports of samples a[1..n] (n >= 1): min, max,
-- mean, the standard deviation (+inf below 5 samples, as NVBench's
-- standard_deviation), the noise (stdev / mean; +inf when either is
-- unusable), the quartiles (the sorted samples at rank round(p * (n - 1)))
-- and the relative IQR (nil where the median is not positive).
function M.statistics(a, n)
  local sorted, sum = table.move(a, 1, n, 1, {}), 0.0
  for i = 1, n do sum = sum + a[i] end
  table.sort(sorted)
  local mean, stdev = sum / n, math.huge
  if n >= MIN_SAMPLES_FOR_NOISE then
    local sq = 0.0
    for i = 1, n do sq = sq + (a[i] - mean) ^ 2 end
    stdev = math.sqrt(sq / (n - 1))
  end
  local noise = math.huge
  if stdev < math.huge and mean > 0 and mean < math.huge then noise = stdev / mean end
  local function q(p) return sorted[math.floor(p * (n - 1) + 0.5) + 1] end
  local s = {min = sorted[1], max = sorted[n], mean = mean, stdev = stdev, noise = noise,
    q1 = q(0.25), median = q(0.5), q3 = q(0.75)}
  s.iqr = s.q3 - s.q1
  if s.iqr == s.iqr and s.iqr < math.huge and s.median > 0 and s.median < math.huge then s.rel_iqr = s.iqr / s.median end
  return s
end

-- The time summaries of one timer (prefix "nv/cold/time/cpu" ...): what
-- each is called, and how its description reads.
local function time_summaries(list, prefix, s, words)
  local unit, of = words.unit, words.of
  add(list, prefix .. "/min", "Min " .. unit .. " Time", "duration", "float64", s.min, words.min, HIDDEN)
  add(list, prefix .. "/max", "Max " .. unit .. " Time", "duration", "float64", s.max, words.max, HIDDEN)
  add(list, prefix .. "/mean", unit .. " Time", "duration", "float64", s.mean, words.mean)
  add(list, prefix .. "/stdev/absolute", "Noise", "duration", "float64", s.stdev, words.stdev, HIDDEN)
  add(list, prefix .. "/stdev/relative", "Noise", "percentage", "float64", s.noise, words.rel_stdev)
  add(list, prefix .. "/q1", "Q1 " .. unit .. " Time", "duration", "float64", s.q1, "First quartile of " .. of, HIDDEN)
  add(list, prefix .. "/median", "Median " .. unit .. " Time", "duration", "float64", s.median, "Median of " .. of, HIDDEN)
  add(list, prefix .. "/q3", "Q3 " .. unit .. " Time", "duration", "float64", s.q3, "Third quartile of " .. of, HIDDEN)
  add(list, prefix .. "/iqr/absolute", "IQR", "duration", "float64", s.iqr, "Interquartile range of " .. of, HIDDEN)
  if s.rel_iqr then
    add(list, prefix .. "/iqr/relative", "Rel IQR", "percentage", "float64", s.rel_iqr,
      "Relative interquartile range of " .. of, HIDDEN)
  end
end

local COLD_CPU = {unit = "CPU", of = "isolated kernel execution CPU times",
  min = "Fastest isolated kernel execution time (measured on host CPU)",
  max = "Slowest isolated kernel execution time (measured on host CPU)",
  mean = "Mean isolated kernel execution time (measured on host CPU)",
  stdev = "Standard deviation of isolated kernel execution CPU times",
  rel_stdev = "Relative standard deviation of isolated kernel execution CPU times"}
local COLD_GPU = {unit = "GPU", of = "isolated kernel execution GPU times",
  min = "Fastest isolated kernel execution time (measured with CUDA events)",
  max = "Slowest isolated kernel execution time (measured with CUDA events)",
  mean = "Mean isolated kernel execution time (measured with CUDA events)",
  stdev = "Standard deviation of isolated kernel execution GPU times",
  rel_stdev = "Relative standard deviation of isolated kernel execution GPU times"}
local CPU_ONLY = {unit = "CPU", of = "CPU times of isolated kernel executions",
  min = "Fastest CPU time of isolated kernel executions",
  max = "Slowest CPU time of isolated kernel executions",
  mean = "Mean CPU time of isolated kernel executions",
  stdev = "Standard deviation of isolated CPU times",
  rel_stdev = "Relative standard deviation of isolated CPU times"}

local function element_count(st) return st.element_count or 0 end
local function global_bytes(st) return st.global_bytes or 0 end

local function cold_summaries(list, st, peak)
  local r = st.cold
  add(list, "nv/cold/sample_size", "Samples", "sample_size", "int64", r.n, "Number of isolated kernel executions")
  -- second, as cuda-bench 0.3.0 writes it (bench/recorded/nvbench-h200-2026-12-04/nvbench.json)
  add(list, "nv/cold/walltime", "Walltime", "duration", "float64", r.walltime, "Walltime used for isolated measurements",
    HIDDEN)
  if r.n > 0 then
    time_summaries(list, "nv/cold/time/cpu", M.statistics(r.cpu, r.n), COLD_CPU)
    local gpu = M.statistics(r.gpu, r.n)
    time_summaries(list, "nv/cold/time/gpu", gpu, COLD_GPU)
    if element_count(st) > 0 then
      add(list, "nv/cold/bw/item_rate", "Elem/s", "item_rate", "float64", element_count(st) / gpu.mean,
        "Number of input elements processed per second")
    end
    if global_bytes(st) > 0 then
      local bps = global_bytes(st) / gpu.mean
      add(list, "nv/cold/bw/global/bytes_per_second", "GlobalMem BW", "byte_rate", "float64", bps,
        "Number of bytes read/written per second to the CUDA device's global memory")
      add(list, "nv/cold/bw/global/utilization", "BWUtil", "percentage", "float64", bps / (peak or 0),
        "Global device memory utilization as a percentage of the device's peak bandwidth")
    end
  end
  if r.n > 0 and r.mean_clock and r.mean_clock > 0 then
    local hz = r.mean_clock * 1e6
    add(list, "nv/cold/sm_clock_rate/mean", "Clock Rate", "frequency", "float64", hz, "Mean SM clock rate", HIDDEN)
    local default = st.device and st.device.properties and (st.device.properties.clock_rate_khz or 0) * 1000 or 0
    if default > 0 then
      add(list, "nv/cold/sm_clock_rate/scaling/percent", "Clock Scaling", "percentage", "float64", hz / default,
        "Mean SM clock rate as a percentage of default clock rate.", HIDDEN)
    end
  end
  -- cudalua's, where the throttle watch dropped samples (NVBench logs each instead)
  if (r.discarded or 0) > 0 then
    add(list, "nv/cold/throttle/discarded", "Throttled", "sample_size", "int64", r.discarded,
      "Samples discarded because the SM clock was throttled.")
  end
  -- cudalua's: the confidence interval of the mean (measure.lua)
  measure.summaries(r, list, "cold")
end

local function batch_summaries(list, b)
  add(list, "nv/batch/sample_size", "Samples", "sample_size", "int64", b.n, "Number of batch kernel executions")
  add(list, "nv/batch/time/gpu/mean", "Batch GPU", "duration", "float64", b.total_gpu / b.n,
    "Mean batch kernel execution time (measured by CUDA events)")
  add(list, "nv/batch/walltime", "Walltime", "duration", "float64", b.walltime, "Walltime used for batch measurements",
    HIDDEN)
  if b.graph then
    add(list, "cudalua/batch/graph_launches", "Graph", "sample_size", "int64", b.graph,
      "The batch replayed a graph of this many captured calls (batched = \"graph\").", HIDDEN)
  end
end

local function cpu_only_summaries(list, st)
  local r = st.cpu_only
  add(list, "nv/cpu_only/sample_size", "Samples", "sample_size", "int64", r.n, "Number of isolated kernel executions")
  add(list, "nv/cpu_only/walltime", "Walltime", "duration", "float64", r.walltime,
    "Walltime used for isolated measurements", HIDDEN)
  if r.n > 0 then
    local s = M.statistics(r.cpu, r.n)
    time_summaries(list, "nv/cpu_only/time/cpu", s, CPU_ONLY)
    if element_count(st) > 0 then
      add(list, "nv/cpu_only/bw/item_rate", "Elem/s", "item_rate", "float64", element_count(st) / s.mean,
        "Number of input elements processed per second")
    end
    if global_bytes(st) > 0 then
      add(list, "nv/cpu_only/bw/global/bytes_per_second", "GlobalMem BW", "byte_rate", "float64",
        global_bytes(st) / s.mean, "Number of bytes read/written per second.")
    end
  end
  measure.summaries(r, list, "cpu_only")
end

-- The summaries of a state, in NVBench's order: the user's summaries
-- recorded before state:exec, the measurement's (cold then batch, or
-- cpu-only), then the user's recorded later. peak: the device's peak
-- bandwidth in bytes/s (for BWUtil). A state that failed keeps what it had.
function M.summaries(st, peak)
  local list, later = {}, {}
  for _, s in ipairs(st.user_summaries or {}) do
    if s.before_exec then list[#list + 1] = s else later[#later + 1] = s end
  end
  -- a state skipped by its skip_time has no measurement (NVBench skips it
  -- before the summaries are made)
  if st.cpu_only and not st.cpu_only.skipped then
    cpu_only_summaries(list, st)
  elseif st.cold and not st.cold.skipped then
    cold_summaries(list, st, peak)
    if st.batch and st.batch.n > 0 then batch_summaries(list, st.batch) end
  end
  return table.move(later, 1, #later, #list + 1, list)
end

-- --- formatting, as NVBench's markdown printer --------------------------------------

-- string.format of a finite number, else what fmt writes ("inf", "-inf",
-- "nan"; C's printf would write "-nan" for some NaNs).
local function fixed(fmt, x)
  if x ~= x then return "nan" end
  if x == math.huge then return "inf" end
  if x == -math.huge then return "-inf" end
  return fmt:format(x)
end
M.fixed = fixed

function M.format_duration(s)
  if s >= 1 then return fixed("%.3f", s) .. " s" end
  if s >= 1e-3 then return fixed("%.3f", s * 1e3) .. " ms" end
  if s >= 1e-6 then return fixed("%.3f", s * 1e6) .. " us" end
  return fixed("%.3f", s * 1e9) .. " ns"
end

-- x in the largest unit of steps ({size, unit}, largest first) that it
-- reaches, else in the last (NaN and negative values too), as NVBench's
-- "{:0.3f} GB/s" formats do.
local function scaled(x, steps, sep)
  for i = 1, #steps - 1 do
    if x >= steps[i][1] then return fixed("%.3f", x / steps[i][1]) .. sep .. steps[i][2] end
  end
  return fixed("%.3f", x) .. sep .. steps[#steps][2]
end

local ITEM_RATE = {{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "K"}, {1, ""}}
local BYTE_RATE = {{1e15, "PB/s"}, {1e12, "TB/s"}, {1e9, "GB/s"}, {1e6, "MB/s"}, {1e3, "KB/s"}, {1, "B/s"}}
local FREQUENCY = {{1e9, "GHz"}, {1e6, "MHz"}, {1e3, "KHz"}, {1, "Hz"}}
local BYTES = {{1024 ^ 3, "GiB"}, {1024 ^ 2, "MiB"}, {1024, "KiB"}, {1, "B"}}

function M.format_item_rate(x) return scaled(x, ITEM_RATE, "") end
function M.format_byte_rate(x) return scaled(x, BYTE_RATE, " ") end
function M.format_frequency(x) return scaled(x, FREQUENCY, " ") end
function M.format_bytes(x) return scaled(x, BYTES, " ") end
function M.format_percentage(x) return fixed("%.2f", x * 100) .. "%" end

-- A value with no hint: a float with 5 significant digits, an integer, a string.
function M.format_default(v)
  if math.type(v) == "integer" then return ("%d"):format(v) end
  if type(v) == "number" then return fixed("%.5g", v) end
  return tostring(v)
end

local BY_HINT = {duration = M.format_duration, item_rate = M.format_item_rate, byte_rate = M.format_byte_rate,
  frequency = M.format_frequency, bytes = M.format_bytes, percentage = M.format_percentage}

-- A summary's table cell, by its hint, as NVBench's markdown printer writes it.
function M.format_value(s)
  local v = s.value
  if v == nil then return "" end
  if s.hint == "sample_size" and type(v) == "number" then return M.format_default(v) .. "x" end
  local format = type(v) == "number" and BY_HINT[s.hint]
  if format then return format(v) end
  return M.format_default(v)
end

-- --- the log lines ------------------------------------------------------------------

-- NVBench's warnings for a measurement that timed out, one per condition
-- it had not met (log_measurement_timeout_warnings): the noise (stdrel
-- only), min_samples, min-time (stdrel only).
local function timeout_warnings(log, params, walltime, n, min_samples, accumulated, noise)
  local function warn(fmt, ...)
    log(("Warn: Current measurement timed out (%.2fs) " .. fmt .. "\n"):format(walltime, ...))
  end
  local max_noise, min_time = params["max-noise"], params["min-time"]
  if max_noise and n < MIN_SAMPLES_FOR_NOISE then
    warn("before accumulating enough samples to estimate noise (%d < %d)", n, MIN_SAMPLES_FOR_NOISE)
  elseif max_noise and not (noise == noise and noise < math.huge and noise >= 0) then
    warn("while unable to estimate noise for max-noise")
  elseif max_noise and noise > max_noise then
    warn("while over noise threshold (%s%% > %s%%)", fixed("%.2f", noise * 100), fixed("%.2f", max_noise * 100))
  end
  if n < min_samples then warn("before accumulating min_samples (%d < %d)", n, min_samples) end
  if min_time and accumulated < min_time then
    warn("before accumulating min_time (%.2fs < %.2fs)", accumulated, min_time)
  end
end

local function criterion_params(r) return r.criterion and r.criterion.params or {} end

local function log_cold(log, st)
  local r = st.cold
  -- the measurement's own warnings (a sample taken again without the blocker)
  for _, why in ipairs(r.warnings or {}) do log(("Warn: %s\n"):format(why)) end
  if r.max_time_exceeded then
    local noise = r.n >= MIN_SAMPLES_FOR_NOISE and M.statistics(r.gpu, r.n).noise or math.huge
    timeout_warnings(log, criterion_params(r), r.walltime, r.n, st.min_samples, r.total_gpu or 0, noise)
  end
  if r.n == 0 then
    log(("Warn: Cold: no accepted samples recorded in %.2fs walltime.\n"):format(r.walltime or 0))
  else
    local gpu, cpu = 0.0, 0.0
    for i = 1, r.n do gpu, cpu = gpu + r.gpu[i], cpu + r.cpu[i] end
    log(("Pass: Cold: %.6fms GPU, %.6fms CPU, %.2fs total GPU, %.2fs total wall, %dx \n"):format(
      gpu / r.n * 1e3, cpu / r.n * 1e3, r.total_gpu, r.walltime, r.n))
  end
  if (r.discarded or 0) > 0 then
    log(("Warn: GPU throttled below threshold: %d samples discarded (nv/cold/throttle/discarded).\n"):format(r.discarded))
  end
  if r.criterion and r.criterion.gave_up then
    log("Warn: ci: the samples never looked independent enough for an interval of the mean (a drift?): "
      .. "stopped where stdrel stops, with no interval.\n")
  end
end

local function log_batch(log, st)
  local b = st.batch
  for _, why in ipairs(b.warnings or {}) do log(("Warn: batch: %s\n"):format(why)) end
  if b.max_time_exceeded then
    local target = st.bench and st.bench.batch_target_time or 0.5
    local function warn(fmt, ...)
      log(("Warn: Current measurement timed out (%.2fs) " .. fmt .. "\n"):format(b.walltime, ...))
    end
    if b.n < st.min_samples then warn("before accumulating min_samples (%d < %d)", b.n, st.min_samples) end
    if b.total_gpu < target then
      warn("before accumulating batch target time (%.2fs < %.2fs)", b.total_gpu, target)
    end
  end
  log(("Pass: Batch: %.6fms GPU, %.2fs total GPU, %.2fs total wall, %dx\n"):format(
    b.n > 0 and b.total_gpu / b.n * 1e3 or 0, b.total_gpu, b.walltime, b.n))
  if b.graph then log(("Info: Batch: replays of a graph of %d captured calls.\n"):format(b.graph)) end
end

local function log_cpu_only(log, st)
  local r = st.cpu_only
  if r.max_time_exceeded then
    local noise = r.n >= MIN_SAMPLES_FOR_NOISE and M.statistics(r.cpu, r.n).noise or math.huge
    timeout_warnings(log, criterion_params(r), r.walltime, r.n, st.min_samples, r.total_cpu or 0, noise)
  end
  log(("Pass: CpuOnly: %.6fms mean CPU, %.2fs total CPU, %.2fs total wall, %dx \n"):format(
    r.n > 0 and r.total_cpu / r.n * 1e3 or 0, r.total_cpu, r.walltime, r.n))
end

-- The log lines of a measured state, in NVBench's words: each unmet
-- condition of a timed-out measurement ("Warn: Current measurement timed
-- out ..."), then "Pass: Cold: ...", "Pass: Batch: ..." or "Pass: CpuOnly: ...".
local function log_pass(log, st)
  if st.cpu_only then log_cpu_only(log, st); return end
  if st.cold then log_cold(log, st) end
  if st.batch then log_batch(log, st) end
end
M.log_pass = log_pass

-- --- running ----------------------------------------------------------------------

-- The clock source of a device: NVML where cuda.system works, else the probe kernel.
function M.default_clock_source(dev, stream)
  local src = throttle.nvml_source(dev)
  if src then return src end
  return measure.probe_source(dev, stream)
end

local function count_states(plan)
  local n = 0
  for _, p in ipairs(plan) do n = n + #p.states * #p.devices end
  return n
end

-- A configuration to plan: a benchmark, or {bench = b, overrides = {specs},
-- devices = {cuda.Device}} (NVBench's -b: its own -a and -d, after the global ones).
local function configuration(item)
  if getmetatable(item) == harness.Benchmark then return {bench = item} end
  if type(item) == "table" and getmetatable(item.bench) == harness.Benchmark then return item end
  error(("run.plan: a benchmark or {bench = b, overrides = {...}} expected, got %s"):format(axes_mod.describe(item)), 0)
end

-- Applies -a specs to axes (a copy of b's), as NVBench's: every spec must
-- name an axis of the benchmark.
local function apply_overrides(b, axes, specs)
  for _, spec in ipairs(specs or {}) do
    local name = axes_mod.split_override(spec)
    if not axes_mod.find(axes, name) then
      local names = {}
      for _, a in ipairs(axes) do names[#names + 1] = "'" .. a.name .. "'" end
      error(("axis override '%s': the benchmark '%s' has no axis '%s' (its axes: %s); as NVBench's, -a applies "
        .. "to every benchmark run: choose them with -b"):format(spec, b.name, name,
        #names > 0 and table.concat(names, ", ") or "none"), 0)
    end
    local _, new = axes_mod.parse_override(spec, axes)
    for i, axis in ipairs(axes) do if axis.name == name then axes[i] = new end end
  end
end

-- Two states of one benchmark and device never share a name.
local function check_names(b, axes, states)
  local seen = {}
  for i, idx in ipairs(states) do
    local name = harness.state_name(nil, axes, idx)
    if seen[name] then
      error(("benchmark '%s': states %d and %d are both '%s'; each state needs a name of its own"):format(b.name,
        seen[name], i, name), 0)
    end
    seen[name] = i
  end
end

-- The plan: each configuration's axes (with overrides), states and
-- devices. overrides: the -a specs for every configuration; devices: the
-- cuda.Devices GPU benchmarks run on (cpu-only ones run on none).
function M.plan(benchmarks, overrides, devices)
  local plan = {}
  for _, item in ipairs(benchmarks) do
    local c = configuration(item)
    local b = c.bench
    local axes = table.move(b.axes, 1, #b.axes, 1, {})
    apply_overrides(b, axes, overrides)
    apply_overrides(b, axes, c.overrides)
    local states = axes_mod.states(axes, b.zips, b.space)
    check_names(b, axes, states)
    plan[#plan + 1] = {bench = b, axes = axes, states = states,
      devices = b.is_cpu_only and {false} or c.devices or devices or {}}
  end
  return plan
end

-- An error object as text; its __tostring may raise or return a non-string.
function M.error_text(err)
  if type(err) == "string" then return err end
  if type(err) == "number" then return tostring(err) end
  local ok, text = pcall(tostring, err)
  if ok and type(text) == "string" then return text end
  return ("(error object is a %s value)"):format(type(err))
end

local STOPPED = "Skipped because a previous state requested the runner loop to stop."

-- Ctrl-C raises "interrupted!" (cudalua, as lua(1)): NVBench's
-- KeyboardInterrupt, which stops the runner loop.
local function is_interrupt(text) return text:find("interrupted!$") ~= nil end

-- Lets go of a state's stream after an error: the blocker may hold it.
local function unblock(st)
  if not st.device then return end
  measure.release(st.device)
  local s = rawget(st, "stream_set") or rawget(st, "stream_own")
  if s then pcall(s.sync, s) end
end

local function fail(ctx, rec, st, text)
  ctx.failures = ctx.failures + 1
  rec.error = text
  rec.is_skipped, rec.skip_reason = true, "Unexpected error: " .. text
  ctx.log(("Fail: Unexpected error: %s\n"):format(text))
  unblock(st)
end

local function record_samples(rec, st)
  if st.cold and st.cold.n > 0 then rec.samples, rec.n_samples = st.cold.gpu, st.cold.n
  elseif st.cpu_only then rec.samples, rec.n_samples = st.cpu_only.cpu, st.cpu_only.n end
end

-- Runs one state: fn(state) under pcall, its log lines, its record.
local function run_state(ctx, p, idx, dev, peak)
  local b = p.bench
  ctx.done = ctx.done + 1
  local st = harness.new_state(b, p.axes, idx, ctx.runner, dev or nil)
  ctx.log(("Run:  [%d/%d] %s\n"):format(ctx.done, ctx.total, st:get_short_description()))
  local ok, err = true, nil
  if ctx.stopped then st:skip(STOPPED) else ok, err = pcall(b.fn, st) end
  local rec = {name = st.name, device = dev and dev.id or nil, index = idx, axes = p.axes,
    min_samples = st.min_samples, timeout = st.timeout, state = st}
  if not ok then
    local text = M.error_text(err)
    ctx.stopped = ctx.stopped or is_interrupt(text)
    if st:is_skipped() then   -- NVBench: a state skipped before it raised is reported as skipped
      ok = true
      unblock(st)
    else
      fail(ctx, rec, st, text)
    end
  end
  if ok and st:is_skipped() then
    rec.is_skipped, rec.skip_reason = true, st.skip_reason
    ctx.log(("Skip: %s\n"):format(st.skip_reason))
  elseif ok then
    for _, m in ipairs(st.measurements) do   -- a Pass line per exec, each of its own measurement
      log_pass(ctx.log, setmetatable({cold = m.cold, batch = m.batch, cpu_only = m.cpu_only}, {__index = function(_, k)
        if k ~= "cold" and k ~= "batch" and k ~= "cpu_only" then return st[k] end
      end}))
    end
  end
  local made, summaries = pcall(M.summaries, st, peak)
  if made then rec.summaries = summaries
  else
    rec.summaries = {}
    if not rec.error then fail(ctx, rec, st, "the state's summaries: " .. M.error_text(summaries)) end
  end
  record_samples(rec, st)
  harness.close_state(st)
  if ctx.on_state then ctx.on_state(rec, ctx.log) end
  return rec
end

local function run_plan(plan, ctx)
  local results = {}
  for bi, p in ipairs(plan) do
    local b = p.bench
    b.kernel_cache = b.kernel_cache or {}
    local out = {name = b.name, index = bi - 1, bench = b, axes = p.axes, devices = {}, states = {},
      min_samples = b.min_samples, timeout = b.timeout}
    for _, dev in ipairs(p.devices) do
      if dev then out.devices[#out.devices + 1] = dev.id end
      local got, peak = true, 0
      if dev then got, peak = pcall(M.peak_bandwidth, dev) end
      for _, idx in ipairs(p.states) do
        out.states[#out.states + 1] = run_state(ctx, p, idx, dev, got and peak or 0)
      end
    end
    results[#results + 1] = out
  end
  return results
end

-- Runs the plan. opts: log (function(text), default stderr), clock,
-- clock_source(dev, stream) (default NVML or probe; false: no throttle
-- watch), l2_bytes, l2_flush (multiple of the L2 size flushed, default 2),
-- sleep, and the run-wide overrides min_samples, timeout, criterion,
-- criterion_params, throttle_threshold, run_once, no_blocking. A state
-- that raises fails ("Fail: Unexpected error: ...") and the others still
-- run; Ctrl-C skips the states after it, as NVBench's KeyboardInterrupt.
-- on_state(rec, log), called after each state is measured (the CLI writes
-- --jsonbin's sample files there, as NVBench does). Returns the results and
-- the count of failed states.
function M.run(plan, opts)
  opts = opts or {}
  local cuda = require "cuda"
  local log = opts.log or function(text) io.stderr:write(text); io.stderr:flush() end
  local runner = {
    clock = opts.clock or cuda.clock, l2_bytes = opts.l2_bytes, l2_flush = opts.l2_flush, sleep = opts.sleep,
    clock_source = opts.clock_source == nil and M.default_clock_source or opts.clock_source or nil,
    min_samples = opts.min_samples, timeout = opts.timeout, criterion = opts.criterion,
    criterion_params = opts.criterion_params, throttle_threshold = opts.throttle_threshold,
    run_once = opts.run_once, no_blocking = opts.no_blocking, log = log,
  }
  local ctx = {log = log, runner = runner, total = count_states(plan), done = 0, failures = 0, stopped = false,
    on_state = opts.on_state}
  harness.running = true
  local ok, results = pcall(run_plan, plan, ctx)
  harness.running = false
  if not ok then error(results, 0) end
  return results, ctx.failures
end

return M
