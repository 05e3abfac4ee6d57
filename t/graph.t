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
t.done()
