-- cuda.system (src/nvml.c) against a hostile NVML: the fake NVML's hostile
-- modes (t/fake/nvml.c: FAKENVML_HOSTILE, fakecuda.nvml_hostile). Strings
-- that fill their whole buffer without a NUL, calls that fail (every one,
-- or each nth call of a sweep in turn), and absurd numbers (0, UINT_MAX,
-- values whose products overflow 64 bits, each range's edges). Every entry
-- point of cuda.system must give the true value, nil and a reason, or a
-- clear error: never a crash, bytes past a buffer, or a negative or
-- wrapped number.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()
local sys = cuda.system

local seed = tonumber(os.getenv("NVML_HOSTILE_SEED")) or os.time()
math.randomseed(seed)
t.diag("seed " .. seed .. " (NVML_HOSTILE_SEED replays it)")

local UINT_MAX = 0xffffffff
local KINDS = {"graphics", "sm", "memory", "video"}
local FIELDS = {"id", "index", "name", "uuid", "pci_bus_id", "memory_bus_width", "peak_memory_bandwidth", "pcie",
                "temperature", "power_usage", "power_limit", "utilization", "ecc", "persistence_mode",
                "compute_mode", "mig_mode", "nvlink"}

-- Every entry point of cuda.system, each result as {ok, values...} (pcall's)
-- under a name; nd is a cuda.system.Device made while NVML behaved.
local function sweep(nd)
  local r = {}
  local function call(name, fn, ...) r[name] = table.pack(pcall(fn, ...)) end
  call("is_available", sys.is_available)
  call("device_count", sys.device_count)
  call("get_num_devices", sys.get_num_devices)
  call("driver_version", function() return sys.driver_version end)
  call("nvml_version", function() return sys.nvml_version end)
  call("get_driver_version", sys.get_driver_version)
  call("get_driver_version(true)", sys.get_driver_version, true)
  call("get_nvml_version", sys.get_nvml_version)
  call("Device(0)", function() return sys.Device(0).id end)
  for _, f in ipairs(FIELDS) do
    call("nd." .. f, function() return nd[f] end)
    call("nd:get " .. f, nd.get, nd, f)
  end
  for _, k in ipairs(KINDS) do
    call("clock " .. k, nd.clock, nd, k)
    call("max_clock " .. k, nd.max_clock, nd, k)
    call("application_clock " .. k, nd.application_clock, nd, k)
  end
  call("clock_event_reasons()", nd.clock_event_reasons, nd)
  call("nd:get clock_event_reasons", nd.get, nd, "clock_event_reasons")
  call("tostring", tostring, nd)
  return r
end

-- A value as text, tables by their sorted contents: results compare as strings.
local function show(v)
  if type(v) == "string" then return (v:gsub("[^\32-\126]", function(c) return ("\\%d"):format(c:byte()) end)) end
  if type(v) ~= "table" then return math.type(v) and (math.type(v) .. " " .. tostring(v)) or tostring(v) end
  local keys = {}
  for k in pairs(v) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  local parts = {}
  for _, k in ipairs(keys) do parts[#parts + 1] = tostring(k) .. "=" .. show(v[k]) end
  return "{" .. table.concat(parts, ",") .. "}"
end
local function show_result(res)
  if not res[1] then return "error" end
  local parts = {}
  for i = 2, res.n do parts[#parts + 1] = show(res[i]) end
  return table.concat(parts, " ")
end

local function error_text(e) return type(e) == "table" and tostring(e.message) or tostring(e) end
-- a clean error: a string or a cuda.Error, saying something
local function clean_error(e)
  return (type(e) == "string" or getmetatable(e) == cuda.Error) and #error_text(e) > 0
end
-- every number in v (tables too) is a finite non-negative number
local function sane_numbers(v)
  if type(v) == "number" then return v >= 0 and v == v and v < math.huge end
  if type(v) == "table" then
    for _, x in pairs(v) do if not sane_numbers(x) then return false end end
  end
  return true
end

local function is_nil_with_reason(res)
  return res[1] and res[2] == nil and (res.n < 3 or (type(res[3]) == "string" and res[3]:find("nvml%u%a+") ~= nil))
end
-- a table whose every entry is calm's (the rest unknown: the PCIe link's four calls)
local function part_of(got, calm)
  if type(got) ~= "table" or type(calm) ~= "table" then return false end
  for k, v in pairs(got) do if show(v) ~= show(calm[k]) then return false end end
  return true
end

-- Check one result against what was expected: want is a result-shaped
-- table {true, values...}, or "nil" (nil and a reason naming an NVML entry
-- point), or "error" (a clean error), or "calm-or-unknown" with calm: the
-- calm value (or part of it), nil and a reason, or a clean error. Returns
-- nil, or why not.
local function mismatch(name, res, want, calm)
  if not res[1] and not clean_error(res[2]) then return name .. ": an unclean error: " .. tostring(res[2]) end
  for i = 2, res[1] and res.n or 1 do
    if not sane_numbers(res[i]) then return name .. ": a negative or non-finite number: " .. show_result(res) end
  end
  local got = show_result(res)
  if want == "error" then
    if res[1] then return name .. ": no error but " .. got end
  elseif want == "nil" then
    if not is_nil_with_reason(res) then
      return name .. ": wanted nil and a reason, got " .. (res[1] and got or error_text(res[2]))
    end
  elseif want == "calm-or-unknown" then
    if res[1] and not is_nil_with_reason(res) and got ~= show_result(calm) and not part_of(res[2], calm[2]) then
      return name .. ": neither its value (" .. show_result(calm) .. ") nor unknown: " .. got
    end
  elseif not res[1] then
    return name .. ": wanted " .. show_result(want) .. ", raised " .. error_text(res[2])
  elseif got ~= show_result(want) then
    return name .. ": wanted " .. show_result(want) .. ", got " .. got
  end
  return nil
end

-- Check a whole sweep: want[name] for each result (calm's where absent).
local function check_sweep(desc, got, want, calm)
  local bad = {}
  for name, res in pairs(got) do
    local why = mismatch(name, res, want[name] or calm[name], calm[name])
    if why then bad[#bad + 1] = why end
  end
  table.sort(bad)
  return t.ok(#bad == 0, desc .. (#bad > 0 and (": " .. table.concat(bad, "; ")) or ""))
end

local function ok_values(...) return table.pack(true, ...) end

local nd = sys.Device(0)
local calm = sweep(nd)
local calls_per_sweep = fakecuda.nvml_calls()
calm = sweep(nd)
calls_per_sweep = fakecuda.nvml_calls() - calls_per_sweep
-- the calm sweep is t/system.t's business; here only what the checks lean on
t.is(show_result(calm["nd.name"]), cuda.Device(0).name, "calm: the device's name, as a baseline")
t.ok(calls_per_sweep > 40, ("a sweep makes %d NVML calls"):format(calls_per_sweep))

-- --- strings that fill their buffer without a NUL -----------------------------
-- The fake writes the true string, then the filler over and over, to the
-- buffer's last byte: cudalua must give exactly those bytes.
local function hostile_string(true_string, filler, size)
  local s = true_string .. filler:rep(size // #filler + 1)
  return s:sub(1, size)
end
-- Lua's reading of a dotted version (independently of nvml.c): at most 8
-- numbers of at most 9 digits, from the start, up to the first character
-- that does not continue "digits(.digits)*"; nil where that is not a version.
local function version_numbers(s)
  local numbers, at = {}, 1
  while #numbers < 8 do
    local digits = s:match("^%d+", at)
    if not digits then break end
    if #digits > 9 then return nil end
    numbers[#numbers + 1] = math.tointeger(tonumber(digits))
    at = at + #digits
    if s:sub(at, at) ~= "." then break end
    at = at + 1
  end
  return #numbers > 0 and numbers or nil
end
-- 1 to 24 bytes, none NUL: digits and dots (they continue a version), signs
-- and spaces (strtol would take them), letters, and any other byte
local function random_filler()
  local pools = {"0123456789", "0123456789.", ".-+ ", "abcdefXYZ_:~"}
  local bytes = {}
  for i = 1, math.random(1, 24) do
    local pool = pools[math.random(#pools + 1)]
    local k = pool and math.random(#pool)
    bytes[i] = pool and pool:sub(k, k) or string.char(math.random(1, 255))
  end
  return table.concat(bytes)
end
local function strings_want(filler)
  local want = {}
  local function str(key, api, true_value)
    local size = fakecuda.nvml_string_size(api)
    want[key] = size and ok_values(hostile_string(true_value, filler, size)) or "error"
    return want[key]
  end
  local function str_get(field, api)
    local w = str("nd." .. field, api, calm["nd." .. field][2])
    want["nd:get " .. field] = w
  end
  str("driver_version", "nvmlSystemGetDriverVersion", calm["driver_version"][2])
  str("nvml_version", "nvmlSystemGetNVMLVersion", calm["nvml_version"][2])
  str_get("name", "nvmlDeviceGetName")
  str_get("uuid", "nvmlDeviceGetUUID")
  str_get("pci_bus_id", "nvmlDeviceGetPciInfo_v3")
  local driver = version_numbers(want.driver_version[2])
  want["get_driver_version(true)"] = driver and ok_values(table.unpack(driver)) or "error"
  local nvml = version_numbers(want.nvml_version[2])
  want["get_nvml_version"] = nvml and ok_values(table.unpack(nvml)) or "error"
  return want
end
for round = 1, 12 do
  local filler = round == 1 and "~" or round == 2 and ("9"):rep(10) or random_filler()
  fakecuda.nvml_hostile("strings", filler)
  local got = sweep(nd)
  fakecuda.nvml_hostile()
  local want = strings_want(filler)
  local size = fakecuda.nvml_string_size("nvmlDeviceGetName")
  check_sweep(("strings without a NUL (filler '%s'): exactly the %d bytes written, the rest as calm"):format(show(filler), size),
              got, want, calm)
end

-- --- failing calls -----------------------------------------------------------------
-- (2 and 3, invalid argument and not supported, also end the NVLink list:
-- the single failures leave them out)
local codes = {1, 2, 3, 6, 9, 15, 999, 12345, -7}
local single_codes = {1, 6, 9, 15, 999, 12345, -7}
do
  local code = codes[math.random(#codes)]
  fakecuda.nvml_hostile("fail", 0, code)
  local got = sweep(nd)
  fakecuda.nvml_hostile()
  local want = setmetatable({is_available = calm.is_available, device_count = ok_values(0), get_num_devices = "error",
                             driver_version = ok_values(nil), nvml_version = ok_values(nil),
                             get_driver_version = "error", ["get_driver_version(true)"] = "error",
                             get_nvml_version = "error", ["Device(0)"] = "error", ["nd.id"] = calm["nd.id"],
                             ["nd:get id"] = calm["nd:get id"], tostring = calm.tostring}, {__index = function() return "nil" end})
  local no_links = (code == 2 or code == 3) and ok_values({}) or "nil"   -- at link 0: a device without NVLink
  want["nd.nvlink"], want["nd:get nvlink"] = no_links, no_links
  local full = {}
  for name in pairs(calm) do full[name] = want[name] end
  check_sweep(("every NVML call fails (code %d): nil and reasons, clean errors"):format(code), got, full, calm)
  t.like(error_text(got.get_num_devices[2]), "^nvmlDeviceGetCount_v2: ", "every call fails: get_num_devices raises NVML's failure")
  t.like(error_text(got["Device(0)"][2]), "NVML finds no device", "every call fails: Device raises")
end
-- each call of a sweep fails in turn: its result is unknown, the others are unharmed
local failures_seen, bad = 0, {}
for nth = 1, calls_per_sweep do
  local code = single_codes[math.random(#single_codes)]
  fakecuda.nvml_hostile("fail", nth, code)
  local got = sweep(nd)
  fakecuda.nvml_hostile()
  local differing = 0
  for name, res in pairs(got) do
    local why = mismatch(name, res, "calm-or-unknown", calm[name])
    if name == "device_count" and show_result(res) == "integer 0" then why = nil end   -- 0 when NVML cannot count
    if why then bad[#bad + 1] = ("call %d: %s"):format(nth, why) end
    if show_result(res) ~= show_result(calm[name]) then differing = differing + 1 end
  end
  if differing > 0 then failures_seen = failures_seen + 1 end
end
t.ok(#bad == 0, ("call n of %d fails, for each n: every result its value or unknown%s"):format(calls_per_sweep,
     #bad > 0 and (": " .. table.concat(bad, "; ", 1, math.min(#bad, 8))) or ""))
t.ok(failures_seen > calls_per_sweep // 2, ("most single failures show (%d of %d; the rest have a fallback)"):format(failures_seen, calls_per_sweep))

-- --- absurd numbers ---------------------------------------------------------------
-- What nvml.c admits (the ranges of its top comment, restated here as the
-- spec): a reading outside is unknown (nil and a reason) or refused.
local RANGE = {clock = {1, 100000}, bus = {8, 65536}, gen = {1, 32}, width = {1, 64}, temperature = {0, 250},
               power = {0, 10000000}, limit = {1, 10000000}, percent = {0, 100}, index = {0, 65535},
               count = {0, 65536}, cuda = {1000, 999999}, feature = {0, 1}, compute = {0, 255}}
local function within(kind, v) return v >= RANGE[kind][1] and v <= RANGE[kind][2] end
local function signed(v) return v >= 2^31 and v - (1 << 32) or v end   -- what an int the fake set reads
-- PCIe: bytes per second one lane carries per direction, by generation
local GTS = {2.5, 5, 8, 16, 32, 64, 128}
local function lane_rate(gen)
  if not GTS[gen] then return nil end
  local encoding = gen <= 2 and 8 / 10 or gen <= 5 and 128 / 130 or 242 / 256
  return GTS[gen] * 1e9 * encoding / 8
end
local REASONS = {"gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
                 "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clock_setting"}
local function reasons_of(mask)
  local words = {}
  for bit = 0, #REASONS - 1 do if mask & (1 << bit) ~= 0 then words[#words + 1] = REASONS[bit + 1] end end
  for bit = #REASONS, 63 do if mask & (1 << bit) ~= 0 then words[#words + 1] = "reason_bit_" .. bit end end
  return words
end

-- every number the fake reports is v, every width (PCIe lanes, bus bits) bits
local function absurd_want(v, bits)
  local w = {}
  local function set(key, result) w[key] = result == nil and "nil" or ok_values(result) end
  local function both(f, result) set("nd." .. f, result); set("nd:get " .. f, result) end
  -- field f reads x, a reading of this kind: result (x itself by default) where x is in range
  local function field(f, kind, x, result)
    if not within(kind, x) then both(f, nil) elseif result == nil then both(f, x) else both(f, result) end
  end
  local s = signed(v)
  field("index", "index", v)
  field("memory_bus_width", "bus", bits)
  both("peak_memory_bandwidth", within("bus", bits) and within("clock", v) and 2 * v * 1000000 * (bits // 8) or nil)
  local pcie = {}
  if within("gen", v) then pcie.generation, pcie.max_generation = v, v end
  if within("width", bits) then pcie.width, pcie.max_width = bits, bits end
  local rate = within("gen", v) and within("width", bits) and lane_rate(v)
  if rate then pcie.rate = math.tointeger(math.floor(rate * bits + 0.5)); pcie.max_rate = pcie.rate end
  both("pcie", next(pcie) and pcie or nil)
  field("temperature", "temperature", s)
  field("power_usage", "power", v, v / 1000)
  field("power_limit", "limit", v, v / 1000)
  field("utilization", "percent", v, {gpu = v, memory = v})
  field("ecc", "feature", s, s == 1)
  field("persistence_mode", "feature", s, s == 1)
  field("mig_mode", "feature", v, v == 1)
  local modes = {[0] = "default", "exclusive_thread", "prohibited", "exclusive_process"}
  field("compute_mode", "compute", s, modes[s] or ("mode_" .. s))
  local links = {}
  for i = 1, 18 do links[i] = s == 1 end
  field("nvlink", "feature", s, links)
  local reasons = reasons_of(v << 32 | v)
  set("nd:get clock_event_reasons", reasons)
  set("clock_event_reasons()", reasons)
  for _, k in ipairs(KINDS) do
    for _, which in ipairs{"clock ", "max_clock ", "application_clock "} do
      set(which .. k, within("clock", v) and v or nil)
    end
  end
  w.device_count = ok_values(within("count", v) and v or 0)
  w.get_num_devices = within("count", v) and ok_values(v) or "error"
  w.get_driver_version = within("cuda", s) and ok_values(s // 1000, s // 10 % 100, s % 10) or "error"
  return w
end

local values = {0, 1, 7, 8, 31, 32, 33, 63, 64, 65, 100, 101, 250, 251, 255, 256, 999, 1000, 65535, 65536, 65537,
                100000, 100001, 999999, 1000000, 3000000, 10000000, 10000001, 2^31 - 1, 2^31, 4000000000,
                UINT_MAX - 1, UINT_MAX}
for _ = 1, 16 do values[#values + 1] = math.random(0, UINT_MAX) end
for _ = 1, 8 do values[#values + 1] = math.random(0, 300) end
local cases = {}
for _, v in ipairs(values) do cases[#cases + 1] = {math.tointeger(v), math.tointeger(v)} end
-- widths apart: a PCIe generation or a clock in range times a width that is not
-- (the rate's conversion to an integer, the bandwidth's product), and the edges
for _, gen in ipairs{1, 2, 3, 5, 6, 7, 8, 32, 100000} do
  for _, bits in ipairs{0, 7, 8, 64, 65, 65536, 65537, 2^31, UINT_MAX, math.random(0, UINT_MAX)} do
    cases[#cases + 1] = {gen, math.tointeger(bits)}
  end
end
local absurd_bad, absurd_nil = {}, 0
for _, case in ipairs(cases) do
  local v, bits = case[1], case[2]
  fakecuda.nvml_hostile("absurd", v, bits)
  local got = sweep(nd)
  fakecuda.nvml_hostile()
  local want = absurd_want(v, bits)
  for name, res in pairs(got) do
    local why = mismatch(name, res, want[name] or calm[name], calm[name])
    if why then absurd_bad[#absurd_bad + 1] = ("%d/%d: %s"):format(v, bits, why) end
    if res[1] and res[2] == nil then absurd_nil = absurd_nil + 1 end
  end
end
table.sort(absurd_bad, function(a, b)   -- the negative numbers first: the worst
  return (a:find("negative", 1, true) and 0 or 1) < (b:find("negative", 1, true) and 0 or 1)
end)
t.ok(#absurd_bad == 0, ("absurd numbers (%d cases, edges and random): each reading exact or unknown%s"):format(#cases,
     #absurd_bad > 0 and (": " .. table.concat(absurd_bad, "; ", 1, math.min(#absurd_bad, 8))) or ""))
t.ok(absurd_nil > 0, "absurd numbers: some readings were refused")
fakecuda.nvml_hostile("absurd", UINT_MAX)
local _, why = nd:get("peak_memory_bandwidth")
local _, clock_why = nd:clock("sm")
local okc, count_err = pcall(sys.get_num_devices)
fakecuda.nvml_hostile()
t.like(why, "^nvmlDeviceGetMemoryBusWidth reported 4294967295, which is not a memory bus width in bits %(8 to 65536%)$",
       "UINT_MAX bus width: the reason, in one sentence")
t.like(clock_why, "^nvmlDeviceGetClockInfo reported 4294967295, which is not a clock in MHz %(1 to 100000%)$",
       "UINT_MAX clock: the reason, in one sentence")
t.ok(not okc and error_text(count_err):find("nvmlDeviceGetCount_v2 reported 4294967295, which is not a device count", 1, true),
     "UINT_MAX devices: get_num_devices refuses it (" .. error_text(count_err) .. ")")
-- products that overflow 64 bits: the fake's bus and clock within uint32 but their product not
fakecuda.nvml_hostile("absurd", 3000000)
local peak = nd.peak_memory_bandwidth
fakecuda.nvml_hostile()
t.is(peak, nil, "a bus width and a clock whose product overflows int64: unknown, not wrapped")

-- --- the environment variable selects the modes for a process ----------------------
local function child(env, code)
  local path = os.tmpname()
  t.write_file(path, code)
  local rc, out, err = t.run(fake.env(env .. " ") .. t.cudalua() .. " " .. path)
  os.remove(path)
  return rc, out, err
end
local filler = random_filler():gsub("[^%w%.%-]", "x")
local rc, out = child("FAKENVML_HOSTILE=strings:" .. filler, [[
  local fakecuda = require "fakecuda"
  local v = require("cuda").system.driver_version
  io.write(v, "\n", fakecuda.nvml_string_size("nvmlSystemGetDriverVersion"))]])
local version, size = out:match("^(.*)\n(%d+)$")
t.is(version, size and hostile_string("580.65.06", filler, tonumber(size)), "FAKENVML_HOSTILE=strings:" .. filler .. ": a process's strings")
rc, out = child("FAKENVML_HOSTILE=absurd:4294967295", [[
  local nd = require("cuda").system.Device(0)
  io.write(tostring(nd.temperature), " ", tostring(nd:clock("sm")), " ", tostring(nd.peak_memory_bandwidth))]])
t.is(out, "nil nil nil", "FAKENVML_HOSTILE=absurd: a process's numbers")
rc, out = child("FAKENVML_HOSTILE=fail:0:15", [[
  local sys = require("cuda").system
  io.write(tostring(sys.is_available()), " ", sys.device_count(), " ", tostring(sys.driver_version), " ",
           tostring(select(2, pcall(sys.get_num_devices))))]])
t.is(out, "true 0 nil nvmlDeviceGetCount_v2: GPU is lost", "FAKENVML_HOSTILE=fail: a process's calls fail")
-- device_query prints what it can in every mode, and exits 0
for _, mode in ipairs{"strings:" .. filler, "fail:0", "fail:" .. math.random(1, 40), "absurd:0", "absurd:4294967295",
                      "absurd:3000000", "absurd:" .. math.random(0, UINT_MAX)} do
  local qrc, qout, qerr = t.run(fake.env("FAKENVML_HOSTILE=" .. mode .. " ") .. t.cudalua() .. " device_query")
  t.ok(qrc == 0 and qout:find("\nNVML", 1, true) and qerr == "", "device_query under FAKENVML_HOSTILE=" .. mode .. (qerr ~= "" and (": " .. qerr) or ""))
end
t.done()
