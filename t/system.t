-- cuda.system (src/nvml.c) under the fake driver and its fake NVML
-- (t/fake/nvml.c, which says what its devices read): every field, the
-- fake throttle, injected NVML failures, an older NVML that lacks entry
-- points (nil with a reason), and no NVML at all (one sentence; the rest of
-- cudalua works).
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()
local sys = cuda.system

t.plan(82)
math.randomseed(os.time())

-- run a chunk in a child under the fake driver with extra environment
local function child(env, code)
  local path = os.tmpname()
  t.write_file(path, code)
  local rc, out, err = t.run(fake.env(env .. " ") .. t.cudalua() .. " " .. path)
  os.remove(path)
  return rc, out, err
end

-- --- the system ----------------------------------------------------------------
t.is(sys.is_available(), true, "is_available under the fake NVML")
t.is(sys.device_count(), cuda.device_count(), "device_count: the fake driver's devices")
t.is(sys.get_num_devices(), cuda.device_count(), "get_num_devices (cuda.core's name)")
t.is(sys.driver_version, "580.65.06", "driver_version: NVML's string")
t.is(sys.nvml_version, "13.580.65.06", "nvml_version: NVML's string")
t.is(table.concat({sys.get_driver_version(true)}, "."), "580.65.6", "get_driver_version(true): the kernel module's numbers")
t.is(table.concat({sys.get_driver_version()}, "."), "13.1.0", "get_driver_version(): the CUDA driver's major, minor, patch")
t.is(table.concat({sys.get_nvml_version()}, "."), "13.580.65.6", "get_nvml_version: numbers")
t.is(fakecuda.nvml_refs(), 1, "one nvmlInit_v2 for this Lua state")

