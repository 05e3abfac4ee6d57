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

local function summary(list, tag, name, hint, t, value, hide, description)
  list[#list + 1] = {tag = tag, name = name, hint = hint, type = t, value = value, hide = hide, description = description}
end

local function throughput(list, st, gpu_mean, peak)
  if not (gpu_mean and gpu_mean > 0) then return end
  if st.element_count > 0 then
    summary(list, "nv/cold/bw/item_rate", "Elem/s", "item_rate", "float64", st.element_count / gpu_mean, nil,
      "Number of input elements processed per second")
  end
  if st.global_bytes > 0 then
    local bps = st.global_bytes / gpu_mean
    summary(list, "nv/cold/bw/global/bytes_per_second", "GlobalMem BW", "byte_rate", "float64", bps, nil,
      "Number of bytes read/written per second.")
    if peak and peak > 0 then
      summary(list, "nv/cold/bw/global/utilization", "BWUtil", "percentage", "float64", bps / peak, nil,
        "Global device memory utilization as a percentage of peak bandwidth.")
    end
  end
end

-- The summaries of a measured state, in NVBench's tags and column names.
function M.summaries(st, peak)
  local list = {}
  if st.cpu_only then
    local r = st.cpu_only
    local mean, noise, lo, hi = measure.moments(r.cpu, r.n)
    summary(list, "nv/cpu_only/sample_size", "Samples", "sample_size", "int64", r.n)
    summary(list, "nv/cpu_only/time/cpu/min", "Min CPU Time", "duration", "float64", lo, "Hidden by default.")
    summary(list, "nv/cpu_only/time/cpu/max", "Max CPU Time", "duration", "float64", hi, "Hidden by default.")
    summary(list, "nv/cpu_only/time/cpu/mean", "CPU Time", "duration", "float64", mean)
    summary(list, "nv/cpu_only/time/cpu/stdev/relative", "Noise", "percentage", "float64", noise)
    summary(list, "nv/cpu_only/walltime", "Walltime", "duration", "float64", r.walltime, "Hidden by default.")
  elseif st.cold then
    local r = st.cold
    local gmean, gnoise, glo, ghi = measure.moments(r.gpu, r.n)
    local cmean, cnoise = measure.moments(r.cpu, r.n)
    summary(list, "nv/cold/sample_size", "Samples", "sample_size", "int64", r.n)
    summary(list, "nv/cold/time/cpu/mean", "CPU Time", "duration", "float64", cmean)
    summary(list, "nv/cold/time/cpu/stdev/relative", "Noise", "percentage", "float64", cnoise)
    summary(list, "nv/cold/time/gpu/min", "Min GPU Time", "duration", "float64", glo, "Hidden by default.")
    summary(list, "nv/cold/time/gpu/max", "Max GPU Time", "duration", "float64", ghi, "Hidden by default.")
    summary(list, "nv/cold/time/gpu/mean", "GPU Time", "duration", "float64", gmean)
    summary(list, "nv/cold/time/gpu/stdev/relative", "Noise", "percentage", "float64", gnoise)
    summary(list, "nv/cold/walltime", "Walltime", "duration", "float64", r.walltime, "Hidden by default.")
    summary(list, "nv/cold/throttle/discarded", "Throttled", "sample_size", "int64", r.discarded,
      r.discarded == 0 and "Hidden by default." or nil, "Samples discarded because the SM clock was throttled.")
    if r.mean_clock then
      summary(list, "nv/cold/sm_clock_rate/mean", "Clock Rate", "frequency", "float64", r.mean_clock * 1e6, "Hidden by default.")
    end
    throughput(list, st, gmean, peak)
    if st.batch and st.batch.n > 0 then
      summary(list, "nv/batch/sample_size", "Samples", "sample_size", "int64", st.batch.n)
      summary(list, "nv/batch/time/gpu/mean", "Batch GPU", "duration", "float64", st.batch.total_gpu / st.batch.n)
      if st.batch.graph then
        summary(list, "cudalua/batch/graph_launches", "Graph", "sample_size", "int64", st.batch.graph, "Hidden by default.",
          "The batch replayed a graph of this many captured calls (batched = \"graph\").")
      end
    end
  end
  for _, s in ipairs(st.user_summaries) do list[#list + 1] = s end
  return list
end

-- --- formatting, as NVBench's markdown printer --------------------------------------

function M.format_duration(s)
  if s ~= s then return "nan" end
  if s >= 1 then return ("%.3f s"):format(s) end
  if s >= 1e-3 then return ("%.3f ms"):format(s * 1e3) end
  return ("%.3f us"):format(s * 1e6)
end

local function scaled(x, unit)
  if x >= 1e12 then return ("%.3fT%s"):format(x / 1e12, unit) end
  if x >= 1e9 then return ("%.3fG%s"):format(x / 1e9, unit) end
  if x >= 1e6 then return ("%.3fM%s"):format(x / 1e6, unit) end
  if x >= 1e3 then return ("%.3fK%s"):format(x / 1e3, unit) end
  return ("%.3f%s"):format(x, unit)
end

function M.format_value(s)
  local v = s.value
  if v == nil then return "" end
  if s.hint == "duration" then return M.format_duration(v) end
  if s.hint == "item_rate" then return scaled(v, "") end
  if s.hint == "byte_rate" then return scaled(v, "B/s"):gsub("(%d)([TGMK]?)B/s$", "%1 %2B/s") end
  if s.hint == "sample_size" then return ("%dx"):format(v) end
  if s.hint == "percentage" then return v == math.huge and "inf" or ("%.2f%%"):format(v * 100) end
  if s.hint == "frequency" then return ("%.3f MHz"):format(v / 1e6) end
  if math.type(v) == "integer" then return tostring(v) end
  if type(v) == "number" then return ("%.5g"):format(v) end
  return tostring(v)
end

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

local function log_pass(log, st)
  if st.cpu_only then
    local r = st.cpu_only
    log(("Pass: CPU: %.6fms mean CPU, %.2fs total CPU, %.2fs total wall, %dx\n"):format(
      measure.moments(r.cpu, r.n) * 1e3, r.total_cpu, r.walltime, r.n))
    return
  end
  local r = st.cold
  for _, why in ipairs(r.warnings or {}) do log(("Warn: %s\n"):format(why)) end
  for _, why in ipairs(st.batch and st.batch.warnings or {}) do log(("Warn: batch: %s\n"):format(why)) end
  local gmean = measure.moments(r.gpu, r.n)
  local cmean = measure.moments(r.cpu, r.n)
  log(("Pass: Cold: %.6fms GPU, %.6fms CPU, %.2fs total GPU, %.2fs total wall, %dx%s\n"):format(gmean * 1e3,
    cmean * 1e3, r.total_gpu, r.walltime, r.n, r.discarded > 0 and (" (%d throttled samples discarded)"):format(r.discarded) or ""))
  if r.max_time_exceeded then
    local noise = r.criterion:noise()
    log(("Warn: Current measurement timed out (%.2fs) %s\n"):format(st.timeout,
      noise < math.huge and ("with noise %.2f%%"):format(noise * 100) or "before accumulating enough samples to estimate noise"))
  end
  if st.batch then
    local b = st.batch
    log(("Pass: Batch: %.6fms GPU, %.2fs total GPU, %.2fs total wall, %dx%s\n"):format(
      b.n > 0 and b.total_gpu / b.n * 1e3 or 0, b.total_gpu, b.walltime, b.n,
      b.graph and (" (replays of a graph of %d)"):format(b.graph) or ""))
  end
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
-- Returns the results and the count of failed states.
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
  local ctx = {log = log, runner = runner, total = count_states(plan), done = 0, failures = 0, stopped = false}
  harness.running = true
  local ok, results = pcall(run_plan, plan, ctx)
  harness.running = false
  if not ok then error(results, 0) end
  return results, ctx.failures
end

return M
