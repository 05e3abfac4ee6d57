-- cuda.bench.harness: NVBench-shaped benchmarks (bench.register), their states, and running them.
-- SPDX-License-Identifier: MIT
--
--   local b = bench.register(function(state) ... state:exec(function(launch) ... end) end)
--   b:set_name("copy"):add_type_axis("T", {"uint8_t", "double"})
--    :add_int64_power_of_two_axis("Bytes", {16, 20, 24})
--
-- Each benchmark's states (the product of its axes, or its zipped or own
-- iteration space) run on each chosen device; fn(state) reads its axis
-- values, declares its throughput, and calls state:exec once. Results are
-- NVBench's summaries (tag, name, hint, value), written by cuda.bench.output.
local axes_mod = require "cuda.bench.axes"
local criteria = require "cuda.bench.criteria"
local measure = require "cuda.bench.measure"
local throttle = require "cuda.bench.throttle"

local M = {}

M.registry = {}

-- --- benchmarks -----------------------------------------------------------------

local Benchmark = {}
Benchmark.__index = Benchmark
M.Benchmark = Benchmark

local function check_number(method, v, least)
  if type(v) ~= "number" or v ~= v or v < (least or 0) then
    error(("bad argument #1 to '%s' (a number >= %s expected, got %s)"):format(method, least or 0, tostring(v)), 3)
  end
  return v
end

local function check_count(method, v, least)
  local n = math.type(v) == "integer" and v or (type(v) == "number" and math.tointeger(v))
  if not n or n < (least or 0) then
    error(("bad argument #1 to '%s' (an integer >= %d expected, got %s)"):format(method, least or 0, tostring(v)), 3)
  end
  return n
end

local function check_bool(method, v)
  if type(v) ~= "boolean" then error(("bad argument #1 to '%s' (a boolean expected, got %s)"):format(method, type(v)), 3) end
  return v
end

