-- cuda.bench.output: the results of cuda.bench.run as NVBench writes them: markdown, CSV, JSON.
-- SPDX-License-Identifier: MIT
--
-- Each printer follows cuda-bench 0.3.0's (NVBench's markdown_printer,
-- csv_printer and json_printer), so that its readers (cuda-bench's
-- BenchmarkResult, nvbench_compare.py, nvbench_histogram.py) read ours and
-- a diff against NVBench's output shows the same structure:
--
-- * markdown: "# Devices", "# Log" (a fenced block the log lines stream
--   into) and "# Benchmark Results" (a table per benchmark and device,
--   skipped states left out); the --list document.
-- * CSV: one table for every benchmark, under one header.
-- * JSON: NVBench's keys in NVBench's order, written as nlohmann's dump(2)
--   writes them; summary values as strings (fmt::to_string); numbers that
--   are not finite as null (nlohmann), or "inf" inside a summary's value.
--   Sample files (FILE-bin/N.bin, float32) only with --jsonbin.
-- Where cudalua differs on purpose: lua/cuda/bench/DIFFERENCES-output.md.
local run = require "cuda.bench.run"

local M = {}

-- --- numbers as fmt and nlohmann write them -------------------------------------------

-- The shortest decimal digits that read back to x (finite, not 0), and the
-- exponent of the first digit: 0.00125 -> "125", -3.
local function shortest_digits(x)
  local text
  for precision = 0, 16 do
    text = ("%." .. precision .. "e"):format(x)
    if tonumber(text) == x then break end
  end
  local mantissa, exponent = text:match("^-?(%d[%.%d]*)e([-+]%d+)$")
  return (mantissa:gsub("%.", "")):gsub("0+$", ""), tonumber(exponent)
end

local function exponent_form(digits, e)
  local mantissa = #digits > 1 and digits:sub(1, 1) .. "." .. digits:sub(2) or digits
  return ("%se%s%02d"):format(mantissa, e < 0 and "-" or "+", math.abs(e))
end

-- A float64 as fmt::to_string writes it: the shortest round-trip digits,
-- fixed notation for exponents -4..15, else "1e-05"; "inf", "-inf", "nan".
function M.fmt_float(x)
  if x ~= x then return "nan" end
  if x == math.huge then return "inf" end
  if x == -math.huge then return "-inf" end
  local sign = (x < 0 or 1 / x < 0) and "-" or ""
  if x == 0 then return sign .. "0" end
  local digits, e = shortest_digits(math.abs(x))
  if e < -4 or e >= 16 then return sign .. exponent_form(digits, e) end
  if e < 0 then return sign .. "0." .. ("0"):rep(-e - 1) .. digits end
  if #digits <= e + 1 then return sign .. digits .. ("0"):rep(e + 1 - #digits) end
  return sign .. digits:sub(1, e + 1) .. "." .. digits:sub(e + 2)
end

-- A float64 as nlohmann's dump writes a number: null when not finite,
-- ".0" on integral values, exponents outside -5..14 written "1e-05".
local function json_float(x)
  if x ~= x or x == math.huge or x == -math.huge then return "null" end
  local sign = (x < 0 or 1 / x < 0) and "-" or ""
  if x == 0 then return sign .. "0.0" end
  local digits, e = shortest_digits(math.abs(x))
  local n = e + 1   -- where the decimal point goes
  if #digits <= n and n <= 15 then return sign .. digits .. ("0"):rep(n - #digits) .. ".0" end
  if n > 0 and n <= 15 then return sign .. digits:sub(1, n) .. "." .. digits:sub(n + 1) end
  if n > -4 and n <= 0 then return sign .. "0." .. ("0"):rep(-n) .. digits end
  return sign .. exponent_form(digits, e)
end

-- A summary value's string (NVBench writes every value as a string).
local function value_string(t, v)
  if t == "int64" then return math.type(v) == "integer" and ("%d"):format(v) or M.fmt_float(v) end
  if t == "float64" then return M.fmt_float(v) end
  return tostring(v)
