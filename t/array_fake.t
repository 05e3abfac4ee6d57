-- Arrays, textures and surfaces under the fake driver (t/fake.lua): every C
-- path of src/array.c and src/texture.c, round trips on random data, the
-- options as the driver got them, lifetimes, leaks and failures. What a GPU
-- samples is checked on one by t/array.t.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()
local seed = t.seed()
t.plan(78)

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local host = cuda.HostMemoryResource()
local mr = dev.memory_resource
local base = fake.live(fakecuda)

local function floats(buf) return buf:view("float32") end

-- an array: its fields, and the round trip buffer -> array -> buffer
local W, H = math.random(3, 40), math.random(2, 30)
local arr = cuda.Array{format = "float32", width = W, height = H}
t.is(arr.size, W * H * 4, "arr.size is width * height * 4 bytes")
t.ok(arr.width == W and arr.height == H and arr.depth == 0 and arr.channels == 1,
     "width, height, depth, channels")
t.ok(arr.format == "float32" and arr.element_size == 4 and not arr.layered and not arr.surface,
     "format, element_size, layered, surface")
t.ok(rawequal(arr.device, dev), "arr.device")
t.like(tostring(arr), "^cuda%.Array%(float32 x1, " .. W .. " x " .. H .. " x 0%)$", "tostring")
local src = pinned:allocate(arr.size)
floats(src):random(-100, 100, seed)
local back = pinned:allocate(arr.size)
floats(back):fill(0 / 0)
t.ok(rawequal(arr:copy_from(src, s), arr), "copy_from returns the array")
arr:copy_to(back, s)
s:sync()
t.ok(floats(back):allclose(floats(src), 0, 0), "pinned -> array -> pinned keeps every value")
local dbuf = mr:allocate(arr.size, s)
dbuf:fill(0, s)
arr:copy_to(dbuf, s)
local hbuf = host:allocate(arr.size)
dbuf:copy_to(hbuf, s)
s:sync()
t.ok(floats(hbuf):allclose(floats(src), 0, 0), "array -> device buffer")
local pageable = host:allocate(arr.size)
floats(pageable):random(0, 1, seed + 1)
arr:copy_from(pageable, s):copy_to(back, s)
s:sync()
t.ok(floats(back):allclose(floats(pageable), 0, 0), "pageable host memory in and out")
t.raises(function() arr:copy_from(pinned:allocate(arr.size + 4), s) end, "sizes must match",
         "copy from a buffer of another size")
t.raises(function() arr:copy_to(dbuf, nil) end, "cuda.Stream expected", "a copy needs a stream")
t.raises(function() arr:copy_to(dbuf:slice(0, 4), s) end, "sizes must match", "a slice of another size")

-- 3-D, layered, channels: the packed size of every shape
local a3 = cuda.Array{format = "uint8", channels = 4, width = 5, height = 3, depth = 2}
t.is(a3.size, 5 * 3 * 2 * 4, "a 3-D array of uchar4")
local bytes = pinned:allocate(a3.size)
bytes:view("uint8"):random(0, 255, seed + 2)
local bytes_back = pinned:allocate(a3.size)
a3:copy_from(bytes, s):copy_to(bytes_back, s)
s:sync()
t.ok(bytes_back:view("uint8"):allclose(bytes:view("uint8"), 0, 0), "3-D round trip")
local layered = cuda.Array{format = "int16", channels = 2, width = 7, depth = 3, layered = true}
t.ok(layered.layered and layered.size == 7 * 3 * 2 * 2, "1-D layered array: 3 layers")
t.is(cuda.Array{format = "float16", width = 9}.size, 18, "a 1-D array of halves")

-- bad input: every field, before the driver is called
local calls = fakecuda.calls("cuArray3DCreate")
local bad = {
  {{}, "needs width"},
  {{width = 0}, "field 'width' must be >= 1"},
  {{width = 1.5}, "field 'width'"},
  {{width = 2^31}, "field 'width' must be <="},
  {{width = 4, height = -1}, "field 'height' must be >= 0"},
  {{width = 4, channels = 3}, "channels' must be 1, 2 or 4"},
  {{width = 4, channels = 8}, "field 'channels' must be <= 4"},
  {{width = 4, format = "float64"}, "unknown format 'float64'"},
  {{width = 4, format = 32}, "field 'format' must be a string"},
  {{width = 4, layered = true}, "a layered array needs depth"},
  {{width = 4, depth = 2}, "a 3%-D array needs height"},
  {{width = 4, colour = 1}, "unknown option 'colour'"},
  {{width = 2^30, height = 2^30, depth = 2^30, channels = 4}, "overflows"},
}
for _, case in ipairs(bad) do
  t.raises(function() cuda.Array(case[1]) end, case[2], "cuda.Array: " .. case[2])
end
t.is(fakecuda.calls("cuArray3DCreate"), calls, "no bad input reached the driver")

-- textures: options as the driver got them
local tex = cuda.TextureObject(arr, {filter_mode = "linear", address_mode = {"wrap", "border"},
                                     normalized_coords = true, border_color = {1, 2, 3, 4},
                                     read_mode = "normalized_float", max_anisotropy = 4})
