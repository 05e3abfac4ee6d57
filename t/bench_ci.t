-- cuda.bench's ci criterion and its statistics (cuda.bench.stats): Student's
-- t against closed forms and tables, the batch-means accumulator against
-- the raw samples, and the interval's coverage over hundreds of synthetic
-- runs with a known mean, correlation (AR(1)) and heavy tails, where an
-- i.i.d. interval visibly fails; then how soon it stops beside stdrel, and
-- stdrel's NVBench 0.3.0 rules (the 64-invalid limit, the stability rule).
-- Pure Lua: no driver.
local t = require "tap"
local stats = require "cuda.bench.stats"
local criteria = require "cuda.bench.criteria"

t.seed()

-- --- Student's t -------------------------------------------------------------------
-- closed forms: dof 1 is Cauchy, dof 2 has F(t) = 1/2 + t / (2 sqrt(2 + t^2))
local worst1, worst2 = 0, 0
for _ = 1, 200 do
  local x = (math.random() - 0.5) * 40
  worst1 = math.max(worst1, math.abs(stats.t_cdf(x, 1) - (0.5 + math.atan(x) / math.pi)))
  worst2 = math.max(worst2, math.abs(stats.t_cdf(x, 2) - (0.5 + x / (2 * math.sqrt(2 + x * x)))))
end
t.ok(worst1 < 1e-12, ("t_cdf, 1 dof: the Cauchy CDF at 200 random points (worst %.2g)"):format(worst1))
t.ok(worst2 < 1e-12, ("t_cdf, 2 dof: its closed form at 200 random points (worst %.2g)"):format(worst2))
-- quantiles: closed forms for 1 and 2 dof at random p, printed tables beyond
local qworst = 0
for _ = 1, 50 do
  local p = 0.5 + 0.4999 * math.random()
  local conf = 2 * p - 1
  local table_t = stats.t_table(conf, 2)
  qworst = math.max(qworst, math.abs(table_t[1] / math.tan(math.pi * (p - 0.5)) - 1),
    math.abs(table_t[2] / ((2 * p - 1) / math.sqrt(2 * p * (1 - p))) - 1),
    math.abs(stats.t_quantile(p, 2) / ((2 * p - 1) / math.sqrt(2 * p * (1 - p))) - 1))
end
-- 1e-8: near p = 1 the closed forms' own rounding (1 - p, tan near pi/2) reaches 2e-10
t.ok(qworst < 1e-8, ("t quantiles, 1 and 2 dof: closed forms at 50 random confidences (worst %.2g)"):format(qworst))
local printed = {{0.975, 5, 2.570582}, {0.975, 10, 2.228139}, {0.975, 30, 2.042272}, {0.995, 20, 2.845340},
                 {0.95, 63, 1.669402}, {0.975, 120, 1.979930}}
local pworst = 0
for _, row in ipairs(printed) do
  pworst = math.max(pworst, math.abs(stats.t_table(2 * row[1] - 1, 127)[row[2]] - row[3]))
end
t.ok(pworst < 1e-6, ("t quantiles: the printed table's values (worst %.2g)"):format(pworst))

-- --- the accumulator against the raw samples --------------------------------------------
-- V and the lag-1 correlation of batch means, computed from the raw samples directly
local function direct_level(xs, length, k)
  local means, sum = {}, 0
  for j = 1, k do
    local s = 0
    for i = (j - 1) * length + 1, j * length do s = s + xs[i] end
    means[j] = s / length
    sum = sum + means[j]
  end
  local mean, sq, lag = sum / k, 0, 0
  for j = 1, k do sq = sq + (means[j] - mean) ^ 2 end
  for j = 2, k do lag = lag + (means[j] - mean) * (means[j - 1] - mean) end
  return sq / (k - 1) * length, lag / sq
end

