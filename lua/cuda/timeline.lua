-- cuda.timeline: per-operation spans timed with CUDA events, drawn as a
-- SPDX-License-Identifier: MIT
-- terminal Gantt chart or written as a Chrome trace for Perfetto.
--
-- Two layers. Recording (needs a GPU): a timeline pre-creates its events, so
-- recording spans inside a measured run allocates nothing; collect() turns
-- them into plain span tables {row, label, kind, start_ms, end_ms} with the
-- optional fields bytes (bytes the operation moved) and chunk (the piece of
-- work it belongs to: one chunk's copies and kernel share it).
-- Rendering (pure functions of such span lists, testable anywhere):
-- timeline.gantt and timeline.chrome_trace.
--
--   local tl <close> = timeline.new(dev, {capacity = 256})
--   tl:origin(s1)
--   local id = tl:begin(s1, "stream 1", "H2D 3", "H2D", {bytes = n, chunk = 3})
--   ...copy...;  tl:finish(s1, id)
--   local spans = tl:collect()
--   print(timeline.gantt(spans))            -- as wide as the terminal
--   timeline.write_chrome_trace("trace.json", spans, {process_name = "overlap"})
local json = require "cuda.json"

local M = {}

-- --- recording ----------------------------------------------------------------

local Timeline = {}
Timeline.__index = Timeline
Timeline.__close = function(self) self:close() end

-- capacity: how many spans one recording may hold (default 256); two events
-- per span plus one for the origin are created now.
function M.new(device, opts)
  opts = opts or {}
  local capacity = opts.capacity or 256
  assert(math.type(capacity) == "integer" and capacity > 0,
    "timeline.new: capacity must be a positive integer")
  local events = {}
  for i = 1, 2 * capacity do events[i] = device:create_event{timing = true} end
  local self = setmetatable({
    capacity = capacity, events = events, origin_event = device:create_event{timing = true},
  }, Timeline)
  self:reset()
  return self
end

-- Forgets recorded spans so the same events serve another run.
function Timeline:reset()
  self.used = 0               -- events handed out so far
  self.spans = {}             -- {row, label, kind, start_event, end_event}
  self.origin_recorded = false
end

function Timeline:next_event()
  if self.closed then error("timeline: used after close", 3) end
  if self.used == #self.events then
    error(("timeline: capacity exhausted (%d spans); pass a larger capacity to timeline.new")
      :format(self.capacity), 3)
  end
  self.used = self.used + 1
  return self.events[self.used]
end

-- Records the zero point of the time axis on stream.
function Timeline:origin(stream)
  stream:record(self.origin_event)
  self.origin_recorded = true
end

-- Opens a span on stream in row (a name, e.g. the stream's); kind (default:
-- label) picks the chart symbol, so "H2D 3" and "H2D 4" can share one.
-- fields (optional): {bytes = n, chunk = k}, carried into the collected
-- span and the trace. Returns the span id for finish.
function Timeline:begin(stream, row, label, kind, fields)
  fields = fields or {}
  local event = self:next_event()
  stream:record(event)
  local id = #self.spans + 1
  self.spans[id] = {row = tostring(row), label = tostring(label), kind = kind, start_event = event,
                    bytes = fields.bytes, chunk = fields.chunk}
  return id
end

function Timeline:finish(stream, id)
  local span = self.spans[id]
  if not span then error(("timeline: no span with id %s"):format(tostring(id)), 2) end
  if span.end_event then error(("timeline: span %d is already finished"):format(id), 2) end
  local event = self:next_event()
  stream:record(event)
  span.end_event = event
end

-- Waits for the recorded work and returns the spans, sorted by start time,
-- in milliseconds from the origin. Without tl:origin, the earliest span
-- start is the origin.
function Timeline:collect()
  for id, span in ipairs(self.spans) do
    if not span.end_event then
      error(("timeline: span %d ('%s' in row '%s') was never finished"):format(id, span.label, span.row), 2)
    end
  end
  local reference = self.origin_recorded and self.origin_event
    or (self.spans[1] and self.spans[1].start_event)
  local result = {}
  for id, span in ipairs(self.spans) do
    span.end_event:sync()
    result[id] = {
      row = span.row, label = span.label, kind = span.kind or span.label,
      start_ms = span.start_event - reference, end_ms = span.end_event - reference,
      bytes = span.bytes, chunk = span.chunk,
    }
  end
  if not self.origin_recorded then M.shift_to_zero(result) end
  M.sort(result)
  return result
end

function Timeline:close()
  for _, event in ipairs(self.events) do event:close() end
  self.origin_event:close()
  self.closed = true
end

-- --- span lists -------------------------------------------------------------

-- Sorts spans in place by start time, then end time, then row and label, so
-- equal inputs always give the same order.
function M.sort(spans)
  table.sort(spans, function(a, b)
    if a.start_ms ~= b.start_ms then return a.start_ms < b.start_ms end
    if a.end_ms ~= b.end_ms then return a.end_ms < b.end_ms end
    if a.row ~= b.row then return a.row < b.row end
    return a.label < b.label
  end)
  return spans
end

-- Moves spans in time so that the earliest start is 0.
function M.shift_to_zero(spans)
  local earliest = math.huge
  for _, s in ipairs(spans) do earliest = math.min(earliest, s.start_ms) end
  for _, s in ipairs(spans) do
    s.start_ms, s.end_ms = s.start_ms - earliest, s.end_ms - earliest
  end
  return spans
end

local function kind_of(span) return span.kind or span.label end

-- Rows in the order given by opts.rows, then any others in order of their
-- first span.
local function row_order(spans, wanted)
  local order, seen = {}, {}
  local function add(row)
    if not seen[row] then seen[row] = true; order[#order + 1] = row end
  end
  for _, row in ipairs(wanted or {}) do add(row) end
  for _, s in ipairs(M.sort(table.move(spans, 1, #spans, 1, {}))) do add(s.row) end
  return order
end

-- --- Gantt chart ----------------------------------------------------------------

M.symbols = {H2D = ">", D2H = "<", kernel = "#", compute = "#"}

-- A character per kind: opts.symbols, then M.symbols, then the kind's first
-- unused letter or digit, then a spare character. Returns the map and the
-- kinds in order of first appearance (the legend order).
local function assign_symbols(spans, overrides)
  local map, kinds, taken = {}, {}, {}
  for _, s in ipairs(spans) do
    local kind = kind_of(s)
    if not map[kind] then
      kinds[#kinds + 1] = kind
      map[kind] = overrides and overrides[kind] or M.symbols[kind]
      if map[kind] then taken[map[kind]] = true end
    end
  end
  local spare = "=%@+*~:xo"
  for _, kind in ipairs(kinds) do
    if not map[kind] then
      local pick
      for c in (kind .. spare):gmatch("[%w%p]") do
        if not taken[c] and c ~= "|" then pick = c; break end
      end
      map[kind] = pick or "?"
      taken[map[kind]] = true
    end
  end
  return map, kinds
end

-- A display-width-aware pad/cut (row names may be UTF-8).
local function fit(text, width)
  local length = utf8.len(text) or #text
  if length > width then
    local cut = utf8.offset(text, width + 1) or (width + 1)
    return text:sub(1, cut - 1)
  end
  return text .. (" "):rep(width - length)
end

-- First and last cell (0-based) covered by [start_ms, end_ms] on a bar of
-- `cells` cells spanning [0, total_ms]; every span covers at least one cell.
function M.cell_range(start_ms, end_ms, total_ms, cells)
  local scale = cells / total_ms
  local first = math.min(math.max(math.floor(start_ms * scale), 0), cells - 1)
  local last = math.min(math.ceil(end_ms * scale) - 1, cells - 1)
  return first, math.max(first, last)
end

-- Lanes of one row: spans that overlap in time go to separate lanes, so no
-- span hides another. Greedy: each span takes the first lane that is free.
local function assign_lanes(row_spans)
  local lanes, lane_end = {}, {}
  for _, s in ipairs(row_spans) do
    local lane = 1
    while lane_end[lane] and lane_end[lane] > s.start_ms do lane = lane + 1 end
    lanes[lane] = lanes[lane] or {}
    table.insert(lanes[lane], s)
    lane_end[lane] = math.max(lane_end[lane] or s.end_ms, s.end_ms)
  end
  return lanes
end

local function draw_lane(lane_spans, symbols, total_ms, cells)
  local bar = {}
  for i = 1, cells do bar[i] = " " end
  for _, s in ipairs(lane_spans) do
    local first, last = M.cell_range(s.start_ms, s.end_ms, total_ms, cells)
    for c = first, last do bar[c + 1] = symbols[kind_of(s)] end
  end
  return table.concat(bar)
end

-- A step of 1, 2 or 5 times a power of ten giving at most max_ticks steps.
local function tick_step(total_ms, max_ticks)
  local raw = total_ms / math.max(max_ticks, 1)
  local power = 10 ^ math.floor(math.log(raw, 10))
  for _, m in ipairs{1, 2, 5, 10} do
    if m * power >= raw then return m * power end
  end
end

local function tick_label(ms)
  return (("%.6g"):format(ms))
end

-- The axis under the bars: a ruler with "+" at each tick, then the tick
-- values, each starting at its tick's column where it fits. `margin` is the
-- column where the bars' first cell is.
local function axis_lines(margin, total_ms, cells)
  local step = tick_step(total_ms, cells // 10)
  local ruler = {}
  for i = 1, cells do ruler[i] = "-" end
  local label_line, next_free = "", 1
  for k = 0, math.floor(total_ms / step + 1e-9) do
    local ms = k * step
    local col = math.floor(ms / total_ms * cells) + 1
    if col > cells then break end        -- the right edge itself has no cell
    ruler[col] = "+"
    local text = tick_label(ms)
    if col >= next_free and col + #text - 1 <= cells then
      label_line = label_line .. (" "):rep(col - 1 - #label_line) .. text
      next_free = col + #text + 1
    end
  end
  if #label_line + 3 <= cells then label_line = label_line .. " ms" end
  local indent = (" "):rep(margin - 1)
  return indent .. table.concat(ruler), indent .. label_line
end

-- "legend: > H2D  # kernel", wrapped to width.
local function legend_lines(kinds, symbols, width)
  local lines, line = {}, "legend:"
  for _, kind in ipairs(kinds) do
    local entry = symbols[kind] .. " " .. kind
    if #line + 2 + #entry > width then
      lines[#lines + 1] = line
      line = "  " .. entry
    else
      line = line .. (line == "legend:" and " " or "  ") .. entry
    end
  end
  lines[#lines + 1] = line
  return lines
end

local MIN_CELLS = 10

-- Width of the row-name column and of the bar, so that a line
-- "name |bar|" is at most `width` characters; names are cut before the bar
-- shrinks below MIN_CELLS.
local function layout(rows, width)
  local name_width = 0
  for _, row in ipairs(rows) do name_width = math.max(name_width, utf8.len(row) or #row) end
  local cells = width - name_width - 3
  if cells < MIN_CELLS then
    name_width = math.max(width - 3 - MIN_CELLS, 1)
    cells = math.max(width - name_width - 3, 1)
  end
  return name_width, cells
end

-- The width to draw in on file (default io.stdout): COLUMNS when set, else
-- the terminal's own width, else 80 (see cuda.terminal_columns).
function M.terminal_width(file)
  return require("cuda").terminal_columns(file or io.stdout)
end

-- The chart as a string: per row (per lane, where spans overlap) the name
-- and "|bar|", the time axis, and the legend. opts.width (default
-- M.terminal_width()) is the total line width; opts.rows orders rows; opts.symbols maps kinds to
-- characters; opts.total_ms fixes the end of the axis (default: last end).
-- Cell c (0-based) of the bar covers [c, c+1) * total_ms / cells.
function M.gantt(spans, opts)
  opts = opts or {}
  if #spans == 0 then return "(no spans)\n" end
  local width = opts.width or M.terminal_width()
  local rows = row_order(spans, opts.rows)
  local name_width, cells = layout(rows, width)
  local total_ms = opts.total_ms or 0
  for _, s in ipairs(spans) do total_ms = math.max(total_ms, s.end_ms) end
  if total_ms <= 0 then total_ms = 1e-3 end        -- only zero-length spans at 0
  local ordered = M.sort(table.move(spans, 1, #spans, 1, {}))
  local symbols, kinds = assign_symbols(ordered, opts.symbols)
  local lines = {}
  for _, row in ipairs(rows) do
    local row_spans = {}
    for _, s in ipairs(ordered) do if s.row == row then row_spans[#row_spans + 1] = s end end
    local lanes = #row_spans > 0 and assign_lanes(row_spans) or {{}}   -- a named row may be empty
    for lane, lane_spans in ipairs(lanes) do
      local name = fit(lane == 1 and row or "", name_width)
      lines[#lines + 1] = name .. " |" .. draw_lane(lane_spans, symbols, total_ms, cells) .. "|"
    end
  end
  local ruler, tick_values = axis_lines(name_width + 3, total_ms, cells)
  lines[#lines + 1] = ruler
  lines[#lines + 1] = tick_values
  for _, line in ipairs(legend_lines(kinds, symbols, width)) do lines[#lines + 1] = line end
  return table.concat(lines, "\n") .. "\n"
end

-- --- Chrome trace ---------------------------------------------------------------

-- Times are rounded to whole nanoseconds once, and every event is placed
-- from those: a slice's dur is its rounded end minus its rounded start, so
-- back-to-back spans stay back to back (rounding start and duration apart
-- can make them overlap by 1 ns, which the format does not allow).
local function nanoseconds(ms)
  return math.floor(ms * 1e6 + 0.5)
end

local function microseconds(ns)
  return ns / 1e3
end

local function metadata(name, pid, tid, args)
  return {name = name, ph = "M", pid = pid, tid = tid, args = args}
end

-- What a slice shows when selected: its row, and what the span carries.
local function slice_args(s)
  local args = {stream = s.row, chunk = s.chunk, bytes = s.bytes}
  local seconds = (s.end_ms - s.start_ms) / 1e3
  if s.bytes and seconds > 0 then args["GB/s"] = s.bytes / seconds / 1e9 end
  return args
end

-- Flow arrows through each chunk's spans in start order (H2D -> kernel ->
-- D2H): one "s"/"f" pair a step, each end bound to its slice at the
-- slice's start.
local function flow_events(ordered, pid, tids)
  local events, last_of_chunk, next_id = {}, {}, 1
  for _, s in ipairs(ordered) do
    local previous = s.chunk ~= nil and last_of_chunk[s.chunk]
    if previous then
      local name = "chunk " .. tostring(s.chunk)
      events[#events + 1] = {name = name, cat = "chunk", ph = "s", id = next_id, pid = pid,
                             tid = tids[previous.row], ts = microseconds(nanoseconds(previous.start_ms))}
      events[#events + 1] = {name = name, cat = "chunk", ph = "f", bp = "e", id = next_id, pid = pid,
                             tid = tids[s.row], ts = microseconds(nanoseconds(s.start_ms))}
      next_id = next_id + 1
    end
    if s.chunk ~= nil then last_of_chunk[s.chunk] = s end
  end
  return events
end

-- The Chrome trace event table (JSON object format): one complete ("X")
-- event per span with ts/dur in microseconds and args (stream, and the
-- span's chunk, bytes and GB/s where it has them), flow events linking each
-- chunk's spans, one thread per row, named and ordered by metadata events
-- so Perfetto shows the row names in order.
-- opts: process_name (default "cudalua"), pid (default 1), rows (order).
function M.chrome_trace(spans, opts)
  opts = opts or {}
  local pid = opts.pid or 1
  local events = json.array({
    metadata("process_name", pid, 0, {name = opts.process_name or "cudalua"}),
  })
  local tids = {}
  for i, row in ipairs(row_order(spans, opts.rows)) do
    tids[row] = i
    events[#events + 1] = metadata("thread_name", pid, i, {name = row})
    events[#events + 1] = metadata("thread_sort_index", pid, i, {sort_index = i})
  end
  local ordered = M.sort(table.move(spans, 1, #spans, 1, {}))
  for _, s in ipairs(ordered) do
    local start_ns = nanoseconds(s.start_ms)
    events[#events + 1] = {
      name = s.label, cat = kind_of(s), ph = "X", pid = pid, tid = tids[s.row],
      ts = microseconds(start_ns), dur = microseconds(nanoseconds(s.end_ms) - start_ns),
      args = slice_args(s),
    }
  end
  local flows = flow_events(ordered, pid, tids)
  table.move(flows, 1, #flows, #events + 1, events)
  return {traceEvents = events, displayTimeUnit = "ms"}
end

-- Writes the trace as json.write_file does (a regular file atomically, a
-- FIFO or /dev/stdout in place); opts as chrome_trace,
-- plus indent.
function M.write_chrome_trace(path, spans, opts)
  opts = opts or {}
  json.write_file(path, M.chrome_trace(spans, opts), {indent = opts.indent})
end

-- For other renderers of the same spans (cuda.svg): rows, lanes and ticks as the Gantt chart has them.
M.row_order, M.lanes, M.tick_step, M.kind_of = row_order, assign_lanes, tick_step, kind_of

return M
