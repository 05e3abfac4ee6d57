-- cuda.bench.svg: pictures of a run's results (cudalua bench --svg DIR), drawn with cuda.svg.
-- SPDX-License-Identifier: MIT
--
-- Two kinds, made from the results cuda.bench.run returns (nothing here
-- measures; the charts are pure functions of those tables):
--
--   a benchmark's chart   the mean time of each state against one axis
--                         (the numeric one with the most values, else the
--                         axis with the most values, its values in order),
--                         one line per combination of the other axes (and
--                         device), the confidence interval of the mean as
--                         error bars;
--   a state's histogram   its samples (cold GPU times, or cpu-only CPU
--                         times; those beyond 3 IQR of the quartiles
--                         counted, not drawn) in bins, with a kernel density estimate,
--                         a rug of the samples and marks at the mean, the
--                         median and the interval's ends: NVBench's
--                         scripts/nvbench_histogram.py draws the same KDE and
--                         rug, for all states in one picture.
--
-- The interval is the one the state's summaries carry
-- (cudalua/.../mean/ci_lo and ci_hi); without them it is made from the
-- samples (cuda.bench.stats, 95%): none below 128 samples.
local svg = require "cuda.svg"
local stats = require "cuda.bench.stats"
local axes_mod = require "cuda.bench.axes"

local M = {}

M.MAX_RUG = 2000     -- rug ticks at most (an even stride through the samples)
M.CURVE_POINTS = 160 -- where the density is drawn

-- The measurement a state's summaries give: mean, lo, hi (nil without an interval).
local MEAN_TAGS = {"nv/cold/time/gpu/mean", "nv/cpu_only/time/cpu/mean"}
local function summary_value(st, tag)
  for _, s in ipairs(st.summaries or {}) do if s.tag == tag then return s.value end end
  return nil
end

function M.state_interval(st)
  for _, tag in ipairs(MEAN_TAGS) do
    local mean = summary_value(st, tag)
    if type(mean) == "number" and mean == mean then
      local prefix = "cudalua/" .. tag:sub(4)
      local lo, hi = summary_value(st, prefix .. "/ci_lo"), summary_value(st, prefix .. "/ci_hi")
      if not (lo and hi) and st.samples and (st.n_samples or 0) > 0 then
        local iv = stats.interval(st.samples, st.n_samples, 0.95)
        if iv then lo, hi = iv.lo, iv.hi end
      end
      return mean, lo, hi
    end
  end
  return nil
end

-- Seconds in a unit that suits the largest: factor, name.
function M.time_unit(seconds)
  if seconds >= 1 then return 1, "s" end
  if seconds >= 1e-3 then return 1e3, "ms" end
  if seconds >= 1e-6 then return 1e6, "us" end
  return 1e9, "ns"
end

local function numeric(axis) return axis.kind == "int64" or axis.kind == "float64" end

