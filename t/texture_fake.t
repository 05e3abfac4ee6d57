-- Textures and surfaces under the fake driver's two devices (t/fake.lua):
-- a handle made on one device is refused by a launch on the other, before
-- the driver sees it; the size checks of a pitched texture stay exact where
-- pitch * height passes 2^64; tostring. t/array_fake.t covers the rest.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start("FAKECUDA_DEVICES=2 ")
t.plan(43)

t.is(cuda.device_count(), 2, "the fake shows two devices")
local d0, d1 = cuda.Device(0), cuda.Device(1)
local obj = cuda.Program(dofile(os.getenv("CUDALUA_SRCDIR") .. "/t/texture_kernels.lua"), "c++",
                         {arch = "sm_90"}):compile("cubin")
local cfg = cuda.LaunchConfig{grid = 1, block = 64}
local W, H = math.random(2, 20), math.random(2, 20)
local n = W * H

-- one array, texture and surface on each device
local function objects(dev)
  dev:set_current()
  local arr = cuda.Array{format = "float32", width = W, height = H, surface = true}
  return {dev = dev, s = dev:create_stream(), arr = arr, tex = cuda.TextureObject(arr),
          surf = cuda.SurfaceObject(arr), out = cuda.PinnedMemoryResource():allocate(n * 4),
          fetch = obj:get_kernel("tex_fetch"), fill = obj:get_kernel("surf_fill")}
end
local o0, o1 = objects(d0), objects(d1)
t.like(tostring(o1.tex), "^cuda%.TextureObject%(handle %d+, device 1%)$",
       "tostring: the handle as a number and the device, no doubled 0x")
t.like(tostring(o0.surf), "^cuda%.SurfaceObject%(handle %d+, device 0%)$", "a surface's tostring")

-- each on its own device runs
local v0 = math.random(1, 100) + 0.5
cuda.launch(o1.s, cfg, o1.fill, o1.surf, cuda.f32(v0), W, n)
cuda.launch(o1.s, cfg, o1.fetch, o1.tex, o1.out, W, n)
o1.s:sync()
t.is(o1.out:view("float32")[n], v0 + n - 1, "device 1's surface and texture on device 1's stream")

-- across devices: refused with the reason, the driver never called
local launches = fakecuda.calls("cuLaunchKernel")
t.raises(function() cuda.launch(o0.s, cfg, o0.fetch, o1.tex, o0.out, W, n) end,
         "argument 1: the cuda%.TextureObject was made on device 1, the launch runs on device 0",
         "a texture of device 1 on a stream of device 0")
t.raises(function() cuda.launch(o1.s, cfg, o1.fill, o0.surf, cuda.f32(1), W, n) end,
         "argument 1: the cuda%.SurfaceObject was made on device 0, the launch runs on device 1",
         "a surface of device 0 on a stream of device 1")
-- a parameter of unknown type (no signature) takes the other path of the packer
local raw = obj:get_kernel("tex_fetch", "unsigned long long, float*, unsigned long long, unsigned long long")
t.raises(function() cuda.launch(o0.s, cfg, raw, o1.tex, o0.out, W, n) end, "made on device 1",
         "the same through a declared integer parameter")
local any = obj:get_kernel("tex_fetch", "Tex, float*, unsigned long long, unsigned long long")
t.raises(function() cuda.launch(o0.s, cfg, any, o1.tex, o0.out, W, n) end, "made on device 1",
         "the same through a parameter known by name only")
t.is(fakecuda.calls("cuLaunchKernel"), launches, "no refused launch reached the driver")
o1.tex:close()
t.raises(function() cuda.launch(o0.s, cfg, o0.fetch, o1.tex, o0.out, W, n) end,
         "cuda%.TextureObject is closed", "a closed texture is closed before it is foreign")

-- a pitched texture whose pitch * (height - 1) is 2^64: it wraps to 0, and
-- the last row alone fits the buffer
d0:set_current()
local buf = d0.memory_resource:allocate(4096, o0.s)
local creates = fakecuda.calls("cuTexObjectCreate")
t.raises(function() cuda.TextureObject(buf, {width = 4, height = 2^24 + 1, pitch = 2^40}) end,
         "smaller than the texture's pitch %* height", "pitch * (height - 1) = 2^64 does not wrap")
t.raises(function() cuda.TextureObject(buf, {width = 4, height = 2^30, pitch = 2^40 - 32}) end,
         "smaller than the texture's pitch %* height", "nor does a product far past 2^64")
t.is(fakecuda.calls("cuTexObjectCreate"), creates, "neither reached the driver")

-- cubemap arrays: six square faces (or six a layer), copies per face and layer
local pinned = cuda.PinnedMemoryResource()
local s = o0.s
local function f32(buf) return buf:view("float32") end
local N = math.random(2, 9)
local face = N * N * 4
local creates_arrays = fakecuda.calls("cuArray3DCreate")
for _, case in ipairs{
  {{width = N, height = N + 1, cubemap = true}, "faces are square: height must equal width"},
  {{width = N, cubemap = true}, "faces are square"},
  {{width = N, height = N, depth = 5, cubemap = true}, "a cubemap has depth 6"},
  {{width = N, height = N, depth = 12, cubemap = true}, "a cubemap has depth 6"},
  {{width = N, height = N, depth = 7, layered = true, cubemap = true}, "depth must be a multiple of 6"},
  {{width = N, height = N, layered = true, cubemap = true}, "depth must be a multiple of 6"},
  {{width = N, height = N, cubemap = 1}, "field 'cubemap' must be a boolean"},
} do
  t.raises(function() cuda.Array(case[1]) end, case[2], "cuda.Array: " .. case[2])
