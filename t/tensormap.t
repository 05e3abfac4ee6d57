-- cuda.TensorMap under the fake driver (t/fake.lua), whose encodes check
-- the driver's rules and write a descriptor this file reads back
-- (t/fake/tensormap.c gives its layout): what was encoded, every rule
-- cudalua checks first (the driver is never called for a bad argument),
-- replace_address, the 128 bytes a kernel receives, lifetimes and
-- failures. What a GPU loads through a map is checked by t/tensormap_gpu.t.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()
t.seed()

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local mr = dev.memory_resource
local pinned = cuda.PinnedMemoryResource()

-- the fake's descriptor, decoded
local LAYOUT = "<c8 I8 BBBBBBB x I4I4I4I4I4 xxxx I8I8I8I8 BBBBB BBBBB B x I2 i2i2i2 i2i2i2"
local function decode(tm)
  local f = {string.unpack(LAYOUT, tm.bytes)}
  local d = {magic = f[1], address = f[2], kind = f[3], dtype = f[4], rank = f[5], interleave = f[6],
             swizzle = f[7], l2 = f[8], oob = f[9], dims = {}, strides = {}, box = {}, es = {},
             channels = f[29] + 1, pixels = f[30] + 1, lower = {f[31], f[32], f[33]},
             upper = {f[34], f[35], f[36]}}
  for k = 1, d.rank do
    d.dims[k] = f[9 + k] + 1
    d.box[k] = f[18 + k] + 1
    d.es[k] = f[23 + k]
  end
  for k = 1, d.rank - 1 do d.strides[k] = f[14 + k] end
  return d
end
local function list(x) return table.concat(x, ",") end

-- --- tiled: what the driver got --------------------------------------------------
local buf = mr:allocate(1 << 16, s)
local tm1 = cuda.TensorMap.tiled(buf, {dtype = "float32", shape = {1000}, box = {128}})
local d = decode(tm1)
t.is(d.magic, "FAKETMAP", "the driver wrote the descriptor")
t.ok(d.address == buf.ptr and tm1.address == buf.ptr, "the buffer's address")
t.ok(d.kind == 0 and d.dtype == 7 and d.rank == 1, "tiled, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank 1")
t.ok(list(d.dims) == "1000" and list(d.box) == "128" and list(d.es) == "1", "shape, box, element strides")
t.ok(tm1.kind == "tiled" and tm1.dtype == "float32" and tm1.rank == 1 and #tm1.bytes == 128,
     "fields kind, dtype, rank, bytes")
t.ok(rawequal(tm1.source, buf), "tm.source is the buffer it keeps alive")
t.like(tostring(tm1), "^cuda%.TensorMap%(tiled float32, rank 1, 0x%x+%)$", "tostring")

local tm2 = cuda.TensorMap.tiled(buf, {dtype = "uint16", shape = {40, 30}, box = {24, 8},
  element_strides = {1, 2}, swizzle = "64B", l2_promotion = "128B"})
d = decode(tm2)
t.ok(d.dtype == 1 and list(d.dims) == "40,30" and list(d.box) == "24,8" and list(d.es) == "1,2",
     "2-D: dtype, shape, box, element strides")
t.is(list(d.strides), "80", "strides default to packed rows (40 * 2 bytes)")
t.ok(d.swizzle == 2 and d.l2 == 2 and d.interleave == 0 and d.oob == 0, "swizzle, l2 promotion")
local tm3 = cuda.TensorMap.tiled(buf, {dtype = "float64", shape = {4, 5, 6}, strides = {64, 512},
  box = {2, 5, 6}, interleave = "16B", oob_fill = "nan"})
d = decode(tm3)
t.ok(list(d.strides) == "64,512" and d.interleave == 1 and d.oob == 1, "strides as given, interleave, oob_fill")

