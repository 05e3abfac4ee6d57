-- Hostile graph programs (issue 19): finalizers that close what a graph
-- builder's call is using, the lifetimes of what graphs use (the buffers
-- of conditional bodies, events), and the driver's restrictions on graphs
-- with conditional nodes (cuda.h), which must be refused with clear errors.
-- Each crash test runs in a child cudalua, so that a crash fails its test
-- instead of ending the suite. Under the fake driver by default;
-- HOSTILE_GRAPH_REAL=1 runs it all on the GPU (the GPU job does, under
-- compute-sanitizer's memcheck).
local t = require "tap"
local real = os.getenv("HOSTILE_GRAPH_REAL") == "1"
local cuda, fakecuda
if real then
  cuda = t.need_gpu()
else
  cuda, fakecuda = require("fake").start()
end
local cudalua = t.cudalua()
local dir = t.tmpdir()

local PRELUDE = [[
local cuda = require "cuda"
local fakecuda = os.getenv("CUDALUA_LIBCUDA") and require "fakecuda"
local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local pinned, mem = cuda.PinnedMemoryResource(), dev.memory_resource
-- Every allocation completes a collection, so that a finalizer runs at the
-- first allocation after its object became garbage (as t/gcstress.lua; the
-- full collection makes the next allocation start a cycle).
local function stress()
  collectgarbage("incremental", 0, 1000, 40)
  collectgarbage("setpause", 0)
  collectgarbage()
end
local function calm() collectgarbage("incremental", 200, 100, 13) end
-- Close o at the n-th collection from now: under stress(), at the n-th
-- allocation, wherever that is in the call in flight.
local function close_at(o, n)
  setmetatable({}, {__gc = function()
    if n <= 1 then pcall(o.close, o) else close_at(o, n - 1) end
  end})
end
-- The driver's live objects of a kind under the fake driver; nil on a GPU.
local function live(kind)
  if not fakecuda then return nil end
  collectgarbage(); collectgarbage()
  return (fakecuda.live())[kind]
end
local function report(made, refused, bad)
  print(("made %d refused %d bad %d %s"):format(made, refused, #bad, bad[1] or ""))
end
]]

-- Run a script in a child. Freed blocks of 8 KiB or more go back to the
-- system at once, so a use after free of a buffer faults even without the
-- sanitizers. Returns its exit code (0 for a clean exit) and its output.
local function child(name, body)
  local path = dir .. "/" .. name:gsub("[^%w]+", "_") .. ".lua"
  t.write_file(path, PRELUDE .. body)
  local code, out, err = t.run("MALLOC_MMAP_THRESHOLD_=8192 " .. cudalua .. " '" .. path .. "'")
  return code, out .. err
end

-- The child must exit cleanly and print something matching pattern.
local function survives(name, body, pattern)
  local code, out = child(name, body)
  t.is(code, 0, name .. ": exits cleanly")
  t.like(out, pattern, name .. ": outcome")
end

-- A node made counts what it uses; a refused one (its check found the
-- buffer closed) counts nothing. A wrong count frees a buffer twice, or
-- lets the launch write freed memory.
survives("node methods while a finalizer closes their buffer", [[
local k = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
local cfg = cuda.LaunchConfig{grid = 1, block = 32}
local N = 1 << 16
local keep = pinned:allocate(N)
local b = cuda.Graph(dev)
local calls = {
  {"memset", function(x) return b:memset(nil, x, 7) end},
  {"memcpy to", function(x) return b:memcpy(nil, x, keep) end},
  {"memcpy from", function(x) return b:memcpy(nil, keep, x) end},
  {"kernel", function(x) return b:kernel(nil, cfg, k, x, cuda.f32(2), cuda.f32(1), cuda.u64(N // 4)) end},
}
local allocs, live0 = live("allocations"), pinned.live_buffers
local made, refused, bad = 0, 0, {}
for _, c in ipairs(calls) do
  for n = 1, 12 do
    local x = pinned:allocate(N)
    stress()
    close_at(x, n)
    local ok, err = pcall(c[2], x)
    calm()
    if ok then made = made + 1
    elseif tostring(err):match("cuda%.Buffer is closed") then refused = refused + 1
    else bad[#bad + 1] = c[1] .. ": " .. tostring(err) end
  end
end
collectgarbage(); collectgarbage()
-- each node made keeps its buffer's memory, closed or not; a refused one none
assert(pinned.live_buffers == live0 + made, ("%d buffers live for %d nodes"):format(pinned.live_buffers - live0, made))
local g = b:instantiate()
g:launch(s)
s:sync()
g:close()
b:close()
b, g = nil, nil
collectgarbage(); collectgarbage()
assert(pinned.live_buffers == live0, "the builder freed them")
assert(live("allocations") == allocs, "every buffer freed once")
report(made, refused, bad)
]], "made [1-9]%d* refused [1-9]%d* bad 0")

survives("event nodes while a finalizer closes their event", [[
local made, refused, bad = 0, 0, {}
local events = live("events")
local b = cuda.Graph(dev)
for _, method in ipairs{"record", "wait"} do
  for n = 1, 10 do
    local ev = dev:create_event()
    s:record(ev)
    stress()
    close_at(ev, n)
    local ok, err = pcall(b[method], b, nil, ev)
    calm()
    if ok then made = made + 1
    elseif tostring(err):match("cuda%.Event is closed") then refused = refused + 1
    else bad[#bad + 1] = method .. ": " .. tostring(err) end
  end
end
local g = b:instantiate()
g:launch(s)
s:sync()
g:close()
b:close()
b, g = nil, nil
assert(live("events") == events, "every event destroyed once")
report(made, refused, bad)
]], "made [1-9]%d* refused [1-9]%d* bad 0")

survives("instantiate while a finalizer closes the builder", [[
local x = pinned:allocate(1 << 16)
local made, refused, bad = 0, 0, {}
for n = 1, 10 do
  local b = cuda.Graph(dev)
  b:memset(nil, x, n)
  stress()
  close_at(b, n)
  local ok, g = pcall(b.instantiate, b)
  calm()
  if ok then
    made = made + 1
    g:launch(s)
    s:sync()
    assert(x:view("uint8")[1] == n, "the graph ran")
  elseif tostring(g):match("cuda%.GraphBuilder is closed") then refused = refused + 1
  else bad[#bad + 1] = tostring(g) end
end
report(made, refused, bad)
]], "made [1-9]%d* refused [1-9]%d* bad 0")

survives("conditional nodes while a finalizer closes the builder", [[
local made, refused, bad = 0, 0, {}
for _, method in ipairs{"if_cond", "while_loop", "create_conditional_handle"} do
  for n = 1, 10 do
    local b = cuda.Graph(dev)
    local h = b:create_conditional_handle(0)
    stress()
    close_at(b, n)
    local ok, err
    if method == "create_conditional_handle" then ok, err = pcall(b[method], b, 1)
    else ok, err = pcall(b[method], b, nil, h) end
    calm()
    if ok then made = made + 1
    elseif tostring(err):match("cuda%.GraphBuilder is closed") then refused = refused + 1
    else bad[#bad + 1] = method .. ": " .. tostring(err) end
  end
end
report(made, refused, bad)
]], "made [1-9]%d* refused [1-9]%d* bad 0")

-- The parent's executable runs the body: closing the body's builder (and
-- the body's buffers) must not free what the body writes.
survives("a conditional body closed while the parent's executable runs it", [[
local N = 1 << 16
local live0 = mem.live_buffers
local b = cuda.Graph(dev)
local _, body = b:if_cond(nil, b:create_conditional_handle(1))   -- taken at every launch
local _, inner = body:if_cond(nil, body:create_conditional_handle(1))
local x, y, z, out = mem:allocate(N, s), mem:allocate(N, s), mem:allocate(N, s), pinned:allocate(N)
body:memset(nil, x, 5)
inner:memset(nil, y, 9)
inner:memset(nil, z, 7)          -- open: what the run wrote is read back
local g = b:instantiate()
body:close()
inner:close()
x:close()
y:close()
body, inner, x = nil, nil, nil
collectgarbage(); collectgarbage()
assert(mem.live_buffers == live0 + 3, "the executable keeps the bodies' buffers: " .. mem.live_buffers - live0)
z:fill(cuda.u8(0), s)
g:launch(s)
g:launch(s)
z:copy_to(out, s)
s:sync()
assert(out:view("uint8"):sum() == 7 * N, "the nested body ran")
z:close()
-- and what it keeps is freed once the executable and the builder are gone
g:close()
b:close()
g, b = nil, nil
collectgarbage(); collectgarbage()
print("kept then freed: " .. (mem.live_buffers - live0))
]], "kept then freed: 0")

-- Graphs keep the events they record or wait on: ev:close() closes the
-- event for Lua, and the driver's event goes with the last graph using it.
survives("closing an event a built graph records or waits on, then launching", [[
local events = live("events")
for _, method in ipairs{"record", "wait"} do
  local ev = dev:create_event()
  s:record(ev)
  local b = cuda.Graph(dev)
  b[method](b, nil, ev)
  local g = b:instantiate()
  ev:close()
  assert(not pcall(s.record, s, ev), "closed for Lua")
  ev = nil
  collectgarbage(); collectgarbage()
  assert(live("events") == (events and events + 1), method .. ": the driver's event lives while a graph uses it")
  g:launch(s)
  s:sync()
  b:close()        -- the executable still uses it
  assert(live("events") == (events and events + 1), method .. ": kept by the executable")
  g:launch(s)
  s:sync()
  g:close()
  assert(live("events") == events, method .. ": destroyed with the last graph")
end
-- the builder alone keeps it too, until it is closed
local ev = dev:create_event()
local b = cuda.Graph(dev)
b:record(nil, ev)
ev:close()
local g = b:instantiate()
g:launch(s)
s:sync()
g:close()
assert(live("events") == (events and events + 1), "kept by the builder")
b:close()
assert(live("events") == events, "destroyed with the builder")
-- collected in any order
for _ = 1, 5 do
  local e = dev:create_event()
  local bb = cuda.Graph(dev)
  bb:record(bb:wait(nil, e), e)
  local gg = bb:instantiate()
  e:close()
  gg:launch(s)
end
s:sync()
collectgarbage(); collectgarbage()
assert(live("events") == events, "collected graphs destroy their events")
print("events kept")
]], "events kept")

survives("closing an event recorded in a capture, then launching the graph", [[
local events = live("events")
local x = pinned:allocate(64)
local ev = dev:create_event()
s:begin_capture()
x:fill(cuda.u8(3), s)
s:record(ev)
local g = s:end_capture()
ev:close()
ev = nil
collectgarbage(); collectgarbage()
assert(live("events") == (events and events + 1), "the graph keeps it")
g:launch(s)
s:sync()
g:close()
assert(live("events") == events, "destroyed with the graph")
print("captured event kept")
]], "captured event kept")

-- s:record() makes its event first, then checks the stream: never records
-- on a stream a finalizer closed meanwhile (its handle gone, the driver
-- would take the legacy default stream).
survives("s:record() while a finalizer closes the stream", [[
local made, refused, bad = 0, 0, {}
local st
local function open() return st.handle ~= nil end   -- allocates nothing while st is open
for n = 1, 6 do
  st = dev:create_stream()
  stress()
  close_at(st, n)
  local ok, err = pcall(st.record, st)
  local still = pcall(open)
  calm()
  if ok and still then made = made + 1
  elseif ok then bad[#bad + 1] = "recorded on a stream closed meanwhile"
  elseif tostring(err):match("cuda%.Stream is closed") then refused = refused + 1
  else bad[#bad + 1] = tostring(err) end
end
report(made, refused, bad)
]], "made [1-9]%d* refused [1-9]%d* bad 0")

-- cuda.h: a graph with conditional nodes cannot be a child graph, and only
-- one executable of it may exist at a time; a conditional body holds only
-- kernel, empty, memcpy, memset, child graph and conditional nodes; a
-- conditional handle is one that cuGraphConditionalHandleCreate made for
-- the node's own graph (the H200's driver refuses one of a graph that
-- contains the node's graph).
local dev = cuda.Device(0)
dev:set_current()
local ev = dev:create_event()
local b = cuda.Graph(dev)
local h = b:create_conditional_handle(1)
local _, body = b:if_cond(nil, h)
local g1 = b:instantiate()
t.raises(function() b:instantiate() end, "conditional nodes.*one executable",
         "a second executable of a graph with conditional nodes")
g1:close()
local g2 = b:instantiate()
t.ok(g2, "instantiated again once the first executable is closed")
t.raises(function() cuda.Graph(dev):child(nil, b) end, "conditional nodes cannot be a child",
         "a graph with conditional nodes as a child")
local not_made = "not one that create_conditional_handle made for this graph"
t.raises(function() body:if_cond(nil, h) end, not_made, "a body's conditional node with a handle of the graph that contains it")
local _, inner = body:if_cond(nil, body:create_conditional_handle(1))
t.raises(function() cuda.Graph(dev):child(nil, body) end, "conditional nodes cannot be a child",
         "a body with a conditional node as a child")
t.raises(function() body:record(nil, ev) end, "conditional body.*event",
         "an event record node in a body")
t.raises(function() inner:wait(nil, ev) end, "conditional body.*event",
         "an event wait node in a nested body")
local with_event = cuda.Graph(dev)
with_event:record(nil, ev)
local holder = cuda.Graph(dev)
holder:child(nil, with_event)
t.raises(function() body:child(nil, with_event) end, "conditional body.*event",
         "a child graph with an event node in a body")
t.raises(function() inner:child(nil, holder) end, "conditional body.*event",
         "a child graph whose child has an event node in a body")
local plain = cuda.Graph(dev)
plain:empty()
t.ok(body:child(nil, plain), "a child graph without events in a body")
t.raises(function() b:if_cond(nil, cuda.u64(h.value)) end, not_made, "a cuda.u64 that is no handle")
t.raises(function() cuda.Graph(dev):if_cond(nil, h) end, not_made, "a handle of another graph")
local hb = body:create_conditional_handle()
t.raises(function() b:while_loop(nil, hb) end, not_made,
         "a body's handle in the graph that contains the body")
t.raises(function() inner:if_cond(nil, hb) end, not_made, "a body's handle in a body of that body")
g2:close()
b:close()
t.done()
