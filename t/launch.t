-- Typed scalars, LaunchConfig and cuda.launch: every argument kind and
-- launch option, verified on the GPU; argument errors everywhere.
local t = require "tap"
local cuda = require "cuda"
local seed = t.seed()

-- typed scalars
t.is(cuda.f32(2.5).value, 2.5, "f32 value")
t.is(cuda.f32(0.1).value, string.unpack("f", string.pack("f", 0.1)), "f32 rounds to float32")
t.is(cuda.u64(2^63).value, 2^63, "u64 holds 2^63")
t.is(cuda.i64(-2^63).value, math.mininteger, "i64 minimum")
t.is(cuda.u8(255).dtype, "uint8", "dtype")
t.is(cuda.i16(-3).size, 2, "size")
t.like(tostring(cuda.i32(-7)), "^cuda%.i32%(%-7%)$", "tostring")
t.raises(function() cuda.u8(300) end, "300 out of range for uint8", "u8(300)")
t.raises(function() cuda.i32(2^40) end, "out of range for int32", "i32(2^40)")
t.raises(function() cuda.u64(-1) end, "out of range for uint64", "u64(-1)")
t.raises(function() cuda.f32("x") end, "float32 expects a number, got string", "f32('x')")
t.raises(function() cuda.i8(1.5) end, "int8 expects an integer", "i8(1.5)")
t.raises(function() cuda.u16() end, "bad argument #1", "u16()")

-- LaunchConfig
local cfg = cuda.LaunchConfig{grid = {4, 2}, block = 256}
t.is(table.concat(cfg.grid, ","), "4,2,1", "grid fills missing axes with 1")
t.is(table.concat(cfg.block, ","), "256,1,1", "block from a number")
t.is(cfg.shmem, 0, "shmem defaults to 0")
t.raises(function() cuda.LaunchConfig{} end, "needs grid and block", "LaunchConfig{}")
t.raises(function() cuda.LaunchConfig{grid = 0, block = 32} end, "grid%.x must be >= 1", "zero grid")
t.raises(function() cuda.LaunchConfig{grid = 1, block = -32} end, "block%.x must be >= 1", "negative block")
t.raises(function() cuda.LaunchConfig{grid = 1, block = 2000} end, "exceeds the limit %(max_block_dim", "block = 2000")
t.raises(function() cuda.LaunchConfig{grid = 1, block = {32, 32, 2}} end, "2048 threads exceeds the limit %(max_threads_per_block = 1024%)", "block {32, 32, 2}")
t.raises(function() cuda.LaunchConfig{grid = 1, block = 32, shmem = -1} end, "shmem must be >= 0", "negative shmem")
t.raises(function() cuda.LaunchConfig{grid = 1, block = 1.5} end, "must be an integer", "fractional block")
t.raises(function() cuda.LaunchConfig{grid = {1, 2, 3, 4}, block = 1} end, "1 to 3 dimensions", "four dimensions")
-- cuda.core's rule: with a cluster, grid counts clusters
local ccfg = cuda.LaunchConfig{grid = {3, 2}, block = 32, cluster = {2, 1, 1}}
t.is(table.concat(ccfg.grid, " "), "3 2 1", "with a cluster, cfg.grid reads back in clusters")
t.is(table.concat(ccfg.blocks, " "), "6 2 1", "and cfg.blocks is grid * cluster")
t.is(table.concat(cuda.LaunchConfig{grid = 5, block = 1}.blocks, " "), "5 1 1", "without one, blocks = grid")
t.like(tostring(ccfg), "grid {3, 2, 1} clusters of {2, 1, 1}", "tostring says clusters")
t.raises(function() cuda.LaunchConfig{grid = 2147483647, block = 32, cluster = 2} end,
         "grid%.x = 2147483647 clusters of cluster%.x = 2 blocks is 4294967294 blocks, over the limit %(max_grid_dim%[1%] = 2147483647%)",
         "grid * cluster over the limit")
t.raises(function() cuda.LaunchConfig{grid = {1, 40000}, block = 32, cluster = {1, 2}} end,
         "grid%.y = 40000 clusters of cluster%.y = 2 blocks is 80000 blocks", "on every axis")
t.raises(function() cuda.LaunchConfig{grid = 1, block = 32, shared = 8} end, "unknown option 'shared'", "unknown option")
t.raises(function() cuda.LaunchConfig(5) end, "table expected", "LaunchConfig(5)")

