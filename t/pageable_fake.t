-- Pageable host memory in kernels under the fake driver (t/fake.lua), both
-- ways: with FAKECUDA_PAGEABLE_MEMORY_ACCESS=1 the device reports
-- pageable_memory_access (HMM, ATS) and cuda.launch passes pageable buffers
-- and views, which a kernel reads and writes in place; with 0 the launch
-- is refused with the reason before the driver. On a GPU that reports the
-- attribute, t/pageable_gpu.t runs system-scope atomics on pageable memory.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start("FAKECUDA_PAGEABLE_MEMORY_ACCESS=1 ")
local seed = t.seed()
t.plan(6)

local dev = cuda.Device(0)
dev:set_current()
t.is(dev.properties.pageable_memory_access, 1, "the device reports pageable_memory_access")
local s = dev:create_stream()
local host = cuda.HostMemoryResource()
local obj = cuda.Program([[
extern "C" __global__ void vector_scale(const float *input, float *output, float scale,
                                        unsigned long long n) {}
]], "c++", {arch = "sm_90"}):compile("cubin")
local k = obj:get_kernel("vector_scale")
local cfg = cuda.LaunchConfig{grid = 1, block = 32}

local n = math.random(10, 1000)
local x, y = host:allocate(n * 4), host:allocate(n * 4)
x:view("float32"):random(-2, 2, seed)
y:view("float32"):fill(0 / 0)
local scale = math.random(1, 8) / 4
cuda.launch(s, cfg, k, x, y, cuda.f32(scale), cuda.u64(n))
s:sync()
local worst, X, Y = 0, x:view("float32"), y:view("float32")
for i = 1, n do
  local want = math.sqrt((scale * X[i]) ^ 2 + 50)     -- the fake's vector_scale
  worst = math.max(worst, math.abs(Y[i] - want) / want)
end
t.ok(worst < 1e-5, ("a kernel read and wrote pageable buffers in place (worst relative error %.1e)"):format(worst))

-- a view's first element: the kernel starts there
local m = n // 2
Y = y:view("float32")
local tail = y:slice((n - m) * 4, m * 4):view("float32")
tail:fill(-1)
cuda.launch(s, cfg, k, x:slice(0, m * 4):view("float32"), tail, cuda.f32(scale), cuda.u64(m))
s:sync()
t.ok(math.abs(Y[n - m + 1] - math.sqrt((scale * X[1]) ^ 2 + 50)) < 1e-4, "a pageable view passes its first element's address")

-- a closed pageable buffer is still refused
local gone = host:allocate(16)
gone:close()
t.raises(function() cuda.launch(s, cfg, k, gone, y, cuda.f32(1), cuda.u64(1)) end, "cuda.Buffer is closed",
         "a closed pageable buffer")

-- the other way: a device that cannot reach pageable memory refuses it
local code, out, err = t.run(fake.env("FAKECUDA_PAGEABLE_MEMORY_ACCESS=0 ") .. t.cudalua() .. [[ -e '
local cuda = require "cuda"
local dev = cuda.Device(0)
local k = cuda.Program([=[extern "C" __global__ void vector_scale(const float *i, float *o, float s,
  unsigned long long n) {}]=], "c++", {arch = "sm_90"}):compile("cubin"):get_kernel("vector_scale")
local h = cuda.HostMemoryResource():allocate(16)
print(dev.properties.pageable_memory_access)
local ok, e = pcall(cuda.launch, dev:create_stream(), cuda.LaunchConfig{grid = 1, block = 1}, k, h, h,
                    cuda.f32(1), cuda.u64(1))
print(ok, e)']])
t.like(out, "^0\nfalse\t.-argument 1: pageable host memory cannot be passed to a kernel on device 0, which "
       .. "cannot reach it %(pageable_memory_access = 0: no HMM or ATS%)", "without it the launch is refused, saying why")
t.like(out, "cuda%.register_host", "and pointing to a registration: " .. err)
