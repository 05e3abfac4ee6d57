-- cuda.cli: command-line handling shared by the bundled cudalua scripts.
-- SPDX-License-Identifier: MIT
--
-- Parsers are lua-argparse parsers with the project's conventions: the usage
-- line reads "cudalua NAME [options]", --help exits 0, and a usage error
-- exits 2 (argparse itself exits 1). Also: argument converters, number
-- formatting in the style of the cuda.core samples, and a progress
-- indicator that only draws on a terminal.
local argparse = require "argparse"

local M = {}

-- The script name of each parser we made, for the "Try ... --help" hint.
local script_names = setmetatable({}, {__mode = "k"})

-- A parser for `cudalua NAME`. Scripts with positional arguments may set a
-- fuller usage line with parser:usage("Usage: cudalua NAME [options] FILE").
function M.parser(name, description)
  local parser = argparse("cudalua " .. name, description)
    :usage(("Usage: cudalua %s [options]"):format(name))
    :help_max_width(80)
  script_names[parser] = name
  return parser
end

-- Converter errors are made to name their option ("bad value for
-- --streams: ..."), however the converter was attached. That means reading
-- argparse's element lists (_options, _arguments, _convert, _name,
-- _aliases: private, but stable across lua-argparse 0.5-0.7); without them
-- messages stay as the converters wrote them.
local named_converters = setmetatable({}, {__mode = "k"})

local function name_errors(element)
  local convert = rawget(element, "_convert")
  if type(convert) ~= "function" or named_converters[convert] then return end
  local name = rawget(element, "_name") or "argument"
  local function named(text)
    local value, err = convert(text)
    if value == nil then
      return nil, ("bad value for %s: %s"):format(name, err or ("'" .. tostring(text) .. "'"))
    end
    return value, err
  end
  named_converters[named] = true
  element._convert = named
end

-- Output files are checked while the options are parsed, so a path that
-- cannot be written stops the script before its work, not after it.
-- Options named here get cli.output_file unless they have a converter.
M.output_options = {["--json"] = true, ["--trace"] = true}

local function check_output(option)
  if rawget(option, "_convert") ~= nil then return end
  for _, alias in ipairs(rawget(option, "_aliases") or {}) do
    if M.output_options[alias] then option._convert = M.output_file end
  end
end

local function prepare(parser)
  for _, option in ipairs(rawget(parser, "_options") or {}) do check_output(option) end
  for _, list in ipairs{rawget(parser, "_options") or {}, rawget(parser, "_arguments") or {}} do
    for _, element in ipairs(list) do name_errors(element) end
  end
end

-- Parses args (default: the global arg table). Returns the result table; on
-- a usage error prints usage and error to stderr and exits with status 2.
function M.parse(parser, args)
  prepare(parser)
  local ok, result = parser:pparse(args or _G.arg or {})
  if ok then return result end
  local name = script_names[parser]
  local hint = name and ("Try 'cudalua %s --help' for more information.\n"):format(name) or ""
  io.stderr:write(("%s\n\nError: %s\n%s"):format(parser:get_usage(), result, hint))
  io.stderr:flush()
  os.exit(2)
end

-- --- converters for argparse's :convert() -----------------------------------
-- Each returns the converted value, or nil and a message naming the input.

-- Digits with optional "_" between groups: "16000000", "16_000_000".
local function plain_digits(text)
  if text:match("^%d+$") or text:match("^%d+[_%d]*%d$") and not text:find("__") then
    return (text:gsub("_", ""))
  end
end

