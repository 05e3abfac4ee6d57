-- cuda.json: a small JSON encoder and decoder for the cudalua scripts.
-- SPDX-License-Identifier: MIT
--
-- Scripts write their results (--json) and Chrome traces with it; tests read
-- them back. Output is stable: object keys are sorted, floats are printed
-- with the fewest digits that read back to the same double.
--
--   json.encode(value [, {indent = 2}]) -> string
--   json.decode(text) -> value
--   json.write_file(path, value [, {indent = 2}])   -- atomic replace, see below
--   json.can_write(path) -> true | false, why         -- would write_file work?
--   json.array([t]) -> t      -- mark t to encode as an array, even if empty
--   json.null                 -- encodes as null; what decode returns for null
local M = {}

-- A sentinel for JSON null: a plain nil could not sit in an array or be told
-- apart from a missing key.
M.null = setmetatable({}, {
  __tostring = function() return "json.null" end,
  __name = "json.null",
})

-- Tables marked as arrays. Weak keys, so marking never keeps a table alive,
-- and no metatable is taken from the caller's table.
local marked_arrays = setmetatable({}, {__mode = "k"})

function M.array(t)
  t = t or {}
  assert(type(t) == "table", "json.array expects a table")
  marked_arrays[t] = true
  return t
end

-- --- encoding ---------------------------------------------------------------

local escapes = {
  ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
  ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
}

local function escape_char(c)
  return escapes[c] or ("\\u%04x"):format(c:byte())
end

-- Bytes >= 0x80 pass through untouched, so UTF-8 text stays readable.
local function encode_string(s)
  return '"' .. s:gsub('[%c"\\]', escape_char) .. '"'
end

-- The shortest of %.15g, %.16g, %.17g that reads back exactly; %.17g always
-- does. Integral floats keep a ".0" so that they decode as floats again.
local function encode_float(x)
  if x ~= x or x == math.huge or x == -math.huge then
    local name = x ~= x and "NaN" or tostring(x)
    error(("json.encode: cannot encode %s (JSON has no NaN or infinity)"):format(name), 0)
  end
  local text
  for digits = 15, 17 do
    text = ("%." .. digits .. "g"):format(x)
    if tonumber(text) == x then break end
  end
  if not text:find("[.eEn]") then text = text .. ".0" end
  return text
end

local function encode_number(x)
  if math.type(x) == "integer" then return ("%d"):format(x) end
  return encode_float(x)
end

-- "array" when the keys are exactly 1..n (n >= 1) or the table is marked,
-- "object" when every key is a string; anything else cannot be encoded.
local function table_kind(t)
  if marked_arrays[t] then return "array" end
  local count, all_strings = 0, true
  for k in pairs(t) do
    count = count + 1
    if type(k) ~= "string" then all_strings = false end
  end
  if count == 0 or all_strings then return "object" end
  for i = 1, count do
    if rawget(t, i) == nil then
      error("json.encode: cannot encode a table with mixed or sparse keys", 0)
    end
  end
  return "array"
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

local Encoder = {}
Encoder.__index = Encoder

-- A newline and the indentation for the given depth, or "" when compact.
function Encoder:newline(depth)
  if not self.indent then return "" end
  return "\n" .. (" "):rep(self.indent * depth)
end

