-- cuda.TensorMap on a GPU of compute capability 9.0 or newer: a 1-D and a
-- 2-D TMA tile load into shared memory (cp.async.bulk.tensor, completed on
-- an mbarrier), each verified against a host computation, then repointed
-- with replace_address and run again. Skipped without such a GPU; the
-- fake driver's checks are in t/tensormap.t.
local t = require "tap"
local cuda = t.need_gpu()
local dev = cuda.Device(0)
if tonumber(dev.arch) < 90 then t.skip_all("TMA needs compute capability 9.0, device 0 is " .. dev.arch) end
dev:set_current()
local seed = t.seed()
t.plan(7)

local SOURCE = [[
struct alignas(64) TMap { unsigned long long v[16]; };   // a CUtensorMap

__device__ static unsigned smem(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ static void bar_init(unsigned long long *bar)
{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ static void bar_expect(unsigned long long *bar, unsigned bytes)
{
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
               :: "r"(smem(bar)), "r"(bytes) : "memory");
}

__device__ static void bar_wait(unsigned long long *bar, unsigned phase)
{
  asm volatile("{\n\t.reg .pred p;\n"
               "WAIT:\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
               "\t@!p bra WAIT;\n}" :: "r"(smem(bar)), "r"(phase) : "memory");
}

// out[i] = 2 * in[i] + 1 over one box of `box` floats per block
extern "C" __global__ void tma_1d(const __grid_constant__ TMap tm, float *out, int box, int n)
{
  __shared__ alignas(128) float tile[256];
  __shared__ alignas(8) unsigned long long bar;
  int x0 = blockIdx.x * box;
  if (threadIdx.x == 0)
    bar_init(&bar);
  __syncthreads();
  if (threadIdx.x == 0) {
    bar_expect(&bar, box * sizeof(float));
    asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2}], [%3];"
                 :: "r"(smem(tile)), "l"((unsigned long long)&tm), "r"(x0), "r"(smem(&bar))
                 : "memory");
  }
  bar_wait(&bar, 0);
  for (int i = threadIdx.x; i < box && x0 + i < n; i += blockDim.x)
    out[x0 + i] = 2.0f * tile[i] + 1.0f;
}

// the same over a bw x bh box of a w x h row-major matrix, block (x, y) its tile
extern "C" __global__ void tma_2d(const __grid_constant__ TMap tm, float *out, int bw, int bh,
                                  int w, int h)
{
  __shared__ alignas(128) float tile[64 * 32];
  __shared__ alignas(8) unsigned long long bar;
  int x0 = blockIdx.x * bw, y0 = blockIdx.y * bh;
  if (threadIdx.x == 0)
    bar_init(&bar);
  __syncthreads();
  if (threadIdx.x == 0) {
    bar_expect(&bar, bw * bh * sizeof(float));   // out-of-bounds elements count too: zero-filled
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(smem(tile)), "l"((unsigned long long)&tm), "r"(x0), "r"(y0),
                    "r"(smem(&bar)) : "memory");
  }
  bar_wait(&bar, 0);
  for (int i = threadIdx.x; i < bw * bh; i += blockDim.x) {
    int x = x0 + i % bw, y = y0 + i / bw;
    if (x < w && y < h)
      out[y * w + x] = 2.0f * tile[i] + 1.0f;
  }
}
]]

local s = dev:create_stream()
local mr = dev.memory_resource
local pinned = cuda.PinnedMemoryResource()
local obj = cuda.Program(SOURCE, "c++", {arch = "sm_" .. dev.arch, std = "c++17"}):compile("cubin")
local k1, k2 = obj:get_kernel("tma_1d"), obj:get_kernel("tma_2d")

-- random input of n floats on the device, and its host copy
local function input(n, salt)
  local h = pinned:allocate(n * 4)
  h:view("float32"):random(-100, 100, seed + salt)
  local d = mr:allocate(n * 4, s)
  d:copy_from(h, s)
  return d, h
end
-- the host computation, 2 * x + 1 in float32, against the kernel's output
local function check(dout, hin, n, name)
  local got = pinned:allocate(n * 4)
  dout:copy_to(got, s)
  s:sync()
  local want = pinned:allocate(n * 4)
  want:view("float32"):copy(hin:view("float32"))
  want:view("float32"):scale(2)
  want:view("float32"):add(1)
  local ok, err, at = got:view("float32"):allclose(want:view("float32"), 0, 0)
  t.ok(ok, name .. (ok and "" or (" (max error %g at %s)"):format(err, at)))
end

-- 1-D: 4096 + 37 floats (a partial last box), boxes of 128
local N, BOX = 4096 + 37, 128
local din, hin = input(N, 1)
local dout = mr:allocate(N * 4, s)
local tm = cuda.TensorMap.tiled(din, {dtype = "float32", shape = {N}, box = {BOX}})
local grid1 = cuda.LaunchConfig{grid = (N + BOX - 1) // BOX, block = 128}
cuda.launch(s, grid1, k1, tm, dout, BOX, N)
check(dout, hin, N, "1-D TMA tile loads match the host computation")
local din2, hin2 = input(N, 2)
tm:replace_address(din2)
t.is(tm.address, din2.ptr, "replace_address repoints the 1-D map")
cuda.launch(s, grid1, k1, tm, dout, BOX, N)
check(dout, hin2, N, "after replace_address the same map loads the new buffer")

-- 2-D: 200 x 70 floats (800-byte rows), boxes of 32 x 8 (partial tiles on both edges)
local W, H, BW, BH = 200, 70, 32, 8
local min, hmin = input(W * H, 3)
local mout = mr:allocate(W * H * 4, s)
local tm2 = cuda.TensorMap.tiled(min, {dtype = "float32", shape = {W, H}, box = {BW, BH}})
local grid2 = cuda.LaunchConfig{grid = {(W + BW - 1) // BW, (H + BH - 1) // BH}, block = 128}
cuda.launch(s, grid2, k2, tm2, mout, BW, BH, W, H)
check(mout, hmin, W * H, "2-D TMA tile loads match the host computation")
local min2, hmin2 = input(W * H, 4)
tm2:replace_address(min2)
cuda.launch(s, grid2, k2, tm2, mout, BW, BH, W, H)
check(mout, hmin2, W * H, "2-D after replace_address")

-- a strided 2-D map over a padded pitch (rows of 256 floats, 200 used)
local P = 256
local pin, hpin = input(P * H, 5)
local tm3 = cuda.TensorMap.tiled(pin, {dtype = "float32", shape = {W, H}, strides = {P * 4}, box = {BW, BH}})
cuda.launch(s, grid2, k2, tm3, mout, BW, BH, W, H)
local got = pinned:allocate(W * H * 4)
mout:copy_to(got, s)
s:sync()
local g, src, bad = got:view("float32"), hpin:view("float32"), 0
for y = 0, H - 1 do
  for x = 0, W - 1 do
    local want = string.unpack("f", string.pack("f", 2 * src[y * P + x + 1] + 1))
    if g[y * W + x + 1] ~= want then bad = bad + 1 end
  end
end
t.is(bad, 0, "a pitched 2-D map reads the rows at their stride")
t.ok(tm3.rank == 2 and tm3.dtype == "float32", "its fields")
t.done()
