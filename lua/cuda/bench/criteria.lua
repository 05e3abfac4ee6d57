-- cuda.bench.criteria: when a cold measurement has enough samples (NVBench's stopping criteria).
-- SPDX-License-Identifier: MIT
--
-- A criterion is made once per measured state, fed every kept sample (the
-- GPU time in seconds) through :add(x) and asked :is_finished() after each.
-- Both are O(1) and allocate nothing, so they can sit in the sample loop:
--
--   stdrel        the relative standard deviation of the samples ("noise")
--                 is below max-noise (0.005) once min-time (0.5 s) of GPU
--                 time is accumulated; or the noise has settled (the last
--                 512 estimates have a standard deviation under 5% of
--                 their mean, checked every 16th sample past 64 of them),
--                 for work that is noisier than max-noise can ever be; or
--                 64 estimates in a row could not be made (a mean <= 0),
--                 as NVBench 0.3.0's.
--   entropy       the entropy of the samples' distribution has stopped
--                 growing: over its last 299 values the regression line is
--                 flatter than max-angle (0.048 degrees) and fits with an R^2
--                 of at least min-r2 (0.36).
--   sample_count  sample-count samples (100) are taken.
--   ci            (cudalua's) the confidence interval of the mean, at
--                 confidence (0.95), is at most max-width (0.005) of the
--                 mean either side: the answer is known to +-0.5%. The
--                 interval holds for correlated samples (batch means,
--                 cuda.bench.stats: none below 128 samples); it is
--                 checked every max(16, n/32) samples and must be narrow
--                 enough at two checks in a row (stopping the first time a
--                 noisy estimate dips would cover the mean less often than
--                 stated). For cpu-only work, the CPU time's.
--
-- min-samples and the timeout are the runner's (they apply to any criterion).
local stats = require "cuda.bench.stats"

local M = {}

-- The parameters each criterion has, with their defaults.
M.PARAMS = {
  stdrel = {["max-noise"] = 0.005, ["min-time"] = 0.5},
  entropy = {["max-angle"] = 0.048, ["min-r2"] = 0.36},
  sample_count = {["sample-count"] = 100},
  ci = {["max-width"] = 0.005, ["confidence"] = 0.95},
}
M.NAMES = {"stdrel", "entropy", "sample_count", "ci"}

-- Parameters whose range is narrower than a number >= 0: the check, and
-- what it asks for.
local RANGES = {
  ["max-width"] = {function(v) return v > 0 and v < math.huge end, "a number > 0 (the relative half-width)"},
  ["confidence"] = {function(v) return v > 0 and v < 1 end, "a number between 0 and 1 (exclusive)"},
}

-- Fewer samples than this give no noise estimate (NVBench: 5).
M.MIN_SAMPLES_FOR_NOISE = 5

local STDREL_WINDOW, ENTROPY_WINDOW = 512, 299
-- stdrel: invalid noise estimates in a row that end the measurement
-- (NVBench's invalid_noise_estimate_limit), and the stability rule's window.
local INVALID_NOISE_LIMIT, STABILITY_MIN, STABILITY_EVERY, STABILITY_SPREAD = 64, 64, 16, 0.05

-- --- a ring of the last n numbers, with running sums ----------------------------
local Ring = {}
Ring.__index = Ring

local function ring(size)
  local values = {}
  for i = 1, size do values[i] = 0.0 end
  return setmetatable({size = size, values = values, count = 0, next = 1}, Ring)
end

function Ring:push(x)
  local old = self.values[self.next]
  self.values[self.next] = x
  self.next = self.next % self.size + 1
  if self.count < self.size then self.count = self.count + 1; return nil end
  return old
end

-- The value pushed last.
function Ring:last()
  return self.values[(self.next - 2) % self.size + 1]
end

-- --- the running mean and variance (stdrel's, and ci's for its noise) --------------

-- Welford's update of self.n, self.mean, self.m2: no cancellation however
-- many samples. Returns the new count.
local function welford(self, x)
  local n = self.n + 1
  self.n = n
  local delta = x - self.mean
  self.mean = self.mean + delta / n
  self.m2 = self.m2 + delta * (x - self.mean)
  return n
end

-- The current relative standard deviation, or math.huge below 5 samples.
local function relative_stdev(self)
  if self.n < M.MIN_SAMPLES_FOR_NOISE or self.mean <= 0 then return math.huge end
  return math.sqrt(self.m2 / (self.n - 1)) / self.mean
end

-- --- stdrel -----------------------------------------------------------------------
local Stdrel = {}
Stdrel.__index = Stdrel
Stdrel.noise = relative_stdev

function Stdrel:add(x)
  local n = welford(self, x)
  self.total = self.total + x
  if n < M.MIN_SAMPLES_FOR_NOISE then return end
  local mean = self.mean
  local noise = mean > 0 and mean < math.huge and math.sqrt(self.m2 / (n - 1)) / mean or 0 / 0
  if noise == noise and noise < math.huge then
    self.invalid = 0
    self.noise_ring:push(noise)
  else
    self.invalid = self.invalid + 1
  end
end

-- Whether the recorded noise estimates have settled: their variance (over
-- the window, divided by its length) is below (5% of their mean)^2.
-- Checked every 16th sample, past 64 estimates.
function Stdrel:noise_settled()
  local r = self.noise_ring
  if r.count <= STABILITY_MIN or self.n % STABILITY_EVERY ~= 0 then return false end
  local sum, squares = 0.0, 0.0
  for i = 1, r.count do sum = sum + r.values[i] end
  local mean = sum / r.count
  for i = 1, r.count do squares = squares + (r.values[i] - mean) ^ 2 end
  local variance = squares / r.count
  return variance < math.huge and variance < (STABILITY_SPREAD * mean) ^ 2
end

function Stdrel:is_finished()
  if self.invalid >= INVALID_NOISE_LIMIT then return true end
  if self.total <= self.params["min-time"] or self.noise_ring.count == 0 or self.invalid ~= 0 then return false end
  if self.noise_ring:last() < self.params["max-noise"] then return true end
  return self:noise_settled()
end

-- --- entropy ------------------------------------------------------------------------
local Entropy = {}
Entropy.__index = Entropy

local LOG2 = math.log(2)
local function xlog2x(c) return c > 0 and c * math.log(c) / LOG2 or 0.0 end

-- The window's regression sums: y by absolute index i (x = i - first).
function Entropy:push_entropy(h)
  local i = self.pushed
  self.pushed = i + 1
  local old = self.ring:push(h)
  self.sy, self.syy, self.siy = self.sy + h, self.syy + h * h, self.siy + i * h
  if old then
    local j = i - self.ring.size
    self.sy, self.syy, self.siy = self.sy - old, self.syy - old * old, self.siy - j * old
  end
end

function Entropy:add(x)
  local n = self.n + 1
  self.n = n
  local c = (self.counts[x] or 0) + 1
  self.counts[x] = c
  -- sum of c*log2(c) over the distinct values, updated for the one that grew
  self.s = self.s - xlog2x(c - 1) + xlog2x(c)
  self:push_entropy(math.log(n) / LOG2 - self.s / n)
end

-- slope (per sample), r2 of the window's least-squares line.
function Entropy:regression()
  local k = self.ring.count
  local first = self.pushed - k
  local mean_x, mean_y = (k - 1) / 2, self.sy / k
  local sxx = k * (k * k - 1) / 12
  local sxy = (self.siy - first * self.sy) - k * mean_x * mean_y
  local syy = self.syy - k * mean_y * mean_y
  local slope = sxy / sxx
  if syy <= 1e-300 then return slope, 1.0 end
  return slope, 1 - (syy - slope * sxy) / syy
end

function Entropy:is_finished()
  if self.ring.count < 2 or self.n % 2 ~= 0 then return false end
  local slope, r2 = self:regression()
  if math.deg(math.atan(slope)) > self.params["max-angle"] then return false end
  return r2 >= self.params["min-r2"]
end

function Entropy:noise() return math.huge end

-- --- sample_count -------------------------------------------------------------------
local Count = {}
Count.__index = Count
function Count:add() self.n = self.n + 1 end
function Count:is_finished() return self.n >= self.params["sample-count"] end
function Count:noise() return math.huge end

-- --- ci -----------------------------------------------------------------------------------
local Ci = {}
Ci.__index = Ci

-- the relative standard deviation, for the timeout warning, as stdrel's
Ci.noise = relative_stdev

function Ci:add(x)
  welford(self, x)
  self.batches:add(x)
  self.stdrel:add(x)
end

-- Whether the interval is narrow enough now: every max(16, n/32) samples,
-- and then only the second time in a row. Samples that never look
-- independent at any batch length (a drift) give no interval: ci then
-- stops where stdrel with its defaults would (self.gave_up), so it never
-- runs longer than NVBench's criterion, and claims no interval.
function Ci:is_finished()
  local n = self.n
  if self.stdrel:is_finished() and not self.batches:interval(self.t, self.found) then
    self.gave_up = true
    return true
  end
  if n < self.next_check then return false end
  self.next_check = n + math.max(16, n // 32)
  local iv = self.batches:interval(self.t, self.found)
  self.last = iv
  local narrow = iv ~= nil and iv.half <= self.params["max-width"] * math.abs(iv.mean)
  local finished = narrow and self.narrow
  self.narrow = narrow
  return finished
end

-- The interval of the mean ({mean, lo, hi, half, relative, confidence,
-- batches, batch_size}) as it stands, or nil while there is none.
function Ci:interval()
  local iv = self.batches:interval(self.t, self.found)
  if iv then iv.relative = iv.mean ~= 0 and iv.half / math.abs(iv.mean) or 0.0 end
  return iv
end

-- --- construction -------------------------------------------------------------------

-- The parameters of criterion name: its defaults, overridden by those of
-- params that it has (others are ignored, as NVBench's set_from does).
function M.params(name, params)
  local defaults = M.PARAMS[name]
  if not defaults then
    error(("unknown stopping criterion '%s' (known: %s)"):format(tostring(name), table.concat(M.NAMES, ", ")), 2)
  end
  local p = {}
  for k, v in pairs(defaults) do
    local given = params and params[k]
    if given ~= nil then
      local range = RANGES[k]
      if type(given) ~= "number" or given ~= given or (range and not range[1](given)) or (not range and given < 0) then
        error(("criterion parameter '%s' must be %s, got %s"):format(k, range and range[2] or "a number >= 0",
          tostring(given)), 2)
      end
      p[k] = given
    else
      p[k] = v
    end
  end
  return p
end

-- A fresh criterion: name is "stdrel", "entropy", "sample_count" or "ci".
function M.new(name, params)
  local p = M.params(name, params)
  if name == "ci" then
    return setmetatable({name = name, params = p, n = 0, mean = 0.0, m2 = 0.0, batches = stats.batches(),
      t = stats.t_table(p.confidence), next_check = 0, narrow = false, found = {confidence = p.confidence},
      last = nil, gave_up = false, stdrel = M.new("stdrel")}, Ci)
  elseif name == "stdrel" then
    return setmetatable({name = name, params = p, n = 0, total = 0.0, mean = 0.0, m2 = 0.0, invalid = 0,
      noise_ring = ring(STDREL_WINDOW)}, Stdrel)
  elseif name == "entropy" then
    return setmetatable({name = name, params = p, n = 0, counts = {}, s = 0.0, pushed = 0,
      sy = 0.0, syy = 0.0, siy = 0.0, ring = ring(ENTROPY_WINDOW)}, Entropy)
  end
  return setmetatable({name = name, params = p, n = 0}, Count)
end

return M
