-- Graph memory (cuda.GraphMemoryResource) under the fake driver: buffers
-- allocated while a stream is captured become allocation nodes, freed in
-- the graph or after its launch; the driver's rules on their lives come
-- back as clear errors, never a crash.
local t = require "tap"
local cuda, fakecuda = require("fake").start()
local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local N = 256
local pinned = cuda.PinnedMemoryResource()
local src, dst = pinned:allocate(N * 4), pinned:allocate(N * 4)
local k = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
local cfg = cuda.LaunchConfig{grid = 1, block = 256}
local v, want = src:view("float32"), pinned:allocate(N * 4):view("float32")
local gm = cuda.GraphMemoryResource(dev)
t.like(tostring(gm), "^cuda%.GraphMemoryResource%(device 0%)", "tostring")
t.is(gm.device, dev, "its device")
t.is(gm.is_host_accessible, false, "not host accessible")

-- A capture that copies src through graph memory, x * a + b, into dst.
local function capture(a, b, free_in_graph)
  s:begin_capture()
  local tmp = gm:allocate(N * 4, s)
  tmp:copy_from(src, s)
  cuda.launch(s, cfg, k, tmp, cuda.f32(a), cuda.f32(b), cuda.u64(N))
  tmp:copy_to(dst, s)
  if free_in_graph then tmp:close(s) end
  return s:end_capture(), tmp
end
local round = 0
local function check(g, a, b, name)
  round = round + 1
  v:random(-10, 10, round)
  want:copy(v); want:mul(a); want:add(b)
  dst:fill(0xFF)
  g:launch(s)
  s:sync()
  t.ok(dst:view("float32"):allclose(want, 1e-6, 1e-5), name)
end

local g, tmp = capture(2, 1, true)
t.raises(function() return tmp.size + 0 end, "closed", "a buffer freed in the graph is closed for Lua")
check(g, 2, 1, "allocate, use, free in the graph: verified on the host")
check(g, 2, 1, "and again: the graph frees what it allocates")
g:close()

-- freed after the graph, on a stream: the buffer owns one launch's memory
-- (issue 27: a relaunch after buf:close(s) allocated memory nothing freed)
local function live() collectgarbage(); collectgarbage(); return fakecuda.live().graph_allocations end
local g2, tmp2 = capture(-1, 3, false)
t.is(live(), 0, "captured: nothing allocated yet")
check(g2, -1, 3, "allocation left to free after the graph")
t.is(live(), 1, "the launch allocated it")
t.raises(function() g2:launch(s) end, "still allocated by its last launch: free it first, buf:close%(stream%)",
         "relaunch with the allocation unfreed: refused, saying to free it")
tmp2:close(s)
s:sync()
t.is(live(), 0, "buf:close(s) after the launch frees it")
t.raises(function() g2:launch(s) end, "its buffer is closed: no buffer would own what a launch allocates. Free it in the graph",
         "a relaunch after the program freed it: refused, saying how to relaunch")
t.is(live(), 0, "and it allocated nothing")
g2:close()
t.is(live(), 0, "nothing left after the graph closed")
-- auto_free_on_launch: a launch frees the last one's memory itself
do
  s:begin_capture()
  local af = gm:allocate(N * 4, s)
  af:fill(cuda.u8(1), s)
  local ga = s:end_capture{auto_free_on_launch = true}
  ga:launch(s); ga:launch(s); s:sync()
  t.is(live(), 1, "auto_free_on_launch: relaunched before the free, one allocation live")
  af:close(s); s:sync()
  t.raises(function() ga:launch(s) end, "its buffer is closed", "and not launched after the program freed it")
  t.is(live(), 0, "nothing left")
  ga:close()
end
-- close() without a stream, or collection, after a launch frees the memory
local g4, tmp4 = capture(2, 2, false)
check(g4, 2, 2, "another graph leaving its allocation to the program")
tmp4:close()
t.is(live(), 0, "close() without a stream after a launch frees it (on the launch's stream)")
t.raises(function() g4:launch(s) end, "its buffer is closed", "and the graph is not launched again")
g4:close()
local g5 = capture(1, 2, false)
check(g5, 1, 2, "a graph whose buffer the program dropped")
t.is(live(), 1, "the graph keeps the buffer that owns its launch's memory")
g5:close(); g5 = nil
t.is(live(), 0, "collected with the graph: freed")
local again = select(2, capture(1, 0, false))
t.raises(function() again:close(s) end, "after a launch of the graph", "a free before the graph ran is refused with the reason")
again:close()
t.ok(true, "close() without a stream: closed for Lua, no crash")

-- a buffer the program dropped: the graph keeps it, and runs once
local g3 = capture(3, 0, false)
collectgarbage(); collectgarbage()
check(g3, 3, 0, "the buffer dropped: the graph's allocation still works")

-- an update cannot move a graph's allocation to another
local u1, u2 = capture(1, 1, true), capture(2, 2, true)
t.raises(function() u1:update(u2) end, "the graph holds a node the driver cannot update %(at node 1 of the new graph%)",
         "update between graphs with different allocations: refused at the allocation node")
check(u1, 1, 1, "and the graph is unchanged")
u1:close(); u2:close()

-- bad input
t.raises(function() gm:allocate(16, s) end, "the stream is not capturing", "allocate outside a capture")
t.raises(function() gm:allocate(0, s) end, "at least 1 byte", "allocate 0 bytes")
t.raises(function() gm:allocate(-1, s) end, "at least 1 byte", "allocate a negative size")
t.raises(function() gm:allocate(16) end, "cuda%.Stream expected", "allocate without a stream")
t.raises(function() gm:allocate("x", s) end, "number expected", "a string size")
t.raises(function() cuda.GraphMemoryResource("x") end, "cuda%.Device expected", "a string device")
gm:close()
t.raises(function() gm:allocate(16, s) end, "cuda%.GraphMemoryResource is closed", "a closed resource")
t.is(tostring(gm):match("closed") ~= nil, true, "closed tostring")
t.done()
