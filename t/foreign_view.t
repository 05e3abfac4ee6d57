-- cuda.StridedMemoryView: views of memory cudalua did not allocate, given as
-- an address, a dtype, a shape, strides and the object that keeps the memory
-- alive. Host views read and write through their strides; a device view
-- made from a bare device address goes to a kernel and to copies; the owner
-- lives as long as the view; bad layouts raise, never crash. Runs on the
-- GPU when there is one, else under the fake driver.
local t = require "tap"
local cuda = require "cuda"
if not cuda.is_available() then cuda = require("fake").start() end
t.seed()

local dev = cuda.Device(0)
dev:set_current()
t.diag(os.getenv("CUDALUA_LIBCUDA") and "under the fake driver" or ("on the GPU: " .. dev.name))
local s = dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local host = cuda.HostMemoryResource()

-- --- host memory: a transpose of another library's matrix --------------------
local rows, cols = math.random(2, 9), math.random(2, 9)
local hb = host:allocate(rows * cols * 8)
local flat = hb:view("float64")
for i = 1, #flat do flat[i] = math.random(-1e6, 1e6) + 0.5 end
local tr = cuda.StridedMemoryView{ptr = hb.ptr, dtype = "float64", shape = {cols, rows},
                                  strides = {1, cols}, owner = hb}
