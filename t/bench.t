-- cuda.bench's figures in the raw C references' terms (percentiles,
-- summaries, rounds combined, spreads) and their batch timing, on the CPU:
-- the timing runs on a mock stream whose clock and events are fake.
local t = require "tap"
local bench = require "cuda.bench"

t.seed()

local function random_list(n)
  local xs, scale = {}, 10 ^ math.random(-3, 3)
  for i = 1, n do xs[i] = math.random() * scale end
  return xs
end

local function sorted(xs)
  local copy = {table.unpack(xs)}
  table.sort(copy)
  return copy
end

-- --- percentile, median, summary ------------------------------------------------

t.is(bench.percentile({1, 2, 3, 4}, 50), 2.5, "percentile: 50th of an even list is the mean of the middle two")
t.near(bench.percentile({10, 20, 30, 40, 50}, 90), 46, 1e-12, "percentile: 90th interpolates between ranks")
t.is(bench.percentile({3, 5, 9}, 0), 3, "percentile: 0th is the least")
t.is(bench.percentile({3, 5, 9}, 100), 9, "percentile: 100th is the greatest")
t.is(bench.percentile({7}, 90), 7, "percentile: one value is every percentile")

-- numpy's linear method written as a weighted mean of the two nearest ranks
local function lerp_percentile(xs, p)
  local h = (#xs - 1) * p / 100
  local lo, hi = math.floor(h) + 1, math.min(math.ceil(h) + 1, #xs)
  local w = h - math.floor(h)
  return (1 - w) * xs[lo] + w * xs[hi]
end
local bad = {}
for trial = 1, 100 do
  local xs = sorted(random_list(math.random(1, 50)))
  local p = trial % 10 == 0 and 100 or math.random() * 100
  local got, want = bench.percentile(xs, p), lerp_percentile(xs, p)
  if math.abs(got - want) > 1e-9 * math.max(1, math.abs(want)) then
    bad[#bad + 1] = ("n=%d p=%g: got %s want %s"):format(#xs, p, got, want)
  end
end
t.is(#bad, 0, "percentile: 100 random lists against a weighted mean of the nearest ranks")
if #bad > 0 then t.diag(table.concat(bad, "\n", 1, math.min(5, #bad))) end

t.is(bench.median({5, 1, 3}), 3, "median: odd count")
t.is(bench.median({4, 1, 3, 2}), 2.5, "median: even count")
local xs = random_list(31)
local before = table.concat(xs, ",")
t.is(bench.median(xs), sorted(xs)[16], "median: the middle of a random list")
t.is(table.concat(xs, ","), before, "median: the list is left as it is")
t.raises(function() bench.median({}) end, "at least one", "median: an empty list is rejected")

local summary = bench.summary(xs)
local s = sorted(xs)
t.ok(summary.min == s[1] and summary.max == s[#s], "summary: min and max")
t.near(summary.median, lerp_percentile(s, 50), 1e-12, "summary: median interpolated")
t.near(summary.p90, lerp_percentile(s, 90), 1e-12, "summary: p90 interpolated")
t.is(table.concat(xs, ","), before, "summary: the samples are left as they are")
t.raises(function() bench.summary({}) end, "at least one", "summary: no samples is an error")

-- --- combine ----------------------------------------------------------------------

local rounds = {
  {a = {median = 3, min = 1, p90 = 5, max = 9}, b = {median = 10, min = 8, p90 = 12, max = 20}, c = {median = 0}},
  {a = {median = 1, min = 0.5, p90 = 7, max = 8}, b = {median = 30, min = 9, p90 = 31, max = 40}},
  {a = {median = 2, min = 2, p90 = 6, max = 10}, b = {median = 20, min = 7, p90 = 22, max = 30}},
}
local combined = bench.combine(rounds, {"a", "b"}, {"median", "min", "p90", "max"})
t.ok(combined.a.median == 2 and combined.b.median == 20, "combine: the median of the medians")
t.ok(combined.a.min == 0.5 and combined.b.min == 7, "combine: the least min")
t.ok(combined.a.p90 == 6 and combined.b.p90 == 22, "combine: the median of the p90s")
t.ok(combined.a.max == 10 and combined.b.max == 40, "combine: the greatest max")
t.is(combined.c, nil, "combine: only the keys asked for")
local narrow = bench.combine(rounds, {"a"}, {"median", "min"})
t.ok(narrow.a.p90 == nil and narrow.a.max == nil and narrow.a.median == 2, "combine: only the columns asked for")
local two = bench.combine({rounds[1], rounds[2]}, {"b"}, {"median"})
t.is(two.b.median, 20, "combine: an even count of rounds takes the mean of the middle two")
t.raises(function() bench.combine({}, {"a"}, {"median"}) end, "at least one round", "combine: no rounds is an error")

-- --- format_spread ------------------------------------------------------------------

local figure = {median = 1.23456, min = 1.2, p90 = 1.30049}
t.is(bench.format_spread(figure), "1.235 [1.200, 1.300]", "format_spread: median [min, p90], 3 decimals")
t.is(bench.format_spread(figure, 4), "1.2346 [1.2000, 1.3005]", "format_spread: digits")

-- --- host_batches and gpu_batches on a mock stream ------------------------------------

-- A stream that notes whether it was synchronized before each batch, a
-- clock the batches advance, and events stamped with that clock.
local function mock_stream()
  local m = {now = 0.0, idle = false, syncs = 0, batches = {}, created = 0, closed = 0}
  local Event = {__sub = function(later, earlier) return later.t - earlier.t end}
  Event.__index = Event
  function Event.sync() end
  function Event:close() self.closed = true; m.closed = m.closed + 1 end
  m.stream = {
    sync = function() m.syncs = m.syncs + 1; m.idle = true end,
    record = function(_, ev) ev.t = m.now end,
    device = {create_event = function() m.created = m.created + 1; return setmetatable({}, Event) end},
  }
  m.new_event = m.stream.device.create_event
  function m.clock() return m.now end
  function m.issue(count)
    local cost = math.random() * count * 1e-3
    m.batches[#m.batches + 1] = {count = count, cost = cost, after_sync = m.idle}
    m.idle = false
    m.now = m.now + cost
  end
  return m
end

do
  local m = mock_stream()
  local got = bench.host_batches(m.stream, m.issue, 7, {warmup = 3, repeats = 9, clock = m.clock})
  t.is(#m.batches, 12, "host_batches: warm-up and timed batches")
  local all_synced, sizes_right = true, true
  for _, b in ipairs(m.batches) do
    all_synced = all_synced and b.after_sync
    sizes_right = sizes_right and b.count == 7
  end
  t.ok(all_synced, "host_batches: every batch starts on a synchronized stream")
  t.ok(sizes_right, "host_batches: every batch has the batch size")
  t.ok(m.idle, "host_batches: the stream is synchronized after the last batch")
  local per_call = {}
  for i = 4, 12 do per_call[i - 3] = m.batches[i].cost * 1e6 / 7 end
  local ps = sorted(per_call)
  t.near(got.median, ps[5], 1e-9, "host_batches: median microseconds per call of the timed batches")
  t.ok(math.abs(got.min - ps[1]) < 1e-9 and math.abs(got.max - ps[9]) < 1e-9, "host_batches: min and max")
  t.near(got.p90, lerp_percentile(ps, 90), 1e-9, "host_batches: p90")
  t.raises(function() bench.host_batches(m.stream, m.issue, 1, {repeats = 0}) end, "repeats",
    "host_batches: repeats >= 1")
end

do
  local m = mock_stream()
  local events = {m.new_event(), m.new_event()}
  local got = bench.gpu_batches(m.stream, m.issue, 5, {warmup = 2, repeats = 6, events = events})
  t.is(#m.batches, 8, "gpu_batches: warm-up and timed batches")
  local all_synced = true
  for _, b in ipairs(m.batches) do all_synced = all_synced and b.after_sync end
  t.ok(all_synced, "gpu_batches: every batch starts on a synchronized stream")
  local ms = {}
  for i = 3, 8 do ms[i - 2] = m.batches[i].cost end
  local ps = sorted(ms)
  t.near(got.median, (ps[3] + ps[4]) / 2, 1e-12, "gpu_batches: median of the timed batches' event times")
  t.ok(math.abs(got.min - ps[1]) < 1e-12 and math.abs(got.max - ps[6]) < 1e-12,
    "gpu_batches: min and max of the timed batches only")
  t.ok(m.created == 2 and m.closed == 0, "gpu_batches: the caller's events are used and left open")
  m = mock_stream()
  bench.gpu_batches(m.stream, m.issue, 1, {warmup = 0, repeats = 2})
  t.ok(m.created == 2 and m.closed == 2, "gpu_batches: its own events are created and closed")
end

-- --- the median's confidence interval ------------------------------------------------

t.is(bench.median_ci_ranks(5), nil, "median_ci_ranks: 5 samples are too few for 95%")
t.is(table.concat({bench.median_ci_ranks(6)}, ","), "1,6", "median_ci_ranks: 6 samples, the extremes")
t.is(table.concat({bench.median_ci_ranks(10)}, ","), "2,9", "median_ci_ranks: 10 samples, as the tables give")
t.is(table.concat({bench.median_ci_ranks(100)}, ","), "40,61", "median_ci_ranks: 100 samples, as the tables give")
local lo2000, hi2000 = bench.median_ci_ranks(2000)
t.ok(lo2000 and hi2000 == 2001 - lo2000 and lo2000 > 950 and lo2000 < 1000,
  "median_ci_ranks: 2000 samples (0.5^n would underflow)")
t.is(table.concat({bench.median_ci_ranks(20, 0.5)}, ","), "8,13", "median_ci_ranks: a lower confidence narrows it")

-- Seeded trials from distributions whose median is known: the interval
-- must cover it in about 95% of them (a little more: the ranks are whole).
local function coverage(draw, true_median, n, trials)
  local covered = 0
  for _ = 1, trials do
    local xs = {}
    for i = 1, n do xs[i] = draw() end
    local ci = bench.median_ci(sorted(xs))
    if ci[1] <= true_median and true_median <= ci[2] then covered = covered + 1 end
  end
  return covered / trials
end
math.randomseed(20240611)
local exponential = function() return -math.log(1 - math.random()) end
local c1 = coverage(exponential, math.log(2), 25, 2000)
t.ok(c1 >= 0.94 and c1 <= 0.99, ("median_ci: covers the exponential's median in %.1f%% of 2000 trials of 25"):format(100 * c1))
local c2 = coverage(function() return math.random() ^ 3 end, 0.125, 201, 1000)
t.ok(c2 >= 0.93 and c2 <= 0.98, ("median_ci: covers a skewed median in %.1f%% of 1000 trials of 201"):format(100 * c2))
t.seed()

-- --- bench.time: fixed and adaptive, on a mock stream ---------------------------------

-- fn for bench.time: each run takes draw() seconds of the mock's clock.
local function timed_fn(m, draw)
  return function() m.runs = (m.runs or 0) + 1; m.now = m.now + draw() end
end

do
  local m = mock_stream()
  local st = bench.time(m.stream, timed_fn(m, function() return 1 + math.random() end), {runs = 7, warmup = 2})
  t.ok(st.n == 7 and m.runs == 9, "time: fixed mode runs warm-up and runs as given")
  t.ok(st.p10 <= st.p50 and st.p50 <= st.p90 and st.p50 == st.median, "time: p10 <= p50 = median <= p90")
  t.ok(st.ci and st.ci[1] <= st.median and st.median <= st.ci[2], "time: the median's interval holds it")
  t.is(st.warning, nil, "time: fixed mode gives no warning")

  -- opts.prepare: issued before each timed run's start event, never timed.
  for _, extra in ipairs{{}, {precision = 0.01, max_time = 1e9}} do
    m = mock_stream()
    local prepared = 0
    local opts = {runs = 5, warmup = 1, clock = m.clock, prepare = function(s)
      assert(s == m.stream); prepared = prepared + 1; m.now = m.now + 1000 end}
    for k, v in pairs(extra) do opts[k] = v end
    st = bench.time(m.stream, timed_fn(m, function() return 1 end), opts)
    t.ok(prepared == st.n and st.max < 1000, ("time: prepare runs before each timed run and is not timed (%s mode)")
      :format(extra.precision and "adaptive" or "fixed"))
  end

  m = mock_stream()
  st = bench.time(m.stream, timed_fn(m, function() return 1 + 1e-4 * math.random() end),
    {precision = 0.01, runs = 12, warmup = 0, clock = m.clock})
  t.is(st.n, 12, "time: adaptive mode stops at the least runs when the spread is small")
  t.ok(bench.relative_ci(st) <= 0.01 and st.warning == nil, "time: within the target, no warning")

  m = mock_stream()
  st = bench.time(m.stream, timed_fn(m, function() return 1 + 0.2 * math.random() end),
    {precision = 0.01, runs = 6, warmup = 0, max_time = 1e9, clock = m.clock})
  t.ok(st.n > 6 and bench.relative_ci(st) <= 0.01, ("time: adaptive mode runs on until the target (%d runs)"):format(st.n))
  t.is(st.warning, nil, "time: the target reached, no warning")

  m = mock_stream()
  st = bench.time(m.stream, timed_fn(m, function() return math.random() end),
    {precision = 1e-6, max_runs = 150, warmup = 0, max_time = 1e9, clock = m.clock})
  t.is(st.n, 150, "time: adaptive mode stops at max_runs")
  t.like(st.warning or "", "^spread stays high: the median is known to \u{b1}[%d.]+%% after 150 runs %(target 0%.0%%%)",
    "time: a spread that stays high is reported")

  m = mock_stream()
  st = bench.time(m.stream, timed_fn(m, function() return 0.01 * (1 + math.random()) end),
    {precision = 1e-6, max_time = 0.5, runs = 5, warmup = 0, clock = m.clock})
  t.ok(st.n >= 20 and st.n <= 51, ("time: the time budget ends the runs (%d runs of 10-20 ms in 0.5 s)"):format(st.n))

  m = mock_stream()
  st = bench.time(m.stream, timed_fn(m, function() return 0.01 end), {max_time = 0.02, runs = 3, warmup = 0, clock = m.clock})
  t.like(st.warning or "", "too few runs %(3%)", "time: too few runs for an interval is reported")

  local readings = {1980, 1500}
  m = mock_stream()
  st = bench.time(m.stream, timed_fn(m, function() return 1 end), {precision = 0.01, warmup = 0, clock = m.clock,
    clock_probe = function(s) assert(s == m.stream); return table.remove(readings, 1) end})
  t.like(st.warning or "", "the SM clock moved during the runs: 1980 MHz before, 1500 MHz after",
    "time: a clock that moved is reported")
  t.ok(#readings == 0 and st.clocks[1] == 1980 and st.clocks[2] == 1500, "time: the probe is read before and after")
  readings = {1980, 1985}
  st = bench.time(m.stream, timed_fn(m, function() return 1 end), {precision = 0.01, warmup = 0, clock = m.clock,
    clock_probe = function() return table.remove(readings, 1) end})
  t.is(st.warning, nil, "time: a clock within the tolerance is not")
  readings = {1980}
  st = bench.time(m.stream, timed_fn(m, function() return 1 end), {precision = 0.01, warmup = 0, clock = m.clock,
    clock_probe = function() return table.remove(readings, 1) end})
  t.ok(st.warning == nil and st.clocks[1] == 1980 and st.clocks[2] == nil, "time: a probe with no reading warns of nothing")

  t.raises(function() bench.time(m.stream, function() end, {precision = -1, max_time = 1}) end, "precision",
    "time: a negative precision is rejected")
  t.raises(function() bench.time(m.stream, function() end, {max_time = 0}) end, "max_time",
    "time: max_time must be positive")
  t.raises(function() bench.time(m.stream, function() end, {precision = 0.01, runs = 0}) end, "runs",
    "time: adaptive mode needs at least one run")
end

-- --- ratios with their uncertainty --------------------------------------------------

do
  local xs = random_list(25)
  local f = bench.figure(xs)
  local s = sorted(xs)
  local lo, hi = bench.median_ci_ranks(25)
  t.ok(f.median == s[13] and f.ci_lo == s[lo] and f.ci_hi == s[hi] and f.n == 25,
    "figure: the median and the ranks of its 95% interval")
  f = bench.figure({3, 1, 2})
  t.ok(f.median == 2 and f.ci_lo == 1 and f.ci_hi == 3, "figure: below 6 samples, the min and max")

  local r = bench.ratio({median = 10, ci_lo = 9, ci_hi = 11}, {median = 8, ci_lo = 7.6, ci_hi = 8.4})
  t.near(r.ratio, 1.25, 1e-12, "ratio: ours over theirs")
  t.near(r.uncertainty, 1.25 * math.sqrt(0.1 ^ 2 + 0.05 ^ 2), 1e-12, "ratio: relative half widths in quadrature")
  t.is(r.outside, true, "ratio: 1.25 +- 0.14 is outside its band from 1")
  r = bench.ratio({median = 10, ci_lo = 9, ci_hi = 11}, {median = 10.5, ci_lo = 9.5, ci_hi = 11.5})
  t.is(r.outside, false, "ratio: 0.952 +- 0.13 is inside")
  t.is(bench.ratio_flag("x", r), nil, "ratio_flag: nothing inside the band")
  r = bench.ratio({median = 4}, {median = 5, ci_lo = 4, ci_hi = 6})
  t.ok(r.ratio == 0.8 and r.uncertainty == nil and r.outside == nil, "ratio: no interval on one side, no uncertainty")
  t.is(bench.format_ratio(r), "0.800", "format_ratio: the ratio alone without an uncertainty")
  r = bench.ratio({median = 5.73, ci_lo = 5.5, ci_hi = 5.9}, {median = 10.05, ci_lo = 9.9, ci_hi = 10.3})
  t.is(bench.format_ratio(r), ("%.3f \u{b1}%.3f"):format(r.ratio, r.uncertainty), "format_ratio: ratio and uncertainty")
  t.like(bench.ratio_flag("d2h 4096", r, "cudalua faster", "cudalua slower") or "",
    "^FLAG d2h 4096: ratio 0%.570 \u{b1}0%.0%d%d is outside its uncertainty of 1 %(cudalua faster%)$",
    "ratio_flag: one line naming the figure and the side")
  -- random pairs against an independent reading: flagged exactly when the intervals' product band misses 1
  local wrong = 0
  for _ = 1, 200 do
    local a, b = math.random() * 10 + 0.1, math.random() * 10 + 0.1
    local ea, eb = math.random() * 0.2, math.random() * 0.2
    local q = bench.ratio({median = a, ci_lo = a * (1 - ea), ci_hi = a * (1 + ea)},
                          {median = b, ci_lo = b * (1 - eb), ci_hi = b * (1 + eb)})
    local u = a / b * (ea * ea + eb * eb) ^ 0.5
    if math.abs(q.ratio - a / b) > 1e-12 or math.abs(q.uncertainty - u) > 1e-9 or q.outside ~= (math.abs(a / b - 1) > u) then
      wrong = wrong + 1
    end
  end
  t.is(wrong, 0, "ratio: 200 random pairs against the formula")

  -- the comparison printer: one line a row, the flags, the count; the rows come back filled in
  local printed, real_print = {}, print
  print = function(...) printed[#printed + 1] = table.concat({...}, "\t") end
  local rows, flagged = bench.print_ratios({
    {label = "h2d   4096", ours = {median = 6.29, ci_lo = 6.2, ci_hi = 6.4}, theirs = {median = 10.78, ci_lo = 10.6, ci_hi = 11}},
    {label = "d2d", ours = {median = 10, ci_lo = 9, ci_hi = 11}, theirs = {median = 10.2, ci_lo = 9.5, ci_hi = 11}},
  }, {columns = {"path", "cudalua us", "raw C us"}, width = 10, below = "cudalua faster", above = "cudalua slower"})
  print = real_print
  t.is(flagged, 1, "print_ratios: one ratio outside its band")
  t.ok(rows[1].outside == true and rows[2].outside == false and math.abs(rows[1].ratio - 6.29 / 10.78) < 1e-12,
    "print_ratios: each row's ratio and verdict")
  t.like(printed[1] or "", "^path +cudalua us +raw C us +ratio$", "print_ratios: the header")
  t.like(printed[2] or "", "^h2d   4096 +6%.29 +10%.78 +0%.583 \u{b1}0%.0%d%d %*$", "print_ratios: a flagged row ends in *")
  t.like(printed[4] or "", "^FLAG h2d 4096: ratio 0%.583", "print_ratios: the flag line, the label's spaces squeezed")
  t.is(printed[5], "(1 of 2 ratios outside their uncertainty of 1: *)", "print_ratios: the count")

  -- a reference's figures with and without the optional spread columns
  local dir = t.tmpdir()
  local prog = dir .. "/ref"
  t.write_file(prog, "#!/bin/sh\necho '# ref'\necho 'a 1 0.5 2'\necho 'b 3 2 4 10 2.5 3.5'\n")
  os.execute("chmod +x '" .. prog .. "'")
  local figures = bench.reference(prog, {}, bench.REFERENCE_COLUMNS, bench.REFERENCE_SPREAD)
  t.ok(figures and figures.a.median == 1 and figures.a.ci_lo == nil and figures.b.n == 10 and figures.b.ci_lo == 2.5
    and figures.b.ci_hi == 3.5, "reference: the spread columns are read where a line has them")
  t.write_file(prog, "#!/bin/sh\necho 'b 3 2 4 10 2.5'\n")
  local none, why = bench.reference(prog, {}, bench.REFERENCE_COLUMNS, bench.REFERENCE_SPREAD)
  t.ok(none == nil and why:find("b 3 2 4 10 2.5", 1, true), "reference: some of the spread columns is an error")
  none = bench.reference(prog, {}, bench.REFERENCE_COLUMNS)
  t.is(none, nil, "reference: without optional columns, extra numbers are an error")
  os.execute("rm -rf '" .. dir .. "'")
end

t.done()
