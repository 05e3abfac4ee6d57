-- Injected failures at every driver call cudalua makes, under the fake
-- driver (t/fake.lua): for each entry point a workload calls, fail each of
-- its first calls in turn; the workload must raise a cuda.Error naming that
-- function, or succeed where cudalua ignores the result by design (releases
-- in finalizers), never crash, and leave nothing live after a collection
-- (a failed release leaks what it could not release, as a GPU would).
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()

local dev = cuda.Device(0)
dev:set_current()
local k = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
local N = 1024

-- One of everything: resources, copies, fills, launches, events, a graph.
local function workload()
  local d = cuda.Device(0)
  d:set_current()
  d:sync()
  local _ = d.name, d.memory_resource.used_high, d:memory_info()
  local s <close> = d:create_stream()
  local ev1, ev2 = d:create_event{timing = true}, d:create_event{timing = true}
  s:record(ev1)
  local other <close> = d:create_stream()
  other:wait(ev1)
  other:wait(s)
  for _, mr in ipairs{d.memory_resource, cuda.PinnedMemoryResource(), cuda.ManagedMemoryResource()} do
    local b <close> = mr:allocate(N * 4, s)
    b:fill(cuda.u8(1), s); b:fill(cuda.u16(2), s); b:fill(cuda.u32(3), s)
  end
  local pool <close> = cuda.DeviceMemoryResource(d, {release_threshold = 1})
  local pinned_pool <close> = cuda.PinnedMemoryResource{pool = true}
  local m <close> = cuda.ManagedMemoryResource():allocate(N * 4)
  m:prefetch(d, s)
  m:advise("read_mostly", d)
  local h <close> = pinned_pool:allocate(N * 4, s)
  local x <close> = pool:allocate(N * 4, s)
  x:copy_from(h, s)
  cuda.copy_batch(s, {{x, h}, {m:view("float32"), h:view("float32", {N // 2, 2})}},
                  {src_access_order = "any"})
  pool:trim(0)
  local _ = pool.reserved_current
  local kk = require("cuda.kernels").load(d, "scale_and_bias.cu", "scale_and_bias")
  local _ = kk.attributes, kk:occupancy(128)
  local cfg = cuda.LaunchConfig{grid = 4, block = 256}
  cuda.launch(s, cfg, kk, x, cuda.f32(2), cuda.f32(1), cuda.u64(N))
  cuda.launch(s, cuda.LaunchConfig{grid = 2, block = 256, cluster = 2, shmem = 64 * 1024}, kk, x,
              cuda.f32(2), cuda.f32(1), cuda.u64(N))
  s:begin_capture()
  cuda.launch(s, cfg, k, x, cuda.f32(2), cuda.f32(1), cuda.u64(N))
  x:copy_to(h, s)
  local g <close> = s:end_capture()
  local _ = tostring(g)
  g:launch(s)
  g:upload(s)
  -- a graph definition: cloned, instantiated, printed, a child graph
  s:begin_capture()
  x:copy_to(h, s)
  local def <close> = s:end_capture{instantiate = false}
  local copy <close> = def:clone()
  local dg <close> = copy:instantiate()
  local _ = def:debug_dot_str(), def.node_count, def.node_types
  local holder <close> = cuda.Graph(d)
  holder:child(nil, def)
  -- explicit graphs: every node kind, an update
  local b <close> = cuda.Graph(d)
  local child <close> = cuda.Graph(d)
  child:empty()
  local kn = b:kernel(b:memcpy(b:memset(nil, x, 0), x, h), cfg, kk, x, cuda.f32(2), cuda.f32(1), cuda.u64(N))
  b:child(b:empty{b:wait(b:record(kn, ev1), ev1)}, child)
  local _, body = b:if_cond(nil, b:create_conditional_handle(1))
  body:empty()
  local _ = b.node_count
  local built <close> = b:instantiate()
  built:update_kernel(kn, cfg, kk, x, cuda.f32(1), cuda.f32(0), cuda.u64(N))
  built:launch(s)
  -- green contexts
  local groups = d.resources.sm:split{count = 16, groups = 1}
  local ctx <close> = d:create_context{resources = groups}
  local _ = ctx.resources, ctx.handle
  local gs <close> = ctx:create_stream()
  x:fill(cuda.u8(0), gs)
  s:record(ev2)
  s:sync()
  local _ = ev2 - ev1, ev2.is_done, s.is_done
  ev2:sync()
  ev1:close(); ev2:close()
end

local releases = {cuMemFree = true, cuMemFreeAsync = true, cuMemFreeHost = true,
                  cuStreamDestroy = true, cuEventDestroy = true, cuLibraryUnload = true,
                  cuGraphDestroy = true, cuGraphExecDestroy = true, cuMemPoolDestroy = true,
                  cuDevicePrimaryCtxRelease = true, cuGreenCtxDestroy = true}

-- calls of each entry point in one clean run
local counts, names = {}, fakecuda.names()
local function snapshot() local c = {} for _, n in ipairs(names) do c[n] = fakecuda.calls(n) end return c end
workload()          -- first: the once-per-process calls (default pool setup)
local before = snapshot()
workload()
local after = snapshot()
for _, n in ipairs(names) do counts[n] = after[n] - before[n] end
local base = fake.live(fakecuda)

-- Failures that show bugs in cudalua, reported, not yet fixed: the test
-- says what it saw for them instead of failing.
local known = {}
-- by design: no parameter layout is not an error until a launch needs it
local by_design = {cuFuncGetParamInfo = "the driver did not report the parameters"}

local MAX_NTH = 4
for _, name in ipairs(names) do
  for nth = 1, math.min(counts[name], MAX_NTH) do
    if known[name .. " " .. nth] then
      pcall(workload)
      fake.live(fakecuda)
      base = fake.live(fakecuda)
      t.skip("known cudalua bug: " .. known[name .. " " .. nth], 2)
      goto next
    end
    fakecuda.fail(name, nth)
    local ok, err = pcall(workload)
    fakecuda.reset()
    local what = ("%s, call %d"):format(name, nth)
    if ok then
      t.ok(releases[name] or name == "cuCtxSetCurrent", what .. ": only a release may fail silently")
    elseif by_design[name] then
      t.like(tostring(err), by_design[name], what .. ": " .. by_design[name])
    else
      t.ok(getmetatable(err) == cuda.Error and err.api == name and err.name == "CUDA_ERROR_OUT_OF_MEMORY",
           what .. ": a cuda.Error naming it" .. (getmetatable(err) == cuda.Error and "" or (": " .. tostring(err))))
    end
    local live = fake.live(fakecuda)
    if releases[name] then
      t.ok(live - base <= 1, what .. ": leaks at most what it could not release")
      base = live
    else
      t.is(live, base, what .. ": nothing left live")
    end
    ::next::
  end
end
for _, name in ipairs(names) do
  if counts[name] == 0 then t.diag("not called by the workload: " .. name) end
end
t.done()
