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

-- Launch g over fresh input (seeded by round) into a poisoned dst, which
-- must then hold input * a + b.
local function check_replay(g, a, b, round, name)
  v:random(-100, 100, seed + round)
  want:copy(v); want:mul(a); want:add(b)
  dst:fill(0xFF)
  g:launch(s)
  s:sync()
  t.ok(dst:view("float32"):allclose(want, 1e-6, 1e-5), name)
end

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
check_replay(built, 3, 1, 10, "built graph computed x * 3 + 1")
t.ok(ev_b - ev_a >= 0, "event record nodes recorded both events")

-- update a kernel node's arguments without instantiating again
built:update_kernel(k2, cfg, k, d, cuda.f32(2), cuda.f32(-5), cuda.u64(N))
want:copy(v); want:mul(3); want:add(1); want:mul(2); want:add(-5)
dst:fill(0xFF)
built:launch(s)
s:sync()
t.ok(dst:view("float32"):allclose(want, 1e-6, 1e-5), "updated kernel node computed (x * 3 + 1) * 2 - 5")

-- whole-graph update: a graph captured again with another kernel argument
local function capture_axpb(a, bias)
  s:begin_capture()
  d:copy_from(src, s)
  cuda.launch(s, cfg, k, d, cuda.f32(a), cuda.f32(bias), cuda.u64(N))
  d:copy_to(dst, s)
  return s:end_capture()
end
local ug = capture_axpb(2, 1)
check_replay(ug, 2, 1, 20, "captured graph before its update")
ug:update(capture_axpb(-3, 0.25))
collectgarbage()
check_replay(ug, -3, 0.25, 21, "g:update took the new kernel argument")
local topo = cuda.Graph(dev)
topo:empty()
t.raises(function() ug:update(topo) end, "refused to update the graph", "an update to another topology is refused with its reason")
check_replay(ug, -3, 0.25, 22, "a refused update leaves the graph as it was")
ug:close()

-- graph memory: a captured graph that allocates, computes through the
-- allocation and frees it, replayed; then one freed after its launch
local gm = cuda.GraphMemoryResource(dev)
local function capture_through(free_in_graph)
  s:begin_capture()
  local tmp = gm:allocate(N * 4, s)
  tmp:copy_from(src, s)
  cuda.launch(s, cfg, k, tmp, cuda.f32(0.5), cuda.f32(2), cuda.u64(N))
  tmp:copy_to(dst, s)
  if free_in_graph then tmp:close(s) end
  return s:end_capture(), tmp
end
local mg = capture_through(true)
check_replay(mg, 0.5, 2, 23, "graph memory allocated and freed in the graph")
check_replay(mg, 0.5, 2, 24, "and replayed")
t.ok(dev.graph_mem_reserved > 0, "the device reserved graph memory: " .. dev.graph_mem_reserved)
mg:close()
local mg2, tmp2 = capture_through(false)
check_replay(mg2, 0.5, 2, 25, "graph memory left to free after the graph")
t.raises(function() mg2:launch(s) end, "still allocated by its last launch: free it first", "a relaunch with the allocation unfreed is refused")
tmp2:close(s)
t.raises(function() mg2:launch(s) end, "its buffer is closed: no buffer would own",
  "freed after the launch, a relaunch is refused: no buffer would own (and free) its memory")
