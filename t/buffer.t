-- Buffers: copies between every pair of resources with verified data,
-- fill, slices, close, prefetch/advise, and bad input.
local t = require "tap"
local cuda = require "cuda"
local seed = t.seed()

-- Host-only checks run everywhere.
local host = cuda.HostMemoryResource()
local a, b = host:allocate(4096), host:allocate(4096)
a:view("uint32"):random(0, 2^32, seed)
b:fill(0xAB)
t.is(b:view("uint8")[4096], 0xAB, "host fill")
a:copy_to(b)
t.ok(b:view("uint32"):allclose(a:view("uint32"), 0, 0), "host to host copy")
local c = a:copy_to(nil)
t.ok(c.size == 4096 and c:view("uint32"):allclose(a:view("uint32"), 0, 0), "copy_to(nil) allocates a copy")
t.ok(rawequal(c.memory_resource, host), "the copy comes from the source's resource")
t.raises(function() a:copy_to(host:allocate(100)) end, "sizes must match", "copy between different sizes")
b:fill(cuda.u32(0xDEADBEEF))
t.is(b:view("uint32")[1024], 0xDEADBEEF, "32-bit fill from a typed scalar")
b:fill(cuda.u16(0x1234))
t.is(b:view("uint16")[2048], 0x1234, "16-bit fill")
t.raises(function() b:fill(256) end, "a fill value must be a byte", "fill(256)")
t.raises(function() b:fill(cuda.u64(1)) end, "8, 16 or 32 bits", "64-bit fill")
t.raises(function() host:allocate(6):fill(cuda.u32(1)) end, "cannot fill 6 bytes with a 4%-byte pattern", "fill size not a multiple")

-- slices
local sl = a:slice(100, 200)
t.is(sl.size, 200, "slice size")
t.is(sl.ptr, a.ptr + 100, "slice pointer")
t.is(sl.is_slice, true, "is_slice")
t.ok(rawequal(sl.owner, a), "slice owner")
t.is(sl:view("uint8")[1], a:view("uint8")[101], "slice shares memory")
local sl2 = sl:slice(10, 20)
t.is(sl2.ptr, a.ptr + 110, "slice of a slice")
t.is(a:slice(4000).size, 96, "slice to the end")
t.raises(function() a:slice(4096, 1) end, "offset 4096 is outside the buffer", "slice offset out of range")
t.raises(function() a:slice(-1, 1) end, "outside the buffer", "negative offset")
t.raises(function() a:slice(4000, 97) end, "does not fit", "slice too long")
t.raises(function() a:slice(0, 0) end, "does not fit", "empty slice")
t.like(tostring(sl), "slice at %+100", "slice tostring")

-- closing
t.raises(function() host:allocate(8):close(5) end, "cuda%.Stream expected", "close with something that is not a stream")
local d = host:allocate(64)
local dsl = d:slice(0, 8)
d:close()
d:close()
t.like(tostring(d), "closed", "closed buffer prints as closed")
t.raises(function() return d.size end, "cuda%.Buffer is closed", "field of a closed buffer")
t.raises(function() dsl:fill(1) end, "owner was closed", "slice of a closed buffer")
t.raises(function() d:copy_to(a) end, "closed", "copy from a closed buffer")
t.raises(function() a:slice(0, 64):copy_from(d) end, "closed", "copy from a closed buffer into a slice")
local live = host.live_buffers
do
  local scoped <close> = host:allocate(8)
  t.is(host.live_buffers, live + 1, "a scoped buffer is live inside its block")
end
t.is(host.live_buffers, live, "<close> released it at the end of the block")
t.raises(function() a:prefetch("host", nil) end, "cuda%.Stream expected", "prefetch needs a stream")

if not cuda.is_available() then
  t.skip("no CUDA device", 37 + 6)
  t.done()
end

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local resources = {
  {"device", dev.memory_resource}, {"explicit pool", cuda.DeviceMemoryResource(dev)},
  {"pinned", pinned}, {"pinned pool", cuda.PinnedMemoryResource{pool = true}},
  {"managed", cuda.ManagedMemoryResource()}, {"host", host},
}
-- An odd size, so no copy is a whole number of words or pages.
local N = 1000003
local source = pinned:allocate(N)
local check = pinned:allocate(N)
for _, from in ipairs(resources) do
  for _, to in ipairs(resources) do
    local src, dst = from[2]:allocate(N, s), to[2]:allocate(N, s)
    source:view("uint8"):random(0, 256, seed + #from[1] * 7 + #to[1])
    src:copy_from(source, s)
    dst:fill(0x5A, s)
    src:copy_to(dst, s)
    check:fill(0xA5, s)
    check:copy_from(dst, s)
    s:sync()
    local ok, err, bad = check:view("uint8"):allclose(source:view("uint8"), 0, 0)
    t.ok(ok, ("%s -> %s: %d bytes verified%s"):format(from[1], to[1], N, ok and "" or " (first bad byte " .. tostring(bad) .. ")"))
    src:close(s)
    dst:close(s)
  end
end

-- copy_to and copy_from, the hot path of every pipeline, allocate nothing
do
  local small, dsmall, stream = pinned:allocate(4096), dev.memory_resource:allocate(4096, s), s
  small:copy_to(dsmall, stream)
  dsmall:copy_from(small, stream)
  collectgarbage()
  collectgarbage("stop")
  local before = collectgarbage("count")
  for _ = 1, 100 do small:copy_to(dsmall, stream); dsmall:copy_from(small, stream) end
  local grew = collectgarbage("count") - before
  collectgarbage("restart")
  t.is(grew, 0, "200 copies allocate no Lua memory")
  s:sync()
end

-- device-only memory has no host view
local dbuf = dev.memory_resource:allocate(64, s)
t.raises(function() return dbuf:view("uint8")[1] end, "copy it to a pinned or managed buffer", "elements of a device view")
t.raises(function() dbuf:copy_to(dev.memory_resource:allocate(64, s)) end, "needs a stream", "device copy without a stream")
t.raises(function() dbuf:fill(1) end, "needs a stream", "device fill without a stream")
t.raises(function() dbuf:prefetch(dev, s) end, "managed memory only", "prefetch of device memory")

-- managed memory: prefetch and advise, then the host sees a device fill
local m = cuda.ManagedMemoryResource():allocate(1 << 20)
m:advise("preferred_location", dev)
m:prefetch(dev, s)
m:fill(cuda.u32(0x01020304), s)
m:prefetch("host", s)
s:sync()
t.is(m:view("uint32")[12345], 0x01020304, "managed: device fill seen by the host after prefetch")
t.raises(function() m:advise("bogus", dev) end, "invalid option 'bogus'", "unknown advice")
t.done()
