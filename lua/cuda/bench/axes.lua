-- cuda.bench.axes: a benchmark's parameter axes, their iteration space, and -a overrides.
-- SPDX-License-Identifier: MIT
--
-- An axis is {name, kind, flags, values, inputs}: kind "int64" (flags
-- "pow2" when given as exponents), "float64", "string" or "type" (names of
-- C++ types, substituted into a kernel's name expression); values are the
-- values a state sees, inputs the strings they were given as (exponents
-- for pow2). The states are the cartesian product of the axes unless
-- groups of them are zipped (walked together) or the benchmark gives its
-- own list.
local M = {}

local KINDS = {int64 = true, float64 = true, string = true, type = true}

local function fail(level, fmt, ...) error(fmt:format(...), level + 1) end

local function check_name(name, level)
  if type(name) ~= "string" or name == "" or name:find("[%[%]=,%s]") then
    fail(level + 1, "an axis name must be a non-empty string without spaces, '=', ',' or brackets, got %s",
      type(name) == "string" and ("'" .. name .. "'") or type(name))
  end
end

-- Checks and converts value i of an axis of kind; returns value, input string.
local function convert(kind, flags, name, i, v, level)
  if kind == "int64" then
    local n = math.type(v) == "integer" and v or (type(v) == "number" and math.tointeger(v))
    if not n then fail(level + 1, "axis '%s': value %d must be an integer, got %s", name, i, tostring(v)) end
    if flags == "pow2" then
      if n < 0 or n > 62 then fail(level + 1, "axis '%s': exponent %d must be in 0..62, got %d", name, i, n) end
      return 1 << n, tostring(n)
    end
    return n, tostring(n)
  elseif kind == "float64" then
    if type(v) ~= "number" or v ~= v then fail(level + 1, "axis '%s': value %d must be a number, got %s", name, i, tostring(v)) end
    return v + 0.0, ("%g"):format(v)
  end
  if type(v) ~= "string" then fail(level + 1, "axis '%s': value %d must be a string, got %s", name, i, type(v)) end
  return v, v
end

-- A new axis, checked: a wrong-typed value names the axis and the value.
function M.new(name, kind, values, flags, level)
  level = (level or 1) + 1
  check_name(name, level)
  assert(KINDS[kind], "unknown axis kind")
  if type(values) ~= "table" or #values == 0 then
    fail(level, "axis '%s': values must be a non-empty list", name)
  end
  local axis = {name = name, kind = kind, flags = flags or "", values = {}, inputs = {}}
  for i = 1, #values do
    axis.values[i], axis.inputs[i] = convert(kind, axis.flags, name, i, values[i], level)
  end
  return axis
end

-- How a value of an axis reads in a table: "2^16 = 65536" for pow2.
function M.display(axis, i)
  if axis.flags == "pow2" then return ("2^%s = %d"):format(axis.inputs[i], axis.values[i]) end
  if axis.kind == "float64" then return ("%g"):format(axis.values[i]) end
  return tostring(axis.inputs[i])
end

-- How a value reads in a state's name ("Bytes=2^16"), as NVBench names states.
function M.short(axis, i)
  if axis.flags == "pow2" then return ("2^%s"):format(axis.inputs[i]) end
  return M.display(axis, i)
end

-- --- iteration spaces -----------------------------------------------------------

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
  for _, axis in ipairs(axes) do
    local zip = group_of[axis.name]
    if not zip then groups[#groups + 1] = {names = {axis.name}, len = #axis.values}
    elseif zip[1] == axis.name then groups[#groups + 1] = {names = zip, len = #M.find(axes, zip[1]).values} end
  end
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
  -- reverse the nesting so the first axis is the innermost loop
  local ordered = {}
  for _, st in ipairs(states) do ordered[#ordered + 1] = st end
  return ordered
end

-- The states of a user-defined space: each assignment names every axis
-- with one of its values.
function M.user_states(axes, space)
  local list = space(axes)
  if type(list) ~= "table" then error("the iteration space function must return a list of assignments", 0) end
  local states = {}
  for s, assignment in ipairs(list) do
    local st = {}
    for _, axis in ipairs(axes) do
      local want = type(assignment) == "table" and assignment[axis.name]
      for i, v in ipairs(axis.values) do if v == want or axis.inputs[i] == want then st[axis.name] = i end end
      if not st[axis.name] then
        error(("iteration space: assignment %d gives axis '%s' no value of its own (%s)"):format(s, axis.name,
          tostring(want)), 0)
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

local function range_values(text, kind, spec)
  local a, b, c = text:match("^([^:]+):([^:]+):?([^:]*)$")
  if not a then return nil end
  local start, stop, step = tonumber(a), tonumber(b), c ~= "" and tonumber(c) or 1
  if not (start and stop and step) or step <= 0 then
    error(("bad range '[%s]' in '%s': [start:stop:step] with step > 0"):format(text, spec), 0)
  end
  if kind == "int64" and not (math.tointeger(start) and math.tointeger(stop) and math.tointeger(step)) then
    error(("bad range '[%s]' in '%s': integers expected"):format(text, spec), 0)
  end
  local values, i = {}, 0
  while true do
    local v = start + i * step
    if v > stop + (kind == "float64" and step * 1e-9 or 0) then break end
    values[#values + 1] = kind == "int64" and math.tointeger(v) or v
    i = i + 1
    if #values > 100000 then error(("range '[%s]' in '%s' has too many values"):format(text, spec), 0) end
  end
  return values
end

-- Parses "Name=v", "Name=[v1,v2]", "Name=[start:stop:step]",
-- "Name[pow2]=[16:28:4]" against axes: returns the axis name and the new
-- axis. Errors name the spec and what is wrong.
function M.parse_override(spec, axes)
  local name, flag, value = spec:match("^%s*([^%[=%s]+)%s*(%b[])%s*=%s*(.-)%s*$")
  if not name then name, value = spec:match("^%s*([^%[=%s]+)%s*=%s*(.-)%s*$") end
  if not name or value == "" then error(("bad axis override '%s': NAME=VALUE or NAME=[V1,V2,...] expected"):format(spec), 0) end
  local axis = M.find(axes, name)
  if not axis then
    local names = {}
    for _, a in ipairs(axes) do names[#names + 1] = a.name end
    error(("axis override '%s' names no axis of this benchmark (its axes: %s)"):format(spec,
      #names > 0 and table.concat(names, ", ") or "none"), 0)
  end
  local flags = flag and flag:sub(2, -2) or axis.flags
  if flags ~= "" and flags ~= "pow2" then error(("bad axis flag '[%s]' in '%s' (known: pow2)"):format(flags, spec), 0) end
  if flags == "pow2" and axis.kind ~= "int64" then
    error(("axis '%s' is a %s axis: [pow2] applies to int64 axes"):format(name, axis.kind), 0)
  end
  local inner = value:match("^%[(.*)%]$") or value
  local items
  if axis.kind == "int64" or axis.kind == "float64" then items = range_values(inner, axis.kind, spec) end
  if not items then
    items = {}
    for item in (inner .. ","):gmatch("(.-),") do
      item = item:match("^%s*(.-)%s*$")
      if item == "" then error(("bad axis override '%s': an empty value"):format(spec), 0) end
      if axis.kind == "int64" or axis.kind == "float64" then
        local n = tonumber(item)
        if not n or (axis.kind == "int64" and not math.tointeger(n)) then
          error(("bad axis override '%s': '%s' is not a%s"):format(spec, item,
            axis.kind == "int64" and "n integer" or " number"), 0)
        end
        item = axis.kind == "int64" and math.tointeger(n) or n
      end
      items[#items + 1] = item
    end
  end
  if axis.kind == "type" then
    for _, item in ipairs(items) do
      local known = false
      for _, v in ipairs(axis.values) do known = known or v == item end
      if not known then
        error(("bad axis override '%s': '%s' is not one of the type axis's types (%s)"):format(spec, item,
          table.concat(axis.values, ", ")), 0)
      end
    end
  end
  local ok, new = pcall(M.new, name, axis.kind, items, flags)
  if not ok then error(("bad axis override '%s': %s"):format(spec, tostring(new):gsub("^[^:]*:%d+: ", "")), 0) end
  return name, new
end

return M
