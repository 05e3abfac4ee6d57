-- cuda.bench.stats: confidence intervals for the mean of correlated samples (batch means).
-- SPDX-License-Identifier: MIT
--
-- Successive GPU samples are not independent: the clock, the memory
-- system and the host drift, so a slow sample tends to follow a slow one.
-- The i.i.d. interval mean +- t * s / sqrt(n) is then too narrow (by
-- sqrt((1 + rho) / (1 - rho)) for an AR(1) process of lag-1 correlation
-- rho: 4.4 times at rho = 0.9). Batch means fix this: the samples, in
-- their order, are cut into k contiguous batches of b; when b is long
-- beside the correlation the batch means are nearly independent, and
--
--   mean +- t(k - 1, (1 + confidence) / 2) * sqrt(V / n),
--   V = b * (the variance of the batch means)
--
-- covers the true mean at the stated rate. V(b) approaches the variance
-- the mean really has (n times it) from below as b grows, the gap shrinking
-- like 1/b; so V is taken at b = B and raised by what it last grew by,
-- V(B/2) - V(B/4) when that is positive (under the 1/b law twice the gap
-- that is left, before it about the gap: the correction errs wide).
--
-- M.batches() keeps the batches in a fixed array of SLOTS sums: a sample
-- joins the open batch; a full batch takes the next slot; when the slots
-- are full, neighbours merge pairwise and the batch size doubles. So :add
-- is O(1) (amortised: a merge is SLOTS/2 additions every SLOTS/2 batches)
-- and allocates nothing, however many samples come.
--
-- :interval(t, out) takes B as the slots' size times the largest power of
-- two m >= 4 that leaves k >= BATCHES batches (so 32 <= k < 64), once
-- the batches look long enough for their correlation: their means pass
-- a test of independence (a lag-1 correlation at most z / sqrt(k), as
-- Fishman's LBATCH does) and V has nearly stopped growing (the
-- correction at most FLAT of V). Otherwise there is no interval yet: too
-- few samples for their correlation, and the criterion waits for more
-- (the slots merge, B doubles). So there is none below 4 * 32 = 128
-- samples: work slower than the timeout / 128 should stop on stdrel.
--
-- Synthetic AR(1) runs with heavy tails (t/bench_ci.t) stopped by the ci
-- criterion cover the mean in 94 to 95.5% of runs at 95% (rho 0 to 0.9)
-- and 79 to 81% at 80%; an i.i.d. interval at the same counts covers 35%
-- (rho 0.9) to 70% (rho 0.5).
local M = {}

M.SLOTS = 512          -- batch sums kept (even)
M.BATCHES = 32         -- fewest batches of an interval
-- The lag-1 correlation a batch size may keep: z / sqrt(k), z the
-- one-sided 90% normal quantile (independent batch means have a lag-1
-- correlation of about N(-1/k, 1/k)).
M.INDEPENDENCE_Z = 1.2816
-- The largest correction V may take, relative to it: past this, V is
-- still growing and the batches are too short.
M.FLAT = 0.2
-- The largest k an interval is made from (the t table's length).
M.MAX_BATCHES = 2 * M.BATCHES - 1

-- --- argument checks (the public functions: a bad argument is named, never a hang) ----

local function arg_error(i, fname, want, got)
  error(("bad argument #%d to '%s' (%s expected, got %s)"):format(i, fname, want, tostring(got)), 3)
end
local function check_open01(i, fname, v)
  if type(v) ~= "number" or not (v > 0 and v < 1) then arg_error(i, fname, "a number between 0 and 1", v) end
end
local function check_positive(i, fname, v)
  if type(v) ~= "number" or not (v > 0 and v < math.huge) then arg_error(i, fname, "a finite number > 0", v) end
end
local function check_count(i, fname, v, least, most)
  if math.type(v) ~= "integer" or v < least or v > most then
    arg_error(i, fname, ("an integer in %d..%d"):format(least, most), v)
  end
end
local function check_samples(fname, samples, n)
  if type(samples) ~= "table" then arg_error(1, fname, "a table of samples", type(samples)) end
  check_count(2, fname, n, 0, math.maxinteger)
  for i = 1, n do
    if type(samples[i]) ~= "number" then arg_error(1, fname, ("a number at %d"):format(i), type(samples[i])) end
  end
end

-- --- Student's t --------------------------------------------------------------------

local TINY = 1e-300
local function not_tiny(x) return math.abs(x) < TINY and TINY or x end

-- The continued fraction of the regularized incomplete beta function
-- (modified Lentz), converging for x < (a + 1) / (a + b + 2).
local function beta_fraction(a, b, x)
  local c, d = 1.0, 1 / not_tiny(1 - (a + b) * x / (a + 1))
  local h = d
  for m = 1, 300 do
    local m2 = 2 * m
    local even = m * (b - m) * x / ((a + m2 - 1) * (a + m2))
    d, c = 1 / not_tiny(1 + even * d), not_tiny(1 + even / c)
    h = h * d * c
    local odd = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))
    d, c = 1 / not_tiny(1 + odd * d), not_tiny(1 + odd / c)
    h = h * d * c
    if math.abs(d * c - 1) < 1e-15 then break end
  end
  return h
