-- cuda.results: the results every bundled script writes, in one envelope.
-- SPDX-License-Identifier: MIT
--
-- A run collects results (a name, a unit, every raw sample, summary figures
-- and the script's own fields) and writes them as JSON (--json FILE), CSV
-- (--csv FILE) or a Markdown table (--md). The JSON envelope is the same for
-- every script, so two runs can be compared (cudalua compare A.json B.json):
--
--   {schema = "cudalua-results/1", tool = {...}, environment = {...},
--    results = {{name, unit, n, median, mean, std, min, p10, p90, max, samples, ...}},
--    passed = true, details = {...the script's own figures...}}
--
--   local run = results.new("streaming_overlap", {device = dev, argv = arg})
--   run:add("sequential", "ms", stats.raw, {efficiency = 0.8})
--   run:finish(args, passed, details)   -- per args.json, args.csv, args.md
local json = require "cuda.json"
local bench = require "cuda.bench"

local M = {}

M.SCHEMA = "cudalua-results/1"

-- The columns of CSV and Markdown, after the name and unit.
local SUMMARY = {"n", "median", "mean", "std", "min", "p10", "p90", "max"}

-- --- options and descriptions --------------------------------------------------

-- The calling script's first line, without its "-- ": the line cudalua
-- --list shows, so that --help describes the script in the same words.
function M.description()
  local source = debug.getinfo(2, "S").source
  local file = source:sub(1, 1) == "@" and io.open(source:sub(2))
  local line = file and file:read("l") or ""
  if file then file:close() end
  return (line:gsub("^[-%s]+", ""))
end

local OUTPUT_OPTIONS = {
  json = function(p) p:option("--json", "Write every result to FILE as JSON (cudalua-results/1).")
    :argname("FILE") end,
  csv = function(p) p:option("--csv", "Write every result to FILE as CSV, one line each.")
    :argname("FILE") end,
  md = function(p) p:flag("--md", "After the report, print every result as a Markdown table.") end,
  -- Under mpirun or srun: rank 0 alone prints, once the options are parsed.
  mpi = function(p)
    p:flag("--verbose", "Under mpirun or srun, every rank prints its report (by default rank 0 alone does).")
    p:action(function(args) M.quiet_unless_rank0(args) end)
  end,
}

-- Adds the output options named in list ({"json", "csv", "md", "mpi"}) to parser.
function M.options(parser, list)
  for _, name in ipairs(list) do OUTPUT_OPTIONS[name](parser) end
  return parser
end

-- --- the environment -----------------------------------------------------------

local function read_line(path)
  local file = io.open(path)
  if not file then return nil end
  local line = file:read("l")
  file:close()
  return line
end

local function or_null(value)
  if value == nil then return json.null end
  return value
end

-- value of f(...) or json.null when f raises or returns nil.
local function try(f, ...)
  local ok, value = pcall(f, ...)
  return or_null(ok and value or nil)
end

-- PCIe generation by link speed in GT/s.
local PCIE_GEN = {["2.5"] = 1, ["5.0"] = 2, ["8.0"] = 3, ["16.0"] = 4, ["32.0"] = 5, ["64.0"] = 6}

-- "0000:19:00.0" as sysfs names the device: lower case, a 4-digit domain.
function M.sysfs_bus_id(bus_id)
  local domain, bus, slot, fn = tostring(bus_id):match("^(%x+):(%x+):(%x+)%.(%x+)$")
  if not domain then return nil end
  return ("%04x:%02x:%02x.%x"):format(tonumber(domain, 16), tonumber(bus, 16), tonumber(slot, 16), tonumber(fn, 16))
end

-- The PCIe link's generation and width, from sysfs (the driver has no
-- attribute for them); nil, nil where sysfs does not say.
function M.pcie_link(bus_id, sys_root)
  local id = M.sysfs_bus_id(bus_id)
  if not id then return nil, nil end
  local dir = (sys_root or "/sys") .. "/bus/pci/devices/" .. id .. "/"
  local speed = (read_line(dir .. "current_link_speed") or ""):match("^([%d.]+) GT/s")
  local width = tonumber((read_line(dir .. "current_link_width") or ""):match("^%s*(%d+)"))
  return speed and PCIE_GEN[("%.1f"):format(tonumber(speed))], width
end

local function device_environment(dev, sys_root)
  if not dev then return json.null end
  local props = dev.properties
  local bus_id = try(function() return dev.pci_bus_id end)
  local gen, width = M.pcie_link(bus_id, sys_root)
  return {
    id = dev.id, name = dev.name, arch = try(function() return dev.arch end),
    uuid = try(function() return dev.uuid end), pci_bus_id = bus_id,
    sm_clock_khz = try(function() return props.clock_rate_khz end),
    memory_clock_khz = try(function() return props.memory_clock_rate_khz end),
    multiprocessor_count = try(function() return props.multiprocessor_count end),
    total_memory = try(function() return props.total_memory end),
    pcie_link_gen = or_null(gen), pcie_link_width = or_null(width),
  }
end

-- NVRTC's version, from the header of the PTX it writes ("Cuda compilation
-- tools, release 13.0"): cuda has no call for it.
function M.nvrtc_version()
  local ok, ptx = pcall(function()
    local cuda = require "cuda"
    return cuda.Program('extern "C" __global__ void probe() {}', "c++"):compile("ptx").code
  end)
  return ok and type(ptx) == "string" and ptx:match("release (%d+%.%d+)") or nil
end

local function driver_version()
  local major, minor = require("cuda").driver_version()
  return ("%d.%d"):format(major, minor)
end

local function shell_word(word)
  word = tostring(word)
  if word:match("^[%w%-_./=:,+@%%]+$") then return word end
  return "'" .. word:gsub("'", "'\\''") .. "'"
end

-- "cudalua NAME args..." as typed (words quoted where a shell needs it).
function M.command_line(tool, argv)
  local words = {"cudalua", tool}
  for _, a in ipairs(argv or {}) do words[#words + 1] = shell_word(a) end
  return table.concat(words, " ")
end

-- The machine, the device and the software a run measured.
-- opts: device (a cuda.Device, or a table with its fields), argv, sys_root.
function M.environment(tool, opts)
  opts = opts or {}
  return {
    driver_version = try(driver_version), nvrtc_version = or_null(M.nvrtc_version()),
    device = device_environment(opts.device, opts.sys_root),
    hostname = or_null(read_line("/proc/sys/kernel/hostname") or os.getenv("HOSTNAME")),
    command_line = M.command_line(tool, opts.argv), time_utc = os.date("!%Y-%m-%dT%H:%M:%SZ"),
  }
end

-- --- a run's results --------------------------------------------------------------

local Run = {}
Run.__index = Run

-- opts: device, argv (as for M.environment), columns (extra fields of each
-- result shown in CSV and Markdown, e.g. {"efficiency"}), sys_root.
function M.new(tool, opts)
  opts = opts or {}
  return setmetatable({tool = tool, opts = opts, list = json.array{}, columns = opts.columns or {}}, Run)
end

-- {n, median, mean, std, min, p10, p90, max, samples}: samples in the order
-- given; percentiles interpolated as bench.percentile.
function M.summarize(samples)
  local stats = bench.stats(samples)
  return {n = stats.n, median = stats.median, mean = stats.mean, std = stats.std, min = stats.min,
          max = stats.max, p10 = bench.percentile(stats.samples, 10), p90 = bench.percentile(stats.samples, 90),
          samples = json.array(stats.raw)}
end

-- Adds a result: its summary from samples (a list of numbers in run order,
-- or empty when fields carry the figures), then fields, which may override
-- a summary figure with the one the script reports (not name or unit).
-- Returns the entry.
function Run:add(name, unit, samples, fields)
  local entry = #samples > 0 and M.summarize(samples) or {n = 0, samples = json.array{}}
  for key, value in pairs(fields or {}) do entry[key] = value end
  entry.name, entry.unit = name, unit
  assert(type(entry.median) == "number", "results: a result needs samples or a median")
  self.list[#self.list + 1] = entry
  return entry
end

-- Whether every result that carries a verdict (a field verified) passed.
function Run:verified()
  for _, entry in ipairs(self.list) do
    if entry.verified == false then return false end
  end
  return true
end

-- The JSON envelope; details: the script's own figures.
function Run:envelope(passed, details)
  return {
    schema = M.SCHEMA, passed = passed and true or false, results = self.list, details = or_null(details),
    tool = {name = "cudalua", version = require("cuda").version, lua = _VERSION, script = self.tool},
    environment = M.environment(self.tool, self.opts),
  }
end

local function all_columns(run)
  local columns = {"name", "unit"}
  for _, list in ipairs{SUMMARY, run.columns} do table.move(list, 1, #list, #columns + 1, columns) end
  return columns
end

-- RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled.
function M.csv_field(value)
  if value == nil or value == json.null then return "" end
  local text = type(value) == "number" and json.encode(value) or tostring(value)
  if text:find('[,"\r\n]') then return '"' .. text:gsub('"', '""') .. '"' end
  return text
end

-- The results as CSV: a header line, then a line per result, its samples
-- last, separated by spaces.
function Run:csv()
  local columns, lines = all_columns(self), {}
  lines[1] = table.concat(columns, ",") .. ",samples"
  for _, entry in ipairs(self.list) do
    local fields, samples = {}, {}
    for i, key in ipairs(columns) do fields[i] = M.csv_field(entry[key]) end
    for i, x in ipairs(entry.samples) do samples[i] = json.encode(x) end
    lines[#lines + 1] = table.concat(fields, ",") .. "," .. table.concat(samples, " ")
  end
  return table.concat(lines, "\r\n") .. "\r\n"
end

-- Four significant digits; integers whole; large numbers without exponent.
function M.format_number(x)
  if math.type(x) == "integer" then return tostring(x) end
  if x ~= x or math.abs(x) == math.huge then return tostring(x) end
  return math.abs(x) >= 1e4 and ("%.0f"):format(x) or ("%.4g"):format(x)
end

local function markdown_cell(value)
  if type(value) == "number" then return M.format_number(value), true end
  if value == nil or value == json.null then return "", false end
  return (tostring(value):gsub("|", "\\|"):gsub("[\r\n]", " ")), false
end

local function pad(text, width, right)
  local gap = (" "):rep(width - (utf8.len(text) or #text))
  return right and gap .. text or text .. gap
end

-- rows (tables keyed by column) as a Markdown table: text left-aligned,
-- numbers right-aligned, every cell padded so the source reads as a table too.
function M.markdown_table(columns, rows)
  local cells, widths, numeric = {}, {}, {}
  for c, key in ipairs(columns) do widths[c] = math.max(#key, 3) end
  for r, entry in ipairs(rows) do
    cells[r] = {}
    for c, key in ipairs(columns) do
      local text, is_number = markdown_cell(entry[key])
      cells[r][c], widths[c] = text, math.max(widths[c], utf8.len(text) or #text)
      numeric[c] = numeric[c] or is_number
    end
  end
  local function line(row) return "| " .. table.concat(row, " | ") .. " |" end
  local header, rule = {}, {}
  for c, key in ipairs(columns) do
    header[c] = pad(key, widths[c], numeric[c])
    rule[c] = numeric[c] and ("-"):rep(widths[c] - 1) .. ":" or ":" .. ("-"):rep(widths[c] - 1)
  end
  local lines = {line(header), line(rule)}
  for r, row in ipairs(cells) do
    local padded = {}
    for c, text in ipairs(row) do padded[c] = pad(text, widths[c], numeric[c]) end
    lines[r + 2] = line(padded)
  end
  return table.concat(lines, "\n") .. "\n"
end

-- The results as a Markdown table.
function Run:markdown()
  return M.markdown_table(all_columns(self), self.list)
end

-- Writes text to path (CSV, SVG); an error names the file.
function M.write_text(path, text)
  local file <close>, why = io.open(path, "w")
  if not file then error(("cannot write %s: %s"):format(path, why), 0) end
  assert(file:write(text))
end

-- The process' peak resident memory in MB (Linux), or nil.
function M.peak_rss_mb()
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmHWM:%s+(%d+)")
    if kb then return tonumber(kb) / 1024 end
  end
end

-- Writes what args asks for: args.json (the envelope), args.csv, and, on
-- stdout after the report, args.md's table. In an MPI job of several ranks
-- every rank calls it, and rank 0 reports for all (Run:finish_ranks).
function Run:finish(args, passed, details)
  local mpi = M.mpi_job()
  if mpi then return self:finish_ranks(mpi, args, passed, details) end
  if args.json then json.write_file(args.json, self:envelope(passed, details), {indent = 2}) end
  if args.csv then M.write_text(args.csv, self:csv()) end
  if args.md then io.stdout:write("\n", self:markdown()) end
end

-- --- across the ranks of an MPI job -------------------------------------------------
-- Under mpirun or srun every rank runs the whole script on its own GPU, and
-- rank 0 reports for them all: one table, one JSON file. A process is one
-- rank of several when cuda.mpi is loaded and says so, or when a launcher's
-- variable does (then cuda.mpi is loaded here, which starts MPI; in a build
-- without MPI each rank reports alone, as before).

-- Launchers' variables for the job's number of processes.
local SIZE_VARIABLES = {"OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}

-- The number of processes a launcher says the job has, and the variable; nil
-- outside a launcher. getenv: os.getenv, or a stand-in (tests).
function M.launcher_size(getenv)
  getenv = getenv or os.getenv
  for _, name in ipairs(SIZE_VARIABLES) do
    local n = math.tointeger(tonumber(getenv(name) or ""))
    if n and n > 0 then return n, name end
  end
end

-- cuda.mpi when this process is one rank of several, else nil.
function M.mpi_job()
  local mpi = package.loaded["cuda.mpi"]
  if not mpi and (M.launcher_size() or 1) > 1 then
    local found, loaded = pcall(require, "cuda.mpi")
    mpi = found and loaded or nil
  end
  return mpi and mpi.size > 1 and mpi or nil
end

-- Silences standard output (print, io.write, io.stdout) on the ranks other
-- than 0 of an MPI job, unless args.verbose; stderr stays. Returns whether
-- it did.
function M.quiet_unless_rank0(args)
  local mpi = M.mpi_job()
  if not mpi or mpi.rank == 0 or args.verbose then return false end
  local null = assert(io.open("/dev/null", "w"))
  _G.print = function() end
  io.output(null)
  io.stdout = null
  return true
end

-- Whether larger is better for a figure in unit: rates ("GB/s"), not times.
local function is_rate(unit)
  return tostring(unit):find("/s$") ~= nil
end

local function gpu_label(env)
  local device = env.environment.device
  local gpu = type(device) == "table" and (" GPU " .. tostring(device.id)) or ""
  return ("%s%s (rank %d)"):format(env.host, gpu, env.rank)
end

-- Each figure (name and unit) across the ranks' envelopes, in the order
-- first seen: the summary of every GPU's median (samples: one a rank, in
-- rank order), its spread ((max - min) / median), the slowest GPU, and
-- verified where the ranks' results carry it (true when every one is).
-- Counts on each envelope (slowest_in) how many figures it was slowest in.
function M.across(ranks)
  local order, by_key = {}, {}
  for _, env in ipairs(ranks) do
    env.slowest_in = 0
    for _, r in ipairs(env.results) do
      local key = r.name .. "\0" .. tostring(r.unit)
      if not by_key[key] then by_key[key] = {name = r.name, unit = r.unit, medians = {}, envs = {}}; order[#order + 1] = key end
      local figure = by_key[key]
      figure.medians[#figure.medians + 1], figure.envs[#figure.envs + 1] = r.median, env
      if type(r.verified) == "boolean" then figure.verified = figure.verified ~= false and r.verified end
    end
  end
  local list = json.array{}
  for _, key in ipairs(order) do
    local figure, rate = by_key[key], is_rate(by_key[key].unit)
    local entry, slowest = M.summarize(figure.medians), 1
    for i, m in ipairs(figure.medians) do
      if (rate and m < figure.medians[slowest]) or (not rate and m > figure.medians[slowest]) then slowest = i end
    end
    local env = figure.envs[slowest]
    env.slowest_in = env.slowest_in + 1
    entry.name, entry.unit, entry.slowest, entry.verified = figure.name, figure.unit, gpu_label(env), figure.verified
    entry.spread = entry.median ~= 0 and (entry.max - entry.min) / math.abs(entry.median) or 0
    list[#list + 1] = entry
  end
  return list
end

-- The number of distinct GPUs (host and device) the ranks ran on.
function M.gpu_count(ranks)
  local seen, n = {}, 0
  for _, env in ipairs(ranks) do
    local device = env.environment.device
    local key = env.host .. "\0" .. tostring(type(device) == "table" and (device.uuid ~= json.null and device.uuid or device.id))
    if not seen[key] then seen[key], n = true, n + 1 end
  end
  return n
end

-- One line a rank: host, GPU, whether it passed, how often it was slowest.
function M.ranks_table(ranks)
  local rows = {}
  for i, env in ipairs(ranks) do
    local device = type(env.environment.device) == "table" and env.environment.device or {}
    rows[i] = {rank = env.rank, host = env.host, gpu = device.id, name = device.name,
               passed = env.passed and "yes" or "NO", slowest_in = env.slowest_in}
  end
  return M.markdown_table({"rank", "host", "gpu", "name", "passed", "slowest_in"}, rows)
end

-- Every rank's envelope to rank 0 as JSON text (a Lua table sent as it is
-- would lose json's arrays and nulls); rank 0 prints the ranks and the
-- figures across them, and writes args.json (results: the figures across
-- GPUs; ranks: every rank's own envelope, tagged rank and host) and
-- args.csv (the figures across GPUs). Every rank waits for rank 0 to be done,
-- so that a rank that then exits with an error cannot end the job first.
function Run:finish_ranks(mpi, args, passed, details)
  local mine = self:envelope(passed, details)
  mine.rank, mine.host = mpi.rank, mpi.hostname
  local texts = mpi.gather(json.encode(mine), 0)
  if mpi.rank == 0 then
    local ranks, all_passed = {}, true
    for i, text in ipairs(texts) do
      ranks[i] = json.decode(text)
      all_passed = all_passed and ranks[i].passed
    end
    local across = setmetatable({tool = self.tool, opts = self.opts, list = M.across(ranks),
                                 columns = {"spread", "slowest"}}, Run)
    local gpus = M.gpu_count(ranks)
    io.stdout:write(("\n--- Across %d ranks on %d GPU%s: every figure's median on each GPU ---\n")
      :format(#ranks, gpus, gpus == 1 and "" or "s"), M.ranks_table(ranks), "\n", across:markdown())
    local envelope = across:envelope(all_passed, details)
    for _, env in ipairs(ranks) do env.slowest_in = nil end
    envelope.ranks, envelope.environment.mpi = ranks, {size = mpi.size, staging = mpi.staging}
    if args.json then json.write_file(args.json, envelope, {indent = 2}) end
    if args.csv then M.write_text(args.csv, across:csv()) end
  end
  io.stdout:flush()   -- a rank that exits with an error aborts the job before exit() would flush
  mpi.barrier()
end

-- --- reading ---------------------------------------------------------------------

-- Reads a results file; returns the envelope, or nil and why it is not one.
function M.read(path)
  local file, why = io.open(path)
  if not file then return nil, why end
  local text = file:read("a")
  file:close()
  local ok, doc = pcall(json.decode, text)
  if not ok then return nil, ("%s: not JSON (%s)"):format(path, (tostring(doc):gsub("^.-:%d+: ", ""))) end
  if type(doc) ~= "table" or type(doc.schema) ~= "string" or not doc.schema:match("^cudalua%-results/1$") then
    return nil, ("%s: not a cudalua results file (no schema \"%s\")"):format(path, M.SCHEMA)
  end
  if type(doc.results) ~= "table" then return nil, ("%s: no results list"):format(path) end
  for i, r in ipairs(doc.results) do
    if type(r) ~= "table" or type(r.name) ~= "string" or type(r.median) ~= "number" then
      return nil, ("%s: result %d has no name or no median"):format(path, i)
    end
  end
  return doc
end

return M