end
t.is(fakecuda.calls("cuArray3DCreate"), creates_arrays, "no cubemap breaking a rule reached the driver")

local cube = cuda.Array{format = "float32", width = N, height = N, cubemap = true}
t.ok(cube.cubemap and not cube.layered and cube.depth == 6 and cube.size == 6 * face,
     "a cubemap: depth 6 by default, six faces of width * height elements")
local all = pinned:allocate(6 * face)
f32(all):random(-1, 1, t.seed())
cube:copy_from(all, s)
local ok_faces = 0
for f = 1, 6 do
  local one = pinned:allocate(face)
  f32(one):fill(0 / 0)
  cube:copy_to(one, s, {face = f})
  s:sync()
  if f32(one):allclose(f32(all:slice((f - 1) * face, face)), 0, 0) then ok_faces = ok_faces + 1 end
end
t.is(ok_faces, 6, "each face copied out alone is its slice of the whole")
local k = math.random(1, 6)
local new = pinned:allocate(face)
f32(new):random(2, 3, t.seed() + 1)
cube:copy_from(new, s, {face = k})
local back = pinned:allocate(6 * face)
cube:copy_to(back, s)
s:sync()
local changed = {}
for f = 1, 6 do
  changed[f] = not f32(back:slice((f - 1) * face, face)):allclose(f32(all:slice((f - 1) * face, face)), 0, 0)
end
t.ok(changed[k] and f32(back:slice((k - 1) * face, face)):allclose(f32(new), 0, 0),
     "a face copied in alone lands on that face (" .. k .. ")")
local others = 0
for f = 1, 6 do if f ~= k and not changed[f] then others = others + 1 end end
t.is(others, 5, "and leaves the other five as they were")

local tex = cuda.TextureObject(cube)
local td = fakecuda.texture(tex.handle)
t.ok(td.resource == "array" and td.array_flags & 4 == 4 and td.depth == 6,
     "a texture over the cubemap: the driver got CUDA_ARRAY3D_CUBEMAP, depth 6")
local scube = cuda.Array{format = "float32", width = N, height = N, cubemap = true, surface = true}
t.like(tostring(cuda.SurfaceObject(scube)), "^cuda%.SurfaceObject%(", "a surface over a cubemap")

-- a layered cubemap: L layers of six faces
local Ls = math.random(2, 4)
local lc = cuda.Array{format = "float32", width = N, height = N, depth = 6 * Ls, layered = true,
                      cubemap = true}
t.ok(lc.cubemap and lc.layered and lc.size == 6 * Ls * face, "a layered cubemap of " .. Ls .. " layers")
local lall = pinned:allocate(lc.size)
f32(lall):random(-5, 5, t.seed() + 2)
lc:copy_from(lall, s)
local l, f = math.random(1, Ls), math.random(1, 6)
local one, six = pinned:allocate(face), pinned:allocate(6 * face)
lc:copy_to(one, s, {layer = l, face = f})
lc:copy_to(six, s, {layer = l})
s:sync()
t.ok(f32(one):allclose(f32(lall:slice(((l - 1) * 6 + f - 1) * face, face)), 0, 0),
     ("{layer = %d, face = %d} is slice %d"):format(l, f, (l - 1) * 6 + f))
t.ok(f32(six):allclose(f32(lall:slice((l - 1) * 6 * face, 6 * face)), 0, 0),
     "{layer = l} is that layer's six faces")
td = fakecuda.texture(cuda.TextureObject(lc).handle)
t.ok(td.array_flags & 5 == 5 and td.depth == 6 * Ls, "a texture over it: CUBEMAP | LAYERED")

-- the options of a copy, checked before the driver
local copies = fakecuda.calls("cuMemcpy3DAsync")
local layered1d = cuda.Array{format = "float32", width = N, depth = 3, layered = true}
for _, case in ipairs{
  {cube, face, {face = 7}, "field 'face' must be <= 6"},
  {cube, face, {face = 0}, "field 'face' must be >= 1"},
  {cube, face, {layer = 1}, "field 'layer' is for a layered array"},
  {layered1d, N * 4, {face = 1}, "field 'face' is for a cubemap array"},
  {layered1d, N * 4, {layer = 4}, "field 'layer' must be <= 3"},
  {lc, face, {face = 2}, "needs its layer too"},
  {lc, face, {layer = Ls + 1, face = 1}, "must be <= " .. Ls},
  {cube, face + 4, {face = 1}, "the array's slices of " .. face .. " bytes and a buffer of"},
  {cube, face, {side = 1}, "unknown option 'side'"},
  {cube, face, 5, "table expected"},
} do
  t.raises(function() case[1]:copy_to(pinned:allocate(case[2]), s, case[3]) end, case[4],
           "copy options: " .. case[4])
end
local lone = pinned:allocate(N * 4)
f32(lone):random(0, 1, t.seed() + 3)
layered1d:copy_from(lone, s, {layer = 2})
local lback = pinned:allocate(3 * N * 4)
layered1d:copy_to(lback, s)
s:sync()
t.ok(f32(lback:slice(N * 4, N * 4)):allclose(f32(lone), 0, 0), "{layer = 2} of a layered 1-D array")
t.is(fakecuda.calls("cuMemcpy3DAsync") - copies, 2, "no bad copy option reached the driver")
