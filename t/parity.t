-- The smaller cuda.core names: a buffer's deallocation stream, the default
-- streams, properties.pci_bus_id, and pool attributes read as unsigned. On
-- the GPU when there is one, else under the fake driver.
local t = require "tap"
local cuda = require "cuda"
if not cuda.is_available() then cuda = require("fake").start() end
t.seed()

local dev = cuda.Device(0)
dev:set_current()

-- default streams
local legacy, per_thread = dev.legacy_default_stream, dev.per_thread_default_stream
t.is(legacy.handle, 1, "the legacy default stream is CU_STREAM_LEGACY")
t.is(per_thread.handle, 2, "the per-thread default stream is CU_STREAM_PER_THREAD")
t.ok(rawequal(legacy, dev.legacy_default_stream), "one object per device")
t.is(legacy.is_default and per_thread.is_default, true, "is_default")
t.is(dev:create_stream().is_default, false, "a created stream is not a default stream")
t.is(legacy.device, dev, "a default stream's device")
local env = os.getenv("CUDALUA_PER_THREAD_DEFAULT_STREAM")
t.ok(rawequal(dev.default_stream, (env and env ~= "" and env ~= "0") and per_thread or legacy),
     "dev.default_stream follows CUDALUA_PER_THREAD_DEFAULT_STREAM")
local code, out = t.run("CUDALUA_PER_THREAD_DEFAULT_STREAM=1 " .. (os.getenv("CUDALUA_LIBCUDA") and require("fake").env() or "") ..
                        t.cudalua() .. " -e 'local d = require\"cuda\".Device(0); print(d.default_stream.handle)'")
t.is(out:match("%d+"), "2", "CUDALUA_PER_THREAD_DEFAULT_STREAM=1 picks the per-thread stream")
legacy:close()
t.is(legacy.handle, 1, "closing a default stream leaves it open")
-- work on both: a copy and a sync
local pinned = cuda.PinnedMemoryResource()
local a, b = pinned:allocate(64), pinned:allocate(64)
a:view("uint32"):iota(1)
for _, s in ipairs{legacy, per_thread} do
  b:fill(0)
  local d = dev.memory_resource:allocate(64, s)
  d:copy_from(a, s); b:copy_from(d, s); s:sync()
  t.is(b:view("uint32"):sum(), 16 * 17 // 2, "copies through device memory on stream " .. s.handle)
  d:close(s)
end
t.raises(function() cuda.copy_batch(legacy, {{b, a}}) end, "legacy default stream", "copy_batch refuses the legacy stream")

-- a buffer's deallocation stream
local s1, s2 = dev:create_stream(), dev:create_stream()
local buf = dev.memory_resource:allocate(256, s1)
t.is(buf.deallocation_stream, s1, "the deallocation stream starts as the allocation stream")
t.is(buf:set_deallocation_stream(s2), buf, "set_deallocation_stream returns the buffer")
t.is(buf.deallocation_stream, s2, "deallocation_stream after set")
t.is(buf:slice(0, 16).deallocation_stream, s2, "a slice reports its owner's")
t.raises(function() buf:slice(0, 16):set_deallocation_stream(s1) end, "a slice frees nothing", "a slice's")
t.raises(function() buf:set_deallocation_stream(5) end, "cuda%.Stream expected", "a number")
local cs = dev:create_stream(); cs:close()
t.raises(function() buf:set_deallocation_stream(cs) end, "cuda%.Stream is closed", "a closed stream")
local used = dev.memory_resource.used
buf:close()
s2:sync()
t.ok(dev.memory_resource.used <= used, "close() without a stream releases on the deallocation stream")
t.raises(function() buf:set_deallocation_stream(s1) end, "cuda%.Buffer is closed", "a closed buffer")

-- properties.pci_bus_id, as cuda.core names it
local p = dev.properties
t.ok(math.type(p.pci_bus_id) == "integer" and p.pci_bus_id == p.pci_bus_number, "properties.pci_bus_id is the bus number")
t.is(type(dev.pci_bus_id), "string", "dev.pci_bus_id is the bus id string")

-- pool attributes, unsigned
t.is(dev.memory_resource.release_threshold, math.huge, "the default pool's raised threshold reads as math.huge")
local pool = cuda.DeviceMemoryResource(dev, {release_threshold = 1 << 40})
t.is(pool.release_threshold, 1 << 40, "a threshold below 2^63 reads as an integer")
t.is(math.type(pool.used), "integer", "used is an integer")
pool:close()
t.done()