t.is(cuda.is_view(tr), true, "StridedMemoryView returns a cuda.View")
t.is(#tr, rows * cols, "#v is the element count")
t.is(tr.ptr, hb.ptr, "v.ptr is the address given")
t.is(tr.dtype, "float64", "v.dtype")
t.is(tr.shape[1] == cols and tr.shape[2] == rows, true, "v.shape")
t.is(tr.strides[1] == 1 and tr.strides[2] == cols, true, "v.strides in elements")
t.is(tr.is_contiguous, false, "a transpose is not contiguous")
t.is(tr.is_host_accessible, true, "host memory: host-accessible")
t.is(tr.is_device_accessible, false, "host memory: not device-accessible")
t.is(tr.device_id, nil, "host memory has no device")
t.is(tr.readonly, false, "readonly defaults to false")
t.is(tr.owner, hb, "v.owner is the owner given")
t.is(tr.exporting_obj, hb, "v.exporting_obj (cuda.core's name) too")
t.is(hb:view("uint8").owner, nil, "a view of cudalua's own buffer has no owner")
local good = true
for j = 1, cols do
  for i = 1, rows do
    if tr[(j - 1) * rows + i] ~= flat[(i - 1) * cols + j] then good = false end
  end
end
t.ok(good, "a foreign strided view reads through its strides")
local i, j = math.random(rows), math.random(cols)
tr[(j - 1) * rows + i] = 0.25
t.is(flat[(i - 1) * cols + j], 0.25, "a foreign strided view writes through its strides")

-- C order when no strides are given; one integer is a 1-D shape
local c = cuda.StridedMemoryView{ptr = hb.ptr, dtype = "float64", shape = {rows, cols}}
t.is(c.strides[1] == cols and c.strides[2] == 1 and c.is_contiguous, true, "no strides: C order")
local k = math.random(rows * cols)
t.is(c[k], flat[k], "a contiguous foreign view reads like buf:view")
local one = cuda.StridedMemoryView{ptr = hb.ptr + 8, dtype = "int32", shape = 3}
t.is(one.ndim == 1 and #one == 3, true, "an integer shape is one dimension")
t.is(cuda.StridedMemoryView{ptr = 0, dtype = "int8", shape = {0, 5}}.size, 0,
     "an empty view may have a null address")
t.is(c.buffer.memory_resource.kind, "host", "the view's buffer belongs to a resource of its own")
t.raises(function() c.buffer.memory_resource:allocate(16) end, "another library owns",
         "that resource allocates nothing")
t.is(cuda.StridedMemoryView{ptr = hb.ptr, dtype = "uint8", shape = 4, readonly = true}.readonly,
     true, "readonly = true is reported")
-- bulk operations see the elements where they are contiguous
local bulk = cuda.StridedMemoryView{ptr = hb.ptr, dtype = "float64", shape = rows * cols}
bulk:fill(1.5)
t.is(flat:sum(), 1.5 * rows * cols, "bulk operations on a foreign host view")

-- --- the owner lives as long as the view ---------------------------------------
local weak = setmetatable({}, {__mode = "k"})
local v
do
  local owner = {}
  weak[owner] = true
  v = cuda.StridedMemoryView{ptr = hb.ptr, dtype = "uint8", shape = 8, owner = owner}
end
collectgarbage(); collectgarbage()
t.ok(next(weak) ~= nil, "the owner is kept while the view lives")
local slice_view = v.buffer:slice(2, 4):view("uint8")
t.is(slice_view.owner, v.owner, "a view of a slice of a foreign buffer reports its owner")
v = nil
collectgarbage(); collectgarbage()
t.ok(next(weak) ~= nil, "and while a view of a slice of its buffer lives")
slice_view = nil
collectgarbage(); collectgarbage()
t.ok(next(weak) == nil, "the owner goes with the last view")

-- finalizers: a view, its owner (a cudalua buffer that frees its memory) and
-- an older object whose finalizer reads the view, all garbage together: the
-- view's buffer is finalized (closed) before its owner frees the memory, so
-- the read raises instead of touching freed memory.
local seen
do
  local early = setmetatable({}, {__gc = function(o) seen = table.pack(pcall(function() return o.v[1] end)) end})
  local owned = host:allocate(16)
  owned:view("int32"):fill(9)
  early.v = cuda.StridedMemoryView{ptr = owned.ptr, dtype = "int32", shape = 4, owner = owned}
end
collectgarbage(); collectgarbage()
t.ok(seen and seen[1] == false and tostring(seen[2]):find("closed"),
     "a finalizer that reads a collected foreign view gets 'closed' (" .. tostring(seen and seen[2]) .. ")")
local fc = cuda.StridedMemoryView{ptr = hb.ptr, dtype = "uint8", shape = 4}
fc.buffer:close()
t.raises(function() return fc[1] end, "closed", "a foreign view whose buffer was closed")

-- --- device memory: a bare device address to a kernel and back -----------------
local n = rows * cols
local db = dev.memory_resource:allocate(n * 4, s)
local dv = cuda.StridedMemoryView{ptr = db.ptr, dtype = "float32", shape = {rows, cols}, device = dev}
t.is(dv.is_device, true, "device = dev: a device view")
t.is(dv.device_id, dev.id, "v.device_id")
t.is(dv.device, dev, "v.device")
t.is(dv.is_device_accessible and not dv.is_host_accessible, true, "device memory: device-accessible only")
t.raises(function() return dv[1] end, "device memory", "Lua cannot read a foreign device view's elements")
t.is(cuda.StridedMemoryView{ptr = db.ptr, dtype = "uint8", shape = 1, device = dev.id}.device_id, dev.id,
     "device = an id")
t.is(cuda.StridedMemoryView{ptr = db.ptr, dtype = "uint8", shape = 1, memory = "device"}.device_id,
     dev.id, "memory = \"device\" alone: the current device")
local src = pinned:allocate(n * 4):view("float32")
src:random(-100, 100, math.random(1, 1 << 30))
local scale, bias = math.random(2, 5) + 0.5, math.random(-9, 9) + 0.25
src:copy_to(dv, s)
local kern = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 128}, kern, dv, cuda.f32(scale), cuda.f32(bias), cuda.u64(n))
local back = pinned:allocate(n * 4):view("float32")
back:fill(-777)
back:copy_from(dv, s)
s:sync()
local want = pinned:allocate(n * 4):view("float32")
want:copy(src):mul(scale):add(bias)
local ok, err = back:allclose(want, 1e-6, 0)
t.ok(ok, "a foreign device view to a kernel and through copies (max err " .. tostring(err) .. ")")
-- an offset into the device memory: the kernel starts there
local first = math.random(2, n - 1)
local part = cuda.StridedMemoryView{ptr = db.ptr + (first - 1) * 4, dtype = "float32",
                                    shape = n - first + 1, device = dev, owner = db}
back:fill(0)
db:copy_from(back, s)
cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 128}, kern, part, cuda.f32(0), cuda.f32(7), cuda.u64(#part))
back:copy_from(db, s)
s:sync()
t.ok(back[first - 1] == 0 and back[first] == 7 and back[n] == 7,
     "a kernel given a foreign view at an offset writes from its first element")
-- DLPack on the device: a view handed out and taken back (versioned), then
-- a kernel on it; the export lets its view go when the taker's view goes
local weak_dl = setmetatable({}, {__mode = "v"})
local exported = db:view("float32", {rows, cols})
weak_dl[1] = exported
local dl = cuda.from_dlpack(exported:to_dlpack{versioned = true}, {versioned = true})
exported = nil
t.is(dl.is_device and dl.device_id == dev.id and dl.ptr == db.ptr and dl.shape[2] == cols, true,
     "a device view through DLPack and back")
src:copy_to(dl, s)
cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 128}, kern, dl, cuda.f32(scale), cuda.f32(bias), cuda.u64(n))
back:fill(-777)
back:copy_from(dl, s)
s:sync()
ok, err = back:allclose(want, 1e-6, 0)
t.ok(ok, "a kernel on a DLPack device view (max err " .. tostring(err) .. ")")
collectgarbage(); collectgarbage()
t.ok(weak_dl[1] ~= nil, "the export keeps its view while the taker's view lives")
dl = nil
collectgarbage(); collectgarbage()
t.ok(weak_dl[1] == nil, "releasing the taker's view deletes the export, which lets its view go")

