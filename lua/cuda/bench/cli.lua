-- cuda.bench.cli: the command line of `cudalua bench FILE.lua` (NVBench's options).
-- SPDX-License-Identifier: MIT
--
-- The options are cuda-bench 0.3.0's (NVBench's docs/cli_help.md), with
-- their meaning: a benchmark's settings given before any -b apply to every
-- benchmark; each -b starts a configuration of its own (a copy of the
-- benchmark, as NVBench clones it) that the later settings change alone, so
-- the same benchmark may run twice with different settings. The printers
-- (--md, --csv, --json, --jsonbin, -q, --color) apply to the whole run.
-- The markdown document (devices, the log as it happens, the results) goes
-- to stdout unless -q, and to each --md target. What cudalua does not do
-- (--persistence-mode, --lock-gpu-clocks) is refused with a sentence.
local cli = require "cuda.cli"
local harness = require "cuda.bench.harness"
local criteria = require "cuda.bench.criteria"
local axes_mod = require "cuda.bench.axes"
local runner = require "cuda.bench.run"
local output = require "cuda.bench.output"

local M = {}

-- --- option values ------------------------------------------------------------------

-- A number as NVBench's std::stod reads it, "inf" and "1e999" too; nil, why.
local function number(text)
  local v = tonumber(text)
  local word = text:lower():gsub("%s", "")
  if v == nil and (word:match("^%+?inf$") or word:match("^%+?infinity$")) then v = math.huge end
  if v == nil and (word:match("^%-inf$") or word:match("^%-infinity$")) then v = -math.huge end
  if v == nil or v ~= v then return nil, ("'%s' is not a number"):format(text) end
  return v + 0.0
end

local function checked(test, what)
  return function(text)
    local v, why = number(text)
    if v == nil then return nil, why end
    if not test(v) then return nil, ("'%s' is not %s"):format(text, what) end
    return v
  end
end

local function integer_at_least(least)
  return function(text)
    local v = math.tointeger(tonumber(text))
    if not v or v < least then return nil, ("'%s' is not an integer >= %d"):format(text, least) end
    return v
  end
end

local FINITE = function(v) return v > -math.huge and v < math.huge end
local any_number = checked(function() return true end, "a number")
local seconds = checked(function(v) return v >= 0 end, "a number of seconds >= 0")
local finite_seconds = checked(function(v) return v >= 0 and FINITE(v) end, "a finite number of seconds >= 0")
local positive_seconds = checked(function(v) return v > 0 and FINITE(v) end, "finite and positive")
local percentage = checked(function(v) return v >= 0 and FINITE(v) end, "a percentage >= 0")
local finite_number = checked(FINITE, "a finite number")
-- The L2 flush: a multiple of the L2 size; its byte count must stay an integer.
local MAX_L2_FLUSH = 1024
local l2_factor = checked(function(v) return v >= 0 and v <= MAX_L2_FLUSH end,
  ("a multiple of the L2 size in 0..%d"):format(MAX_L2_FLUSH))

-- --- the parser ----------------------------------------------------------------------

