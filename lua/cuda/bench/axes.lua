-- cuda.bench.axes: a benchmark's parameter axes, their iteration space, and -a overrides.
-- SPDX-License-Identifier: MIT
--
-- An axis is {name, kind, flags, values, inputs, texts}: kind "int64"
-- (flags "pow2" when given as exponents), "float64", "string" or "type"
-- (names of C++ types, substituted into a kernel's name expression);
-- values are the values a state sees, inputs the strings they were given
-- as (exponents for pow2), texts how they read in a state's name. A name
-- is any non-empty string ("Duration (s)"), as NVBench's. The values of an
-- axis are distinct, and so are their texts: floats read as NVBench's
-- {:.5g} where that keeps them apart, with more digits where it does not,
-- so that a state's name says which state it is. The states are the
-- cartesian product of the axes unless groups of them are zipped (walked
-- together) or the benchmark gives its own list.
local M = {}

local KINDS = {int64 = true, float64 = true, string = true, type = true}

-- The most values a range of an override gives, and the most states a benchmark has.
M.MAX_RANGE_VALUES = 100000
M.MAX_STATES = 1000000

local function fail(level, fmt, ...) error(fmt:format(...), level + 1) end

-- A value in a message, without calling a __tostring that may raise.
function M.describe(v)
  if type(v) == "string" then return ("'%s'"):format(v) end
  if type(v) == "number" or type(v) == "boolean" or v == nil then return tostring(v) end
  return type(v)
end

local function check_name(name, level)
  if type(name) ~= "string" or name == "" then
    fail(level + 1, "an axis name must be a non-empty string, got %s", M.describe(name))
  end
end

-- Checks and converts value i of an axis of kind; returns value, input string.
local function convert(kind, flags, name, i, v, level)
  if kind == "int64" then
    local n = math.type(v) == "integer" and v or (type(v) == "number" and math.tointeger(v))
    if not n then fail(level + 1, "axis '%s': value %d must be an integer, got %s", name, i, M.describe(v)) end
    if flags == "pow2" then
      if n < 0 or n > 62 then fail(level + 1, "axis '%s': exponent %d must be in 0..62, got %d", name, i, n) end
      return 1 << n, tostring(n)
    end
    return n, tostring(n)
  elseif kind == "float64" then
    if type(v) ~= "number" or v ~= v then
      fail(level + 1, "axis '%s': value %d must be a number (not NaN), got %s", name, i, M.describe(v))
    end
    return v + 0.0, nil
  end
  if type(v) ~= "string" then fail(level + 1, "axis '%s': value %d must be a string, got %s", name, i, type(v)) end
  return v, v
end

-- How the floats of an axis read: %.5g (NVBench's {:.5g}) when that keeps
-- them apart, else the fewest digits that do (17 always do).
local function float_texts(values)
  for digits = 5, 17 do
    local texts, seen, unique = {}, {}, true
    for i, v in ipairs(values) do
      local text = ("%." .. digits .. "g"):format(v)
      if seen[text] then unique = false; break end
      seen[text], texts[i] = true, text
    end
    if unique then return texts end
  end
  error("unreachable: distinct doubles read alike at 17 digits")
end

-- A new axis, checked: a wrong-typed or repeated value names the axis and the value.
function M.new(name, kind, values, flags, level)
  level = (level or 1) + 1
  check_name(name, level)
  assert(KINDS[kind], "unknown axis kind")
  if flags and flags ~= "" and (flags ~= "pow2" or kind ~= "int64") then
    fail(level, "axis '%s': flags %s do not apply to a %s axis", name, M.describe(flags), kind)
  end
  if type(values) ~= "table" or #values == 0 then
    fail(level, "axis '%s': values must be a non-empty list", name)
  end
  local axis = {name = name, kind = kind, flags = flags or "", values = {}, inputs = {}, texts = {}}
  local first = {}   -- a value's identity -> its index
  for i = 1, #values do
    axis.values[i], axis.inputs[i] = convert(kind, axis.flags, name, i, values[i], level)
    local v = axis.values[i]
    local key = kind == "float64" and ("%.17g"):format(v) or v
    if first[key] then
      fail(level, "axis '%s': values %d and %d are the same (%s); each state needs values of its own", name,
        first[key], i, kind == "float64" and key or tostring(axis.inputs[i]))
    end
    first[key] = i
  end
  if kind == "float64" then
    axis.texts = float_texts(axis.values)
    for i, text in ipairs(axis.texts) do axis.inputs[i] = text end
  else
    for i, input in ipairs(axis.inputs) do axis.texts[i] = flags == "pow2" and "2^" .. input or input end
  end
  return axis
end

-- How a value of an axis reads in a table: "2^16 = 65536" for pow2.
function M.display(axis, i)
  if axis.flags == "pow2" then return ("2^%s = %d"):format(axis.inputs[i], axis.values[i]) end
  return axis.texts[i]
end

-- How a value reads in a state's name ("Bytes=2^16"), as NVBench names states.
function M.short(axis, i)
  return axis.texts[i]
end

-- --- iteration spaces -----------------------------------------------------------

local function check_count(n)
  if n > M.MAX_STATES then
    error(("the axes give %.0f states, more than %d: give fewer values (-a)"):format(n, M.MAX_STATES), 0)
  end
end

-- The states: a list of index tables (axis name -> index), the axes in
-- order, the last varying fastest as NVBench's do. zips is a list of lists
-- of axis names walked together (equal lengths); space, when given, is a
-- function(axes) returning the list of assignments itself (name -> value).
function M.states(axes, zips, space)
  if space then return M.user_states(axes, space) end
  local group_of, groups = {}, {}
  for _, zip in ipairs(zips or {}) do
    local len
    for _, name in ipairs(zip) do
      local axis = M.find(axes, name)
      if not axis then error(("zip_axes: no axis named '%s'"):format(name), 0) end
      len = len or #axis.values
      if #axis.values ~= len then
        error(("zip_axes: axis '%s' has %d values, the others %d"):format(name, #axis.values, len), 0)
      end
      group_of[name] = zip
    end
  end
  local count = 1.0
  for _, axis in ipairs(axes) do
    local zip = group_of[axis.name]
    if not zip then groups[#groups + 1] = {names = {axis.name}, len = #axis.values}
    elseif zip[1] == axis.name then groups[#groups + 1] = {names = zip, len = #M.find(axes, zip[1]).values} end
  end
  for _, group in ipairs(groups) do count = count * group.len end
  check_count(count)
  local states = {{}}
  for g = #groups, 1, -1 do   -- NVBench: the first axis varies fastest
    local group, next_states = groups[g], {}
    for _, st in ipairs(states) do
      for i = 1, group.len do
        local copy = {}
        for k, v in pairs(st) do copy[k] = v end
        for _, name in ipairs(group.names) do copy[name] = i end
        next_states[#next_states + 1] = copy
      end
    end
    states = next_states
  end
  return states
end

-- The states of a user-defined space: each assignment names every axis
-- with one of its values.
function M.user_states(axes, space)
  local list = space(axes)
  if type(list) ~= "table" then error("the iteration space function must return a list of assignments", 0) end
  check_count(#list)
  local states = {}
  for s, assignment in ipairs(list) do
    local st = {}
    for _, axis in ipairs(axes) do
      local want = type(assignment) == "table" and assignment[axis.name]
      for i, v in ipairs(axis.values) do if v == want or axis.inputs[i] == want then st[axis.name] = i end end
      if not st[axis.name] then
        error(("iteration space: assignment %d gives axis '%s' no value of its own (%s)"):format(s, axis.name,
          M.describe(want)), 0)
      end
    end
    states[#states + 1] = st
  end
  return states
end

function M.find(axes, name)
  for _, axis in ipairs(axes) do if axis.name == name then return axis end end
  return nil
end

-- --- overrides: -a 'Name=...' ------------------------------------------------------
--
-- NVBench's grammar (option_parser.cu): "Name[flags]=values", spaces
-- around each part ignored; the name runs to the first '[' or '='; the
-- values are one value ("v" or "[v]"), a list "[v1,v2,...]" or a range
-- "[start:stop]" / "[start:stop:step]" (inclusive; numeric axes only).

local function bad(spec, why, ...) error(("bad axis override '%s': " .. why):format(spec, ...), 0) end

-- "Name [flags] = values" -> name, flags ("" for none), the value spec.
function M.split_override(spec)
  if type(spec) ~= "string" then error(("bad axis override: a string expected, got %s"):format(type(spec)), 0) end
  local text = spec:match("^%s*(.-)%s*$")
  local stop = text:find("[%[=]")
  if not stop then bad(spec, "NAME=VALUE, NAME=[V1,V2,...] or NAME=[START:STOP:STEP] expected") end
  local name = text:sub(1, stop - 1):match("^(.-)%s*$")
  if name == "" then bad(spec, "no axis name before '%s'", text:sub(stop, stop)) end
  if name:find(":", 1, true) then bad(spec, "an axis name given to -a cannot hold ':'") end
  local rest, flags = text:sub(stop), ""
  if rest:sub(1, 1) == "[" then
    local f, after = rest:match("^%[%s*([^%]]-)%s*%](.*)$")
    if not f then bad(spec, "the flags '[' are not closed by ']'") end
    flags, rest = f, after
  end
  local value = rest:match("^%s*=%s*(.-)$")
  if not value or value == "" then bad(spec, "NAME=VALUE expected after the name '%s'", name) end
  return name, flags, value
end

local function parse_int(text, spec)
  local n = text:match("^[+-]?%d+$") and math.tointeger(tonumber(text))
  if not n then bad(spec, "'%s' is not an integer (int64: -2^63 to 2^63-1)", text) end
  return n
end

local function parse_float(text, spec)
  local lower = text:lower()
  local sign, word = lower:match("^([+-]?)(inf)$")
  if not sign then sign, word = lower:match("^([+-]?)(infinity)$") end
  local v = word and (sign == "-" and -math.huge or math.huge) or tonumber(text)
  if not v or v ~= v then bad(spec, "'%s' is not a number", text) end
  return v + 0.0
end

local function parse_item(kind, text, spec)
  if kind == "int64" then return parse_int(text, spec) end
  if kind == "float64" then return parse_float(text, spec) end
  return text
end

-- The items of text between each sep, trimmed and parsed; an empty one is refused (empty: the message).
local function split_items(kind, text, sep, empty, spec)
  local items = {}
  for item in (text .. sep):gmatch("(.-)" .. sep) do
    item = item:match("^%s*(.-)%s*$")
    if item == "" then bad(spec, empty, text) end
    items[#items + 1] = parse_item(kind, item, spec)
  end
  return items
end

-- The count of start, start + step, ... up to stop (start <= stop, step > 0),
-- computed in unsigned arithmetic so that ranges near the int64 limits
-- neither wrap nor overflow; nil when over M.MAX_RANGE_VALUES.
local function int_range_count(start, stop, step)
  local diff = stop - start          -- the true difference, read as unsigned
  local q
  if diff >= 0 then
    q = diff // step
  else                               -- diff >= 2^63: unsigned division
    q = ((diff >> 1) // step) << 1
    if not math.ult(diff - q * step, step) then q = q + 1 end
  end
  if math.ult(M.MAX_RANGE_VALUES - 1, q) then return nil end
  return q + 1
end

local function int_range(start, stop, step, spec)
  local n = int_range_count(start, stop, step)
  if not n then bad(spec, "the range gives more than %d values", M.MAX_RANGE_VALUES) end
  local values = {}
  for i = 0, n - 1 do values[i + 1] = start + i * step end   -- exact: every value lies in [start, stop]
  return values
end

-- NVBench's float range: start, start + step, ... while at most stop + step/2
-- (its padding against rounding), each the previous plus step.
local function float_range(start, stop, step, spec)
  if start == math.huge or start == -math.huge or stop == math.huge or stop == -math.huge or step == math.huge then
    bad(spec, "a range needs finite numbers")
  end
  if (stop - start) / step >= M.MAX_RANGE_VALUES then
    bad(spec, "the range gives more than %d values", M.MAX_RANGE_VALUES)
  end
  local values, v, last = {}, start, stop + step / 2
  while v <= last do
    values[#values + 1] = v
    if v + step == v then bad(spec, "the step %s is too small to move from %s", step, v) end
    v = v + step
  end
  return values
end

local function range_values(kind, inner, spec)
  if kind ~= "int64" and kind ~= "float64" then
    bad(spec, "a range [start:stop:step] needs a numeric axis, not a %s axis", kind)
  end
  local parts = split_items(kind, inner, ":", "an empty part in the range [%s]", spec)
  if #parts ~= 2 and #parts ~= 3 then bad(spec, "a range has 2 or 3 parts ([start:stop] or [start:stop:step]), not %d", #parts) end
  local start, stop, step = parts[1], parts[2], parts[3] or (kind == "int64" and 1 or 1.0)
  if not (step > 0) then bad(spec, "the step of a range must be > 0, got %s", tostring(step)) end
  if stop < start then bad(spec, "the range [%s] gives no values (start > stop)", inner) end
  if kind == "int64" then return int_range(start, stop, step, spec) end
  return float_range(start, stop, step, spec)
end

-- The values of a value spec for an axis of kind: one value, a list or a range.
function M.parse_values(kind, value, spec)
  local inner = value:match("^%[%s*(.-)%s*%]$")
  if inner and not inner:find("]", 1, true) and inner:find(",", 1, true) then
    return split_items(kind, inner, ",", "an empty value in the list [%s]", spec)
  elseif inner and not inner:find("]", 1, true) and inner:find(":", 1, true) then
    return range_values(kind, inner, spec)
  end
  local single = value:match("^%[?%s*(.-)%s*%]?$")
  if single == "" or single:find("[,%]:%[]") then
    bad(spec, "'%s' is not a value, a list [v1,v2,...] or a range [start:stop:step]", value)
  end
  return {parse_item(kind, single, spec)}
end

-- Parses "Name=v", "Name=[v1,v2]", "Name=[start:stop:step]",
-- "Name[pow2]=[16:28:4]" against axes: returns the axis name and the new
-- axis. As NVBench's, an int64 axis takes the flags given (none: a plain
-- int64 axis, even where it was pow2). Errors name the spec and what is wrong.
function M.parse_override(spec, axes)
  local name, flags, value = M.split_override(spec)
  local axis = M.find(axes, name)
  if not axis then
    local names = {}
    for _, a in ipairs(axes) do names[#names + 1] = "'" .. a.name .. "'" end
    error(("axis override '%s' names no axis of this benchmark (its axes: %s)"):format(spec,
      #names > 0 and table.concat(names, ", ") or "none"), 0)
  end
  if flags ~= "" and (flags ~= "pow2" or axis.kind ~= "int64") then
    bad(spec, "'[%s]' is not a flag of a %s axis%s", flags, axis.kind, axis.kind == "int64" and " (known: pow2)" or "")
  end
  local items = M.parse_values(axis.kind, value, spec)
  if axis.kind == "type" then
    local known = axis.known or axis.values
    for _, item in ipairs(items) do
      local found = false
      for _, v in ipairs(known) do found = found or v == item end
      if not found then
        bad(spec, "'%s' is not one of the type axis's types (%s)", item, table.concat(known, ", "))
      end
    end
  end
  local ok, new = pcall(M.new, name, axis.kind, items, flags)
  if not ok then bad(spec, "%s", (tostring(new):gsub("^[^:]*:%d+: ", ""))) end
  new.known = axis.kind == "type" and (axis.known or axis.values) or nil
  return name, new
end

return M
