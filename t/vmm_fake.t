-- cuda.VirtualMemoryResource under the fake driver (t/fake/vmm.c emulates
-- reservations, physical memory and mappings with mmap): allocation,
-- growth in place and by moving, contents kept, release order, failures,
-- bad input, leaks. t/vmm.t grows a buffer on a GPU.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()
local seed = t.seed()
t.plan(34)

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local MiB = 1 << 20
local base = fake.live(fakecuda)

local vmr = cuda.VirtualMemoryResource(dev, {granularity = "minimum"})
local info = cuda.virtual_memory_info(vmr)
t.ok(info.granularity == 2 * MiB and info.location == "device" and info.location_id == 0 and info.access == "rw",
     "granularity, location, access")
t.ok(vmr.kind == "device" and vmr.is_device_accessible and not vmr.is_host_accessible,
     "a device resource, not host-accessible")
t.ok(rawequal(cuda.VirtualMemoryResource().device, dev) or cuda.VirtualMemoryResource().device == dev,
     "the current device by default")

local n0 = math.random(1, 2 * MiB)
local buf = vmr:allocate(n0, s)
t.is(buf.size, n0, "buf.size is what was asked for")
t.is(fakecuda.live().virtual, 2, "one reservation and one physical allocation")
local data = pinned:allocate(n0)
data:view("uint8"):random(0, 255, seed)
data:copy_to(buf, s)
local p0 = buf.ptr

-- within the mapped granule: the size only
t.ok(rawequal(buf:grow(2 * MiB, s), buf) and buf.size == 2 * MiB and buf.ptr == p0,
     "growing within the granule keeps everything")

-- in place: the range after it is free
local calls = fakecuda.calls("cuMemAddressReserve")
buf:grow(64 * MiB, s)
t.ok(buf.size == 64 * MiB and buf.ptr == p0, "grown to 64 MiB in place: same pointer")
t.is(fakecuda.calls("cuMemAddressReserve") - calls, 1, "one reservation, right after the buffer")
t.is(fakecuda.live().virtual, 4, "two ranges, two physical allocations")
local back = pinned:allocate(n0)
buf:slice(0, n0):copy_to(back, s)
s:sync()
t.ok(back:view("uint8"):allclose(data:view("uint8"), 0, 0), "the contents are kept")
t.like(tostring(vmr), "1 live buffer", "the resource counts its buffer")

-- moving: the range after it is taken (an injected failure of the hint)
local tail = pinned:allocate(4 * MiB)
tail:view("uint32"):random(0, 2^32, seed + 1)
tail:copy_to(buf:slice(60 * MiB, 4 * MiB), s)
fakecuda.fail("cuMemAddressReserve")
buf:grow(70 * MiB, s)
t.ok(buf.size == 70 * MiB and buf.ptr ~= p0, "grown to 70 MiB by moving: a new pointer")
t.is(fakecuda.live().virtual, 4, "one range for all, three physical allocations")
local back_tail = pinned:allocate(4 * MiB)
buf:slice(0, n0):copy_to(back, s)
buf:slice(60 * MiB, 4 * MiB):copy_to(back_tail, s)
s:sync()
t.ok(back:view("uint8"):allclose(data:view("uint8"), 0, 0) and
     back_tail:view("uint32"):allclose(tail:view("uint32"), 0, 0), "the contents moved with it")

-- failures while growing leave the buffer as it was
for _, api in ipairs{"cuMemCreate", "cuMemMap", "cuMemSetAccess"} do
  local before, ptr, live = buf.size, buf.ptr, fakecuda.live().virtual
  fakecuda.fail(api)
  t.raises(function() buf:grow(before + 4 * MiB, s) end, api, api .. " fails: a cuda.Error")
  t.ok(buf.size == before and buf.ptr == ptr and fakecuda.live().virtual == live,
       api .. ": the buffer and the driver's records are unchanged")
end
fakecuda.fail("cuMemCreate")
t.raises(function() vmr:allocate(MiB, s) end, "cuMemCreate", "an allocation that fails")

-- bad input
t.raises(function() buf:grow(MiB) end, "only grows", "shrinking")
t.raises(function() buf:grow("x") end, "number expected", "a string size")
t.raises(function() pinned:allocate(64):grow(128) end, "VirtualMemoryResource", "a buffer of another resource")
t.raises(function() buf:slice(0, 64):grow(128) end, "not a slice", "a slice")
t.raises(function() cuda.VirtualMemoryResource(dev, {location = "moon"}) end, "'location'", "a bad location")
t.raises(function() cuda.VirtualMemoryResource(dev, {location = "host_numa"}) end, "needs numa_id", "host_numa without a node")

-- pinned pools on a host NUMA node, and a VMM resource there
t.is(dev.host_numa_id, 0, "dev.host_numa_id")
local numa = cuda.PinnedMemoryResource{numa_id = dev.host_numa_id}
local nb = numa:allocate(4096, s)
nb:view("uint32"):iota(7, 3)
t.ok(numa.kind == "pinned" and nb:view("uint32")[1024] == 7 + 3 * 1023, "a pinned pool on NUMA node 0 holds data")
nb:close(s)
t.raises(function() cuda.PinnedMemoryResource{numa_id = 5} end, "cuMemPoolCreate", "a node the system lacks: the driver says so")
local hv = cuda.VirtualMemoryResource(dev, {location = "host_numa", numa_id = 0})
t.is(cuda.virtual_memory_info(hv).location, "host_numa", "a virtual-memory resource on a host NUMA node")
local hb = hv:allocate(MiB, s)
hb:fill(3, s)
hb:close()
numa, nb, hv, hb = nil

-- a release unmaps, releases, then frees the ranges; nothing is left
buf:close()
t.raises(function() buf:grow(128 * MiB) end, "cuda.Buffer is closed", "growing a closed buffer")
local b2 = vmr:allocate(3 * MiB, s)
b2, vmr, data, back, tail, back_tail = nil
collectgarbage()
collectgarbage()
t.is(fakecuda.live().virtual, 0, "every mapping, allocation and range is given back")
t.is(fake.live(fakecuda), base, "nothing else leaked")
t.done()
