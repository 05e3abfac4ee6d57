-- Green contexts: SM resources, splitting them, contexts over a group and
-- their streams; kernels on a context run on its SMs only, and two
-- contexts run side by side.
local t = require "tap"
local cuda = require "cuda"

-- without a device: the types exist and check what they are given
local registry = debug.getregistry()
local function methods_of(tname)
  local _, methods = debug.getupvalue(registry[tname].__index, 2)   -- CL_UV_METHODS
  return methods
end
t.is(type(methods_of("cuda.Device").create_context), "function", "Device has create_context")
t.is(type(methods_of("cuda.SMResource").split), "function", "SMResource has split")
t.raises(function() methods_of("cuda.Device").create_context(5) end, "cuda%.Device expected, got number",
         "create_context on a number")
t.raises(function() methods_of("cuda.SMResource").split({}) end, "cuda%.SMResource expected",
         "split on a table")
t.raises(function() methods_of("cuda.Context").create_stream("x") end, "cuda%.Context expected, got string",
         "create_stream on a string")
t.raises(function() registry["cuda.Context"].__close(false) end, "cuda%.Context expected", "close on a boolean")

if not cuda.is_available() then
  t.skip("no CUDA device", 32)
  t.done()
end

local dev = cuda.Device(0)
dev:set_current()
local sm = dev.resources.sm
t.like(tostring(sm), "^cuda%.SMResource%(%d+ SMs, device 0%)", "SM resource tostring")
t.is(sm.sm_count, dev.properties.multiprocessor_count, "the device's SM resource has every SM")
t.ok(sm.min_partition_size >= 1 and sm.coscheduled_alignment >= 1, "granularity fields")
t.ok(rawequal(sm.device, dev), "resource.device")

-- argument checks
t.raises(function() sm:split{} end, "field 'count' %(SMs per group%) is required", "split without count")
t.raises(function() sm:split{count = 0} end, "field 'count' must be 1 to", "split count 0")
t.raises(function() sm:split{count = sm.sm_count + 1} end, "field 'count' must be 1 to", "split count too large")
t.raises(function() sm:split{count = 16, groupz = 2} end, "unknown option 'groupz'", "split: unknown option")
t.raises(function() sm:split{count = 16, groups = 1000} end, "field 'groups' must be 1 to", "too many groups")
t.raises(function() dev:create_context{resources = {5}} end, "resource 1 is not a cuda%.SMResource", "bad resource")
t.raises(function() dev:create_context{resources = {}} end, "1 to 32 resources", "no resources")
t.raises(function() dev:create_context{sm = sm} end, "unknown option 'sm'", "create_context: unknown option")

