-- Peer access: dev:can_access_peer, mr.peer_accessible_by, copies between
-- devices and kernels using another device's pool. What needs two GPUs runs
-- when there are two; the argument checks and the one-device cases always.
local t = require "tap"
local cuda = require "cuda"

-- No GPU needed: host memory is not a pool.
local host = cuda.HostMemoryResource()
t.is(#host.peer_accessible_by, 0, "a host resource reports no peers")
t.raises(function() host.peer_accessible_by = {} end, "HostMemoryResource is not a device memory pool",
         "peer_accessible_by on host memory")
t.raises(function() host.kind = "device" end, "cannot set 'kind'", "other fields are read-only")

if not cuda.is_available() then
  t.skip("no CUDA device", 1)
  t.done()
end

local dev = cuda.Device(0)
dev:set_current()
t.is(dev:can_access_peer(dev), true, "a device accesses its own memory")
t.is(dev:can_access_peer(0), true, "can_access_peer takes a device id")
t.raises(function() dev:can_access_peer("x") end, "cuda%.Device expected", "can_access_peer('x')")
t.raises(function() dev:can_access_peer(cuda.device_count()) end, "no CUDA device",
         "can_access_peer of a device that does not exist")

-- One device: the owner in the list is accepted and not reported back.
local function check_own_device(mr, what)
  t.is(#mr.peer_accessible_by, 0, what .. ": no peers at first")
  mr.peer_accessible_by = {}
  t.is(#mr.peer_accessible_by, 0, what .. ": = {} leaves none")
  mr.peer_accessible_by = {dev, 0}
  t.is(#mr.peer_accessible_by, 0, what .. ": = {self} lists none (the owner always has access)")
  t.raises(function() mr.peer_accessible_by = "all" end, "list of devices", what .. ": a string")
  t.raises(function() mr.peer_accessible_by = {cuda.device_count()} end, "no CUDA device",
           what .. ": a device that does not exist")
  t.raises(function() mr.peer_accessible_by = {{}} end, "cuda%.Device expected", what .. ": a table item")
end
check_own_device(dev.memory_resource, "default pool")
local pool <close> = cuda.DeviceMemoryResource(dev)
check_own_device(pool, "explicit pool")
for _, mr in ipairs{cuda.PinnedMemoryResource(), cuda.ManagedMemoryResource(),
                    cuda.PinnedMemoryResource{pool = true}} do
  t.raises(function() mr.peer_accessible_by = {0} end, "is not a device memory pool",
           "peer_accessible_by on " .. mr.kind .. " memory" .. (mr.is_pool and " (pool)" or ""))
end
pool:close()
t.raises(function() pool.peer_accessible_by = {} end, "is closed", "a closed pool")

if cuda.device_count() < 2 then
  t.skip("peer access needs two GPUs", 11)
  t.done()
end

-- Two devices: a kernel on device 0 uses device 1's pool once granted.
local d0, d1 = cuda.Device(0), cuda.Device(1)
local N = 1 << 16
local source = [[
extern "C" __global__ void iota(unsigned *x, unsigned base, unsigned long long n) {
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  if (i < n) x[i] = base + (unsigned)i;
}]]
d0:set_current()
local k = cuda.Program(source, "c++", {arch = "sm_" .. d0.arch}):compile("cubin"):get_kernel("iota")
local cfg = cuda.LaunchConfig{grid = N // 256, block = 256}
local s0, s1 = d0:create_stream(), d1:create_stream()
local pool1 = cuda.DeviceMemoryResource(d1)
local b1 = pool1:allocate(N * 4, s1)
s1:sync()
local pinned = cuda.PinnedMemoryResource{device = d0}
local out = pinned:allocate(N * 4)
local function check_iota(buf, base, name)
  out:fill(0)
  buf:copy_to(out, s0)
  s0:sync()
  local v = out:view("uint32")
  t.ok(v[1] == base and v[N] == base + N - 1 and v[N // 2] == base + N // 2 - 1, name)
end

t.raises(function() cuda.launch(s0, cfg, k, b1, 7, cuda.u64(N)) end,
         "the buffer of device 1 is not accessible from device 0: grant it with mr%.peer_accessible_by = {0}",
         "launch with another device's buffer before access is granted")
if d0:can_access_peer(d1) then
  pool1.peer_accessible_by = {d0}
  t.is(pool1.peer_accessible_by[1], 0, "peer_accessible_by lists device 0")
  t.is(#pool1.peer_accessible_by, 1, "and only it")
  cuda.launch(s0, cfg, k, b1, 7, cuda.u64(N))
  check_iota(b1, 7, "a kernel on device 0 wrote device 1's pool")
  pool1.peer_accessible_by = {}
  t.is(#pool1.peer_accessible_by, 0, "= {} revokes")
  t.raises(function() cuda.launch(s0, cfg, k, b1, 7, cuda.u64(N)) end, "not accessible from device 0",
           "launch refused again after revoking")
else
  t.skip("device 0 cannot access device 1", 4)
  t.raises(function() pool1.peer_accessible_by = {d0} end, "device 0 cannot access the memory of device 1",
           "peer_accessible_by refuses a device without peer access")
end

-- Managed and cuMemHostAlloc'd pinned memory of device 1 is usable on device 0.
local m1 = cuda.ManagedMemoryResource{device = d1}:allocate(N * 4)
cuda.launch(s0, cfg, k, m1, 3, cuda.u64(N))
check_iota(m1, 3, "a kernel on device 0 wrote device 1's managed memory")
local p1 = cuda.PinnedMemoryResource{device = d1}:allocate(N * 4)
cuda.launch(s0, cfg, k, p1, 5, cuda.u64(N))
s0:sync()
t.is(p1:view("uint32")[N], 5 + N - 1, "a kernel on device 0 wrote device 1's pinned memory")

-- Copies between devices, on a stream of either device.
local b0 = d0.memory_resource:allocate(N * 4, s0)
cuda.launch(s0, cfg, k, b0, 11, cuda.u64(N))
s0:sync()
local c1 = pool1:allocate(N * 4, s1)
s1:sync()
c1:copy_from(b0, s1)
s1:sync()
check_iota(c1, 11, "device 0 to device 1 on device 1's stream")
c1:fill(0, s1)
s1:sync()
b0:copy_to(c1, s0)
s0:sync()
check_iota(c1, 11, "device 0 to device 1 on device 0's stream")
local h = cuda.HostMemoryResource():allocate(N * 4)
t.raises(function() c1:copy_to(out, s0) c1:copy_to(h, s0) end,
         "cannot copy device 1 memory on a stream of device 0",
         "a copy whose stream belongs to neither device")
t.done()
