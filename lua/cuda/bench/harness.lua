-- cuda.bench.harness: NVBench-shaped benchmarks (bench.register), their states, and running them.
-- SPDX-License-Identifier: MIT
--
--   local function copy(state) ... state:exec(function(launch) ... end) end
--   bench.register(copy):add_type_axis("T", {"uint8_t", "double"})   -- named "copy"
--    :add_int64_power_of_two_axis("Bytes", {16, 20, 24})
--
-- Each benchmark's states (the product of its axes, or its zipped or own
-- iteration space) run on each chosen device; fn(state) reads its axis
-- values, declares its throughput, and calls state:exec. The methods are
-- NVBench's Python API (cuda-bench 0.3.0) with its meaning; where cudalua
-- differs on purpose, DIFFERENCES.md in this folder says why.
--
-- What a state leaves for cuda.bench.run and cuda.bench.output:
--   st.user_summaries  complete summary records in call order: {tag, name,
--                      hint, hide, description, type, value, before_exec,
--                      execs_before (the count of measurements before it)}
--   st.measurements    one {cold, batch, cpu_only} per state:exec that ran
--                      (NVBench measures again on a second exec); st.cold,
--                      st.batch and st.cpu_only are the first one's
--   st.stream          what the measurement times and synchronizes: the
--                      state's own stream (made when first asked for, closed
--                      after the state, as NVBench's) or the one set_stream gave
local axes_mod = require "cuda.bench.axes"
local criteria = require "cuda.bench.criteria"
local measure = require "cuda.bench.measure"
local throttle = require "cuda.bench.throttle"


local DEFAULT_BATCH_TARGET, CI_BATCH_TARGET = 0.5, 0.05   -- seconds (batch_target below)
local M = {}

M.registry = {}

local describe = axes_mod.describe

-- --- argument checks: each names the method and the setting ------------------------

local function arg_error(method, n, what, v, level)
  error(("bad argument #%d to '%s' (%s expected, got %s)"):format(n, method, what, describe(v)), level + 1)
end

-- level: of the method's caller, seen from here (default: the caller of the caller)
local function check_integer(method, v, least, n, level)
  local i = math.type(v) == "integer" and v or (type(v) == "number" and math.tointeger(v))
  if not i or (least and i < least) then
    arg_error(method, n or 1, least and ("an integer >= %d"):format(least) or "an integer", v, level or 3)
  end
  return i
end

-- A number, not NaN; opts: least (inclusive), above (exclusive), most, finite.
local function check_number(method, v, opts, n, level)
  local ok = type(v) == "number" and v == v
    and (not opts.least or v >= opts.least) and (not opts.above or v > opts.above)
    and (not opts.most or v <= opts.most) and (not opts.finite or (v ~= math.huge and v ~= -math.huge))
  if not ok then arg_error(method, n or 1, opts.what, v, level or 3) end
  return v + 0.0
end

local function check_bool(method, v, level)
  if type(v) ~= "boolean" then arg_error(method, 1, "a boolean", v, level or 3) end
  return v
end

