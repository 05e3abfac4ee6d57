-- Cubemap textures on a GPU: a kernel samples every texel of every face
-- (and of every layer of a layered cubemap) with texCubemap /
-- texCubemapLayered, point filtering, element-type reads, and the results
-- must equal the host's data exactly. Directions aim at texel centres
-- through the cubemap face table (the CUDA programming guide's, OpenGL's):
--   face 0 (+x): s = -z, t = -y   face 1 (-x): s = z, t = -y
--   face 2 (+y): s = x,  t = z    face 3 (-y): s = x, t = -z
--   face 4 (+z): s = x,  t = -y   face 5 (-z): s = -x, t = -y
-- each over the major axis m: texel = floor((s / |m| + 1) / 2 * N). With N
-- a power of two and |m| a power of two every coordinate is exact in
-- float32. Without a device it skips; t/texture_fake.t checks the copies
-- and descriptors under the fake driver.
local t = require "tap"
local cuda = t.need_gpu()
local seed = t.seed()
t.plan(4)

local dev = cuda.Device(0)
dev:set_current()
local s <close> = dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local obj = cuda.Program([[
typedef unsigned long long u64;
#define FOR_EACH(i, n) \
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < (n); i += (u64)gridDim.x * blockDim.x)
extern "C" __global__ void cube_fetch(cudaTextureObject_t tex, const float *dir, float *out, u64 n)
{
  FOR_EACH(i, n)
    out[i] = texCubemap<float>(tex, dir[3 * i], dir[3 * i + 1], dir[3 * i + 2]);
}
extern "C" __global__ void cube_layered_fetch(cudaTextureObject_t tex, const float *dir,
                                              const int *layer, float *out, u64 n)
{
  FOR_EACH(i, n)
    out[i] = texCubemapLayered<float>(tex, dir[3 * i], dir[3 * i + 1], dir[3 * i + 2], layer[i]);
}
]], "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
local fetch, lfetch = obj:get_kernel("cube_fetch"), obj:get_kernel("cube_layered_fetch")
local cfg = cuda.LaunchConfig{grid = 64, block = 256}

-- The direction to texel (i, j) of face f (0-based), scaled by 2^e.
local function direction(f, i, j, N, e)
  local sc, tc = (2 * i + 1) / N - 1, (2 * j + 1) / N - 1
  local x, y, z
  if f == 0 then x, y, z = 1, -tc, -sc
  elseif f == 1 then x, y, z = -1, -tc, sc
  elseif f == 2 then x, y, z = sc, 1, tc
  elseif f == 3 then x, y, z = sc, -1, -tc
  elseif f == 4 then x, y, z = sc, -tc, 1
  else x, y, z = -sc, -tc, -1 end
  local k = 2.0 ^ e
  return x * k, y * k, z * k
end

-- Sample k (0-based) reads texel k of the packed slices: slice
-- k // (N * N) = layer * 6 + face, row, column; so what the kernel reads
-- must equal the data copied in, element for element.
local function directions(N, slices)
  local n = slices * N * N
  local dir, layer = pinned:allocate(3 * n * 4), pinned:allocate(n * 4)
  local D, Lv = dir:view("float32"), layer:view("int32")
  local k = 0
  for sl = 0, slices - 1 do
    for j = 0, N - 1 do
      for i = 0, N - 1 do
        local x, y, z = direction(sl % 6, i, j, N, math.random(-3, 3))
        D[3 * k + 1], D[3 * k + 2], D[3 * k + 3] = x, y, z
        Lv[k + 1] = sl // 6
        k = k + 1
      end
    end
  end
  return dir, layer, n
end

-- the first mismatch, for the message
local function first_bad(out, data, N)
  local O, T = out:view("float32"), data:view("float32")
  for k = 1, #O do
    if O[k] ~= T[k] then
      local sl, r = (k - 1) // (N * N), (k - 1) % (N * N)
      return ("slice %d (layer %d face %d) texel (%d, %d): got %s, want %s"):format(
        sl, sl // 6, sl % 6, r % N, r // N, O[k], T[k])
    end
  end
  return "none"
end

local N = 1 << math.random(3, 6)
local cube <close> = cuda.Array{format = "float32", width = N, height = N, cubemap = true}
local data = pinned:allocate(cube.size)
data:view("float32"):random(-1000, 1000, seed)
cube:copy_from(data, s)
local tex <close> = cuda.TextureObject(cube)
local dir, _, n = directions(N, 6)
local out = pinned:allocate(n * 4)
out:view("float32"):fill(0 / 0)
cuda.launch(s, cfg, fetch, tex, dir, out, n)
s:sync()
t.ok(out:view("float32"):allclose(data:view("float32"), 0, 0),
     ("texCubemap reads every texel of six %dx%d faces exactly (first mismatch: %s)")
     :format(N, N, first_bad(out, data, N)))

-- a face replaced alone is what the kernel then reads there
local f = math.random(0, 5)
local face = pinned:allocate(N * N * 4)
face:view("float32"):random(2000, 3000, seed + 1)
cube:copy_from(face, s, {face = f + 1})
data:slice(f * N * N * 4, N * N * 4):view("float32"):copy(face:view("float32"))
out:view("float32"):fill(0 / 0)
cuda.launch(s, cfg, fetch, tex, dir, out, n)
s:sync()
t.ok(out:view("float32"):allclose(data:view("float32"), 0, 0),
     ("after copying face %d alone, the kernel reads it there (first mismatch: %s)")
     :format(f + 1, first_bad(out, data, N)))

-- a layered cubemap
local L = math.random(2, 4)
local lc <close> = cuda.Array{format = "float32", width = N, height = N, depth = 6 * L,
                              layered = true, cubemap = true}
local ldata = pinned:allocate(lc.size)
ldata:view("float32"):random(-1, 1, seed + 2)
lc:copy_from(ldata, s)
local ltex <close> = cuda.TextureObject(lc)
local ldir, llayer, ln = directions(N, 6 * L)
local lout = pinned:allocate(ln * 4)
lout:view("float32"):fill(0 / 0)
cuda.launch(s, cfg, lfetch, ltex, ldir, llayer, lout, ln)
s:sync()
t.ok(lout:view("float32"):allclose(ldata:view("float32"), 0, 0),
     ("texCubemapLayered reads every texel of %d layers exactly (first mismatch: %s)")
     :format(L, first_bad(lout, ldata, N)))

-- one face of one layer copied out is the kernel's view of it
local l1, f1 = math.random(1, L), math.random(1, 6)
local one = pinned:allocate(N * N * 4)
lc:copy_to(one, s, {layer = l1, face = f1})
s:sync()
t.ok(one:view("float32"):allclose(lout:slice(((l1 - 1) * 6 + f1 - 1) * N * N * 4, N * N * 4):view("float32"), 0, 0),
     ("{layer = %d, face = %d} copied out equals what texCubemapLayered read there"):format(l1, f1))