-- Every option, in order. scope: "query" (prints, exits 0), "output" (the
-- run's printers), "run" (the whole run), "bench" (the latest -b, or all
-- benchmarks before any -b), "select" (-b), "refused".
M.OPTIONS = {
  {"--help-axes --help-axis", nil, "query", "Print the axis specification help (-a) and exit."},
  {"--version", nil, "query", "Print the version and exit."},
  {"-l --list", nil, "query", "List the devices and benchmarks (their axes and values) and exit."},
  {"--jsonlist-benches", nil, "query", "Print the benchmarks and their axes as JSON and exit."},
  {"--jsonlist-devices", nil, "query", "Print the devices as JSON and exit."},
  {"--persistence-mode --pm", "STATE", "refused", "NVBench's device setting (root): refused, use nvidia-smi -pm."},
  {"--lock-gpu-clocks --lgc", "RATE", "refused", "NVBench's device setting (root): refused, use nvidia-smi -lgc."},
  {"--csv", "FILE", "output", "Write CSV to FILE (or stdout, stderr); repeatable."},
  {"--json", "FILE", "output", "Write NVBench JSON to FILE (or stdout, stderr); repeatable."},
  {"--jsonbin", "FILE", "output", "As --json, and the samples as float32 files in FILE-bin/ (a file path)."},
  {"--markdown --md", "FILE", "output", "Write the markdown document (devices, log, results) to FILE too."},
  {"-q --quiet", nil, "output", "No markdown document on stdout (the log and results go to --md targets only)."},
  {"--color", nil, "output", "Colour the stdout markdown (also NVBENCH_COLOR=1)."},
  {"--svg", "DIR", "output", "cudalua's: draw each benchmark's times against its axes and each state's sample " ..
    "histogram as SVG files in DIR (made if need be)."},
  {"-b --benchmark", "NAME", "select", "Run this benchmark (name or index from --list); each -b is a configuration " ..
    "of its own: the settings after it apply to it alone, those before any -b to all. Repeatable."},
  {"-a --axis", "SPEC", "bench", "Override an axis: 'Name=v', 'Name=[v1,v2]', 'Name=[start:stop:step]', " ..
    "'Bytes[pow2]=[16:28:4]' (exponents); see --help-axes."},
  {"-d --devices --device", "IDS", "bench", "Devices to run on: all (the default), an id, 0,1, [0,1] or [0:1]."},
  {"--skip-time", "SECONDS", "bench", "Skip a state whose warm-up ran less GPU time than this (default -1: off)."},
  {"--cold-warmup-runs", "N", "bench", "Warm-up runs before the cold samples (at least 1, the default)."},
  {"--cold-max-warmup-walltime", "SECONDS", "bench", "Stop the warm-up once it took this long (default -1: off)."},
  {"--throttle-threshold", "PERCENT", "bench", "Discard samples below this percentage of the SM clock (default 75; 0: off)."},
  {"--throttle-recovery-delay", "SECONDS", "bench", "Pause after a throttled sample (default 0.05)."},
  {"--profile", nil, "bench", "For profilers: one sample per state, no warm-up, no batch, no blocking kernel."},
  {"--no-batch", nil, "bench", "No batch measurement."},
  {"--batch-target-time", "SECONDS", "bench", "GPU time a batch measurement accumulates (default 0.5; finite, > 0)."},
  {"--timeout", "SECONDS", "bench", "Seconds per measurement at most, wall time (default 15)."},
  {"--min-samples", "N", "bench", "Least number of samples per measurement (default 10)."},
  {"--stopping-criterion", "NAME", "bench", "stdrel (the default), entropy, sample-count (also sample_count) or " ..
    "cudalua's ci."},
  {"--min-time", "SECONDS", "bench", "stdrel: least seconds of GPU time before stopping (default 0.5)."},
  {"--max-noise", "PERCENT", "bench", "stdrel: stop when the noise is at most this percentage (default 0.5)."},
  {"--max-angle", "DEGREES", "bench", "entropy: the largest slope of the entropy's regression line (default 0.048)."},
  {"--min-r2", "VALUE", "bench", "entropy: the least R^2 of that regression (default 0.36)."},
  {"--target-samples", "N", "bench", "sample-count: the number of samples (default 100)."},
  {"--max-width", "PERCENT", "bench", "ci (cudalua's): stop when the confidence interval of the mean is within this " ..
    "percentage of it either side (default 0.5)."},
  {"--confidence", "PERCENT", "bench", "ci: the interval's confidence (default 95; between 0 and 100)."},
  {"--run-once", nil, "bench", "cudalua's: one sample per state, no warm-up, no batch."},
  {"--disable-blocking-kernel", nil, "bench", "cudalua's: queue the work without holding the stream."},
  {"--l2-flush", "FACTOR", "run", ("cudalua's: bytes written before each cold sample, in L2 sizes (default 2; " ..
    "NVBench writes 1; 0: no flush; at most %d)."):format(MAX_L2_FLUSH)},
}