end

-- log Gamma(x) for x > 0: Stirling's series past 15 (its next term is under
-- 1e-13 there), reached by Gamma(x) = Gamma(x + 1) / x.
local function log_gamma(x)
  local shift = 0.0
  while x < 15 do shift, x = shift + math.log(x), x + 1 end
  local x2 = x * x
  local series = (1 / 12 - (1 / 360 - (1 / 1260 - 1 / (1680 * x2)) / x2) / x2) / x
  return (x - 0.5) * math.log(x) - x + 0.5 * math.log(2 * math.pi) + series - shift
end

-- The regularized incomplete beta function I_x(a, b), a, b > 0.
local function incomplete_beta(x, a, b)
  if x <= 0 then return 0.0 end
  if x >= 1 then return 1.0 end
  local front = math.exp(log_gamma(a + b) - log_gamma(a) - log_gamma(b) + a * math.log(x) + b * math.log(1 - x))
  if x < (a + 1) / (a + b + 2) then return front * beta_fraction(a, b, x) / a end
  return 1 - front * beta_fraction(b, a, 1 - x) / b
end

function M.incomplete_beta(x, a, b)
  if type(x) ~= "number" or x ~= x then arg_error(1, "incomplete_beta", "a number", x) end
  check_positive(2, "incomplete_beta", a)
  check_positive(3, "incomplete_beta", b)
  return incomplete_beta(x, a, b)
end

-- P(T <= t) for Student's t with dof degrees of freedom.
local function t_cdf(t, dof)
  local tail = 0.5 * incomplete_beta(dof / (dof + t * t), dof / 2, 0.5)
  return t >= 0 and 1 - tail or tail
end

function M.t_cdf(t, dof)
  if type(t) ~= "number" or t ~= t then arg_error(1, "t_cdf", "a number", t) end
  check_positive(2, "t_cdf", dof)
  return t_cdf(t, dof)
end

-- The p-quantile (0 < p < 1) of Student's t with dof degrees of freedom,
-- by bisection of the CDF (to about 1e-12).
local function t_quantile(p, dof)
  if p == 0.5 then return 0.0 end
  if p < 0.5 then return -t_quantile(1 - p, dof) end
  local lo, hi = 0.0, 1.0
  while t_cdf(hi, dof) < p do
    lo, hi = hi, hi * 2
    if hi > 1e300 then return math.huge end
  end
  for _ = 1, 200 do
    local mid = (lo + hi) / 2
    if t_cdf(mid, dof) < p then lo = mid else hi = mid end
    if hi - lo <= 1e-12 * hi then break end
  end
  return (lo + hi) / 2
end

function M.t_quantile(p, dof)
  check_open01(1, "t_quantile", p)
  check_positive(2, "t_quantile", dof)
  return t_quantile(p, dof)
end

-- The density of Student's t.
local function t_density(t, dof)
  return math.exp(log_gamma((dof + 1) / 2) - log_gamma(dof / 2) - 0.5 * math.log(dof * math.pi)
    - (dof + 1) / 2 * math.log(1 + t * t / dof))
end

-- The two-sided critical values t(dof, (1 + confidence) / 2), dof = 1..max,
-- by Newton's method from 0: the CDF is concave right of 0, so the steps
-- rise to the root and never past it. Made once per confidence and kept.
local t_tables = {}
M.MAX_TABLE = 10000
function M.t_table(confidence, max)
  check_open01(1, "t_table", confidence)
  max = max or M.MAX_BATCHES
  check_count(2, "t_table", max, 1, M.MAX_TABLE)
  local t = t_tables[confidence]
  if t and #t >= max then return t end
  local p = (1 + confidence) / 2
  t = {}
  for dof = 1, max do
    local x = 0.0
    for _ = 1, 200 do
      local step = (p - t_cdf(x, dof)) / t_density(x, dof)
      x = x + step
      if step <= 1e-12 * x then break end
    end
    t[dof] = x
  end
  t_tables[confidence] = t
  return t
end

-- --- batch means ----------------------------------------------------------------------

local Batches = {}
Batches.__index = Batches

-- A fresh accumulator (the only allocation: its SLOTS sums).
function M.batches()
  local sums = {}
  for i = 1, M.SLOTS do sums[i] = 0.0 end
  return setmetatable({sums = sums, full = 0, size = 1, open_sum = 0.0, open_n = 0, n = 0, total = 0.0}, Batches)