-- --- im2col ----------------------------------------------------------------------
local im = cuda.TensorMap.im2col(buf, {dtype = "bfloat16", shape = {8, 10, 10, 2},
  lower_corner = {-1, -1}, upper_corner = {1, 1}, channels_per_pixel = 8, pixels_per_column = 64})
d = decode(im)
t.ok(d.kind == 1 and d.dtype == 9 and d.rank == 4 and list(d.dims) == "8,10,10,2", "im2col: kind, dtype, shape")
t.ok(d.channels == 8 and d.pixels == 64 and d.lower[1] == -1 and d.lower[2] == -1 and
     d.upper[1] == 1 and d.upper[2] == 1, "channels, pixels, the corners")
t.is(list(d.strides), "16,160,1600", "packed strides")
t.is(im.kind, "im2col", "im.kind")

-- --- views and replace_address ---------------------------------------------------
local v = buf:view("float32"):range(17, 1000)      -- 64 bytes in
local tv = cuda.TensorMap.tiled(v, {dtype = "float32", shape = {64}, box = {4}})
t.is(decode(tv).address, buf.ptr + 64, "a view: the address of its first element")
t.ok(rawequal(tv.source, v), "it keeps the view")
local other = mr:allocate(4096, s)
t.is(tm1:replace_address(other), nil, "replace_address")
t.ok(decode(tm1).address == other.ptr and tm1.address == other.ptr, "the descriptor's address changed")
t.is(list(decode(tm1).dims), "1000", "and nothing else")
t.ok(rawequal(tm1.source, other), "it keeps the new buffer")
t.raises(function() tm1:replace_address(mr:allocate(1024, s)) end, "the tensor spans 4000 bytes, the memory holds 1024",
         "the new memory must hold the tensor")
t.raises(function() tm1:replace_address(buf:slice(8, 4096)) end, "aligned to 16 bytes", "and be aligned")
t.is(decode(tm1).address, other.ptr, "a refused replace changes nothing")

-- the map keeps its memory alive: the buffer is not collected under it
do
  local weak = setmetatable({}, {__mode = "v"})
  local tmp = mr:allocate(4096, s)
  weak[1] = tmp
  local keep = cuda.TensorMap.tiled(tmp, {dtype = "uint8", shape = {4096}, box = {16}})
  tmp = nil
  collectgarbage(); collectgarbage()
  t.ok(weak[1] ~= nil, "a live map keeps its buffer")
  keep:replace_address(other)
  collectgarbage(); collectgarbage()
  t.ok(weak[1] == nil, "replace_address lets the old one go")
  keep:close()
  t.ok(keep.is_closed and keep.source == nil, "close lets go of the memory")
  t.like(tostring(keep), "closed", "tostring of a closed map")
  t.raises(function() keep:replace_address(other) end, "cuda.TensorMap is closed", "a closed map is closed")
  keep:close()
  t.ok(true, "closing twice is a no-op")
end

-- --- passing it to a kernel: 128 bytes by value ----------------------------------
local SOURCE = [[
#include <cuda.h>
struct alignas(64) Desc { unsigned long long v[16]; };
extern "C" __global__ void echo_params_tmap(unsigned char *out, const __grid_constant__ Desc d)
{
  for (int i = 0; i < 16; i++) ((unsigned long long *)out)[i] = d.v[i];
}
struct Pair { long long a, b; };
extern "C" __global__ void echo_params_small(unsigned char *out, Pair d) { *out = d.a; }
]]
local obj = cuda.Program(SOURCE:gsub("#include <cuda.h>\n", ""), "c++", {arch = "sm_90"}):compile("cubin")
local k = obj:get_kernel("echo_params_tmap")
local declared = cuda.ObjectCode.from_data(obj.code):get_kernel("echo_params_tmap",
  "unsigned char *out, const __grid_constant__ CUtensorMap map")
