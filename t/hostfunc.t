-- Host functions into Lua: stream:launch_host_func(fn, ...) runs fn(...) in
-- stream order on the Lua thread, at the next wait or cuda.poll().
local t = require "tap"
local cuda = require "cuda"

t.is(cuda.poll(), 0, "cuda.poll() with nothing pending runs nothing")
if not cuda.is_available() then
  t.skip("no CUDA device", 1)
  t.done()
end

local dev = cuda.Device(0):set_current()   -- set_current returns the device
local s = dev:create_stream()
t.raises(function() s:launch_host_func("f") end, "function expected", "a string is not a function")
t.raises(function() s:launch_host_func() end, "function expected", "no function")

-- A kernel writes, the host function reads that and writes a new value,
-- the copies after it on the same stream see the new value.
local N = 4096
local k = cuda.Program([[
extern "C" __global__ void scale_and_bias(float *x, float a, float b, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = x[i] * a + b;
}]], "c++", {arch = "sm_" .. dev.arch}):compile("cubin"):get_kernel("scale_and_bias")
local cfg = cuda.LaunchConfig{grid = N // 256, block = 256}
local pinned = cuda.PinnedMemoryResource()
local a, b, out = pinned:allocate(N * 4), pinned:allocate(N * 4), pinned:allocate(N * 4)
local d = dev.memory_resource:allocate(N * 4, s)
a:fill(cuda.f32(20))
b:fill(0)
out:fill(0)
local seen, got_args
cuda.launch(s, cfg, k, a, cuda.f32(2), cuda.f32(2), cuda.u64(N))   -- 42
s:launch_host_func(function(x, y, ...)
  got_args = {x, y, select("#", ...)}
  local va, vb = a:view("float32"), b:view("float32")
  seen = va[N]
  for i = 1, N do vb[i] = va[i] * 2 + x end
end, 1, "two", nil, nil)
d:copy_from(b, s)
d:copy_to(out, s)
t.is(seen, nil, "the host function has not run before a wait")
s:sync()
t.is(seen, 42, "the host function saw the kernel's result")
t.is(out:view("float32")[1], 85.0, "the copy after it saw its effect (first)")
t.is(out:view("float32")[N], 85.0, "the copy after it saw its effect (last)")
t.is(got_args and got_args[1], 1, "argument 1")
t.is(got_args and got_args[2], "two", "argument 2")
t.is(got_args and got_args[3], 2, "trailing nils are passed")

-- An error is raised from the wait that ran it, and the stream goes on.
local after = false
s:launch_host_func(function() error("boom in a host function") end)
s:launch_host_func(function() after = true end)
t.raises(function() s:sync() end, "boom in a host function", "the error is raised from s:sync()")
s:sync()
t.ok(after, "the stream was released: the next host function ran")

-- Every wait runs them: event:sync, dev:sync, cuda.poll.
local ran = 0
s:launch_host_func(function() ran = ran + 1 end)
s:record():sync()
t.is(ran, 1, "event:sync runs a host function before the event")
s:launch_host_func(function() ran = ran + 1 end)
dev:sync()
t.is(ran, 2, "dev:sync runs it")
s:launch_host_func(function() ran = ran + 1 end)
local polled, deadline = 0, cuda.clock() + 10
repeat polled = polled + cuda.poll() until polled > 0 or cuda.clock() > deadline
t.is(polled, 1, "cuda.poll() ran one")
t.is(ran, 3, "cuda.poll() ran it")
local ev_a, ev_b = s:record{timing = true}, nil
s:launch_host_func(function() ran = ran + 1 end)
ev_b = s:record{timing = true}
t.ok(ev_b - ev_a >= 0, "ev2 - ev1 waits through a host function")
t.is(ran, 4, "and ran it")

-- Waiting inside a host function is an error, not a deadlock.
local inner
s:launch_host_func(function()
  inner = {pcall(s.sync, s)}
  inner[3] = {pcall(cuda.poll)}
end)
s:sync()
t.is(inner and inner[1], false, "s:sync() inside a host function fails")
t.like(inner and tostring(inner[2]), "inside a host function", "and says why")
t.like(inner and tostring(inner[3][2]), "cuda%.poll%(%) inside a host function", "cuda.poll() too")

-- Not in a capture: a replay would call into Lua from a driver thread.
s:begin_capture()
t.raises(function() s:launch_host_func(function() end) end, "cannot be captured", "refused while capturing")
pcall(s.end_capture, s)

-- Closing the state with a host function pending releases the stream.
local code, stdout = t.run(("timeout 60 %s -e %q"):format(t.cudalua(), [[
local cuda = require "cuda"
local s = cuda.Device(0):create_stream()
s:launch_host_func(function() print("ran") end)
io.write("exiting\n")
os.exit(0, true)]]))
t.is(code, 0, "exit with a host function pending: no hang")
t.is(stdout, "exiting\n", "the pending function did not run")
t.done()
