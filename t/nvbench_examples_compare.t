-- bench/nvbench_examples_compare.lua finds every difference between two NVBench JSON files, and only those:
-- random documents, each mutated in a known way; markdown tables, times within noise, timeout counts.
-- SPDX-License-Identifier: MIT
local t = require "tap"
local json = require "cuda.json"
local src = os.getenv("CUDALUA_SRCDIR") or "."
local tool = src .. "/bench/nvbench_examples_compare.lua"
local C = assert(loadfile(tool))("--module")
t.seed()

local function pick(list) return list[math.random(#list)] end
local function copy(v)
  if type(v) ~= "table" or v == json.null then return v end
  local c = {}
  for k, x in pairs(v) do c[k] = copy(x) end
  return c
end

-- --- random NVBench documents ---------------------------------------------------------

local TAGS = {
  {"nv/cold/sample_size", "Samples", "sample_size", nil, "int64"},
  {"nv/cold/time/gpu/mean", "GPU Time", "duration", nil, "float64"},
  {"nv/cold/time/gpu/stdev/relative", "Noise", "percentage", nil, "float64"},
  {"nv/cold/time/gpu/min", "Min GPU Time", "duration", "Hidden by default.", "float64"},
  {"nv/cold/walltime", "Walltime", "duration", "Hidden by default.", "float64"},
  {"nv/batch/time/gpu/mean", "Batch GPU", "duration", nil, "float64"},
}

local function random_axis(i)
  local kind = pick{"int64", "pow2", "float64", "string"}
  local n = math.random(1, 3)
  local values = {}
  for j = 1, n do
    local v, input, description
    if kind == "int64" then v = j * 1000 + math.random(0, 999); input = tostring(v); description = ""
    elseif kind == "pow2" then
      local e = j + math.random(0, 4) * 3; v = 1 << e; input = tostring(e); description = ("2^%d = %d"):format(e, v)
    elseif kind == "float64" then v = (j + math.random()) * 1e-3; input = ("%.5g"):format(v); description = ""
    else v = ("s%d_%d"):format(j, math.random(1000)); input = v; description = "" end
    values[j] = {input_string = input, description = description, value = v}
  end
  return {name = ("Axis%d_%s"):format(i, kind), type = kind == "pow2" and "int64" or kind,
    flags = kind == "pow2" and "pow2" or "", values = values}
end

local function summary(spec, value)
  return {tag = spec[1], name = spec[2], hint = spec[3], hide = spec[4], description = "About " .. spec[2],
    data = {{name = "value", type = spec[5], value = value}}}
end

local function random_state(axes, point, skipped)
  local avs, words = {}, {"Device=0"}
  for i, axis in ipairs(axes) do
    local v = axis.values[point[i]]
    avs[i] = {name = axis.name, type = axis.type,
      value = axis.type == "float64" and ("%.17g"):format(v.value) or tostring(v.value)}
    words[#words + 1] = axis.name .. "=" .. v.input_string
  end
  local st = {name = table.concat(words, " "), min_samples = 10, timeout = 15.0, device = 0, type_config_index = 0,
    axis_values = avs, is_skipped = skipped, summaries = {}}
  if skipped then
    st.skip_reason = "Skipped: reason " .. math.random(1000)
  else
    st.summaries[1] = {tag = "nv/element_count/Items", name = "Items", description = "Number of elements: Items",
      data = {{name = "value", type = "int64", value = tostring(math.random(1, 1 << 30))}}}
    for _, spec in ipairs(TAGS) do st.summaries[#st.summaries + 1] = summary(spec, tostring(math.random())) end
  end
  return st
end

local function random_doc()
  local benches = {}
  for b = 1, math.random(2, 3) do
    local axes = {}
    for i = 1, math.random(1, 2) do axes[i] = random_axis(i) end
    local states, idx = {}, {}
    for i = 1, #axes do idx[i] = 1 end
    repeat
      states[#states + 1] = random_state(axes, table.move(idx, 1, #idx, 1, {}), math.random() < 0.25)
      local i = 1
      while i <= #axes do
        idx[i] = idx[i] + 1
        if idx[i] <= #axes[i].values then break end
        idx[i] = 1; i = i + 1
      end
    until i > #axes
    -- at least one state that ran and one that was skipped
    states[1] = random_state(axes, (function() local p = {} for i = 1, #axes do p[i] = 1 end return p end)(), false)
    states[#states + 1] = random_state(axes, (function()
      local p = {} for i = 1, #axes do p[i] = 1 end return p end)(), true)
    states[#states].axis_values[1].value = axes[1].type == "string" and "extra" or "987654321"
    states[#states].name = states[#states].name .. " (extra)"
    benches[b] = {name = ("bench_%d_%d"):format(b, math.random(1000)), index = b - 1, min_samples = 10,
      timeout = 15.0, devices = {0}, axes = axes, states = states}
  end
  return {meta = {argv = {"x"}, version = {json = {string = "1.0.0"}}}, devices = {{id = 0}}, benchmarks = benches}
end

local function ran_states(doc)
  local list = {}
  for bi, b in ipairs(doc.benchmarks) do
    for si, st in ipairs(b.states) do if not st.is_skipped then list[#list + 1] = {bi, si} end end
  end
  return list
end
local function skipped_states(doc)
  local list = {}
  for bi, b in ipairs(doc.benchmarks) do
    for si, st in ipairs(b.states) do if st.is_skipped then list[#list + 1] = {bi, si} end end
  end
  return list
end

-- --- mutations: each changes got in one known way and says how the diff must name it --------
-- fn(got) -> kind, pattern (a Lua pattern on the difference's text)

local MUTATIONS = {
  {"a benchmark renamed", function(d)
    local b = pick(d.benchmarks); b.name = b.name .. "_x"
    return "benchmark", "^named '" .. b.name:gsub("%p", "%%%0") .. "'"
  end},
  {"a benchmark dropped", function(d)
    table.remove(d.benchmarks, math.random(#d.benchmarks))
    return "benchmark", "^benchmark missing$"
  end},
  {"an extra benchmark", function(d)
    local b = copy(d.benchmarks[1]); b.name = "extra_bench"; d.benchmarks[#d.benchmarks + 1] = b
    return "benchmark", "^extra benchmark$"
  end},
  {"a benchmark key dropped", function(d)
    pick(d.benchmarks).timeout = nil
    return "benchmark", "^key 'timeout' missing$"
  end},
  {"an axis input string changed", function(d)
    local a = pick(pick(d.benchmarks).axes); local j = math.random(#a.values)
    a.values[j].input_string = a.values[j].input_string .. "!"
    return "axis", ("^axis '%s' value %d input_string"):format(a.name, j)
  end},
  {"an axis type changed", function(d)
    local a = pick(pick(d.benchmarks).axes); a.type = a.type == "string" and "int64x" or "string"
    return "axis", ("^axis '%s' type"):format(a.name)
  end},
  {"an axis flag changed", function(d)
    local a = pick(pick(d.benchmarks).axes); a.flags = a.flags == "pow2" and "" or "pow2"
    return "axis", ("^axis '%s' flags"):format(a.name)
  end},
  {"an axis description changed", function(d)
    local a = pick(pick(d.benchmarks).axes); a.values[1].description = "changed"
    return "axis", ("^axis '%s' value 1 description 'changed'"):format(a.name)
  end},
  {"an extra axis", function(d)
    local b = pick(d.benchmarks); b.axes[#b.axes + 1] = {name = "Extra", type = "int64", flags = "", values = {}}
    return "axis", "^extra axis 'Extra'$"
  end},
  {"a state dropped", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); table.remove(d.benchmarks[bi].states, si)
    return "state", "^state %[.*%] missing$"
  end},
  {"an extra state", function(d)
    local b = pick(d.benchmarks); local st = copy(b.states[1])
    st.axis_values[#st.axis_values + 1] = {name = "Z", type = "int64", value = "1"}
    b.states[#b.states + 1] = st
    return "state", "^extra state %[.*Z=1%]$"
  end},
  {"a state renamed", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local st = d.benchmarks[bi].states[si]
    st.name = st.name .. " X=1"
    return "state", "^name '.* X=1' %(NVBench"
  end},
  {"a state's device changed", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); d.benchmarks[bi].states[si].device = 3
    return "state", "^device '3' %(NVBench '0'%)$"
  end},
  {"an extra state key", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); d.benchmarks[bi].states[si].max_noise = json.null
    return "state", "^extra key 'max_noise'$"
  end},
  {"min_samples changed", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); d.benchmarks[bi].states[si].min_samples = 1000
    return "state", "^min_samples '1000' %(NVBench '10'%)$"
  end},
  {"a skip reason changed", function(d)
    local bi, si = table.unpack(pick(skipped_states(d))); local st = d.benchmarks[bi].states[si]
    st.skip_reason = st.skip_reason .. "?"
    return "skip", "^skip reason '.*%?' %(NVBench"
  end},
  {"a state skipped that ran", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local st = d.benchmarks[bi].states[si]
    st.is_skipped, st.skip_reason = true, "not today"
    return "skip", "^skip 'not today' %(NVBench: ran%)$", {{"state", "^extra key 'skip_reason'$"}}
  end},
  {"a state failed that ran", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local st = d.benchmarks[bi].states[si]
    st.is_skipped, st.skip_reason = true, "error: boom"
    return "skip", "^error 'error: boom' %(NVBench: ran%)$", {{"state", "^extra key 'skip_reason'$"}}
  end},
  {"a summary dropped", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local sums = d.benchmarks[bi].states[si].summaries
    local s = table.remove(sums, math.random(#sums))
    return "summary", ("^summary %s missing$"):format(s.tag:gsub("%p", "%%%0"))
  end},
  {"an extra summary", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local sums = d.benchmarks[bi].states[si].summaries
    table.insert(sums, math.random(#sums + 1), {tag = "user/Extra", name = "Extra", data = {}})
    return "summary", "^extra summary user/Extra$"
  end},
  {"two summaries swapped", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local sums = d.benchmarks[bi].states[si].summaries
    local i = math.random(#sums - 1)
    sums[i], sums[i + 1] = sums[i + 1], sums[i]
    return "summary", ("^summary order: %s at position %d"):format(sums[i].tag:gsub("%p", "%%%0"), i)
  end},
  {"a hint changed", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local s = pick(d.benchmarks[bi].states[si].summaries)
    s.hint = "bytes?"
    return "field", ("^%s: hint 'bytes%%?'"):format(s.tag:gsub("%p", "%%%0"))
  end},
  {"a hide written as null", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local sums = d.benchmarks[bi].states[si].summaries
    local s = sums[2]   -- GPU Time: no hide
    s.hide = json.null
    return "field", ("^%s: hide null %%(NVBench absent%%)$"):format(s.tag:gsub("%p", "%%%0"))
  end},
  {"a description changed", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local s = pick(d.benchmarks[bi].states[si].summaries)
    s.description = "Other words"
    return "field", ("^%s: description 'Other words'"):format(s.tag:gsub("%p", "%%%0"))
  end},
  {"a data type changed", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local s = pick(d.benchmarks[bi].states[si].summaries)
    s.data[1].type = "string"
    return "field", ("^%s: data value:string"):format(s.tag:gsub("%p", "%%%0"))
  end},
  {"a declared value changed", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local s = d.benchmarks[bi].states[si].summaries[1]
    s.data[1].value = tostring(tonumber(s.data[1].value) + 1)
    return "value", "^nv/element_count/Items: value"
  end},
  {"a declared value under another tag", function(d)
    local bi, si = table.unpack(pick(ran_states(d))); local s = d.benchmarks[bi].states[si].summaries[1]
    s.tag = "user/Items"; s.data[1].value = "0"
    return "value", "^nv/element_count/Items %(as user/Items%): value '0'",
      {{"summary", "^summary nv/element_count/Items missing$"}, {"summary", "^extra summary user/Items$"}}
  end},
}

-- got = ref mutated by m: the diff names that difference, and nothing but the ones it entails.
local function matches(g, kind, pattern, also)
  if g.kind == kind and g.what:find(pattern) then return true end
  for _, a in ipairs(also or {}) do if g.kind == a[1] and g.what:find(a[2]) then return true end end
  return false
end
for _, m in ipairs(MUTATIONS) do
  local found, alone = 0, 0
  local trials = 6
  for _ = 1, trials do
    local ref = random_doc()
    local got = copy(ref)
    local kind, pattern, also = m[2](got)
    local groups = C.aggregate(C.diff(ref, got))
    local hit, others = false, 0
    for _, g in ipairs(groups) do
      if g.kind == kind and g.what:find(pattern) then hit = true
      elseif not matches(g, kind, pattern, also) then
        others = others + 1
        t.diag(("  also: [%s] %s"):format(g.kind, g.what))
      end
    end
    if hit then found = found + 1 end
    if others == 0 then alone = alone + 1 end
  end
  t.is(found, trials, ("diff finds %s (%s)"):format(m[1], "each trial"))
  t.is(alone, trials, ("diff reports nothing else for %s"):format(m[1]))
end

-- Several mutations on distinct states at once: each found, nothing else.
do
  local names = {["a summary dropped"] = true, ["an extra summary"] = true, ["two summaries swapped"] = true,
    ["a hint changed"] = true, ["a hide written as null"] = true, ["a description changed"] = true,
    ["a data type changed"] = true, ["a declared value changed"] = true, ["a declared value under another tag"] = true}
  local STATE_LEVEL = {}
  for _, m in ipairs(MUTATIONS) do if names[m[1]] then STATE_LEVEL[#STATE_LEVEL + 1] = m end end
  local ok_all = true
  for _ = 1, 10 do
    local ref = random_doc()
    local got = copy(ref)
    local states = ran_states(got)
    local expect = {}
    for k = 1, math.min(#states, 3) do
      local bi, si = table.unpack(states[k])
      -- a document holding just that state, so the mutation lands there
      local one = {benchmarks = {{states = {got.benchmarks[bi].states[si]}, axes = {}}}}
      local m = pick(STATE_LEVEL)
      local kind, pattern, also = m[2](one)
      expect[#expect + 1] = {kind, pattern, got.benchmarks[bi].states[si], also}
    end
    local list = C.diff(ref, got)
    local matched = {}
    for _, e in ipairs(expect) do
      local hit = false
      for i, d in ipairs(list) do
        if d.state == e[3].name and matches(d, e[1], e[2], e[4]) then hit = true; matched[i] = true end
      end
      ok_all = ok_all and hit
    end
    for i = 1, #list do ok_all = ok_all and matched[i] == true end
  end
  t.ok(ok_all, "diff finds several mutations of distinct states at once, and nothing else")
end

do
  local ref = random_doc()
  t.is(#C.diff(ref, copy(ref)), 0, "identical documents: no difference")
  local got = copy(ref)
  for _, st in ipairs(got.benchmarks[1].states) do
    for _, s in ipairs(st.summaries) do
      if C.is_measured(s.tag) then s.data[1].value = tostring(math.random() * 1e3) end
    end
  end
  t.is(#C.diff(ref, got), 0, "measured values are not compared")
  -- numbers written differently are the same number
  got = copy(ref)
  local av = got.benchmarks[1].states[1].axis_values[1]
  if av.type == "int64" then av.value = av.value .. ".0" elseif av.type == "float64" then
    av.value = ("%.20e"):format(tonumber(av.value)) end
  t.is(#C.diff(ref, got), 0, "axis values compared as numbers")
end

-- The model's optional markers: an optional summary may be missing, an optional key absent,
-- a failure reason matched by pattern.
do
  local ref = random_doc()
  local got = copy(ref)
  local st = ref.benchmarks[1].states[1]
  st.summaries[2]._optional = true
  table.remove(got.benchmarks[1].states[1].summaries, 2)
  st._optional_keys = {device = true}
  got.benchmarks[1].states[1].device = nil
  t.is(#C.diff(ref, got), 0, "optional summaries and keys may be missing")
  local sk = ref.benchmarks[1].states[#ref.benchmarks[1].states]
  sk.skip_reason, sk._reason_pattern = nil, "^Unexpected error: .*collect_cupti"
  local gk = got.benchmarks[1].states[#got.benchmarks[1].states]
  gk.skip_reason = "Unexpected error: no collect_cupti_metrics"
  t.is(#C.diff(ref, got), 0, "a failure reason that matches the model's pattern")
  gk.skip_reason = "error: no collect_cupti_metrics"
  local groups = C.aggregate(C.diff(ref, got))
  t.ok(#groups == 1 and groups[1].what:find("^failure reason starts 'error: ' %(NVBench 'Unexpected error: '%)"),
    "a failure reason with another prefix")
  gk.skip_reason = "Unexpected error: something else"
  groups = C.aggregate(C.diff(ref, got))
  t.ok(#groups == 1 and groups[1].what:find("would match"), "a failure reason that does not match the pattern")
end

-- --- markdown ---------------------------------------------------------------------------

local function markdown(tables, nvbench)
  local lines = {}
  if nvbench then lines = {"# Devices", "", "## [0] `NVIDIA H100`", "* SM Version: 900", "", "# Log", "", "```",
    "Run:  [1/2] x", "```", ""} end
  lines[#lines + 1] = "# Benchmark Results"
  for _, tb in ipairs(tables) do
    lines[#lines + 1] = ""
    lines[#lines + 1] = "## " .. tb.bench
    lines[#lines + 1] = ""
    if tb.device then
      lines[#lines + 1] = "### " .. tb.device .. (nvbench and " `NVIDIA H100`" or " Fake CUDA Device 0")
      lines[#lines + 1] = ""
    end
    lines[#lines + 1] = "| " .. table.concat(tb.columns, " | ") .. " |"
    local rule = {}
    for i, c in ipairs(tb.columns) do rule[i] = ("-"):rep(#c + 2) end
    lines[#lines + 1] = "|" .. table.concat(rule, "|") .. "|"
    for _ = 1, tb.rows do
      local row = {}
      for i in ipairs(tb.columns) do row[i] = tostring(math.random(100)) end
      lines[#lines + 1] = "| " .. table.concat(row, " | ") .. " |"
    end
    lines[#lines + 1] = ""
    lines[#lines + 1] = "* Device=0 X=1: skipped (why)"
  end
  return table.concat(lines, "\n") .. "\n"
end

do
  local ref = random_doc()
  local tables = C.columns_from_json(ref)
  -- independently: the visible summaries' names of the states that ran, first-seen order
  local b = ref.benchmarks[1]
  local want = {}
  for _, a in ipairs(b.axes) do want[#want + 1] = a.name end
  want[#want + 1] = "Items"
  for _, spec in ipairs(TAGS) do if not spec[4] then want[#want + 1] = spec[2] end end
  t.is(table.concat(tables[1].columns, "|"), table.concat(want, "|"), "columns_from_json: axes, then visible names")
  local parsed = C.markdown_tables(markdown(tables, true))
  t.is(#parsed, #tables, "markdown_tables reads every table (and not the Devices section)")
  t.is(table.concat(parsed[1].columns, "|"), table.concat(want, "|"), "markdown_tables reads the header")
  t.is(parsed[1].rows, tables[1].rows, "markdown_tables counts the rows (not the divider or notes)")
  t.is(#C.compare_columns(tables, parsed), 0, "the same columns: no difference")
  local changed = copy(tables)
  local k = math.random(#changed[1].columns)
  changed[1].columns[k] = "Other"
  local diffs = C.compare_columns(tables, C.markdown_tables(markdown(changed)))
  t.ok(#diffs == 1 and diffs[1].kind == "markdown" and diffs[1].what:find("Other"), "a renamed column is found")
  changed = copy(tables)
  changed[1].rows = changed[1].rows + 1
  diffs = C.compare_columns(tables, C.markdown_tables(markdown(changed)))
  t.ok(#diffs == 1 and diffs[1].what:find("rows"), "a row more is found")
  changed = copy(tables)
  changed[1].device = nil
  diffs = C.compare_columns(tables, C.markdown_tables(markdown(changed)))
  t.ok(#diffs == 1 and diffs[1].what:find("^device heading none %(NVBench %[0%]%)"), "a missing device heading is found")
  changed = copy(tables)
  table.remove(changed)
  diffs = C.compare_columns(tables, C.markdown_tables(markdown(changed)))
  t.ok(#diffs == 1 and diffs[1].what:find("^no table"), "a missing table is found")
end

-- --- times within the combined noise; blocking-kernel timeouts --------------------------------

do
  local agree = true
  local n = 0
  for _ = 1, 200 do
    local ref = random_doc()
    local got = copy(ref)
    for bi, b in ipairs(got.benchmarks) do
      for si, st in ipairs(b.states) do
        if not st.is_skipped then
          local a = math.random() * 1e-3 + 1e-6
          local x = a * (1 + (math.random() - 0.5) * 0.4)
          local na, nx = math.random() * 0.1, math.random() * 0.1
          local rs = ref.benchmarks[bi].states[si]
          rs.summaries[3].data[1].value = ("%.17g"):format(a)
          rs.summaries[4].data[1].value = ("%.17g"):format(na)
          st.summaries[3].data[1].value = ("%.17g"):format(x)
          st.summaries[4].data[1].value = ("%.17g"):format(nx)
          rs._want = (x - a) ^ 2 <= (na * a) ^ 2 + (nx * x) ^ 2
        end
      end
    end
    for _, row in ipairs(C.times(ref, got)) do
      n = n + 1
      local rs
      for _, b in ipairs(ref.benchmarks) do
        for _, st in ipairs(b.name == row.bench and b.states or {}) do if st.name == row.state then rs = st end end
      end
      if row.within ~= rs._want then
        agree = false
        t.diag(("  %s %s: %.17g %.17g %.17g %.17g -> %s"):format(row.bench, row.state, row.ref, row.got, row.ref_noise,
          row.got_noise, tostring(row.within)))
      end
    end
  end
  t.ok(agree and n > 200, ("times: within the combined noise exactly when (a-b)^2 <= (na a)^2 + (nb b)^2 (%d pairs)"):format(n))
  local ref = random_doc()
  local got = copy(ref)
  for _, b in ipairs({ref, got}) do
    for _, bench in ipairs(b.benchmarks) do
      for _, st in ipairs(bench.states) do if not st.is_skipped then
        st.summaries[3].data[1].value = "1e-3"; st.summaries[4].data[1].value = "inf" end end
    end
  end
  local rows = C.times(ref, got)
  t.ok(#rows > 0 and rows[1].within == nil, "times: an infinite noise leaves the verdict open")
end

do
  local k = math.random(0, 6)
  local lines = {}
  for i = 1, 30 do lines[i] = ("Pass: Cold: %d"):format(i) end
  local phrases = {"Fail: the blocking kernel timed out after 30 s: the stream was held too long",
    "Deadlock detected -- missing nvbench::exec_tag::sync? See stdout for details.",
    "Warn: Blocking kernel timed out"}
  for _ = 1, k do table.insert(lines, math.random(#lines + 1), pick(phrases)) end
  local b = math.random(0, 4)
  for _ = 1, b do
    table.insert(lines, math.random(#lines + 1), "Warn: s:sync() would wait for the stream the blocking kernel held " ..
      "(a wait, free, load or pageable copy inside the measured function; exec{sync = true} says so up front): " ..
      "measured without the blocking kernel")
  end
  local log = table.concat(lines, "\n")
  t.is(C.blocking_timeouts(log), k, ("blocking_timeouts counts %d timeouts"):format(k))
  t.is(C.broken_holds(log), b, ("broken_holds counts %d measurements taken again"):format(b))
end

-- --- the command, end to end ----------------------------------------------------------------

do
  local dir = t.tmpdir()
  os.execute(("mkdir -p '%s/nv' '%s/c1' '%s/c2'"):format(dir, dir, dir))
  local names = {"same", "differs"}
  local docs = {}
  for _, name in ipairs(names) do
    local ref = random_doc()
    docs[name] = ref
    json.write_file(("%s/nv/%s.json"):format(dir, name), ref)
    t.write_file(("%s/nv/%s.md"):format(dir, name), markdown(C.columns_from_json(ref), true))
    for _, run in ipairs{"c1", "c2"} do
      local got = copy(ref)
      if name == "differs" and run == "c1" then got.benchmarks[1].states[1].summaries[2].hint = "other" end
      json.write_file(("%s/%s/%s.json"):format(dir, run, name), got)
      t.write_file(("%s/%s/%s.md"):format(dir, run, name), markdown(C.columns_from_json(got)))
      t.write_file(("%s/%s/%s.log"):format(dir, run, name), name == "differs" and run == "c2" and
        "Fail: the blocking kernel timed out after 30 s\n" or "Pass: Cold\n")
    end
  end
  local rc, out, err = t.run(("%s '%s' --nvbench '%s/nv' --cudalua '%s/c1' --cudalua '%s/c2' --report '%s/report.md' same differs")
    :format(t.cudalua(), tool, dir, dir, dir, dir))
  t.is(rc, 1, "the command exits 1 when an example fails" .. err)
  t.like(out, "| same | PASS | 0 | 0 | 0 |", "the summary table: an example that matches passes")
  t.like(out, "| differs | FAIL | 1 | 0 | 0 | [^|]* | 0, 1 | 0, 0 |", "the summary table: a hint and a timeout in run 2")
  local report = t.read_file(dir .. "/report.md") or ""
  t.like(report, "## differs: FAIL", "the report gives the verdict")
  t.like(report, "hint 'other' %(NVBench 'sample_size'%)", "the report says what differs")
  t.like(report, "run 2: 1 blocking%-kernel timeouts", "the report counts the timeouts")
  t.like(report, "run 2's structure differs from run 1's", "the report compares the runs")
  os.execute("rm -rf '" .. dir .. "'")
end

t.done()
