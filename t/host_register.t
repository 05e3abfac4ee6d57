-- cuda.register_host under the fake driver (t/fake.lua): pageable buffers,
-- views, strings and raw addresses page-locked through cuMemHostRegister;
-- the driver's state after each register and close (fakecuda.host_registered);
-- overlaps refused before the driver; a mapped range read by a kernel
-- through reg.device_ptr; lifetimes (a buffer closed under its registration,
-- collection); bad input and driver failures. The copy rate from a
-- registered range is measured on a GPU by bench/register_host.lua.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()
local seed = t.seed()
t.plan(59)

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local host = cuda.HostMemoryResource()
local pinned = cuda.PinnedMemoryResource()
local PORTABLE, DEVICEMAP, IOMEMORY, READ_ONLY = 1, 2, 4, 8

-- a pageable buffer, no options
local n = math.random(100, 1000)
local buf = host:allocate(n * 4)
local reg = cuda.register_host(buf)
t.ok(reg.ptr == buf.ptr and reg.size == buf.size, "reg.ptr and reg.size: the whole buffer")
local flags, at, size = fakecuda.host_registered(buf.ptr + n)
t.ok(flags == 0 and at == buf.ptr and size == buf.size, "the driver holds the buffer's range, flags 0")
t.ok(not reg.mapped and not reg.portable and not reg.read_only and reg.device_ptr == nil,
     "no options: not mapped, no device_ptr")
t.ok(rawequal(reg.source, buf), "reg.source is the buffer")
t.like(tostring(reg), "^cuda%.HostRegistration%(0x%x+, " .. n * 4 .. " bytes%)$", "tostring")

-- copies from and to it, through the driver's copy (its pinned path)
buf:view("float32"):random(-1, 1, seed)
local dbuf = dev.memory_resource:allocate(n * 4, s)
local back = host:allocate(n * 4)
buf:copy_to(dbuf, s)
dbuf:copy_to(back, s)
s:sync()
t.ok(back:view("float32"):allclose(buf:view("float32"), 0, 0), "copies to and from a registered buffer")

-- overlaps are refused before the driver, naming the live registration
local calls = fakecuda.calls("cuMemHostRegister")
t.raises(function() cuda.register_host(buf) end, "overlaps a live registration %(0x%x+ %+ " .. n * 4 .. " bytes%)",
         "the same buffer twice")
t.raises(function() cuda.register_host(buf:slice(8, 16)) end, "overlaps a live registration",
         "a slice inside it")
t.raises(function() cuda.register_host(cuda.ptr(buf.ptr + n * 4 - 4), 64) end, "overlaps",
         "a raw range reaching into it")
t.is(fakecuda.calls("cuMemHostRegister"), calls, "none of them reached the driver")

-- close unregisters; the range can be registered again
reg:close()
t.ok(reg.is_closed and reg.ptr == nil and fakecuda.host_registered(buf.ptr) == nil,
     "close unregisters it at the driver")
reg:close()
t.ok(reg.is_closed, "closing twice is a no-op")
t.like(tostring(reg), "^cuda%.HostRegistration %(closed%)$", "a closed registration's tostring")

-- options; a mapped range read by a kernel through its device pointer
local mreg = cuda.register_host(buf, nil, {portable = true, mapped = true})
flags = fakecuda.host_registered(buf.ptr)
t.is(flags, PORTABLE | DEVICEMAP, "portable and mapped: CU_MEMHOSTREGISTER_PORTABLE | DEVICEMAP")
t.ok(mreg.mapped and mreg.portable and mreg.device_ptr.value == buf.ptr,
     "reg.device_ptr is a cuda.ptr (the fake maps a range at its host address)")
local obj = cuda.Program([[
extern "C" __global__ void vector_scale(const float *input, float *output, float scale,
                                        unsigned long long n) {}
]], "c++", {arch = "sm_90"}):compile("cubin")
local k = obj:get_kernel("vector_scale")
local out = pinned:allocate(n * 4)
out:view("float32"):fill(0 / 0)
cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 32}, k, mreg.device_ptr, out, cuda.f32(2), cuda.u64(n))
s:sync()
local worst, X, O = 0, buf:view("float32"), out:view("float32")
for i = 1, n do
  local want = math.sqrt((2 * X[i]) ^ 2 + 50)   -- the fake's vector_scale: sqrt(v^2 + 1), 50 times
  worst = math.max(worst, math.abs(O[i] - want) / want)
end
t.ok(worst < 1e-5, ("a kernel reads the mapped range through reg.device_ptr (worst relative error %.1e)"):format(worst))
mreg:close()
t.is(fakecuda.host_registered(buf.ptr), nil, "unregistered")
t.is(cuda.register_host(buf, nil, {device_map = true, read_only = true, io_memory = true}).read_only, true,
     "device_map is mapped's other name; read_only, io_memory")
flags = fakecuda.host_registered(buf.ptr)
t.is(flags, DEVICEMAP | READ_ONLY | IOMEMORY, "the flags the driver got")
collectgarbage()
collectgarbage()
t.is(fakecuda.host_registered(buf.ptr), nil, "a registration collected is unregistered")
do
  local r <close> = cuda.register_host(buf)
end
t.is(fakecuda.host_registered(buf.ptr), nil, "a <close> registration is unregistered at scope end")

