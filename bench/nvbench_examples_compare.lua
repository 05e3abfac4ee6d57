-- Compares cuda-bench's and cudalua bench's output for NVBench's Python examples and their ports
-- SPDX-License-Identifier: MIT
--
--   cudalua bench/nvbench_examples_compare.lua --nvbench DIR --cudalua DIR [--cudalua DIR2]
--           [--model t/nvbench_examples_model.lua] [--report FILE] [NAME ...]
--
-- Each DIR holds NAME.json and NAME.md (--json, --md) and NAME.log (stderr)
-- of each example NAME (bench/nvbench_examples.sh lays them out so). Per
-- example it compares NVBench's JSON with each cudalua run's: the same
-- benchmarks (by name, else by position), states (by axis values), axes,
-- skips and their reasons, summary tags in order, and each summary's
-- fields (name, hint, hide, description, data names and types; the values
-- of summaries that are not measurements); the markdown tables' columns;
-- the cold GPU and CPU-only times, each pair within their combined noise
-- (|a - b| <= sqrt((noise_a a)^2 + (noise_b b)^2)); and it counts the
-- blocking-kernel timeouts in cudalua's logs (a failure), and the
-- measurements taken again because a call broke the hold (reported). The report (markdown) gives
-- a verdict per example, PASS or FAIL with what differs; stdout gets its
-- summary table. With --model, NVBench's JSON is also compared with the
-- test suite's model of it (how wrong the model was).
--
-- As a module (loadfile(path)("--module")): M.diff, M.markdown_tables,
-- M.columns_from_json, M.compare_columns, M.times, M.blocking_timeouts, M.broken_holds, M.report.
local json = require "cuda.json"

local M = {}

-- --- reading ----------------------------------------------------------------------------

function M.read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local text = f:read("a")
  f:close()
  return text
end

function M.read_json(path)
  local text = M.read(path)
  if not text then return nil, path .. ": no such file" end
  local ok, doc = pcall(json.decode, text)
  if not ok then return nil, path .. ": " .. tostring(doc) end
  return doc
end

local function present(v) return v ~= nil and v ~= json.null end

-- A field as the report shows it: absent, null, or its value.
local function shown(v)
  if v == nil then return "absent" end
  if v == json.null then return "null" end
  if type(v) == "table" then return "(table)" end
  return ("'%s'"):format(tostring(v))
end

-- A number from NVBench's value strings ("1.5e-05", "inf", "nan").
function M.number(v)
  if type(v) == "number" then return v end
  if type(v) ~= "string" then return nil end
  if v == "inf" or v == "+inf" then return math.huge end
  if v == "-inf" then return -math.huge end
  if v == "nan" or v == "-nan" then return 0 / 0 end
  return tonumber(v)
end

-- --- differences ------------------------------------------------------------------------
-- A difference: {kind, bench, state, what}. Kinds: document, benchmark, axis,
-- state, skip, summary, field, value (structure); markdown; time; log.

local Diffs = {}
Diffs.__index = Diffs

local function new_diffs() return setmetatable({list = {}}, Diffs) end

