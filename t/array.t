-- Arrays, textures and surfaces on a GPU, each result against a host
-- computation on fresh random data: a 2-D float texture sampled with
-- linear filtering (a host bilinear interpolation, within the hardware's
-- 8-bit fractional weights), point fetches of every texel, a surface
-- write read back, a texture over a pitched device buffer. Without a
-- device it skips; t/array_fake.t runs the C paths under the fake driver.
local t = require "tap"
local cuda = t.need_gpu()
local seed = t.seed()
t.plan(9)

local dev = cuda.Device(0)
dev:set_current()
local s <close> = dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local mr = dev.memory_resource
local obj = cuda.Program(dofile(os.getenv("CUDALUA_SRCDIR") .. "/t/texture_kernels.lua"), "c++",
                         {arch = "sm_" .. dev.arch}):compile("cubin")
local fetch, fill, bilinear = obj:get_kernel("tex_fetch"), obj:get_kernel("surf_fill"),
                              obj:get_kernel("tex_bilinear")
local cfg = cuda.LaunchConfig{grid = 64, block = 256}
local function floats(buf) return buf:view("float32") end

local W, H = math.random(100, 400), math.random(50, 300)
local n = W * H
local data = pinned:allocate(n * 4)
floats(data):random(0, 1, seed)
local arr <close> = cuda.Array{format = "float32", width = W, height = H}
arr:copy_from(data, s)

-- every texel through a point-filtered texture
local out = pinned:allocate(n * 4)
floats(out):fill(0 / 0)
local point <close> = cuda.TextureObject(arr)
cuda.launch(s, cfg, fetch, point, out, W, n)
s:sync()
t.ok(floats(out):allclose(floats(data), 0, 0), ("tex2D reads every texel of a %dx%d array"):format(W, H))

-- linear filtering at random points, clamped at the edges, against a host
-- bilinear interpolation: the texture unit's weights are 9-bit fixed point
-- (8 fractional bits), so on data in [0, 1] a sample is within 2^-8 of the
-- exact value per axis, 2^-7 in all; neighbouring texels differ by ~1/3
local M = 4096
local xs, ys, samples = pinned:allocate(M * 4), pinned:allocate(M * 4), pinned:allocate(M * 4)
floats(xs):random(-2, W + 2, seed + 1)
floats(ys):random(-2, H + 2, seed + 2)
floats(samples):fill(0 / 0)
local linear <close> = cuda.TextureObject(arr, {filter_mode = "linear", address_mode = "clamp"})
cuda.launch(s, cfg, bilinear, linear, xs, ys, samples, M)
s:sync()
local T = floats(data)
local function texel(i, j)
  i = math.max(0, math.min(W - 1, i))
  j = math.max(0, math.min(H - 1, j))
  return T[j * W + i + 1]
end
local X, Y, S = floats(xs), floats(ys), floats(samples)
local worst, worst_at, moved = 0, 0, 0
for k = 1, M do
  local xb, yb = X[k] - 0.5, Y[k] - 0.5
  local i, j = math.floor(xb), math.floor(yb)
  local a, b = xb - i, yb - j
  local want = (1 - a) * (1 - b) * texel(i, j) + a * (1 - b) * texel(i + 1, j)
             + (1 - a) * b * texel(i, j + 1) + a * b * texel(i + 1, j + 1)
  local err = math.abs(S[k] - want)
  if not (err <= worst) then worst, worst_at = err, k end
  if math.abs(want - texel(i, j)) > 0.01 then moved = moved + 1 end
end
t.ok(worst <= 2 ^ -7, ("linear filtering matches a host bilinear interpolation at %d points "
                       .. "(worst error %.2e at %d; tolerance 2^-7)"):format(M, worst, worst_at))
t.ok(moved > M / 2, "the interpolation differs from a nearest fetch at most points (" .. moved .. ")")

-- normalized coordinates with wrap: (x + 1) wraps to x
local wrapped = cuda.TextureObject(arr, {filter_mode = "linear", address_mode = "wrap",
                                         normalized_coords = true})
