-- cuda.register_host on a GPU: a kernel writes a registered (mapped)
-- pageable buffer in place through reg.device_ptr and reads a registered
-- Lua string; copies from the registered range are checked for their data
-- (their rate: bench/register_host.lua). Without a device it skips;
-- t/host_register.t runs the C paths under the fake driver.
local t = require "tap"
local cuda = t.need_gpu()
local seed = t.seed()
t.plan(4)

local dev = cuda.Device(0)
dev:set_current()
local s <close> = dev:create_stream()
local obj = cuda.Program([[
extern "C" __global__ void affine(unsigned *x, unsigned a, unsigned b, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) x[i] = x[i] * a + b;
}
extern "C" __global__ void byte_sum(const unsigned char *p, unsigned long long n,
                                    unsigned long long *out) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) atomicAdd(out, (unsigned long long)p[i]);
}
]], "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
local affine, byte_sum = obj:get_kernel("affine"), obj:get_kernel("byte_sum")
local cfg = cuda.LaunchConfig{grid = 64, block = 256}
local host = cuda.HostMemoryResource()

local n = math.random(1000, 100000)
local buf = host:allocate(n * 4)
local v = buf:view("uint32")
v:random(0, 2 ^ 20, seed)
local before = v:to_table()
local a, b = math.random(2, 1000), math.random(0, 1000)
local reg <close> = cuda.register_host(buf, nil, {mapped = true, portable = true})
cuda.launch(s, cfg, affine, reg.device_ptr, cuda.u32(a), cuda.u32(b), cuda.u64(n))
s:sync()
local bad = 0
for i = 1, n do
  if v[i] ~= (before[i] * a + b) & 0xffffffff then bad = bad + 1 end
end
t.is(bad, 0, ("a kernel rewrote all %d elements of a registered pageable buffer in place"):format(n))

local dbuf = dev.memory_resource:allocate(n * 4, s)
local back = host:allocate(n * 4)
buf:copy_to(dbuf, s)
dbuf:copy_to(back, s)
s:sync()
t.ok(back:view("uint32"):allclose(v, 0, 0), "copies from and to the registered range carry its data")

-- unregistered before the next registration: the driver locks whole pages,
-- and a small string may share one with the buffer
reg:close()
t.ok(reg.is_closed, "unregistered")

local str = {}
for i = 1, math.random(1000, 5000) do str[i] = string.char(math.random(0, 255)) end
str = table.concat(str)
local want = 0
for i = 1, #str do want = want + str:byte(i) end
local sreg <close> = cuda.register_host(str, nil, {mapped = true})
local sum = cuda.PinnedMemoryResource():allocate(8)
sum:fill(0)
cuda.launch(s, cfg, byte_sum, sreg.device_ptr, cuda.u64(#str), sum)
s:sync()
t.is(sum:view("uint64")[1], want, ("a kernel summed the %d bytes of a registered (read-only) string"):format(#str))