-- The option of each target name (argparse's: the first long alias).
local by_target = {}
for _, o in ipairs(M.OPTIONS) do
  local long = o[1]:match("%-%-([%w-]+)")
  o.target, o.scope, o.arg, o.long = long:gsub("-", "_"), o[3], o[2], "--" .. long
  o.names = {}
  for name in o[1]:gmatch("%S+") do o.names[#o.names + 1] = name end
  by_target[o.target] = o
end

-- The options that take a value, by every spelling: NVBench reads the next
-- argument whatever it is ("--skip-time -1"); argparse would take "-1"
-- for an option, so the pair is joined before it parses.
local takes_value = {}
for _, o in ipairs(M.OPTIONS) do
  if o.arg then for _, name in ipairs(o.names) do takes_value[name] = true end end
end

local function join_values(argv)
  local out, i = {}, 1
  while i <= #argv do
    local a = argv[i]
    if takes_value[a] and argv[i + 1] ~= nil then
      out[#out + 1] = a:sub(1, 2) == "--" and (a .. "=" .. argv[i + 1]) or (a .. argv[i + 1])
      i = i + 2
    else
      out[#out + 1] = a
      i = i + 1
    end
  end
  return out
end

-- Every option keeps its place: the parse result's events list is the
-- options in the order given, {target, value}.
local function record(args, target, value)
  args.events = args.events or {}
  args.events[#args.events + 1] = {target = target, value = value}
end

function M.options(parser)
  for _, o in ipairs(M.OPTIONS) do
    local element = o.arg and parser:option(o[1], o[4]):argname(o.arg) or parser:flag(o[1], o[4])
    element:count("*"):action(record)
  end
end

-- The parser: with a file argument for `cudalua bench FILE.lua`, without
-- one for a benchmark file run directly (`cudalua bench_example`).
function M.parser(name, description, with_file)
  local parser = cli.parser(name, description)
    :usage(with_file and ("Usage: cudalua %s FILE.lua [options]"):format(name) or ("Usage: cudalua %s [options]"):format(name))
  if with_file then parser:argument("file", "The Lua file that registers the benchmarks.") end
  M.options(parser)
  return parser
end

-- --- help texts ------------------------------------------------------------------------

M.AXIS_HELP = [[
# Axis Specification

The `--axis <axis spec>` (`-a`) option redefines the values of a benchmark's
axis. It applies to the benchmark of the most recent `--benchmark` (`-b`), or
to every benchmark when it comes before any `--benchmark`.

Valid axis specifications:

* `<axis_name>=<value>`
* `<axis_name>=[<value1>,<value2>,...]`
* `<axis_name>=[<start>:<stop>]`
* `<axis_name>=[<start>:<stop>:<stride>]`
* `<axis_name>[<flags>]=<value>` (and the forms above with flags)

The axis type is the benchmark's:

* int64 axes: a value, a list or a strided range; `[pow2]` after the name
  gives the values as exponents (`-a Bytes[pow2]=[16:28:4]`).
* float64 axes: a value, a list or a strided range.
* string axes: a value or a list.
* type axes: a value or a list of the benchmark's own types.

Quote the argument when it holds spaces or brackets.
]]

local function version_text()
  return ("cudalua bench v%s (NVBench-compatible: cuda-bench 0.3.0's options and output, JSON 1.0.0)"):format(
    require("cuda").version or "?")
end

-- --- devices ------------------------------------------------------------------------------

-- The largest id a range may reach where no device is known.
local MAX_DEVICE_ID = 1023

-- "all", "1", "0,1", "[0,1]", "[0:2]" or "[0:4:2]" -> a list of ids; nil, why.
function M.device_ids(text, count)
  if text == "all" then
    local ids = {}
    for i = 0, count - 1 do ids[#ids + 1] = i end
    return ids
  end
  local inner = text:match("^%s*%[(.*)%]%s*$") or text
  local ids = {}
  local function id(item)
    local n = math.tointeger(tonumber(item))
    if not n or n < 0 or not item:match("^%s*%d+%s*$") then
      return nil, ("'%s' is not a device id (all, an id, 0,1, [0,1] or [0:1])"):format(item)
    end
    return n
  end
  local a, b, c = inner:match("^([^:]*):([^:]*):?([^:]*)$")
  if a then
    local first, why = id(a)
    if not first then return nil, why end
    local last, why2 = id(b)
    if not last then return nil, why2 end
    local step = c ~= "" and math.tointeger(tonumber(c)) or 1
    if not step or step < 1 then return nil, ("'%s' is not a stride (an integer >= 1)"):format(c) end
    local limit = count > 0 and count - 1 or MAX_DEVICE_ID
    if last > limit then return nil, ("no device %d (%d found)"):format(last, count) end
    for i = first, last, step do ids[#ids + 1] = i end
  else
    for item in (inner .. ","):gmatch("(.-),") do
      local n, why = id(item)
      if not n then return nil, why end
      ids[#ids + 1] = n
    end
  end
  if #ids == 0 then return nil, "no device id" end
  for _, n in ipairs(ids) do
    if count > 0 and n >= count then return nil, ("no device %d (%d found)"):format(n, count) end
  end
  return ids
end

-- --- configurations: NVBench's per -b settings ------------------------------------------------

-- A copy of a benchmark, as NVBench's -b clones one: the settings of one
-- configuration change the copy only. Tables the setters change are copied.
local function clone(b)
  b.kernel_cache = b.kernel_cache or {}   -- the copies share the compiled kernels
  local copy = {}
  for k, v in pairs(b) do copy[k] = v end
  for _, key in ipairs{"axes", "zips"} do
    if type(b[key]) == "table" then copy[key] = table.move(b[key], 1, #b[key], 1, {}) end
  end
  if type(b.criterion_params) == "table" then
    copy.criterion_params = {}
    for k, v in pairs(b.criterion_params) do copy.criterion_params[k] = v end
  end
  return setmetatable(copy, getmetatable(b))
end

-- The criterion a name means: "sample-count" and "sample_count" are one.
local function criterion_named(name)
  if criteria.PARAMS[name] then return name end
  local other = name:find("-", 1, true) and name:gsub("-", "_") or name:gsub("_", "-")
  if criteria.PARAMS[other] then return other end
  return nil
end

-- The criterion parameter an option sets, by the criterion's own name for it
-- (the sample count criterion calls it target-samples or sample-count).
local CRITERION_OPTIONS = {max_noise = "max-noise", min_time = "min-time", max_angle = "max-angle", min_r2 = "min-r2",
  target_samples = "target-samples", max_width = "max-width", confidence = "confidence"}
-- the options given in percent, the parameters in fractions
local PERCENT_OPTIONS = {max_noise = true, max_width = true, confidence = true}

local function criterion_param(crit, option)
  local params = criteria.PARAMS[crit] or {}
  local key = CRITERION_OPTIONS[option]
  if params[key] ~= nil then return key end
  if key == "target-samples" and params["sample-count"] ~= nil then return "sample-count" end
  return nil
end

local function accepted(crit)
  local list = {}
  for opt, key in pairs(CRITERION_OPTIONS) do
    if criterion_param(crit, opt) then list[#list + 1] = "--" .. key end
  end
  table.sort(list)
  return #list > 0 and table.concat(list, ", ") or "no parameters"
end

local VALUE_OF = {
  skip_time = any_number, cold_warmup_runs = integer_at_least(1), cold_max_warmup_walltime = any_number,
  throttle_threshold = percentage, throttle_recovery_delay = finite_seconds, batch_target_time = positive_seconds,
  timeout = seconds, min_samples = integer_at_least(1), min_time = finite_seconds, max_noise = percentage,
  max_angle = finite_number, min_r2 = finite_number, target_samples = integer_at_least(1), l2_flush = l2_factor,
  max_width = checked(function(v) return v > 0 and FINITE(v) end, "a percentage > 0"),
  confidence = checked(function(v) return v > 0 and v < 100 end, "a percentage between 0 and 100"),
}

local SETTER = {
  skip_time = "set_skip_time", cold_warmup_runs = "set_cold_warmup_runs",
  cold_max_warmup_walltime = "set_cold_max_warmup_walltime", throttle_recovery_delay = "set_throttle_recovery_delay",
  batch_target_time = "set_batch_target_time", timeout = "set_timeout", min_samples = "set_min_samples",
}

-- Sets what option t says, with its value v, on a configuration and its
-- benchmark copy b; returns nil, why when the value does not fit.
local function set(conf, b, t, v, device_count)
  if SETTER[t] then b[SETTER[t]](b, v)
  elseif t == "throttle_threshold" then b:set_throttle_threshold(v / 100)
  elseif t == "axis" then conf.axes[#conf.axes + 1] = v
  elseif t == "devices" then
    local ids, why = M.device_ids(v, device_count)
    if not ids then return nil, why end
    conf.device_ids = ids
  elseif t == "profile" then b:set_run_once(true); b:set_disable_blocking_kernel(true)
  elseif t == "run_once" then b:set_run_once(true)
  elseif t == "disable_blocking_kernel" then b:set_disable_blocking_kernel(true)
  elseif t == "no_batch" then
    if b.set_skip_batched then b:set_skip_batched(true) else b.skip_batched = true end
  elseif t == "stopping_criterion" then
    local crit = criterion_named(v)
    if not crit then return nil, "unknown stopping criterion (known: stdrel, entropy, sample-count, ci)" end
    b:set_stopping_criterion(crit)
  elseif CRITERION_OPTIONS[t] then
    local crit = b.criterion or "stdrel"
    local key = criterion_param(crit, t)
    if not key then return nil, ("not valid for the active stopping criterion '%s' (it accepts %s)"):format(crit, accepted(crit)) end
    if PERCENT_OPTIONS[t] then v = v / 100 end
    if math.type(v) == "integer" then b:set_criterion_param_int64(key, v) else b:set_criterion_param_float64(key, v) end
  end
  return true
end

-- Applies one setting to a configuration; raises a message naming the
-- option and its value ("--timeout soon: 'soon' is not a number").
local function apply(conf, ev, device_count)
  local function fail(why) error(("%s %s: %s"):format(by_target[ev.target].long, tostring(ev.value), why), 0) end
  local v, why = ev.value, nil
  if VALUE_OF[ev.target] then
    v, why = VALUE_OF[ev.target](ev.value)
    if v == nil then fail(why) end
  end
  local ok, done, why2 = pcall(set, conf, conf.bench, ev.target, v, device_count)
  if not ok then fail((tostring(done):gsub("^[^:]*:%d+: ", ""))) end
  if not done then fail(why2) end
end

-- The configurations the options ask for: {bench (a copy), axes (-a
-- specs), device_ids}. NVBench's rule: settings before any -b apply to
-- every configuration; each -b starts one, and the settings after it change it.
function M.configurations(events, benchmarks, device_count)
  local global, confs = {}, {}
  local function new_conf(b)
    local conf = {bench = clone(b), axes = {}}
    for _, ev in ipairs(global) do apply(conf, ev, device_count) end
    confs[#confs + 1] = conf
    return conf
  end
  for _, ev in ipairs(events) do
    local o = by_target[ev.target]
    if o.scope == "select" then
      local want, found = ev.value, nil
      local index = math.tointeger(tonumber(want))
      if index and index >= 0 and want:match("^%s*%d+%s*$") then found = benchmarks[index + 1] end
      if not found then
        for _, b in ipairs(benchmarks) do if b.name == want then found = b; break end end
      end
      if not found then error(("-b %s: no such benchmark (see --list)"):format(want), 0) end
      new_conf(found)
    elseif o.scope == "bench" then
      if #confs == 0 then global[#global + 1] = ev else apply(confs[#confs], ev, device_count) end
    end
  end
  if #confs == 0 then
    for _, b in ipairs(benchmarks) do new_conf(b) end
  end
  return confs
end

-- --- printers ------------------------------------------------------------------------------

local STREAMS = {stdout = io.stdout, stderr = io.stderr}

-- The printers the options ask for, in their order, each checked before
-- anything runs: {kind = "markdown" | "csv" | "json", spec, bin, color};
-- NVBench's default markdown printer on stdout comes last, unless -q or
-- another printer writes to stdout.
local function printers(events, die)
  local list, quiet, stdout_taken, l2_flush = {}, false, false, nil
  local color = (os.getenv("NVBENCH_COLOR") or ""):sub(1, 1) == "1"
  local function add(kind, option, spec, bin)
    if STREAMS[spec] then
      if bin then die(("--jsonbin requires a file path; '%s' is a stream destination."):format(spec), 2) end
      stdout_taken = stdout_taken or spec == "stdout"
    else
      local ok, why = require("cuda.json").can_write(spec)
      if not ok then die(("%s %s: %s"):format(option, spec, why), 2) end
    end
    list[#list + 1] = {kind = kind, spec = spec, bin = bin, option = option}
  end
  for _, ev in ipairs(events) do
    local t, v = ev.target, ev.value
    if t == "quiet" then quiet = true
    elseif t == "color" then color = true
    elseif t == "markdown" then add("markdown", "--md", v)
    elseif t == "csv" then add("csv", "--csv", v)
    elseif t == "json" then add("json", "--json", v)
    elseif t == "jsonbin" then add("json", "--jsonbin", v, true)
    elseif t == "svg" then
      local ok, why = require("cuda.bench.svg").can_write(v)
      if not ok then die(("--svg %s: %s"):format(v, why), 2) end
      list[#list + 1] = {kind = "svg", spec = v, option = "--svg"}
    elseif t == "l2_flush" then
      local f, why = l2_factor(v)
      if not f then die(("--l2-flush %s: %s"):format(v, why), 2) end
      l2_flush = f
    end
  end
  if not (quiet or stdout_taken) then list[#list + 1] = {kind = "markdown", spec = "stdout", option = "--md"} end
  for _, pr in ipairs(list) do pr.color = color and pr.kind == "markdown" and pr.spec == "stdout" end
  return list, l2_flush
end

-- CUDALUA_BENCH_L2_BYTES: an L2 size in bytes that stays an exact integer.
local MAX_L2_BYTES = 1 << 40
local function l2_bytes_from_env(die)
  local text = os.getenv("CUDALUA_BENCH_L2_BYTES")
  if text == nil or text == "" then return nil end
  local n = math.tointeger(tonumber(text))
  if not n or n < 0 or n > MAX_L2_BYTES then
    die(("CUDALUA_BENCH_L2_BYTES=%s: not a byte count (an integer in 0..%d)"):format(text, MAX_L2_BYTES), 2)
  end
  return n
end

local function open_stream(spec)
  if STREAMS[spec] then return STREAMS[spec] end
  return assert(io.open(spec, "w"))
end

-- --- main -----------------------------------------------------------------------------------

local function load_benchmarks(file, die)
  local count_before = #harness.registry
  local chunk, why = loadfile(file)
  if not chunk then die(why, 2) end
  harness.loading = true
  local ok, err = pcall(chunk)
  harness.loading = false
  if not ok then die(("%s: %s"):format(file, tostring(err))) end
  return table.move(harness.registry, count_before + 1, #harness.registry, 1, {})
end

local function all_devices()
  local cuda = require "cuda"
  local ok, n = pcall(cuda.device_count)
  local list = {}
  for i = 0, (ok and n or 0) - 1 do list[#list + 1] = cuda.Device(i) end
  return list
end

local function count_configs(b)
  local ok, states = pcall(axes_mod.states, b.axes, b.zips, b.space)
  return ok and #states or 0
end

-- Runs a query option and exits 0 (NVBench's --list and the like).
local function query(q, benchmarks)
  if q == "version" then print(version_text())
  elseif q == "help_axes" then io.stdout:write(M.AXIS_HELP)
  elseif q == "list" then io.stdout:write(output.list_markdown(benchmarks, all_devices(), count_configs))
  elseif q == "jsonlist_benches" then io.stdout:write(output.benchmarks_list_json(benchmarks))
  elseif q == "jsonlist_devices" then io.stdout:write(output.devices_list_json(all_devices())) end
  io.stdout:flush()
  os.exit(0)
end

-- Parses argv and runs: the benchmarks of args.file, or registered (a
-- list) when a benchmark file runs itself. name and description: the
-- command's, for --help.
function M.main(argv_in, name, description, registered)
  local parser = M.parser(name, description, registered == nil)
  local args = cli.parse(parser, join_values(argv_in))
  local events = args.events or {}
  local function die(text, status)
    io.stderr:write("bench: ", text, "\n")
    io.stderr:flush()
    os.exit(status or 1)
  end

  local first_query
  for _, ev in ipairs(events) do
    local o = by_target[ev.target]
    if o.scope == "refused" then
      die(("%s: cudalua does not change device settings (NVBench does, as root); use nvidia-smi instead"):format(
        o.names[1]), 2)
    end
    if o.scope == "query" and not first_query then first_query = ev.target end
  end
  if first_query == "version" or first_query == "help_axes" then query(first_query, {}) end
  local list, l2_flush = printers(events, die)
  local l2 = l2_bytes_from_env(die)

  local benchmarks = registered or load_benchmarks(args.file, die)
  if first_query then query(first_query, benchmarks) end
  if #benchmarks == 0 then die(("%s registers no benchmark (bench.register(fn))"):format(args.file or name), 2) end

  local devices = all_devices()
  local ok, confs = pcall(M.configurations, events, benchmarks, #devices)
  if not ok then die(tostring(confs), 2) end

  local gpu_work = false
  for _, c in ipairs(confs) do gpu_work = gpu_work or not c.bench.is_cpu_only end
  if #devices == 0 and gpu_work then
    local _, why = require("cuda").is_available()
    die(("no CUDA device to run on (%s); only cpu-only benchmarks can run without one"):format(tostring(why)), 2)
  end

  -- the plan: each configuration's own axes and devices
  local plan, used = {}, {}
  for _, c in ipairs(confs) do
    local devs = {}
    for _, id in ipairs(c.device_ids or {}) do devs[#devs + 1] = devices[id + 1] end
    if not c.device_ids then devs = table.move(devices, 1, #devices, 1, {}) end
    local okp, part = pcall(runner.plan, {c.bench}, c.axes, devs)
    if not okp then die(tostring(part), 2) end
    for _, entry in ipairs(part) do plan[#plan + 1] = entry end
    if not c.bench.is_cpu_only then for _, d in ipairs(devs) do used[d.id] = d end end
  end
  local used_list = {}
  for _, dev in ipairs(devices) do if used[dev.id] then used_list[#used_list + 1] = dev end end

  -- the markdown printers stream: devices, then the log as it happens
  local md = {}
  for _, pr in ipairs(list) do
    if pr.kind == "markdown" then
      local okf, f = pcall(open_stream, pr.spec)
      if not okf then die(("--md %s: %s"):format(pr.spec, tostring(f)), 2) end
      pr.file = f
      md[#md + 1] = pr
    end
  end
  local function each_md(text_of)
    for _, m in ipairs(md) do m.file:write(text_of(m)); m.file:flush() end
  end
  each_md(function() return output.devices_markdown(#used_list > 0 and used_list or devices) .. output.LOG_PREAMBLE end)
  local function log(text) each_md(function(m) return output.log_line(text, m.color) end) end

  local writers = {}
  for _, pr in ipairs(list) do if pr.bin then writers[#writers + 1] = output.jsonbin_writer(pr.spec) end end
  local results, failures = runner.run(plan, {log = log, l2_bytes = l2, l2_flush = l2_flush,
    on_state = #writers > 0 and function(rec, lg) for _, w in ipairs(writers) do w(rec, lg) end end or nil})
  each_md(function() return output.LOG_EPILOGUE end)

  -- the results, printer by printer; one that fails does not stop the others
  local by_id = {}
  for _, dev in ipairs(devices) do by_id[dev.id] = dev end
  local argv = {"cudalua", name}
  for _, a in ipairs(argv_in) do argv[#argv + 1] = a end
  local output_failed = false
  for _, pr in ipairs(list) do
    local ok_out, why = pcall(function()
      if pr.kind == "svg" then require("cuda.bench.svg").write(results, pr.spec); return end
      local text
      if pr.kind == "markdown" then text = output.results_markdown(results, by_id, pr.color)
      elseif pr.kind == "csv" then text = output.csv(results, by_id)
      else text = output.json(results, devices, argv) end
      local f = pr.file or open_stream(pr.spec)
      assert(f:write(text))
      if STREAMS[pr.spec] then f:flush() else assert(f:close()) end
    end)
    if not ok_out then
      io.stderr:write(("bench: %s %s: %s\n"):format(pr.option, pr.spec, tostring(why)))
      output_failed = true
    end
  end
  if failures > 0 then
    io.stderr:write(("bench: %d state(s) failed (see 'Fail:' in the log)\n"):format(failures))
  end
  if failures > 0 or output_failed then os.exit(1) end
end

return M