local groups, rest = sm:split{count = 16, groups = 2}
t.is(#groups, 2, "two groups")
t.ok(groups[1].sm_count >= 16 and groups[1].sm_count + groups[2].sm_count + rest.sm_count == sm.sm_count,
     ("groups of %d and %d SMs, %d left"):format(groups[1].sm_count, groups[2].sm_count, rest.sm_count))
local ctx = dev:create_context{resources = {groups[1]}}
t.like(tostring(ctx), "^cuda%.Context%(.*green, device 0%)", "context tostring")
t.is(ctx.resources.sm.sm_count, groups[1].sm_count, "the context has the group's SMs")
t.raises(function() ctx:create_stream{non_blocking = false} end, "non%-blocking", "blocking stream in a green context")

local k = cuda.Program([[
extern "C" __global__ void smid(unsigned *out) {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  if (threadIdx.x == 0) out[blockIdx.x] = id;
}
extern "C" __global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
}]], "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
local smid, spin = k:get_kernel("smid"), k:get_kernel("spin")
local blocks = 4096
local pinned = cuda.PinnedMemoryResource()
local ids = pinned:allocate(blocks * 4)

local function distinct_sms(s)
  ids:fill(0xFF)
  cuda.launch(s, cuda.LaunchConfig{grid = blocks, block = 128}, smid, ids)
  s:sync()
  local seen, n, v = {}, 0, ids:view("uint32")
  for i = 1, blocks do
    local id = v[i]
    if id == 0xFFFFFFFF then return -1 end   -- a block never ran
    if not seen[id] then seen[id], n = true, n + 1 end
  end
  return n
end

local s = ctx:create_stream()
t.ok(rawequal(s.device, dev), "a context's stream is a cuda.Stream of its device")
local on_ctx, on_dev = distinct_sms(s), distinct_sms(dev:create_stream())
t.ok(on_ctx >= 1 and on_ctx <= groups[1].sm_count,
     ("a kernel on the %d-SM context ran on %d SMs"):format(groups[1].sm_count, on_ctx))
t.ok(on_dev > groups[1].sm_count, "the same kernel on the whole device ran on " .. on_dev .. " SMs")

-- two contexts side by side: each spin kernel fills its context's SMs for ~50 ms
local cycles = dev.properties.clock_rate * 50          -- kHz * ms
local ctx2 = dev:create_context{resources = {groups[2]}}
local s2 = ctx2:create_stream()
local cfg = cuda.LaunchConfig{grid = groups[1].sm_count, block = 32}
local function timed(...)
  local streams = {...}
  local t0 = cuda.clock()
  for _, st in ipairs(streams) do cuda.launch(st, cfg, spin, cuda.i64(cycles)) end
  for _, st in ipairs(streams) do st:sync() end
  return cuda.clock() - t0
end
timed(s)                                               -- warm up
local one, two = timed(s), timed(s, s2)
t.ok(two < 1.5 * one, ("two contexts ran together: %.1f ms for both, %.1f ms for one"):format(two * 1e3, one * 1e3))

-- graphs and green contexts: a graph captured on a context's stream runs on
-- that context's streams only (the driver crashed on a mix), and keeps the
-- context until it is closed
local out = pinned:allocate(4 * 256)
local dout = dev.memory_resource:allocate(4 * 256, s)
out:fill(cuda.u32(0))
s:sync()
s:begin_capture()
dout:fill(cuda.u32(0x2A2A2A2A), s)
out:copy_from(dout, s)
local green_graph = s:end_capture()
local plain = dev:create_stream()
plain:begin_capture()
dout:fill(cuda.u32(7), plain)
local plain_graph = plain:end_capture()
green_graph:launch(s)
s:sync()
t.is(out:view("uint32")[256], 0x2A2A2A2A, "a graph captured on a green stream runs there")
t.raises(function() green_graph:launch(plain) end, "captured in a green context",
         "a green context's graph refuses another context's stream")
t.raises(function() plain_graph:launch(s) end, "runs only graphs captured on it",
         "a green stream refuses the device's graphs")
t.raises(function() green_graph:upload(s2) end, "captured in a green context",
         "another green context's stream is refused too")
local held_ctx = dev:create_context{resources = {groups[2]}}
local hs = held_ctx:create_stream()
hs:begin_capture()
dout:fill(cuda.u32(9), hs)
local held = hs:end_capture()
held_ctx:close()
t.raises(function() held:launch(s) end, "captured in a green context",
         "the context closed: its graph has no stream to run on")
held:close()
collectgarbage()
plain_graph:close(); green_graph:close()

-- cuda.copy_batch on a green context's stream: the driver's batch checks its
-- pointers in the current context, so the stream's own is made current (the
-- real-GPU fuzzer died inside cuMemcpyBatchAsync, issue 27); then a batch on
-- one of the device's streams, with the primary context current again
t.seed()
local n = 4 * math.random(16, 64)
local src, dbuf, back = pinned:allocate(n), dev.memory_resource:allocate(n, s), pinned:allocate(n)
src:view("uint8"):random(0, 256, math.random(1 << 40))
back:fill(0)
local half = n // 2
cuda.copy_batch(s, {{dbuf:slice(0, half), src:slice(0, half)}, {dbuf:slice(half, n - half), src:slice(half, n - half)}},
                {{src_access_order = "any", src_location_hint = "host"}, {prefer_overlap = true}})
s:sync()
cuda.copy_batch(plain, {{back, dbuf}})
plain:sync()
local function bytes(b) return string.char(table.unpack(b:view("uint8"):to_table())) end
t.is(bytes(back), bytes(src), ("a batch on a green context's stream, then one on the device's: %d bytes"):format(n))
cuda.copy_batch(s2, {{dbuf, back}}, {src_access_order = "during_api_call"})
s2:sync()
t.ok(true, "a batch on another green context's stream")

-- closing: the context closes its streams first
ctx:close()
ctx:close()
t.raises(function() s:sync() end, "cuda%.Stream is closed", "close() closed the context's stream")
t.raises(function() return ctx.resources end, "cuda%.Context is closed", "a closed context")
t.like(tostring(ctx), "cuda%.Context %(closed%)", "closed context tostring")
do
  local scoped <close> = dev:create_context{resources = {groups[2]}}
  scoped:create_stream()
end
t.ok(s2.handle ~= 0, "another context's stream is untouched")
ctx2:close()
t.done()