end

function Batches:add(x)
  self.n, self.total = self.n + 1, self.total + x
  local open_n, open_sum = self.open_n + 1, self.open_sum + x
  if open_n < self.size then
    self.open_n, self.open_sum = open_n, open_sum
    return
  end
  local full, sums = self.full + 1, self.sums
  sums[full] = open_sum
  self.open_n, self.open_sum = 0, 0.0
  if full == M.SLOTS then
    local half = M.SLOTS // 2
    for i = 1, half do sums[i] = sums[2 * i - 1] + sums[2 * i] end
    full, self.size = half, self.size * 2
  end
  self.full = full
end

function Batches:mean() return self.n > 0 and self.total / self.n or 0 / 0 end

-- V(merge * size) (the variance of the k means of `merge` slots each,
-- times their length) and their lag-1 correlation, in one pass over the
-- slots; the values are taken less the first batch's, so that nothing
-- cancels however close they lie.
function Batches:level(merge, k)
  local sums, length = self.sums, merge * self.size
  local shift, s1, s2, lag, first, prev = nil, 0.0, 0.0, 0.0, 0.0, 0.0
  for j = 1, k do
    local s = 0.0
    for i = (j - 1) * merge + 1, j * merge do s = s + sums[i] end
    local y = s / length
    shift = shift or y
    y = y - shift
    s1, s2 = s1 + y, s2 + y * y
    if j > 1 then lag = lag + y * prev else first = y end
    prev = y
  end
  local mean = s1 / k
  local squares = s2 - k * mean * mean
  if squares <= 0 then return 0.0, 0.0 end
  -- sum over j >= 2 of (y_j - mean)(y_{j-1} - mean)
  local cross = lag - mean * ((s1 - first) + (s1 - prev)) + (k - 1) * mean * mean
  return squares / (k - 1) * length, cross / squares
end

-- The interval of the mean: fields mean, lo, hi, half (absolute half-width),
-- batches and batch_size set in out (a table the caller keeps), or nil when
-- there is none yet. t: the t_table of the confidence.
function Batches:interval(t, out)
  local full = self.full
  if full < 4 * M.BATCHES then return nil end
  local m = 4
  while full // (2 * m) >= M.BATCHES do m = 2 * m end
  local k = full // m
  local v, r1 = self:level(m, k)
  if r1 > M.INDEPENDENCE_Z / math.sqrt(k) then return nil end
  local grew = self:level(m // 2, full // (m // 2)) - self:level(m // 4, full // (m // 4))
  if grew > M.FLAT * v then return nil end
  if grew > 0 then v = v + grew end
  local mean = self:mean()
  local half = t[k - 1] * math.sqrt(v / self.n)
  out.mean, out.lo, out.hi, out.half, out.batches, out.batch_size = mean, mean - half, mean + half, half, k, m * self.size
  return out
end

-- The interval of samples[1..n] (a fresh accumulator fed in order), or nil.
function M.interval(samples, n, confidence)
  check_samples("interval", samples, n)
  check_open01(3, "interval", confidence)
  local b = M.batches()
  for i = 1, n do b:add(samples[i]) end
  return b:interval(M.t_table(confidence), {confidence = confidence})
end

-- --- the median's interval, at the end --------------------------------------------------

local function median_of(a, first, last)
  local part = table.move(a, first, last, 1, {})
  table.sort(part)
  local n = #part
  return n % 2 == 1 and part[(n + 1) // 2] or (part[n // 2] + part[n // 2 + 1]) / 2
end

-- The median of samples[1..n] and its interval by sectioning: the samples
-- cut into `sections` contiguous runs (as many as the mean's batches);
-- the median of all of them +- t * sd(the runs' medians) / sqrt(sections).
-- Made once at the end (it sorts copies), never in the sample loop.
-- Returns median, lo, hi; nil when sections < 2 or n < sections.
function M.median_interval(samples, n, sections, confidence)
  check_samples("median_interval", samples, n)
  check_count(3, "median_interval", sections, 1, math.maxinteger)
  check_open01(4, "median_interval", confidence)
  if sections < 2 or n < sections then return nil end
  local median = median_of(samples, 1, n)
  local run = n // sections
  local medians, sum = {}, 0.0
  for j = 1, sections do
    medians[j] = median_of(samples, (j - 1) * run + 1, j * run)
    sum = sum + medians[j]
  end
  local mean, squares = sum / sections, 0.0
  for j = 1, sections do squares = squares + (medians[j] - mean) ^ 2 end
  local half = t_quantile((1 + confidence) / 2, sections - 1) * math.sqrt(squares / (sections - 1) / sections)
  return median, median - half, median + half
end

return M
