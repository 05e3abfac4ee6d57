-- Memory resources: kinds, allocation errors, pool statistics, leaks.
local t = require "tap"
local cuda = require "cuda"

-- The host resource needs no GPU.
local host = cuda.HostMemoryResource()
t.is(host.kind, "host", "host kind")
t.is(host.is_host_accessible, true, "host memory is host accessible")
t.is(host.is_device_accessible, false, "host memory is not device accessible")
t.is(host.device_id, nil, "host memory has no device")
local b = host:allocate(1000)
t.is(b.size, 1000, "allocate size")
t.is(b.ptr % 64, 0, "host allocations are aligned")
t.is(host.used, 1000, "used counts live bytes")
t.raises(function() host:allocate(0) end, "size must be > 0", "allocate(0)")
t.raises(function() host:allocate(-1) end, "size must be > 0", "allocate(-1)")
t.raises(function() host:allocate(1.5) end, "number has no integer representation", "allocate(1.5)")
t.raises(function() host:allocate("x") end, "number expected", "allocate('x')")
local e = t.raises(function() host:allocate(2^62) end, "4611686018427387904 bytes", "allocate(2^62) names the size")
t.is(type(e) == "table" and e.name, "CUDA_ERROR_OUT_OF_MEMORY", "allocate(2^62) is an out-of-memory cuda.Error")
t.raises(function() host:close() end, "1 of its buffers are still open", "closing a resource with live buffers")
b:close()
t.is(host.used, 0, "used is back to 0")
host:close()
t.raises(function() host:allocate(8) end, "is closed", "allocate from a closed resource")
t.raises(function() cuda.HostMemoryResource().allocate(cuda.Device, 8) end, "cuda%.MemoryResource expected", "wrong self")

if not cuda.is_available() then
  t.skip("no CUDA device", 30)
  t.done()
end

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()

local default = dev.memory_resource
t.ok(rawequal(default, dev.memory_resource), "one default pool object per device")
t.is(default.kind, "device", "default pool kind")
t.is(default.is_device_accessible, true, "device memory is device accessible")
t.is(default.is_host_accessible, false, "device memory is not host accessible")
t.is(default.device_id, 0, "device_id")
t.is(default.is_pool, true, "default pool is a pool")

local pinned, pool_pinned = cuda.PinnedMemoryResource(), cuda.PinnedMemoryResource{pool = true}
local managed = cuda.ManagedMemoryResource()
t.is(pinned.kind, "pinned", "pinned kind")
t.is(pinned.is_pool, false, "pinned default is cuMemHostAlloc, not a pool")
t.is(pool_pinned.is_pool, true, "pinned {pool = true} is a pool")
t.ok(pinned.is_host_accessible and pinned.is_device_accessible, "pinned is host and device accessible")
t.is(managed.kind, "managed", "managed kind")
t.raises(function() cuda.PinnedMemoryResource{pool = 1} end, "field 'pool' must be a boolean", "pool = 1")
t.raises(function() cuda.DeviceMemoryResource(dev, {release_threshold = -1}) end, "release_threshold must be >= 0", "negative threshold")
t.raises(function() cuda.DeviceMemoryResource(dev, {threshold = 1}) end, "unknown option 'threshold'", "unknown option")

local e2 = t.raises(function() default:allocate(2^62, s) end, "4611686018427387904 bytes", "device allocate(2^62) names the size")
t.is(type(e2) == "table" and e2.api, "cuMemAllocFromPoolAsync", "the error names the API")
t.raises(function() managed:allocate(2^50) end, "out of memory", "managed memory never asks for more than is free")

-- explicit pool: statistics and close
local explicit = cuda.DeviceMemoryResource(dev, {release_threshold = 0})
t.is(explicit.release_threshold, 0, "release_threshold")
local used0 = explicit.used
local buf = explicit:allocate(1 << 20, s)
t.ok(explicit.used >= used0 + (1 << 20), "used grows by the allocation")
t.ok(explicit.reserved >= explicit.used, "reserved >= used")
t.raises(function() explicit:close() end, "still open", "closing a pool with live buffers is an error")
buf:close(s)
s:sync()
t.is(explicit.used, used0, "used back where it started")
explicit:close()
t.like(tostring(explicit), "closed", "closed pool")

-- 10,000 allocate/close cycles per resource: no growth anywhere
local function rss_kb()
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmRSS:%s+(%d+)")
    if kb then return tonumber(kb) end
  end
end
local function cycles(mr, n, size)
  for _ = 1, n do
    local x = mr:allocate(size, s)
    x:close(s)
  end
  s:sync()
end
for _, case in ipairs{{"default pool", default}, {"explicit pool", cuda.DeviceMemoryResource(dev)},
                      {"pinned", pinned}, {"pinned pool", pool_pinned}, {"managed", managed}} do
  local name, mr = case[1], case[2]
  -- Pools keep freed memory up to their release threshold: trim before
  -- each reading so only memory still held by something counts.
  cycles(mr, 200, 4096 + 256)
  collectgarbage()
  mr:trim(0)
  local used, rss, free = mr.used, rss_kb(), dev:memory_info()
  cycles(mr, 10000, 4096 + 256)
  collectgarbage()
  local reserved = mr.reserved
  mr:trim(0)
  local free_after = dev:memory_info()
  t.ok(mr.used == used and rss_kb() - rss < 4096 and free - free_after < 4 * 2^20,
       ("%s: 10,000 cycles, used %d -> %d, RSS %+d kB, device free %+d bytes (reserved %d before the trim)"):format(
         name, used, mr.used, rss_kb() - rss, free_after - free, reserved))
end
t.done()
