-- Releases during a stream capture (under the fake driver). A collection
-- may run inside any capture (every allocation can run a finalizer), and
-- the frees, destroys and synchronizes its finalizers make are calls the
-- driver counts as "potentially unsafe" during a capture: in global mode
-- they invalidate it, and its end_capture fails (the fake models that,
-- t/fake/stream.c). cudalua defers them until the last capture ends.
local t = require "tap"
local cuda, fakecuda = require("fake").start()
local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local gm = cuda.GraphMemoryResource(dev)
local kernels = require "cuda.kernels"

local KINDS = {"allocations", "pools", "graphs", "arrays", "libraries", "graph_allocations"}
local function live()
  local l = fakecuda.live()
  local copy = {}
  for _, k in ipairs(KINDS) do copy[k] = l[k] end
  return copy
end

-- One object of each kind that a finalizer releases with an unsafe call,
-- made and dropped: garbage for the next collection.
local function make_garbage()
  cuda.DeviceMemoryResource(dev, {pool = false}):allocate(64)    -- cuMemFree
  cuda.PinnedMemoryResource{pool = false}:allocate(64)           -- cuMemFreeHost
  cuda.DeviceMemoryResource(dev)                                 -- cuMemPoolDestroy
  cuda.Array{format = "float32", width = 8}                      -- cuArrayDestroy
  kernels.load(dev, "scale_and_bias.cu", "scale_and_bias")       -- cuLibraryUnload
  local other = dev:create_stream()                              -- an executable with a
  other:begin_capture()                                          -- graph-memory node:
  gm:allocate(16, other):close(other)                            -- cuGraphExecDestroy,
  other:end_capture()                                            -- cuGraphDestroy
  other:close()
end

-- The garbage, made with the collector stopped (so that all of it is
-- still there when a capture begins), then a capture begun.
local function garbage_then_capture(stream, mode)
  collectgarbage("stop")
  make_garbage()
  local made = live()
  stream:begin_capture(mode)
  collectgarbage("restart")
  return made
end

collectgarbage(); collectgarbage()
local base = live()
collectgarbage("stop")
make_garbage()
local made = live()
collectgarbage("restart")
for _, k in ipairs{"allocations", "pools", "graphs", "arrays", "libraries"} do
  t.ok(made[k] > base[k], "the garbage holds " .. k)
end
collectgarbage(); collectgarbage()
for _, k in ipairs(KINDS) do
  t.is(live()[k], base[k], "outside a capture the garbage is released: " .. k)
end

for _, mode in ipairs{"global", "thread_local"} do
  local before = garbage_then_capture(s, mode)
  collectgarbage(); collectgarbage()   -- every finalizer runs inside the capture
  local during = live()
  local ok, g = pcall(s.end_capture, s)
  t.ok(ok, mode .. ": the capture survives a collection inside it: " .. tostring(g))
  for _, k in ipairs(KINDS) do
    -- the capture's graph counts while it goes on; the executable and its graph after
    t.is(during[k], before[k] + (k == "graphs" and 1 or 0), mode .. ": nothing released during the capture: " .. k)
    t.is(live()[k], base[k] + (k == "graphs" and ok and 2 or 0), mode .. ": released once it ended: " .. k)
  end
  if ok then g:close() end
  t.is(live().graphs, base.graphs, mode .. ": the captured graph closes")
end

-- A capture that fails at its end (the script synchronized the device
-- inside it) makes the deferred releases too.
garbage_then_capture(s)
collectgarbage(); collectgarbage()
dev:sync()
t.raises(function() s:end_capture() end, "STREAM_CAPTURE_INVALIDATED",
         "an unsafe call of the script's own still invalidates its capture")
for _, k in ipairs(KINDS) do
  t.is(live()[k], base[k], "a failed end_capture makes the deferred releases: " .. k)
end