-- The x axis of a benchmark's chart: of the axes with more than one
-- value, the numeric one with the most values, else the one with the
-- most; nil without axes.
function M.x_axis(axes)
  local function rank(axis) return (#axis.values > 1 and 2 or 0) + (numeric(axis) and 1 or 0) end
  local best
  for _, axis in ipairs(axes) do
    if not best or rank(axis) > rank(best) or (rank(axis) == rank(best) and #axis.values > #best.values) then
      best = axis
    end
  end
  return best
end

-- The series of a benchmark's chart: {name, points = {{x, y, lo, hi, state}}}
-- in seconds, and the x axis (nil: the states in order, x = 1, 2, ...).
function M.series(bench_result)
  local x_axis = M.x_axis(bench_result.axes)
  local by_key, order = {}, {}
  local devices = {}
  for _, st in ipairs(bench_result.states) do if st.device then devices[st.device] = true end end
  local several_devices = next(devices) ~= nil and next(devices, next(devices)) ~= nil
  for si, st in ipairs(bench_result.states) do
    local mean, lo, hi = M.state_interval(st)
    if mean and not st.is_skipped then
      local words = {}
      if several_devices then words[1] = ("Device=%d"):format(st.device) end
      for _, axis in ipairs(bench_result.axes) do
        if axis ~= x_axis then words[#words + 1] = axis.name .. "=" .. axes_mod.short(axis, st.index[axis.name]) end
      end
      local key = #words > 0 and table.concat(words, " ") or bench_result.name
      if not by_key[key] then by_key[key] = {name = key, points = {}}; order[#order + 1] = by_key[key] end
      local x = x_axis and (numeric(x_axis) and x_axis.values[st.index[x_axis.name]] or st.index[x_axis.name]) or si
      local points = by_key[key].points
      points[#points + 1] = {x, mean, lo = lo, hi = hi, state = st}
    end
  end
  for _, s in ipairs(order) do table.sort(s.points, function(a, b) return a[1] < b[1] end) end
  return order, x_axis
end

-- The chart of one benchmark (nil when no state has a measurement).
function M.benchmark_chart(bench_result, opts)
  opts = opts or {}
  local series, x_axis = M.series(bench_result)
  if #series == 0 then return nil end
  local top = 0
  for _, s in ipairs(series) do for _, p in ipairs(s.points) do top = math.max(top, p.hi or p[2]) end end
  local factor, unit = M.time_unit(top)
  local scaled, x_min, x_max = {}, math.huge, -math.huge
  for i, s in ipairs(series) do
    local points = {}
    for j, p in ipairs(s.points) do
      points[j] = {p[1], p[2] * factor, lo = p.lo and p.lo * factor, hi = p.hi and p.hi * factor}
      x_min, x_max = math.min(x_min, p[1]), math.max(x_max, p[1])
    end
    scaled[i] = {name = s.name, points = points}
  end
  local chart = {title = opts.title or bench_result.name, width = opts.width, height = opts.height,
    y_label = ("%s (%s)"):format(opts.y_label or "mean time", unit)}
  if x_axis and numeric(x_axis) then
    -- a log axis for values over more than a decade (or pow2's), in base 2 for powers of two
    chart.x_label = x_axis.name
    chart.x_log = x_min > 0 and (x_axis.flags == "pow2" or x_max / x_min >= 16)
    chart.x_base = x_axis.flags == "pow2" and 2 or 10
    if x_axis.flags == "pow2" then
      chart.x_format = function(x) return ("2^%d"):format(math.floor(math.log(x, 2) + 0.5)) end
    end
  else
    -- positions 1..n, named by the axis' values (or the states' names)
    local ticks = {}
    if x_axis then
      for i = 1, #x_axis.values do ticks[i] = {i, axes_mod.display(x_axis, i)} end
      chart.x_label = x_axis.name
    else
      for i, st in ipairs(bench_result.states) do ticks[i] = {i, st.name} end
    end
    chart.x_log, chart.x_ticks, chart.x_range = false, ticks, {0.5, #ticks + 0.5}
  end
  return svg.lines(scaled, chart)
end

-- --- a state's histogram -------------------------------------------------------

local function sorted_copy(samples, n)
  local s = table.move(samples, 1, n, 1, {})
  table.sort(s)
  return s
end

local function quantile(sorted, p)
  local pos = p * (#sorted - 1)
  local lo = math.floor(pos)
  if lo >= #sorted - 1 then return sorted[#sorted] end
  return sorted[lo + 1] + (pos - lo) * (sorted[lo + 2] - sorted[lo + 1])
end

-- The range a histogram draws: the samples', but no further than 3 IQR
-- beyond the quartiles (a single stall of milliseconds among microsecond
-- samples would leave one bar); the samples outside it are counted.
-- Returns the sorted samples inside, and how many were left out.
function M.drawn_range(sorted)
  local iqr = quantile(sorted, 0.75) - quantile(sorted, 0.25)
  if not (iqr > 0) then return sorted, 0 end
  local lo, hi = quantile(sorted, 0.25) - 3 * iqr, quantile(sorted, 0.75) + 3 * iqr
  local inside = {}
  for _, x in ipairs(sorted) do if x >= lo and x <= hi then inside[#inside + 1] = x end end
  return inside, #sorted - #inside
end

-- The timer's step: the smallest gap between distinct sorted samples
-- (event times come in steps of about 0.5 us on a GPU, of a float's last
-- bit under the fake); 0 for fewer than two distinct values.
function M.quantum(sorted)
  local step = math.huge
  for i = 2, #sorted do
    local gap = sorted[i] - sorted[i - 1]
    if gap > 0 and gap < step then step = gap end
  end
  return step < math.huge and step or 0
end

-- Bins of the sorted samples: Freedman-Diaconis width (2 IQR / n^(1/3)),
-- but no narrower than the timer's step (or every other bin is empty),
-- 5 to 60 bins over [min, max]. Returns {{lo, hi, count}}, width.
function M.bins(sorted)
  local n, lo, hi = #sorted, sorted[1], sorted[#sorted]
  local iqr = quantile(sorted, 0.75) - quantile(sorted, 0.25)
  local count = 1
  if hi > lo then
    local fd = math.max(iqr > 0 and 2 * iqr / n ^ (1 / 3) or (hi - lo) / 10, M.quantum(sorted))
    count = math.max(5, math.min(60, math.ceil((hi - lo) / fd)))
  else
    lo, hi = lo - 0.5 * math.max(math.abs(lo) * 1e-3, 1e-12), hi + 0.5 * math.max(math.abs(hi) * 1e-3, 1e-12)
  end
  local width, bins = (hi - lo) / count, {}
  for i = 1, count do bins[i] = {lo + (i - 1) * width, lo + i * width, 0} end
  for _, x in ipairs(sorted) do
    local i = math.min(math.floor((x - lo) / width) + 1, count)
    bins[i][3] = bins[i][3] + 1
  end
  return bins, width
end

-- A Gaussian kernel density of the sorted samples (Silverman's bandwidth, at
-- least the timer's step),
-- scaled to counts per bin width, at CURVE_POINTS points over [lo, hi].
-- Made from a 512-cell histogram of the samples, so its cost does not grow
-- with their number.
function M.density(sorted, lo, hi, bin_width)
  local n = #sorted
  local mean, sq = 0.0, 0.0
  for _, x in ipairs(sorted) do mean = mean + x end
  mean = mean / n
  for _, x in ipairs(sorted) do sq = sq + (x - mean) ^ 2 end
  local sd = n > 1 and math.sqrt(sq / (n - 1)) or 0
  local iqr = quantile(sorted, 0.75) - quantile(sorted, 0.25)
  local spread = math.min(sd, iqr > 0 and iqr / 1.34 or sd)
  -- Silverman's bandwidth, but not under the timer's step (a comb otherwise)
  local h = math.max(0.9 * spread * n ^ (-0.2), M.quantum(sorted))
  if not (h > 0) then return nil end
  local cells, cell_lo, cell_hi = 512, lo - 3 * h, hi + 3 * h
  local cell = (cell_hi - cell_lo) / cells
  local counts = {}
  for i = 1, cells do counts[i] = 0 end
  for _, x in ipairs(sorted) do
    local i = math.min(math.max(math.floor((x - cell_lo) / cell) + 1, 1), cells)
    counts[i] = counts[i] + 1
  end
  local curve, scale = {}, bin_width / (h * math.sqrt(2 * math.pi))
  for j = 0, M.CURVE_POINTS - 1 do
    local x = lo + (hi - lo) * j / (M.CURVE_POINTS - 1)
    local y = 0.0
    for i = 1, cells do
      if counts[i] > 0 then
        local u = (x - (cell_lo + (i - 0.5) * cell)) / h
        if u * u < 50 then y = y + counts[i] * math.exp(-0.5 * u * u) end
      end
    end
    curve[#curve + 1] = {x, y * scale}
  end
  return curve
end

-- The histogram of one state's samples (nil without samples).
function M.state_histogram(bench_name, st, opts)
  opts = opts or {}
  local n = st.n_samples or 0
  if not st.samples or n == 0 then return nil end
  local all = sorted_copy(st.samples, n)
  local sorted, left_out = M.drawn_range(all)
  local factor, unit = M.time_unit(sorted[#sorted])
  for i = 1, #sorted do sorted[i] = sorted[i] * factor end
  local bins, width = M.bins(sorted)
  local mean, lo, hi = M.state_interval(st)
  local marks = {}
  if mean then marks[#marks + 1] = {x = mean * factor, name = "mean", color = "#e15759"} end
  marks[#marks + 1] = {x = quantile(all, 0.5) * factor, name = "median", color = "#59a14f"}
  if lo and hi then
    marks[#marks + 1] = {x = lo * factor, name = "interval of the mean", color = "#e15759", dash = "4 3"}
    marks[#marks + 1] = {x = hi * factor, color = "#e15759", dash = "4 3"}
  end
  local rug, stride = {}, math.max(1, math.ceil(#sorted / M.MAX_RUG))
  local lo_drawn, hi_drawn = sorted[1] / factor, sorted[#sorted] / factor
  for i = 1, n, stride do
    local x = st.samples[i]
    if x >= lo_drawn and x <= hi_drawn then rug[#rug + 1] = x * factor end
  end
  -- with samples left out, a mark they pulled out of the drawn range (the mean) is left out too
  for i = #marks, 1, -1 do
    if left_out > 0 and (marks[i].x < bins[1][1] or marks[i].x > bins[#bins][2]) then table.remove(marks, i) end
  end
  return svg.histogram(bins, {
    title = opts.title or ("%s [%s]: %d samples%s"):format(bench_name, st.name, n,
      left_out > 0 and (", %d beyond 3 IQR not drawn"):format(left_out) or ""),
    x_label = ("time (%s)"):format(unit), y_label = "samples", width = opts.width, height = opts.height,
    curve = M.density(sorted, bins[1][1], bins[#bins][2], width), marks = marks, rug = rug,
    x_format = function(x) return ("%.4g"):format(x) end,
  })
end

-- --- files ------------------------------------------------------------------------

-- A file name's part from a name: letters, digits, '-' and '_' (others as
-- '_'), at most 48 characters.
local function slug(name)
  return (tostring(name):gsub("[^%w%-_]+", "_"):sub(1, 48))
end

-- Every picture of the results: a list of {file = "NAME.svg", text = SVG}.
-- Benchmark i (from 0) draws "i-NAME.svg"; its state j (from 0)
-- "i-NAME-j-hist.svg".
function M.pictures(results, opts)
  local out = {}
  for bi, b in ipairs(results) do
    local stem = ("%d-%s"):format(bi - 1, slug(b.name))
    local chart = M.benchmark_chart(b, opts)
    if chart then out[#out + 1] = {file = stem .. ".svg", text = chart} end
    for si, st in ipairs(b.states) do
      local hist = M.state_histogram(b.name, st, opts)
      if hist then out[#out + 1] = {file = ("%s-%d-hist.svg"):format(stem, si - 1), text = hist} end
    end
  end
  return out
end

-- Whether dir can take the pictures: it exists as a folder (or can be
-- made) and a file can be written in it. Returns true, or nil and why.
function M.can_write(dir)
  if type(dir) ~= "string" or dir == "" then return nil, "a folder name is needed" end
  if dir:find("\0", 1, true) then return nil, "the folder name has a NUL in it" end
  local probe = dir .. "/.cudalua-svg-probe"
  local f = io.open(probe, "w")
  if not f then
    os.execute("mkdir -p '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
    f = io.open(probe, "w")
  end
  if not f then return nil, ("cannot write into '%s' (not a folder, or not writable)"):format(dir) end
  f:close()
  os.remove(probe)
  return true
end

-- Writes the pictures into dir; returns the files written (their paths),
-- or raises naming the one that could not be.
function M.write(results, dir, opts)
  local ok, why = M.can_write(dir)
  if not ok then error(why, 2) end
  local written = {}
  for _, p in ipairs(M.pictures(results, opts)) do
    local path = dir .. "/" .. p.file
    local f, err = io.open(path, "w")
    if not f then error(("cannot write %s: %s"):format(path, tostring(err)), 2) end
    local wrote, werr = f:write(p.text)
    f:close()
    if not wrote then error(("cannot write %s: %s"):format(path, tostring(werr)), 2) end
    written[#written + 1] = path
  end
  return written
end

return M