local ok_slots, ok_levels, trials = true, true, 40
for _ = 1, trials do
  local n = math.random(1, 20000)
  local b, xs = stats.batches(), {}
  for i = 1, n do
    xs[i] = 1e-5 * (1 + 0.1 * math.random()) + (i > 1 and 0.3 * (xs[i - 1] - 1e-5) or 0)
    b:add(xs[i])
  end
  -- the batch size doubles each time the slots fill: SLOTS samples, then every SLOTS/2 batches
  local size = 1
  while n >= size * stats.SLOTS do size = size * 2 end
  local full = size == 1 and n or n // size
  if b.size ~= size or b.full ~= full or b.n ~= n then ok_slots = false end
  for j = 1, b.full do
    local s = 0
    for i = (j - 1) * size + 1, j * size do s = s + xs[i] end
    if math.abs(b.sums[j] - s) > 1e-12 * math.abs(s) then ok_slots = false end
  end
  for _, m in ipairs{1, 2, 4} do
    local k = b.full // m
    if k >= 3 then
      local v, r = b:level(m, k)
      local dv, dr = direct_level(xs, m * size, k)
      if math.abs(v - dv) > 1e-9 * dv or math.abs(r - dr) > 1e-9 then ok_levels = false end
    end
  end
end
t.ok(ok_slots, ("batches: %d runs of random length, every slot the sum of its contiguous samples"):format(trials))
t.ok(ok_levels, "batches: V and the lag-1 correlation of merged batches equal the raw samples' (two passes)")

-- --- synthetic runs: AR(1) with heavy tails ------------------------------------------------
local function normal()
  return math.sqrt(-2 * math.log(1 - math.random())) * math.cos(2 * math.pi * math.random())
end
-- Student's t with 4 degrees of freedom, scaled to variance 1
local function t4()
  local chi = 0
  for _ = 1, 4 do local z = normal(); chi = chi + z * z end
  return normal() / math.sqrt(chi / 4) / math.sqrt(2)
end
-- A 4 us kernel whose samples scatter by cv: x = mu + rho (x - mu) + e,
-- e = t4 noise + (1%) Pareto(2.5) spikes of 10% of mu. The true mean is mu
-- + E[spike] / (1 - rho).
local MU = 4e-6
local function run_source(rho, cv)
  local sd, p, scale, alpha = MU * cv * math.sqrt(1 - rho * rho), 0.01, 0.1 * MU, 2.5
  local x = 0
  local function step()
    local e = sd * t4()
    if math.random() < p then e = e + scale * ((1 - math.random()) ^ (-1 / alpha) - 1) end
    x = rho * x + e
    return MU + x
  end
  for _ = 1, 200 do step() end
  return step, MU + p * scale / (alpha - 1) / (1 - rho)
end

-- Runs the criterion on samples of the source until it finishes (after
-- min_samples 10, as the runner); returns the interval, the sample count
-- and whether the i.i.d. interval at the same count would have covered.
local function run_ci(step, truth, params)
  local c = criteria.new("ci", params)
  local n, mean, m2 = 0, 0, 0
  repeat
    local x = step()
    c:add(x)
    n = n + 1
    local d = x - mean
    mean = mean + d / n
    m2 = m2 + d * (x - mean)
  until n >= 10 and c:is_finished() or n >= 2000000
  local naive = stats.t_quantile(0.975, n - 1) * math.sqrt(m2 / (n - 1) / n)
  return c:interval(), n, math.abs(mean - truth) <= naive
end

-- The binomial tolerance of an observed rate over `runs` trials: 4 standard
-- deviations of the rate at the stated confidence (a false alarm about once
-- in 16,000 runs of this test).
local function tolerance(confidence, runs) return 4 * math.sqrt(confidence * (1 - confidence) / runs) end