tmp2 = select(2, capture_through(false))   -- never launched
t.raises(function() tmp2:close(s) end, "cuMemFreeAsync", "a free before the graph ran is refused")
mg2:close()

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
v:random(-100, 100, seed + 27)   -- the rounds since changed v and want
want:copy(v); want:mul(3); want:add(1); want:mul(2); want:add(-5)
dst:fill(0xFF)
built:launch(s)   -- the executable outlives its builder
s:sync()
t.ok(dst:view("float32"):allclose(want, 1e-6, 1e-5), "the executable runs after its builder closed")
-- conditional nodes: the handle is a kernel argument; the kernel sets it
local cond = cuda.Program([[
typedef unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ void cudaGraphSetConditional(cudaGraphConditionalHandle handle, unsigned int value);
extern "C" __global__ void set_if(cudaGraphConditionalHandle h, const int *flag) {
  cudaGraphSetConditional(h, *flag != 0);
}
extern "C" __global__ void add_one(int *x) { *x += 1; }
extern "C" __global__ void count_down(cudaGraphConditionalHandle h, int *left, int *iterations) {
  *iterations += 1;
  *left -= 1;
  cudaGraphSetConditional(h, *left > 0);
}]], "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
local one = cuda.LaunchConfig{grid = 1, block = 1}
local flag, x = pinned:allocate(4), pinned:allocate(4)
local ib = cuda.Graph(dev)
local h = ib:create_conditional_handle()
t.like(tostring(h), "u64", "a conditional handle is a cuda.u64")
local set = ib:kernel(nil, one, cond:get_kernel("set_if"), h, flag)
local if_node, then_body = ib:if_cond(set, h)
then_body:kernel(nil, one, cond:get_kernel("add_one"), x)
t.like(tostring(then_body), "^cuda%.GraphBuilder", "the body is a builder")
t.raises(function() then_body:instantiate() end, "instantiated with the graph that owns it", "a body alone")
local ig = ib:instantiate()
x:view("int32")[1] = 0
local runs = 0
for round = 1, 8 do
  local f = math.random(0, 1)
  flag:view("int32")[1] = f
  runs = runs + f
  ig:launch(s)
  s:sync()
  t.is(x:view("int32")[1], runs, ("if node, round %d: condition %d"):format(round, f))
end

local wb = cuda.Graph(dev)
local wh = wb:create_conditional_handle(1)   -- reset to 1 at each launch: the body runs first
local _, loop_body = wb:while_loop(nil, wh)
local left, iterations = pinned:allocate(4), pinned:allocate(4)
loop_body:kernel(nil, one, cond:get_kernel("count_down"), wh, left, iterations)
local wg = wb:instantiate()
for _, n in ipairs{math.random(2, 50), 1, math.random(51, 200)} do
  left:view("int32")[1], iterations:view("int32")[1] = n, 0
  wg:launch(s)
  s:sync()
  t.is(iterations:view("int32")[1], n, "while loop ran its body " .. n .. " times")
  t.is(left:view("int32")[1], 0, "while loop counted down to 0 from " .. n)
end
t.raises(function() ib:if_cond(nil, 5) end, "conditional handle", "if_cond without a handle")
t.raises(function() ib:while_loop(nil, cuda.u32(1)) end, "conditional handle", "while_loop with a u32")
t.raises(function() ib:create_conditional_handle(-1) end, "0 to 4294967295", "negative default")
t.raises(function() then_body:empty(if_node) end, "belongs to another graph", "a parent's node in a body")
ib:close()
t.raises(function() then_body:empty() end, "owns this conditional body is closed", "a body after its graph closed")
ig:launch(s)                                      -- the executable outlives its builders
s:sync()
t.ok(x:view("int32")[1] >= runs, "the if graph runs after its builder closed")
-- Lifetimes: a graph keeps what it uses. A buffer or ObjectCode closed while
-- a live graph uses it is closed for Lua; its memory (library) goes with the
-- last graph that uses it.
do
  local mem = dev.memory_resource
  local live0 = mem.live_buffers
  local code = cuda.Program([[
extern "C" __global__ void scale_and_bias(float *x, float a, float b, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = x[i] * a + b;
}]], "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
  local kk = code:get_kernel("scale_and_bias")
  local dx = mem:allocate(N * 4, s)
  s:begin_capture()
  dx:copy_from(src, s)
  cuda.launch(s, cfg, kk, dx, cuda.f32(2), cuda.f32(1), cuda.u64(N))
  dx:copy_to(dst, s)
  local cg = s:end_capture()
  dx:close()
  code:close()
  t.raises(function() dx:copy_to(dst, s) end, "cuda%.Buffer is closed", "the closed buffer is closed for Lua")
  t.is(mem.live_buffers, live0 + 1, "its memory lives while a captured graph uses it")
  dx, code, kk = nil, nil, nil
  collectgarbage()
  collectgarbage()
  check_replay(cg, 2, 1, 20, "replay after closing the buffer and the object code")
  cg:close()
  t.is(mem.live_buffers, live0, "closing the graph frees the buffer")

  -- a stream that joins the capture through an event records into it too
  local s2 = dev:create_stream()
  local jx = mem:allocate(N * 4, s)
  s:sync()
  s:begin_capture()
  s2:wait(s:record())
  jx:copy_from(src, s2)
  s:wait(s2:record())
  jx:copy_to(dst, s)
  local jg = s:end_capture()
  jx:close()
  jx = nil
  collectgarbage()
  dst:fill(0)
  jg:launch(s)
  s:sync()
  t.ok(dst:view("float32"):allclose(v, 0, 0), "a joined stream's buffer outlives its close")
  t.is(mem.live_buffers, live0 + 1, "and is counted live")
  jg = nil
  collectgarbage()
  collectgarbage()
  t.is(mem.live_buffers, live0, "collecting the graph frees it")

  -- built graphs: the builder holds the counts until it is collected
  local bx = mem:allocate(N * 4, s)
  s:sync()
  local bb = cuda.Graph(dev)
  bb:memcpy(bb:memcpy(nil, bx, src), dst, bx)
  local bg = bb:instantiate()
  bx:close()
  bx = nil
  collectgarbage()
  t.is(mem.live_buffers, live0 + 1, "a built graph keeps a closed buffer's memory")
  dst:fill(0)
  bg:launch(s)
  s:sync()
  t.ok(dst:view("float32"):allclose(v, 0, 0), "the built graph replays after the buffer closed")
  bg:close()
  bb:close()
  bg, bb = nil, nil
  collectgarbage()
  collectgarbage()
  t.is(mem.live_buffers, live0, "collecting the builder frees it")
end
t.done()