function Diffs:add(kind, bench, state, what, ...)
  self.list[#self.list + 1] = {kind = kind, bench = bench, state = state, what = select("#", ...) > 0 and what:format(...) or what}
end

local MEASURED = {"^nv/cold/", "^nv/batch/", "^nv/cpu_only/", "^nv/json/", "^cudalua/"}

-- Whether a summary is a measurement (its value differs run to run) rather than a declared count.
function M.is_measured(tag)
  for _, p in ipairs(MEASURED) do if tag:find(p) then return true end end
  return false
end

local function keys_of(t)
  local list = {}
  for k in pairs(t) do if type(k) == "string" and not k:find("^_") then list[#list + 1] = k end end
  table.sort(list)
  return list
end

-- Keys one side has and the other lacks (ref's optional keys excepted).
local function compare_keys(d, kind, bench, state, ref, got)
  local optional = ref._optional_keys or {}
  if ref._reason_pattern then optional = setmetatable({skip_reason = true}, {__index = optional}) end
  for _, k in ipairs(keys_of(ref)) do
    if got[k] == nil and not optional[k] then d:add(kind, bench, state, "key '%s' missing", k) end
  end
  for _, k in ipairs(keys_of(got)) do
    if ref[k] == nil and not optional[k] then d:add(kind, bench, state, "extra key '%s'", k) end
  end
end

local function axis_value_string(type_, v)
  if type_ == "int64" then
    local n = M.number(v)
    return n and math.tointeger(n) and ("%d"):format(math.tointeger(n)) or tostring(v)
  elseif type_ == "float64" then
    local n = M.number(v)
    return n and ("%.17g"):format(n) or tostring(v)
  end
  return tostring(v)
end

-- A state's identity: its axis values, numbers compared as numbers.
function M.state_key(st)
  local parts = {}
  for _, av in ipairs(st.axis_values or {}) do
    parts[#parts + 1] = ("%s=%s"):format(av.name, axis_value_string(av.type, av.value))
  end
  return table.concat(parts, " ")
end

local function compare_axes(d, bench, ref, got)
  local by_name = {}
  for i, a in ipairs(got) do by_name[a.name] = {axis = a, index = i} end
  local seen = {}
  for i, ra in ipairs(ref) do
    local g = by_name[ra.name]
    if not g then
      d:add("axis", bench, nil, "axis '%s' missing", tostring(ra.name))
    else
      seen[ra.name] = true
      local ga = g.axis
      if g.index ~= i then d:add("axis", bench, nil, "axis '%s' at position %d (NVBench %d)", ra.name, g.index, i) end
      for _, field in ipairs{"type", "flags"} do
        if ga[field] ~= ra[field] then
          d:add("axis", bench, nil, "axis '%s' %s %s (NVBench %s)", ra.name, field, shown(ga[field]), shown(ra[field]))
        end
      end
      local rv, gv = ra.values or {}, ga.values or {}
      if #rv ~= #gv then d:add("axis", bench, nil, "axis '%s' has %d values (NVBench %d)", ra.name, #gv, #rv) end
      for j = 1, math.min(#rv, #gv) do
        for _, field in ipairs{"input_string", "description"} do
          if gv[j][field] ~= rv[j][field] then
            d:add("axis", bench, nil, "axis '%s' value %d %s %s (NVBench %s)", ra.name, j, field, shown(gv[j][field]),
              shown(rv[j][field]))
          end
        end
        if axis_value_string(ra.type, gv[j].value) ~= axis_value_string(ra.type, rv[j].value) then
          d:add("axis", bench, nil, "axis '%s' value %d is %s (NVBench %s)", ra.name, j, shown(gv[j].value), shown(rv[j].value))
        end
      end
    end
  end
  for _, ga in ipairs(got) do
    if not seen[ga.name] then d:add("axis", bench, nil, "extra axis '%s'", tostring(ga.name)) end
  end
end

-- "error" for a state that failed (NVBench: "Unexpected error: ..."), "skip" for a skip, nil if it ran.
local function outcome(st)
  if not st.is_skipped then return nil end
  if st._reason_pattern then return "error" end
  local reason = type(st.skip_reason) == "string" and st.skip_reason or ""
  if reason:find("^Unexpected error: ") or reason:find("^error: ") then return "error" end
  return "skip"
end

local function compare_skip(d, bench, name, ref, got)
  local ro, go = outcome(ref), outcome(got)
  local rr, gr = shown(ref.skip_reason), shown(got.skip_reason)
  if ro ~= go then
    d:add("skip", bench, name, "%s (NVBench: %s)", go and (go .. " " .. gr) or "ran", ro and (ro .. " " .. rr) or "ran")
  elseif ro == "error" then
    local rp = (ref.skip_reason or ref._reason_pattern):match("^%^?(%a[%a ]*: )")
    local gp = got.skip_reason:match("^(%a[%a ]*: )")
    if rp ~= gp then d:add("skip", bench, name, "failure reason starts '%s' (NVBench '%s')", gp, rp) end
    local pattern = ref._reason_pattern
    if pattern and not ref.skip_reason and not got.skip_reason:find(pattern:gsub("^%^Unexpected error: ", "")) then
      d:add("skip", bench, name, "failure reason %s (NVBench's would match '%s')", gr, pattern)
    end
  elseif ro == "skip" and ref.skip_reason ~= got.skip_reason then
    d:add("skip", bench, name, "skip reason %s (NVBench %s)", gr, rr)
  end
end

local function data_shape(s)
  local parts = {}
  for _, v in ipairs(type(s.data) == "table" and s.data or {}) do parts[#parts + 1] = ("%s:%s"):format(v.name, v.type) end
  return table.concat(parts, ",")
end

local function data_value(s)
  for _, v in ipairs(type(s.data) == "table" and s.data or {}) do if v.name == "value" then return v.value end end
end

local SUMMARY_FIELDS = {"name", "hint", "hide", "description"}

local function compare_summary(d, bench, name, rs, gs)
  local tag = rs.tag
  for _, field in ipairs(SUMMARY_FIELDS) do
    local rv, gv = rs[field], gs[field]
    if shown(rv) ~= shown(gv) then
      d:add("field", bench, name, "%s: %s %s (NVBench %s)", tag, field, shown(gv), shown(rv))
    end
  end
  if data_shape(rs) ~= data_shape(gs) then
    d:add("field", bench, name, "%s: data %s (NVBench %s)", tag, data_shape(gs), data_shape(rs))
  end
  local rv = data_value(rs)
  if not M.is_measured(tag) and rv ~= nil and tostring(rv) ~= tostring(data_value(gs)) then
    d:add("value", bench, name, "%s: value %s (NVBench %s)", tag, shown(data_value(gs)), shown(rv))
  end
end

local function compare_summaries(d, bench, name, ref, got)
  local got_by, ref_by = {}, {}
  for _, s in ipairs(got) do got_by[s.tag] = got_by[s.tag] or s end
  for _, s in ipairs(ref) do ref_by[s.tag] = ref_by[s.tag] or s end
  local common_ref, common_got = {}, {}
  for _, rs in ipairs(ref) do
    local gs = got_by[rs.tag]
    if gs then
      common_ref[#common_ref + 1] = rs.tag
      compare_summary(d, bench, name, rs, gs)
    elseif not rs._optional then
      d:add("summary", bench, name, "summary %s missing", rs.tag)
    end
  end
  -- A declared value under another tag (a column of the same name) is still compared.
  for _, rs in ipairs(ref) do
    if not got_by[rs.tag] and not M.is_measured(rs.tag) and data_value(rs) ~= nil then
      for _, gs in ipairs(got) do
        if gs.name == rs.name and not ref_by[gs.tag] and tostring(data_value(gs)) ~= tostring(data_value(rs)) then
          d:add("value", bench, name, "%s (as %s): value %s (NVBench %s)", rs.tag, gs.tag, shown(data_value(gs)),
            shown(data_value(rs)))
        end
      end
    end
  end
  for _, gs in ipairs(got) do
    if ref_by[gs.tag] then common_got[#common_got + 1] = gs.tag
    else d:add("summary", bench, name, "extra summary %s", gs.tag) end
  end
  for i = 1, #common_ref do
    if common_ref[i] ~= common_got[i] then
      d:add("summary", bench, name, "summary order: %s at position %d of the shared tags (NVBench %s)",
        tostring(common_got[i]), i, common_ref[i])
      break
    end
  end
end

local function compare_state(d, bench, ref, got)
  local name = ref.name
  compare_keys(d, "state", bench, name, ref, got)
  if got.name ~= ref.name then d:add("state", bench, name, "name %s (NVBench %s)", shown(got.name), shown(ref.name)) end
  local optional = ref._optional_keys or {}
  if not optional.device and shown(got.device) ~= shown(ref.device) then
    d:add("state", bench, name, "device %s (NVBench %s)", shown(got.device), shown(ref.device))
  end
  if shown(got.min_samples) ~= shown(ref.min_samples) then
    d:add("state", bench, name, "min_samples %s (NVBench %s)", shown(got.min_samples), shown(ref.min_samples))
  end
  compare_skip(d, bench, name, ref, got)
  compare_summaries(d, bench, name, ref.summaries or {}, got.summaries or {})
end

local function compare_benchmark(d, ref, got)
  local bench = ref.name
  compare_keys(d, "benchmark", bench, nil, ref, got)
  if got.name ~= ref.name then d:add("benchmark", bench, nil, "named %s (NVBench %s)", shown(got.name), shown(ref.name)) end
  compare_axes(d, bench, ref.axes or {}, got.axes or {})
  local got_by, position, used, last = {}, {}, {}, 0
  for i, st in ipairs(got.states or {}) do
    local key = M.state_key(st)
    if not got_by[key] then got_by[key], position[key] = st, i end
  end
  for _, rs in ipairs(ref.states or {}) do
    local key = M.state_key(rs)
    local gs = got_by[key]
    if not gs then
      d:add("state", bench, rs.name, "state [%s] missing", key)
    else
      used[key] = true
      if position[key] < last then d:add("state", bench, rs.name, "states in another order") end
      last = position[key]
      compare_state(d, bench, rs, gs)
    end
  end
  for _, gs in ipairs(got.states or {}) do
    if not used[M.state_key(gs)] then d:add("state", bench, gs.name, "extra state [%s]", M.state_key(gs)) end
  end
end

-- Pairs benchmarks by name, then the rest by position.
function M.pair_benchmarks(ref, got)
  local pairs_, by_name, taken = {}, {}, {}
  for i, b in ipairs(got) do by_name[b.name] = by_name[b.name] or i end
  local rest = {}
  for i, rb in ipairs(ref) do
    local j = by_name[rb.name]
    if j and not taken[j] then taken[j] = true; pairs_[i] = j else rest[#rest + 1] = i end
  end
  local free = {}
  for j = 1, #got do if not taken[j] then free[#free + 1] = j end end
  for k, i in ipairs(rest) do pairs_[i] = free[k]; if free[k] then taken[free[k]] = true end end
  local extra = {}
  for j = 1, #got do if not taken[j] then extra[#extra + 1] = j end end
  return pairs_, extra
end

-- The structural differences of got (cudalua's JSON) from ref (NVBench's, or the model).
function M.diff(ref, got)
  local d = new_diffs()
  compare_keys(d, "document", nil, nil, ref, got)
  local rb, gb = ref.benchmarks or {}, got.benchmarks or {}
  local pairs_, extra = M.pair_benchmarks(rb, gb)
  for i, b in ipairs(rb) do
    if pairs_[i] then compare_benchmark(d, b, gb[pairs_[i]])
    else d:add("benchmark", b.name, nil, "benchmark missing") end
  end
  for _, j in ipairs(extra) do d:add("benchmark", gb[j].name, nil, "extra benchmark") end
  return d.list
end

-- --- markdown ---------------------------------------------------------------------------

local function cells(line)
  local list = {}
  for cell in line:gsub("^%s*|", ""):gsub("|%s*$", ""):gmatch("[^|]*") do list[#list + 1] = cell:match("^%s*(.-)%s*$") end
  return list
end

-- The tables of a markdown document (NVBench's or cudalua's): a list of
-- {bench, device ("[0]" or nil), columns, rows}, from "# Benchmark Results" on.
function M.markdown_tables(text)
  local tables, bench, device, in_results, current = {}, nil, nil, false, nil
  for line in (text or ""):gmatch("[^\n]*") do
    if line:find("^# Benchmark Results") then in_results = true
    elseif in_results then
      if line:find("^## ") then bench, device, current = line:sub(4), nil, nil
      elseif line:find("^### ") then device, current = line:match("^### (%[%d+%])") or line:sub(5), nil
      elseif line:find("^|") then
        if not current then
          current = {bench = bench, device = device, columns = cells(line), rows = 0}
          tables[#tables + 1] = current
        elseif not line:find("^|[%s%-:|]*$") then
          current.rows = current.rows + 1
        end
      else
        current = nil
      end
    end
  end
  return tables
end

-- [source: NVBench's markdown printer] The columns NVBench's table would
-- have for a JSON document: the axes, then the visible summaries' names, one
-- per tag in first-seen order over the states that ran.
function M.columns_from_json(doc)
  local tables = {}
  for _, b in ipairs(doc.benchmarks or {}) do
    local cols, seen, rows = {}, {}, 0
    for _, a in ipairs(b.axes or {}) do cols[#cols + 1] = a.name end
    for _, st in ipairs(b.states or {}) do
      if not st.is_skipped then
        rows = rows + 1
        for _, s in ipairs(st.summaries or {}) do
          if not present(s.hide) and not seen[s.tag] then seen[s.tag] = true; cols[#cols + 1] = s.name end
        end
      end
    end
    local dev = (b.states or {})[1] and b.states[1].device
    if rows > 0 then
      tables[#tables + 1] = {bench = b.name, columns = cols, rows = rows,
        device = present(dev) and ("[%d]"):format(dev) or nil}
    end
  end
  return tables
end

-- Differences of got's tables from ref's, paired by position.
function M.compare_columns(ref, got)
  local d = new_diffs()
  for i = 1, math.max(#ref, #got) do
    local r, g = ref[i], got[i]
    if not g then d:add("markdown", r.bench, nil, "no table (NVBench has %d rows)", r.rows)
    elseif not r then d:add("markdown", g.bench, nil, "extra table (%d rows; NVBench has none)", g.rows)
    else
      local rc, gc = table.concat(r.columns, " | "), table.concat(g.columns, " | ")
      if rc ~= gc then d:add("markdown", r.bench, nil, "columns | %s | (NVBench | %s |)", gc, rc) end
      if r.rows ~= g.rows then d:add("markdown", r.bench, nil, "%d rows (NVBench %d)", g.rows, r.rows) end
      if r.device ~= g.device then
        d:add("markdown", r.bench, nil, "device heading %s (NVBench %s)", g.device or "none", r.device or "none")
      end
    end
  end
  return d.list
end

-- --- times and logs ---------------------------------------------------------------------

local TIMES = {
  {mean = "nv/cold/time/gpu/mean", noise = "nv/cold/time/gpu/stdev/relative", what = "cold GPU"},
  {mean = "nv/cpu_only/time/cpu/mean", noise = "nv/cpu_only/time/cpu/stdev/relative", what = "CPU-only"},
}

local function summary_number(st, tag)
  for _, s in ipairs(st.summaries or {}) do if s.tag == tag then return M.number(data_value(s)) end end
end

-- Per paired state that both measured: {bench, state, what, ref, got, ref_noise, got_noise,
-- within = true | false | nil (a noise unknown)}, and the batch GPU times beside.
function M.times(ref, got)
  local rows = {}
  local pairs_ = M.pair_benchmarks(ref.benchmarks or {}, got.benchmarks or {})
  for i, rb in ipairs(ref.benchmarks or {}) do
    local gb = pairs_[i] and got.benchmarks[pairs_[i]]
    local by_key = {}
    for _, st in ipairs(gb and gb.states or {}) do by_key[M.state_key(st)] = st end
    for _, rs in ipairs(rb.states or {}) do
      local gs = by_key[M.state_key(rs)]
      for _, t in ipairs(gs and TIMES or {}) do
        local a, b = summary_number(rs, t.mean), summary_number(gs, t.mean)
        if a and b then
          local na, nb = summary_number(rs, t.noise), summary_number(gs, t.noise)
          local within
          if na and nb and na == na and nb == nb and na < math.huge and nb < math.huge then
            within = math.abs(a - b) <= math.sqrt((na * a) ^ 2 + (nb * b) ^ 2)
          end
          rows[#rows + 1] = {bench = rb.name, state = rs.name, what = t.what, ref = a, got = b, ref_noise = na,
            got_noise = nb, within = within, ref_batch = summary_number(rs, "nv/batch/time/gpu/mean"),
            got_batch = summary_number(gs, "nv/batch/time/gpu/mean")}
        end
      end
    end
  end
  return rows
end

-- Lines of a log that say a blocking kernel timed out (cudalua's and NVBench's words).
M.TIMEOUT_PATTERNS = {"[Bb]locking kernel timed out", "Deadlock detected", "blocking kernel .*timed? ?out"}

-- Lines that say a call broke the hold (measure.lua's "... would wait for the stream the blocking
-- kernel held ...": the measurement was taken again without the blocking kernel).
M.BROKEN_HOLD_PATTERNS = {"would wait for the stream the blocking kernel held"}

local function count_lines(log, patterns)
  local n = 0
  for line in (log or ""):gmatch("[^\n]+") do
    for _, p in ipairs(patterns) do
      if line:find(p) then n = n + 1; break end
    end
  end
  return n
end

function M.blocking_timeouts(log) return count_lines(log, M.TIMEOUT_PATTERNS) end
function M.broken_holds(log) return count_lines(log, M.BROKEN_HOLD_PATTERNS) end

-- --- the report --------------------------------------------------------------------------

-- Groups differences that differ only in their state: {kind, bench, what, count, state}.
function M.aggregate(list)
  local groups, order = {}, {}
  for _, d in ipairs(list) do
    local key = table.concat({d.kind, d.bench or "", d.what}, "\0")
    local g = groups[key]
    if not g then
      g = {kind = d.kind, bench = d.bench, what = d.what, count = 0, state = d.state}
      groups[key] = g
      order[#order + 1] = g
    end
    g.count = g.count + 1
  end
  return order
end

local function fmt_time(s)
  if not s then return "-" end
  if s ~= s then return "nan" end
  if s >= 1 then return ("%.3f s"):format(s) end
  if s >= 1e-3 then return ("%.3f ms"):format(s * 1e3) end
  if s >= 1e-6 then return ("%.3f us"):format(s * 1e6) end
  return ("%.3f ns"):format(s * 1e9)
end
local function pct(x) return x and (x == x and x < math.huge and ("%.2f%%"):format(100 * x) or tostring(x)) or "-" end

-- One example's comparison: ex = {name, nvbench = {json, md, log, rc}, runs = {{json, md, log, rc}, ...}, model}.
-- Returns {name, verdict, structure, markdown, skips, times, timeouts, lines}.
local function last_line(text) return (text or ""):match("([^\n]+)\n*$") end

function M.compare_example(ex)
  local r = {name = ex.name, lines = {}, problems = {}}
  local function problem(text) r.problems[#r.problems + 1] = text end
  local nv = ex.nvbench
  if not nv.doc then
    problem(("NVBench's JSON is missing (%s)%s"):format(nv.err or "?",
      last_line(nv.log) and (": its log ends `" .. last_line(nv.log) .. "`") or ""))
  end
  r.timeouts, r.broken = {}, {}
  for k, run in ipairs(ex.runs) do
    r.timeouts[k], r.broken[k] = M.blocking_timeouts(run.log), M.broken_holds(run.log)
    if r.broken[k] > 0 then
      r.lines[#r.lines + 1] = ("run %d: %d measurements taken again without the blocking kernel (a call broke the hold)")
        :format(k, r.broken[k])
    end
    if r.timeouts[k] > 0 then problem(("run %d: %d blocking-kernel timeouts"):format(k, r.timeouts[k])) end
    if not run.doc then
      problem(("run %d: cudalua's JSON is missing (%s)%s"):format(k, run.err or "?",
        last_line(run.log) and (": its log ends `" .. last_line(run.log) .. "`") or ""))
    end
    if run.rc and run.rc ~= 0 then problem(("run %d: cudalua exited %d"):format(k, run.rc)) end
  end
  if nv.rc and nv.rc ~= 0 then problem(("NVBench exited %d"):format(nv.rc)) end
  local first = ex.runs[1]
  r.structure, r.markdown, r.skips, r.time_rows = {}, {}, {}, {}
  if nv.doc and first and first.doc then
    for _, g in ipairs(M.aggregate(M.diff(nv.doc, first.doc))) do
      local list = g.kind == "skip" and r.skips or r.structure
      list[#list + 1] = g
    end
    r.markdown = M.aggregate(M.compare_columns(M.markdown_tables(nv.md), M.markdown_tables(first.md)))
    for k, run in ipairs(ex.runs) do
      if run.doc then
        for _, row in ipairs(M.times(nv.doc, run.doc)) do row.run = k; r.time_rows[#r.time_rows + 1] = row end
      end
    end
  end
  for k = 2, #ex.runs do
    if first and first.doc and ex.runs[k].doc and #M.diff(first.doc, ex.runs[k].doc) > 0 then
      problem(("run %d's structure differs from run 1's"):format(k))
    end
  end
  if ex.model and nv.doc then r.model = M.aggregate(M.diff(ex.model, nv.doc)) end
  local outside, undecided = 0, 0
  for _, row in ipairs(r.time_rows) do
    if row.within == false then outside = outside + 1 elseif row.within == nil then undecided = undecided + 1 end
  end
  r.outside, r.undecided = outside, undecided
  if #r.structure > 0 then problem(("%d structural differences"):format(#r.structure)) end
  if #r.markdown > 0 then problem(("%d markdown differences"):format(#r.markdown)) end
  if #r.skips > 0 then problem(("%d skip differences"):format(#r.skips)) end
  if outside > 0 then problem(("%d times outside the combined noise"):format(outside)) end
  r.verdict = #r.problems == 0 and "PASS" or "FAIL"
  return r
end

local function diff_lines(lines, title, groups)
  if #groups == 0 then return end
  lines[#lines + 1] = ("%s:\n"):format(title)
  for _, g in ipairs(groups) do
    lines[#lines + 1] = ("- [%s] %s%s%s"):format(g.kind, g.bench and ("`" .. g.bench .. "`: ") or "", g.what,
      g.state and (g.count > 1 and (" (%d states, e.g. `%s`)"):format(g.count, g.state) or (" (`%s`)"):format(g.state))
        or (g.count > 1 and (" (%d times)"):format(g.count) or ""))
  end
  lines[#lines + 1] = ""
end

-- The summary table of the examples' results.
function M.summary_table(results)
  local lines = {"| example | verdict | structure | markdown | skips | times within noise | blocking timeouts | " ..
    "holds broken |", "|---|---|---:|---:|---:|---|---|---|"}
  local function per_run(list)
    local t = {}
    for _, k in ipairs(list) do t[#t + 1] = tostring(k) end
    return #t > 0 and table.concat(t, ", ") or "-"
  end
  for _, r in ipairs(results) do
    local n = #r.time_rows
    lines[#lines + 1] = ("| %s | %s | %d | %d | %d | %s | %s | %s |"):format(r.name, r.verdict, #r.structure,
      #r.markdown, #r.skips, n == 0 and "-" or ("%d/%d%s"):format(n - r.outside - r.undecided, n,
        r.undecided > 0 and (", %d undecided"):format(r.undecided) or ""), per_run(r.timeouts), per_run(r.broken))
  end
  return table.concat(lines, "\n")
end

-- The whole report: the summary table, then per example what differs and the times.
function M.report(results)
  local lines = {"# NVBench's Python examples: cuda-bench against cudalua bench", "", M.summary_table(results), ""}
  for _, r in ipairs(results) do
    lines[#lines + 1] = ("## %s: %s\n"):format(r.name, r.verdict)
    for _, p in ipairs(r.problems) do lines[#lines + 1] = "- " .. p end
    for _, note in ipairs(r.lines) do lines[#lines + 1] = "- (not a failure) " .. note end
    lines[#lines + 1] = ""
    diff_lines(lines, "Structure (cudalua run 1 against NVBench)", r.structure)
    diff_lines(lines, "Skips and failures", r.skips)
    diff_lines(lines, "Markdown tables", r.markdown)
    if r.model then diff_lines(lines, "The test suite's model against NVBench's JSON", r.model) end
    if #r.time_rows > 0 then
      lines[#lines + 1] = "| benchmark | state | run | time | NVBench | noise | cudalua | noise | ratio | within | " ..
        "NVBench batch | cudalua batch |"
      lines[#lines + 1] = "|---|---|---:|---|---:|---:|---:|---:|---:|:---:|---:|---:|"
      for _, row in ipairs(r.time_rows) do
        lines[#lines + 1] = ("| %s | %s | %d | %s | %s | %s | %s | %s | %.3f | %s | %s | %s |"):format(row.bench, row.state,
          row.run, row.what, fmt_time(row.ref), pct(row.ref_noise), fmt_time(row.got), pct(row.got_noise),
          row.got / row.ref, row.within == nil and "?" or row.within and "yes" or "**no**", fmt_time(row.ref_batch),
          fmt_time(row.got_batch))
      end
      lines[#lines + 1] = ""
    end
  end
  return table.concat(lines, "\n")
end

-- --- the command ---------------------------------------------------------------------------

local function load_side(dir, name)
  local side = {md = M.read(dir .. "/" .. name .. ".md"), log = M.read(dir .. "/" .. name .. ".log")}
  side.doc, side.err = M.read_json(dir .. "/" .. name .. ".json")
  side.rc = tonumber((M.read(dir .. "/" .. name .. ".rc") or ""):match("%d+"))
  return side
end

M.NAMES = {"axes", "auto_throughput", "throughput", "without_blocking_krn", "exec_tag_sync", "exec_tag_timer",
  "skip", "stream", "cpu_only", "cpu_activity"}

function M.main(argv)
  local cli = require "cuda.cli"
  local parser = cli.parser("nvbench_examples_compare",
    "Compares cuda-bench's and cudalua bench's output for NVBench's Python examples.")
  parser:option("--nvbench", "The folder of cuda-bench's NAME.json, NAME.md and NAME.log."):argname("DIR")
  parser:option("--cudalua", "A folder of one cudalua run's files; repeatable."):count("*"):argname("DIR")
  parser:option("--model", "The test suite's model (t/nvbench_examples_model.lua): also compare NVBench with it.")
    :argname("FILE")
  parser:option("--report", "Write the whole report here (default: stdout, before the summary table)."):argname("FILE")
  parser:argument("names", "The examples (default: all ten)."):args("*")
  local args = cli.parse(parser, argv)
  if not args.nvbench or #args.cudalua == 0 then
    io.stderr:write("nvbench_examples_compare: --nvbench and --cudalua are required\n")
    return 2
  end
  local model
  if args.model then model = assert(loadfile(args.model))() end
  local results = {}
  for _, name in ipairs(#args.names > 0 and args.names or M.NAMES) do
    local ex = {name = name, nvbench = load_side(args.nvbench, name), runs = {}, model = model and model.document(name)}
    for k, dir in ipairs(args.cudalua) do ex.runs[k] = load_side(dir, name) end
    results[#results + 1] = M.compare_example(ex)
  end
  local report = M.report(results)
  if args.report then
    local f = assert(io.open(args.report, "w"))
    f:write(report, "\n")
    f:close()
  else
    print(report)
  end
  print(M.summary_table(results))
  for _, r in ipairs(results) do if r.verdict ~= "PASS" then return 1 end end
  return 0
end

if ... == "--module" then return M end
os.exit(M.main(arg))