-- part of a buffer, a view, a raw address
local part = cuda.register_host(buf, 64)
flags, at, size = fakecuda.host_registered(buf.ptr)
t.ok(at == buf.ptr and size == 64 and fakecuda.host_registered(buf.ptr + 64) == nil, "size 64: the first 64 bytes")
local other = host:allocate(256)
local vreg = cuda.register_host(other:slice(16, 32):view("uint8"))
flags, at, size = fakecuda.host_registered(other.ptr + 20)
t.ok(at == other.ptr + 16 and size == 32, "a view: its elements' range")
local raw = host:allocate(128)
local rreg = cuda.register_host(cuda.ptr(raw.ptr), 128)
local ireg = cuda.register_host(buf.ptr + 64, 16)
t.ok(rreg.size == 128 and ireg.ptr == buf.ptr + 64 and fakecuda.host_registered(buf.ptr + 70),
     "a raw address, as cuda.ptr(n) or an integer, with its size")
part:close(); vreg:close(); rreg:close(); ireg:close()

-- a Lua string: read-only, and kept alive by the registration
local str = ("cudalua %d "):format(seed):rep(64)
local sreg = cuda.register_host(str, nil, {mapped = true})
flags, at, size = fakecuda.host_registered(sreg.ptr)
t.ok(flags == DEVICEMAP | READ_ONLY and size == #str, "a string registers read-only, all of it")
t.ok(sreg.read_only and rawequal(sreg.source, str), "reg.source keeps the string alive")
t.raises(function() cuda.register_host("abc", nil, {read_only = false}) end, "a Lua string is immutable",
         "a string is never registered writable")
sreg:close()

-- the driver pins what it registers: an address with no memory behind it,
-- or read-only memory registered writable, fails there as a cuda.Error (the
-- fake checks /proc/self/maps, so its kernels never write through it)
local unmapped = cuda.register_host
for _, case in ipairs{{2426, 64, "an unmapped address"}, {1 << 40, 4096, "an address in no mapping"},
                      {raw.ptr, 1 << 40, "a range running past its mapping"}} do
  local ok, err = pcall(unmapped, case[1], case[2], {mapped = true})
  t.ok(not ok and getmetatable(err) == cuda.Error and err.code == 1, "register_host: " .. case[3] .. ": CUDA_ERROR_INVALID_VALUE")
end
local code = cuda.register_host(cuda.ptr(fakecuda.code_address()), 16, {read_only = true})
t.ok(code.size == 16, "read-only memory registers read_only")
code:close()
t.raises(function() cuda.register_host(cuda.ptr(fakecuda.code_address()), 16) end, "CUDA_ERROR_INVALID_VALUE",
         "read-only memory does not register writable")

-- a buffer closed under its registration keeps its memory until the registration goes
local keep = host:allocate(4096)
local kreg = cuda.register_host(keep)
local kptr = keep.ptr
keep:close()
t.ok(not pcall(function() return keep.size end) and kreg.size == 4096 and fakecuda.host_registered(kptr),
     "closing the buffer first: still registered")
kreg:close()
t.is(fakecuda.host_registered(kptr), nil, "and unregistered with its registration")

-- bad input, before the driver
calls = fakecuda.calls("cuMemHostRegister")
local closed = host:allocate(16)
closed:close()
for _, case in ipairs{
  {function() cuda.register_host(pinned:allocate(64)) end, "pinned memory is page%-locked already"},
  {function() cuda.register_host(dev.memory_resource:allocate(64, s)) end, "device memory cannot be host%-registered"},
  {function() cuda.register_host(cuda.ManagedMemoryResource():allocate(64)) end, "managed memory cannot be host%-registered"},
  {function() cuda.register_host(buf, n * 4 + 1) end, "more than the " .. n * 4 .. " bytes it has"},
  {function() cuda.register_host(buf, 0) end, "size must be >= 1"},
  {function() cuda.register_host(buf, 1.5) end, "size"},
  {function() cuda.register_host(cuda.ptr(raw.ptr)) end, "a raw address needs its size"},
  {function() cuda.register_host(0, 16) end, "a null address"},
  {function() cuda.register_host("") end, "nothing to register"},
  {function() cuda.register_host({}) end, "cuda.Buffer, cuda.View, string or address"},
  {function() cuda.register_host(s) end, "cuda.Buffer, cuda.View, string or address"},
  {function() cuda.register_host(cuda.u64(5), 8) end, "cuda.Buffer, cuda.View, string or address"},
  {function() cuda.register_host(closed) end, "cuda.Buffer is closed"},
  {function() cuda.register_host(buf, nil, {pinned = true}) end, "unknown option 'pinned'"},
  {function() cuda.register_host(buf, nil, {mapped = 1}) end, "field 'mapped' must be a boolean"},
  {function() cuda.register_host(buf, nil, 5) end, "table expected"},
  {function() cuda.register_host(buf, nil, nil, 4) end, "unexpected argument"},
  {function() cuda.register_host(-16, 64) end, "wraps past the end"},
  {function() cuda.register_host(other:view("float32", {16}, {2})) end, "strided"},
} do
  t.raises(case[1], case[2], "register_host: " .. case[2])
end
t.is(fakecuda.calls("cuMemHostRegister"), calls, "no bad input reached the driver")

-- driver failures: raised as cuda.Error, nothing left registered
fakecuda.fail("cuMemHostRegister", 1, 712)
t.raises(function() cuda.register_host(buf) end, "cuMemHostRegister: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
         "the driver's refusal comes back as cuda.Error")
fakecuda.fail("cuMemHostGetDevicePointer")
t.raises(function() cuda.register_host(buf, nil, {mapped = true}) end, "cuMemHostGetDevicePointer",
         "a failed device-pointer lookup")
t.is(fakecuda.host_registered(buf.ptr), nil, "and undoes the registration")
t.ok(cuda.register_host(buf):close() == nil, "the range registers again afterwards")

reg, mreg, part, vreg, rreg, ireg, sreg, kreg = nil
collectgarbage()
collectgarbage()
t.is(fakecuda.live()["host registrations"], 0, "every registration is given back")