-- --- one device, every field -------------------------------------------------
local dev = cuda.Device(0)
local nd = sys.Device(0)
t.is(tostring(nd), "cuda.system.Device(CUDA device 0)", "__tostring")
t.is(sys.Device(dev).id, 0, "Device(cuda.Device)")
t.is(sys.Device().id, 0, "Device(): the current device")
t.is(nd.device, dev, "nd.device: the cuda.Device")
t.is(nd.id, 0, "nd.id: the CUDA ordinal")
t.is(nd.index, 0, "nd.index: NVML's")
t.is(nd.name, dev.name, "name: the CUDA device's")
t.is(nd.uuid, dev.uuid, "uuid: the CUDA device's")
t.is(nd.pci_bus_id, dev.pci_bus_id, "pci_bus_id: the CUDA device's")
t.is(nd:clock("sm"), 1980, "clock sm")
t.is(nd:clock("graphics"), 1980, "clock graphics")
t.is(nd:clock("memory"), 2619, "clock memory")
t.is(nd:clock("video"), 1545, "clock video")
t.is(nd:max_clock("sm"), 1980, "max_clock sm")
t.is(nd:max_clock("memory"), 2619, "max_clock memory")
t.is(nd:application_clock("sm"), 1755, "application_clock sm")
t.is(nd:application_clock("memory"), 2619, "application_clock memory")
t.is(#nd:clock_event_reasons(), 0, "no clock-event reasons")
t.is(nd.memory_bus_width, 5120, "memory_bus_width")
t.is(nd.peak_memory_bandwidth, 2 * 2619 * 10^6 * 5120 // 8, "peak_memory_bandwidth: 2 x max memory clock x bus bytes (NVBench's)")
t.is(math.type(nd.peak_memory_bandwidth), "integer", "peak_memory_bandwidth is an integer")
local pcie = nd.pcie
t.is(("%d %d %d %d"):format(pcie.generation, pcie.width, pcie.max_generation, pcie.max_width), "4 16 5 16", "pcie: generation, width, maxima")
t.near(pcie.rate, 16e9 * 128 / 130 / 8 * 16, 1, "pcie.rate: gen 4 x16 per direction")
t.near(pcie.max_rate, 32e9 * 128 / 130 / 8 * 16, 1, "pcie.max_rate: gen 5 x16")
t.is(nd.temperature, 40, "temperature (C)")
t.is(nd.power_usage, 75.0, "power_usage (W)")
t.is(nd.power_limit, 700.0, "power_limit (W)")
t.is(nd.utilization.gpu .. "/" .. nd.utilization.memory, "3/1", "utilization")
t.is(nd.ecc, true, "ecc")
t.is(nd.persistence_mode, true, "persistence_mode")
t.is(nd.compute_mode, "default", "compute_mode")
t.is(nd.mig_mode, false, "mig_mode")
local links = nd.nvlink
t.is(#links, 18, "nvlink: 18 links")
t.ok(links[1] and links[17] and not links[18], "nvlink: every link up but the last")
t.is(nd.no_such_field, nil, "an unknown field is nil")

-- nd:clock runs between benchmark samples: it must allocate nothing
nd:clock("sm")
collectgarbage(); collectgarbage("stop")
local kb = collectgarbage("count")
for _ = 1, 10000 do nd:clock("sm") end
t.is(collectgarbage("count") - kb, 0.0, "nd:clock allocates nothing")
collectgarbage("restart")

-- --- the fake throttle -------------------------------------------------------
local mhz, calls = math.random(300, 1900), math.random(1, 5)
fakecuda.nvml_throttle(mhz, calls, {"sw_power_cap", "hw_thermal_slowdown"})
t.is(table.concat(nd:clock_event_reasons(), " "), "sw_power_cap hw_thermal_slowdown", "throttled: the reasons in words")
local seen = {}
for i = 1, calls + 2 do seen[i] = nd:clock("sm") end
local want = {}
for i = 1, calls + 2 do want[i] = i <= calls and mhz or 1980 end
t.is(table.concat(seen, " "), table.concat(want, " "), ("throttled to %d MHz for %d reads, then back"):format(mhz, calls))
t.is(#nd:clock_event_reasons(), 0, "the reasons clear with the throttle")
t.is(nd:clock("memory"), 2619, "the memory clock is not throttled")
fakecuda.nvml_throttle(mhz, 0, 0x1ff)
t.is(table.concat(nd:clock_event_reasons(), " "), "gpu_idle applications_clocks_setting sw_power_cap hw_slowdown sync_boost "
  .. "sw_thermal_slowdown hw_thermal_slowdown hw_power_brake_slowdown display_clock_setting", "every reason bit by its word")
fakecuda.nvml_throttle(mhz, 0, 1 << 12)
t.is(nd:clock_event_reasons()[1], "reason_bit_12", "an unknown reason bit is named by number")
for _ = 1, 3 do nd:clock("sm") end
t.is(nd:clock("graphics"), mhz, "calls = 0: throttled until cleared")
fakecuda.nvml_throttle()
t.is(nd:clock("sm"), 1980, "nvml_throttle(): cleared")

-- --- NVML failures: nil and why, the other fields unharmed --------------------
fakecuda.nvml_fail("nvmlDeviceGetPowerUsage")
local v, why = nd:get("power_usage")
t.ok(v == nil and why == "nvmlDeviceGetPowerUsage: Not Supported", "get: nil and NVML's reason (" .. tostring(why) .. ")")
t.is(nd.power_usage, 75.0, "the next read works")
fakecuda.nvml_fail("nvmlDeviceGetClockInfo", 1, 15)
v, why = nd:clock("sm")
t.ok(v == nil and why == "nvmlDeviceGetClockInfo: GPU is lost", "clock: nil and the reason (" .. tostring(why) .. ")")
fakecuda.nvml_fail("nvmlDeviceGetTemperatureV", 1, 3)
t.is(nd.temperature, 40, "temperature falls back to nvmlDeviceGetTemperature")
fakecuda.nvml_fail("nvmlDeviceGetNvLinkState", 1, 3)
t.is(#nd.nvlink, 0, "no NVLink at link 0: an empty list")
fakecuda.nvml_fail("nvmlDeviceGetHandleByPciBusId_v2", 1, 6)
t.is(sys.Device(0).uuid, dev.uuid, "not found by PCI bus id: found by UUID")

-- --- bad input -----------------------------------------------------------------
t.raises(function() nd:clock("shader") end, "clock kind must be \"sm\", \"memory\", \"graphics\" or \"video\", got 'shader'", "clock: a bad kind")
t.raises(function() nd:max_clock(1) end, "clock kind %(a string%) expected, got number", "max_clock: a number kind")
t.raises(function() sys.Device(-1) end, "device id must be >= 0", "Device(-1)")
t.raises(function() sys.Device(cuda.device_count()) end, "", "Device(count): no such device")
t.raises(function() nd.clock({}, "sm") end, "cuda%.system%.Device expected", "clock on a table")

-- --- more devices: each its own readings, matched by bus id ------------------------
local rc, out = child("FAKECUDA_DEVICES=3", [[
  local cuda = require "cuda"
  for i = 0, 2 do
    local nd = cuda.system.Device(i)
    io.write(nd.temperature, " ", nd.pci_bus_id == cuda.Device(i).pci_bus_id and "same" or "other", " ", nd.index, ";")
  end]])
t.is(out, "40 same 0;41 same 1;42 same 2;", "three devices: their own readings, bus ids and indices")

-- --- an older NVML: what it lacks is nil with a reason ---------------------------
local old = os.getenv("CUDALUA_FAKE_LIBCUDA"):gsub("fakecuda%.so$", "fakenvml_old.so")
rc, out = child("CUDALUA_LIBNVML='" .. old .. "' FAKENVML_THROTTLE=1100:0:0x40", [[
  local sys = require("cuda").system
  local nd = sys.Device(0)
  print(nd:clock("sm"), table.concat(nd:clock_event_reasons(), ","), nd.temperature, nd.pcie.generation)
  print(nd.power_usage, nd.mig_mode, nd.nvlink, sys.nvml_version, sys.driver_version)
  print(select(2, nd:get("power_usage")))
  print(select(2, nd:get("mig_mode")))
  print(nd.uuid == require("cuda").Device(0).uuid)]])
local lines = {}
for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
t.is(lines[1], "1100\thw_thermal_slowdown\t40\t4", "older NVML: its throttle reasons, the old temperature call, the rest")
t.is(lines[2], "nil\tnil\tnil\tnil\t580.65.06", "older NVML: what it lacks is nil")
t.is(lines[3], "this NVML has no nvmlDeviceGetPowerUsage", "older NVML: the reason for power_usage")
t.is(lines[4], "this NVML has no nvmlDeviceGetMigMode", "older NVML: the reason for mig_mode")
t.is(lines[5], "true", "older NVML: the device found by UUID")

-- --- no NVML: one sentence, nothing else breaks ---------------------------------
local probe = [[
  local cuda = require "cuda"
  local ok, why = cuda.system.is_available()
  print(ok, why)
  print(cuda.system.device_count(), cuda.system.driver_version, cuda.system.nvml_version)
  local buf = cuda.PinnedMemoryResource():allocate(64)
  print(cuda.is_available(), cuda.device_count(), buf.size)
  local okd, e = pcall(cuda.system.Device, 0)
  print(okd, e.unavailable, e.message == why)
  cuda.system.Device(0)]]
local rc2, err
rc, out, err = child("CUDALUA_LIBNVML=/nonexistent/libnvidia-ml.so.1", probe)
t.like(out, "^false\tNVML %(the NVIDIA Management Library%) was not found: /nonexistent/libnvidia%-ml%.so%.1: [^\n]*\n0\tnil\tnil\ntrue\t1\t64\nfalse\ttrue\ttrue\n$",
       "no NVML: is_available false and one sentence; device_count 0; the rest works")
-- exit 1, not 2: the interpreter's "no usable GPU" status is for no GPU at all
t.is(rc, 1, "no NVML: cuda.system.Device raises")
t.like(err, "^cudalua: NVML %(the NVIDIA Management Library%) was not found: [^\n]*directory\n", "no NVML: Device raises that sentence")
local notlib = t.tmpdir() .. "/libnvidia-ml.so.1"
t.write_file(notlib, "this is not a shared library\n")
rc, out = child("CUDALUA_LIBNVML='" .. notlib .. "'", probe)
t.like(out, "^false\tNVML %(the NVIDIA Management Library%) was not found: [^\n]*libnvidia%-ml%.so%.1: [^\n]+\n0\tnil",
       "CUDALUA_LIBNVML at a non-library: one sentence")
rc, out = child("CUDALUA_LIBNVML=libm.so.6", probe)
t.like(out, "^false\tthe library at libm%.so%.6 is not a usable NVML: it has no nvmlInit_v2\n0\tnil\tnil\ntrue\t1\t64\n",
       "CUDALUA_LIBNVML at a library that is not NVML: one sentence")
rc2, out = child("FAKENVML_INIT_FAIL=9", probe)
t.like(out, "^false\tNVML could not start: nvmlInit_v2: Driver Not Loaded\n0\tnil\tnil\ntrue\t1\t64\n",
       "nvmlInit_v2 fails: one sentence, the rest works")
t.is(rc2, 1, "nvmlInit_v2 fails: Device raises")

-- --- device_query prints NVML's view, or why there is none ---------------------
local json = t.tmpdir() .. "/dq.json"
rc, out, err = t.run(fake.env("FAKENVML_THROTTLE=900:0:0x24 ") .. t.cudalua() .. " device_query --json " .. json)
t.is(rc, 0, "device_query under the fake NVML" .. err)
t.like(out, "\nNVML: driver 580%.65%.06, NVML 13%.580%.65%.06, devices: 1\nNVML device for CUDA device 0: Fake CUDA Device 0 %(00000000:18:00%.0%)\n"
  .. "  SM clock +900 MHz %(max 1980, application 1755%)\n.*  Clock%-event reasons +sw_power_cap, sw_thermal_slowdown\n"
  .. ".*  Peak DRAM bandwidth +3352%.3 GB/s\n.*  NVLink +17 of 18 links active\n", "device_query: the NVML section")
local report = require("cuda.json").decode(t.read_file(json) or "{}")
local entry = report.details and report.details.devices[1].nvml or {}
t.ok(entry.peak_memory_bandwidth == 2 * 2619 * 10^6 * 640 and entry.clocks.sm == 900 and entry.pcie.max_generation == 5,
     "device_query --json: the NVML readings under details")
rc, out = t.run(fake.env("CUDALUA_LIBNVML=/nonexistent ") .. t.cudalua() .. " device_query")
t.is(rc, 0, "device_query without NVML still runs")
t.like(out, "\nNVML: not available: NVML %(the NVIDIA Management Library%) was not found: /nonexistent: [^\n]+\n$",
       "device_query without NVML: the one sentence, last")
