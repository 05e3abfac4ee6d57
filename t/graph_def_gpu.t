-- Captured graphs as values on a GPU (issue 29), as CUDA's simpleCudaGraphs
-- sample: a fork/join capture of copies and kernels across three streams
-- ends as a cuda.GraphDefinition, is cloned, and the original and the
-- clone are instantiated and replayed over random data, verified on the
-- host. Skips without a device; t/graph_def.t runs it under the fake too.
local t = require "tap"
local cuda = t.need_gpu()
local seed = t.seed()
local dev = cuda.Device(0)
dev:set_current()
local s0, s1, s2 = dev:create_stream(), dev:create_stream(), dev:create_stream()
local N = 1 << 20
local pinned = cuda.PinnedMemoryResource()
local src1, src2 = pinned:allocate(N * 4), pinned:allocate(N * 4)
local dst1, dst2 = pinned:allocate(N * 4), pinned:allocate(N * 4)
local d1, d2 = dev.memory_resource:allocate(N * 4, s0), dev.memory_resource:allocate(N * 4, s0)
s0:sync()
-- the bundled kernel (compiled by NVRTC; the fake driver emulates it, so
-- this file also runs under the fake: see the end of t/graph_def.t)
local k = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
local cfg = cuda.LaunchConfig{grid = 256, block = 256}

-- s0 forks to s1 and s2; each copies in, computes, copies out; s0 joins both
s0:begin_capture()
local fork = s0:record()
s1:wait(fork)
s2:wait(fork)
d1:copy_from(src1, s1)
cuda.launch(s1, cfg, k, d1, cuda.f32(2), cuda.f32(1), cuda.u64(N))
d1:copy_to(dst1, s1)
d2:copy_from(src2, s2)
cuda.launch(s2, cfg, k, d2, cuda.f32(-0.5), cuda.f32(3), cuda.u64(N))
d2:copy_to(dst2, s2)
s0:wait(s1:record())
s0:wait(s2:record())
local def = s0:end_capture{instantiate = false}
t.is(def.node_count, 6, "six nodes: the records and waits between the streams are none")
t.like(tostring(def), "^cuda%.GraphDefinition%(6 nodes", "tostring")
local types = def.node_types
t.ok(types.memcpy == 4 and types.kernel == 2, ("node_types: four copies, two kernels (%s memcpy, %s kernel)"):format(types.memcpy, types.kernel))
local dot = def:debug_dot_str()
t.like(dot, "digraph", "DOT text")
t.like(dot, "scale_and_bias", "the DOT text names the kernel")

local copy = def:clone()
t.is(copy.node_count, 6, "the clone has the six nodes")
local g1, g2 = def:instantiate(), copy:instantiate{use_node_priority = true}

local v1, v2 = src1:view("float32"), src2:view("float32")
local want1, want2 = pinned:allocate(N * 4):view("float32"), pinned:allocate(N * 4):view("float32")
local function replay(g, round, name)
  v1:random(-100, 100, seed + round)
  v2:random(-100, 100, seed + round + 1000)
  want1:copy(v1); want1:mul(2); want1:add(1)
  want2:copy(v2); want2:mul(-0.5); want2:add(3)
  dst1:fill(0xFF); dst2:fill(0xFF)
  g:launch(s0)
  s0:sync()
  t.ok(dst1:view("float32"):allclose(want1, 1e-6, 1e-5), name .. ": first branch")
  t.ok(dst2:view("float32"):allclose(want2, 1e-6, 1e-5), name .. ": second branch")
end
replay(g1, 1, "the original's executable")
replay(g2, 2, "the clone's executable")
replay(g1, 3, "the original's executable again")

-- the definition as a child graph of a builder, after a memset that the child's copy-in overwrites
local b = cuda.Graph(dev)
b:child(b:memset(nil, d1, 0), def)
local bg = b:instantiate()
replay(bg, 4, "a builder holding the definition as a child")

-- closing the definitions leaves their executables working
def:close()
copy:close()
replay(g1, 5, "the original's executable after its definition closed")
replay(g2, 6, "the clone's executable after its definition closed")
g1:close(); g2:close(); bg:close(); b:close()
t.done()