local out = pinned:allocate(128)
local one = cuda.LaunchConfig{grid = 1, block = 1}
local function echoed(kernel, tm)
  out:view("uint8"):fill(0)
  cuda.launch(s, one, kernel, out, tm)
  s:sync()
  local got = {}
  for i = 1, 128 do got[i] = string.char(out:view("uint8")[i]) end
  return table.concat(got)
end
t.is(echoed(k, tm2), tm2.bytes, "a 128-byte struct parameter gets the descriptor bit for bit")
t.is(echoed(declared, tm1), tm1.bytes, "a declared CUtensorMap parameter too, after replace_address")
t.is(echoed(declared, tm1.bytes), tm1.bytes, "tm.bytes passes as a 128-byte string")
t.raises(function() cuda.launch(s, one, obj:get_kernel("echo_params_small"), out, tm2) end,
         "a cuda.TensorMap passes 128 bytes %(the parameter is 16 bytes%)", "a struct of another size")
local tgone = cuda.TensorMap.tiled(buf, {dtype = "float32", shape = {16}, box = {4}})
tgone:close()
t.raises(function() cuda.launch(s, one, k, out, tgone) end, "the cuda.TensorMap is closed", "a closed map")
do
  local b2 = mr:allocate(1024, s)
  local tb = cuda.TensorMap.tiled(b2, {dtype = "float32", shape = {16}, box = {4}})
  b2:close()
  t.raises(function() cuda.launch(s, one, k, out, tb) end, "the cuda.Buffer is closed",
           "a map whose buffer was closed is refused")
  t.raises(function() tb:replace_address(b2) end, "closed", "and cannot be repointed at it")
  tb:replace_address(other)
  t.is(echoed(k, tb), tb.bytes, "repointed at open memory, it launches again")
end

-- a launch with a map allocates nothing (the descriptor passes in place)
do
  local launch, kk, tt = cuda.launch, k, tm2
  launch(s, one, kk, out, tt)
  collectgarbage()
  collectgarbage("stop")
  local before = collectgarbage("count")
  for _ = 1, 100 do launch(s, one, kk, out, tt) end
  local grew = collectgarbage("count") - before
  collectgarbage("restart")
  t.is(grew, 0, "100 launches with a map allocate no Lua memory")
  s:sync()
end
-- a view repoints a map too
tm2:replace_address(v)
t.ok(tm2.address == buf.ptr + 64 and rawequal(tm2.source, v), "replace_address takes a view")
tm2:replace_address(buf)

-- a captured launch keeps the map's buffer for the graph
do
  local b3 = mr:allocate(1024, s)
  local tc = cuda.TensorMap.tiled(b3, {dtype = "float32", shape = {16}, box = {4}})
  local p3 = b3.ptr
  s:begin_capture()
  cuda.launch(s, one, k, out, tc)
  local g = s:end_capture()
  b3:close()
  tc:close()
  out:view("uint8"):fill(0)
  g:launch(s)
  s:sync()
  t.is(out:view("uint64")[2], p3, "the graph replays the descriptor it captured")
  g:close()
end

-- a graph's kernel node takes a map as cuda.launch does, and keeps its buffer
do
  local b4 = mr:allocate(1024, s)
  local tn = cuda.TensorMap.tiled(b4, {dtype = "float32", shape = {16}, box = {4}})
  local p4 = b4.ptr
  local builder = cuda.Graph(dev)
  builder:kernel(nil, one, k, out, tn)
  local g = builder:instantiate()
  tn:close()
  b4:close()
  out:view("uint8"):fill(0)
  g:launch(s)
  s:sync()
  t.is(out:view("uint64")[2], p4, "a kernel node passes the descriptor by value")
  g:close()
  local b5 = mr:allocate(1024, s)
  local closed_src = cuda.TensorMap.tiled(b5, {dtype = "float32", shape = {16}, box = {4}})
  b5:close()
  t.raises(function() cuda.Graph(dev):kernel(nil, one, k, out, closed_src) end, "the cuda.Buffer is closed",
           "a kernel node refuses a map whose buffer was closed")