-- pinned memory another library allocated: the host and kernels reach it
local pb = pinned:allocate(64)
local pv = cuda.StridedMemoryView{ptr = pb.ptr, dtype = "uint32", shape = 16, memory = "pinned", owner = pb}
t.is(pv.is_host_accessible and pv.is_device_accessible, true, "memory = \"pinned\": both reach it")
pv:iota(1, 1)
t.is(pb:view("uint32")[16], 16, "a foreign pinned view writes the memory")

-- --- bad input: raised, never a crash --------------------------------------------
local P = hb.ptr
local bad = {
  {{dtype = "float32", shape = 1}, "ptr must be an address", "no ptr"},
  {{ptr = P, shape = 1}, "dtype is missing", "no dtype"},
  {{ptr = P, dtype = "float16", shape = 1}, "invalid option 'float16'", "an unknown dtype"},
  {{ptr = P, dtype = "float32"}, "shape is missing", "no shape"},
  {{ptr = P, dtype = "float32", shape = {-1}}, "shape%[1%] must be >= 0", "a negative shape"},
  {{ptr = P, dtype = "float32", shape = {}}, "1 to 8 dimensions", "an empty shape"},
  {{ptr = P, dtype = "float32", shape = {1, 1, 1, 1, 1, 1, 1, 1, 1}}, "1 to 8 dimensions", "nine dimensions"},
  {{ptr = P, dtype = "float32", shape = {2, 2}, strides = {1}}, "as many dimensions", "strides of another rank"},
  {{ptr = P, dtype = "float32", shape = {2}, strides = {-1}}, "strides%[1%] must be >= 0", "a negative stride"},
  {{ptr = P, dtype = "float32", shape = {1 << 40, 1 << 40}}, "overflow", "a shape that overflows"},
  {{ptr = P, dtype = "float64", shape = {2, 2}, strides = {1 << 62, 1}}, "overflow", "strides that overflow"},
  {{ptr = P, dtype = "float32", shape = 1.5}, "integer", "a fractional shape"},
  {{ptr = 0, dtype = "float32", shape = 4}, "null pointer", "a null pointer"},
  {{ptr = -8, dtype = "float32", shape = 4}, "ptr must be >= 0", "a negative address"},
  {{ptr = 0.5, dtype = "float32", shape = 4}, "integer", "a fractional address"},
  {{ptr = "0x1000", dtype = "float32", shape = 4}, "ptr must be an address", "an address as a string"},
  {{ptr = P + 1, dtype = "float32", shape = 4}, "not a multiple of 4", "a misaligned address"},
  {{ptr = math.maxinteger - 7, dtype = "float64", shape = 1 << 20}, "end of the address space",
   "an extent past the address space"},
  {{ptr = P, dtype = "float32", shape = 4, device = dev, memory = "host"}, "host memory has no device",
   "a device for host memory"},
  {{ptr = P, dtype = "float32", shape = 4, memory = "hbm"}, "invalid option 'hbm'", "an unknown memory kind"},
  {{ptr = P, dtype = "float32", shape = 4, device = 4096}, "no CUDA device 4096", "a device that does not exist"},
  {{ptr = P, dtype = "float32", shape = 4, colour = 1}, "unknown option 'colour'", "an unknown option"},
  {{ptr = P, dtype = "float32", shape = 4, readonly = 1}, "readonly", "readonly not a boolean"},
}
for _, row in ipairs(bad) do
  t.raises(function() return cuda.StridedMemoryView(row[1]) end, row[2], row[3])
end
t.raises(function() return cuda.StridedMemoryView() end, "table expected", "no option table")
t.raises(function() return cuda.StridedMemoryView({ptr = P, dtype = "uint8", shape = 1}, 2) end,
         "unexpected argument", "a second argument")

t.done()
