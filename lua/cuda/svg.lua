-- cuda.svg: charts as SVG text, drawn from plain tables (no GPU, no library).
-- SPDX-License-Identifier: MIT
--
--   svg.gantt(spans, opts)      -- a timeline's spans (cuda.timeline) as a Gantt chart
--   svg.lines(series, opts)     -- y against x, x on a log axis, one line per series
--                                  (a point's lo and hi: an error bar)
--   svg.histogram(bins, opts)   -- counts in bins, with a curve, marks and a rug
--
-- Both return the SVG document as a string; the width and height are
-- opts.width and opts.height (pixels), and any viewer or rsvg-convert draws it.
local timeline = require "cuda.timeline"

local M = {}

-- Tableau 10: colours told apart on screen and on paper.
M.palette = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
             "#9c755f", "#bab0ac"}
-- The overlap pipeline's kinds always get the same colours.
M.kind_colors = {H2D = "#4e79a7", D2H = "#f28e2b", kernel = "#59a14f", compute = "#59a14f"}

local FONT_SIZE, CHAR_WIDTH = 12, 7      -- CHAR_WIDTH: an average glyph at FONT_SIZE, for layout

local function escape(text)
  return (tostring(text):gsub("[&<>\"']", {["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;",
                                          ['"'] = "&quot;", ["'"] = "&#39;"}))
end
M.escape = escape

local function num(x) return (("%.2f"):format(x):gsub("%.?0+$", "")) end

-- An element: tag, attributes in the order given ({name, value, ...}), optional text.
local function element(tag, attrs, text)
  local parts = {"<" .. tag}
  for i = 1, #attrs, 2 do
    local v = attrs[i + 1]
    parts[#parts + 1] = ('%s="%s"'):format(attrs[i], type(v) == "number" and num(v) or escape(v))
  end
  local open = table.concat(parts, " ")
  if text == nil then return open .. "/>" end
  return open .. ">" .. text .. "</" .. tag .. ">"
end

local function label(x, y, text, anchor, extra)
  local attrs = {"x", x, "y", y, "text-anchor", anchor or "start"}
  for _, v in ipairs(extra or {}) do attrs[#attrs + 1] = v end
  return element("text", attrs, escape(text))
end

local function document(width, height, body, title)
  local head = {
    ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" ' ..
     'font-family="sans-serif" font-size="%d">'):format(width, height, width, height, FONT_SIZE),
    element("rect", {"x", 0, "y", 0, "width", width, "height", height, "fill", "white"}),
  }
  if title then head[#head + 1] = label(width / 2, 18, title, "middle", {"font-weight", "bold"}) end
  return table.concat(head, "\n") .. "\n" .. table.concat(body, "\n") .. "\n</svg>\n"
end

-- A row of legend entries (a swatch and a name each) from x, y.
local function legend(body, entries, x, y)
  for _, e in ipairs(entries) do
    body[#body + 1] = element("rect", {"x", x, "y", y - 10, "width", 12, "height", 12, "fill", e.color})
    body[#body + 1] = label(x + 16, y, e.name)
    x = x + 16 + #e.name * CHAR_WIDTH + 16
  end
end

-- Ticks of a linear axis over [0, total]: multiples of a 1-2-5 step.
local function linear_ticks(total, max_ticks)
  local step, ticks = timeline.tick_step(total, max_ticks), {}
  for k = 0, math.floor(total / step + 1e-9) do ticks[#ticks + 1] = k * step end
  return ticks
end

-- --- Gantt ---------------------------------------------------------------------

local kind_of = timeline.kind_of

-- A colour per kind, in order of first appearance: opts.colors, then
-- M.kind_colors, then the palette.
local function kind_colors(spans, overrides)
  local colors, kinds, next_color = {}, {}, 1
  for _, s in ipairs(spans) do
    local kind = kind_of(s)
    if not colors[kind] then
      kinds[#kinds + 1] = kind
      colors[kind] = overrides and overrides[kind] or M.kind_colors[kind]
      if not colors[kind] then
        colors[kind], next_color = M.palette[(next_color - 1) % #M.palette + 1], next_color + 1
      end
    end
  end
  return colors, kinds
end

local function span_rect(s, x0, scale, y, height, color)
  local tip = ("%s: %.4g - %.4g ms"):format(s.label or kind_of(s), s.start_ms, s.end_ms)
  return element("rect", {"x", x0 + s.start_ms * scale, "y", y, "width", math.max((s.end_ms - s.start_ms) * scale, 0.5),
                          "height", height, "fill", color, "stroke", "white", "stroke-width", 0.5},
                 "<title>" .. escape(tip) .. "</title>")
end

-- spans: {row, label, kind, start_ms, end_ms} (timeline:collect()). opts:
-- width (default 960), lane_height (default 18), rows (row order), colors
-- (kind -> colour), title, total_ms (the axis' end; default the last end).
function M.gantt(spans, opts)
  opts = opts or {}
  local width, lane_h = opts.width or 960, opts.lane_height or 18
  local ordered = timeline.sort(table.move(spans, 1, #spans, 1, {}))
  local rows, total = timeline.row_order(ordered, opts.rows), opts.total_ms or 0
  for _, s in ipairs(ordered) do total = math.max(total, s.end_ms) end
  if total <= 0 then total = 1e-3 end
  local name_w = 0
  for _, row in ipairs(rows) do name_w = math.max(name_w, (utf8.len(row) or #row) * CHAR_WIDTH) end
  local x0, top = name_w + 16, opts.title and 32 or 12
  local plot_w = width - x0 - 16
  local scale, colors, kinds = plot_w / total, kind_colors(ordered, opts.colors)
  local body, y = {}, top
  for _, row in ipairs(rows) do
    local row_spans = {}
    for _, s in ipairs(ordered) do if s.row == row then row_spans[#row_spans + 1] = s end end
    local lanes = #row_spans > 0 and timeline.lanes(row_spans) or {{}}
    body[#body + 1] = label(x0 - 8, y + lane_h * 0.7, row, "end")
    for _, lane in ipairs(lanes) do
      for _, s in ipairs(lane) do body[#body + 1] = span_rect(s, x0, scale, y + 1, lane_h - 2, colors[kind_of(s)]) end
      y = y + lane_h
    end
    body[#body + 1] = element("line", {"x1", x0, "y1", y, "x2", x0 + plot_w, "y2", y, "stroke", "#e0e0e0"})
  end
  for _, ms in ipairs(linear_ticks(total, math.max(plot_w // 80, 1))) do
    local x = x0 + ms * scale
    body[#body + 1] = element("line", {"x1", x, "y1", top, "x2", x, "y2", y + 4, "stroke", "#999", "stroke-width", 0.5})
    body[#body + 1] = label(x, y + 18, ("%.6g"):format(ms), "middle")
  end
  body[#body + 1] = label(x0 + plot_w, y + 34, "time (ms)", "end")
  local entries = {}
  for i, kind in ipairs(kinds) do entries[i] = {name = kind, color = colors[kind]} end
  legend(body, entries, x0, y + 34)
  return document(width, y + 48, body, opts.title)
end

-- --- lines ---------------------------------------------------------------------

-- The range of every point's x and y (and error bar); x must be > 0 on a log axis.
local function extent(series, log_x)
  local x_min, x_max, y_max = math.huge, -math.huge, 0
  for _, s in ipairs(series) do
    for _, p in ipairs(s.points) do
      assert(not log_x or p[1] > 0, "svg.lines: x must be > 0 on a log axis")
      x_min, x_max, y_max = math.min(x_min, p[1]), math.max(x_max, p[1]), math.max(y_max, p[2], p.hi or 0)
    end
  end
  assert(x_min <= x_max, "svg.lines: no points")
  if x_min == x_max then x_min, x_max = x_min / 2, x_max * 2 end
  return x_min, x_max, y_max > 0 and y_max * 1.05 or 1
end

-- Positions on the x axis: log (default) or linear, and the ticks to draw.
local function x_axis(x_min, x_max, opts)
  if opts.x_log == false then
    return function(x) return (x - x_min) / (x_max - x_min) end, linear_ticks(x_max, 8)
  end
  local base, lo, hi = opts.x_base or 10, math.log(x_min), math.log(x_max)
  local ticks = {}
  for k = math.ceil(math.log(x_min, base) - 1e-9), math.floor(math.log(x_max, base) + 1e-9) do
    ticks[#ticks + 1] = base ^ k
  end
  return function(x) return (math.log(x) - lo) / (hi - lo) end, ticks
end

-- Positions on the y axis, 0 at the bottom, 1 at the top: linear from 0,
-- or (y_log) log over the positive values, ticks at powers of 10.
local function y_axis(series, y_max, opts)
  if not opts.y_log then return function(y) return y / y_max end, linear_ticks(y_max, 8) end
  local y_min = math.huge
  for _, s in ipairs(series) do
    for _, p in ipairs(s.points) do if p[2] > 0 then y_min = math.min(y_min, p[2]) end end
  end
  assert(y_min < math.huge, "svg.lines: y_log needs positive values")
  local lo, hi = math.log(y_min, 10), math.log(y_max, 10)
  lo, hi = math.floor(lo), math.max(math.ceil(hi), math.floor(lo) + 1)
  local ticks = {}
  for k = lo, hi do ticks[#ticks + 1] = 10 ^ k end
  return function(y) return (math.log(math.max(y, 10 ^ lo), 10) - lo) / (hi - lo) end, ticks
end

-- An error bar from lo to hi at x (pixels), with caps; class "error-bar".
local function error_bar(body, x, y_lo, y_hi, color, tip)
  local cap = 4
  body[#body + 1] = element("path", {"d", ("M%s %sV%sM%s %sH%sM%s %sH%s"):format(num(x), num(y_lo), num(y_hi),
    num(x - cap), num(y_lo), num(x + cap), num(x - cap), num(y_hi), num(x + cap)),
    "class", "error-bar", "stroke", color, "stroke-width", 1.2, "fill", "none"}, "<title>" .. escape(tip) .. "</title>")
end

-- series: {{name = "pinned -> device", points = {{x, y}, ...}}, ...}; a
-- point with lo and hi fields ({x, y, lo = , hi = }) gets an error bar
-- from lo to hi. opts: width (default 800), height (default 480), title,
-- x_label, y_label, x_log (default true), x_base (log ticks at its powers;
-- default 10), y_log (default false: linear from 0), x_format and y_format
-- (tick text; default "%g"), x_ticks (a list of {x, text}: these ticks
-- instead, e.g. names for positions 1..n), x_range ({lo, hi}: the x axis'
-- ends instead of the points').
function M.lines(series, opts)
  opts = opts or {}
  local width, height = opts.width or 800, opts.height or 480
  local x_fmt = opts.x_format or function(x) return ("%.10g"):format(x) end
  local y_fmt = opts.y_format or function(y) return ("%g"):format(y) end
  local x_min, x_max, y_max = extent(series, opts.x_log ~= false)
  if opts.x_range then x_min, x_max = opts.x_range[1], opts.x_range[2] end
  local where, x_ticks = x_axis(x_min, x_max, opts)
  if opts.x_ticks then
    x_ticks = {}
    for i, tick in ipairs(opts.x_ticks) do x_ticks[i] = tick[1] end
    local text = {}
    for _, tick in ipairs(opts.x_ticks) do text[tick[1]] = tick[2] end
    x_fmt = function(x) return text[x] end
  end
  local left, right, top, bottom = 64, width - 24, opts.title and 36 or 16, height - 64
  local function px(x) return left + where(x) * (right - left) end
  local y_where, y_ticks = y_axis(series, y_max, opts)
  local function py(y) return bottom - y_where(y) * (bottom - top) end
  local body = {element("rect", {"x", left, "y", top, "width", right - left, "height", bottom - top,
                                 "fill", "none", "stroke", "#333"})}
  for _, y in ipairs(y_ticks) do
    body[#body + 1] = element("line", {"x1", left, "y1", py(y), "x2", right, "y2", py(y), "stroke", "#e0e0e0"})
    body[#body + 1] = label(left - 6, py(y) + 4, y_fmt(y), "end")
  end
  for _, x in ipairs(x_ticks) do
    body[#body + 1] = element("line", {"x1", px(x), "y1", top, "x2", px(x), "y2", bottom, "stroke", "#e0e0e0"})
    body[#body + 1] = label(px(x), bottom + 16, x_fmt(x), "middle")
  end
  local entries = {}
  for i, s in ipairs(series) do
    local color, points = s.color or M.palette[(i - 1) % #M.palette + 1], {}
    for j, p in ipairs(s.points) do
      points[j] = num(px(p[1])) .. "," .. num(py(p[2]))
      if p.lo and p.hi then
        error_bar(body, px(p[1]), py(p.lo), py(p.hi), color, ("%s: %s [%s, %s]"):format(s.name, y_fmt(p[2]),
          y_fmt(p.lo), y_fmt(p.hi)))
      end
      body[#body + 1] = element("circle", {"cx", px(p[1]), "cy", py(p[2]), "r", 2.5, "fill", color})
    end
    body[#body + 1] = element("polyline", {"points", table.concat(points, " "), "fill", "none", "stroke", color,
                                           "stroke-width", 2})
    entries[i] = {name = s.name, color = color}
  end
  if opts.x_label then body[#body + 1] = label((left + right) / 2, bottom + 34, opts.x_label, "middle") end
  if opts.y_label then
    body[#body + 1] = label(16, (top + bottom) / 2, opts.y_label, "middle",
                            {"transform", ("rotate(-90 16 %s)"):format(num((top + bottom) / 2))})
  end
  legend(body, entries, left, height - 10)
  return document(width, height, body, opts.title)
end

-- --- histogram -------------------------------------------------------------------

-- Ticks of a linear axis over [lo, hi]: multiples of a 1-2-5 step.
local function range_ticks(lo, hi, max_ticks)
  local step, ticks = timeline.tick_step(hi - lo, max_ticks), {}
  for k = math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9) do ticks[#ticks + 1] = k * step end
  return ticks
end

-- bins: {{lo, hi, count}, ...} in order, as a bar each (class "bar").
-- opts: width (default 640), height (default 360), title, x_label,
-- y_label (default "samples"), x_format (tick text), color, curve (a list
-- of {x, y} in the bars' units, drawn as a filled line: a density),
-- marks (a list of {x = , name = , color = , dash = }: vertical lines,
-- named in the legend), rug (a list of x values: a tick each under the
-- axis, class "rug").
function M.histogram(bins, opts)
  opts = opts or {}
  assert(type(bins) == "table" and #bins > 0, "svg.histogram: no bins")
  for i, b in ipairs(bins) do
    assert(type(b) == "table" and type(b[1]) == "number" and type(b[2]) == "number" and type(b[3]) == "number"
      and b[1] <= b[2], ("svg.histogram: bin %d must be {lo, hi, count} with lo <= hi"):format(i))
  end
  local width, height = opts.width or 640, opts.height or 360
  local x_fmt = opts.x_format or function(x) return ("%g"):format(x) end
  local x_lo, x_hi, y_max = bins[1][1], bins[#bins][2], 0
  for _, b in ipairs(bins) do y_max = math.max(y_max, b[3]) end
  for _, p in ipairs(opts.curve or {}) do y_max = math.max(y_max, p[2]) end
  for _, m in ipairs(opts.marks or {}) do x_lo, x_hi = math.min(x_lo, m.x), math.max(x_hi, m.x) end
  if x_hi <= x_lo then x_lo, x_hi = x_lo - 0.5, x_hi + 0.5 end
  y_max = y_max > 0 and y_max * 1.05 or 1
  local left, right, top, bottom = 76, width - 24, opts.title and 36 or 16, height - 72
  local function px(x) return left + (x - x_lo) / (x_hi - x_lo) * (right - left) end
  local function py(y) return bottom - y / y_max * (bottom - top) end
  local color = opts.color or M.palette[1]
  local body = {element("rect", {"x", left, "y", top, "width", right - left, "height", bottom - top,
                                 "fill", "none", "stroke", "#333"})}
  for _, y in ipairs(linear_ticks(y_max, 6)) do
    body[#body + 1] = element("line", {"x1", left, "y1", py(y), "x2", right, "y2", py(y), "stroke", "#e0e0e0"})
    body[#body + 1] = label(left - 6, py(y) + 4, ("%g"):format(y), "end")
  end
  for _, x in ipairs(range_ticks(x_lo, x_hi, math.max((right - left) // 90, 2))) do
    body[#body + 1] = label(px(x), bottom + 16, x_fmt(x), "middle")
  end
  for _, b in ipairs(bins) do
    body[#body + 1] = element("rect", {"x", px(b[1]), "y", py(b[3]), "width", math.max(px(b[2]) - px(b[1]), 0.5),
      "height", bottom - py(b[3]), "class", "bar", "fill", color, "fill-opacity", 0.45, "stroke", "white",
      "stroke-width", 0.5}, "<title>" .. escape(("%s - %s: %d"):format(x_fmt(b[1]), x_fmt(b[2]), b[3])) .. "</title>")
  end
  if opts.curve and #opts.curve > 1 then
    local points = {}
    for i, p in ipairs(opts.curve) do points[i] = num(px(p[1])) .. "," .. num(py(p[2])) end
    body[#body + 1] = element("polyline", {"points", table.concat(points, " "), "class", "curve", "fill", "none",
      "stroke", color, "stroke-width", 2})
  end
  for _, x in ipairs(opts.rug or {}) do
    body[#body + 1] = element("line", {"x1", px(x), "y1", bottom, "x2", px(x), "y2", bottom - 6, "class", "rug",
      "stroke", color, "stroke-opacity", 0.5})
  end
  local entries = {}
  for _, m in ipairs(opts.marks or {}) do
    body[#body + 1] = element("line", {"x1", px(m.x), "y1", top, "x2", px(m.x), "y2", bottom, "class", "mark",
      "stroke", m.color or "#333", "stroke-width", 1.5, "stroke-dasharray", m.dash or "none"},
      "<title>" .. escape(("%s: %s"):format(m.name, x_fmt(m.x))) .. "</title>")
    if m.name then entries[#entries + 1] = {name = m.name, color = m.color or "#333"} end
  end
  if opts.x_label then body[#body + 1] = label((left + right) / 2, bottom + 34, opts.x_label, "middle") end
  body[#body + 1] = label(16, (top + bottom) / 2, opts.y_label or "samples", "middle",
                          {"transform", ("rotate(-90 16 %s)"):format(num((top + bottom) / 2))})
  legend(body, entries, left, height - 10)
  return document(width, height, body, opts.title)
end

return M