-- "16e6", "1.5e3": the mantissa's digits shifted by the exponent, all in
-- decimal text so no precision is lost. Nil unless the value is integral.
local function scientific_digits(text)
  local int_part, frac, exp = text:match("^(%d+)%.?(%d*)[eE]%+?(%d+)$")
  if not int_part then return nil end
  local digits, shift = int_part .. frac, tonumber(exp) - #frac
  if shift < 0 then
    local dropped = digits:sub(shift)
    if not dropped:match("^0+$") then return nil end
    return digits:sub(1, #digits + shift)
  end
  if shift > 30 then return "9" .. ("0"):rep(30) end  -- surely too large
  return digits .. ("0"):rep(shift)
end

-- Decimal digits to an integer, or nil when beyond math.maxinteger.
local function digits_to_integer(digits)
  digits = digits:gsub("^0+(%d)", "%1")
  local max = tostring(math.maxinteger)
  if #digits > #max or (#digits == #max and digits > max) then return nil end
  return math.tointeger(tonumber(digits))
end

-- Accepts "16000000", "16_000_000" and "16e6"; rejects 0, negative numbers,
-- fractions and anything else.
function M.positive_integer(text)
  text = tostring(text)
  local digits = plain_digits(text) or scientific_digits(text)
  if not digits then
    return nil, ("'%s' is not a positive integer"):format(text)
  end
  local n = digits_to_integer(digits)
  if not n then return nil, ("'%s' is too large"):format(text) end
  if n < 1 then return nil, ("'%s' is not a positive integer (must be at least 1)"):format(text) end
  return n
end

-- A device id: "0" or a positive integer, or "local": the device
-- cuda.Device() picks (under mpirun or srun, the node-local rank's GPU),
-- else 0 where there is none (the script's cuda.Device(0) says why).
-- An argparse converter: a positive integer of at most max ("calls per batch").
function M.positive_integer_at_most(max, what)
  return function(text)
    local n, why = M.positive_integer(text)
    if n and n > max then return nil, ("'%s' is too large: at most %d %s"):format(text, max, what) end
    return n, why
  end
end

function M.device_id(text)
  if tostring(text) == "0" then return 0 end
  if text == "local" then
    local ok, dev = pcall(function() return require("cuda").Device() end)
    return ok and dev.id or 0
  end
  local n = M.positive_integer(text)
  if not n then return nil, ("'%s' is not a device id (0, 1, ...)"):format(tostring(text)) end
  return n
end

-- Adds --device to parser; by default the launcher's node-local GPU, so
-- that the ranks of `mpirun -n 16` on two 8-GPU nodes use every GPU once.
function M.device_option(parser)
  return parser:option("--device", "CUDA device id (default: under mpirun or srun, the node-local rank's " ..
    "GPU, local rank % GPUs; else 0).", "local"):convert(M.device_id):show_default(false)
end

-- A file the script will write (cuda.json.write_file): the folder exists
-- and takes new files, or the file (a FIFO, /dev/stdout, ...) is writable.
function M.output_file(text)
  text = tostring(text)
  local ok, why = require("cuda.json").can_write(text)
  if ok then return text end
  return nil, why
end

-- "2,4,8" -> {2, 4, 8}: one or more positive integers separated by commas.
function M.integer_list(text)
  text = tostring(text)
  local list = {}
  for item in (text .. ","):gmatch("(.-),") do
    item = item:match("^%s*(.-)%s*$")
    local n, why = M.positive_integer(item)
    if text:match("^%s*$") then return nil, "empty list" end
    if item == "" then return nil, ("'%s' has an empty item"):format(text) end
    if not n then return nil, item == text and why or ("%s in the list '%s'"):format(why, text) end
    list[#list + 1] = n
  end
  return list
end

-- cli.choice{"a", "b"} -> a converter accepting exactly those words.
function M.choice(choices)
  assert(type(choices) == "table" and #choices > 0, "cli.choice expects a list of strings")
  local allowed = {}
  for _, c in ipairs(choices) do allowed[c] = true end
  return function(text)
    if allowed[text] then return text end
    return nil, ("'%s' is not one of: %s"):format(tostring(text), table.concat(choices, ", "))
  end
end

-- --- formatting ---------------------------------------------------------------

-- 16000000 -> "16,000,000"
function M.format_int(n)
  local i = math.tointeger(n)
  assert(i, "cli.format_int expects an integer")
  local sign, digits = tostring(i):match("^(-?)(%d+)$")
  local head = #digits % 3
  local groups = {head > 0 and digits:sub(1, head) or nil}
  for pos = head + 1, #digits, 3 do groups[#groups + 1] = digits:sub(pos, pos + 2) end
  return sign .. table.concat(groups, ",")
end

local byte_units = {"B", "KB", "MB", "GB", "TB", "PB"}

-- Binary multiples with the cuda.core samples' labels: 64e6 -> "61 MB".
-- Whole numbers from 10 up, one decimal below 10 unless it is ".0".
function M.format_bytes(n)
  assert(type(n) == "number" and n >= 0, "cli.format_bytes expects a byte count >= 0")
  local value, unit = n, 1
  while unit < #byte_units do
    local rounded = value >= 10 and math.floor(value + 0.5) or value
    if rounded < 1024 then break end
    value, unit = value / 1024, unit + 1
  end
  if unit == 1 then return ("%d B"):format(math.floor(n + 0.5)) end
  local text = value >= 9.95 and ("%.0f"):format(value) or ("%.1f"):format(value):gsub("%.0$", "")
  return text .. " " .. byte_units[unit]
end

-- --- progress -------------------------------------------------------------------

local quiet = {step = function() end, done = function() end}
quiet.__index = quiet
quiet.__close = quiet.done

local Progress = {}
Progress.__index = Progress
Progress.__close = function(self) self:done() end

local BAR_WIDTH = 30
local REDRAW_INTERVAL = 0.1   -- seconds: at most ~10 redraws a second

function Progress:draw()
  local fraction = self.total > 0 and math.min(self.count / self.total, 1) or 1
  local filled = math.floor(fraction * BAR_WIDTH)
  self.file:write(("\r%s [%s%s] %3d%% (%d/%d)"):format(self.label, ("#"):rep(filled),
    ("."):rep(BAR_WIDTH - filled), math.floor(fraction * 100), self.count, self.total))
  self.file:flush()
  self.drawn = true
end

-- Advances by n (default 1); redraws when the last redraw is old enough.
function Progress:step(n)
  self.count = self.count + (n or 1)
  local now = self.clock()
  if now - self.last_draw >= REDRAW_INTERVAL then
    self.last_draw = now
    self:draw()
  end
end

-- Erases the line, so the script's own output starts on a clean line.
function Progress:done()
  if self.drawn then
    self.file:write("\r\27[K")
    self.file:flush()
    self.drawn = false
  end
end

-- cli.progress(total, label [, opts]) -> object with :step(n) and :done(),
-- also usable as a <close> variable. Draws on stderr only when stderr is a
-- terminal. opts (for tests): tty (override detection), file, clock.
function M.progress(total, label, opts)
  opts = opts or {}
  local tty = opts.tty
  if tty == nil then tty = require("cuda").isatty(io.stderr) end
  if not tty then return setmetatable({}, quiet) end
  return setmetatable({
    total = total, label = label or "", count = 0, drawn = false,
    last_draw = -math.huge, file = opts.file or io.stderr,
    clock = opts.clock or require("cuda").clock,
  }, Progress)
end

return M