-- The settings a benchmark gives its states, each with its check (NVBench's
-- meaning, nonsense refused where it is given): state = true where the
-- state has a setter and a getter of its own, as NVBench's state does.
-- (The checks are no tail calls: level 4 is the setter's caller.)
local function seconds(what, rule)
  rule.what = what
  return function(method, v) local x = check_number(method, v, rule, 1, 4); return x end
end
local function boolean(method, v) local x = check_bool(method, v, 4); return x end
local SETTINGS = {
  min_samples = {check = function(method, v) local n = check_integer(method, v, 0, 1, 4); return n end, state = true},
  timeout = {check = seconds("a number of seconds >= 0 (math.huge: no timeout)", {least = 0}), state = true},
  skip_time = {check = seconds("a number of seconds (<= 0: never skip)", {})},
  throttle_threshold = {check = seconds("a fraction of the SM clock in 0..1 (0: no throttle watch)",
    {least = 0, most = 1}), state = true},
  throttle_recovery_delay = {check = seconds("a finite number of seconds >= 0", {least = 0, finite = true})},
  batch_target_time = {check = seconds("a finite number of seconds > 0", {above = 0, finite = true}), state = true},
  -- NVBench clamps a warm-up count below 1 to 1
  cold_warmup_runs = {check = function(method, v) return math.max(check_integer(method, v, nil, 1, 4), 1) end,
    state = true},
  cold_max_warmup_walltime = {check = seconds("a number of seconds (<= 0: no limit)", {}), state = true},
  blocking_kernel_timeout = {check = seconds("a number of seconds (negative or math.huge: no timeout)", {}),
    state = true},
  run_once = {check = boolean, state = true},
  disable_blocking_kernel = {check = boolean, state = true},
  is_cpu_only = {check = boolean},
}

-- --- the name a function is known by -----------------------------------------------

local HERE = debug.getinfo(1, "S").source
local INIT = HERE:gsub("harness%.lua$", "init.lua")

local function key_of(tbl, fn)
  for k, v in next, tbl do
    if v == fn and type(k) == "string" then return k end
  end
  return nil
end

-- The first frame outside cuda.bench's registration functions, as a
-- level of the caller's (its caller is level 2 there).
local function user_level()
  local level = 3
  while true do
    local info = debug.getinfo(level, "S")
    if not info then return nil end
    if info.source ~= HERE and info.source ~= INIT then return level - 1 end
    level = level + 1
  end
end

-- The name of the local of the frame at level (counted from the caller's
-- caller) that holds fn; the tables among the locals go into tables.
local function local_name(level, fn, tables)
  for i = 1, math.huge do
    local name, v = debug.getlocal(level + 1, i)
    if not name then return nil end
    if v == fn and not name:find("^%(") then return name end
    if type(v) == "table" then tables[#tables + 1] = v end
  end
end

-- The name of func's upvalue that holds fn, and func's _ENV.
local function upvalue_name(func, fn, tables)
  local env = _G
  for i = 1, math.huge do
    local name, v = debug.getupvalue(func, i)
    if not name then return nil, env end
    if name == "_ENV" and type(v) == "table" then env = v
    elseif v == fn then return name, env
    elseif type(v) == "table" then tables[#tables + 1] = v end
  end
end

-- A field of one of tables, or of a table in env, that holds fn.
local function field_name(tables, env, fn)
  for _, tbl in ipairs(tables) do
    local field = key_of(tbl, fn)
    if field then return field end
  end
  for _, v in next, env do
    local field = type(v) == "table" and v ~= env and key_of(v, fn)
    if field then return field end
  end
  return nil
end

-- NVBench names a benchmark fn.__name__: here the name fn is known by
-- where it is registered: a local or upvalue of the registering function,
-- a global, or a field of a table found there; else "file.lua:LINE".
local function function_name(fn)
  local level = user_level()
  if level then
    local tables = {}
    local name = local_name(level, fn, tables)
    if name then return name end
    local env
    name, env = upvalue_name(debug.getinfo(level, "f").func, fn, tables)
    name = name or key_of(env, fn) or field_name(tables, env, fn)
    if name then return name end
  end
  local info = debug.getinfo(fn, "S")
  if info.what == "C" then return tostring(fn) end
  return ("%s:%d"):format((info.short_src or "?"):match("[^/]*$"), info.linedefined or 0)
end

-- --- benchmarks -----------------------------------------------------------------

local Benchmark = {}
Benchmark.__index = Benchmark
M.Benchmark = Benchmark

-- bench.register(fn) -> a benchmark named as fn is known where it is registered.
function M.register(fn)
  if type(fn) ~= "function" then
    error(("bad argument #1 to 'register' (a function expected, got %s; Python's @bench.register() "
      .. "decorator is bench.register(fn) after fn is defined)"):format(type(fn)), 2)
  end
  if M.running or M.finalized then
    error("bench.register: cannot register a benchmark after the benchmarks ran (NVBench: Can not register "
      .. "more benchmarks after benchmark was run)", 2)
  end
  local b = setmetatable({
    fn = fn, name = function_name(fn),
    axes = {}, zips = {}, space = nil, min_samples = 10, timeout = 15.0, skip_time = -1.0,
    throttle_threshold = throttle.DEFAULT_THRESHOLD, throttle_recovery_delay = throttle.DEFAULT_RECOVERY_DELAY,
    is_cpu_only = false, run_once = false, batch_target_time = DEFAULT_BATCH_TARGET, cold_warmup_runs = 1,
    cold_max_warmup_walltime = -1.0, criterion = "stdrel", criterion_params = {},
    disable_blocking_kernel = false, blocking_kernel_timeout = 30.0,
  }, Benchmark)
  M.registry[#M.registry + 1] = b
  return b
end

function Benchmark:get_name() return self.name end

function Benchmark:add_axis_(name, kind, values, flags)
  if axes_mod.find(self.axes, name) then error(("axis %s already exists"):format(describe(name)), 3) end
  self.axes[#self.axes + 1] = axes_mod.new(name, kind, values, flags, 3)
end
-- (No tail calls: an error names the caller's line.)
function Benchmark:add_int64_axis(name, values) self:add_axis_(name, "int64", values); return self end
function Benchmark:add_int64_power_of_two_axis(name, values) self:add_axis_(name, "int64", values, "pow2"); return self end
function Benchmark:add_float64_axis(name, values) self:add_axis_(name, "float64", values); return self end
function Benchmark:add_string_axis(name, values) self:add_axis_(name, "string", values); return self end
-- C++ type names, substituted for name in the kernel expressions of state:get_kernel.
function Benchmark:add_type_axis(name, values) self:add_axis_(name, "type", values); return self end

-- Walks the named axes together (their values pairwise) instead of their product.
function Benchmark:zip_axes(names)
  if type(names) ~= "table" or #names < 2 then error("bad argument #1 to 'zip_axes' (a list of 2 or more axis names expected)", 2) end
  for _, name in ipairs(names) do
    if not axes_mod.find(self.axes, name) then error(("bad argument #1 to 'zip_axes' (no axis named %s)"):format(describe(name)), 2) end
  end
  self.zips[#self.zips + 1] = table.move(names, 1, #names, 1, {})
  return self
end

-- A user-defined iteration space: fn(axes) returns a list of assignments {Axis = value, ...}.
function Benchmark:set_iteration_space(fn)
  if type(fn) ~= "function" then error("bad argument #1 to 'set_iteration_space' (a function expected)", 2) end
  self.space = fn
  return self
end

function Benchmark:set_name(name)
  if type(name) ~= "string" or name == "" then error("bad argument #1 to 'set_name' (a non-empty string expected)", 2) end
  self.name = name
  return self
end
for key, setting in pairs(SETTINGS) do
  local method = "set_" .. key
  Benchmark[method] = function(self, v) self[key] = setting.check(method, v); return self end
end

-- --- stopping criteria: NVBench's names, whatever cuda.bench.criteria spells them ----

local CRITERION_ALIASES = {["sample-count"] = "sample_count", sample_count = "sample-count"}
local PARAM_ALIASES = {["target-samples"] = "sample-count", ["sample-count"] = "target-samples"}

-- The criteria module's name for a criterion name, or nil.
local function criterion_name(name)
  if criteria.PARAMS[name] then return name end
  local alias = CRITERION_ALIASES[name]
  return alias and criteria.PARAMS[alias] and alias or nil
end

-- params (NVBench's or cudalua's keys) in the keys the criterion has.
local function criterion_params(name, params)
  local known, out = criteria.PARAMS[criterion_name(name)] or {}, {}
  for k, v in pairs(params) do
    local key = known[k] == nil and PARAM_ALIASES[k] and known[PARAM_ALIASES[k]] ~= nil and PARAM_ALIASES[k] or k
    out[key] = v
  end
  return out
end
M.criterion_name, M.criterion_params = criterion_name, criterion_params

local function known_criteria()
  local names = {}
  for _, name in ipairs(criteria.NAMES) do names[#names + 1] = name end
  for nv, ours in pairs(CRITERION_ALIASES) do
    if criteria.PARAMS[ours] and not criteria.PARAMS[nv] then names[#names + 1] = nv end
  end
  table.sort(names)
  return table.concat(names, ", ")
end

-- set_stopping_criterion(name [, params]): "stdrel" {["max-noise"], ["min-time"]},
-- "entropy" {["max-angle"], ["min-r2"]}, "sample-count" {["target-samples"]}.
-- As NVBench's, the criterion's parameters start again from its defaults.
function Benchmark:set_stopping_criterion(name, params)
  if not criterion_name(name) then
    error(("bad argument #1 to 'set_stopping_criterion' (unknown criterion %s; known: %s)"):format(describe(name),
      known_criteria()), 2)
  end
  if params ~= nil and type(params) ~= "table" then error("bad argument #2 to 'set_stopping_criterion' (a table expected)", 2) end
  local ok, why = pcall(criteria.params, criterion_name(name), criterion_params(name, params or {}))
  if not ok then error("bad argument #2 to 'set_stopping_criterion' (" .. tostring(why):gsub("^[^:]*:%d+: ", "") .. ")", 2) end
  self.criterion, self.criterion_params = name, {}
  for k, v in pairs(params or {}) do self.criterion_params[k] = v end
  return self
end

-- The type a built-in criterion's parameter has ("float64", "int64"), or nil.
local function param_type(name)
  for _, params in pairs(criteria.PARAMS) do
    for key, default in pairs(params) do
      if key == name or PARAM_ALIASES[name] == key then
        return math.type(default) == "integer" and "int64" or "float64"
      end
    end
  end
  return nil
end

-- (Called, not tail-called, by the methods: level 3 here is their caller.)
local function set_param(self, method, kind, name, v)
  if type(name) ~= "string" then arg_error(method, 1, "a parameter name (string)", name, 3) end
  local want = param_type(name)
  if want and want ~= kind then
    error(("bad argument #1 to '%s' ('%s' is a %s parameter: set it with set_criterion_param_%s)"):format(method,
      name, want, want), 3)
  end
  self.criterion_params[name] = v
end
function Benchmark:set_criterion_param_float64(name, v)
  v = check_number("set_criterion_param_float64", v, {least = 0, what = "a number >= 0"}, 2)
  set_param(self, "set_criterion_param_float64", "float64", name, v)
  return self
end
function Benchmark:set_criterion_param_int64(name, v)
  v = check_integer("set_criterion_param_int64", v, 0, 2)
  set_param(self, "set_criterion_param_int64", "int64", name, v)
  return self
end
function Benchmark:set_criterion_param_string(name, v)
  if type(v) ~= "string" then arg_error("set_criterion_param_string", 2, "a string", v, 2) end
  set_param(self, "set_criterion_param_string", "string", name, v)
  return self
end

-- --- states -------------------------------------------------------------------------

local State = {}
M.State = State

-- state.stream is made when first asked for (nil for a cpu-only state
-- without set_stream); everything else is State's.
function State.__index(self, key)
  if key == "stream" then
    if not rawget(self, "device") and not rawget(self, "stream_set") then return nil end
    return self:get_stream()
  end
  return State[key]
end

local function lookup(self, name, kind, what)
  local v = self.values[name]
  if v == nil then
    return nil, ("state:get_%s(%s): the benchmark '%s' has no axis of that name"):format(what, describe(name), self.bench.name)
  end
  local have = self.kinds[name]
  if have ~= kind and not (kind == "string" and have == "type") then
    return nil, ("state:get_%s('%s'): the axis is a %s axis"):format(what, name, have)
  end
  return v
end

local DEFAULT_CHECKS = {
  int64 = function(d) return math.type(d) == "integer" and d or (type(d) == "number" and math.tointeger(d)) or nil end,
  float64 = function(d) return type(d) == "number" and d + 0.0 or nil end,
  string = function(d) return type(d) == "string" and d or nil end,
}

local function getter(kind)
  return function(self, name)
    local v, why = lookup(self, name, kind, kind)
    if v == nil then error(why, 2) end
    return v
  end
end
-- NVBench returns the default on any failure: no such axis, or one of another type.
local function getter_or_default(kind)
  return function(self, name, default)
    local d = DEFAULT_CHECKS[kind](default)
    if d == nil then arg_error("get_" .. kind .. "_or_default", 2, "a default " .. kind, default, 2) end
    local v = lookup(self, name, kind, kind)
    if v == nil then return d end
    return v
  end
end
State.get_int64, State.get_int64_or_default = getter("int64"), getter_or_default("int64")
State.get_float64, State.get_float64_or_default = getter("float64"), getter_or_default("float64")
State.get_string, State.get_string_or_default = getter("string"), getter_or_default("string")

-- A copy: {Axis = value} (pow2 axes as 2^e, type axes as their type names).
function State:get_axis_values()
  local copy = {}
  for k, v in pairs(self.values) do copy[k] = v end
  return copy
end

-- "Device=0 T=double Bytes=2^16", as NVBench's; color: its italic names and bold values.
function State:get_axis_values_as_string(color)
  if color ~= nil and type(color) ~= "boolean" then arg_error("get_axis_values_as_string", 1, "a boolean", color, 2) end
  local words = {}
  local function word(key, value)
    if color then key, value = "\27[3m" .. key .. "\27[0m", "\27[1m" .. value .. "\27[0m" end
    words[#words + 1] = key .. "=" .. value
  end
  if self.device then word("Device", tostring(self.device.id)) end
  for _, axis in ipairs(self.axes) do word(axis.name, axes_mod.short(axis, self.index[axis.name])) end
  return table.concat(words, " ")
end

-- "copy [Device=0 T=double]": the benchmark's name and the state's axis values.
function State:get_short_description()
  return ("%s [%s]"):format(self.bench.name, self:get_axis_values_as_string())
end

function State:get_benchmark() return self.bench end
-- The device's id, as NVBench's (state.device is the cuda.Device); nil for cpu-only states.
function State:get_device() return self.device and self.device.id or nil end
function State:has_device() return self.device ~= nil end
function State:has_printers() return self.runner.log ~= nil end
function State:get_stopping_criterion() return self.criterion end

-- The stream the measurement times and synchronizes: set_stream's, or the
-- state's own, made now on the state's device (closed after the state).
function State:get_stream()
  local s = rawget(self, "stream_set") or rawget(self, "stream_own")
  if s then return s end
  if not self.device then
    error("state:get_stream: a cpu-only state has no device, so no stream (set one with state:set_stream)", 2)
  end
  s = self.device:create_stream()
  rawset(self, "stream_own", s)
  return s
end

local STREAM = "cuda.Stream"

-- The device of an open cuda.Stream, or nil and why not.
local function stream_device(s)
  local meta = debug.getregistry()[STREAM]   -- nil until cuda is loaded: then nothing is a stream
  if meta == nil or getmetatable(s) ~= meta then
    return nil, ("a cuda.Stream expected, got %s (cudalua has no __cuda_stream__ protocol)"):format(describe(s))
  end
  local ok, dev = pcall(function() return s.device end)
  if not ok then return nil, "the cuda.Stream is closed" end
  return dev
end

-- NVBench's state.set_stream: the measurement times and synchronizes s (a
-- cuda.Stream of the state's device) instead of the state's own. Call it
-- before state:exec, not from the function exec measures.
function State:set_stream(s)
  if self.in_exec then error("state:set_stream: call it before state:exec, not from the function exec measures", 2) end
  local dev, why = stream_device(s)
  if not dev then error("bad argument #1 to 'set_stream' (" .. why .. ")", 2) end
  if self.device and dev.id ~= self.device.id then
    error(("bad argument #1 to 'set_stream' (the stream is on device %d; this state runs on device %d)"):format(dev.id,
      self.device.id), 2)
  end
  rawset(self, "stream_set", s)
end

local function check_column(method, column, level)
  if column ~= nil and type(column) ~= "string" then
    arg_error(method, 2, "a column name (string) or nil", column, level or 3)
  end
  return column
end

-- Appends a summary record (the contract with cuda.bench.run: see the top).
local function record(self, s)
  s.before_exec, s.execs_before = not self.exec_started, #self.measurements
  self.user_summaries[#self.user_summaries + 1] = s
end

-- add_element_count(n [, column]): n more elements for Elem/s; a column
-- name also records nv/element_count/NAME, as NVBench's.
function State:add_element_count(n, column)
  n = check_integer("add_element_count", n, 0)
  check_column("add_element_count", column)
  self.element_count = self.element_count + n
  if column and column ~= "" then
    record(self, {tag = "nv/element_count/" .. column, name = column, description = "Number of elements: " .. column,
      type = "int64", value = n})
  end
end
function State:set_element_count(n) self.element_count = check_integer("set_element_count", n, 0) end
function State:get_element_count() return self.element_count end

local function add_bytes(self, method, what, n, column)
  n = check_integer(method, n, 0, 1, 4)
  check_column(method, column, 4)
  self.global_bytes = self.global_bytes + n
  if column and column ~= "" then
    record(self, {tag = ("nv/gmem/%s/%s"):format(what, column), name = column, hint = "bytes", type = "int64", value = n})
  end
end
-- Bytes read or written for GlobalMem BW and BWUtil; a column name also
-- records nv/gmem/reads/NAME (or writes), hint "bytes", as NVBench's.
function State:add_global_memory_reads(n, column) add_bytes(self, "add_global_memory_reads", "reads", n, column) end
function State:add_global_memory_writes(n, column) add_bytes(self, "add_global_memory_writes", "writes", n, column) end

-- A column of the state's row: NVBench's nv/python/NAME, "User tag: NAME".
function State:add_summary(name, value)
  if type(name) ~= "string" or name == "" then arg_error("add_summary", 1, "a column name (non-empty string)", name, 2) end
  local t = math.type(value) == "integer" and "int64" or type(value) == "number" and "float64"
    or type(value) == "string" and "string"
  if not t then arg_error("add_summary", 2, "an integer, number or string", value, 2) end
  record(self, {tag = "nv/python/" .. name, name = name, description = "User tag: " .. name, type = t, value = value})
end

-- skip(reason): a later exec returns at once; as NVBench's, "" is no reason (not skipped).
function State:skip(reason)
  if type(reason) ~= "string" then error("bad argument #1 to 'skip' (a reason string expected)", 2) end
  self.skip_reason = reason
end
function State:is_skipped() return self.skip_reason ~= "" end
function State:get_skip_reason() return self.skip_reason end

-- Settings a state may change for itself, as NVBench's state setters and getters.
for key, setting in pairs(SETTINGS) do
  if setting.state then
    local method = "set_" .. key
    State[method] = function(self, v) self[key] = setting.check(method, v) end
    State["get_" .. key] = function(self) return self[key] end
  end
end

-- The kernel of a name expression with the state's type axes substituted
-- ("copy<T>" -> "copy<double>"), compiled once per device and expression.
-- opts: the cuda.Program options (arch defaults to the device's).
function State:get_kernel(source, expression, opts)
  if type(source) ~= "string" then error("bad argument #1 to 'get_kernel' (kernel source expected)", 2) end
  if type(expression) ~= "string" then error("bad argument #2 to 'get_kernel' (a name expression expected)", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("bad argument #3 to 'get_kernel' (an option table expected)", 2) end
  if not self.device then
    error("state:get_kernel: a cpu-only state has no device to compile the kernel for (set_is_cpu_only(true))", 2)
  end
  local types = {}
  for name, kind in pairs(self.kinds) do if kind == "type" then types[name] = self.values[name] end end
  local name = expression:gsub("[%a_][%w_]*", types)
  local cache = self.bench.kernel_cache or {}
  self.bench.kernel_cache = cache
  local key = self.device.id .. "\0" .. source .. "\0" .. name
  local k = cache[key]
  if k then return k end
  local cuda = require "cuda"
  local options = {arch = "sm_" .. self.device.arch}
  for key2, v in pairs(opts or {}) do options[key2] = v end
  local obj = cuda.Program(source, "c++", options):compile("cubin", {name_expressions = {name}})
  k = obj:get_kernel(name)
  cache[key] = k
  return k
end

-- --- exec ---------------------------------------------------------------------------

local EXEC_OPTIONS = {sync = true, timer = true, batched = true}

local function check_exec_options(opts)
  if opts ~= nil and type(opts) ~= "table" then error("bad argument #2 to 'exec' (an option table expected)", 3) end
  opts = opts or {}
  for k in pairs(opts) do
    if not EXEC_OPTIONS[k] then
      error(("bad argument #2 to 'exec' (unknown option %s (known: sync, timer, batched))"):format(describe(k)), 3)
    end
  end
  local batched = opts.batched
  if batched ~= nil and type(batched) ~= "boolean" and batched ~= "graph" then
    error(("bad argument #2 to 'exec' (batched must be true, false or \"graph\", not %s)"):format(
      type(batched) == "string" and ("%q"):format(batched) or type(batched)), 3)
  end
  if opts.timer and batched then error("bad argument #2 to 'exec' (timer = true cannot be batched)", 3) end
  return opts
end

-- Under the ci criterion a batch target left at NVBench's 0.5 s becomes
-- CI_BATCH_TARGET: the mean of back-to-back launches over 50 ms is known
-- far better than ci's 0.5% (the events' resolution is a few 1e-5 of it),
-- and the batch would otherwise take most of a state's wall time.
local function batch_target(self)
  if criterion_name(self.criterion) == "ci" and self.batch_target_time == DEFAULT_BATCH_TARGET then
    return CI_BATCH_TARGET
  end
  return self.batch_target_time
end

-- The measurement's settings, from the state's (cuda.bench.measure's cfg).
function State:exec_cfg(opts, stream)
  local runner = self.runner
  return {
    dev = self.device, stream = stream, launch = {stream = stream, get_stream = function() return stream end},
    clock = runner.clock,
    criterion = criterion_name(self.criterion), params = criterion_params(self.criterion, self.criterion_params),
    min_samples = self.min_samples, timeout = self.timeout, skip_time = self.skip_time, run_once = self.run_once,
    sync = opts.sync, timer = opts.timer, warmup_runs = self.cold_warmup_runs,
    max_warmup_walltime = self.cold_max_warmup_walltime,
    blocking = not self.disable_blocking_kernel and not runner.no_blocking,
    blocking_timeout = self.blocking_kernel_timeout, l2_bytes = runner.l2_bytes, l2_flush = runner.l2_flush,
    batch_target_time = batch_target(self), graph = opts.batched == "graph",
  }
end

-- The stream exec measures: set_stream's (still open?) or the state's own; nil for cpu-only.
local function exec_stream(self)
  local given = rawget(self, "stream_set")
  if given then
    local dev, why = stream_device(given)
    if not dev then error("state:exec: the stream given to state:set_stream: " .. why, 3) end
    return given
  end
  if self.device then return self:get_stream() end
  return nil
end

local function measure_gpu(self, fn, opts, cfg)
  -- with sync the clock is still read, nothing dropped (NVBench's threshold 0; measure.lua)
  if (self.throttle_threshold > 0 or opts.sync) and not self.run_once then
    local source = self.runner.clock_source and self.runner.clock_source(self.device, cfg.stream)
    if source then
      cfg.throttle = throttle.watcher(source, {threshold = self.throttle_threshold,
        recovery_delay = self.throttle_recovery_delay, sleep = self.runner.sleep})
    end
  end
  local cold = measure.cold(fn, cfg)
  if cold.skipped then self.skip_reason = cold.skipped; return nil end
  local m = {cold = cold}
  if opts.batched ~= false and not opts.sync and not opts.timer and not self.run_once and not self.bench.skip_batched then
    m.batch = measure.batch(fn, cfg)
  end
  return m
end

-- state:exec(fn [, {sync =, timer =, batched =}]): measures fn(launch), or
-- fn(launch, timer) with timer = true (the function brackets its region
-- with timer:start() and timer:stop()). sync = true: fn synchronizes
-- itself (no blocking kernel, no throttle watch, no batch; as NVBench's,
-- the state keeps those settings). batched = false: no batch;
-- batched = "graph": the batch replays fn's launches captured into a graph.
-- A second exec measures again (NVBench's): see st.measurements.
function State:exec(fn, opts)
  if type(fn) ~= "function" then error("bad argument #1 to 'exec' (a function expected)", 2) end
  opts = check_exec_options(opts)
  if self.in_exec then error("state:exec: called from the function another state:exec measures", 2) end
  self.exec_started = true
  if opts.sync then self.disable_blocking_kernel, self.throttle_threshold = true, 0.0 end
  if self:is_skipped() then return end
  if not self.device and not self.bench.is_cpu_only then
    error("state:exec: this state of a GPU benchmark has no device to run on", 2)
  end
  local cfg = self:exec_cfg(opts, exec_stream(self))
  self.in_exec = true
  local ok, m = pcall(function()
    if self.bench.is_cpu_only then
      local cpu = measure.cpu_only(fn, cfg)
      if cpu.skipped then self.skip_reason = cpu.skipped; return nil end
      return {cpu_only = cpu}
    end
    return measure_gpu(self, fn, opts, cfg)
  end)
  self.in_exec = false
  if not ok then error(m, 0) end
  if not m then return end
  self.measurements[#self.measurements + 1] = m
  if #self.measurements == 1 then self.cold, self.batch, self.cpu_only = m.cold, m.batch, m.cpu_only end
end

-- --- the states of a benchmark on a device -------------------------------------------

-- The state's name as NVBench writes it: "Device=0 T=double Bytes=2^16".
function M.state_name(dev_id, axes, idx)
  local words = {dev_id and ("Device=%d"):format(dev_id) or nil}
  for _, axis in ipairs(axes) do words[#words + 1] = axis.name .. "=" .. axes_mod.short(axis, idx[axis.name]) end
  return table.concat(words, " ")
end

-- A state of bench on dev (nil: cpu-only). stream: the stream it uses, or
-- nil for its own (made when first asked for; M.close_state closes it).
function M.new_state(bench, axes, idx, runner, dev, stream)
  local values, kinds = {}, {}
  for _, axis in ipairs(axes) do
    values[axis.name], kinds[axis.name] = axis.values[idx[axis.name]], axis.kind
  end
  local params = {}
  for k, v in pairs(runner.criterion_params or {}) do params[k] = v end
  for k, v in pairs(bench.criterion_params) do if params[k] == nil then params[k] = v end end
  return setmetatable({
    bench = bench, axes = axes, index = idx, values = values, kinds = kinds, runner = runner,
    device = dev, stream_set = stream, element_count = 0, global_bytes = 0, user_summaries = {},
    measurements = {}, skip_reason = "", exec_started = false, in_exec = false,
    min_samples = runner.min_samples or bench.min_samples, timeout = runner.timeout or bench.timeout,
    criterion = runner.criterion or bench.criterion, criterion_params = params,
    throttle_threshold = runner.throttle_threshold or bench.throttle_threshold,
    throttle_recovery_delay = bench.throttle_recovery_delay, skip_time = bench.skip_time,
    run_once = runner.run_once or bench.run_once, disable_blocking_kernel = bench.disable_blocking_kernel,
    blocking_kernel_timeout = bench.blocking_kernel_timeout, batch_target_time = bench.batch_target_time,
    cold_warmup_runs = bench.cold_warmup_runs, cold_max_warmup_walltime = bench.cold_max_warmup_walltime,
    name = M.state_name(dev and dev.id, axes, idx),
  }, State)
end

-- After a state: its own stream, if one was made, is synchronized and closed.
function M.close_state(st)
  local own = rawget(st, "stream_own")
  if own then
    pcall(own.sync, own)
    pcall(own.close, own)
  end
end

return M