function Encoder:items(open, close, n, depth, emit_item)
  if n == 0 then
    self.out[#self.out + 1] = open .. close
    return
  end
  self.out[#self.out + 1] = open
  for i = 1, n do
    self.out[#self.out + 1] = (i > 1 and "," or "") .. self:newline(depth + 1)
    emit_item(i)
  end
  self.out[#self.out + 1] = self:newline(depth) .. close
end

function Encoder:table(t, depth)
  if self.open_tables[t] then error("json.encode: cannot encode a cyclic table", 0) end
  self.open_tables[t] = true
  if table_kind(t) == "array" then
    self:items("[", "]", #t, depth, function(i) self:value(t[i], depth + 1) end)
  else
    local keys = sorted_keys(t)
    local colon = self.indent and ": " or ":"
    self:items("{", "}", #keys, depth, function(i)
      self.out[#self.out + 1] = encode_string(keys[i]) .. colon
      self:value(t[keys[i]], depth + 1)
    end)
  end
  self.open_tables[t] = nil
end

function Encoder:value(v, depth)
  local kind = type(v)
  local out = self.out
  if v == nil or v == M.null then
    out[#out + 1] = "null"
  elseif kind == "boolean" then
    out[#out + 1] = tostring(v)
  elseif kind == "number" then
    out[#out + 1] = encode_number(v)
  elseif kind == "string" then
    out[#out + 1] = encode_string(v)
  elseif kind == "table" then
    self:table(v, depth)
  else
    error(("json.encode: cannot encode a value of type %s"):format(kind), 0)
  end
end

-- opts.indent: spaces per nesting level; absent or 0 gives compact output.
function M.encode(value, opts)
  local indent = opts and opts.indent
  if indent == 0 then indent = nil end
  local encoder = setmetatable({out = {}, open_tables = {}, indent = indent}, Encoder)
  encoder:value(value, 0)
  return table.concat(encoder.out)
end

-- --- decoding ---------------------------------------------------------------

local Decoder = {}
Decoder.__index = Decoder

function Decoder:fail(what, pos)
  pos = pos or self.pos
  local before = self.text:sub(1, pos - 1)
  local line = select(2, before:gsub("\n", "")) + 1
  local column = pos - (before:match(".*\n()") or 1) + 1
  error(("json.decode: %s at line %d column %d"):format(what, line, column), 0)
end

function Decoder:skip_space()
  self.pos = self.text:find("[^ \t\r\n]", self.pos) or #self.text + 1
end

function Decoder:peek()
  self:skip_space()
  return self.text:sub(self.pos, self.pos)
end

function Decoder:expect(char)
  if self:peek() ~= char then self:fail(("expected '%s'"):format(char)) end
  self.pos = self.pos + 1
end

function Decoder:literal(word, value)
  if self.text:sub(self.pos, self.pos + #word - 1) ~= word then self:fail("invalid literal") end
  self.pos = self.pos + #word
  return value
end

-- JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][-+]?[0-9]+)?
-- Without a fraction or exponent the value is an integer, unless too large.
function Decoder:number()
  local text, pos = self.text, self.pos
  local int_part = text:match("^-?%d+", pos)
  if not int_part or int_part:match("^-?0%d") then self:fail("invalid number") end
  local frac = text:match("^%.%d+", pos + #int_part) or ""
  local exp = text:match("^[eE][-+]?%d+", pos + #int_part + #frac) or ""
  local number = int_part .. frac .. exp
  self.pos = pos + #number
  if frac == "" and exp == "" then
    return math.tointeger(tonumber(number)) or tonumber(number) + 0.0
  end
  return tonumber(number) + 0.0
end

-- \uXXXX, joining a UTF-16 surrogate pair into one code point.
function Decoder:unicode_escape()
  local hex = self.text:match("^%x%x%x%x", self.pos)
  if not hex then self:fail("invalid \\u escape") end
  self.pos = self.pos + 4
  local code = tonumber(hex, 16)
  if code >= 0xD800 and code <= 0xDBFF then
    local low = self.text:match("^\\u([dD][c-fC-F]%x%x)", self.pos)
    if not low then self:fail("unpaired surrogate in \\u escape") end
    self.pos = self.pos + 6
    code = 0x10000 + ((code - 0xD800) << 10) + (tonumber(low, 16) - 0xDC00)
  elseif code >= 0xDC00 and code <= 0xDFFF then
    self:fail("unpaired surrogate in \\u escape")
  end
  return utf8.char(code)
end

local unescapes = {
  ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t",
}

function Decoder:string()
  local start = self.pos
  self.pos = self.pos + 1      -- the opening quote
  local parts = {}
  while true do
    local run_end = self.text:find('["\\%c]', self.pos)
    if not run_end then self:fail("unterminated string", start) end
    parts[#parts + 1] = self.text:sub(self.pos, run_end - 1)
    local c = self.text:sub(run_end, run_end)
    self.pos = run_end + 1
    if c == '"' then return table.concat(parts) end
    if c ~= "\\" then self:fail("control character in string", run_end) end
    local e = self.text:sub(self.pos, self.pos)
    self.pos = self.pos + 1
    if e == "u" then
      parts[#parts + 1] = self:unicode_escape()
    elseif unescapes[e] then
      parts[#parts + 1] = unescapes[e]
    else
      self:fail("invalid escape", self.pos - 2)
    end
  end
end

-- Calls read_item until the closing character; handles commas and emptiness.
function Decoder:sequence(close, read_item)
  self.pos = self.pos + 1      -- the opening bracket
  if self:peek() == close then
    self.pos = self.pos + 1
    return
  end
  repeat
    read_item()
    local c = self:peek()
    self.pos = self.pos + 1
    if c ~= "," and c ~= close then self:fail(("expected ',' or '%s'"):format(close), self.pos - 1) end
  until c == close
end

function Decoder:array()
  local result = M.array({})
  self:sequence("]", function() result[#result + 1] = self:value() end)
  return result
end

function Decoder:object()
  local result = {}
  self:sequence("}", function()
    if self:peek() ~= '"' then self:fail("expected a string key") end
    local key = self:string()
    self:expect(":")
    result[key] = self:value()
  end)
  return result
end

function Decoder:value()
  local c = self:peek()
  if c == "{" then return self:object()
  elseif c == "[" then return self:array()
  elseif c == '"' then return self:string()
  elseif c == "t" then return self:literal("true", true)
  elseif c == "f" then return self:literal("false", false)
  elseif c == "n" then return self:literal("null", M.null)
  elseif c == "" then self:fail("unexpected end of input")
  elseif c:match("[-%d]") then return self:number()
  else self:fail(("unexpected character '%s'"):format(c))
  end
end

-- Arrays come back marked with json.array, so re-encoding gives [] for empty
-- ones; null comes back as json.null.
function M.decode(text)
  assert(type(text) == "string", "json.decode expects a string")
  local decoder = setmetatable({text = text, pos = 1}, Decoder)
  local value = decoder:value()
  if decoder:peek() ~= "" then decoder:fail("trailing characters after the value") end
  return value
end

-- --- files ------------------------------------------------------------------
-- A regular file (or none yet) is replaced atomically: readers see the old
-- file or the complete new one. A symlink is followed, so it stays a link
-- and its target is replaced. Anything else is written in place: renaming
-- over a FIFO, a terminal or /dev/null would put a regular file there (as
-- root, in /dev too). /dev/stdout and /dev/stderr are written through
-- io.stdout and io.stderr, so the JSON stays in order with what the script
-- printed, even when the stream is redirected to a file.

local STANDARD_STREAMS = {
  ["/dev/stdout"] = "stdout", ["/dev/fd/1"] = "stdout", ["/proc/self/fd/1"] = "stdout",
  ["/dev/stderr"] = "stderr", ["/dev/fd/2"] = "stderr", ["/proc/self/fd/2"] = "stderr",
}

local function folder_of(path)
  local folder = path:match("^(.*)/[^/]*$")
  if not folder then return "." end
  return folder == "" and "/" or folder
end

-- The folder a regular file is written in must take new files: the
-- temporary one, renamed over path.
local function check_folder(folder)
  local kind, writable = require("cuda").file_kind(folder)
  if not kind then return nil, writable end
  if kind == "absent" then return nil, ("the folder %s does not exist"):format(folder) end
  if kind ~= "directory" then return nil, ("%s is not a folder"):format(folder) end
  if not writable then return nil, ("the folder %s is not writable"):format(folder) end
  return true
end

-- How path is written: {stream = file}, {in_place = path} or {target =
-- path}, the file a temporary one is renamed over; or nil and why not.
local function plan_output(path)
  local stream = STANDARD_STREAMS[path]
  if stream then return {stream = io[stream]} end
  if path == "" or path:sub(-1) == "/" then return nil, "not a file name" end
  local cuda = require "cuda"
  local kind, writable = cuda.file_kind(path)
  if not kind then return nil, writable end
  if kind == "directory" then return nil, "it is a folder" end
  if kind ~= "absent" and not writable then return nil, "permission denied" end
  if kind ~= "absent" and kind ~= "file" then return {in_place = path} end
  local target = kind == "file" and assert(cuda.real_path(path)) or path
  local ok, why = check_folder(folder_of(target))
  if not ok then return nil, why end
  return {target = target}
end

-- Whether write_file(path, ...) can write there, checked without writing:
-- scripts check their output options before they start working.
function M.can_write(path)
  assert(type(path) == "string", "json.can_write expects a path")
  local plan, why = plan_output(path)
  if plan then return true end
  return false, ("cannot write %s: %s"):format(path, why)
end

-- A temporary name next to path, so os.rename stays within one file system.
-- Built without math.random, which would disturb a script's seeded sequence.
local temp_counter = 0
local function temp_name(path)
  temp_counter = temp_counter + 1
  local address = tostring({}):match("0x(%x+)") or ""
  return ("%s.tmp.%x%s%x"):format(path, os.time(), address, temp_counter)
end

local function write_and_flush(f, text)
  assert(f:write(text))
  assert(f:flush())
end

local function write_all(name, text)
  local f <close>, err = io.open(name, "w")
  if not f then error(err, 0) end
  write_and_flush(f, text)
  local ok, close_err = f:close()
  if not ok then error(close_err, 0) end
end

local function replace(target, text)
  local tmp = temp_name(target)
  local ok, err = pcall(write_all, tmp, text)
  if ok then ok, err = os.rename(tmp, target) end
  if not ok then
    os.remove(tmp)
    error(err, 0)
  end
end

local function write_planned(plan, text)
  if plan.stream then write_and_flush(plan.stream, text)
  elseif plan.in_place then write_all(plan.in_place, text)
  else replace(plan.target, text)
  end
end

-- Encoding happens first, so a bad value leaves no trace.
function M.write_file(path, value, opts)
  local text = M.encode(value, opts or {indent = 2}) .. "\n"
  local plan, err = plan_output(path)
  local ok = plan ~= nil
  if ok then ok, err = pcall(write_planned, plan, text) end
  if not ok then
    error(("json.write_file: cannot write %s: %s"):format(path, err), 2)
  end
end

return M