local d = fakecuda.texture(tex.handle)
t.ok(d and d.resource == "array" and d.filter_mode == 1, "a linear-filtered texture over the array")
t.ok(d.address_mode[1] == 0 and d.address_mode[2] == 3 and d.address_mode[3] == 1,
     "address modes: wrap, border, and clamp for the axis not given")
t.is(d.flags, 2, "normalized coordinates, read as normalized floats")
t.ok(d.border_color[1] == 1 and d.border_color[4] == 4 and d.max_anisotropy == 4, "border colour, anisotropy")
local plain = cuda.TextureObject(arr)
d = fakecuda.texture(plain.handle)
t.ok(d.filter_mode == 0 and d.flags == 1 and d.address_mode[2] == 1, "defaults: point, clamp, element type")
t.ok(rawequal(plain.source, arr), "tex.source is the array")
t.like(tostring(plain), "^cuda%.TextureObject%(", "tostring")

-- a kernel reads the array through its texture, and writes through a surface
local obj = cuda.Program(dofile(os.getenv("CUDALUA_SRCDIR") .. "/t/texture_kernels.lua"), "c++",
                         {arch = "sm_90"}):compile("cubin")
local fetch, fill = obj:get_kernel("tex_fetch"), obj:get_kernel("surf_fill")
local n = W * H
local out = pinned:allocate(n * 4)
floats(out):fill(-1)
local cfg = cuda.LaunchConfig{grid = 1, block = 128}
cuda.launch(s, cfg, fetch, plain, out, W, n)
s:sync()
t.ok(floats(out):allclose(floats(pageable), 0, 0), "a kernel reads the array through the texture's handle")
local sarr = cuda.Array{format = "float32", width = W, height = H, surface = true}
local surf = cuda.SurfaceObject(sarr)
t.like(tostring(surf), "^cuda%.SurfaceObject%(", "a surface over a surface array")
local v0 = math.random(1, 1000) + 0.5
cuda.launch(s, cfg, fill, surf, cuda.f32(v0), W, n)
sarr:copy_to(out, s)
s:sync()
local expect = host:allocate(n * 4)
floats(expect):iota(v0, 1)
t.ok(floats(out):allclose(floats(expect), 0, 0), "a surface write read back through a copy")
t.raises(function() cuda.SurfaceObject(arr) end, "not made with surface = true", "a surface needs surface = true")
t.raises(function() cuda.launch(s, cfg, fetch, plain, out, cuda.u32(W), n) end, "does not match",
         "handles are checked against the parameters as before")
local tiny = obj:get_kernel("tex_fetch")
t.raises(function() cuda.launch(s, cfg, fill, cuda.f32(1), cuda.f32(0), W, n) end,
         "does not match", "a scalar where the handle goes")

-- a texture over a buffer: linear and 2-D with a pitch
local lin = cuda.TextureObject(dbuf, {format = "float32"})
d = fakecuda.texture(lin.handle)
t.ok(d.resource == "linear" and d.size == dbuf.size and d.format == 0x20 and d.channels == 1,
     "a linear texture over a device buffer")
local pitched = mr:allocate(64 * 4, s)
local p2 = cuda.TextureObject(pitched, {format = "uint8", channels = 4, width = 8, height = 4, pitch = 64})
d = fakecuda.texture(p2.handle)
t.ok(d.resource == "pitch2d" and d.width == 8 and d.height == 4 and d.pitch == 64 and d.channels == 4,
     "a 2-D texture over a buffer with a pitch")
t.raises(function() cuda.TextureObject(pitched, {width = 8, height = 5, pitch = 64}) end,
         "smaller than the texture", "a 2-D extent beyond the buffer")
t.raises(function() cuda.TextureObject(pitched, {width = 8}) end, "both width and height", "width alone")
t.raises(function() cuda.TextureObject(host:allocate(64)) end, "pageable host memory", "pageable memory")
t.raises(function() cuda.TextureObject(arr, {format = "uint8"}) end, "unknown option 'format'",
         "an array has its own format")
t.raises(function() cuda.TextureObject(arr, {address_mode = "repeat"}) end, "must be \"wrap\"",
         "an unknown address mode")
t.raises(function() cuda.TextureObject(arr, {address_mode = {}}) end, "1 to 3 modes", "no address modes")
t.raises(function() cuda.TextureObject(arr, {filter_mode = "cubic"}) end, "unknown value 'cubic'",
         "an unknown filter mode")
t.raises(function() cuda.TextureObject(arr, {border_color = {1, 2}}) end, "{r, g, b, a}", "a short border colour")
t.raises(function() cuda.TextureObject(arr, {border_color = 1e300}) end, "fit a float32", "a huge border colour")
t.raises(function() cuda.TextureObject(arr, {max_anisotropy = 17}) end, "must be <= 16", "anisotropy")
t.raises(function() cuda.TextureObject(s) end, "cuda.Buffer expected", "a texture over a stream")

