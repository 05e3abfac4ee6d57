-- Views of any memory: shapes and strides checked against the buffer (with
-- overflow), strided host views read through their strides, device views
-- that carry their metadata, pass their pointer to a kernel and take part in
-- copies, and raise (never crash) when Lua touches their elements. Runs on
-- the GPU when there is one, else under the fake driver.
local t = require "tap"
local cuda = require "cuda"
if not cuda.is_available() then cuda = require("fake").start() end
t.seed()

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local host = cuda.HostMemoryResource()

-- --- shapes and strides on host memory -------------------------------------
local rows, cols = math.random(2, 9), math.random(2, 9)
local hb = pinned:allocate(rows * cols * 4)
local flat = hb:view("float32")
for i = 1, #flat do flat[i] = math.random(-1000, 1000) end
local m = hb:view("float32", {rows, cols})
t.is(#m, rows * cols, "#v of a 2-D view is its element count")
t.is(m.size, rows * cols, "v.size")
t.is(m.ndim, 2, "v.ndim")
t.is(m.shape[1] == rows and m.shape[2] == cols, true, "v.shape")
t.is(m.strides[1] == cols and m.strides[2] == 1, true, "C-order strides in elements")
t.is(m.is_contiguous, true, "a shape alone is contiguous")
t.is(m.itemsize, 4, "v.itemsize")
t.is(m.nbytes, rows * cols * 4, "v.nbytes")
t.is(m.ptr, hb.ptr, "v.ptr")
t.is(m.is_device, false, "pinned memory is not a device view")
t.is(m.is_host_accessible, true, "pinned memory: host-accessible")
t.is(m.is_device_accessible, true, "pinned memory: device-accessible")
t.is(m.buffer, hb, "v.buffer keeps the buffer")
t.is(cuda.is_view(m), true, "cuda.is_view(view)")
t.is(cuda.is_view(hb), false, "cuda.is_view(buffer)")
t.is(cuda.is_view(nil), false, "cuda.is_view(nil)")
t.like(tostring(m), ("^cuda%%.View%%(float32%%[%dx%d%%]%%)$"):format(rows, cols), "tostring of a 2-D view")
local k = math.random(#m)
t.is(m[k], flat[k], "a contiguous 2-D view reads in C order")
local mv = cuda.View(hb, "float32", {rows, cols})
t.is(mv[k], flat[k], "cuda.View(buf, dtype, shape) is buf:view(dtype, shape)")

-- the transpose: shape {cols, rows}, strides {1, cols}
local tr = hb:view("float32", {cols, rows}, {1, cols})
t.is(tr.is_contiguous, false, "a transpose is not contiguous")
t.like(tostring(tr), "strided", "tostring says strided")
local good = true
for j = 1, cols do
  for i = 1, rows do
    local e = tr[(j - 1) * rows + i]
    if e ~= flat[(i - 1) * cols + j] then good = false end
  end
end
t.ok(good, "a strided view reads through its strides")
local i, j = math.random(rows), math.random(cols)
local x = math.random(-50, 50) + 0.5
tr[(j - 1) * rows + i] = x
t.is(flat[(i - 1) * cols + j], x, "a strided view writes through its strides")
t.is(#tr:to_table(), rows * cols, "to_table of a strided view")
t.raises(function() tr:sum() end, "not contiguous", "bulk ops need a contiguous view")
t.raises(function() tr:range(1, 2) end, "not contiguous", "range needs a contiguous view")
t.raises(function() tr:copy_to(pinned:allocate(rows * cols * 4)) end, "strided", "copies need a contiguous view")
-- broadcast: stride 0
local row = hb:view("float32", {3, cols}, {0, 1})
t.is(row[cols + 1], flat[1], "a zero stride repeats")
-- a prefix: a smaller shape than the buffer
t.is(#hb:view("float32", {2}), 2, "a shape may cover less than the buffer")

-- checks
t.raises(function() hb:view("float32", {rows, cols + 1}) end, "past the buffer", "shape past the buffer")
t.raises(function() hb:view("float32", {rows, cols}, {cols + 1, 1}) end, "past the buffer", "strides past the buffer")
t.raises(function() hb:view("float32", {2^40, 2^40}) end, "overflow", "shape overflow")
t.raises(function() hb:view("float32", {2, 2}, {2^62, 1}) end, "overflow", "stride overflow")
t.raises(function() hb:view("float32", {-1}) end, "shape%[1%]", "negative shape")
t.raises(function() hb:view("float32", {1.5}) end, "shape%[1%]", "fractional shape")
t.raises(function() hb:view("float32", {}) end, "1 to 8 dimensions", "no dimensions")
t.raises(function() hb:view("float32", {1, 1, 1, 1, 1, 1, 1, 1, 1}) end, "1 to 8 dimensions", "nine dimensions")
t.raises(function() hb:view("float32", {2, 2}, {1}) end, "as many dimensions", "strides of another rank")
t.raises(function() hb:view("float32", nil, {1}) end, "strides need a shape", "strides without a shape")
t.raises(function() hb:view("float32", "x") end, "integer or table", "a string shape")
t.raises(function() hb:view("float32", {"x"}) end, "shape%[1%]", "a string dimension")
local empty = hb:view("float32", {0, 3})
t.is(#empty, 0, "a zero dimension gives an empty view")

-- --- device views ------------------------------------------------------------
local n = rows * cols
local db = dev.memory_resource:allocate(n * 4, s)
local dv = db:view("float32", {rows, cols})
t.is(dv.is_device, true, "a view of device memory is a device view")
t.is(dv.is_host_accessible, false, "device view: not host-accessible")
t.is(dv.device_id, 0, "device view: device_id")
t.is(dv.device, dev, "device view: device")
t.is(dv.ptr, db.ptr, "device view: ptr")
t.is(#dv, n, "#v of a device view")
t.like(tostring(dv), "device", "tostring says device")
t.raises(function() return dv[1] end, "device memory, which the host cannot read", "reading a device view")
t.raises(function() dv[1] = 1 end, "device memory, which the host cannot read", "writing a device view")
t.raises(function() dv:fill(1) end, "device memory", "bulk ops on a device view")
t.raises(function() dv:to_table() end, "device memory", "to_table of a device view")
t.raises(function() flat:copy(dv) end, "device memory", "a device view as an operand")

-- copies: host view -> device view -> kernel -> device view -> host view
local scale, bias = math.random(2, 5) + 0.5, math.random(-9, 9) + 0.25
local back = pinned:allocate(n * 4)
back:view("float32"):fill(-777)
m:copy_to(dv, s)
local kern = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 128}, kern, dv, cuda.f32(scale), cuda.f32(bias), cuda.u64(n))
back:view("float32", {rows, cols}):copy_from(dv, s)
s:sync()
local want = pinned:allocate(n * 4):view("float32")
want:copy(flat):mul(scale):add(bias)
local ok, err = back:view("float32"):allclose(want, 1e-6, 0)
t.ok(ok, "a device view passed to a kernel and copied back (max err " .. tostring(err) .. ")")
-- a range of a device view: the kernel sees its pointer
local first = math.random(2, n - 1)
local part = db:view("float32"):range(first, n)
t.is(part.ptr, db.ptr + (first - 1) * 4, "a range of a device view points inside it")
back:view("float32"):fill(0)
cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 128}, kern, part, cuda.f32(0), cuda.f32(7), cuda.u64(#part))
back:copy_from(db, s)
s:sync()
local bv = back:view("float32")
t.ok(bv[first - 1] ~= 7 and bv[first] == 7 and bv[n] == 7, "a kernel given a range writes from its first element")
-- closed buffers
local cb = dev.memory_resource:allocate(16, s)
local cv = cb:view("uint8")
cb:close(s)
t.raises(function() return cv.shape end, "closed", "fields of a closed device view")
t.raises(function() cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 1}, kern, cv, cuda.f32(1), cuda.f32(1), cuda.u64(1)) end,
         "closed", "a closed view to a kernel")
t.raises(function() cv:copy_to(pinned:allocate(16), s) end, "closed", "copying a closed view")
t.like(tostring(cv), "closed", "tostring of a closed device view")
-- pageable memory cannot go to a kernel through a view either, unless the
-- device reaches it (pageable_memory_access: HMM or ATS)
local pv = host:allocate(16):view("float32")
if dev.properties.pageable_memory_access == 1 then
  pv:fill(2)
  cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 1}, kern, pv, cuda.f32(3), cuda.f32(1), cuda.u64(1))
  s:sync()
  t.is(pv[1], 7, "a pageable view to a kernel on a device that reaches it")
else
  t.raises(function() cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 1}, kern, pv, cuda.f32(1), cuda.f32(1), cuda.u64(1)) end,
           "pageable", "a pageable view to a kernel")
end
-- a managed view is both
local mb = cuda.ManagedMemoryResource():allocate(64)
local mview = mb:view("int32", {4, 4})
t.is(mview.is_device, false, "managed: not a device view")
t.is(mview.is_device_accessible, true, "managed: device-accessible")
mview[5] = 42
t.is(mb:view("int32")[5], 42, "managed views read and write on the host")
s:sync()
t.done()