if not cuda.is_available() then
  t.skip("no CUDA device", 32)
  t.done()
end

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local pinned, dmr = cuda.PinnedMemoryResource(), dev.memory_resource
local arch = "sm_" .. dev.arch

local SOURCE = [[
extern "C" __global__ void every_kind(unsigned long long *out, signed char a, short b, int c,
    long long d, unsigned char e, unsigned short f, unsigned int g, unsigned long long h,
    float x, double y, const int *p)
{
  out[0] = (unsigned long long)(long long)a; out[1] = (unsigned long long)(long long)b;
  out[2] = (unsigned long long)(long long)c; out[3] = (unsigned long long)d;
  out[4] = e; out[5] = f; out[6] = g; out[7] = h;
  out[8] = (unsigned long long)(long long)(x * 1000.0f); out[9] = (unsigned long long)(long long)(y * 1e6);
  out[10] = (unsigned long long)p[0];
}
extern "C" __global__ void where(unsigned *out)
{
  extern __shared__ unsigned scratch[];
  unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
  scratch[tx] = bx * nthreads + tx;
  __syncthreads();
  out[bx * nthreads + tx] = scratch[nthreads - 1 - tx] + 1;
}
extern "C" __global__ void two(float *a, float b) { a[0] = b; }
]]
local obj = cuda.Program(SOURCE, "c++", {arch = arch}):compile("cubin")
local every, where, two = obj:get_kernel("every_kind"), obj:get_kernel("where"), obj:get_kernel("two")

-- every argument kind, typed and plain
local out = pinned:allocate(11 * 8)
local pv = pinned:allocate(4)
pv:view("int32")[1] = 424242
local one = cuda.LaunchConfig{grid = 1, block = 1}
cuda.launch(s, one, every, out, cuda.i8(-5), cuda.i16(-300), cuda.i32(-70000), cuda.i64(-2^40),
            cuda.u8(250), cuda.u16(65000), cuda.u32(4000000000), cuda.u64(2^63 + 2^20),
            cuda.f32(1.5), cuda.f64(2.25), pv)