end

-- --- every rule, before the driver ----------------------------------------------
local function rejects(opts, pattern, name, source, im2col)
  local before = fakecuda.calls(im2col and "cuTensorMapEncodeIm2col" or "cuTensorMapEncodeTiled")
  local make = im2col and cuda.TensorMap.im2col or cuda.TensorMap.tiled
  t.raises(function() make(source or buf, opts) end, pattern, name)
  t.is(fakecuda.calls(im2col and "cuTensorMapEncodeIm2col" or "cuTensorMapEncodeTiled"), before,
       "  ... and the driver was not called")
end
local function o(extra)
  local x = {dtype = "float32", shape = {64, 8}, box = {16, 4}}
  for key, val in pairs(extra) do x[key] = val ~= false and val or nil end
  return x
end
rejects(o{dtype = "int8"}, "field 'dtype': unknown value 'int8' %(known: uint8, uint16", "dtype from a fixed list")
rejects(o{dtype = false}, "field 'dtype' is required", "dtype is required")
rejects(o{shape = {1, 2, 3, 4, 5, 6}, box = {1, 1, 1, 1, 1, 1}}, "rank %(#shape%) must be 1 to 5", "rank at most 5")
rejects(o{shape = {}}, "rank %(#shape%) must be 1 to 5 for tiled, got 0", "rank at least 1")
rejects(o{shape = {0, 8}}, "field 'shape'%[1%] must be >= 1", "sizes are non-zero")
rejects(o{shape = {2^32 + 1, 8}}, "field 'shape'%[1%] must be <= 4294967296", "sizes at most 2^32")
rejects(o{box = {16, 0}}, "field 'box'%[2%] must be >= 1", "box sizes are non-zero")
rejects(o{box = {16, 257}}, "field 'box'%[2%] must be <= 256", "box sizes at most 256")
rejects(o{box = {16}}, "field 'box' must be a list of 2 integers", "one box size per dimension")
rejects(o{box = {6, 4}}, "box%[1%] %* the element's 4 bytes must be a multiple of 16 bytes, got 24",
        "the box's inner dimension in 16-byte units")
rejects(o{element_strides = {1, 9}}, "field 'element_strides'%[2%] must be <= 8", "element strides at most 8")
rejects(o{element_strides = {0, 1}}, "field 'element_strides'%[1%] must be >= 1", "element strides non-zero")
rejects(o{strides = {264}}, "strides%[1%] = 264 must be a multiple of 16 bytes", "strides in 16-byte units")
rejects(o{strides = {2^40}}, "strides%[1%] = 1099511627776 must be a multiple of 16 bytes and less than 2%^40",
        "strides below 2^40")
rejects(o{strides = {128}}, "strides%[1%] = 128 is less than the 256 bytes of the dimension below it",
        "a stride spans the dimension below it")
rejects(o{strides = {1, 2}}, "field 'strides' must be a list of 1 integers", "rank - 1 strides")
rejects(o{shape = {64, 8, 2}, box = {16, 4, 2}, strides = {272, 2176}, interleave = "32B", swizzle = "32B"},
        "strides%[1%] = 272 must be a multiple of 32 bytes", "interleave 32B: strides in 32-byte units")
rejects(o{interleave = "16B"}, "an interleaved layout needs rank %(#shape%) 3 to 5", "interleave needs rank 3")
rejects(o{shape = {64, 8, 2}, box = {16, 4, 2}, interleave = "32B"}, "interleave = \"32B\" needs swizzle = \"32B\"",
        "interleave 32B needs swizzle 32B")
rejects(o{swizzle = "32B"}, "box%[1%] %* the element's 4 bytes %(64%) exceeds the swizzle span of 32 bytes",
        "the box's inner dimension within the swizzle span")
