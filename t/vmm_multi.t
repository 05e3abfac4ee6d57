-- One virtual-memory allocation spread over several GPUs (issue 29,
-- CUDA's vectorAddMMAP layout): cuda.VirtualMemoryResource{devices = {...}}
-- gives each allocation one physical chunk per device, mapped back to back
-- into one reserved range, every device granted access. Under the fake
-- driver with two devices (FAKECUDA_DEVICES=2); t/vmm.t runs it on the GPUs
-- there are.
local t = require "tap"
local fake = require "fake"
if os.getenv("FAKECUDA_DEVICES") ~= "2" and os.getenv("CUDALUA_FAKE_LIBCUDA") then
  local _, _, code = os.execute("FAKECUDA_DEVICES=2 " .. t.cudalua() .. " '" .. arg[0] .. "'")
  os.exit(code)
end
local cuda, fakecuda = fake.start()
local seed = t.seed()
t.plan(25)

local MiB = 1 << 20
local d0, d1 = cuda.Device(0), cuda.Device(1)
d0:set_current()
local s0, s1 = d0:create_stream(), d1:create_stream()
local pinned = cuda.PinnedMemoryResource()
t.is(cuda.device_count(), 2, "two fake devices")
local base = fake.live(fakecuda)

local vmr = cuda.VirtualMemoryResource{devices = {d0, 1}, granularity = "minimum"}
t.ok(rawequal(vmr.device, d0) and vmr.device_id == 0, "the first device is the resource's")
t.is(table.concat(vmr.devices, ","), "0,1", "vmr.devices lists both, in order")
t.is(table.concat(vmr.peer_accessible_by, ","), "1", "device 1 may use its buffers")
t.is(table.concat(cuda.virtual_memory_info(vmr).devices, ","), "0,1", "virtual_memory_info gives the devices")

-- a size that does not divide evenly: each device gets half, rounded up to 2 MiB
fakecuda.vmm_log()
local n = 4 * math.random(MiB // 4, 3 * MiB // 4) * 4 + 4 * math.random(1, 1000)
local buf = vmr:allocate(n, s0)
local created, granted = fakecuda.vmm_log()
t.is(table.concat(created, ","), "0,1", "one physical chunk on each device, in order")
t.is(granted, 2, "access granted to both devices")
t.is(fakecuda.live().virtual, 3, "one reserved range and two physical allocations")
t.is(buf.size, n, "buf.size is what was asked for")

-- data through the whole range, both chunks
local N = n // 4
local host = pinned:allocate(n)
host:view("float32"):random(-1, 1, seed)
host:copy_to(buf, s0)
local back = pinned:allocate(n)
back:view("float32"):fill(0 / 0)
buf:copy_to(back, s0)
s0:sync()
t.ok(back:view("float32"):allclose(host:view("float32"), 0, 0), "random data round-trips through both chunks")

-- a kernel on device 1 over the whole buffer
local k1 = require("cuda.kernels").load(d1, "scale_and_bias.cu", "scale_and_bias")
cuda.launch(s1, cuda.LaunchConfig{grid = 64, block = 256}, k1, buf, cuda.f32(3), cuda.f32(-1), cuda.u64(N))
s1:sync()
buf:copy_to(back, s0)
s0:sync()
host:view("float32"):scale(3)
host:view("float32"):add(-1)
t.ok(back:view("float32"):allclose(host:view("float32"), 1e-6, 1e-6), "a kernel on device 1 reads and writes all of it")

t.raises(function() buf:grow(2 * n, s0) end, "spread over several devices does not grow", "a spread buffer does not grow")

-- a release waits for both devices, then unmaps, releases, frees the range
local syncs = fakecuda.calls("cuCtxSynchronize")
buf:close()
t.ok(fakecuda.calls("cuCtxSynchronize") - syncs >= 2, "closing waits for both devices")
t.is(fakecuda.live().virtual, 0, "every mapping, allocation and range is given back")

-- a failure on the second device undoes the first's
for _, api in ipairs{"cuMemCreate", "cuMemMap", "cuMemSetAccess"} do
  fakecuda.fail(api, 2)
  t.raises(function() vmr:allocate(MiB, s0) end, api, api .. " fails on the second device: a cuda.Error")
end
t.is(fakecuda.live().virtual, 0, "and nothing is left of the failed allocations")

-- one device in the list is the plain resource
fakecuda.vmm_log()
local one = cuda.VirtualMemoryResource{devices = {d1}}
local b1 = one:allocate(MiB, s1)
created, granted = fakecuda.vmm_log()
t.ok(one.device_id == 1 and table.concat(created, ",") == "1" and granted == 1 and
     #one.peer_accessible_by == 0, "devices = {d1}: one chunk on device 1, one access entry")
b1:grow(8 * MiB, s1)
t.is(b1.size, 8 * MiB, "and it grows as a plain one does")
b1:close()

-- bad input
t.raises(function() cuda.VirtualMemoryResource{devices = {d0, d0}} end, "lists device 0 twice", "a device twice")
t.raises(function() cuda.VirtualMemoryResource{devices = {}} end, "1 to 64 devices", "no device")
t.raises(function() cuda.VirtualMemoryResource{devices = {d0, 5}} end, "no CUDA device 5", "a device the system lacks")
t.raises(function() cuda.VirtualMemoryResource(d0, {devices = {d0, d1}}) end, "not both", "a device and devices")

vmr, one, host, back, k1 = nil
t.is(fake.live(fakecuda), base, "nothing leaked")
t.done()
