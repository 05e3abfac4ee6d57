-- cuda.VirtualMemoryResource under the fake driver (t/fake/vmm.c emulates
-- reservations, physical memory and mappings with mmap): allocation,
-- growth in place and by moving, contents kept, release order, failures,
-- bad input, leaks. t/vmm.t grows a buffer on a GPU.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()
local seed = t.seed()
t.plan(79)

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
-- issue 27: a pinned pool reads its node back; a managed resource takes
-- a preferred location (cuda.core's ManagedMemoryResourceOptions), advised
-- on every allocation (cuMemAdvise SET_PREFERRED_LOCATION = 3)
do
  local p0 = cuda.PinnedMemoryResource{numa_id = 0}
  t.ok(p0.numa_id == 0 and cuda.PinnedMemoryResource().numa_id == nil and
       cuda.PinnedMemoryResource{pool = true}.numa_id == nil, "mr.numa_id: the pool's node, else nil")
  local function advised(opts, size)
    local mr = cuda.ManagedMemoryResource(opts)
    local b = mr:allocate(size)
    local ptr, n, advice, ltype, id = fakecuda.last_advise()
    local ok = ptr == b.ptr and n == size and advice == 3
    b:close()
    return ok and ltype, id, mr
  end
  local size = math.random(1, 1 << 20)
  local ltype, id, mr = advised({preferred_location = dev}, size)
  t.ok(ltype == "device" and id == 0 and mr.preferred_location == 0 and mr.preferred_location_type == "device",
       "preferred_location = dev: advised on the allocation, read back")
  ltype, id, mr = advised({preferred_location = -1}, size)
  t.ok(ltype == "host" and mr.preferred_location == nil and mr.preferred_location_type == "host",
       "preferred_location = -1: the host (cuda.core's legacy form)")
  ltype, id, mr = advised({preferred_location = "host"}, size)
  t.ok(ltype == "host" and mr.preferred_location_type == "host", "preferred_location = \"host\"")
  ltype, id, mr = advised({preferred_location = 0, preferred_location_type = "host_numa"}, size)
  t.ok(ltype == "host_numa" and id == 0 and mr.preferred_location == 0 and mr.preferred_location_type == "host_numa",
       "host_numa with a node")
  ltype, id, mr = advised({preferred_location_type = "host_numa"}, size)
  t.ok(ltype == "host_numa" and id == dev.host_numa_id, "host_numa without a node: the device's own")
  local before = fakecuda.calls("cuMemAdvise")
  mr = cuda.ManagedMemoryResource()
  mr:allocate(64):close()
  t.ok(fakecuda.calls("cuMemAdvise") == before and mr.preferred_location == nil and mr.preferred_location_type == nil,
       "no preference: nothing advised, nothing read back")
  t.raises(function() cuda.ManagedMemoryResource{preferred_location = 0, preferred_location_type = "host"} end,
           "takes no preferred_location", "host with a location")
  t.raises(function() cuda.ManagedMemoryResource{preferred_location = -1, preferred_location_type = "device"} end,
           "preferred_location must be >= 0", "device -1")
  t.raises(function() cuda.ManagedMemoryResource{preferred_location = 7} end, "device", "a device the system lacks")
  t.raises(function() cuda.ManagedMemoryResource{preferred_location_type = "moon"} end, "invalid option 'moon'", "a bad type")
  local bad = cuda.ManagedMemoryResource{preferred_location = 3, preferred_location_type = "host_numa"}
  local live = fake.live(fakecuda)
  t.raises(function() bad:allocate(64) end, "cuMemAdvise", "a node the system lacks: the driver says so at allocate")
  t.is(fake.live(fakecuda), live, "and the allocation is freed again")
end
local hv = cuda.VirtualMemoryResource(dev, {location = "host_numa", numa_id = 0})
t.is(cuda.virtual_memory_info(hv).location, "host_numa", "a virtual-memory resource on a host NUMA node")
local hb = hv:allocate(MiB, s)
hb:fill(3, s)
hb:close()
numa, nb, hv, hb = nil

-- after a move, what was made before holds the old, unmapped address:
-- slices, views (and their ranges), tensor maps. Every use is refused
-- before the driver is called (the fake's copies and launches to a freed
-- range fail with CUDA_ERROR_ILLEGAL_ADDRESS, as a GPU would fault).
do
  local mb = vmr:allocate(4 * MiB, s)
  local host = pinned:allocate(4 * MiB)
  host:view("uint32"):random(0, 2^32, seed + 2)
  host:copy_to(mb, s)
  local v, sl = mb:view("uint32"), mb:slice(MiB, MiB)
  local sv, r = sl:view("uint8"), v:range(1, 16)
  local tm = cuda.TensorMap.tiled(mb, {dtype = "float32", shape = {1024}, box = {128}})
  local obj = cuda.Program([[
extern "C" __global__ void echo_params_ptr(unsigned long long *out, const unsigned *p) { *out = (unsigned long long)p; }
struct alignas(64) Desc { unsigned long long v[16]; };
extern "C" __global__ void echo_params_tm(unsigned char *out, const __grid_constant__ Desc d) { }
]], "c++", {arch = "sm_90"}):compile("cubin")
  local kp, kt = obj:get_kernel("echo_params_ptr"), obj:get_kernel("echo_params_tm")
  local one = cuda.LaunchConfig{grid = 1, block = 1}
  local out = pinned:allocate(128)
  cuda.launch(s, one, kp, out, v)
  cuda.launch(s, one, kt, out, tm)
  s:sync()
  local old = mb.ptr
  fakecuda.fail("cuMemAddressReserve")   -- no room after it: it moves
  mb:grow(8 * MiB, s)
  t.ok(mb.ptr ~= old, "the buffer moved")
  local copies, launches = fakecuda.calls("cuMemcpyAsync"), fakecuda.calls("cuLaunchKernel")
  local batches = fakecuda.calls("cuMemcpyBatchAsync")
  local moved = "moved when it grew"
  t.raises(function() v:copy_to(host, s) end, moved .. ": make the view again", "copy from an old view")
  t.raises(function() host:copy_from(v, s) end, moved, "copy_from an old view")
  t.raises(function() host:copy_to(r, s) end, moved, "copy into a range of an old view")
  t.raises(function() sl:copy_to(host:slice(0, MiB), s) end, moved .. ": make the slice again",
           "copy from an old slice")
  t.raises(function() sv:copy_to(host:slice(0, MiB), s) end, moved, "a view of an old slice")
  t.raises(function() sl:fill(0, s) end, moved, "fill an old slice")
  t.raises(function() cuda.copy_batch(s, {{host, v}}) end, moved, "copy_batch of an old view")
  t.raises(function() cuda.launch(s, one, kp, out, v) end, moved, "launch with an old view")
  t.raises(function() cuda.launch(s, one, kp, out, sl) end, moved, "launch with an old slice")
  t.raises(function() cuda.launch(s, one, kt, out, tm) end, moved .. ": make the map again",
           "launch with an old tensor map")
  t.raises(function() return v[1] end, moved, "an old view's fields")
  t.raises(function() cuda.TensorMap.tiled(v, {dtype = "float32", shape = {16}, box = {16}}) end,
           moved, "a tensor map of an old view")
  t.ok(fakecuda.calls("cuMemcpyAsync") == copies and fakecuda.calls("cuLaunchKernel") == launches and
       fakecuda.calls("cuMemcpyBatchAsync") == batches, "no copy or launch reached the driver")
  -- made again, they work, and the contents moved with the buffer
  local back = pinned:allocate(4 * MiB)
  mb:view("uint32"):range(1, MiB):copy_to(back, s)
  mb:slice(MiB, MiB):view("uint8"):copy_to(back:slice(0, MiB), s)
  tm:replace_address(mb)
  cuda.launch(s, one, kp, out, mb:view("uint32"))
  s:sync()
  t.is(out:view("uint64")[1], mb.ptr, "a new view passes the new address")
  local want = host:slice(MiB, MiB):view("uint8")
  t.ok(back:slice(0, MiB):view("uint8"):allclose(want, 0, 0), "a new slice reads the moved contents")
  cuda.launch(s, one, kt, out, tm)
  s:sync()
  t.ok(true, "a replaced tensor map launches")
  -- growing in place leaves everything valid
  local v2, sl2 = mb:view("uint8"), mb:slice(0, 64)
  local p = mb.ptr
  mb:grow(12 * MiB, s)
  t.ok(mb.ptr == p, "grown in place")
  v2:range(1, 64):copy_to(sl2, s)
  s:sync()
  t.ok(true, "views and slices made before growing in place still work")
  -- closed here, not left to the collector: closures above hold them
  -- (check-gcstress's counts keep every function a cycle ended in)
  for _, b in ipairs{mb, host, back, out} do b:close() end
end

-- issue 27: cuda.core's VirtualMemoryResourceOptions, mapped onto the
-- driver's CUmemAllocationProp (read back from the fake) and reported back
do
  local function made(opts)
    local mr = cuda.VirtualMemoryResource(dev, opts)
    mr:allocate(1, s):close()
    return fakecuda.last_mem_create(), mr
  end
  local p, mr = made{}
  t.ok(p.type == 1 and p.handle_types == 0 and p.location_type == 1 and p.location_id == 0 and not p.gpu_direct_rdma and
       mr.allocation_type == "pinned" and mr.location_type == "device" and mr.handle_type == "none" and
       mr.self_access == "rw" and mr.granularity_type == "recommended" and mr.gpu_direct_rdma == false,
       "defaults: pinned device memory, no export handle, rw, recommended granularity")
  p, mr = made{handle_type = "posix_fd", gpu_direct_rdma = true, self_access = "r", granularity = "minimum"}
  t.ok(p.handle_types == 1 and p.gpu_direct_rdma and mr.handle_type == "posix_fd" and mr.gpu_direct_rdma == true and
       mr.self_access == "r" and mr.access == "r" and mr.granularity_type == "minimum", "posix_fd, GPUDirect RDMA, read-only, minimum")
  p, mr = made{location_type = "host"}
  t.ok(p.location_type == 2 and mr.location_type == "host" and mr.numa_id == nil, "location_type = \"host\"")
  p, mr = made{location_type = "host_numa", numa_id = 0}
  t.ok(p.location_type == 3 and p.location_id == 0 and mr.numa_id == 0 and mr.location == "host_numa",
       "location_type = \"host_numa\" with numa_id")
  local info = cuda.virtual_memory_info(mr)
  t.ok(info.location_type == "host_numa" and info.numa_id == 0 and info.handle_type == "none" and
       info.allocation_type == "pinned" and info.granularity == 2 * MiB, "virtual_memory_info gives the same fields")
  local fabric = cuda.VirtualMemoryResource(dev, {handle_type = "fabric"})
  t.is(fabric.handle_type, "fabric", "handle_type = \"fabric\" is taken")
  t.raises(function() fabric:allocate(1, s) end, "CUDA_ERROR_NOT_PERMITTED",
           "and the driver refuses it where no IMEX channel is open")
  local creates = fakecuda.calls("cuMemGetAllocationGranularity")
  for _, bad in ipairs{{allocation_type = "managed"}, {location_type = "host_numa_current"},
                       {location_type = "host", handle_type = "posix_fd"}, {handle_type = "win32_kmt"},
                       {location_type = "host_numa", numa_id = 0, gpu_direct_rdma = true}} do
    pcall(cuda.VirtualMemoryResource, dev, bad)
  end
  t.is(fakecuda.calls("cuMemGetAllocationGranularity"), creates, "refused combinations call no driver function")
end

-- a release unmaps, releases, then frees the ranges; nothing is left
buf:close()
t.raises(function() buf:grow(128 * MiB) end, "cuda.Buffer is closed", "growing a closed buffer")
local b2 = vmr:allocate(3 * MiB, s)
b2, vmr, data, back, tail, back_tail = nil
collectgarbage()
-- memory mapped read-only (self_access = "r"): a copy, fill or kernel that
-- writes it faults on a GPU; under the fake it fails as the GPU's would
-- (CUDA_ERROR_ILLEGAL_ADDRESS) instead of writing the host's protected pages
-- (the gcstress fuzzer crashed the process in an array copy into one)
do
  local ro <close> = cuda.VirtualMemoryResource(dev, {self_access = "r"})
  local b = ro:allocate(4096, s)
  local src = dev.memory_resource:allocate(4096, s)
  src:fill(7, s)
  local arr = cuda.Array{format = "uint8", channels = 1, width = 4096}
  for _, case in ipairs{{"a copy", function() b:copy_from(src, s) end}, {"a fill", function() b:fill(1, s) end},
                        {"an array copy", function() arr:copy_to(b, s) end}} do
    local ok, err = pcall(case[2])
    t.ok(not ok and tostring(err):find("CUDA_ERROR_ILLEGAL_ADDRESS", 1, true),
      case[1] .. " into read-only virtual memory fails as a GPU's would: " .. tostring(err))
  end
  local ok = pcall(function() src:copy_from(b, s) end)
  t.ok(ok, "reading it is allowed")
  -- a graph's fill node takes any address when built; its launch faults
  -- (the fuzzer crashed the fake's replay, t/fuzz_thread.t seed 5046)
  local builder = cuda.Graph(dev)
  builder:memset(nil, b, 9)
  local g <close> = builder:instantiate()
  local gok, gerr = pcall(g.launch, g, s)
  t.ok(not gok and tostring(gerr):find("CUDA_ERROR_ILLEGAL_ADDRESS", 1, true),
    "a graph filling read-only virtual memory fails at its launch as a GPU's would: " .. tostring(gerr))
  builder:close()
  arr:close() src:close(s) b:close(s)
end

collectgarbage()
t.is(fakecuda.live().virtual, 0, "every mapping, allocation and range is given back")
do local l = fakecuda.live(); local parts = {} for k, v in pairs(l) do parts[#parts + 1] = k .. "=" .. tostring(v) end t.diag(table.concat(parts, " ")) end
t.is(fake.live(fakecuda), base, "nothing else leaked")
t.done()