local nx, ny = pinned:allocate(M * 4), pinned:allocate(M * 4)
for k = 1, M do
  floats(nx)[k] = X[k] / W + 1
  floats(ny)[k] = Y[k] / H
end
local S2 = pinned:allocate(M * 4)
floats(S2):fill(0 / 0)
cuda.launch(s, cfg, bilinear, wrapped, nx, ny, S2, M)
s:sync()
local inside, agree = 0, 0
for k = 1, M do
  if X[k] >= 1 and X[k] <= W - 1 and Y[k] >= 1 and Y[k] <= H - 1 then
    inside = inside + 1
    if math.abs(floats(S2)[k] - S[k]) <= 2 ^ -7 then agree = agree + 1 end
  end
end
t.ok(inside > 0 and agree == inside, ("normalized, wrapped coordinates: %d of %d interior samples agree")
     :format(agree, inside))
wrapped:close()

-- a surface write read back
local sarr <close> = cuda.Array{format = "float32", width = W, height = H, surface = true}
local surf <close> = cuda.SurfaceObject(sarr)
local back = pinned:allocate(n * 4)
floats(back):fill(0 / 0)
local v0 = math.random(-1000, 1000) + 0.25
cuda.launch(s, cfg, fill, surf, cuda.f32(v0), W, n)
sarr:copy_to(back, s)
s:sync()
local want = pinned:allocate(n * 4)
floats(want):iota(v0, 1)
t.ok(floats(back):allclose(floats(want), 0, 0), "surf2Dwrite of every element, read back by a copy")

-- the surface's array read through a texture of its own
local stex <close> = cuda.TextureObject(sarr)
floats(out):fill(0 / 0)
cuda.launch(s, cfg, fetch, stex, out, W, n)
s:sync()
t.ok(floats(out):allclose(floats(want), 0, 0), "what the surface wrote, read through a texture")

-- a texture over a device buffer with a pitch
local pitch = (W * 4 + 511) // 512 * 512
local whole = mr:allocate(pitch * H + 512, s)   -- the base aligned as textures need (512)
local dbuf = whole:slice((512 - whole.ptr % 512) % 512, pitch * H)
local staged = pinned:allocate(pitch * H)
staged:fill(0)
local SV = floats(staged)
for j = 0, H - 1 do
  for i = 0, W - 1 do SV[j * pitch // 4 + i + 1] = T[j * W + i + 1] end
end
staged:copy_to(dbuf, s)
local ptex <close> = cuda.TextureObject(dbuf, {format = "float32", width = W, height = H, pitch = pitch})
floats(out):fill(0 / 0)
cuda.launch(s, cfg, fetch, ptex, out, W, n)
s:sync()
t.ok(floats(out):allclose(floats(data), 0, 0), ("a 2-D texture over a device buffer (pitch %d)"):format(pitch))

-- closing the array under its texture: the texture still reads it
arr:close()
floats(out):fill(0 / 0)
cuda.launch(s, cfg, fetch, point, out, W, n)
s:sync()
t.ok(floats(out):allclose(floats(data), 0, 0), "a texture reads its array after arr:close()")

-- a 3-D array round trip through device memory
local D = math.random(2, 6)
local a3 <close> = cuda.Array{format = "uint16", channels = 2, width = 33, height = 17, depth = D}
local h16 = pinned:allocate(a3.size)
h16:view("uint16"):random(0, 65535, seed + 3)
local d16, back16 = mr:allocate(a3.size, s), pinned:allocate(a3.size)
back16:fill(0)
h16:copy_to(d16, s)
a3:copy_from(d16, s)
d16:fill(0, s)
a3:copy_to(d16, s)
d16:copy_to(back16, s)
s:sync()
t.ok(back16:view("uint16"):allclose(h16:view("uint16"), 0, 0),
     ("a 33x17x%d ushort2 array: device -> array -> device"):format(D))
t.done()
