-- Graphs: capture a pipeline of copies, launches and event records on a
-- stream, replay it, verify the results.
local t = require "tap"
local cuda = t.need_gpu()
local seed = t.seed()
local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local N = 1 << 20
local pinned = cuda.PinnedMemoryResource()
local src, dst = pinned:allocate(N * 4), pinned:allocate(N * 4)
local d = dev.memory_resource:allocate(N * 4, s)
local k = cuda.Program([[
extern "C" __global__ void axpb(float *x, float a, float b, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = x[i] * a + b;
}]], "c++", {arch = "sm_" .. dev.arch}):compile("cubin"):get_kernel("axpb")
local cfg = cuda.LaunchConfig{grid = 256, block = 256}
local ev = dev:create_event{timing = true}

s:begin_capture()
d:copy_from(src, s)
cuda.launch(s, cfg, k, d, cuda.f32(2), cuda.f32(1), cuda.u64(N))
cuda.launch(s, cfg, k, d, cuda.f32(0.5), cuda.f32(-3), cuda.u64(N))
s:record(ev)
d:copy_to(dst, s)
local g = s:end_capture()
t.like(tostring(g), "^cuda%.Graph%(%d+ nodes", "graph tostring")
t.ok(g.node_count >= 4, "copies, launches and the record became nodes: " .. g.node_count)

local v, want = src:view("float32"), pinned:allocate(N * 4):view("float32")
for round = 1, 3 do
  v:random(-100, 100, seed + round)
  -- independent reference in float32: ((x * 2 + 1) * 0.5 - 3)
  want:copy(v); want:mul(2); want:add(1); want:mul(0.5); want:add(-3)
  dst:fill(0xFF)
  g:launch(s)
  s:sync()
  t.ok(dst:view("float32"):allclose(want, 1e-6, 1e-5), "replay " .. round .. " verified")
end
t.raises(function() g:launch(5) end, "cuda%.Stream expected", "launch on a number")
g:close()
g:close()
t.raises(function() g:launch(s) end, "cuda%.Graph is closed", "launch a closed graph")
t.raises(function() s:end_capture() end, "cuStreamEndCapture", "end_capture without begin_capture")
t.raises(function() s:begin_capture("sometimes") end, "invalid option 'sometimes'", "bad capture mode")

-- capture with instantiate options, upload ahead of the first launch
s:begin_capture()
d:copy_from(src, s)
local g2 = s:end_capture{use_node_priority = true}
g2:upload(s)
g2:launch(s)
s:sync()
t.ok(d.size == src.size, "captured graph with options uploads and launches")
t.raises(function() s:end_capture{auto_free = true} end, "unknown option 'auto_free'", "end_capture: unknown option")
g2:close()

-- explicit building: memset -> copy in -> kernel -> kernel -> record, copy out; poison first
local b = cuda.Graph(dev)
t.like(tostring(b), "^cuda%.GraphBuilder%(device 0%)", "builder tostring")
local poison = b:memset(nil, d, 0xFF)
local copy_in = b:memcpy(poison, d, src)
local k1 = b:kernel({copy_in}, cfg, k, d, cuda.f32(3), cuda.f32(1), cuda.u64(N))
local k2 = b:kernel(k1, cfg, k, d, cuda.f32(1), cuda.f32(0), cuda.u64(N))
local ev_a, ev_b = dev:create_event{timing = true}, dev:create_event{timing = true}
local rec = b:record(k2, ev_a)
local join = b:empty{rec}
local copy_out = b:memcpy(join, dst, d)
b:record(copy_out, ev_b)
local child = cuda.Graph(dev)
child:empty()
b:child(copy_out, child)
t.is(b.node_count, 9, "nine nodes built")
local built = b:instantiate{use_node_priority = false}
t.like(tostring(built), "^cuda%.Graph%(9 nodes", "instantiated graph tostring")
built:upload(s)
v:random(-100, 100, seed + 10)
want:copy(v); want:mul(3); want:add(1)
dst:fill(0xFF)
built:launch(s)
s:sync()
t.ok(dst:view("float32"):allclose(want, 1e-6, 1e-5), "built graph computed x * 3 + 1")
t.ok(ev_b - ev_a >= 0, "event record nodes recorded both events")

-- update a kernel node's arguments without instantiating again
built:update_kernel(k2, cfg, k, d, cuda.f32(2), cuda.f32(-5), cuda.u64(N))
want:copy(v); want:mul(3); want:add(1); want:mul(2); want:add(-5)
dst:fill(0xFF)
built:launch(s)
s:sync()
t.ok(dst:view("float32"):allclose(want, 1e-6, 1e-5), "updated kernel node computed (x * 3 + 1) * 2 - 5")

-- the waiting node: a graph that waits on an event recorded on a stream
local w = cuda.Graph()
local gate = dev:create_event()
s:record(gate)
w:memcpy(w:wait(nil, gate), dst, src)
local waiter = w:instantiate()
dst:fill(0)
waiter:launch(s)
s:sync()
t.ok(dst:view("float32"):allclose(v, 0, 0), "wait node, then a copy")

-- argument checks
t.raises(function() b:kernel(nil, cfg, k, d) end, "takes 4 arguments, got 1", "kernel node: argument count")
t.raises(function() b:memcpy(nil, d, pinned:allocate(8)) end, "sizes differ", "memcpy node: sizes")
t.raises(function() b:memset(nil, d, 256) end, "a byte is 0 to 255", "memset node: value")
t.raises(function() b:empty{5} end, "dependency 1 is not a cuda%.GraphNode", "bad dependency")
t.raises(function() b:empty(5) end, "cuda%.GraphNode or a list", "dependencies of the wrong type")
t.raises(function() b:empty(w:empty()) end, "the node belongs to another graph", "a node of another graph")
t.raises(function() b:memcpy(nil, d, cuda.HostMemoryResource():allocate(N * 4)) end,
         "pageable host memory", "pageable memory in a graph")
t.raises(function() b:instantiate{device_launc = true} end, "unknown option 'device_launc'", "instantiate: unknown option")
t.raises(function() b:child(nil, b) end, "its own child", "a graph as its own child")
t.raises(function() g:update_kernel(k2, cfg, k, d, cuda.f32(1), cuda.f32(0), cuda.u64(N)) end,
         "cuda%.Graph is closed", "update_kernel on a closed graph")
b:close()
b:close()
t.raises(function() b:empty() end, "cuda%.GraphBuilder is closed", "a closed builder")
t.raises(function() return tostring(built) end, "GraphBuilder of this graph is closed", "node count after the builder closed")
built:launch(s)   -- the executable outlives its builder
s:sync()
t.ok(dst:view("float32"):allclose(want, 1e-6, 1e-5), "the executable runs after its builder closed")
t.done()