rejects(o{swizzle = "256B"}, "field 'swizzle': unknown value '256B'", "swizzle from a list")
rejects(o{l2_promotion = "32B"}, "field 'l2_promotion': unknown value", "l2 promotion from a list")
rejects(o{dtype = "int32", oob_fill = "nan"}, "oob_fill = \"nan\" needs a floating%-point dtype", "nan fill for floats")
rejects(o{shape = {1024, 1024}, box = {16, 4}}, "the tensor spans 4194304 bytes, the memory holds 65536",
        "shape and strides within the buffer")
rejects(o{shape = {2^32, 2^32}, strides = {2^40 - 16}}, "shape and strides overflow the address space",
        "an extent beyond the address space is refused")
rejects(o{}, "aligned to 16 bytes", "the address aligned to 16 bytes", buf:slice(4, 1024))
rejects(o{}, "pageable host memory cannot back a tensor map", "host memory refused",
        cuda.HostMemoryResource():allocate(4096))
rejects(o{bogus = 1}, "bogus", "unknown options")
local im2 = {dtype = "float32", shape = {8, 4, 4}, lower_corner = {0}, upper_corner = {0},
             channels_per_pixel = 4, pixels_per_column = 16}
local function io(extra)
  local x = {}
  for key, val in pairs(im2) do x[key] = val end
  for key, val in pairs(extra) do x[key] = val ~= false and val or nil end
  return x
end
rejects(io{shape = {8, 8}}, "rank %(#shape%) must be 3 to 5 for im2col, got 2", "im2col: rank 3 to 5", nil, true)
rejects(io{lower_corner = {-32769}}, "field 'lower_corner'%[1%] must be >= %-32768", "rank 3: corners in 16 bits", nil, true)
rejects(io{shape = {8, 4, 4, 2}, lower_corner = {0, 128}, upper_corner = {0, 0}},
        "field 'lower_corner'%[2%] must be <= 127", "rank 4: corners in 8 bits", nil, true)
rejects(io{shape = {8, 4, 4, 2, 2}, lower_corner = {0, 0, 0}, upper_corner = {0, -17, 0}},
        "field 'upper_corner'%[2%] must be >= %-16", "rank 5: corners in 5 bits", nil, true)
rejects(io{channels_per_pixel = 257}, "field 'channels_per_pixel' must be <= 256", "channels at most 256", nil, true)
rejects(io{pixels_per_column = 1025}, "field 'pixels_per_column' must be <= 1024", "pixels at most 1024", nil, true)
rejects(io{pixels_per_column = false}, "'pixels_per_column' are required", "pixels required", nil, true)
rejects(io{channels_per_pixel = 2}, "channels_per_pixel %* the element's 4 bytes must be a multiple of 16",
        "channels in 16-byte units", nil, true)
rejects(io{box = {1}}, "box", "im2col takes no box", nil, true)
t.raises(function() cuda.TensorMap.tiled(42, o{}) end, "cuda.Buffer expected", "a buffer or a view")
t.raises(function() cuda.TensorMap.tiled(buf) end, "table expected", "options are required")
t.raises(function() cuda.TensorMap.tiled(buf, o{}, 3) end, "unexpected argument", "extra arguments")

-- --- the driver's failures -----------------------------------------------------
fakecuda.fail("cuTensorMapEncodeTiled", 1, 1)
t.raises(function() cuda.TensorMap.tiled(buf, o{}) end, "cuTensorMapEncodeTiled: CUDA_ERROR_INVALID_VALUE",
         "a failed encode raises a cuda.Error")
fakecuda.fail("cuTensorMapReplaceAddress", 1, 1)
t.raises(function() tm2:replace_address(other) end, "cuTensorMapReplaceAddress: CUDA_ERROR_INVALID_VALUE",
         "a failed replace raises")
t.ok(decode(tm2).address == buf.ptr and rawequal(tm2.source, buf), "and leaves the map as it was")
t.is(fakecuda.calls("cuTensorMapEncodeIm2col") > 0, true, "im2col reached the driver")
t.done()
