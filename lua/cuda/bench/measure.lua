-- cuda.bench.measure: NVBench's cold, batch and cpu-only measurements of one state.
-- SPDX-License-Identifier: MIT
--
-- cold:     each sample starts with the L2 flushed (a memset of 2x the
--           device's L2 size) and waited for, the stream held by the
--           blocking kernel while the work is queued, then GPU time between
--           two events and CPU time from the queueing to the stream's end,
--           as NVBench's. Samples taken while the SM clock was below the
--           throttle threshold are dropped (no throttle watch with run_once;
--           with sync the clock is read but nothing dropped, as NVBench's
--           threshold 0). Stops when the criterion is met after min_samples,
--           or at the timeout. With the ci criterion (or cfg.cold_group),
--           samples are taken in groups: see M.cold.
-- batch:    the work queued many times back to back behind the blocking
--           kernel, timed as one; the batch grows until batch_target_time
--           of GPU time is covered (at least min_samples launches).
--           With batched = "graph" the calls are captured once into a graph
--           of up to 100 and queued as its replays: a launch's host cost
--           no longer bounds a batch of short kernels.
-- cpu_only: host time of each call, with the same criterion, after one
--           warm-up call checked against skip_time (as NVBench's).
--
-- The sample loops allocate nothing: their arrays are preallocated and
-- grown by doubling, the criterion is incremental, and no string is made
-- (but the Warn line of a throttled sample, which sleeps anyway).
--
-- Results (cfg -> result tables) carry, beside the samples (gpu, cpu,
-- clocks: arrays of n), total_gpu or total_cpu, walltime, criterion:
--   skipped       why the state is skipped (the warm-up under skip_time);
--   no_samples    why there is no measurement: every sample was discarded
--                 (NVBench's "Cold: no accepted samples recorded in ...");
--   warnings      Warn lines for the log (throttled samples, a broken hold);
--   discarded     samples the throttle watch dropped;
--   group         the samples a cold group held (1: NVBench's sample);
--   max_time_exceeded, mean_clock (MHz), held_failure (internal).
-- M.summaries(result, list, kind) adds cudalua's summaries of a result
-- (the confidence interval of the mean) to a summary list.
local criteria = require "cuda.bench.criteria"
local stats = require "cuda.bench.stats"
local throttle = require "cuda.bench.throttle"

local M = {}

-- --- the device helpers: blocking kernel, clock probe, L2 flush -----------------

local HELPERS_SOURCE = [[
extern "C" __global__ void cudalua_bench_block(volatile int *flag, volatile int *timed_out,
                                               unsigned long long timeout_ns)
{
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (!*flag) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) { *timed_out = 1; return; }
  }
}
extern "C" __global__ void cudalua_bench_clock(unsigned long long *out, long long cycles)
{
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  long long c0 = clock64(), c1;
  do { c1 = clock64(); } while (c1 - c0 < cycles);
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  out[0] = (unsigned long long)(c1 - c0);
  out[1] = t1 - t0;
}
]]

M.PROBE_CYCLES = 16384

local helpers_by_device = setmetatable({}, {__mode = "k"})

-- The device's helper kernels and the pinned words they use, made once.
function M.helpers(dev)
  local h = helpers_by_device[dev]
  if h then return h end
  local cuda = require "cuda"
  local obj = cuda.Program(HELPERS_SOURCE, "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
  local pinned = cuda.PinnedMemoryResource()
  h = {
    block = obj:get_kernel("cudalua_bench_block"), clock = obj:get_kernel("cudalua_bench_clock"),
    flag = pinned:allocate(4), timed_out = pinned:allocate(4), probe = pinned:allocate(16),
    one = cuda.LaunchConfig{grid = 1, block = 1}, obj = obj,
  }
  h.flag_view, h.timed_out_view = h.flag:view("int32"), h.timed_out:view("int32")
  h.probe_view = h.probe:view("uint64")
  h.cycles = cuda.i64(M.PROBE_CYCLES)
  helpers_by_device[dev] = h
  return h
end

-- A clock source (bench_throttle) that reads the SM clock with the probe
-- kernel on stream: M.PROBE_CYCLES cycles over the %globaltimer time they took.
function M.probe_source(dev, stream)
  local h = M.helpers(dev)
  local cuda = require "cuda"
  local max = (dev.properties.clock_rate_khz or 0) / 1000
  local queued = false
  local source = {name = "probe", max = max}
  -- queued right after a sample's stop event, so it runs while the host
  -- reads the sample; read() waits for it (or queues and waits)
  function source.queue()
    h.probe_view[1], h.probe_view[2] = 0, 0
    cuda.launch(stream, h.one, h.clock, h.probe, h.cycles)
    queued = true
  end
  function source.read()
    if not queued then source.queue() end
    queued = false
    stream:sync()
    local cycles, ns = h.probe_view[1], h.probe_view[2]
    if ns <= 0 then return nil end   -- the fake runs no kernel: no reading
    local mhz = cycles / ns * 1000
    if max > 0 and mhz > 2 * max then return nil end   -- a timer glitch, not a clock
    return mhz
  end
  return source
end

-- The blocking kernel's timeout in nanoseconds, as a u64: NVBench's
-- negative timeout (and an infinite one) waits for ever, near enough.
local function timeout_ns(cuda, seconds)
  local ns = seconds * 1e9
  if not (ns >= 0) or ns >= 2 ^ 63 then return cuda.u64(math.maxinteger) end
  return cuda.u64(math.floor(ns))
end

-- The blocker of a stream: block() queues the spin kernel and holds the
-- stream (cuda.hold_begin): until release(), no finalizer's free, unload or
-- destroy reaches the driver (they are deferred), and a driver call that
-- could wait for the held stream lets the kernel go first. release() lets
-- it go and returns the name of such a call, if one broke the hold (nil
-- otherwise); timed_out() says whether the kernel gave up first.
local function blocker(dev, stream, timeout)
  local cuda = require "cuda"
  local h = M.helpers(dev)
  local ns = timeout_ns(cuda, timeout)
  local b = {}
  function b.block()
    h.flag_view[1], h.timed_out_view[1] = 0, 0
    cuda.launch(stream, h.one, h.block, h.flag, h.timed_out, ns)
    cuda.hold_begin(h.flag)
  end
  function b.release() return cuda.hold_end() end
  function b.timed_out() return h.timed_out_view[1] ~= 0 end
  return b
end

-- Lets a held stream go (after an error between block and release): the
-- blocking kernel would otherwise spin until its timeout.
function M.release(dev)
  local h = helpers_by_device[dev]
  require("cuda").hold_end()
  if h then h.flag_view[1] = 1 end
end

-- Why a measurement behind the blocking kernel was given up, for the log:
-- a call that would have waited for the held stream (it broke the hold),
-- or the kernel's timeout with no such call.
local function held_failure(broken_by, timeout)
  if broken_by then
    return ("%s would wait for the stream the blocking kernel held (a wait, free, load or "
      .. "pageable copy inside the measured function; exec{sync = true} says so up front): "
      .. "measured without the blocking kernel"):format(broken_by)
  end
  return ("the blocking kernel timed out after %g s with no cudalua call waiting for its stream (the "
    .. "work took that long to queue, or code outside cudalua waited): measured again without "
    .. "it"):format(timeout)
end
M.held_failure = held_failure

-- The flush buffer: factor (default 2; NVBench's memset is 1) x the L2
-- size (l2_bytes overrides the device's), or nil (no flush). A size past
-- what a byte count can be (2^53) is refused by name, not converted.
function M.l2_flush_bytes(l2_bytes, factor, device_l2)
  local size = (factor or 2) * (l2_bytes or device_l2 or 0)
  if not (size >= 1) then return nil end
  if size >= 2 ^ 53 then
    error(("the L2 flush buffer (%.6g x %.6g bytes) is too large to allocate (CUDALUA_BENCH_L2_BYTES, --l2-flush)")
      :format(factor or 2, l2_bytes or device_l2 or 0), 0)
  end
  return math.tointeger(math.floor(size))
end

local function l2_buffer(dev, stream, l2_bytes, factor)
  local size = M.l2_flush_bytes(l2_bytes, factor, dev.properties.l2_cache_size)
  return size and dev.memory_resource:allocate(size, stream) or nil
end

-- --- sample arrays -------------------------------------------------------------

local function array(n)
  local a = {}
  for i = 1, n do a[i] = 0.0 end
  return a
end

-- mean, relative standard deviation (math.huge below 5), min, max of a[1..n]
function M.moments(a, n)
  if n == 0 then return 0 / 0, math.huge, 0 / 0, 0 / 0 end
  local sum, lo, hi = 0.0, math.huge, -math.huge
  for i = 1, n do
    local x = a[i]
    sum = sum + x
    if x < lo then lo = x end
    if x > hi then hi = x end
  end
  local mean = sum / n
  if n < criteria.MIN_SAMPLES_FOR_NOISE or mean <= 0 then return mean, math.huge, lo, hi end
  local sq = 0.0
  for i = 1, n do sq = sq + (a[i] - mean) ^ 2 end
  return mean, math.sqrt(sq / (n - 1)) / mean, lo, hi
end

-- --- the timers passed to exec{timer = true} functions -----------------------------

-- The cold measurement's, as NVBench's: start() flushes the L2, waits for
-- the stream, starts the CPU clock and records the start event; stop()
-- records the stop event, waits for the stream and stops the CPU clock.
-- So the flush follows any untimed setup the function queues first.
local Timer = {}
Timer.__index = Timer
function Timer:start()
  self.flush()
  self.stream:sync()
  self.cpu0 = self.clock()
  self.stream:record(self.start_event)
  self.started = true
end
function Timer:stop()
  self.stream:record(self.stop_event)
  self.stream:sync()
  self.cpu1 = self.clock()
  self.stopped = true
end

-- The cpu-only measurement's: the CPU clock only.
local CpuTimer = {}
CpuTimer.__index = CpuTimer
function CpuTimer:start() self.cpu0 = self.clock(); self.started = true end
function CpuTimer:stop() self.cpu1 = self.clock(); self.stopped = true end

local TIMER_CALLS = "exec{timer = true}: the function must call timer:start() and timer:stop() once each"

-- Calls fn(launch, timer) and checks that it bracketed its region.
local function timed_call(fn, launch, timer)
  timer.started, timer.stopped = false, false
  fn(launch, timer)
  if not (timer.started and timer.stopped) then error(TIMER_CALLS, 0) end
end

-- NVBench's reason for a warm-up under skip_time.
local function skip_reason(warmup, skip_time)
  return ("Warmup time did not meet skip_time limit: %.3fus < %.3fus."):format(warmup * 1e6, skip_time * 1e6)
end

-- --- cold -------------------------------------------------------------------------

-- The samples a cold group holds under the ci criterion (cfg.cold_group
-- overrides; 1 is NVBench's sample).
M.CI_GROUP = 16

-- Event pairs for a group of g samples, closed together.
local function event_pairs(dev, g)
  local pairs_ = {starts = {}, stops = {}}
  for i = 1, g do
    pairs_.starts[i], pairs_.stops[i] = dev:create_event{timing = true}, dev:create_event{timing = true}
  end
  return setmetatable(pairs_, {__close = function(p)
    for i = 1, g do p.starts[i]:close(); p.stops[i]:close() end
  end})
end

-- Measures fn(launch[, timer]) of a state. cfg: {dev, stream, launch,
-- criterion, params, min_samples, timeout, skip_time, run_once, sync, timer,
-- warmup_runs, max_warmup_walltime, throttle (a watcher or nil),
-- blocking (bool), blocking_timeout, l2_bytes, l2_flush, clock, cold_group}.
-- Returns a result (see the top). blocking: whether samples are taken
-- behind the blocking kernel; a sample whose hold broke or timed out ends
-- the measurement, with result.held_failure.
local function cold_once(fn, cfg, blocking)
  local dev, stream, launch, clock = cfg.dev, cfg.stream, cfg.launch, cfg.clock
  -- groups only behind the blocker: it keeps the queue ahead of the GPU
  local group = blocking and (cfg.cold_group or (cfg.criterion == "ci" and M.CI_GROUP) or 1) or 1
  local events <close> = event_pairs(dev, group)
  local start, stop = events.starts[1], events.stops[1]
  local flush_buf <close> = l2_buffer(dev, stream, cfg.l2_bytes, cfg.l2_flush)
  local function flush() if flush_buf then flush_buf:fill(0, stream) end end
  local block = blocking and blocker(dev, stream, cfg.blocking_timeout or 30)
  local timer = cfg.timer and setmetatable({stream = stream, start_event = start, stop_event = stop, flush = flush,
    clock = clock, cpu0 = 0, cpu1 = 0, started = false, stopped = false}, Timer) or nil
  local criterion = criteria.new(cfg.criterion, cfg.params)
  -- no throttle watch with run_once; with sync, the clock read but no sample dropped (NVBench's threshold 0)
  local watcher = not cfg.run_once and cfg.throttle or nil
  if watcher and cfg.sync then watcher.threshold = 0 end
  local probe_queue = watcher and watcher.source and watcher.source.queue
  local result = {discarded = 0, n = 0, group = group}

  -- One sample, as NVBench's: flush, wait, CPU clock, block, start event,
  -- fn, stop event, release, wait, CPU clock (exec{timer}: the timer does
  -- its part). Returns gpu seconds, cpu seconds; nil, why (held_failure)
  -- when a call broke the hold or the blocking kernel timed out.
  local function sample(use_blocker)
    local cpu0
    if timer then
      timed_call(fn, launch, timer)
      cpu0 = timer.cpu0
    else
      flush()
      stream:sync()
      cpu0 = clock()
      if use_blocker then block.block() end
      stream:record(start)
      fn(launch)
      stream:record(stop)
    end
    local broken_by = use_blocker and block.release()
    if probe_queue then probe_queue() end
    stop:sync()
    local cpu1 = timer and timer.cpu1 or clock()
    if use_blocker and (broken_by or block.timed_out()) then
      return nil, held_failure(broken_by, cfg.blocking_timeout or 30)
    end
    return (stop - start) / 1000, cpu1 - cpu0
  end

  -- A group: `group` samples (flush, start event, fn, stop event each, with
  -- its own events) queued behind one blocker and waited for once. Returns
  -- the CPU seconds per sample (the group's, divided); nil, why as sample.
  local function sample_group()
    stream:sync()
    local cpu0 = clock()
    block.block()
    local starts, stops = events.starts, events.stops
    for i = 1, group do
      flush()
      stream:record(starts[i])
      fn(launch)
      stream:record(stops[i])
    end
    local broken_by = block.release()
    if probe_queue then probe_queue() end
    stops[group]:sync()
    local cpu = (clock() - cpu0) / group
    if broken_by or block.timed_out() then return nil, held_failure(broken_by, cfg.blocking_timeout or 30) end
    return cpu
  end

  -- warm-up: without the blocker (NVBench issue 240), the GPU time of the last run
  local warm_gpu = 0
  if not cfg.run_once then
    if block then block.block(); block.release(); stream:sync() end
    local t0 = clock()
    for _ = 1, math.max(cfg.warmup_runs or 1, 1) do
      warm_gpu = sample(false)
      if (cfg.max_warmup_walltime or -1) > 0 and clock() - t0 > cfg.max_warmup_walltime then break end
    end
    if (cfg.skip_time or -1) > 0 and warm_gpu < cfg.skip_time then
      result.skipped = skip_reason(warm_gpu, cfg.skip_time)
      return result
    end
  end

  local cap = 1024
  local gpu, cpu, clocks = array(cap), array(cap), watcher and array(cap) or nil
  local n, t_start, total_gpu, dropped = 0, clock(), 0.0, 0

  -- Whether the sample (or group) just taken counts: the throttle watch.
  local function counts(samples)
    if not watcher or watcher:check() then return true end
    result.warnings = result.warnings or {}
    result.warnings[#result.warnings + 1] = watcher:warning(n)
    dropped = dropped + samples - 1
    return false
  end
  -- Keeps one sample; returns whether the measurement is done.
  local function keep(g, c)
    n = n + 1
    if n > cap then
      for i = cap + 1, 2 * cap do gpu[i], cpu[i] = 0.0, 0.0; if clocks then clocks[i] = 0.0 end end
      cap = 2 * cap
    end
    gpu[n], cpu[n] = g, c
    if clocks then clocks[n] = watcher.last_clock or 0.0 end
    total_gpu = total_gpu + g
    criterion:add(g)
    return n >= cfg.min_samples and criterion:is_finished()
  end

  while true do
    local done = false
    if group > 1 then
      local c, why = sample_group()
      if not c then result.held_failure = why; return result end
      if counts(group) then
        local starts, stops = events.starts, events.stops
        for i = 1, group do
          done = keep((stops[i] - starts[i]) / 1000, c)
          if done then break end
        end
      end
    else
      local g, c = sample(blocking)
      if not g then result.held_failure = c; return result end
      if counts(1) then done = keep(g, c) end
    end
    if cfg.run_once or done then break end
    if clock() - t_start > cfg.timeout then result.max_time_exceeded = true; break end
  end
  result.n, result.gpu, result.cpu, result.clocks = n, gpu, cpu, clocks
  result.total_gpu, result.walltime = total_gpu, clock() - t_start
  result.discarded = watcher and watcher.discarded + dropped or 0
  result.mean_clock = watcher and watcher:mean_clock() or nil
  result.criterion = criterion
  -- (run.lua logs NVBench's "Warn: Cold: no accepted samples recorded in ...")
  if n == 0 then result.no_samples = ("no accepted samples recorded in %.2fs walltime"):format(result.walltime) end
  return result
end

-- cold_once behind the blocking kernel where it may hold the stream (not
-- for work that synchronizes, or that brackets its own region: it may wait
-- on the stream inside the bracket). A measurement whose hold broke or
-- timed out is taken again without the blocker, once, and says why in
-- result.warnings: no state is lost to a stall.
--
-- Under the ci criterion (or with cfg.cold_group > 1) the samples behind
-- the blocker come in groups of M.CI_GROUP: each still has the L2 flushed
-- before it and its own pair of events around fn alone, so its GPU time is
-- NVBench's; but the group is waited for once, its CPU time is the group's
-- (flushes included) divided by its samples, and the throttle watch reads
-- the clock once per group (a throttled group is dropped whole). The
-- blocking kernel holds the whole group while it is queued: it keeps the
-- host's queueing out of every sample's GPU time. Without the blocker (sync,
-- timer, run_once, disable_blocking_kernel) every sample is NVBench's.
function M.cold(fn, cfg)
  local blocking = cfg.blocking and not cfg.sync and not cfg.timer and not cfg.run_once
  local result = cold_once(fn, cfg, blocking)
  if result.held_failure then
    local why = result.held_failure
    result = cold_once(fn, cfg, false)
    cfg.unblocked = true
    result.warnings = result.warnings or {}
    table.insert(result.warnings, 1, why)
  end
  -- the batch takes at least as many launches as cold kept samples (NVBench's measure_hot)
  cfg.cold_samples = result.n
  return result
end

-- --- batch --------------------------------------------------------------------------

local function predict_batch(target, per_launch, least, fallback)
  if not (per_launch > 0) or per_launch ~= per_launch or target ~= target then return fallback end
  local n = math.ceil(target / per_launch)
  if n ~= n or n == math.huge then return fallback end
  return math.max(math.tointeger(n) or least, least)
end

-- Launches one graph replay carries under batched = "graph".
local GRAPH_LAUNCHES = 100

-- Captures count calls of fn(launch) on the stream into one graph. A replay
-- queues them all for about one launch's host cost, so that a batch of
-- kernels shorter than a launch measures the kernels, not the launcher.
local function capture(fn, launch, stream, count)
  stream:begin_capture()
  local ok, err = pcall(function() for _ = 1, count do fn(launch) end end)
  local ended, graph = pcall(stream.end_capture, stream)
  if ok and ended then return graph end
  if ended then graph:close() end
  error(("batched = \"graph\": the function could not be captured into a graph: %s"):format(
    tostring(ok and graph or err)), 0)
end

-- Queues fn(launch) batch-size times behind the blocker, as NVBench's hot
-- measurement does (cfg.graph: as replays of a graph of GRAPH_LAUNCHES
-- calls). Returns {n (launches), total_gpu, walltime, graph (launches a
-- replay), timed_out}.
function M.batch(fn, cfg)
  local dev, stream, launch, clock = cfg.dev, cfg.stream, cfg.launch, cfg.clock
  local start <close> = dev:create_event{timing = true}
  local stop <close> = dev:create_event{timing = true}
  -- no blocker where the cold measurement could not keep one
  local block = cfg.blocking and not cfg.unblocked and blocker(dev, stream, cfg.blocking_timeout or 30)
  local target, timeout = cfg.batch_target_time or 0.5, cfg.timeout
  local min_samples = math.max(cfg.min_samples, cfg.cold_samples or 0)
  -- the warm-up: one launch, timed, to estimate the batch
  local w0 = clock()
  stream:record(start)
  fn(launch)
  stream:record(stop)
  stop:sync()
  local wall_estimate, gpu_estimate = clock() - w0, (stop - start) / 1000
  local least = math.min(math.max(min_samples, 1), 4)
  local size = predict_batch(target, gpu_estimate * 0.95, least, min_samples)
  local cap = wall_estimate > 0 and math.max(predict_batch(timeout, wall_estimate, 1, size), 1) or size
  -- unit(launch) queues per_unit launches: fn itself, or a replay of its graph
  local per_unit = cfg.graph and math.min(math.max(size, 1), GRAPH_LAUNCHES) or 1
  local graph <close> = cfg.graph and capture(fn, launch, stream, per_unit) or nil
  local unit = graph and function() graph:launch(stream) end or fn
  local total, n, t0 = 0.0, 0, clock()
  local result = {graph = graph and per_unit or nil}
  while true do
    size = math.max(math.min(size, cap), 1)
    local units = (size + per_unit - 1) // per_unit
    local broken_by
    if block then
      block.block()
      stream:record(start)
      local held = math.min(units, 2)
      for _ = 1, held do unit(launch) end
      broken_by = block.release()
      for _ = held + 1, units do unit(launch) end
    else
      stream:record(start)
      for _ = 1, units do unit(launch) end
    end
    stream:record(stop)
    stop:sync()
    if block and (broken_by or block.timed_out()) then
      -- the batch again from the start, without the blocker (no state is lost to a stall)
      result.warnings = {held_failure(broken_by, cfg.blocking_timeout or 30)}
      block, total, n, t0 = nil, 0.0, 0, clock()
    else
      total, n = total + (stop - start) / 1000, n + units * per_unit
      if total >= target and n >= min_samples then break end
      local wall = clock() - t0
      if wall > timeout then result.max_time_exceeded = true; break end
      local per = total / n
      local remaining = target - total
      size = predict_batch(remaining, per, math.max(size * 2, least),
        remaining <= 0 and math.max(min_samples - n, 1) or min_samples)
      cap = predict_batch(timeout - wall, wall / n, 1, size)
    end
  end
  result.n, result.total_gpu, result.walltime = n, total, clock() - t0
  return result
end

-- --- cpu only -----------------------------------------------------------------------

-- Host time of fn(launch) per call (exec{timer = true}: fn(launch, timer),
-- the CPU time between its timer:start() and timer:stop()). As NVBench's:
-- one warm-up call (none with run_once), skipped under skip_time.
function M.cpu_only(fn, cfg)
  local launch, clock = cfg.launch, cfg.clock
  local criterion = criteria.new(cfg.criterion, cfg.params)
  local timer = cfg.timer and setmetatable({clock = clock, cpu0 = 0, cpu1 = 0, started = false, stopped = false},
    CpuTimer) or nil
  local result = {n = 0}
  -- the CPU seconds of one call
  local function call()
    if timer then
      timed_call(fn, launch, timer)
      return timer.cpu1 - timer.cpu0
    end
    local c0 = clock()
    fn(launch)
    return clock() - c0
  end
  if not cfg.run_once then
    local warm = call()
    if (cfg.skip_time or -1) > 0 and warm < cfg.skip_time then
      result.skipped = skip_reason(warm, cfg.skip_time)
      return result
    end
  end
  local cap = 1024
  local cpu = array(cap)
  local n, t_start, total = 0, clock(), 0.0
  while true do
    local c = call()
    n = n + 1
    if n > cap then
      for i = cap + 1, 2 * cap do cpu[i] = 0.0 end
      cap = 2 * cap
    end
    cpu[n], total = c, total + c
    criterion:add(c)
    if cfg.run_once then break end
    if n >= cfg.min_samples and criterion:is_finished() then break end
    if clock() - t_start > cfg.timeout then result.max_time_exceeded = true; break end
  end
  result.n, result.cpu, result.total_cpu, result.walltime = n, cpu, total, clock() - t_start
  result.criterion = criterion
  return result
end

-- --- cudalua's summaries ------------------------------------------------------------

local function add(list, tag, name, hint, t, value, hide, description)
  list[#list + 1] = {tag = tag, name = name, hint = hint, type = t, value = value, hide = hide,
    description = description}
end

-- The interval of the mean a result has: the ci criterion's own, or one
-- made from the samples at 95% (nil below 128 samples or while the
-- batches still look correlated).
function M.interval(result, samples)
  local c = result.criterion
  if c and c.name == "ci" then return c:interval() end
  return stats.interval(samples, result.n, 0.95)
end

-- Adds cudalua's summaries of a measurement to list (after NVBench's;
-- kind "cold" or "cpu_only"): the confidence interval of the mean,
-- cudalua/cold/time/gpu/mean/{ci_lo, ci_hi, ci_relative, ci_confidence,
-- ci_batches} (cudalua/cpu_only/time/cpu/mean/... for cpu-only work), all
-- hidden but ci_relative, the "CI" column, under the ci criterion; and,
-- under ci, the median with its interval (sectioning, as many sections as
-- batches): .../time/gpu/median/{value, ci_lo, ci_hi}, hidden. Nothing for a
-- result without samples.
function M.summaries(result, list, kind)
  if (result.n or 0) == 0 or result.no_samples then return list end
  local samples = kind == "cpu_only" and result.cpu or result.gpu
  local what = kind == "cpu_only" and "cpu_only/time/cpu" or "cold/time/gpu"
  local clock = kind == "cpu_only" and "CPU" or "GPU"
  local iv = M.interval(result, samples)
  if not iv then return list end
  local under_ci = result.criterion and result.criterion.name == "ci"
  local prefix = "cudalua/" .. what .. "/mean/"
  local hidden = "Hidden by default."
  add(list, prefix .. "ci_lo", "CI Low", "duration", "float64", iv.lo, hidden,
    ("Lower end of the confidence interval of the mean %s time (batch means)"):format(clock))
  add(list, prefix .. "ci_hi", "CI High", "duration", "float64", iv.hi, hidden,
    ("Upper end of the confidence interval of the mean %s time (batch means)"):format(clock))
  add(list, prefix .. "ci_relative", "CI", "percentage", "float64", iv.mean ~= 0 and iv.half / math.abs(iv.mean) or 0.0,
    not under_ci and hidden or nil, "Half-width of the confidence interval relative to the mean")
  add(list, prefix .. "ci_confidence", "Confidence", "percentage", "float64", iv.confidence, hidden,
    "Confidence of the interval")
  add(list, prefix .. "ci_batches", "Batches", "sample_size", "int64", iv.batches, hidden,
    ("Batches of %d samples the interval was made from"):format(iv.batch_size))
  if under_ci then
    local median, lo, hi = stats.median_interval(samples, result.n, iv.batches, iv.confidence)
    if median then
      local mprefix = "cudalua/" .. what .. "/median/"
      add(list, mprefix .. "value", "Median", "duration", "float64", median, hidden, ("Median %s time"):format(clock))
      add(list, mprefix .. "ci_lo", "Median CI Low", "duration", "float64", lo, hidden,
        "Lower end of the confidence interval of the median (sectioning)")
      add(list, mprefix .. "ci_hi", "Median CI High", "duration", "float64", hi, hidden,
        "Upper end of the confidence interval of the median (sectioning)")
    end
  end
  return list
end

M.throttle = throttle
return M