end

-- --- JSON: ordered objects, written as nlohmann's dump(2) ------------------------------

local NULL = setmetatable({}, {__name = "null"})
M.null = NULL

local Object = {}
Object.__index = Object

-- An object that keeps its keys in insertion order: obj(k1, v1, k2, v2, ...);
-- a nil value leaves its key out (NVBench writes optional keys only when set).
local function obj(...)
  local o = setmetatable({keys = {}, values = {}}, Object)
  for i = 1, select("#", ...), 2 do
    local k, v = select(i, ...)
    if v ~= nil then o:set(k, v) end
  end
  return o
end
M.object = obj

function Object:set(k, v)
  if self.values[k] == nil then self.keys[#self.keys + 1] = k end
  self.values[k] = v
  return self
end

local ARRAY = {}
local function arr(list) list[ARRAY] = true; return list end

-- JSON text of a string: nlohmann's escapes; a byte that is not UTF-8
-- becomes U+FFFD (nlohmann would throw and the file would be lost).
local ESCAPES = {['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r",
  ["\t"] = "\\t"}
-- s with each byte that starts no valid UTF-8 character replaced by U+FFFD.
local function valid_utf8(s)
  if utf8.len(s) then return s end
  local parts, i = {}, 1
  while i <= #s do
    local len = 0
    for n = 1, 4 do
      if utf8.len(s:sub(i, i + n - 1)) == 1 then len = n; break end
    end
    parts[#parts + 1] = len > 0 and s:sub(i, i + len - 1) or "\u{FFFD}"
    i = i + math.max(len, 1)
  end
  return table.concat(parts)
end

local function json_string(s)
  s = valid_utf8(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    return ESCAPES[c] or (c:byte() < 0x20 and ("\\u%04x"):format(c:byte()) or c)
  end) .. '"'
end

local function emit(out, v, depth)
  local kind = type(v)
  if v == nil or v == NULL then out[#out + 1] = "null"
  elseif kind == "boolean" then out[#out + 1] = tostring(v)
  elseif kind == "number" then out[#out + 1] = math.type(v) == "integer" and ("%d"):format(v) or json_float(v)
  elseif kind == "string" then out[#out + 1] = json_string(v)
  elseif kind ~= "table" then error(("output.encode: cannot encode a %s"):format(kind), 0)
  else
    local pad, inner = ("  "):rep(depth), ("  "):rep(depth + 1)
    local is_obj = getmetatable(v) == Object
    local n = is_obj and #v.keys or #v
    if not is_obj then
      for k in pairs(v) do
        if k ~= ARRAY and not (math.type(k) == "integer" and k >= 1 and k <= n) then
          error("output.encode: a table that is neither a list nor an output.object", 0)
        end
      end
    end
    if n == 0 then out[#out + 1] = is_obj and "{}" or "[]"; return end
    out[#out + 1] = is_obj and "{\n" or "[\n"
    for i = 1, n do
      out[#out + 1] = inner
      if is_obj then
        out[#out + 1] = json_string(v.keys[i]) .. ": "
        emit(out, v.values[v.keys[i]], depth + 1)
      else
        emit(out, v[i], depth + 1)
      end
      out[#out + 1] = i < n and ",\n" or "\n"
    end
    out[#out + 1] = pad .. (is_obj and "}" or "]")
  end
end

-- The text of an ordered JSON value, as nlohmann's dump(2) plus a newline.
function M.encode(v)
  local out = {}
  emit(out, v, 0)
  out[#out + 1] = "\n"
  return table.concat(out)
end

-- nlohmann writes an empty list it built with push_back as null.
local function list_or_null(list) return #list > 0 and arr(list) or NULL end

local function float(v) return type(v) == "number" and v + 0.0 or NULL end

-- --- devices -----------------------------------------------------------------------------

local function props(dev) return dev.properties or {} end

local function sm_version(dev)
  local cc = dev.compute_capability or {}
  return (cc.major or 0) * 100 + (cc.minor or 0) * 10
end

local function bus_bandwidth(dev)
  local ok, bw = pcall(run.peak_bandwidth, dev)
  return ok and math.tointeger(math.floor(bw)) or 0
end

-- NVBench's device record (json_printer's add_devices_section).
function M.device_json(dev)
  local p = props(dev)
  local function int(v) return math.tointeger(v) or 0 end
  return obj("id", dev.id, "name", dev.name, "sm_version", sm_version(dev), "ptx_version", sm_version(dev),
    "sm_default_clock_rate", int(p.clock_rate_khz) * 1000, "number_of_sms", int(p.multiprocessor_count),
    "max_blocks_per_sm", int(p.max_blocks_per_multiprocessor), "max_threads_per_sm", int(p.max_threads_per_multiprocessor),
    "max_threads_per_block", int(p.max_threads_per_block), "registers_per_sm", int(p.max_registers_per_multiprocessor),
    "registers_per_block", int(p.max_registers_per_block), "global_memory_size", int(p.total_memory),
    "global_memory_bus_peak_clock_rate", int(p.memory_clock_rate_khz) * 1000,
    "global_memory_bus_width", int(p.memory_bus_width), "global_memory_bus_bandwidth", bus_bandwidth(dev),
    "l2_cache_size", int(p.l2_cache_size), "shared_memory_per_sm", int(p.max_shared_memory_per_multiprocessor),
    "shared_memory_per_block", int(p.max_shared_memory_per_block), "ecc_state", (p.ecc_enabled or 0) ~= 0)
end

-- Always a list: BenchmarkResult iterates it (NVBench always has a device).
local function devices_json(devices)
  local list = {}
  for _, dev in ipairs(devices or {}) do list[#list + 1] = M.device_json(dev) end
  return arr(list)
end

-- --jsonlist-devices: {"devices": [...]}.
function M.devices_list_json(devices) return M.encode(obj("devices", devices_json(devices))) end

-- --- axes ------------------------------------------------------------------------------------

-- An axis value's input string and description, as NVBench's axes give them:
-- a float64 is "{:0.5g}", a pow2 exponent says "2^e = v".
local function input_string(axis, i)
  if axis.kind == "float64" then return run.fixed("%.5g", axis.values[i]) end
  return tostring(axis.inputs[i])
end

local function description(axis, i)
  if axis.flags == "pow2" then return ("2^%s = %d"):format(axis.inputs[i], axis.values[i]) end
  return ""
end

local function axis_type(axis) return axis.kind end

local function axis_json(axis)
  local values = {}
  for i, v in ipairs(axis.values) do
    local value = obj("input_string", input_string(axis, i), "description", description(axis, i))
    if axis.kind == "type" then value:set("is_active", true) else value:set("value", v) end
    values[i] = value
  end
  return obj("name", axis.name, "type", axis_type(axis), "flags", axis.flags or "", "values", list_or_null(values))
end

local function axes_json(axes)
  local list = {}
  for i, axis in ipairs(axes or {}) do list[i] = axis_json(axis) end
  return list_or_null(list)
end

-- A state's value of an axis as NVBench's state holds it: a type axis is a
-- string; values are written as strings (fmt::to_string).
local function axis_value_json(axis, v)
  local t = axis.kind == "type" and "string" or axis.kind
  return obj("name", axis.name, "type", t, "value", value_string(t, v))
end

-- --- JSON results ------------------------------------------------------------------------------

local function summary_json(s)
  local data = {}
  for _, d in ipairs(s.data or {{name = "value", type = s.type, value = s.value}}) do
    if d.value ~= nil then data[#data + 1] = obj("name", d.name, "type", d.type, "value", value_string(d.type, d.value)) end
  end
  return obj("tag", s.tag, "name", s.name, "description", s.description, "hint", s.hint, "hide", s.hide,
    "data", #data > 0 and arr(data) or nil)
end

-- A setting of a state: its own (a state setter) or its benchmark's.
local function setting(rec, b, key)
  local st = rec.state or {}
  local v = rec[key]
  if v == nil then v = st[key] end
  if v == nil and b then v = b[key] end
  return v
end

-- A state's device: none for a cpu-only benchmark (NVBench runs those
-- without one), whatever device the run loop gave it.
local function device_of(rec, b)
  if b and b.is_cpu_only then return nil end
  return rec.device
end

local function state_json(rec, b)
  local avs, sums = {}, {}
  for _, axis in ipairs(rec.axes or {}) do avs[#avs + 1] = axis_value_json(axis, axis.values[rec.index[axis.name]]) end
  for _, s in ipairs(rec.summaries or {}) do sums[#sums + 1] = summary_json(s) end
  local st = obj("name", rec.name, "min_samples", setting(rec, b, "min_samples"),
    "cold_warmup_runs", setting(rec, b, "cold_warmup_runs"),
    "cold_max_warmup_walltime", float(setting(rec, b, "cold_max_warmup_walltime")),
    "batch_target_time", float(setting(rec, b, "batch_target_time")), "skip_time", float(setting(rec, b, "skip_time")),
    "timeout", float(setting(rec, b, "timeout")), "device", device_of(rec, b) or NULL, "type_config_index", 0,
    "axis_values", list_or_null(avs), "summaries", list_or_null(sums), "is_skipped", rec.is_skipped == true)
  if rec.is_skipped then st:set("skip_reason", rec.skip_reason or "") end
  return st
end

local function benchmark_json(res, index)
  local b = res.bench or {}
  local states = {}
  for i, rec in ipairs(res.states) do states[i] = state_json(rec, b) end
  return obj("name", res.name, "index", index, "min_samples", b.min_samples or res.min_samples,
    "cold_warmup_runs", b.cold_warmup_runs, "cold_max_warmup_walltime", float(b.cold_max_warmup_walltime),
    "batch_target_time", float(b.batch_target_time), "skip_time", float(b.skip_time),
    "timeout", float(b.timeout or res.timeout),
    "devices", arr(b.is_cpu_only and {} or table.move(res.devices or {}, 1, #(res.devices or {}), 1, {})),
    "axes", axes_json(res.axes), "states", arr(states))
end

-- NVBench's version block. cudalua is not NVBench: "nvbench" says which
-- cudalua wrote the file (the reader checks only the JSON file version).
local function version_json()
  local version = require("cuda").version or "0.0.0"
  local major, minor, patch = version:match("^(%d+)%.(%d+)%.(%d+)")
  return obj("json", obj("major", 1, "minor", 0, "patch", 0, "string", "1.0.0"),
    "nvbench", obj("major", math.tointeger(tonumber(major or 0)), "minor", math.tointeger(tonumber(minor or 0)),
      "patch", math.tointeger(tonumber(patch or 0)), "string", ("%s.%s.%s"):format(major or 0, minor or 0, patch or 0),
      "git_branch", "", "git_sha", "", "git_version", "cudalua-" .. version, "git_is_dirty", false))
end

-- The results as NVBench's JSON document (text). devices: every device
-- (NVBench lists them all); argv: the command line.
function M.json(results, devices, argv)
  local benches = {}
  for i, res in ipairs(results) do benches[i] = benchmark_json(res, i - 1) end
  local argv_list = {}
  for i, a in ipairs(argv or {}) do argv_list[i] = tostring(a) end
  return M.encode(obj("meta", obj("argv", list_or_null(argv_list), "version", version_json()),
    "devices", devices_json(devices), "benchmarks", arr(benches)))
end

-- --jsonlist-benches: each benchmark's name, index and axes.
function M.benchmarks_list_json(benchmarks)
  local list = {}
  for i, b in ipairs(benchmarks) do
    local axes = {}
    for j, axis in ipairs(b.axes) do axes[j] = axis_json(axis) end
    list[i] = obj("name", b.name, "index", i - 1, "axes", arr(axes))
  end
  if #list == 0 then return "" end
  return M.encode(obj("benchmarks", arr(list)))
end

-- --- --jsonbin: the sample files -----------------------------------------------------------

-- The folder for path's sample files; made unless it is there. nil, why.
local function bin_folder(folder)
  local kind, why = require("cuda").file_kind(folder)
  if not kind then return nil, why end
  if kind == "directory" then return true end
  if kind ~= "absent" then return nil, ("'%s' exists and is not a directory."):format(folder) end
  local ok = os.execute("mkdir '" .. folder:gsub("'", "'\\''") .. "' 2>/dev/null")
  if not ok then return nil, ("Failed to create result directory '%s'."):format(folder) end
  return true
end

local function write_floats(file, values, n, scale)
  local f, why = io.open(file, "wb")
  if not f then return nil, why end
  local parts = {}
  for i = 1, n do parts[i] = ("<f"):pack(values[i] * scale) end
  local ok, err = f:write(table.concat(parts))
  local closed, cerr = f:close()
  if not (ok and closed) then return nil, err or cerr end
  return true
end

-- A writer for run's on_state hook: writes a state's samples as NVBench's
-- --jsonbin does (path-bin/N.bin, float32 little-endian, N counting from 0;
-- the SM clock of each cold sample in path-freqs-bin/N.bin, in Hz) and adds
-- NVBench's nv/json/bin summaries naming them (relative to the JSON file's
-- folder, where NVBench's readers look first). log: the run's log.
function M.jsonbin_writer(path)
  local counters = {times = 0, freqs = 0}
  local prefix = path:match("[^/]*$")
  local function one(rec, log, what, measure, values, n, scale)
    local tag = ("nv/%s/sample_%s"):format(measure, what)
    local suffix = what == "times" and "-bin" or "-freqs-bin"
    local file_id = counters[what]
    counters[what] = file_id + 1
    local file = ("%s%s/%d.bin"):format(path, suffix, file_id)
    local t0 = require("cuda").clock()
    local ok, why = bin_folder(path .. suffix)
    if ok then ok, why = write_floats(file, values, n, scale) end
    if not ok then
      log(("Warn: Error writing %s (sample_%s) to %s: %s\n"):format(tag, what, file, tostring(why)))
    end
    rec.summaries[#rec.summaries + 1] = {
      tag = (what == "times" and "nv/json/bin:" or "nv/json/freqs-bin:") .. tag,
      name = what == "times" and "Sample Times File" or "Sample Frequencies File",
      hint = "file/sample_" .. what, hide = "Not needed in table.",
      description = ("Binary file containing sample %s as little-endian float32."):format(
        what == "times" and "times" or "frequencies"),
      data = {{name = "filename", type = "string", value = ("%s%s/%d.bin"):format(prefix, suffix, file_id)},
              {name = "size", type = "int64", value = n}}}
    if ok then log(("Info: Wrote '%s' in %6.3fms\n"):format(file, (require("cuda").clock() - t0) * 1000)) end
  end
  return function(rec, log)
    local st = rec.state or {}
    if st.cold and (st.cold.n or 0) > 0 then
      one(rec, log, "times", "cold", st.cold.gpu, st.cold.n, 1)
      if st.cold.clocks and (st.cold.mean_clock or 0) > 0 then one(rec, log, "freqs", "cold", st.cold.clocks, st.cold.n, 1e6) end
    elseif st.cpu_only and (st.cpu_only.n or 0) > 0 then
      one(rec, log, "times", "cpu_only", st.cpu_only.cpu, st.cpu_only.n, 1)
    end
  end
end

-- --- markdown -----------------------------------------------------------------------------------

-- fmt's styles for --color: bold on black, then the foreground colour.
local function styled(color, rgb, text, bg)
  if not color then return text end
  local parts = {}
  if bg == nil then parts[#parts + 1] = "\27[1m" end
  parts[#parts + 1] = ("\27[38;2;%03d;%03d;%03dm"):format(rgb[1], rgb[2], rgb[3])
  local b = bg or {0, 0, 0}
  parts[#parts + 1] = ("\27[48;2;%03d;%03d;%03dm"):format(b[1], b[2], b[3])
  return table.concat(parts) .. text .. "\27[0m"
end

local LEVEL_COLORS = {["Run:"] = {255, 255, 255}, ["Pass:"] = {0, 100, 0}, ["Fail:"] = {255, 0, 0},
  ["Skip:"] = {70, 130, 180}, ["Warn:"] = {160, 135, 0}, ["Info:"] = {211, 211, 211}}

-- A log line ("Pass: ...\n") as a markdown printer writes it, with color:
-- its tag coloured as NVBench's --color does.
function M.log_line(line, color)
  if not color then return line end
  local tag, rest = line:match("^(%a+:)(.*)$")
  if not (tag and LEVEL_COLORS[tag]) then return line end
  local padded = (tag .. " "):sub(1, 5)
  return styled(true, LEVEL_COLORS[tag], padded) .. rest:sub(#padded - #tag + 1)
end

M.LOG_PREAMBLE, M.LOG_EPILOGUE = "# Log\n\n```\n", "```\n\n"

-- The devices' section ("# Devices"), as NVBench's markdown printer writes it.
function M.devices_markdown(devices)
  local out = {"# Devices\n\n"}
  local function line(fmt, ...) out[#out + 1] = fmt:format(...) .. "\n" end
  for _, dev in ipairs(devices or {}) do
    local p = props(dev)
    local free, total = 0, p.total_memory or 0
    local ok, f, t = pcall(dev.memory_info, dev)
    if ok and f then free, total = f, t end
    local int = function(v) return math.tointeger(v) or math.floor(v or 0) end
    line("## [%d] `%s`", dev.id, dev.name)
    line("* SM Version: %d (PTX Version: %d)", sm_version(dev), sm_version(dev))
    line("* Number of SMs: %d", int(p.multiprocessor_count))
    line("* SM Default Clock Rate: %d MHz", int(p.clock_rate_khz) // 1000)
    line("* Global Memory: %d MiB Free / %d MiB Total", int(free) // (1024 * 1024), int(total) // (1024 * 1024))
    line("* Global Memory Bus Peak: %d GB/sec (%d-bit DDR @%dMHz)", bus_bandwidth(dev) // 1000000000,
      int(p.memory_bus_width), int(p.memory_clock_rate_khz) // 1000)
    line("* Max Shared Memory: %d KiB/SM, %d KiB/Block", int(p.max_shared_memory_per_multiprocessor) // 1024,
      int(p.max_shared_memory_per_block) // 1024)
    line("* L2 Cache Size: %d KiB", int(p.l2_cache_size) // 1024)
    line("* Maximum Active Blocks: %d/SM", int(p.max_blocks_per_multiprocessor))
    line("* Maximum Active Threads: %d/SM, %d/Block", int(p.max_threads_per_multiprocessor), int(p.max_threads_per_block))
    line("* Available Registers: %d/SM, %d/Block", int(p.max_registers_per_multiprocessor), int(p.max_registers_per_block))
    line("* ECC Enabled: %s", (p.ecc_enabled or 0) ~= 0 and "Yes" or "No")
    out[#out + 1] = "\n"
  end
  return table.concat(out)
end

-- The --list document: the devices, then per benchmark its axes and values.
function M.list_markdown(benchmarks, devices, count_states)
  local out = {M.devices_markdown(devices)}
  if #benchmarks == 0 then return out[1] end
  out[#out + 1] = "# Benchmarks\n\n"
  for i, b in ipairs(benchmarks) do
    out[#out + 1] = ("## [%d] `%s` (%d configurations)\n\n### Axes\n\n"):format(i - 1, b.name, count_states(b))
    for _, axis in ipairs(b.axes) do
      out[#out + 1] = ("* `%s` : %s%s\n"):format(axis.name, axis_type(axis), (axis.flags or "") ~= "" and
        (" [" .. axis.flags .. "]") or "")
      for j in ipairs(axis.values) do
        local desc = description(axis, j)
        out[#out + 1] = ("  * `%s`%s\n"):format(input_string(axis, j), desc ~= "" and (" (" .. desc .. ")") or "")
      end
    end
    out[#out + 1] = "\n"
  end
  return table.concat(out)
end

-- A table NVBench's way (table_builder): columns by key in the order first
-- seen, a cell per row and column (the first given wins), "" where none.
local function new_table() return {columns = {}, by_key = {}, rows = 0} end

local function add_cell(tbl, row, key, header, value)
  local col = tbl.by_key[key]
  if not col then
    col = {key = key, header = header, cells = {}, width = #header}
    tbl.by_key[key] = col
    tbl.columns[#tbl.columns + 1] = col
  end
  col.width = math.max(col.width, #value)
  if col.cells[row] == nil then col.cells[row] = value end
  tbl.rows = math.max(tbl.rows, row)
end

local function display_width(s) return utf8.len(s) or #s end

local function pad(s, width, align)
  local n = math.max(width - display_width(s), 0)
  if align == "right" then return (" "):rep(n) .. s end
  local left = n // 2
  return (" "):rep(left) .. s .. (" "):rep(n - left)
end

-- NVBench's colours for a --color table.
local TABLE_BG, VDIV, HEADER, HDIV, DATA, DATA_ALT = {20, 20, 32}, {20, 20, 32}, {200, 200, 200}, {170, 170, 170},
  {200, 200, 200}, {170, 170, 170}

-- markdown_table::to_string: centred headers, a dash divider, right-aligned cells.
local function table_markdown(tbl, color)
  if #tbl.columns == 0 then return "" end
  local function cell(rgb, text) return styled(color, rgb, text, TABLE_BG) end
  local bar = cell(VDIV, "|")
  local lines, header, divider = {}, {bar}, {bar}
  for _, col in ipairs(tbl.columns) do
    header[#header + 1] = cell(HEADER, " " .. pad(col.header, col.width, "center") .. " ") .. bar
    divider[#divider + 1] = cell(HDIV, ("-"):rep(col.width + 2)) .. bar
  end
  lines[1], lines[2] = table.concat(header), table.concat(divider)
  for row = 1, tbl.rows do
    local parts, rgb = {bar}, row % 2 == 1 and DATA or DATA_ALT
    for _, col in ipairs(tbl.columns) do
      parts[#parts + 1] = cell(rgb, " " .. pad(col.cells[row] or "", col.width, "right") .. " ") .. bar
    end
    lines[#lines + 1] = table.concat(parts)
  end
  return table.concat(lines, "\n") .. "\n"
end

-- A state's axis value in a table: "2^16 = 65536" for a pow2 axis, a
-- float as "{:.5g}".
local function axis_cell(axis, i)
  if axis.flags == "pow2" then return ("2^%s = %d"):format(axis.inputs[i], axis.values[i]) end
  if axis.kind == "float64" then return run.fixed("%.5g", axis.values[i]) end
  return tostring(axis.values[i])
end

local function visible(s) return s.hide == nil end

-- The benchmark results ("# Benchmark Results"): per benchmark and device a
-- table of the states that ran (skipped ones are in the log only), or
-- "No data -- check log.". devices_by_id: id -> device (for the names).
function M.results_markdown(results, devices_by_id, color)
  local out = {"# Benchmark Results\n"}
  for _, res in ipairs(results) do
    out[#out + 1] = ("\n## %s\n\n"):format(res.name)
    local cpu_only = res.bench and res.bench.is_cpu_only
    local passes = {}
    if cpu_only or #(res.devices or {}) == 0 then passes[1] = false
    else for i, id in ipairs(res.devices) do passes[i] = id end end
    for _, id in ipairs(passes) do
      if id then
        local dev = devices_by_id and devices_by_id[id]
        out[#out + 1] = ("### [%d] %s\n\n"):format(id, dev and dev.name or "device")
      end
      local tbl, row = new_table(), 0
      for _, rec in ipairs(res.states) do
        if not rec.is_skipped and (not id or rec.device == id) then
          row = row + 1
          for _, axis in ipairs(rec.axes or res.axes or {}) do
            add_cell(tbl, row, axis.flags == "pow2" and axis.name or axis.name .. "_axis", axis.name,
              axis_cell(axis, rec.index[axis.name]))
          end
          for _, s in ipairs(rec.summaries or {}) do
            if visible(s) then add_cell(tbl, row, s.tag, s.name or s.tag, run.format_value(s)) end
          end
        end
      end
      local text = table_markdown(tbl, color)
      out[#out + 1] = text ~= "" and text or "No data -- check log.\n"
    end
  end
  return table.concat(out)
end

-- --- CSV ----------------------------------------------------------------------------------------

-- A CSV field: NVBench writes fields bare; cudalua quotes one that holds a
-- comma, a quote or a line break (RFC 4180), which NVBench's would split.
local function csv_field(v)
  if v:find('[,"\r\n]') then return '"' .. v:gsub('"', '""') .. '"' end
  return v
end

local CSV_UNITS = {duration = " (sec)", item_rate = " (elem/sec)", bytes = " (bytes)", byte_rate = " (bytes/sec)"}

local function csv_value(v)
  if math.type(v) == "integer" then return ("%d"):format(v) end
  if type(v) == "number" then return M.fmt_float(v) end
  return tostring(v)
end

-- One table for every benchmark (csv_printer): Benchmark, Device, Device
-- Name, the axes (a pow2 axis as "NAME (pow2)" = 2^e and NAME = value),
-- Skipped (Yes/No), then each visible summary, its name with its unit.
-- Empty when there is no state.
function M.csv(results, devices_by_id)
  local tbl, row = new_table(), 0
  for _, res in ipairs(results) do
    for _, rec in ipairs(res.states) do
      row = row + 1
      local id = device_of(rec, res.bench)
      local dev = id and devices_by_id and devices_by_id[id]
      add_cell(tbl, row, "_bench_name", "Benchmark", res.name)
      add_cell(tbl, row, "_device_id", "Device", id and tostring(id) or "")
      add_cell(tbl, row, "_device_name", "Device Name", dev and dev.name or "")
      for _, axis in ipairs(rec.axes or res.axes or {}) do
        local i = rec.index[axis.name]
        local v = axis.values[i]
        if axis.flags == "pow2" then
          add_cell(tbl, row, axis.name .. "_axis_pow2_pretty", axis.name .. " (pow2)", "2^" .. axis.inputs[i])
          add_cell(tbl, row, axis.name .. "_axis_plain", axis.name, ("%d"):format(v))
        else
          add_cell(tbl, row, axis.name .. "_axis", axis.name, csv_value(v))
        end
      end
      add_cell(tbl, row, "_skip_reason", "Skipped", rec.is_skipped and "Yes" or "No")
      if not rec.is_skipped then
        for _, s in ipairs(rec.summaries or {}) do
          if visible(s) and s.value ~= nil then
            add_cell(tbl, row, s.tag, (s.name or s.tag) .. (CSV_UNITS[s.hint] or ""), csv_value(s.value))
          end
        end
      end
    end
  end
  if #tbl.columns == 0 then return "" end
  local lines, header = {}, {}
  for i, col in ipairs(tbl.columns) do header[i] = csv_field(col.header) end
  lines[1] = table.concat(header, ",")
  for r = 1, tbl.rows do
    local cells = {}
    for i, col in ipairs(tbl.columns) do cells[i] = csv_field(col.cells[r] or "") end
    lines[#lines + 1] = table.concat(cells, ",")
  end
  return table.concat(lines, "\n") .. "\n"
end

return M
