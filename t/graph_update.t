-- Whole-graph update (g:update, cuGraphExecUpdate) under the fake driver:
-- a built or captured graph takes the parameters of another graph of the
-- same topology; the driver's refusals come back with their reason; what
-- the new graph uses stays alive while the executable lives.
local t = require "tap"
local cuda, fakecuda = require("fake").start()
local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local N = 1024
local pinned = cuda.PinnedMemoryResource()
local src, dst = pinned:allocate(N * 4), pinned:allocate(N * 4)
local d = dev.memory_resource:allocate(N * 4, s)
local k = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
local cfg = cuda.LaunchConfig{grid = 4, block = 256}
local v, want = src:view("float32"), pinned:allocate(N * 4):view("float32")

-- A builder: copy in, x * a + b, copy out.
local function build(a, b, data)
  local bld = cuda.Graph(dev)
  local c = bld:memcpy(nil, data or d, src)
  local kn = bld:kernel(c, cfg, k, data or d, cuda.f32(a), cuda.f32(b), cuda.u64(N))
  bld:memcpy(kn, dst, data or d)
  return bld, kn
end

local round = 0
local function check(g, a, b, name)
  round = round + 1
  v:random(-100, 100, round)
  want:copy(v); want:mul(a); want:add(b)
  dst:fill(0xFF)
  g:launch(s)
  s:sync()
  t.ok(dst:view("float32"):allclose(want, 1e-6, 1e-5), name)
end

-- a built graph updated from another builder
local b1, k1 = build(2, 1)
local g = b1:instantiate()
check(g, 2, 1, "built graph computes x * 2 + 1")
local b2 = build(3, -4)
g:update(b2)
check(g, 3, -4, "after update from a builder: x * 3 - 4")
g:update(b1:instantiate())
check(g, 2, 1, "after update from a built cuda.Graph: x * 2 + 1 again")
g:update_kernel(k1, cfg, k, d, cuda.f32(0.5), cuda.f32(1), cuda.u64(N))
check(g, 0.5, 1, "update_kernel still takes the original builder's node")

-- a captured graph updated from another capture
local function capture(a, b)
  s:begin_capture()
  d:copy_from(src, s)
  cuda.launch(s, cfg, k, d, cuda.f32(a), cuda.f32(b), cuda.u64(N))
  d:copy_to(dst, s)
  return s:end_capture()
end
local cg = capture(-1, 2)
check(cg, -1, 2, "captured graph computes 2 - x")
local cg2 = capture(4, 0.5)
cg:update(cg2)
cg2:close()
check(cg, 4, 0.5, "after update from a capture (closed since): x * 4 + 0.5")
cg:update(b2)
check(cg, 3, -4, "a captured graph updated from a builder")

-- the driver's refusals: the reason in words and the node
local two = build(1, 0)
two:kernel(nil, cfg, k, d, cuda.f32(1), cuda.f32(0), cuda.u64(N))
t.raises(function() g:update(two) end, "refused to update the graph: the topology changed %(at node 4 of the new graph%)",
         "an extra node: topology changed, at the extra node")
local other = cuda.Graph(dev)
local c = other:memcpy(nil, d, src)
local m = other:memset(c, d, 0)
other:memcpy(m, dst, d)
t.raises(function() g:update(other) end, "a node's type changed %(at node 2 of the new graph%)",
         "a memset for a kernel: node type changed, at that node")
t.raises(function() g:update(cuda.Graph(dev)) end, "the topology changed", "an empty graph")
check(g, 0.5, 1, "a refused update leaves the executable as it was")

-- what the new graph uses lives as long as the executable
local own = dev.memory_resource:allocate(N * 4, s)
local b3 = build(5, 0, own)
g:update(b3)
b3:close()
own:close()
b3, own = nil, nil
collectgarbage(); collectgarbage()
check(g, 5, 0, "the new graph's buffer outlives its close and its builder")
local function allocations() collectgarbage(); collectgarbage(); return (fakecuda.live()).allocations end
local before = allocations()
g:close()
s:sync()
t.is(allocations(), before - 1, "closing the executable frees the buffer the update kept")

-- bad input
t.raises(function() cg:update(5) end, "cuda%.GraphBuilder or cuda%.Graph expected", "update from a number")
t.raises(function() cg:update() end, "cuda%.GraphBuilder or cuda%.Graph expected", "update from nothing")
t.raises(function() cg:update(cg2) end, "cuda%.Graph is closed", "update from a closed graph")
local gone = build(1, 0)
gone:close()
t.raises(function() cg:update(gone) end, "cuda%.GraphBuilder is closed", "update from a closed builder")
local ib = cuda.Graph(dev)
local _, body = ib:if_cond(nil, ib:create_conditional_handle())
t.raises(function() cg:update(body) end, "conditional body", "update from a conditional body")
t.raises(function() g:update(b2) end, "cuda%.Graph is closed", "update of a closed graph")
local built_gone = build(1, 0)
local bg = built_gone:instantiate()
built_gone:close()
t.raises(function() cg:update(bg) end, "cuda%.GraphBuilder is closed", "update from a graph whose builder is closed")
cg:close()
t.done()