-- bench.register(fn) -> a benchmark named after fn's source line.
function M.register(fn)
  if type(fn) ~= "function" then
    error(("bad argument #1 to 'register' (a function expected, got %s)"):format(type(fn)), 2)
  end
  local info = debug.getinfo(fn, "S")
  local b = setmetatable({
    fn = fn, name = ("%s:%d"):format((info.short_src or "?"):match("[^/]*$"), info.linedefined or 0),
    axes = {}, zips = {}, space = nil, min_samples = 10, timeout = 15.0, skip_time = -1.0,
    throttle_threshold = throttle.DEFAULT_THRESHOLD, throttle_recovery_delay = throttle.DEFAULT_RECOVERY_DELAY,
    is_cpu_only = false, run_once = false, batch_target_time = 0.5, cold_warmup_runs = 1,
    cold_max_warmup_walltime = -1.0, criterion = "stdrel", criterion_params = {},
    disable_blocking_kernel = false, blocking_kernel_timeout = 30.0,
  }, Benchmark)
  M.registry[#M.registry + 1] = b
  return b
end

function Benchmark:get_name() return self.name end

function Benchmark:add_axis_(name, kind, values, flags)
  if axes_mod.find(self.axes, name) then error(("axis '%s' already exists"):format(tostring(name)), 3) end
  self.axes[#self.axes + 1] = axes_mod.new(name, kind, values, flags, 3)
  return self
end
function Benchmark:add_int64_axis(name, values) return self:add_axis_(name, "int64", values) end
function Benchmark:add_int64_power_of_two_axis(name, values) return self:add_axis_(name, "int64", values, "pow2") end
function Benchmark:add_float64_axis(name, values) return self:add_axis_(name, "float64", values) end
function Benchmark:add_string_axis(name, values) return self:add_axis_(name, "string", values) end
-- C++ type names, substituted for name in the kernel expressions of state:get_kernel.
function Benchmark:add_type_axis(name, values) return self:add_axis_(name, "type", values) end

-- Walks the named axes together (their values pairwise) instead of their product.
function Benchmark:zip_axes(names)
  if type(names) ~= "table" or #names < 2 then error("bad argument #1 to 'zip_axes' (a list of 2 or more axis names expected)", 2) end
  for _, name in ipairs(names) do
    if not axes_mod.find(self.axes, name) then error(("bad argument #1 to 'zip_axes' (no axis named '%s')"):format(tostring(name)), 2) end
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
function Benchmark:set_min_samples(n) self.min_samples = check_count("set_min_samples", n, 1); return self end
function Benchmark:set_timeout(s) self.timeout = check_number("set_timeout", s); return self end
function Benchmark:set_skip_time(s)
  if type(s) ~= "number" or s ~= s then error("bad argument #1 to 'set_skip_time' (a number expected)", 2) end
  self.skip_time = s
  return self
end
function Benchmark:set_throttle_threshold(f) self.throttle_threshold = check_number("set_throttle_threshold", f); return self end
function Benchmark:set_throttle_recovery_delay(s)
  self.throttle_recovery_delay = check_number("set_throttle_recovery_delay", s)
  return self
end
function Benchmark:set_is_cpu_only(v) self.is_cpu_only = check_bool("set_is_cpu_only", v); return self end
function Benchmark:set_run_once(v) self.run_once = check_bool("set_run_once", v); return self end
function Benchmark:set_disable_blocking_kernel(v) self.disable_blocking_kernel = check_bool("set_disable_blocking_kernel", v); return self end
function Benchmark:set_blocking_kernel_timeout(s) self.blocking_kernel_timeout = check_number("set_blocking_kernel_timeout", s); return self end
function Benchmark:set_batch_target_time(s) self.batch_target_time = check_number("set_batch_target_time", s); return self end
function Benchmark:set_cold_warmup_runs(n) self.cold_warmup_runs = check_count("set_cold_warmup_runs", n, 1); return self end
function Benchmark:set_cold_max_warmup_walltime(s)
  if type(s) ~= "number" or s ~= s then error("bad argument #1 to 'set_cold_max_warmup_walltime' (a number expected)", 2) end
  self.cold_max_warmup_walltime = s
  return self
end

-- set_stopping_criterion(name [, params]): "stdrel" {["max-noise"], ["min-time"]},
-- "entropy" {["max-angle"], ["min-r2"]}, "sample_count" {["sample-count"]}.
function Benchmark:set_stopping_criterion(name, params)
  if not criteria.PARAMS[name] then
    error(("bad argument #1 to 'set_stopping_criterion' (unknown criterion '%s'; known: %s)"):format(tostring(name),
      table.concat(criteria.NAMES, ", ")), 2)
  end
  if params ~= nil and type(params) ~= "table" then error("bad argument #2 to 'set_stopping_criterion' (a table expected)", 2) end
  local ok, why = pcall(criteria.params, name, params)
  if not ok then error("bad argument #2 to 'set_stopping_criterion' (" .. tostring(why):gsub("^[^:]*:%d+: ", "") .. ")", 2) end
  self.criterion = name
  for k, v in pairs(params or {}) do self.criterion_params[k] = v end
  return self
end
function Benchmark:set_criterion_param_float64(name, v)
  if type(name) ~= "string" then error("bad argument #1 to 'set_criterion_param_float64' (a string expected)", 2) end
  self.criterion_params[name] = check_number("set_criterion_param_float64", v)
  return self
end
function Benchmark:set_criterion_param_int64(name, v)
  if type(name) ~= "string" then error("bad argument #1 to 'set_criterion_param_int64' (a string expected)", 2) end
  self.criterion_params[name] = check_count("set_criterion_param_int64", v, 0)
  return self
end

-- --- states -------------------------------------------------------------------------

local State = {}
State.__index = State
M.State = State

local function getter(kind, what)
  return function(self, name)
    local v = self.values[name]
    if v == nil then
      error(("state:get_%s('%s'): the benchmark '%s' has no axis of that name"):format(what, tostring(name), self.bench.name), 2)
    end
    if self.kinds[name] ~= kind and not (kind == "string" and self.kinds[name] == "type") then
      error(("state:get_%s('%s'): the axis is a %s axis"):format(what, name, self.kinds[name]), 2)
    end
    return v
  end
end
local function getter_or_default(kind, what)
  local get = getter(kind, what)
  return function(self, name, default)
    if self.values[name] == nil then return default end
    return get(self, name)
  end
end
State.get_int64, State.get_int64_or_default = getter("int64", "int64"), getter_or_default("int64", "int64")
State.get_float64, State.get_float64_or_default = getter("float64", "float64"), getter_or_default("float64", "float64")
State.get_string, State.get_string_or_default = getter("string", "string"), getter_or_default("string", "string")

function State:get_axis_values() return self.values end
function State:get_device() return self.device end
function State:get_stream() return self.stream end
function State:get_stopping_criterion() return self.criterion end
function State:has_device() return self.device ~= nil end

local function check_bytes(method, n)
  local v = math.type(n) == "integer" and n or (type(n) == "number" and math.tointeger(n))
  if not v or v < 0 then
    error(("bad argument #1 to '%s' (an integer >= 0 expected, got %s)"):format(method, tostring(n)), 3)
  end
  return v
end

function State:add_element_count(n, column)
  self.element_count = self.element_count + check_bytes("add_element_count", n)
  if column then self:add_summary(column, n) end
end
function State:set_element_count(n) self.element_count = check_bytes("set_element_count", n) end
function State:get_element_count() return self.element_count end
function State:add_global_memory_reads(n, column)
  self.global_bytes = self.global_bytes + check_bytes("add_global_memory_reads", n)
  if column and column ~= "" then self:add_summary(column, n) end
end
function State:add_global_memory_writes(n, column)
  self.global_bytes = self.global_bytes + check_bytes("add_global_memory_writes", n)
  if column and column ~= "" then self:add_summary(column, n) end
end

-- A column of the state's row: name, value (integer, number or string).
function State:add_summary(name, value)
  if type(name) ~= "string" or name == "" then error("bad argument #1 to 'add_summary' (a column name expected)", 2) end
  local t = math.type(value) == "integer" and "int64" or type(value) == "number" and "float64"
    or type(value) == "string" and "string"
  if not t then error(("bad argument #2 to 'add_summary' (a number or string expected, got %s)"):format(type(value)), 2) end
  self.user_summaries[#self.user_summaries + 1] = {tag = "user/" .. name, name = name, type = t, value = value}
end

function State:skip(reason)
  if type(reason) ~= "string" then error("bad argument #1 to 'skip' (a reason string expected)", 2) end
  self.skip_reason = reason
end
function State:is_skipped() return self.skip_reason ~= nil end
function State:get_skip_reason() return self.skip_reason end

-- Settings a state may change for itself, as NVBench's state setters.
function State:set_min_samples(n) self.min_samples = check_count("set_min_samples", n, 1) end
function State:set_timeout(s) self.timeout = check_number("set_timeout", s) end
function State:set_throttle_threshold(f) self.throttle_threshold = check_number("set_throttle_threshold", f) end
function State:set_run_once(v) self.run_once = check_bool("set_run_once", v) end
function State:set_disable_blocking_kernel(v) self.disable_blocking_kernel = check_bool("set_disable_blocking_kernel", v) end
function State:set_blocking_kernel_timeout(s) self.blocking_kernel_timeout = check_number("set_blocking_kernel_timeout", s) end

-- The kernel of a name expression with the state's type axes substituted
-- ("copy<T>" -> "copy<double>"), compiled once per device and expression.
-- opts: the cuda.Program options (arch defaults to the device's).
function State:get_kernel(source, expression, opts)
  if type(source) ~= "string" then error("bad argument #1 to 'get_kernel' (kernel source expected)", 2) end
  if type(expression) ~= "string" then error("bad argument #2 to 'get_kernel' (a name expression expected)", 2) end
  local types = {}
  for name, kind in pairs(self.kinds) do if kind == "type" then types[name] = self.values[name] end end
  local name = expression:gsub("[%a_][%w_]*", types)
  local cache = self.bench.kernel_cache
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

-- state:exec(fn [, {sync =, timer =, batched =}]): measures fn(launch), or
-- fn(launch, timer) with timer = true (the function brackets its region
-- with timer:start() and timer:stop()). sync = true: fn synchronizes
-- itself (no blocking kernel, no batch). batched = false: no batch;
-- batched = "graph": the batch replays fn's launches captured into a graph.
function State:exec(fn, opts)
  if type(fn) ~= "function" then error("bad argument #1 to 'exec' (a function expected)", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("bad argument #2 to 'exec' (an option table expected)", 2) end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "sync" and k ~= "timer" and k ~= "batched" then
      error(("bad argument #2 to 'exec' (unknown option '%s' (known: sync, timer, batched))"):format(tostring(k)), 2)
    end
  end
  if self.executed then error("state:exec called twice in one state", 2) end
  local batched = opts.batched
  if batched ~= nil and type(batched) ~= "boolean" and batched ~= "graph" then
    error(("bad argument #2 to 'exec' (batched must be true, false or \"graph\", not %s)"):format(
      type(batched) == "string" and ("%q"):format(batched) or type(batched)), 2)
  end
  if opts.timer and batched then error("bad argument #2 to 'exec' (timer = true cannot be batched)", 2) end
  self.executed = true
  if self.skip_reason then return end
  local runner = self.runner
  local cfg = {
    dev = self.device, stream = self.stream, launch = self.launch, clock = runner.clock,
    criterion = self.criterion, params = self.criterion_params, min_samples = self.min_samples,
    timeout = self.timeout, skip_time = self.bench.skip_time, run_once = self.run_once,
    sync = opts.sync, timer = opts.timer, warmup_runs = self.bench.cold_warmup_runs,
    max_warmup_walltime = self.bench.cold_max_warmup_walltime,
    blocking = not self.disable_blocking_kernel and not runner.no_blocking,
    blocking_timeout = self.blocking_kernel_timeout, l2_bytes = runner.l2_bytes, l2_flush = runner.l2_flush,
    batch_target_time = self.bench.batch_target_time, graph = batched == "graph",
  }
  if self.bench.is_cpu_only then
    self.cpu_only = measure.cpu_only(fn, cfg)
    if self.cpu_only.skipped then self.skip_reason, self.cpu_only = self.cpu_only.skipped, nil end
    return
  end
  if self.throttle_threshold > 0 then
    local source = runner.clock_source and runner.clock_source(self.device, self.stream)
    if source then
      cfg.throttle = throttle.watcher(source, {threshold = self.throttle_threshold,
        recovery_delay = self.bench.throttle_recovery_delay, sleep = runner.sleep})
    end
  end
  self.cold = measure.cold(fn, cfg)
  if self.cold.skipped then self.skip_reason = self.cold.skipped; return end
  if self.cold.timed_out then error(self.cold.timed_out, 0) end
  if opts.batched ~= false and not opts.sync and not opts.timer and not self.run_once then
    self.batch = measure.batch(fn, cfg)
    if self.batch.timed_out then error(self.batch.timed_out, 0) end
  end
end

-- --- the states of a benchmark on a device -------------------------------------------

-- The state's name as NVBench writes it: "Device=0 T=double Bytes=2^16".
local function state_name(dev_id, axes, idx)
  local words = {dev_id and ("Device=%d"):format(dev_id) or nil}
  for _, axis in ipairs(axes) do words[#words + 1] = axis.name .. "=" .. axes_mod.short(axis, idx[axis.name]) end
  return table.concat(words, " ")
end

function M.new_state(bench, axes, idx, runner, dev, stream)
  local values, kinds = {}, {}
  for _, axis in ipairs(axes) do
    values[axis.name], kinds[axis.name] = axis.values[idx[axis.name]], axis.kind
  end
  local params = {}
  for k, v in pairs(runner.criterion_params or {}) do params[k] = v end
  for k, v in pairs(bench.criterion_params) do if params[k] == nil then params[k] = v end end
  local st = setmetatable({
    bench = bench, axes = axes, index = idx, values = values, kinds = kinds, runner = runner,
    device = dev, stream = stream, launch = {stream = stream, get_stream = function() return stream end},
    element_count = 0, global_bytes = 0, user_summaries = {},
    min_samples = runner.min_samples or bench.min_samples, timeout = runner.timeout or bench.timeout,
    criterion = runner.criterion or bench.criterion, criterion_params = params,
    throttle_threshold = runner.throttle_threshold or bench.throttle_threshold,
    run_once = runner.run_once or bench.run_once, disable_blocking_kernel = bench.disable_blocking_kernel,
    blocking_kernel_timeout = bench.blocking_kernel_timeout,
    name = state_name(dev and dev.id, axes, idx),
  }, State)
  return st
end

return M