s:sync()
local o = out:view("int64")
t.is(o[1], -5, "int8 argument"); t.is(o[2], -300, "int16 argument"); t.is(o[3], -70000, "int32 argument")
t.is(o[4], -2^40 // 1, "int64 argument"); t.is(o[5], 250, "uint8 argument"); t.is(o[6], 65000, "uint16 argument")
t.is(o[7], 4000000000, "uint32 argument")
t.is(out:view("uint64")[8], 2^63 + 2^20, "uint64 argument")
t.is(o[9], 1500, "float32 argument"); t.is(o[10], 2250000, "float64 argument"); t.is(o[11], 424242, "pointer argument")
-- plain numbers by the parameters' C types, read from the source's declaration
out:fill(0, s)
cuda.launch(s, one, every, out, -5, -300, -70000.0, -(1 << 40), 250, 65000, 4000000000, 2^20, 1.5, 2, pv)
s:sync()
t.ok(o[1] == -5 and o[3] == -70000 and o[7] == 4000000000 and o[8] == 1048576 and o[9] == 1500 and
     o[10] == 2000000, "plain numbers converted to the parameters' C types (2^20 an integer, 2 a double)")
t.raises(function() cuda.launch(s, one, every, out, -5, -300, 1 << 32, 0, 0, 0, 0, 0, 1.5, 2.25, pv) end,
         "argument 4: 4294967296 is out of range for an int", "2^32 for an int")
t.raises(function() cuda.launch(s, one, every, out, -5, -300, 0, 0, 0, 0, 0, 0, 1e300, 2.25, pv) end,
         "argument 10: 1e%+300 is out of range for a float", "1e300 for a float")
-- the same code without its source: types unknown, plain numbers take the parameter's size
local sized = cuda.ObjectCode.from_data(obj.code):get_kernel("every_kind")
out:fill(0, s)
cuda.launch(s, one, sized, out, -5, -300, -70000, -(1 << 40), 250, 65000, 4000000000, 123, 1.5, 2.25, pv)
s:sync()
t.ok(o[1] == -5 and o[3] == -70000 and o[7] == 4000000000 and o[9] == 1500 and o[10] == 2250000,
     "plain numbers are sized by the kernel's parameters")
-- a float with an integer value could be either: refused; exact integers pass
local function every_with(h, x)
  cuda.launch(s, one, sized, out, -5, -300, -70000, -(1 << 40), 250, 65000, 4000000000, h, x, 2.25, pv)
end
t.raises(function() every_with(2^20, 1.5) end, "argument 9: 1048576%.0 is a float with an integer value",
         "2^20 for an 8-byte parameter")
t.raises(function() every_with(123, 1e300) end, "argument 10: 1e%+300 is a float with an integer value",
         "1e300 for a float parameter")
t.raises(function() cuda.launch(s, one, sized, out, -5, -300, 1 << 32, 0, 0, 0, 0, 0, 1.5, 2.25, pv) end,
         "argument 4: 4294967296 does not fit a 4%-byte parameter", "2^32 for a 4-byte parameter")
every_with(math.tointeger(2^20), 1.5)
s:sync()
t.is(out:view("uint64")[8], 1048576, "math.tointeger(2^20) arrives exactly")

-- grid, block in 3D, dynamic shared memory over 48 KiB
local grid, block = {3, 2, 2}, {8, 4, 2}
local nthreads, nblocks = 64, 12
local pos = pinned:allocate(nthreads * nblocks * 4)
pos:view("uint32"):fill(0)
local big_shmem = math.min(dev.properties.max_shared_memory_per_block_optin, 64 * 1024)
cuda.launch(s, cuda.LaunchConfig{grid = grid, block = block, shmem = big_shmem}, where, pos)
s:sync()
local pv32, good = pos:view("uint32"), true
for bx = 0, nblocks - 1 do
  for tx = 0, nthreads - 1 do
    if pv32[bx * nthreads + tx + 1] ~= bx * nthreads + (nthreads - 1 - tx) + 1 then good = false end
  end
end
t.ok(good, "3D grid and block with " .. big_shmem .. " bytes of dynamic shared memory")

if dev.properties.cluster_launch == 1 then
  pos:view("uint32"):fill(0)
  cuda.launch(s, cuda.LaunchConfig{grid = {2, 1, 1}, block = 64, cluster = 2, shmem = 256}, where, pos)
  s:sync()
  t.is(pos:view("uint32")[4 * 64], 3 * 64 + 1, "cluster launch runs every block: grid 2 clusters of 2")
else
  t.skip("no cluster launch on this device")
end
pos:view("uint32"):fill(0)
cuda.launch(s, cuda.LaunchConfig{grid = 2, block = 32, cooperative = true, shmem = 128}, where, pos)
s:sync()
t.is(pos:view("uint32")[64], 32 + 1, "cooperative launch")

-- mismatches: all before anything is launched
local f = pinned:allocate(4)
t.raises(function() cuda.launch(s, one, two, f) end, "kernel 'two' takes 2 arguments, got 1", "too few arguments")
t.raises(function() cuda.launch(s, one, two, f, 1.0, 2) end, "takes 2 arguments, got 3", "too many arguments")
t.raises(function() cuda.launch(s, one, two, f, cuda.f64(1)) end, "cuda%.f64%(1%.0%) for a float parameter: a typed scalar must be of the parameter's size", "scalar size mismatch")
if dev.properties.pageable_memory_access == 1 then   -- HMM or ATS: the kernel reaches it (t/pageable_gpu.t)
  t.ok(pcall(cuda.launch, s, one, two, cuda.HostMemoryResource():allocate(4), 1.0), "pageable memory argument: the device reaches it")
else
  t.raises(function() cuda.launch(s, one, two, cuda.HostMemoryResource():allocate(4), 1.0) end, "pageable host memory", "pageable memory argument")
end
t.raises(function() cuda.launch(s, one, two, f, "x") end, "a string for a float parameter, which takes a number", "string argument")
local closed = pinned:allocate(4); closed:close()
t.raises(function() cuda.launch(s, one, two, closed, 1.0) end, "closed", "closed buffer")
local dead = dev:create_stream(); dead:close()
t.raises(function() cuda.launch(dead, one, two, f, 1.0) end, "cuda%.Stream is closed", "closed stream")
t.raises(function() cuda.launch(s, {grid = 1, block = 1}, two, f, 1.0) end, "cuda%.LaunchConfig expected", "a table is not a LaunchConfig")
t.raises(function() cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 1, shmem = 2^30}, two, f, 1.5) end, "max_shared_memory_per_block_optin", "shmem over the device limit")
f:view("float32")[1] = 0
cuda.launch(s, one, two, f, 7.25)
s:sync()
t.is(f:view("float32")[1], 7.25, "a float is passed as float32 to a 4-byte parameter")
t.done()