-- A stream closed while it captures ends its capture: the releases too.
local lone = dev:create_stream()
garbage_then_capture(lone)
collectgarbage(); collectgarbage()
t.ok(live().allocations > base.allocations, "deferred while the stream captures")
lone:close()
for _, k in ipairs(KINDS) do
  t.is(live()[k], base[k], "closing the capturing stream makes the deferred releases: " .. k)
end

-- Two captures in flight: the releases wait for the last.
local s2 = dev:create_stream()
garbage_then_capture(s)
s2:begin_capture()
collectgarbage(); collectgarbage()
local g1 = s:end_capture()
t.ok(live().allocations > base.allocations, "one of two captures ended: still deferred")
local g2 = s2:end_capture()
t.is(live().allocations, base.allocations, "the last ended: released")
g1:close(); g2:close()

-- A capturing stream that waits on another capture's event: the driver
-- refuses the merge, and each capture still counts until its own end.
garbage_then_capture(s)
s2:begin_capture()
local ev2 = dev:create_event()
s2:record(ev2)
t.raises(function() s:wait(ev2) end, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "a capture waits on another's event: refused")
t.raises(function() s:wait(s2) end, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "or on another capturing stream")
s2:end_capture():close()
collectgarbage(); collectgarbage()
t.ok(live().allocations > base.allocations, "the first capture still defers")
s:end_capture():close()
t.is(live().allocations, base.allocations, "and its end makes the releases (the count did not stick)")
ev2:close()

-- A capturing stream collected without an end: its capture is uncounted
-- once, the releases made.
garbage_then_capture(dev:create_stream())
collectgarbage(); collectgarbage(); collectgarbage()
for _, k in ipairs(KINDS) do
  t.is(live()[k], base[k], "a capturing stream collected: the releases are made: " .. k)
end

-- A g:close() inside a capture defers its destroys too.
local gclosed = (function() s2:begin_capture(); return s2:end_capture() end)()
local graphs = live().graphs
s:begin_capture()
gclosed:close()
t.is(live().graphs, graphs + 1, "g:close() during a capture: the destroys wait (the capture's graph counts)")
s:end_capture():close()
t.is(live().graphs, graphs - 2, "and are made at its end")

-- A launched graph's memory (left to the program, live after the launch),
-- collected while its launch stream captures: never freed into that
-- capture (it would become a node of the new graph), nor on the legacy
-- stream during it; freed once the capture ends.
s:begin_capture()
local b = gm:allocate(16, s)
local g = s:end_capture()
g:launch(s)
s:sync()
t.is(fakecuda.live().graph_allocations, 1, "the launch allocated the buffer's memory")
g:close()                              -- the buffer alone owns the memory now
collectgarbage("stop")                 -- (a stressed collector would take it before the capture)
b = nil                                -- luacheck: ignore
s:begin_capture()
collectgarbage("restart")
collectgarbage(); collectgarbage()
t.is(fakecuda.live().graph_allocations, 1, "collected during a capture of its launch stream: not yet freed")
local ok, g3 = pcall(s.end_capture, s)
t.ok(ok, "the capture survives: " .. tostring(g3))
t.is(ok and g3.node_count, 0, "and captured no free of that memory")
t.is(fakecuda.live().graph_allocations, 0, "freed once the capture ended")
if ok then g3:close() end

-- Releases deferred behind a host function and a capture: made at the
-- first point with neither.
local ran = false
garbage_then_capture(s)   -- (loading a module runs pending host functions: first)
s2:launch_host_func(function() ran = true end)
collectgarbage(); collectgarbage()
s:end_capture():close()
t.is(ran, false, "the host function waits for a wait")
t.ok(live().allocations > base.allocations, "a capture ended while a host function is outstanding: still deferred")
s2:sync()
t.ok(ran, "the host function ran at the wait")
for _, k in ipairs(KINDS) do
  t.is(live()[k], base[k], "and the releases were made after it: " .. k)
end

s:close(); s2:close(); gm:close()
t.done()
