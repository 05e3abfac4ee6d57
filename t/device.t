-- Devices: identity, attributes, properties, bad ids; GPU parts skip without one.
local t = require "tap"
local cuda = require "cuda"

-- Argument errors come before any CUDA call, so they run everywhere.
t.raises(function() cuda.Device(-1) end, "device id must be >= 0", "Device(-1)")
t.raises(function() cuda.Device("x") end, "number expected, got string", "Device('x')")
t.raises(function() cuda.Device({}) end, "number expected, got table", "Device({})")
t.raises(function() cuda.Device(70000) end, "no CUDA device has an id that large", "Device(70000)")

-- Every CUdevice_attribute has a name. The rule, as documented: one name per
-- distinct value of a CU_DEVICE_ATTRIBUTE_* enumerator in cuda.h, leaving out
-- CU_DEVICE_ATTRIBUTE_MAX (a count); deprecated aliases share their value.
local names = cuda.device_property_names()
local include = os.getenv("CUDALUA_CUDA_INCLUDE") or "/usr/local/cuda/include"
local header = io.open(include .. "/cuda.h")
if header then
  local text = header:read("a")
  header:close()
  local enum = text:match("typedef enum CUdevice_attribute_enum%s*(%b{})")
  local values, distinct = {}, 0
  for name, value in enum:gmatch("CU_DEVICE_ATTRIBUTE_([%w_]+)%s*=%s*(%d+)") do
    if not values[value] then distinct = distinct + 1 end
    values[value] = name
  end
  t.ok(distinct > 100, "cuda.h defines over 100 attribute values: " .. distinct)
  t.is(#names, distinct, "one property name per attribute value in " .. include .. "/cuda.h")
else
  t.skip("no cuda.h in " .. include, 2)
end
local seen, well_formed = {}, true
for _, name in ipairs(names) do
  well_formed = well_formed and name:match("^[a-z][a-z0-9_]*$") ~= nil and not seen[name]
  seen[name] = true
end
t.ok(well_formed, "property names are unique lower-case identifiers")
for _, name in ipairs{"max_pitch", "texture_alignment", "gpu_overlap", "kernel_exec_timeout",
                      "can_map_host_memory", "compute_preemption_supported", "pci_domain_id",
                      "pci_device_id", "maximum_texture1d_width", "maximum_surface2d_height",
                      "multiprocessor_count", "max_shared_memory_per_block_optin"} do
  t.ok(seen[name], "property name " .. name)
end
t.ok(not seen.max and not seen.shared_memory_per_block and not seen.registers_per_block,
     "no _MAX and no deprecated alias of a named value")
t.ok(not seen.pci_bus_id and seen.pci_bus_number, "PCI_BUS_ID is pci_bus_number (pci_bus_id is cuda.core's alias of it)")

if not cuda.is_available() then
  t.skip("no CUDA device", 44)
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
t.like(dev.pci_bus_id, "^%x+:%x+:%x+%.%x$", "dev.pci_bus_id")
t.ok(math.type(p.pci_bus_id) == "integer" and p.pci_bus_id == p.pci_bus_number, "properties.pci_bus_id is the bus number, as cuda.core has it")
t.like(p.uuid, "^GPU%-%x+%-%x+%-%x+%-%x+%-%x+$", "uuid")
t.ok(p.clock_rate_khz > 0 and p.memory_clock_rate_khz > 0, "clock rates")
t.ok(p.concurrent_managed_access == 0 or p.concurrent_managed_access == 1, "concurrent_managed_access")
t.ok(rawequal(p, dev.properties), "properties are cached")

-- every attribute, read lazily, listed by pairs
t.ok(rawget(p, "max_pitch") == nil, "max_pitch is not read before it is asked for")
t.ok(p.max_pitch > 0 and rawget(p, "max_pitch") == p.max_pitch, "max_pitch, then cached")
t.ok(p.texture_alignment > 0, "texture_alignment")
t.ok(p.maximum_texture1d_width > 0 and p.maximum_surface2d_height > 0, "texture and surface limits")
t.ok(p.gpu_overlap == 0 or p.gpu_overlap == 1, "gpu_overlap")
t.ok(p.kernel_exec_timeout == 0 or p.kernel_exec_timeout == 1, "kernel_exec_timeout")
t.is(p.can_map_host_memory, 1, "can_map_host_memory")
t.is(p.compute_preemption_supported, 1, "compute_preemption_supported")
t.ok(p.pci_domain_id >= 0 and p.pci_device_id >= 0, "pci_domain_id and pci_device_id")
local domain, bus, device = dev.pci_bus_id:match("^(%x+):(%x+):(%x+)%.")
t.ok(tonumber(domain, 16) == p.pci_domain_id and tonumber(bus, 16) == p.pci_bus_number
     and tonumber(device, 16) == p.pci_device_id, "pci_bus_id agrees with the attributes")
t.is(p.clock_rate_khz, p.clock_rate, "clock_rate_khz is clock_rate")
t.is(p.memory_bus_width, p.global_memory_bus_width, "memory_bus_width is global_memory_bus_width")
t.is(p.compute_capability_major, cc.major, "compute_capability_major")
t.is(p.no_such_property, nil, "an unknown name is nil")
local listed, nlisted = {}, 0
for name, value in pairs(p) do
  nlisted = nlisted + 1
  listed[name] = value
end
t.ok(nlisted > #names and listed.uuid and listed.max_grid_dim and listed.clock_rate_khz,
     "pairs lists the attributes and the derived names: " .. nlisted)
local agree = true
for _, name in ipairs(names) do agree = agree and listed[name] == p[name] end
t.ok(agree, "pairs and indexing agree on every attribute")

t.is(dev:set_current(), dev, "set_current returns the device")
dev:sync()
local free, total = dev:memory_info()
t.ok(free > 0 and free <= total, "memory_info: free <= total")
t.ok(total <= p.total_memory, "memory_info: total <= total_memory")
t.is(dev.uuid, p.uuid, "dev.uuid")
t.is(tonumber(dev.pci_bus_id:match("^%x+:(%x+)"), 16), p.pci_bus_id, "dev.pci_bus_id names the bus of properties.pci_bus_id")
local devices = cuda.devices()
t.is(#devices, count, "cuda.devices() lists every device")
t.ok(rawequal(devices[1], dev), "cuda.devices() gives the Device objects")
t.done()
