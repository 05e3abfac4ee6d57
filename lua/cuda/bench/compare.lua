-- cuda.bench.compare: two NVBench JSON result files, state by state, with noise-aware verdicts.
-- SPDX-License-Identifier: MIT
--
-- Benchmarks are paired by name (the second of a name with the second:
-- one benchmark may run twice, in two -b configurations), states by their
-- device and axis values, whatever either tool called them. The verdict
-- follows nvbench_compare.py: the relative difference of the mean cold GPU
-- times (cpu-only: CPU times) against the smaller of the two runs' noises
-- (relative standard deviations): within it "same", else "faster" or
-- "slower"; "undecided" when neither run has a noise estimate, or a time is
-- not a positive finite number (nvbench_compare.py would say SLOW of inf).
local M = {}

function M.is_nvbench(doc)
  return type(doc) == "table" and type(doc.benchmarks) == "table"
end

-- A JSON list: a table with keys 1..n only (cuda.json decodes [] so), or
-- null (nlohmann writes an empty list as null).
local function is_list(v, null_ok)
  if null_ok and (v == nil or tostring(v) == "json.null") then return true end
  if type(v) ~= "table" then return false end
  local n = 0
  for k in pairs(v) do
    if math.type(k) ~= "integer" then return false end
    n = n + 1
  end
  return n == #v
end

local function items(v) return type(v) == "table" and v or {} end

-- Whether doc reads as NVBench JSON, down to what comparing uses: nil and
-- the first thing wrong ("benchmarks[2] has no name") otherwise.
function M.check(doc)
  if not M.is_nvbench(doc) then return nil, "no \"benchmarks\" list" end
  if not is_list(doc.benchmarks) then return nil, "\"benchmarks\" is not a list" end
  for bi, b in ipairs(doc.benchmarks) do
    local where = ("benchmarks[%d]"):format(bi)
    if type(b) ~= "table" then return nil, where .. " is not an object" end
    if type(b.name) ~= "string" then return nil, where .. " has no name" end
    if not is_list(b.states, true) then return nil, where .. ".states is not a list" end
    for si, st in ipairs(items(b.states)) do
      local sw = ("%s.states[%d]"):format(where, si)
      if type(st) ~= "table" then return nil, sw .. " is not an object" end
      if not is_list(st.axis_values, true) then return nil, sw .. ".axis_values is not a list" end
      for ai, av in ipairs(items(st.axis_values)) do
        if type(av) ~= "table" or type(av.name) ~= "string" then
          return nil, ("%s.axis_values[%d] is not an object with a name"):format(sw, ai)
        end
      end
      if not is_list(st.summaries, true) then return nil, sw .. ".summaries is not a list" end
      for ui, s in ipairs(items(st.summaries)) do
        if type(s) ~= "table" or type(s.tag) ~= "string" then
          return nil, ("%s.summaries[%d] is not an object with a tag"):format(sw, ui)
        end
        if not is_list(s.data, true) then return nil, ("%s.summaries[%d].data is not a list"):format(sw, ui) end
        for _, d in ipairs(items(s.data)) do
          if type(d) ~= "table" then return nil, ("%s.summaries[%d].data holds a non-object"):format(sw, ui) end
        end
      end
    end
  end
  return doc
end

-- A value as NVBench writes it: a number or a string ("1.5e-06", "inf").
local function number_of(v)
  if type(v) == "number" then return v end
  if type(v) ~= "string" then return nil end
  local n = tonumber(v)
  if n then return n end
  local word = v:lower()
  if word == "inf" or word == "+inf" then return math.huge end
  if word == "-inf" then return -math.huge end
  if word == "nan" or word == "-nan" then return 0 / 0 end
  return nil
end

