-- Textures and surfaces under the fake driver's two devices (t/fake.lua):
-- a handle made on one device is refused by a launch on the other, before
-- the driver sees it; the size checks of a pitched texture stay exact where
-- pitch * height passes 2^64; tostring. t/array_fake.t covers the rest.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start("FAKECUDA_DEVICES=2 ")
t.plan(13)

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
