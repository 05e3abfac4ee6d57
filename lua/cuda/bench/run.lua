-- cuda.bench.run: runs registered benchmarks, logs progress, and makes NVBench's summaries.
-- SPDX-License-Identifier: MIT
--
-- run(benchmarks, opts) walks every benchmark's states on every device,
-- calls fn(state) under pcall (a benchmark that raises is reported and the
-- others still run), and returns the results: a list of
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
    measure.summaries(r, list, "cpu_only")
  elseif st.cold then
    local r = st.cold
    -- every sample discarded: no cold measurement (NVBench's "no accepted samples")
    if not r.no_samples then
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
      measure.summaries(r, list, "cold")
    end
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

-- Applies -a overrides to copies of each benchmark's axes; an override
-- that names an axis of no selected benchmark is an error.
function M.plan(benchmarks, overrides, devices)
  local plan, used = {}, {}
  for _, b in ipairs(benchmarks) do
    local axes = {}
    for i, axis in ipairs(b.axes) do axes[i] = axis end
    for _, spec in ipairs(overrides or {}) do
      local name = spec:match("^%s*([^%[=%s]+)")
      if name and axes_mod.find(axes, name) then
        local _, new = axes_mod.parse_override(spec, axes)
        for i, axis in ipairs(axes) do if axis.name == name then axes[i] = new end end
        used[spec] = true
      end
    end
    plan[#plan + 1] = {bench = b, axes = axes, states = axes_mod.states(axes, b.zips, b.space),
      devices = b.is_cpu_only and {devices[1] or false} or devices}
  end
  for _, spec in ipairs(overrides or {}) do
    if not used[spec] then
      local all = {}
      for _, b in ipairs(benchmarks) do for _, a in ipairs(b.axes) do all[#all + 1] = a end end
      axes_mod.parse_override(spec, all)   -- raises with the reason (no such axis, bad value)
      error(("axis override '%s' names no axis of the selected benchmarks"):format(spec), 0)
    end
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
  if not r.no_samples then
    log(("Pass: Cold: %.6fms GPU, %.6fms CPU, %.2fs total GPU, %.2fs total wall, %dx%s\n"):format(gmean * 1e3,
      cmean * 1e3, r.total_gpu, r.walltime, r.n, r.discarded > 0 and (" (%d throttled samples discarded)"):format(r.discarded) or ""))
  end
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

-- Runs the plan. opts: log (function(text), default stderr), clock,
-- clock_source(dev, stream) (default NVML or probe; false: no throttle
-- watch), l2_bytes, l2_flush (multiple of the L2 size flushed, default 2), sleep, and the run-wide overrides min_samples,
-- timeout, criterion, criterion_params, throttle_threshold, run_once.
function M.run(plan, opts)
  opts = opts or {}
  local cuda = require "cuda"
  local log = opts.log or function(text) io.stderr:write(text); io.stderr:flush() end
  local runner = {
    clock = opts.clock or cuda.clock, l2_bytes = opts.l2_bytes, l2_flush = opts.l2_flush, sleep = opts.sleep,
    clock_source = opts.clock_source == nil and M.default_clock_source or opts.clock_source or nil,
    min_samples = opts.min_samples, timeout = opts.timeout, criterion = opts.criterion,
    criterion_params = opts.criterion_params, throttle_threshold = opts.throttle_threshold,
    run_once = opts.run_once, no_blocking = opts.no_blocking,
  }
  local total, done, failures = count_states(plan), 0, 0
  local results = {}
  for bi, p in ipairs(plan) do
    local b = p.bench
    b.kernel_cache = b.kernel_cache or {}
    local out = {name = b.name, index = bi - 1, bench = b, axes = p.axes, devices = {}, states = {},
      min_samples = b.min_samples, timeout = b.timeout}
    for _, dev in ipairs(p.devices) do
      if dev then out.devices[#out.devices + 1] = dev.id end
      local stream <close> = dev and dev:create_stream() or nil
      local peak = dev and M.peak_bandwidth(dev) or 0
      for _, idx in ipairs(p.states) do
        done = done + 1
        local st = harness.new_state(b, p.axes, idx, runner, dev or nil, stream)
        log(("Run:  [%d/%d] %s [%s]\n"):format(done, total, b.name, st.name))
        local ok, err = pcall(b.fn, st)
        if ok and not st.executed and not st.skip_reason then
          ok, err = false, "the benchmark function did not call state:exec"
        end
        local rec = {name = st.name, device = dev and dev.id or nil, index = idx, axes = p.axes,
          min_samples = st.min_samples, timeout = st.timeout, state = st}
        if not ok then
          failures = failures + 1
          rec.error = tostring(err)
          rec.is_skipped, rec.skip_reason = true, "error: " .. tostring(err)
          log(("Fail: %s\n"):format(tostring(err)))
          if stream then measure.release(dev); pcall(stream.sync, stream) end
        elseif st.skip_reason then
          rec.is_skipped, rec.skip_reason = true, st.skip_reason
          log(("Skip: %s\n"):format(st.skip_reason))
        else
          log_pass(log, st)
        end
        rec.summaries = rec.error and {} or M.summaries(st, peak)
        if st.cold and st.cold.n > 0 then rec.samples, rec.n_samples = st.cold.gpu, st.cold.n
        elseif st.cpu_only then rec.samples, rec.n_samples = st.cpu_only.cpu, st.cpu_only.n end
        out.states[#out.states + 1] = rec
      end
    end
    results[#results + 1] = out
  end
  return results, failures
end

return M
