-- cuda.svg: the Gantt chart of a timeline's spans and the line chart, as
-- SVG text, then drawn by rsvg-convert (librsvg) to a PNG whose size is read
-- from its header. No GPU needed: the spans and points are made here.
local t = require "tap"
local svg = require "cuda.svg"

t.plan(23)
t.seed()

-- An overlap pipeline's spans: 3 chunks over 3 streams, random lengths.
local spans, clock = {}, 0
for chunk = 1, 3 do
  local row, at = "stream " .. chunk, clock
  for _, kind in ipairs{"H2D", "kernel", "D2H"} do
    local len = 0.2 + math.random()
    spans[#spans + 1] = {row = row, label = kind .. " " .. chunk, kind = kind, start_ms = at, end_ms = at + len,
                         chunk = chunk}
    at = at + len
  end
  clock = clock + 0.4
end
spans[#spans + 1] = {row = "stream 1", label = "H2D <late> & \"odd\"", kind = "H2D", start_ms = 0.1, end_ms = 0.5}

local function count(text, pattern) return select(2, text:gsub(pattern, "")) end

local gantt = svg.gantt(spans, {width = 640, title = "3 streams <test>"})
t.like(gantt, '^<svg xmlns="http://www.w3.org/2000/svg" width="640" height="%d+"', "an SVG document 640 wide")
t.like(gantt, "</svg>\n$", "closed")
t.is(count(gantt, "<title>"), #spans, "a rectangle with a tooltip per span")
t.like(gantt, "H2D &lt;late&gt; &amp; &quot;odd&quot;", "text is escaped")
t.like(gantt, "3 streams &lt;test&gt;", "the title, escaped")
t.ok(not gantt:find("<late>", 1, true), "no raw markup from a label")
t.like(gantt, 'fill="#4e79a7"', "H2D in its colour")
t.like(gantt, 'fill="#59a14f"', "kernel in its colour")
t.like(gantt, ">time %(ms%)<", "the time axis is labelled")
-- stream 1 has an H2D overlapping its first: a second lane, so the chart is taller
local one_lane = svg.gantt({spans[1]}, {width = 640})
t.ok(tonumber(gantt:match('height="(%d+)"')) > tonumber(one_lane:match('height="(%d+)"')), "more rows, more height")

local series = {
  {name = "pinned -> device", points = {{4096, 3.1}, {65536, 18.5}, {1048576, 45.2}, {67108864, 53.0}}},
  {name = "pageable -> device", points = {{4096, 1.2}, {65536, 6.0}, {1048576, 12.7}, {67108864, 14.1}}},
}
local lines = svg.lines(series, {width = 500, height = 300, title = "bandwidth", x_label = "bytes", y_label = "GB/s",
                                 x_base = 16})
t.like(lines, 'width="500" height="300"', "the line chart has the size asked for")
t.is(count(lines, "<polyline"), 2, "one line per series")
t.is(count(lines, "<circle"), 8, "a marker per point")
t.like(lines, ">pageable %-&gt; device<", "the legend names each series")
t.like(lines, ">65536<", "log ticks at the powers of x_base")
t.raises(function() svg.lines({{name = "bad", points = {{0, 1}}}}) end, "x must be > 0", "x = 0 on a log axis is an error")
-- y_log: decades as ticks, a point's height by its logarithm
local decades = svg.lines({{name = "rates", points = {{1, 1}, {2, 10}, {4, 100}}}}, {y_log = true})
local heights = {}
for cy in decades:gmatch('<circle cx="[%d.]+" cy="([%d.]+)"') do heights[#heights + 1] = tonumber(cy) end
t.ok(#heights == 3 and math.abs((heights[1] - heights[2]) - (heights[2] - heights[3])) < 0.05,
     "y_log: 1, 10 and 100 are evenly spaced")
t.ok(decades:find(">10<", 1, true) and decades:find(">100<", 1, true), "y_log: ticks at powers of 10")
t.raises(function() svg.lines({{name = "zero", points = {{1, 0}}}}, {y_log = true}) end, "positive",
         "y_log needs a positive value")

-- drawn by librsvg: the PNG is as large as the SVG says
local function png_size(path)
  local data = t.read_file(path) or ""
  if data:sub(1, 8) ~= "\137PNG\r\n\26\n" then return nil end
  return string.unpack(">I4", data, 17), string.unpack(">I4", data, 21)
end
local function rsvg(text, name)
  local dir = os.getenv("CUDALUA_SVG_DIR") or os.tmpname() .. ".d"
  os.execute("mkdir -p '" .. dir .. "'")
  local input, output = dir .. "/" .. name .. ".svg", dir .. "/" .. name .. ".png"
  t.write_file(input, text)
  local ok = os.execute(("rsvg-convert -o '%s' '%s' 2>/dev/null"):format(output, input))
  return ok and output
end
if not os.execute("command -v rsvg-convert >/dev/null 2>&1") then
  t.skip("rsvg-convert (librsvg2-bin) is not installed", 4)
else
  local png = rsvg(gantt, "gantt")
  local w, h = png_size(png or "")
  t.is(w, 640, "librsvg draws the Gantt chart 640 pixels wide")
  t.is(h, tonumber(gantt:match('height="(%d+)"')), "and as high as it says")
  w, h = png_size(rsvg(lines, "lines") or "")
  t.is(w, 500, "the line chart: 500 wide")
  t.is(h, 300, "and 300 high")
end
t.done()
