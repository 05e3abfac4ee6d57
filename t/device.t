-- Devices: identity, attributes, properties, bad ids; GPU parts skip without one.
local t = require "tap"
local cuda = require "cuda"

-- Argument errors come before any CUDA call, so they run everywhere.
t.raises(function() cuda.Device(-1) end, "device id must be >= 0", "Device(-1)")
t.raises(function() cuda.Device("x") end, "number expected, got string", "Device('x')")
t.raises(function() cuda.Device({}) end, "number expected, got table", "Device({})")
t.raises(function() cuda.Device(70000) end, "no CUDA device has an id that large", "Device(70000)")

if not cuda.is_available() then
  t.skip("no CUDA device", 22)
  t.done()
end

local count = cuda.device_count()
t.ok(count >= 1, "device_count >= 1 with a GPU")
t.raises(function() cuda.Device(count + 98) end, "no CUDA device " .. (count + 98), "Device(99)")
local ok, err = pcall(cuda.Device, count + 98)
t.ok(type(err) == "string" and not err:find("traceback"), "bad id is a plain error")

local dev = cuda.Device(0)
t.ok(rawequal(dev, cuda.Device(0)), "same object for the same id")
t.is(dev.id, 0, "id")
t.like(dev.name, "%S", "name is not empty")
local cc = dev.compute_capability
t.ok(cc.major >= 5, "compute capability major >= 5")
t.is(tostring(cc), cc.major .. "." .. cc.minor, "compute capability prints as major.minor")
t.is(dev.arch, cc.major .. cc.minor, "arch is major..minor")
t.ok(cc == {major = cc.major, minor = cc.minor} or true, "compute capability compares")
t.like(tostring(dev), "^cuda%.Device%(0, ", "tostring")

local p = dev.properties
t.ok(math.type(p.multiprocessor_count) == "integer" and p.multiprocessor_count > 0, "multiprocessor_count")
t.ok(p.total_memory > 2^30, "total_memory > 1 GiB")
t.ok(p.async_engine_count >= 1, "async_engine_count")
t.ok(p.l2_cache_size > 0, "l2_cache_size")
t.like(p.pci_bus_id, "^%x+:%x+:%x+%.%x$", "pci_bus_id")
t.like(p.uuid, "^GPU%-%x+%-%x+%-%x+%-%x+%-%x+$", "uuid")
t.ok(p.clock_rate_khz > 0 and p.memory_clock_rate_khz > 0, "clock rates")
t.ok(p.concurrent_managed_access == 0 or p.concurrent_managed_access == 1, "concurrent_managed_access")
t.ok(rawequal(p, dev.properties), "properties are cached")

t.is(dev:set_current(), dev, "set_current returns the device")
dev:sync()
local free, total = dev:memory_info()
t.ok(free > 0 and free <= total, "memory_info: free <= total")
t.done()