-- lifetimes: closing the array first keeps it for its texture and surface
arr:close()
t.ok(arr.is_closed and arr.width == nil, "a closed array shows closed")
t.raises(function() arr:copy_to(back, s) end, "cuda.Array is closed", "copying a closed array")
t.raises(function() cuda.TextureObject(arr) end, "cuda.Array is closed", "a texture over a closed array")
floats(out):fill(-1)
cuda.launch(s, cfg, fetch, plain, out, W, n)
s:sync()
t.ok(floats(out):allclose(floats(pageable), 0, 0), "the texture still reads its closed array")
tex:close()
plain:close()
t.raises(function() cuda.launch(s, cfg, fetch, plain, out, W, n) end, "cuda.TextureObject is closed",
         "launching with a closed texture")
t.ok(plain.is_closed and tostring(plain) == "cuda.TextureObject (closed)", "closed texture")
dbuf:close()
t.is(fakecuda.texture(lin.handle).size, W * H * 4, "a buffer closed under its texture keeps its memory")
lin:close()
p2:close()
sarr:close()
surf:close()
surf:close()
t.ok(surf.is_closed, "closing twice is a no-op")

-- failures of the driver come back as cuda.Error, and leak nothing
fakecuda.fail("cuArray3DCreate")
t.raises(function() cuda.Array{width = 4} end, "cuArray3DCreate: CUDA_ERROR_OUT_OF_MEMORY", "cuArray3DCreate fails")
local a4 = cuda.Array{width = 4}
fakecuda.fail("cuTexObjectCreate")
t.raises(function() cuda.TextureObject(a4) end, "cuTexObjectCreate", "cuTexObjectCreate fails")
fakecuda.fail("cuMemcpy3DAsync")
t.raises(function() a4:copy_from(pinned:allocate(16), s) end, "cuMemcpy3DAsync", "cuMemcpy3DAsync fails")
fakecuda.fail("cuSurfObjectCreate")
t.raises(function() cuda.SurfaceObject(cuda.Array{width = 4, surface = true}) end, "cuSurfObjectCreate",
         "cuSurfObjectCreate fails")

-- a capture records the copies; the graph replays them
local cap = pinned:allocate(W * H * 4)
local arr2 = cuda.Array{format = "float32", width = W, height = H}
s:begin_capture()
arr2:copy_from(src, s)
arr2:copy_to(cap, s)
local g = s:end_capture()
floats(cap):fill(0)
g:launch(s)
s:sync()
t.ok(floats(cap):allclose(floats(src), 0, 0), "a captured copy in and out replays")
g:close()

-- a graph keeps the arrays, textures and surfaces it uses: closed for Lua,
-- they live until the graph goes
local garr = cuda.Array{format = "float32", width = W, height = H, surface = true}
local gtex, gsurf = cuda.TextureObject(garr), cuda.SurfaceObject(garr)
local gout = pinned:allocate(W * H * 4)
s:begin_capture()
garr:copy_from(src, s)
cuda.launch(s, cfg, fill, gsurf, cuda.f32(5), W, W * H)
cuda.launch(s, cfg, fetch, gtex, gout, W, W * H)
local g2 = s:end_capture()
local live_before = fakecuda.live()
garr:close()
gtex:close()
gsurf:close()
t.ok(fakecuda.live().arrays == live_before.arrays and fakecuda.live().textures == live_before.textures,
     "closing them while a graph uses them destroys nothing yet")
floats(gout):fill(0)
g2:launch(s)
s:sync()
floats(expect):iota(5, 1)
t.ok(floats(gout):allclose(floats(expect), 0, 0), "the graph writes its surface and reads its texture after they were closed")
g2:close()
t.ok(fakecuda.live().arrays == live_before.arrays - 1 and fakecuda.live().textures == live_before.textures - 2,
     "closing the graph destroys them")

-- graph memory attributes (the fake makes no graph allocations)
t.ok(dev.graph_mem_used == 0 and dev.graph_mem_reserved == 0 and dev.graph_mem_used_high == 0,
     "dev.graph_mem_used, _reserved, _used_high")
dev:trim_graph_memory()
t.is(fakecuda.calls("cuDeviceGraphMemTrim"), 1, "trim_graph_memory calls cuDeviceGraphMemTrim")

-- an array takes device memory, as a buffer does: free memory drops by its
-- size and comes back when it is closed (the fuzzer's 11 GB array and its
-- 11 GB buffer, each within the fake's 16 GiB, once exhausted the host)
do
  local free_before = dev:memory_info()
  local big = cuda.Array{format = "float32", channels = 4, width = math.random(64, 256), height = 64}
  t.is(free_before - dev:memory_info(), big.size, "an array's bytes are taken from the device's free memory")
  big:close()
  t.is(dev:memory_info(), free_before, "and given back when it closes")
end

-- everything goes back
a4, arr2, a3, layered, tex, plain, lin, p2, surf, sarr, arr, garr, gtex, gsurf, gout, g2 = nil
obj, fetch, fill, tiny = nil
src, back, dbuf, hbuf, pageable, bytes, bytes_back, pitched, out, expect, cap = nil
t.is(fake.live(fakecuda), base, "every array, texture and surface is given back")
local live = fakecuda.live()
t.ok(live.arrays == 0 and live.textures == 0, "no array or texture object left")
t.done()
