-- Host functions, waits and releases against a hostile script (issue 19):
-- a host function (or a finalizer it runs) closes what the wait that runs
-- it is on; os.exit inside a host function; releases that a finalizer
-- makes while a host function is pending; green contexts closed under
-- create_stream or while current. Each case runs in a child cudalua
-- under `timeout`, so that a crash or a hang fails one test.
--
-- Backends: the fake driver (make check), once with host functions run at
-- issue time on the Lua thread and once on a driver thread of the fake's
-- (CUDALUA_FAKE_HOST_THREAD=1: a driver thread blocks until Lua ran the
-- function, waits and exit wait for it, as on a GPU); and the real GPU
-- when this process sees one.
local t = require "tap"
local fake = require "fake"
local cuda = require "cuda"
local cudalua = t.cudalua()

local backends = {}
local so = os.getenv("CUDALUA_FAKE_LIBCUDA")
if so and io.open(so) then
  backends[#backends + 1] = {name = "fake", env = fake.env()}
  backends[#backends + 1] = {name = "fake+thread", env = fake.env("CUDALUA_FAKE_HOST_THREAD=1"),
                             thread = true}
end
if cuda.is_available() then backends[#backends + 1] = {name = "gpu", env = "", thread = true} end
-- CUDALUA_HOSTFN_BACKENDS="gpu" (a list) keeps those only: the GPU job's
-- compute-sanitizer run has no use for the fake's
local only = os.getenv("CUDALUA_HOSTFN_BACKENDS")
if only then
  for k = #backends, 1, -1 do
    if not (" " .. only:gsub(",", " ") .. " "):find(" " .. backends[k].name .. " ", 1, true) then
      table.remove(backends, k)
    end
  end
end
if #backends == 0 then t.skip_all("neither the fake driver nor a GPU") end

local dir = t.tmpdir()
local PRELUDE = [[
local cuda = require "cuda"
local fakecuda
if os.getenv("CUDALUA_LIBCUDA") then fakecuda = require "fakecuda" end
local dev = cuda.Device(0):set_current()
local function calls(name) return fakecuda and fakecuda.calls(name) or 0 end
local function live(kind)
  if not fakecuda then return 0 end
  collectgarbage(); collectgarbage()
  return fakecuda.live()[kind]
end
local function aggressive_gc() collectgarbage("incremental", 0, 1000, 0) end
]]

local cases = {}
-- name, body, what its output must match, the exit code (default 0) and
-- env: environment assignments for the child. Every case runs on every
-- backend; a hang that needs a driver thread that blocks shows only on
-- fake+thread and the GPU, and the others check the same outcome.
local function case(c) cases[#cases + 1] = c end

-- The H200's driver waits for pending host functions in a module's load
-- and unload and in cuGreenCtxCreate, which cannot run while Lua waits
-- there (the fuzzer found these hanging): load and create run them first,
-- unload is deferred until they ran.
case{name = "get_kernel, a green context and an unload with a host function pending", body = [[
local s = dev:create_stream()
local src = 'extern "C" __global__ void k(int *x) { x[0] = 1; }'
local obj = cuda.Program(src, "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
local ran = 0
s:launch_host_func(function() ran = ran + 1 end)
local k = obj:get_kernel("k")
s:launch_host_func(function() ran = ran + 1 end)
local ctx = dev:create_context{resources = dev.resources.sm:split{count = 8, groups = 1}}
s:launch_host_func(function() ran = ran + 1 end)
obj:close()
s:sync()
print("ran", ran, tostring(k), ctx ~= nil)
]], want = "ran\t3\tcuda%.Kernel %(closed%)\ttrue\n"}

-- Unpinning may wait for the device as a free may (the fake's does, with
-- its driver thread): a registration closed or collected while a host
-- function is pending is unregistered at the next wait, and what it
-- registered stays alive until then. Before, these hung (the real-GPU
-- fuzzer hung on the H200 once registrations were among its actions).
case{name = "a host registration closed with a host function pending", body = [[
local s = dev:create_stream()
local b = cuda.HostMemoryResource():allocate(4096)
local reg = cuda.register_host(b)
local ran = 0
s:launch_host_func(function() ran = ran + 1 end)
reg:close()
local again, err = pcall(cuda.register_host, b)
s:sync()
local reg2 = cuda.register_host(b)
print("ran", ran, tostring(reg), again, err:match("unregistered at the next wait") ~= nil, reg2.size)
]], want = "ran\t1\tcuda%.HostRegistration %(closed%)\tfalse\ttrue\t4096\n"}

-- A mapped registration whose device address the driver does not give is
-- undone as a close is: not while a host function is pending (the fake
-- fuzzer's seed 1844 hung there, call 2568). Only the fake can fail it.
case{name = "a failed mapped registration with a host function pending", body = [[
local s = dev:create_stream()
local b = cuda.HostMemoryResource():allocate(4096)
local ran = 0
s:launch_host_func(function() ran = ran + 1 end)
if fakecuda then fakecuda.fail("cuMemHostGetDevicePointer") end
local ok, reg = pcall(cuda.register_host, b, nil, {mapped = true})
if ok then reg:close() end
s:sync()
local again = cuda.register_host(b)
print("ran", ran, ok == not fakecuda, again.size, fakecuda == nil or fakecuda.host_registered(b.ptr) ~= nil)
again:close()
print("live", live("host registrations"))
]], want = "^ran\t1\ttrue\t4096\ttrue\nlive\t0\n$"}

case{name = "host registrations collected with a host function pending", body = [[
local s = dev:create_stream()
local ran = 0
s:launch_host_func(function() ran = ran + 1 end)
for i = 1, 20 do
  cuda.register_host(("x"):rep(4096) .. i)   -- strings only the registration keeps
  collectgarbage()
end
local before = fakecuda and fakecuda.live()["host registrations"] or 0
s:sync()
print("ran", ran, before > 0 or not fakecuda, live("host registrations"))
]], want = "ran\t1\ttrue\t0\n"}

-- A copy into pageable memory (or host to host) is finished by the driver
-- before it returns, after the stream's earlier work: a host function
-- pending there ran only at the next wait, so the copy waited for ever (the
-- real-GPU fuzzer hung on buf:copy_from). It now waits for its stream first.
case{name = "copies into pageable memory behind a pending host function", body = [[
local s = dev:create_stream()
local host, pinned = cuda.HostMemoryResource(), cuda.PinnedMemoryResource()
local d = dev.memory_resource:allocate(4096, s)
local src, back, back2 = pinned:allocate(4096), host:allocate(4096), host:allocate(4096)
src:view("uint32"):random(0, 1000, 5)
src:copy_to(d, s)
local order = {}
s:launch_host_func(function() order[#order + 1] = "host function" end)
back:copy_from(d, s)            -- device -> pageable
order[#order + 1] = "copy"
s:launch_host_func(function() order[#order + 1] = "host function" end)
src:copy_to(back2, s)           -- pinned -> pageable, host to host
s:sync()
print(table.concat(order, ","), (back:view("uint32"):allclose(src:view("uint32"), 0, 0)),
      (back2:view("uint32"):allclose(src:view("uint32"), 0, 0)))
]], want = "host function,copy,host function\ttrue\ttrue\n"}

-- The same through cuda.copy_batch where it issues a copy a pair: on a
-- green context's stream (whose batch the driver cannot take), and on
-- every stream with CUDALUA_COPY_BATCH=pairs. The fake fuzzer's seed 10
-- hung so.
local copy_batch_behind_host_function = [[
local ctx = dev:create_context{resources = dev.resources.sm:split{count = 8, groups = 1}}
local green, plain = ctx:create_stream(), dev:create_stream()
local host, pinned = cuda.HostMemoryResource(), cuda.PinnedMemoryResource()
local src = pinned:allocate(4096)
src:view("uint32"):random(0, 1000, 5)
local results = {}
for _, s in ipairs{green, plain} do
  local d, back = dev.memory_resource:allocate(4096, s), host:allocate(4096)
  src:copy_to(d, s)
  local order = {}
  s:launch_host_func(function() order[#order + 1] = "host function" end)
  cuda.copy_batch(s, {{back, d}})
  order[#order + 1] = "copy"
  s:sync()
  results[#results + 1] = table.concat(order, ",") .. " " .. tostring(back:view("uint32"):allclose(src:view("uint32"), 0, 0))
end
print(table.concat(results, "; "))
]]
-- (one cuMemcpyBatchAsync, on the plain stream without it, may finish after it returns)
case{name = "copy_batch into pageable memory behind a pending host function",
     body = copy_batch_behind_host_function, want = "^host function,copy true; [%a ,]+ true\n$"}
case{name = "copy_batch into pageable memory behind a pending host function, pairs",
     env = "CUDALUA_COPY_BATCH=pairs", body = copy_batch_behind_host_function,
     want = "^host function,copy true; host function,copy true\n$"}

-- A stream that joined a capture keeps pointing to it after it ended:
-- taking that for a capture, copies on it into pageable memory skipped
-- their wait, and the driver waited for ever behind the host function (the
-- fake fuzzer's seeds 2555 and 2862 hung so, once captured copies waited
-- for nothing).
case{name = "copies behind a pending host function on a stream whose joined capture ended",
     env = "CUDALUA_COPY_BATCH=pairs", body = [[
local a, b, c = dev:create_stream(), dev:create_stream(), dev:create_stream()
local pinned, host = cuda.PinnedMemoryResource(), cuda.HostMemoryResource()
local src, back, back2 = pinned:allocate(4096), host:allocate(4096), host:allocate(4096)
src:view("uint32"):random(0, 1000, 5)
a:begin_capture()
b:wait(a:record())              -- b and c join a's capture
c:wait(a:record())
a:wait(b:record())              -- and are joined back, so that it can end
a:wait(c:record())
local g = a:end_capture()
local order = {}
b:launch_host_func(function() order[#order + 1] = "host function" end)
src:copy_to(back, b)
order[#order + 1] = "copy"
c:launch_host_func(function() order[#order + 1] = "host function" end)
cuda.copy_batch(c, {{back2, src}})   -- a copy a pair (pairs)
order[#order + 1] = "batch"
b:sync()
c:sync()
print(table.concat(order, ","), back:view("uint32"):allclose(src:view("uint32"), 0, 0),
      back2:view("uint32"):allclose(src:view("uint32"), 0, 0), g ~= nil)
]], want = "^host function,copy,host function,batch\ttrue\ttrue\ttrue\n$"}

-- A foreign view's memory is only the kind it is said to be, and the
-- driver goes by the address: pinned memory handed over as managed (or
-- device) memory, copied into behind a pending host function, made a
-- host-to-host copy that cudalua did not wait for (the fake fuzzer's
-- seeds 1272 and 1890 hung so). Such a copy waits for its stream first.
case{name = "a copy into a foreign view said to be managed behind a pending host function", body = [[
local s = dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local src, under = pinned:allocate(4096), pinned:allocate(4096)
src:view("uint32"):random(0, 1000, 5)
local results = {}
for _, memory in ipairs{"managed", "device"} do
  local v = cuda.StridedMemoryView{ptr = under.ptr, dtype = "uint32", shape = {1024}, memory = memory,
                                   device = dev, owner = under}
  under:view("uint8"):fill(0)
  local order = {}
  s:launch_host_func(function() order[#order + 1] = "host function" end)
  src:view("uint32"):copy_to(v, s)
  order[#order + 1] = "copy"
  s:sync()
  results[#results + 1] = table.concat(order, ",") .. " " .. tostring(under:view("uint32"):allclose(src:view("uint32"), 0, 0))
end
print(table.concat(results, "; "))
]], want = "^host function,copy true; host function,copy true\n$"}

-- Captured, such copies only become nodes: nothing to wait for, and a
-- capturing stream cannot be waited for. With a host function pending on
-- another stream, buf:copy_to raised cuStreamQuery's capture error, and
-- the fake's captured copy a pair waited for that function for ever (the
-- fake fuzzer's seed 380, call 723).
case{name = "copies captured while a host function is pending elsewhere", body = [[
local a, b = dev:create_stream(), dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local src, dst1, dst2 = pinned:allocate(256), pinned:allocate(256), pinned:allocate(256)
src:view("uint32"):random(0, 1000, 5)
local ran = 0
a:launch_host_func(function() ran = ran + 1 end)   -- pending until a wait runs it
b:begin_capture()
pcall(cuda.copy_batch, b, {{dst1, src}})          -- a capture takes a copy a pair
pcall(src.copy_to, src, dst2, b)
local ok, g = pcall(b.end_capture, b)
if ok then g:launch(b) end
b:sync()
a:sync()
local same = ok and dst1:view("uint32"):allclose(src:view("uint32"), 0, 0)
  and dst2:view("uint32"):allclose(src:view("uint32"), 0, 0)
print(ran, same or not fakecuda)                  -- a GPU's driver may refuse such nodes
]], want = "^1\ttrue\n$"}

case{name = "s:sync whose host function closes s", body = [[
local s = dev:create_stream()
local after
s:launch_host_func(function() s:close(); after = calls("cuStreamSynchronize") + calls("cuStreamQuery") end)
s:sync()
print("waited", tostring(s), calls("cuStreamSynchronize") + calls("cuStreamQuery") - after)
]], want = "waited\tcuda%.Stream %(closed%)\t0\n"}

case{name = "ev:sync whose host function's finalizer closes ev", body = [[
local s = dev:create_stream()
local ev = dev:create_event()
local after
s:launch_host_func(function()
  setmetatable({}, {__gc = function() ev:close() end})
  collectgarbage()
  after = calls("cuEventSynchronize") + calls("cuEventQuery")
end)
s:record(ev)                    -- after the host function: on a GPU the wait must run it
ev:sync()
print("waited", tostring(ev), calls("cuEventSynchronize") + calls("cuEventQuery") - after)
]], want = "waited\tcuda%.Event %(closed%)\t0\n"}

case{name = "ev2 - ev1 whose host function closes ev1", body = [[
local s = dev:create_stream()
local a = s:record{timing = true}
s:launch_host_func(function() a:close() end)
local b = s:record{timing = true}
local ok, err = pcall(function() return b - a end)
print(ok, ok or err:match("cuda%.Event is closed") or err)
s:sync()
]], want = "^%a+\t"}   -- either outcome; no crash (the fake's times never wait)

case{name = "dev:sync whose host function closes its stream", body = [[
local s = dev:create_stream()
s:launch_host_func(function() s:close() end)
dev:sync()
print("synced", tostring(s))
]], want = "synced\tcuda%.Stream %(closed%)\n"}

case{name = "os.exit inside a host function", body = [[
local s = dev:create_stream()
s:launch_host_func(function() io.write("in\n"); io.flush(); os.exit(7) end)
s:launch_host_func(function() io.write("never\n") end)
s:sync()
print("not reached")
]], want = "^in\n$", code = 7}

case{name = "os.exit(code, true) inside a host function", body = [[
local s = dev:create_stream()
s:launch_host_func(function() io.write("in\n"); io.flush(); os.exit(8, true) end)
s:launch_host_func(function() io.write("never\n") end)
s:sync()
print("not reached")
]], want = "^in\n$", code = 8}

case{name = "os.exit with host functions pending", body = [[
local s = dev:create_stream()
for _ = 1, 3 do s:launch_host_func(function() io.write("never\n") end) end
io.write("out\n")
os.exit(9)
]], want = "^out\n$", code = 9}

case{name = "finalizers release memory while a host function is pending", body = [[
local s = dev:create_stream()
local ran = false
s:launch_host_func(function() ran = true end)
local kinds = {dev.memory_resource, cuda.PinnedMemoryResource(), cuda.ManagedMemoryResource()}
local before = calls("cuCtxSynchronize") + calls("cuMemFree") + calls("cuMemFreeHost")
for _, mr in ipairs(kinds) do mr:allocate(4096) end      -- no stream: garbage at once
collectgarbage(); collectgarbage()
local waited = calls("cuCtxSynchronize") + calls("cuMemFree") + calls("cuMemFreeHost") - before
print("collected", ran, waited)
s:sync()
print("synced", ran, live("allocations"))
]], want = "collected\tfalse\t0\nsynced\ttrue\t0\n"}

-- A host function that closes graphs: a captured one, one built by hand
-- and one whose allocation is left to the program. The real-GPU fuzzer hung
-- at such a call (H100, driver 580.159.04, seed 4 at call 144, twice); a
-- graph's destroy is deferred as a free is, and the fake's destroys wait
-- for pending host functions as its frees do.
case{name = "a host function closes graphs", body = [[
local s = dev:create_stream()
local d = dev.memory_resource:allocate(256, s)
s:begin_capture()
d:fill(cuda.u8(1), s)
local captured = s:end_capture()
local b = cuda.Graph(dev)
b:memset(nil, d, 2)
local built = b:instantiate()
s:begin_capture()
local left = cuda.GraphMemoryResource(dev):allocate(256, s)
left:fill(cuda.u8(3), s)
local allocating = s:end_capture()
local graphs = live("graphs")
s:launch_host_func(function() captured:close(); built:close(); allocating:close() end)
s:sync()
print(tostring(captured), tostring(built), tostring(allocating), live("graphs") < graphs or not fakecuda)
]], want = "cuda%.Graph %(closed%)	cuda%.Graph %(closed%)	cuda%.Graph %(closed%)	true\n"}

case{name = "an allocation's finalizer releases pool memory behind a host function", body = [[
aggressive_gc()
local s = dev:create_stream()
local ran = 0
for i = 1, 20 do
  s:launch_host_func(function() ran = ran + 1 end)
  local b = dev.memory_resource:allocate(256)
  b = nil
  local t = {}
  for k = 1, 50 do t[k] = {k} end      -- allocations: the finalizer runs in one
end
cuda.poll()
s:sync()
print("ran", ran, live("allocations"))
]], want = "ran\t20\t0\n"}

case{name = "the state closes with a release deferred", body = [[
local s = dev:create_stream()
s:launch_host_func(function() io.write("never\n") end)
dev.memory_resource:allocate(4096)
collectgarbage(); collectgarbage()
io.write("closing\n")
os.exit(0, true)
]], want = "^closing\n$"}

case{name = "launch_host_func while a finalizer closes the stream", body = [[
aggressive_gc()
local refused, ran = 0, 0
for _ = 1, 50 do
  local s = dev:create_stream()
  setmetatable({}, {__gc = function() s:close() end})
  local ok, err = pcall(s.launch_host_func, s, function() ran = ran + 1 end)
  if not ok then assert(err:match("closed"), err); refused = refused + 1 end
end
collectgarbage()
dev:sync()
print("done", refused + ran)
]], want = "done\t50\n"}

case{name = "ctx:create_stream while a finalizer closes the context", body = [[
aggressive_gc()
local groups = dev.resources.sm:split{count = 16, groups = 1}
local bad, refused, made = 0, 0, 0
for i = 1, 200 do
  local ctx = dev:create_context{resources = {groups[1]}}
  setmetatable({}, {__gc = function() ctx:close() end})
  for k = 1, i % 7 do local _ = {k} end   -- so the finalizer runs at each step in turn
  local ok, s = pcall(ctx.create_stream, ctx, {priority = 0})
  if ok then
    made = made + 1
    if tostring(ctx):match("closed") and not tostring(s):match("closed") then bad = bad + 1 end
  elseif tostring(s):match("cuda%.Context is closed") then
    refused = refused + 1
  else
    print("error: " .. tostring(s))
  end
  ctx:close()
end
collectgarbage("generational")
print("bad", bad, "all", refused + made, live("contexts"))
]], want = "^bad\t0\tall\t200\t0\n$"}

case{name = "a green context destroyed while current", body = [[
local groups = dev.resources.sm:split{count = 16, groups = 1}
local ctx = dev:create_context{resources = {groups[1]}}
local s = ctx:create_stream()
local pinned = cuda.PinnedMemoryResource()
local h = pinned:allocate(1024)
local d = dev.memory_resource:allocate(1024, s)
s:begin_capture()
d:fill(cuda.u32(7), s)
local g = s:end_capture()
g:launch(s)                 -- the green context is current now
s:sync()
s:close()
ctx:close()
g:close()                   -- its last graph: the green context goes
print("usable", fakecuda == nil or fakecuda.context_usable())
h:close()                   -- releases afterwards
d:close()
print("live", live("allocations"))
]], want = "usable\ttrue\nlive\t0\n"}

case{name = "dev.properties' __index called by hand", body = [[
local index = getmetatable(dev.properties).__index
print(pcall(index, 5, "x"))
print(pcall(index, {}, "multiprocessor_count"))
]], want = "false\t.-table expected.-\ntrue\t%d+\n"}

local function run_case(b, c)
  local path = dir .. "/" .. c.name:gsub("[^%w]+", "_") .. ".lua"
  t.write_file(path, PRELUDE .. c.body)
  local code, out, err = t.run(("%s %s timeout 60 %s '%s'"):format(b.env, c.env or "", cudalua, path))
  local label = b.name .. ": " .. c.name
  t.is(code, c.code or 0, label .. ": exit status" .. (code == 124 and " (hung)" or ""))
  t.like(out, c.want, label .. ": outcome")
  if code ~= (c.code or 0) or not out:match(c.want) then t.diag(err) end
end

t.plan(#backends * #cases * 2)
for _, b in ipairs(backends) do
  for _, c in ipairs(cases) do run_case(b, c) end
end
