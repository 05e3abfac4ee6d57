-- cuda.timeline's Chrome trace (what Perfetto draws) and the width the
-- Gantt chart takes from the terminal (cuda.isatty, cuda.terminal_columns).
-- No GPU needed: traces are built from synthetic span lists.
local t = require "tap"
local json = require "cuda.json"
local timeline = require "cuda.timeline"
local cuda = require "cuda"
local cudalua = t.cudalua()

t.plan(23)
t.seed()

-- The trace as a consumer reads it: JSON text decoded, times in whole ns.
local function decoded_trace(spans, opts)
  return json.decode(json.encode(timeline.chrome_trace(spans, opts))).traceEvents
end

local function ns(us) return math.floor(us * 1e3 + 0.5) end

local function events_of(trace, phase)
  local list = {}
  for _, ev in ipairs(trace) do if ev.ph == phase then list[#list + 1] = ev end end
  return list
end

-- --- a long run: back-to-back slices stay back to back after rounding ------------

do
  local rows, spans = {"copy in", "compute", "copy out"}, {}
  local per_row, total_ms = 3000, 1e5                  -- 100 s
  for _, row in ipairs(rows) do
    local now = math.random() * math.sqrt(2)
    for i = 1, per_row do
      -- irrational-ish lengths averaging total_ms / per_row
      local length = (math.random() + 0.5) * total_ms / per_row * (math.pi / 3.1416)
      spans[#spans + 1] = {row = row, label = row .. " " .. i, start_ms = now, end_ms = now + length}
      now = now + length
    end
  end
  local trace = decoded_trace(spans)
  local by_tid = {}
  for _, ev in ipairs(events_of(trace, "X")) do
    by_tid[ev.tid] = by_tid[ev.tid] or {}
    table.insert(by_tid[ev.tid], {start = ns(ev.ts), finish = ns(ev.ts) + ns(ev.dur), label = ev.name})
  end
  local partial, gaps, checked = 0, 0, 0
  for _, slices in pairs(by_tid) do
    table.sort(slices, function(a, b) return a.start < b.start end)
    for i = 2, #slices do
      local prev, cur = slices[i - 1], slices[i]
      if cur.start < prev.finish and cur.finish > prev.finish then partial = partial + 1 end
      if cur.start ~= prev.finish then gaps = gaps + 1 end
      checked = checked + 1
    end
  end
  t.is(checked, #spans - #rows, "long run: every neighbouring pair of slices checked")
  t.is(partial, 0, "long run: no slices partially overlap on any track after rounding")
  t.is(gaps, 0, "long run: back-to-back spans stay exactly back to back")
  local wrong_end = 0
  local by_label = {}
  for _, ev in ipairs(events_of(trace, "X")) do by_label[ev.name] = ev end
  for _, s in ipairs(spans) do
    local ev = by_label[s.label]
    if ns(ev.ts) + ns(ev.dur) ~= math.floor(s.end_ms * 1e6 + 0.5) then wrong_end = wrong_end + 1 end
  end
  t.is(wrong_end, 0, "long run: every slice ends at its span's end, rounded to the ns")
end

-- --- args and flow events ----------------------------------------------------------

do
  -- two chunks through three streams, and a span that belongs to no chunk
  local spans = {
    {row = "s1", label = "H2D 1", kind = "H2D", start_ms = 0, end_ms = 0.5, bytes = 1e6, chunk = 1},
    {row = "s2", label = "kernel 1", kind = "kernel", start_ms = 0.5, end_ms = 2, chunk = 1},
    {row = "s3", label = "D2H 1", kind = "D2H", start_ms = 2, end_ms = 2.25, bytes = 5e5, chunk = 1},
    {row = "s1", label = "H2D 2", kind = "H2D", start_ms = 0.5, end_ms = 1, bytes = 1e6, chunk = 2},
    {row = "s2", label = "kernel 2", kind = "kernel", start_ms = 2, end_ms = 3.5, chunk = 2},
    {row = "s3", label = "D2H 2", kind = "D2H", start_ms = 3.5, end_ms = 3.75, bytes = 5e5, chunk = 2},
    {row = "host", label = "sync", start_ms = 3.75, end_ms = 4},
  }
  local trace = decoded_trace(spans)
  local slices, tid_row = {}, {}
  for _, ev in ipairs(trace) do
    if ev.ph == "X" then slices[ev.name] = ev end
    if ev.ph == "M" and ev.name == "thread_name" then tid_row[ev.tid] = ev.args.name end
  end
  local h2d = slices["H2D 1"].args
  t.is(h2d.bytes, 1e6, "args: bytes")
  t.near(h2d["GB/s"], 2.0, 1e-12, "args: GB/s from bytes and duration (1 MB in 0.5 ms)")
  t.is(h2d.chunk, 1, "args: chunk")
  t.is(h2d.stream, "s1", "args: stream (the row)")
  local sync = slices["sync"].args
  t.ok(sync.bytes == nil and sync["GB/s"] == nil and sync.chunk == nil and sync.stream == "host",
    "args: a span without bytes or chunk has only its stream")

  local starts, finishes = events_of(trace, "s"), events_of(trace, "f")
  t.is(#starts, 4, "flows: one start per step, two steps per chunk")
  t.is(#finishes, 4, "flows: one finish per step")
  local ids, links, bad = {}, {}, 0
  for _, s in ipairs(starts) do
    if ids[s.id] then bad = bad + 1 end
    ids[s.id] = s
  end
  -- the slice of track tid that starts at ts
  local function slice_at(tid, ts)
    for name, ev in pairs(slices) do
      if ev.tid == tid and ev.ts == ts then return name end
    end
  end
  for _, f in ipairs(finishes) do
    local s = ids[f.id]
    if not s or f.bp ~= "e" or s.name ~= f.name then bad = bad + 1
    else links[#links + 1] = slice_at(s.tid, s.ts) .. " -> " .. slice_at(f.tid, f.ts) end
  end
  t.is(bad, 0, "flows: ids unique, each finish matches a start and binds to its enclosing slice")
  table.sort(links)
  t.is(table.concat(links, ", "),
    "H2D 1 -> kernel 1, H2D 2 -> kernel 2, kernel 1 -> D2H 1, kernel 2 -> D2H 2",
    "flows: each chunk's H2D -> kernel -> D2H, in start order, across tracks")
  t.ok(tid_row[slices["kernel 1"].tid] == "s2", "flows: slices keep their own tracks")
end

-- --- the width of the chart: the terminal's ---------------------------------------

t.is(cuda.isatty(io.stdout), false, "isatty: the test's stdout is a pipe, not a terminal")
t.raises(function() cuda.isatty("stdout") end, "file or file descriptor", "isatty: a string is refused")
local closed = io.tmpfile()
closed:close()
t.raises(function() cuda.isatty(closed) end, "closed file", "isatty: a closed file is refused")

-- One span; the printed chart's bar is the width minus the name and "  ||".
local chart_cmd = cudalua .. [[ -e 'io.write(require("cuda.timeline").gantt({{row = "a", label = "x",
  start_ms = 0, end_ms = 1}}))' | head -1]]
local _, out = t.run("env -u COLUMNS " .. chart_cmd)
t.is(#out - 1, 80, "gantt: 80 columns when stdout is not a terminal")
_, out = t.run("COLUMNS=57 " .. chart_cmd)
t.is(#out - 1, 57, "gantt: COLUMNS sets the width")
_, out = t.run("COLUMNS=wide " .. cudalua .. " -l cuda -e 'print(cuda.terminal_columns())'")
t.is(out, "80\n", "terminal_columns: a COLUMNS that is not a number is ignored")

if t.run("command -v script >/dev/null && command -v stty >/dev/null") ~= 0 then
  t.skip("script(1) or stty is not installed", 3)
else
  local probe = "print(cuda.isatty(io.stdout), cuda.isatty(1), cuda.terminal_columns(), cuda.terminal_columns(io.stdout))"
  _, out = t.run(("env -u COLUMNS script -qec \"stty cols 123; %s -l cuda -e '%s'\" /dev/null < /dev/null"):format(cudalua, probe))
  out = out:gsub("\r", "")
  t.like(out, "^true\ttrue\t", "isatty: a pseudo-terminal is a terminal, as a file and as a descriptor")
  t.like(out, "\t123\t123\n", "terminal_columns: the terminal's own width (TIOCGWINSZ)")
  _, out = t.run(("COLUMNS=99 script -qec \"stty cols 123; %s -l cuda -e '%s'\" /dev/null < /dev/null"):format(cudalua, probe))
  t.like(out:gsub("\r", ""), "\t99\t99\n", "terminal_columns: COLUMNS overrides the terminal's width")
end

t.done()
