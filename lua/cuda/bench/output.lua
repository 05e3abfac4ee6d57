-- cuda.bench.output: the results of cuda.bench.run as NVBench writes them: markdown, CSV, JSON.
-- SPDX-License-Identifier: MIT
--
-- The JSON follows NVBench's schema (meta.version.json 1.0.0; devices;
-- benchmarks with axes and states whose summaries carry tag, name, hint,
-- hide and data [{name = "value", type, value}]; values written as strings
-- as NVBench does), so that cuda-bench's BenchmarkResult and
-- nvbench_compare.py read it. With a JSON path, the cold GPU sample times
-- go next to it, as float32 files (NVBench's nv/json/bin summaries).
local json = require "cuda.json"
local run = require "cuda.bench.run"
local axes_mod = require "cuda.bench.axes"

local M = {}

-- --- markdown ------------------------------------------------------------------------

local function visible(s) return s.hide == nil end

-- The columns of a benchmark's table: axes, then every visible summary
-- name in first-seen order (one column per tag).
local function columns(bench_result)
  local cols, seen = {}, {}
  for _, axis in ipairs(bench_result.axes) do cols[#cols + 1] = {title = axis.name, axis = axis} end
  for _, st in ipairs(bench_result.states) do
    for _, s in ipairs(st.summaries or {}) do
      if visible(s) and not seen[s.tag] then
        seen[s.tag] = true
        cols[#cols + 1] = {title = s.name, tag = s.tag}
      end
    end
  end
  return cols
end

local function cell(col, st)
  if col.axis then return axes_mod.display(col.axis, st.index[col.axis.name]) end
  for _, s in ipairs(st.summaries or {}) do if s.tag == col.tag then return run.format_value(s) end end
  return ""
end

local function table_lines(cols, rows, lines)
  local widths = {}
  for i, c in ipairs(cols) do
    widths[i] = #c.title
    for _, r in ipairs(rows) do widths[i] = math.max(widths[i], utf8.len(r[i]) or #r[i]) end
  end
  local function line(cells)
    local parts = {}
    for i, text in ipairs(cells) do
      parts[i] = (" "):rep(widths[i] - (utf8.len(text) or #text)) .. text
    end
    return "| " .. table.concat(parts, " | ") .. " |"
  end
  local titles, rule = {}, {}
  for i, c in ipairs(cols) do titles[i] = c.title; rule[i] = ("-"):rep(widths[i] - 1) .. ":" end
  lines[#lines + 1] = line(titles)
  lines[#lines + 1] = "|" .. table.concat((function()
    local r = {}
    for i = 1, #cols do r[i] = ("-"):rep(widths[i] + 2) end
    return r
  end)(), "|") .. "|"
  for _, r in ipairs(rows) do lines[#lines + 1] = line(r) end
end

-- The results as NVBench's markdown: "# Benchmark Results", then per
-- benchmark and device a table; skipped states say why.
function M.markdown(results, devices)
  local lines = {"# Benchmark Results", ""}
  for _, b in ipairs(results) do
    lines[#lines + 1] = "## " .. b.name
    lines[#lines + 1] = ""
    local by_device, order = {}, {}
    for _, st in ipairs(b.states) do
      local key = st.device or -1
      if not by_device[key] then by_device[key] = {}; order[#order + 1] = key end
      table.insert(by_device[key], st)
    end
    for _, key in ipairs(order) do
      if key >= 0 then
        local dev = devices and devices[key]
        lines[#lines + 1] = ("### [%d] %s"):format(key, dev and dev.name or "device")
        lines[#lines + 1] = ""
      end
      local states = by_device[key]
      local cols = columns({axes = b.axes, states = states})
      local rows, notes = {}, {}
      for _, st in ipairs(states) do
        if st.is_skipped then
          notes[#notes + 1] = ("* %s: skipped (%s)"):format(st.name, (st.skip_reason:gsub("%s*\n.*", " ...")))
        else
          local r = {}
          for i, c in ipairs(cols) do r[i] = cell(c, st) end
          rows[#rows + 1] = r
        end
      end
      if #rows > 0 then table_lines(cols, rows, lines) end
      if #notes > 0 then
        if #rows > 0 then lines[#lines + 1] = "" end
        for _, n in ipairs(notes) do lines[#lines + 1] = n end
      end
      lines[#lines + 1] = ""
    end
  end
  return table.concat(lines, "\n")
end

-- --- CSV ---------------------------------------------------------------------------------

local function csv_field(v)
  v = tostring(v)
  if v:find('[,"\n]') then return '"' .. v:gsub('"', '""') .. '"' end
  return v
end

-- One line per state: Benchmark, Device, the axes, Skipped, then every
-- summary by name (raw numbers: seconds, fractions).
function M.csv(results)
  local out = {}
  for _, b in ipairs(results) do
    local tags, names, seen = {}, {}, {}
    for _, st in ipairs(b.states) do
      for _, s in ipairs(st.summaries or {}) do
        if not seen[s.tag] then seen[s.tag] = true; tags[#tags + 1] = s.tag; names[#names + 1] = s.name end
      end
    end
    local header = {"Benchmark", "Device"}
    for _, axis in ipairs(b.axes) do header[#header + 1] = axis.name end
    header[#header + 1] = "Skipped"
    for i = 1, #tags do header[#header + 1] = names[i] end
    out[#out + 1] = table.concat((function()
      local h = {}
      for i, v in ipairs(header) do h[i] = csv_field(v) end
      return h
    end)(), ",")
    for _, st in ipairs(b.states) do
      local row = {csv_field(b.name), st.device and tostring(st.device) or ""}
      for _, axis in ipairs(b.axes) do row[#row + 1] = csv_field(axis.values[st.index[axis.name]]) end
      row[#row + 1] = st.is_skipped and csv_field(st.skip_reason) or "No"
      local by_tag = {}
      for _, s in ipairs(st.summaries or {}) do by_tag[s.tag] = s end
      for _, tag in ipairs(tags) do
        local s = by_tag[tag]
        local v = s and s.value
        row[#row + 1] = v == nil and "" or (v == math.huge and "inf" or csv_field(v))
      end
      out[#out + 1] = table.concat(row, ",")
    end
  end
  return table.concat(out, "\n") .. "\n"
end

-- --- JSON ----------------------------------------------------------------------------------

local function value_string(t, v)
  if t == "int64" then return ("%d"):format(v) end
  if t == "float64" then
    if v ~= v or v == math.huge or v == -math.huge then return json.null end
    return ("%.17g"):format(v)
  end
  return v
end

local function summary_json(s)
  local data = {{name = "value", type = s.type, value = value_string(s.type, s.value)}}
  return {tag = s.tag, name = s.name, hint = s.hint or json.null, hide = s.hide or json.null,
    description = s.description or json.null, data = json.array(data)}
end

-- NVBench's device record, from the driver's attributes.
function M.device_json(dev)
  local p = dev.properties
  local major, minor = dev.compute_capability.major, dev.compute_capability.minor
  return {
    id = dev.id, name = dev.name, sm_version = major * 100 + minor * 10, ptx_version = major * 100 + minor * 10,
    sm_default_clock_rate = (p.clock_rate_khz or 0) * 1000, number_of_sms = p.multiprocessor_count,
    max_blocks_per_sm = p.max_blocks_per_multiprocessor or json.null,
    max_threads_per_sm = p.max_threads_per_multiprocessor, max_threads_per_block = p.max_threads_per_block,
    registers_per_sm = p.max_registers_per_multiprocessor or json.null, registers_per_block = p.max_registers_per_block,
    global_memory_size = p.total_memory, global_memory_bus_peak_clock_rate = (p.memory_clock_rate_khz or 0) * 1000,
    global_memory_bus_width = p.memory_bus_width, global_memory_bus_bandwidth = run.peak_bandwidth(dev),
    l2_cache_size = p.l2_cache_size, shared_memory_per_sm = p.max_shared_memory_per_multiprocessor,
    shared_memory_per_block = p.max_shared_memory_per_block, ecc_state = (p.ecc_enabled or 0) ~= 0,
  }
end

local function axis_json(axis)
  local values = {}
  for i, v in ipairs(axis.values) do
    values[i] = {input_string = axis.inputs[i], description = axis.flags == "pow2" and ("2^%s = %d"):format(axis.inputs[i], v) or "",
      value = axis.kind == "int64" and v or (axis.kind == "float64" and v) or v}
  end
  return {name = axis.name, type = axis.kind, flags = axis.flags, values = json.array(values)}
end

local function axis_value_json(axis, i)
  local v = axis.values[i]
  return {name = axis.name, type = axis.kind,
    value = axis.kind == "int64" and ("%d"):format(v) or axis.kind == "float64" and ("%.17g"):format(v) or v}
end

-- Writes the float32 sample times of a state next to the JSON file; returns the summary.
local function samples_summary(json_path, bi, si, st)
  if not json_path or not st.samples or (st.n_samples or 0) == 0 then return nil end
  local folder = json_path .. "-bin"
  os.execute("mkdir -p '" .. folder:gsub("'", "'\\''") .. "'")
  local file = ("%s/%d-%d.bin"):format(folder, bi, si)
  local f = io.open(file, "wb")
  if not f then return nil end
  local parts = {}
  for i = 1, st.n_samples do parts[i] = string.pack("<f", st.samples[i]) end
  f:write(table.concat(parts))
  f:close()
  local rel = file:match("[^/]*/[^/]*$")
  return {tag = "nv/json/bin:nv/cold/sample_times", name = "Samples Times File", hint = "file/sample_times",
    hide = "Hidden by default.", description = "Binary file containing sample times as little-endian float32.",
    data = json.array{{name = "filename", type = "string", value = rel},
                      {name = "size", type = "int64", value = ("%d"):format(st.n_samples)}}}
end

-- The results as an NVBench JSON document (a Lua table for cuda.json).
-- json_path: where it will be written, for the sample files (or nil).
function M.json_document(results, devices, argv, json_path)
  local devs = {}
  for _, dev in ipairs(devices or {}) do devs[#devs + 1] = M.device_json(dev) end
  local benches = {}
  for bi, b in ipairs(results) do
    local axes = {}
    for i, axis in ipairs(b.axes) do axes[i] = axis_json(axis) end
    local states = {}
    for si, st in ipairs(b.states) do
      local sums = {}
      for _, s in ipairs(st.summaries or {}) do sums[#sums + 1] = summary_json(s) end
      local bin = samples_summary(json_path, bi - 1, si - 1, st)
      if bin then sums[#sums + 1] = bin end
      local avs = {}
      for _, axis in ipairs(b.axes) do avs[#avs + 1] = axis_value_json(axis, st.index[axis.name]) end
      states[#states + 1] = {name = st.name, min_samples = st.min_samples, timeout = st.timeout,
        max_noise = json.null, device = st.device or json.null, type_config_index = 0,
        axis_values = json.array(avs), summaries = json.array(sums), is_skipped = st.is_skipped or false,
        skip_reason = st.skip_reason or json.null}
    end
    benches[#benches + 1] = {name = b.name, index = bi - 1, min_samples = b.min_samples, timeout = b.timeout,
      devices = json.array(b.devices), axes = json.array(axes), states = json.array(states)}
  end
  return {meta = {argv = json.array(argv or {}),
      version = {json = {major = 1, minor = 0, patch = 0, string = "1.0.0"},
                 nvbench = {major = 0, minor = 3, patch = 0, string = "0.3.0 (cudalua)"}}},
    devices = json.array(devs), benchmarks = json.array(benches)}
end

return M
