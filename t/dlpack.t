-- DLPack: cuda.from_dlpack reads a C library's DLManagedTensor or
-- DLManagedTensorVersioned and calls its deleter exactly once, when the
-- view's buffer is released; v:to_dlpack hands one out that keeps the view
-- alive until its deleter runs. The C library is the fake's (t/fake/dlpack.c),
-- with its own copy of the structs' layout, so reader and writer are checked
-- against it. Runs under the fake driver.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()
t.seed()

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local host = cuda.HostMemoryResource()
local pinned = cuda.PinnedMemoryResource()
local deleted = fakecuda.dlpack_deleted

local function settle() collectgarbage(); collectgarbage() end

-- --- from_dlpack: a host tensor, legacy and versioned -----------------------------
local rows, cols = math.random(2, 7), math.random(2, 7)
local hb = host:allocate(rows * cols * 4)
local flat = hb:view("int32")
for i = 1, #flat do flat[i] = math.random(-1e6, 1e6) end
for _, versioned in ipairs{false, true} do
  local what = versioned and "versioned" or "legacy"
  local before = deleted()
  local addr = fakecuda.dlpack_make{versioned = versioned, data = hb.ptr, code = 0, bits = 32,
                                    shape = {rows, cols}}
  local v = cuda.from_dlpack(addr, {versioned = versioned})
  t.is(cuda.is_view(v), true, what .. ": from_dlpack returns a cuda.View")
  t.is(v.dtype == "int32" and v.ndim == 2 and v.shape[1] == rows and v.shape[2] == cols, true,
       what .. ": dtype and shape")
  t.is(v.strides[1] == cols and v.strides[2] == 1 and v.is_contiguous, true, what .. ": null strides are C order")
  local k = math.random(#v)
  t.is(v[k], flat[k], what .. ": reads the tensor's memory")
  t.is(v.is_host_accessible and not v.is_device_accessible, true, what .. ": kDLCPU is host memory")
  settle()
  t.is(deleted(), before, what .. ": the deleter waits while the view lives")
  v = nil
  settle()
  t.is(deleted(), before + 1, what .. ": collecting the view calls the deleter once")
  settle()
  t.is(deleted(), before + 1, what .. ": and only once")
end

-- a tensor is taken over once: a second from_dlpack of it is refused
local once = fakecuda.dlpack_make{data = hb.ptr, shape = {2}}
local first_owner = cuda.from_dlpack(once)
t.raises(function() return cuda.from_dlpack(once) end, "owns this tensor already",
         "a second from_dlpack of the same tensor is refused")
first_owner = nil
settle()

-- closing the view's buffer calls the deleter at once; the view is closed
local before = deleted()
local v = cuda.from_dlpack(fakecuda.dlpack_make{data = hb.ptr, shape = {4}, code = 1, bits = 8})
t.is(v.dtype, "uint8", "kDLUInt 8 is uint8")
v.buffer:close()
t.is(deleted(), before + 1, "closing the view's buffer calls the deleter")
t.raises(function() return v[1] end, "closed", "the view is closed with it")
v = nil
settle()
t.is(deleted(), before + 1, "collecting it later calls nothing more")

-- a view of a slice keeps the tensor: the deleter runs with the last of them
before = deleted()
v = cuda.from_dlpack(fakecuda.dlpack_make{data = hb.ptr, shape = {8}, code = 1, bits = 8})
local sv = v.buffer:slice(4, 4):view("uint8")
v = nil
settle()
t.is(deleted(), before, "a view of a slice of the buffer keeps the tensor")
t.is(sv[1], hb:view("uint8")[5], "and reads it")
sv = nil
settle()
t.is(deleted(), before + 1, "the deleter runs when the last view goes")

-- strides, byte_offset, 0-d, bool, readonly, a null deleter
before = deleted()
v = cuda.from_dlpack(fakecuda.dlpack_make{data = hb.ptr, code = 0, bits = 32, shape = {cols, rows},
                                          strides = {1, cols}})
local good = true
for j = 1, cols do
  for i = 1, rows do
    if v[(j - 1) * rows + i] ~= flat[(i - 1) * cols + j] then good = false end
  end
end
t.ok(good and not v.is_contiguous, "strides: a transpose reads through them")
local off = math.random(0, rows * cols - 1)
v = cuda.from_dlpack(fakecuda.dlpack_make{data = hb.ptr, byte_offset = off * 4, code = 0, bits = 32,
                                          shape = {1}})
t.is(v[1], flat[off + 1], "byte_offset moves the first element")
t.is(v.ptr, hb.ptr + off * 4, "v.ptr is data + byte_offset")
v = cuda.from_dlpack(fakecuda.dlpack_make{data = hb.ptr, code = 0, bits = 32, ndim = 0})
t.is(#v == 1 and v.ndim == 1 and v[1] == flat[1], true, "a 0-d tensor is one element")
v = cuda.from_dlpack(fakecuda.dlpack_make{data = hb.ptr, code = 6, bits = 8, shape = {2}})
t.is(v.dtype, "uint8", "kDLBool (8 bits) reads as uint8")
v = cuda.from_dlpack(fakecuda.dlpack_make{data = hb.ptr, code = 2, bits = 64, shape = {2, 1},
                                          strides = {1, -5}})
t.is(v.dtype == "float64" and #v == 2, true, "a negative stride on a dimension of 1 is harmless")
v = cuda.from_dlpack(fakecuda.dlpack_make{versioned = true, flags = 1, data = hb.ptr, shape = {2},
                                          minor = 3}, {versioned = true})
t.is(v.readonly, true, "DLPACK_FLAG_BITMASK_READ_ONLY: v.readonly")
t.is(v.dtype, "float32", "a later minor version reads the same")
v = cuda.from_dlpack(fakecuda.dlpack_make{data = hb.ptr, shape = {2}, deleter = false})
v = nil
settle()
t.is(deleted(), before + 6, "every tensor deleted once; a null deleter is not called")

-- device memory, pinned, managed: kinds and devices
local n = rows * cols
local db = dev.memory_resource:allocate(n * 4, s)
local src = pinned:allocate(n * 4):view("float32")
src:random(-10, 10, math.random(1, 1 << 30))
src:copy_to(db, s)
before = deleted()
v = cuda.from_dlpack(fakecuda.dlpack_make{versioned = true, data = db.ptr, device_type = 2,
                                          device_id = dev.id, shape = {rows, cols}}, {versioned = true})
t.is(v.is_device and v.device_id == dev.id, true, "kDLCUDA: a device view of that device")
local kern = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 64}, kern, v, cuda.f32(2), cuda.f32(1), cuda.u64(n))
local back = pinned:allocate(n * 4):view("float32")
back:copy_from(v, s)
s:sync()
local want = pinned:allocate(n * 4):view("float32")
want:copy(src):mul(2):add(1)
t.ok(back:allclose(want, 1e-6, 0), "a DLPack device tensor to a kernel and back")
local pb = pinned:allocate(16)
local pv = cuda.from_dlpack(fakecuda.dlpack_make{data = pb.ptr, device_type = 3, shape = {4}})
t.is(pv.is_host_accessible and pv.is_device_accessible, true, "kDLCUDAHost: pinned")
local mv = cuda.from_dlpack(fakecuda.dlpack_make{data = db.ptr, device_type = 13, device_id = dev.id, shape = {4}})
t.is(mv.is_host_accessible and mv.device_id == dev.id, true, "kDLCUDAManaged: managed")
local syncs = fakecuda.calls("cuCtxSynchronize")
v, pv, mv = nil, nil, nil
settle()
t.is(deleted(), before + 3, "device, pinned and managed tensors deleted once each")
t.ok(fakecuda.calls("cuCtxSynchronize") > syncs, "after the device's work (a synchronize)")

-- with a host function pending, a release that waits for the device is
-- deferred to the next wait (memory.c): the deleter runs there, once
before = deleted()
local hv = cuda.from_dlpack(fakecuda.dlpack_make{data = db.ptr, device_type = 2, device_id = dev.id, shape = {4}})
local ran = false
s:launch_host_func(function() ran = true end)
hv.buffer:close()
t.is(deleted(), before, "a host function pending: the deleter waits")
s:sync()
t.is(ran and deleted() == before + 1, true, "the next wait runs the host function, then the deleter")
hv = nil
settle()
t.is(deleted(), before + 1, "and nothing more")

-- --- bad input: raised, the caller keeps the tensor ---------------------------------
local P = hb.ptr
local bad = {
  {{data = P, shape = {-1}}, "shape%[1%] is %-1", "a negative shape"},
  {{data = P, shape = {4}, code = 2, bits = 16}, "no cudalua dtype for DLPack type code 2, 16 bits", "float16"},
  {{data = P, shape = {4}, code = 9, bits = 32}, "type code 9", "an unknown dtype code"},
  {{data = P, shape = {4}, code = 6, bits = 1}, "type code 6, 1 bits", "a 1-bit bool"},
  {{data = P, shape = {4}, lanes = 4}, "lanes = 4", "lanes other than 1"},
  {{data = P, shape = {4}, strides = {-1}}, "negative strides", "a negative stride"},
  {{data = P, shape = {1 << 40, 1 << 40}}, "overflow", "a shape that overflows"},
  {{data = P, shape = {2, 2}, strides = {1 << 62, 1}}, "overflow", "strides that overflow"},
  {{data = 0, shape = {4}}, "null pointer", "a null data pointer"},
  {{data = P + 2, shape = {4}}, "not a multiple of 4", "misaligned data"},
  {{data = P, byte_offset = -4, shape = {1}}, "overflow", "a byte_offset that wraps"},
  {{data = P, shape = {4}, ndim = 9}, "ndim must be 0 to 8", "nine dimensions"},
  {{data = P, shape = {4}, ndim = -1}, "ndim must be 0 to 8", "negative ndim"},
  {{data = P, shape = {4}, null_shape = true}, "null shape", "a null shape"},
  {{data = P, shape = {4}, device_type = 4}, "device type 4", "OpenCL memory"},
  {{data = P, shape = {4}, device_type = 2, device_id = 4096}, "no CUDA device 4096", "a device that does not exist"},
  {{data = P, shape = {4}, device_type = 2, device_id = -1}, "device id %-1", "a negative device id"},
  {{versioned = true, major = 2, data = P, shape = {4}}, "version 2%.0", "a later major version"},
  {{versioned = true, major = 0, data = P, shape = {4}}, "version 0%.0", "version 0"},
}
before = deleted()
for _, row in ipairs(bad) do
  local addr = fakecuda.dlpack_make(row[1])
  local versioned = row[1].versioned
  t.raises(function() return cuda.from_dlpack(addr, {versioned = versioned}) end, row[2], row[3])
  settle()
  t.is(deleted(), before, row[3] .. ": the caller still owns the tensor")
  fakecuda.dlpack_delete(addr, versioned)
  before = before + 1
end
t.raises(function() return cuda.from_dlpack(0) end, "null tensor", "a null address")
t.raises(function() return cuda.from_dlpack(-16) end, "must be >= 0", "a negative address")
t.raises(function() return cuda.from_dlpack("x") end, "address", "a string")
t.raises(function() return cuda.from_dlpack(nil) end, "address", "nothing")
t.raises(function() return cuda.from_dlpack(P, {version = 1}) end, "unknown option 'version'", "an unknown option")
t.raises(function() return cuda.from_dlpack(P, {versioned = 1}) end, "versioned", "versioned not a boolean")
t.raises(function() return cuda.from_dlpack(P, nil, 3) end, "unexpected argument", "a third argument")

-- --- to_dlpack: what a C library reads ------------------------------------------------
local strided = hb:view("int32", {cols, rows}, {1, cols})
for _, versioned in ipairs{false, true} do
  local what = versioned and "versioned" or "legacy"
  local addr = strided:to_dlpack{versioned = versioned}
  t.is(type(addr), "userdata", what .. ": to_dlpack returns a light userdata")
  local r = fakecuda.dlpack_read(addr, versioned)
  t.is(r.data, hb.ptr, what .. ": data")
  t.is(r.device_type == 1 and r.device_id == 0, true, what .. ": kDLCPU")
  t.is(r.ndim == 2 and r.shape[1] == cols and r.shape[2] == rows, true, what .. ": ndim and shape")
  t.is(r.strides[1] == 1 and r.strides[2] == cols, true, what .. ": strides in elements")
  t.is(r.code == 0 and r.bits == 32 and r.lanes == 1, true, what .. ": kDLInt 32 x1")
  t.is(r.byte_offset, 0, what .. ": byte_offset 0")
  t.is(r.has_deleter, true, what .. ": a deleter and its context")
  if versioned then
    t.is(r.major == 1 and r.minor == 0 and r.flags == 0, true, "versioned: version 1.0, no flags")
  end
  fakecuda.dlpack_delete(addr, versioned)
end
local kinds = {
  {dev.memory_resource:allocate(64, s), 2, dev.id},
  {pinned:allocate(64), 3, 0},
  {cuda.ManagedMemoryResource():allocate(64), 13, dev.id},
}
for _, row in ipairs(kinds) do
  local addr = row[1]:view("float64"):to_dlpack()
  local r = fakecuda.dlpack_read(addr)
  t.is(r.device_type == row[2] and r.device_id == row[3] and r.code == 2 and r.bits == 64, true,
       ("a %s buffer exports as device type %d"):format(row[1].memory_resource.kind, row[2]))
  fakecuda.dlpack_delete(addr)
end
local ro = cuda.StridedMemoryView{ptr = hb.ptr, dtype = "uint8", shape = 4, readonly = true}
t.raises(function() return ro:to_dlpack() end, "read%-only", "a read-only view exports only versioned")
local roa = ro:to_dlpack{versioned = true}
t.is(fakecuda.dlpack_read(roa, true).flags, 1, "a read-only view sets DLPACK_FLAG_BITMASK_READ_ONLY")
fakecuda.dlpack_delete(roa, true)

-- the export keeps the view alive, and its memory past buf:close()
local weak = setmetatable({}, {__mode = "v"})
local eb = host:allocate(32)
local ev = eb:view("uint32")
ev:iota(100, 1)
weak[1] = ev
local addr = ev:to_dlpack()
ev = nil
settle()
t.ok(weak[1] ~= nil, "an export keeps its view alive")
eb:close()
local back_view = cuda.from_dlpack(addr)
t.is(back_view[8], 107, "closing the buffer while exported closes it for Lua only: the memory stays")
local live0 = fake.live(fakecuda)
back_view = nil
settle()
t.ok(weak[1] == nil, "the consumer's deleter lets the view go")
t.raises(function() return eb:view("uint8") end, "closed", "the buffer stays closed for Lua")
t.is(cuda.is_view(weak[1]), false, "and the view is collected")
t.ok(fake.live(fakecuda) <= live0, "nothing on the fake's books grew")

-- round trips: cudalua -> DLPack -> cudalua, either struct, host and device
for _, versioned in ipairs{false, true} do
  local what = versioned and "versioned" or "legacy"
  local a = strided:to_dlpack{versioned = versioned}
  local w = cuda.from_dlpack(a, {versioned = versioned})
  local same = w.ndim == 2 and w.shape[1] == cols and w.strides[2] == cols and w.ptr == strided.ptr
  local k = math.random(#w)
  t.ok(same and w[k] == strided[k], what .. ": a host round trip is the same view")
  w = nil
  local dbv = db:view("float32", {rows, cols})
  local dw = cuda.from_dlpack(dbv:to_dlpack{versioned = versioned}, {versioned = versioned})
  t.is(dw.is_device and dw.device_id == dev.id and dw.ptr == db.ptr and #dw == n, true,
       what .. ": a device round trip")
  dw = nil
end
settle()

-- the C API (src/cudalua_dlpack.h), as a C library embedding Lua calls it
for _, versioned in ipairs{false, true} do
  local what = "C API, " .. (versioned and "versioned" or "legacy")
  before = deleted()
  local addr = fakecuda.dlpack_make{versioned = versioned, data = hb.ptr, code = 0, bits = 32, shape = {rows, cols}}
  local cv, msg = fakecuda.dlpack_api_push(addr, versioned)
  t.ok(cuda.is_view(cv) and cv[#cv] == flat[#flat], what .. ": push gives a view of the tensor (" .. tostring(msg) .. ")")
  cv = nil
  settle()
  t.is(deleted(), before + 1, what .. ": the view owned it: its deleter ran once")
  local bad_addr = fakecuda.dlpack_make{versioned = versioned, data = hb.ptr, shape = {4}, lanes = 2}
  local none, err = fakecuda.dlpack_api_push(bad_addr, versioned)
  t.ok(none == nil and tostring(err):find("lanes = 2"), what .. ": a bad tensor gives nil and the message, no error")
  settle()
  t.is(deleted(), before + 1, what .. ": and the caller keeps it")
  fakecuda.dlpack_delete(bad_addr, versioned)
  local out = fakecuda.dlpack_api_to(strided, versioned)
  local r = out and fakecuda.dlpack_read(out, versioned)
  t.ok(r and r.data == strided.ptr and r.shape[1] == cols and r.strides[2] == cols, what .. ": to gives the view's tensor")
  fakecuda.dlpack_delete(out, versioned)
  local nothing, why = fakecuda.dlpack_api_to(hb, versioned)
  t.ok(nothing == nil and tostring(why):find("cuda.View expected", 1, true), what .. ": to of a buffer: nil and the message")
end

-- bad input to to_dlpack
t.raises(function() return strided:to_dlpack{versioned = "yes"} end, "versioned", "versioned not a boolean")
t.raises(function() return strided:to_dlpack{colour = 1} end, "unknown option 'colour'", "an unknown option")
t.raises(function() return strided.to_dlpack(hb) end, "cuda.View expected", "not a view")
local cb = host:allocate(8)
local cv = cb:view("uint8")
cb:close()
t.raises(function() return cv:to_dlpack() end, "closed", "a view of a closed buffer")

t.done()