local RUNS = 400
for _, rho in ipairs{0.0, 0.5, 0.9} do
  local covered, naive_covered, total_n, none = 0, 0, 0, 0
  for _ = 1, RUNS do
    local step, truth = run_source(rho, 0.033)
    local iv, n, naive = run_ci(step, truth)
    if not iv then none = none + 1 elseif iv.lo <= truth and truth <= iv.hi then covered = covered + 1 end
    if naive then naive_covered = naive_covered + 1 end
    total_n = total_n + n
  end
  -- A run whose samples never look independent claims no interval (ci then
  -- stops as stdrel does): rare at rho 0.9 with heavy tails, never common.
  -- The rate is over the runs that claimed one.
  local claimed = RUNS - none
  local rate, naive_rate, tol = covered / claimed, naive_covered / RUNS, tolerance(0.95, claimed)
  t.ok(none <= RUNS // 50 and math.abs(rate - 0.95) <= tol, ("ci, rho %.1f, cv 3.3%%, heavy tails: the 95%% interval covers the mean "
    .. "in %.1f%% of %d runs that claimed one (95 +- %.1f%%; %d without one, at most %d; %d samples on average)")
    :format(rho, rate * 100, claimed, tol * 100, none, RUNS // 50, total_n // RUNS))
  if rho > 0 then
    t.ok(naive_rate < 0.95 - tol, ("ci, rho %.1f: an i.i.d. interval at the same counts covers only %.1f%% (below %.1f%%)")
      :format(rho, naive_rate * 100, (0.95 - tol) * 100))
  end
end

-- Another confidence and width: 80%, +-1%
do
  local covered, runs = 0, 300
  for _ = 1, runs do
    local step, truth = run_source(0.7, 0.05)
    local iv = run_ci(step, truth, {["max-width"] = 0.01, confidence = 0.8})
    if iv and iv.lo <= truth and truth <= iv.hi then covered = covered + 1 end
  end
  local tol = tolerance(0.8, runs)
  t.ok(math.abs(covered / runs - 0.8) <= tol, ("ci, rho 0.7, 80%% at +-1%%: covers in %.1f%% of %d runs (80 +- %.1f%%)")
    :format(covered / runs * 100, runs, tol * 100))
end

-- The interval is as narrow as asked when the criterion stops
do
  local step = run_source(0.5, 0.033)
  local iv = run_ci(step, MU, {["max-width"] = 0.002})
  t.ok(iv and iv.half <= 0.002 * iv.mean and iv.relative <= 0.002 and iv.confidence == 0.95,
    ("ci: at the stop the half-width is within max-width of the mean (%.3f%%)"):format((iv and iv.relative or 1) * 100))
  t.ok(iv and iv.batches >= stats.BATCHES and iv.batches < 2 * stats.BATCHES,
    ("ci: from %s batches of %s samples"):format(iv and iv.batches, iv and iv.batch_size))
end

-- --- how soon it stops, beside stdrel -----------------------------------------------------
local function samples_until(name, params, step)
  local c = criteria.new(name, params)
  local n = 0
  repeat c:add(step()); n = n + 1 until n >= 10 and c:is_finished() or n >= 3000000
  return n
end
for _, cv in ipairs{0.003, 0.033} do
  local step = run_source(0, cv)
  local n_ci, n_stdrel = samples_until("ci", nil, step), samples_until("stdrel", nil, step)
  t.ok(n_ci * 100 < n_stdrel, ("ci stops at %d samples, stdrel at %d (a 4 us kernel, %.1f%% noise)"):format(
    n_ci, n_stdrel, cv * 100))
end

-- the post-hoc interval of a sample array is the criterion's
do
  local same, made = true, 0
  for _ = 1, 20 do
    local step = run_source(0.5, 0.02)
    local c, xs = criteria.new("ci"), {}
    for i = 1, 3000 do xs[i] = step(); c:add(xs[i]) end
    local a, b = c:interval(), stats.interval(xs, 3000, 0.95)
    if a then made = made + 1 end
    same = same and (a == nil) == (b == nil) and (a == nil or a.lo == b.lo and a.hi == b.hi and a.batches == b.batches)
  end
  t.ok(same and made > 0, ("stats.interval of the samples is the criterion's (%d of 20 runs with one)"):format(made))
end

-- --- the median's interval by sectioning ---------------------------------------------------
do
  -- i.i.d. exponential samples (median log 2), 40 sections of 25
  local covered, runs = 0, 400
  for _ = 1, runs do
    local xs = {}
    for i = 1, 1000 do xs[i] = -math.log(1 - math.random()) end
    local median, lo, hi = stats.median_interval(xs, 1000, 40, 0.95)
    if lo <= math.log(2) and math.log(2) <= hi and lo <= median and median <= hi then covered = covered + 1 end
  end
  local tol = tolerance(0.95, runs)
  t.ok(math.abs(covered / runs - 0.95) <= tol, ("median_interval: covers an exponential's median in %.1f%% of %d runs")
    :format(covered / runs * 100, runs))
  t.is(stats.median_interval({1, 2, 3}, 3, 1, 0.95), nil, "median_interval: one section gives no interval")
end

-- --- parameters ------------------------------------------------------------------------------
for _, bad in ipairs{{"max-width", 0}, {"max-width", -0.01}, {"max-width", 1 / 0}, {"max-width", 0 / 0},
                     {"max-width", "x"}, {"confidence", 0}, {"confidence", 1}, {"confidence", 1.5},
                     {"confidence", -0.5}, {"confidence", 0 / 0}} do
  t.raises(function() criteria.new("ci", {[bad[1]] = bad[2]}) end,
    "criterion parameter '" .. bad[1]:gsub("%-", "%%-") .. "' must be",
    ("ci: %s = %s is refused"):format(bad[1], tostring(bad[2])))
end
local good = criteria.new("ci", {["max-width"] = 0.02, confidence = 0.99, ["max-noise"] = 0.1})
t.ok(good.params["max-width"] == 0.02 and good.params.confidence == 0.99 and good.params["max-noise"] == nil,
  "ci: its parameters are taken, another criterion's are ignored (as NVBench's set_from)")
t.raises(function() require("cuda.bench").register(function() end):set_stopping_criterion("ci", {confidence = 2}) end,
  "bad argument #2 to 'set_stopping_criterion' %(criterion parameter 'confidence' must be a number between 0 and 1",
  "set_stopping_criterion('ci', {confidence = 2}) names the parameter")

-- --- stdrel as NVBench 0.3.0 --------------------------------------------------------------------
do
  -- samples whose mean is 0 give no noise estimate: 64 of them in a row finish
  local c, n = criteria.new("stdrel"), 0
  repeat c:add(0.0); n = n + 1 until c:is_finished() or n > 1000
  t.is(n, criteria.MIN_SAMPLES_FOR_NOISE - 1 + 64, "stdrel: 64 invalid noise estimates in a row end it (mean 0)")
  -- an estimate that can be made resets the count
  c = criteria.new("stdrel", {["min-time"] = 0})
  for _ = 1, 40 do c:add(0.0) end
  for _ = 1, 40 do c:add(-1.0) end
  c:add(50.0)
  t.ok(not c:is_finished(), "stdrel: a valid estimate resets the count of invalid ones")
end
do
  -- The stability rule against the noise series computed two-pass from the
  -- samples: every 16th sample past 64 estimates, the last 512 estimates'
  -- variance (over their count) below (5% of their mean)^2.
  local agree, checks, settled = true, 0, 0
  for _ = 1, 20 do
    local c = criteria.new("stdrel", {["max-noise"] = 0, ["min-time"] = 0})
    local xs, noises = {}, {}
    local spread = 0.05 + 0.5 * math.random()
    for n = 1, 1500 do
      xs[n] = 1 + spread * normal() ^ 2
      c:add(xs[n])
      if n >= 5 then
        local sum = 0
        for i = 1, n do sum = sum + xs[i] end
        local mean, sq = sum / n, 0
        for i = 1, n do sq = sq + (xs[i] - mean) ^ 2 end
        noises[#noises + 1] = math.sqrt(sq / (n - 1)) / mean
      end
      local want = false
      if #noises > 64 and n % 16 == 0 then
        local first, count = math.max(1, #noises - 511), 0
        local s = 0
        for i = first, #noises do s = s + noises[i]; count = count + 1 end
        local m, v = s / count, 0
        for i = first, #noises do v = v + (noises[i] - m) ^ 2 end
        want = v / count < (0.05 * m) ^ 2
        checks = checks + 1
      end
      local got = c:is_finished()
      if got ~= want then agree = false end
      if got then settled = settled + 1; break end
    end
  end
  t.ok(agree and settled > 0, ("stdrel: the stability rule agrees with the two-pass noise series (%d checks, %d settled)")
    :format(checks, settled))
end

t.done()
