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

t.done()