-- A state's key independent of how a tool spells its name: the device and
-- each axis value ("T=double", "Bytes=65536"), sorted.
function M.state_key(state)
  local words = {"device=" .. tostring(state.device)}
  for _, av in ipairs(items(state.axis_values)) do
    local n = number_of(av.value)   -- "65536", 65536 and 65536.0 are one value
    words[#words + 1] = tostring(av.name) .. "=" .. (n and ("%.17g"):format(n) or tostring(av.value))
  end
  table.sort(words)
  return "\0" .. table.concat(words, " ")
end

-- The number value of a state's summary tag, or nil.
function M.value(state, tag)
  for _, s in ipairs(items(state.summaries)) do
    if type(s) == "table" and s.tag == tag then
      for _, d in ipairs(items(s.data)) do
        if type(d) == "table" and d.name == "value" then return number_of(d.value) end
      end
    end
  end
  return nil
end

local TIME = {"nv/cold/time/gpu/mean", "nv/cpu_only/time/cpu/mean"}
local NOISE = {"nv/cold/time/gpu/stdev/relative", "nv/cpu_only/time/cpu/stdev/relative"}

local function figure(state)
  for i, tag in ipairs(TIME) do
    local t = M.value(state, tag)
    if t then return t, M.value(state, NOISE[i]) end
  end
  return nil
end

local function finite(x) return type(x) == "number" and x == x and x > -math.huge and x < math.huge end

-- A noise estimate, or nil: +inf (fewer than 5 samples) and NaN are none.
local function estimate(noise) return finite(noise) and noise >= 0 and noise or nil end

-- The verdict of ref -> cmp: "faster", "slower", "same" or "undecided", and
-- the relative difference (nil where the times give none).
function M.verdict(ref_time, ref_noise, cmp_time, cmp_noise)
  if not (finite(ref_time) and finite(cmp_time)) or ref_time <= 0 then return "undecided", nil end
  local frac = (cmp_time - ref_time) / ref_time
  local rn, cn = estimate(ref_noise), estimate(cmp_noise)
  local noise
  if rn and cn then noise = math.min(rn, cn) else noise = rn or cn end
  if not noise or noise == 0 then return "undecided", frac end
  if math.abs(frac) <= noise then return "same", frac end
  return frac < 0 and "faster" or "slower", frac
end

-- The states of a benchmark by key, each key's in their order.
local function states_by_key(bench)
  local by = {}
  for _, s in ipairs(items(bench.states)) do
    local key = M.state_key(s)
    by[key] = by[key] or {}
    table.insert(by[key], s)
  end
  return by
end

-- An axis filter as nvbench_compare.py's -a takes it: "NAME=VALUE",
-- "NAME=[V1,V2]" or "NAME[pow2]=E" (exponents); nil, why.
function M.axis_filter(text)
  local name, value = tostring(text):match("^%s*(.-)%s*=%s*(.-)%s*$")
  if not name or name == "" or value == "" then return nil, ("axis filter must be NAME=VALUE: %s"):format(text) end
  local values = {}
  local inner = value:match("^%[(.*)%]$")
  if inner then
    for item in (inner .. ","):gmatch("(.-),") do
      item = item:match("^%s*(.-)%s*$")
      if item ~= "" then values[#values + 1] = item end
    end
  else
    values[1] = value
  end
  local base = name:match("^(.-)%s*%[pow2%]$")
  if base then
    if base == "" then return nil, ("axis filter missing name before [pow2]: %s"):format(text) end
    for i, v in ipairs(values) do
      local e = math.tointeger(tonumber(v))
      if not e or e < 0 or e > 62 then return nil, ("axis filter [pow2] value must be an integer: %s"):format(text) end
      values[i] = tostring(1 << e)
    end
    name = base
  end
  if #values == 0 then return nil, ("axis filter must specify at least one value: %s"):format(text) end
  local set = {}
  for _, v in ipairs(values) do set[v] = true end
  return {name = name, values = set}
end

local function matches(state, filters)
  for _, f in ipairs(filters or {}) do
    local hit = false
    for _, av in ipairs(items(state.axis_values)) do
      if av.name == f.name and av.value ~= nil and f.values[tostring(av.value)] then hit = true end
    end
    if not hit then return false end
  end
  return true
end

-- Rows {bench, state, ref_time, ref_noise, cmp_time, cmp_noise, frac,
-- verdict, hidden} of the states both files have (M.check them first).
-- opts, as nvbench_compare.py's: benchmarks (a set of names), axes (a list
-- of M.axis_filter), threshold (rows whose |difference| is below this
-- fraction are counted but hidden).
function M.compare(ref, cmp, opts)
  opts = opts or {}
  local rows, ref_benches = {}, {}
  for _, b in ipairs(ref.benchmarks) do
    ref_benches[b.name] = ref_benches[b.name] or {}
    table.insert(ref_benches[b.name], b)
  end
  local seen = {}
  for _, cb in ipairs(cmp.benchmarks) do
    seen[cb.name] = (seen[cb.name] or 0) + 1
    local rb = (ref_benches[cb.name] or {})[seen[cb.name]]
    if rb and (not opts.benchmarks or opts.benchmarks[cb.name]) then
      local ref_states = states_by_key(rb)
      for _, cs in ipairs(items(cb.states)) do
        local list = ref_states[M.state_key(cs)]
        local rs = list and table.remove(list, 1)
        local rt, rn
        if rs then rt, rn = figure(rs) end
        local ct, cn = figure(cs)
        if rt and ct and matches(cs, opts.axes) then
          local verdict, frac = M.verdict(rt, rn, ct, cn)
          rows[#rows + 1] = {bench = cb.name, state = tostring(cs.name or rs.name or ""), ref_time = rt,
            ref_noise = rn, cmp_time = ct, cmp_noise = cn, frac = frac, verdict = verdict,
            hidden = opts.threshold ~= nil and not (frac and math.abs(frac) >= opts.threshold)}
        end
      end
    end
  end
  return rows
end

local function pct(x) return estimate(x) and ("%.2f%%"):format(x * 100) or "inf" end

local function duration(x)
  if not finite(x) then return (tostring(x):gsub("^%-?nan$", "nan")) end
  return require("cuda.bench.run").format_duration(x)
end

local function row_line(r)
  local diff = r.frac and ((r.cmp_time >= r.ref_time and "" or "-") .. duration(math.abs(r.cmp_time - r.ref_time))) or "-"
  return ("| %s | %s | %s | %s | %s | %s | %s | %s |"):format(r.state, duration(r.ref_time), pct(r.ref_noise),
    duration(r.cmp_time), pct(r.cmp_noise), diff, r.frac and ("%.2f%%"):format(r.frac * 100) or "-", r.verdict:upper())
end

-- The rows as markdown, one table per benchmark (hidden rows counted, not
-- shown), and a count of each verdict.
function M.markdown(rows)
  local lines, counts, current = {}, {faster = 0, slower = 0, same = 0, undecided = 0}, nil
  for _, r in ipairs(rows) do
    counts[r.verdict] = counts[r.verdict] + 1
    if not r.hidden then
      if r.bench ~= current then
        current = r.bench
        lines[#lines + 1] = ""
        lines[#lines + 1] = "# " .. r.bench
        lines[#lines + 1] = ""
        lines[#lines + 1] = "| State | Ref Time | Ref Noise | Cmp Time | Cmp Noise | Diff | %Diff | Status |"
        lines[#lines + 1] = "|---|---:|---:|---:|---:|---:|---:|:---:|"
      end
      lines[#lines + 1] = row_line(r)
    end
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = ("%d states: %d faster, %d slower, %d same, %d undecided"):format(#rows, counts.faster,
    counts.slower, counts.same, counts.undecided)
  return table.concat(lines, "\n"), counts
end

return M
