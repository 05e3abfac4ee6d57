-- cudalua bench --svg: each benchmark's times against its axes (a line per
-- combination of the other axes, the interval of the mean as error bars)
-- and each state's sample histogram (bins, density, rug, marks), drawn by
-- cuda.bench.svg from results made here; checked as XML, by counting the
-- series, points, bars and ticks, and by placing the values where the data
-- says; drawn by rsvg-convert where it is installed; then the option itself
-- under the fake driver (files written, bad folders refused up front).
local t = require "tap"
local bsvg = require "cuda.bench.svg"
local axes = require "cuda.bench.axes"
local stats = require "cuda.bench.stats"

t.seed()

local function count(text, pattern) return select(2, text:gsub(pattern, "")) end

-- Well-formed XML: every tag closed in order, attributes quoted, no stray '<' or '&'.
local function well_formed(text)
  local stack, pos = {}, 1
  text = text:gsub("^<%?xml.-%?>", "")
  while true do
    local s, e, close, name, attrs, selfclose = text:find("<(/?)([%w:_-]+)(.-)(/?)>", pos)
    if not s then break end
    local between = text:sub(pos, s - 1)
    if between:find("<") then return false, "a stray '<' before " .. name end
    if between:find("&") and not between:find("^[^&]*&[%a#%d]+;") then
      for amp in between:gmatch("&[^;]*;?") do
        if not amp:find("^&[%a#%d]+;$") then return false, "a bare '&': " .. amp end
      end
    end
    if close == "/" then
      if stack[#stack] ~= name then return false, ("</%s> closes <%s>"):format(name, tostring(stack[#stack])) end
      stack[#stack] = nil
    else
      local rest = attrs:gsub('%s+[%w:_-]+="[^"<]*"', "")
      if rest:find("%S") then return false, ("<%s> has a malformed attribute: %s"):format(name, rest) end
      if selfclose ~= "/" then stack[#stack + 1] = name end
    end
    pos = e + 1
  end
  if #stack > 0 then return false, "unclosed <" .. stack[#stack] .. ">" end
  return true
end

local xmllint = os.execute("command -v xmllint >/dev/null 2>&1")
local function valid(text, name)
  local ok, why = well_formed(text)
  if ok and xmllint then
    local path = os.tmpname()
    t.write_file(path, text)
    ok = os.execute(("xmllint --noout '%s' 2>/dev/null"):format(path))
    why = "xmllint refuses it"
    os.remove(path)
  end
  t.ok(ok, name .. " is well-formed XML" .. (xmllint and " (xmllint)" or "") .. (ok and "" or ": " .. tostring(why)))
end

-- --- results made here: T (2 types) x Bytes (2^10..2^16 step 2), samples with a known mean ---------------
local ax_t = axes.new("T", "type", {"float", "double"})
local ax_b = axes.new("Bytes", "int64", {10, 12, 14, 16}, "pow2")
local states, truth = {}, {}
for ti = 1, 2 do
  for bi = 1, 4 do
    local mean = 1e-6 * (ti * 3 + bi * bi) * (0.9 + 0.2 * math.random())
    local n = math.random(200, 900)
    local samples = {}
    for i = 1, n do samples[i] = mean * (1 + 0.05 * (math.random() - 0.5)) end
    local sum = 0
    for i = 1, n do sum = sum + samples[i] end
    local lo, hi = sum / n * (1 - 0.01 * ti), sum / n * (1 + 0.02 * bi)
    states[#states + 1] = {name = ("Device=0 T=%s Bytes=2^%d"):format(ax_t.values[ti], ax_b.inputs[bi]), device = 0,
      index = {T = ti, Bytes = bi}, samples = samples, n_samples = n,
      summaries = {{tag = "nv/cold/time/gpu/mean", value = sum / n},
                   {tag = "cudalua/cold/time/gpu/mean/ci_lo", value = lo},
                   {tag = "cudalua/cold/time/gpu/mean/ci_hi", value = hi}}}
    truth[#truth + 1] = {t = ti, bytes = ax_b.values[bi], mean = sum / n, lo = lo, hi = hi}
  end
end
-- a skipped state and one without summaries draw nothing
states[#states + 1] = {name = "Device=0 T=float Bytes=2^18", device = 0, index = {T = 1, Bytes = 4}, is_skipped = true,
  skip_reason = "no", summaries = {}}
local result = {name = "copy <x> & y", axes = {ax_t, ax_b}, states = states}

-- --- the benchmark's chart --------------------------------------------------------------------
local chart = bsvg.benchmark_chart(result, {width = 700, height = 420})
valid(chart, "the benchmark chart")
t.is(count(chart, "<polyline"), 2, "a line per type (the other axis)")
t.is(count(chart, "<circle"), 8, "a marker per measured state")
t.is(count(chart, 'class="error%-bar"'), 8, "an error bar per state with an interval")
t.like(chart, ">T=double<", "the legend names the series by the other axis")
t.like(chart, ">2%^12<", "pow2 values as 2^k on the x axis")
t.like(chart, "copy &lt;x&gt; &amp; y", "the title is the benchmark's name, escaped")
t.like(chart, ">mean time %(us%)<", "the y axis says the unit")

-- placed where the data says: the plot area, then each marker and bar by the axes' formulas
local left, top, plot_w, plot_h = chart:match('<rect x="([%d.]+)" y="([%d.]+)" width="([%d.]+)" height="([%d.]+)" fill="none"')
left, top, plot_w, plot_h = tonumber(left), tonumber(top), tonumber(plot_w), tonumber(plot_h)
local y_top = 0
for _, p in ipairs(truth) do y_top = math.max(y_top, p.hi * 1e6) end
y_top = y_top * 1.05
local function px(bytes) return left + (math.log(bytes) - math.log(1024)) / (math.log(65536) - math.log(1024)) * plot_w end
local function py(seconds) return top + plot_h - seconds * 1e6 / y_top * plot_h end
local circles, bars = {}, {}
for cx, cy in chart:gmatch('<circle cx="([%d.]+)" cy="([%d.]+)"') do circles[#circles + 1] = {tonumber(cx), tonumber(cy)} end
for x, y1, y2 in chart:gmatch('class="error%-bar"[^>]*d="M([%d.]+) ([%d.]+)V([%d.]+)') do
  bars[#bars + 1] = {tonumber(x), tonumber(y1), tonumber(y2)}
end
if #bars == 0 then
  for x, y1, y2 in chart:gmatch('<path d="M([%d.]+) ([%d.]+)V([%d.]+)[^"]*" class="error%-bar"') do
    bars[#bars + 1] = {tonumber(x), tonumber(y1), tonumber(y2)}
  end
end
local placed, worst = #circles == 8 and #bars == 8, 0
for _, p in ipairs(truth) do
  local found = false
  for _, c in ipairs(circles) do
    if math.abs(c[1] - px(p.bytes)) < 0.02 and math.abs(c[2] - py(p.mean)) < 0.02 then found = true end
  end
  local bar = false
  for _, b in ipairs(bars) do
    if math.abs(b[1] - px(p.bytes)) < 0.02 and math.abs(b[2] - py(p.lo)) < 0.02 and math.abs(b[3] - py(p.hi)) < 0.02 then
      bar = true
    end
  end
  placed = placed and found and bar
  worst = math.max(worst, math.abs(px(p.bytes) - left))
end
t.ok(placed, "every marker at (log2 Bytes, mean) and every bar from lo to hi, to 0.02 px")

-- a benchmark without a numeric axis: positions named by the axis' values
local one = {name = "types", axes = {ax_t}, states = {
  {name = "T=float", index = {T = 1}, summaries = {{tag = "nv/cold/time/gpu/mean", value = 2e-3}}},
  {name = "T=double", index = {T = 2}, summaries = {{tag = "nv/cold/time/gpu/mean", value = 3e-3}}}}}
local cat = bsvg.benchmark_chart(one)
valid(cat, "a chart over a type axis")
t.ok(cat:find(">float<", 1, true) and cat:find(">double<", 1, true) and count(cat, "<circle") == 2
  and count(cat, 'class="error%-bar"') == 0, "a type axis: its values as ticks, no bars without intervals")
t.like(cat, ">mean time %(ms%)<", "milliseconds for millisecond times")
t.is(bsvg.benchmark_chart({name = "none", axes = {}, states = {}}), nil, "no measured state: no chart")
do
  local single = axes.new("N", "int64", {7})
  local x = bsvg.x_axis({single, ax_t, axes.new("F", "float64", {0.5, 1.5})})
  t.is(x and x.name, "F", "the x axis: a numeric axis with several values first")
  t.is(bsvg.x_axis({single, ax_t}).name, "T", "then any axis with several values, before one of a single value")
end
-- cpu-only states: their CPU time, their interval made from the samples when the summaries have none
do
  local xs = {}
  for i = 1, 600 do xs[i] = 5e-6 * (1 + 0.01 * math.random()) end
  -- i.i.d. samples fail the batches' independence test now and then (10% at
  -- its level): the chart then has no interval either
  local iv = stats.interval(xs, 600, 0.95)
  local sum = 0.0
  for i = 1, 600 do sum = sum + xs[i] end
  local st = {name = "cpu", index = {}, samples = xs, n_samples = 600,
    summaries = {{tag = "nv/cpu_only/time/cpu/mean", value = iv and iv.mean or sum / 600}}}
  local mean, lo, hi = bsvg.state_interval(st)
  if iv then
    t.ok(mean == iv.mean and lo == iv.lo and hi == iv.hi, "without ci summaries the interval comes from the samples")
  else
    t.ok(mean == sum / 600 and lo == nil and hi == nil, "without ci summaries or an interval of the samples: none")
  end
end

-- --- a state's histogram ------------------------------------------------------------------------
local st = states[3]
local hist = bsvg.state_histogram(result.name, st, {width = 600, height = 300})
valid(hist, "the histogram")
local sorted = table.move(st.samples, 1, st.n_samples, 1, {})
table.sort(sorted)
local function q(p)
  local pos = p * (#sorted - 1)
  local lo = math.floor(pos)
  return sorted[lo + 1] + (pos - lo) * ((sorted[lo + 2] or sorted[lo + 1]) - sorted[lo + 1])
end
-- Freedman-Diaconis, computed here: 2 IQR / n^(1/3), 5..60 bins (the samples are not quantized)
local want_bins = math.max(5, math.min(60, math.ceil((sorted[#sorted] - sorted[1]) / (2 * (q(0.75) - q(0.25))
  / (#sorted) ^ (1 / 3)))))
t.is(count(hist, 'class="bar"'), want_bins, ("a bar per Freedman-Diaconis bin (%d)"):format(want_bins))
-- the bars' heights are proportional to their counts, which sum to n
local heights, titles = {}, {}
for h in hist:gmatch('height="([%d.]+)" class="bar"') do heights[#heights + 1] = tonumber(h) end
for c in hist:gmatch('class="bar"[^>]*><title>[^<]*: (%d+)</title>') do titles[#titles + 1] = tonumber(c) end
local total, ratio_ok, ratio = 0, #heights == #titles and #titles == want_bins, nil
for i, c in ipairs(titles) do
  total = total + c
  if c > 0 then
    local r = heights[i] / c
    ratio = ratio or r
    ratio_ok = ratio_ok and math.abs(r - ratio) < 0.02 * ratio + 0.01
  end
end
t.is(total, st.n_samples, "the bins' counts sum to the samples")
t.ok(ratio_ok, "bar heights proportional to the counts")
-- recount the first bin from the samples: [min, min + width)
local width = (sorted[#sorted] - sorted[1]) / want_bins
local first = 0
for _, x in ipairs(sorted) do if x < sorted[1] + width then first = first + 1 end end
t.is(titles[1], first, "the first bin holds the samples it should")
t.is(count(hist, 'class="rug"'), st.n_samples, "a rug tick per sample")
t.is(count(hist, 'class="curve"'), 1, "the density curve")
t.is(count(hist, 'class="mark"'), 4, "marks: mean, median and the interval's ends")
t.like(hist, "%d+ samples<", "the title counts the samples")
-- quantized samples (a timer of 0.5 us steps): bins no narrower than a step, none empty between
do
  local xs = {}
  for i = 1, 2000 do xs[i] = (8 + math.floor(4 * math.random() + 4 * math.random())) * 0.5e-6 end
  local q_hist = bsvg.state_histogram("q", {name = "s", samples = xs, n_samples = 2000, summaries = {}})
  local empty, bars = 0, 0
  for c in q_hist:gmatch('class="bar"[^>]*><title>[^<]*: (%d+)</title>') do
    bars = bars + 1
    if tonumber(c) == 0 then empty = empty + 1 end
  end
  t.ok(bars >= 5 and bars <= 8 and empty == 0, ("0.5 us steps: %d bars, none empty (%d)"):format(bars, empty))
  t.near(bsvg.quantum({1e-6, 1e-6, 1.5e-6, 2.5e-6}), 0.5e-6, 1e-9, "the timer's step: the smallest gap between distinct values")
end
-- a stall among the samples: drawn without it, and counted
do
  local xs = {}
  for i = 1, 300 do xs[i] = 2e-6 * (1 + 0.1 * math.random()) end
  xs[math.random(300)] = 5e-3
  local stall = bsvg.state_histogram("b", {name = "s", samples = xs, n_samples = 300, summaries = {}})
  local drawn = 0
  for c in stall:gmatch('class="bar"[^>]*><title>[^<]*: (%d+)</title>') do drawn = drawn + tonumber(c) end
  t.ok(drawn == 299 and stall:find("1 beyond 3 IQR not drawn", 1, true) and stall:find(">time %(us%)<"),
    "a 5 ms stall among 2 us samples: left out of the bars and the scale, and said")
end
-- many samples: the rug thins to MAX_RUG
do
  local xs = {}
  for i = 1, 5000 do xs[i] = 1e-3 + 1e-5 * math.random() end
  local big = bsvg.state_histogram("b", {name = "s", samples = xs, n_samples = 5000, summaries = {}})
  t.ok(count(big, 'class="rug"') <= bsvg.MAX_RUG and count(big, 'class="rug"') >= bsvg.MAX_RUG / 2,
    "5000 samples: the rug thinned to at most " .. bsvg.MAX_RUG)
  local same = bsvg.state_histogram("b", {name = "s", samples = {1e-3, 1e-3, 1e-3}, n_samples = 3, summaries = {}})
  valid(same, "a histogram of equal samples")
end

-- --- the files ------------------------------------------------------------------------------------
local pics = bsvg.pictures({result})
t.is(#pics, 1 + 8, "a chart and a histogram per state with samples")
t.is(pics[1].file, "0-copy_x_y.svg", "the chart's file is named after the benchmark")
t.is(pics[2].file, "0-copy_x_y-0-hist.svg", "a histogram's after the benchmark and the state")
local dir = t.tmpdir()
local written = bsvg.write({result}, dir .. "/new/folder")
t.is(#written, 9, "write: a file each, the folder made")
t.like(t.read_file(written[1]) or "", "^<svg ", "write: an SVG file")
t.write_file(dir .. "/plain", "x")
local ok, why = bsvg.can_write(dir .. "/plain")
t.ok(not ok and why:find("cannot write into"), "a file where the folder should be: " .. tostring(why))
ok, why = bsvg.can_write("")
t.ok(not ok and why:find("folder name"), "an empty folder name")
t.raises(function() bsvg.write({result}, dir .. "/plain/sub") end, "cannot write into", "write raises naming the folder")

-- --- drawn by librsvg ------------------------------------------------------------------------------
local function png_size(path)
  local data = t.read_file(path) or ""
  if data:sub(1, 8) ~= "\137PNG\r\n\26\n" then return nil end
  return string.unpack(">I4", data, 17), string.unpack(">I4", data, 21)
end
if not os.execute("command -v rsvg-convert >/dev/null 2>&1") then
  t.skip("rsvg-convert (librsvg2-bin) is not installed", 2)
else
  for _, p in ipairs{{chart, "chart", 700, 420}, {hist, "hist", 600, 300}} do
    local input, output = dir .. "/" .. p[2] .. ".svg", dir .. "/" .. p[2] .. ".png"
    t.write_file(input, p[1])
    os.execute(("rsvg-convert -o '%s' '%s' 2>/dev/null"):format(output, input))
    local w, h = png_size(output)
    t.ok(w == p[3] and h == p[4], ("librsvg draws the %s %sx%s"):format(p[2], tostring(w), tostring(h)))
  end
end

-- --- cudalua bench --svg, under the fake --------------------------------------------------------------
local so = os.getenv("CUDALUA_FAKE_LIBCUDA")
if not so or not io.open(so) then
  t.skip("no fake driver (CUDALUA_FAKE_LIBCUDA: run by make check)", 5)
  t.done()
  return
end
local fake = require "fake"
local cudalua = t.cudalua()
t.write_file(dir .. "/b.lua", [[
local bench = require "cuda.bench"
bench.register(function(state)
  state:exec(function() end, {batched = false})
end):set_name("empty"):add_int64_axis("N", {1, 2, 3}):set_stopping_criterion("sample_count", {["sample-count"] = 200})
]])
local env = fake.env("CUDALUA_BENCH_L2_BYTES=65536")
local code, _, err = t.run(("cd '%s' && %s %s bench b.lua -q --timeout 2 --svg pics"):format(dir, env, cudalua))
t.is(code, 0, "--svg: the run passes" .. err)
local files = {}
for _, f in ipairs{"0-empty.svg", "0-empty-0-hist.svg", "0-empty-1-hist.svg", "0-empty-2-hist.svg"} do
  local text = t.read_file(dir .. "/pics/" .. f)
  if text and well_formed(text) then files[#files + 1] = f end
end
t.is(#files, 4, "--svg: the chart and three histograms, well-formed")
t.is(count(t.read_file(dir .. "/pics/0-empty.svg") or "", "<circle"), 3, "--svg: a point per state")
code, _, err = t.run(("cd '%s' && %s %s bench b.lua -q --svg plain"):format(dir, env, cudalua))
t.ok(code == 2 and err:find("%-%-svg plain: cannot write into 'plain'"), "--svg onto a file: exit 2 before running: " .. err)
t.ok(not err:find("Run:"), "--svg onto a file: nothing ran")
t.done()
