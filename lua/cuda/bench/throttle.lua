-- cuda.bench.throttle: samples taken while the GPU throttled are discarded (as NVBench does).
-- SPDX-License-Identifier: MIT
--
-- A watcher reads the SM clock through a clock source after each sample and
-- says whether the sample counts: below threshold x the maximum clock it is
-- discarded, and the run sleeps for the recovery delay before the next. As
-- NVBench's: from the fourth discard in a row the delay grows by
-- min(1.5 x itself, 0.5 s) at each, and stays grown for the rest of the
-- measurement. The clock source is a table
--   {max = MHz, read = function() return MHz (or nil: no reading) end,
--    name = "nvml" | "probe" | ...}
-- so that tests can inject one; M.source(dev) picks NVML (cuda.system) when
-- it is there, else a clock probe of the device (a kernel that reads
-- clock64 and %globaltimer; see bench_measure).
local M = {}

M.DEFAULT_THRESHOLD = 0.75     -- of the maximum SM clock
M.DEFAULT_RECOVERY_DELAY = 0.05 -- seconds

local Watcher = {}
Watcher.__index = Watcher

-- A watcher over source; opts.threshold, opts.recovery_delay, opts.sleep
-- (function(seconds), default cuda.sleep or a busy wait).
function M.watcher(source, opts)
  opts = opts or {}
  return setmetatable({
    source = source, threshold = opts.threshold or M.DEFAULT_THRESHOLD,
    recovery_delay = opts.recovery_delay or M.DEFAULT_RECOVERY_DELAY,
    sleep = opts.sleep or M.sleep, discarded = 0, in_a_row = 0, last_clock = nil,
    clock_sum = 0.0, clock_n = 0, delay = nil,
  }, Watcher)
end

-- The growth of the delay per discard past GROW_AFTER in a row, at most GROW_MAX.
local GROW_AFTER, GROW_FACTOR, GROW_MAX = 2, 1.5, 0.5

-- After a sample: true when it counts, false when it was taken throttled
-- (the caller drops it; the watcher has slept out the recovery delay).
function Watcher:check()
  local source = self.source
  if not source then return true end
  local mhz = source.read()
  self.last_clock = mhz
  if not mhz or not source.max or source.max <= 0 or mhz >= self.threshold * source.max then
    self.in_a_row = 0
    if mhz then self.clock_sum, self.clock_n = self.clock_sum + mhz, self.clock_n + 1 end
    return true
  end
  -- Throttling that persists: wait longer each time, as NVBench's dynamic delay.
  local delay = self.delay or self.recovery_delay
  if self.in_a_row > GROW_AFTER then delay = delay + math.min(delay * GROW_FACTOR, GROW_MAX) end
  self.delay = delay
  self.discarded, self.in_a_row = self.discarded + 1, self.in_a_row + 1
  if delay > 0 then self.sleep(delay) end
  return false
end

-- The delay the last discard slept (seconds).
function Watcher:last_delay() return self.delay or self.recovery_delay end

-- NVBench's Warn text for the last discard (a string: made only when a
-- sample was discarded). sample: the samples kept so far.
function Watcher:warning(sample)
  local mhz, max = self.last_clock or 0, self.source and self.source.max or 0
  return ("GPU throttled below threshold (%.2f MHz / %.2f MHz) (%.0f%% < %.0f%%) on sample %d. Discarding "
    .. "previous trial and pausing for %.3fs."):format(mhz, max, max > 0 and 100 * mhz / max or 0,
    100 * self.threshold, sample, self:last_delay())
end

-- The mean SM clock (MHz) over the kept samples, or nil.
function Watcher:mean_clock()
  return self.clock_n > 0 and self.clock_sum / self.clock_n or nil
end

-- Sleeps for s seconds: cuda.sleep where there is one, else a busy wait on cuda.clock.
function M.sleep(s)
  local cuda = require "cuda"
  if cuda.sleep then return cuda.sleep(s) end
  local t0 = cuda.clock()
  while cuda.clock() - t0 < s do end
end

-- The NVML clock source of dev, or nil and why not (cuda.system absent,
-- not available, or without that device).
function M.nvml_source(dev)
  local cuda = require "cuda"
  local system = cuda.system
  if not (system and system.is_available) then return nil, "cuda.system is not built in" end
  local ok, why = system.is_available()
  if not ok then return nil, why end
  local got, nd = pcall(system.Device, dev.id)
  if not got then return nil, tostring(nd) end
  local okmax, max = pcall(nd.max_clock, nd, "sm")
  if not okmax or not max then return nil, "NVML gives no maximum SM clock" end
  return {name = "nvml", max = max, device = nd, read = function()
    local okc, mhz = pcall(nd.clock, nd, "sm")
    return okc and mhz or nil
  end}
end

return M
