-- Captured graphs as values (issue 29): s:end_capture{instantiate = false}
-- gives a cuda.GraphDefinition that is cloned, instantiated any number of
-- times, added to a builder as a child graph, printed as DOT and counted;
-- what its capture kept stays alive with it, its clones and its
-- executables, closed in any order. As CUDA's simpleCudaGraphs sample: a
-- fork/join capture across three streams. Under the fake driver, which
-- makes no node of a record or a wait between the captured streams, as a
-- GPU does not (t/graph_def_gpu.t runs the same on a GPU).
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()
local seed = t.seed()
math.randomseed(seed)
local dir = t.tmpdir()

local dev = cuda.Device(0)
dev:set_current()
local s0, s1, s2 = dev:create_stream(), dev:create_stream(), dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local N = 4096
local k = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
local cfg = cuda.LaunchConfig{grid = 4, block = 256}

local function live(kind)
  collectgarbage(); collectgarbage()
  return fakecuda.live()[kind]
end
local graphs0 = live("graphs")

-- s0 forks to s1 and s2 through an event, each runs work, s0 joins both
local function fork_join(work1, work2, options)
  s0:begin_capture()
  local fork = s0:record()
  s1:wait(fork)
  s2:wait(fork)
  work1(s1)
  work2(s2)
  s0:wait(s1:record())
  s0:wait(s2:record())
  return s0:end_capture(options or {instantiate = false})
end

-- a node-type tally as "type=n,..." in name order, to compare
local function types(def)
  local list = {}
  for name, n in pairs(def.node_types) do list[#list + 1] = name .. "=" .. n end
  table.sort(list)
  return table.concat(list, ",")
end

local function all_bytes(buf, want)
  local v = buf:view("uint8")
  for i = 1, #v do if v[i] ~= want then return false end end
  return true
end

-- two memsets across three streams: two nodes, not the records and waits
local a, b = pinned:allocate(N), pinned:allocate(N)
local va, vb = math.random(0, 255), math.random(0, 255)
local def = fork_join(function(st) a:fill(va, st) end, function(st) b:fill(vb, st) end)
t.is(def.node_count, 2, "two memsets across three streams are two nodes")
t.like(tostring(def), "^cuda%.GraphDefinition%(2 nodes, device 0%)$", "tostring")
t.is(def.device, dev, "its device")
t.is(types(def), "memset=2", "node_types: two memsets")
t.ok(all_bytes(a, 0) or not all_bytes(a, va), "capturing ran nothing")

local copy = def:clone()
t.is(copy.node_count, 2, "the clone has the same nodes")
local g1, g2 = def:instantiate(), copy:instantiate{use_node_priority = true}
local g3 = def:instantiate()
t.like(tostring(g1), "^cuda%.Graph%(2 nodes", "an executable of the definition")
for round, g in ipairs{g1, g2, g3} do
  a:fill(va ~ 0xFF, s0); b:fill(vb ~ 0xFF, s0)   -- poisoned
  g:launch(s0)
  s0:sync()
  t.ok(all_bytes(a, va) and all_bytes(b, vb), "executable " .. round .. " set both buffers")
end

-- DOT: to a file and as a string; the fake labels nodes by kind
local path = dir .. "/def.dot"
def:debug_dot_print(path)
local dot = t.read_file(path)
t.like(dot, "^digraph", "debug_dot_print wrote a DOT graph")
local _, memsets = dot:gsub("MEMSET", "")
t.is(memsets, 2, "the DOT graph has both memset nodes")
t.is(def:debug_dot_str{verbose = true, handles = true}, dot, "debug_dot_str gives the same text")
t.is(#t.ls(dir), 1, "debug_dot_str left no temporary file behind")
t.raises(function() def:debug_dot_print(dir .. "/no/such/dir/x.dot") end, "cuGraphDebugDotPrint",
         "a path that cannot be written is the driver's error")

-- a child graph of a builder: the builder copies it
local out = pinned:allocate(N)
local builder = cuda.Graph(dev)
local child = builder:child(nil, def)
builder:memcpy(child, out, b)
t.is(builder.node_count, 2, "child node and copy")
local bg = builder:instantiate()
a:fill(0, s0); b:fill(0, s0); out:fill(1, s0)
bg:launch(s0)
s0:sync()
t.ok(all_bytes(a, va) and all_bytes(out, vb), "the child graph ran before the copy")

-- closing in every order: the definition first leaves its executables working
def:close()
def:close()
t.raises(function() def:instantiate() end, "cuda%.GraphDefinition is closed", "instantiate a closed definition")
t.raises(function() return g1.node_count end, "GraphDefinition of this graph is closed",
         "an executable's node count needs its definition")
t.like(tostring(def), "closed", "tostring of a closed definition")
a:fill(0, s0)
g1:launch(s0); s0:sync()
t.ok(all_bytes(a, va), "an executable outlives its closed definition")
bg:launch(s0); s0:sync()
t.ok(all_bytes(out, vb), "and so does a builder's copy of it")
g1:close(); g3:close()
t.is(copy.node_count, 2, "the clone is independent of the closed original")
g2:close()
a:fill(0, s0)
local g4 = copy:instantiate()
copy:close()
g4:launch(s0); s0:sync()
t.ok(all_bytes(a, va), "instantiated after its original's executables closed")
g4:close(); bg:close(); builder:close()
def, copy, g1, g2, g3, g4, bg, builder, child = nil
t.is(live("graphs"), graphs0, "every graph and executable destroyed")

-- real kernels forked and joined, with random data, replayed twice from a
-- clone and its original
local x1, x2 = pinned:allocate(N * 4), pinned:allocate(N * 4)
local in1, in2 = pinned:allocate(N * 4), pinned:allocate(N * 4)
local out1, out2 = pinned:allocate(N * 4), pinned:allocate(N * 4)
local kdef = fork_join(function(st)
  x1:copy_from(in1, st)
  cuda.launch(st, cfg, k, x1, cuda.f32(2), cuda.f32(1), cuda.u64(N))
end, function(st)
  x2:copy_from(in2, st)
  cuda.launch(st, cfg, k, x2, cuda.f32(-0.5), cuda.f32(3), cuda.u64(N))
end)
t.is(kdef.node_count, 4, "two copies and two kernels")
t.is(types(kdef), "kernel=2,memcpy=2", "node_types: two copies and two kernels")
local want1, want2 = pinned:allocate(N * 4):view("float32"), pinned:allocate(N * 4):view("float32")
local function check(g, round, name)
  in1:view("float32"):random(-100, 100, seed + round)
  in2:view("float32"):random(-100, 100, seed + round + 1000)
  want1:copy(in1:view("float32")); want1:mul(2); want1:add(1)
  want2:copy(in2:view("float32")); want2:mul(-0.5); want2:add(3)
  x1:fill(0xFF); x2:fill(0xFF)
  g:launch(s0)
  s0:sync()
  t.ok(x1:view("float32"):allclose(want1, 1e-6, 1e-5) and x2:view("float32"):allclose(want2, 1e-6, 1e-5), name)
end
local kclone = kdef:clone()
local e1, e2 = kdef:instantiate(), kclone:instantiate()
check(e1, 1, "the original's executable computed both branches")
check(e2, 2, "the clone's executable computed both branches")
check(e1, 3, "and again")

-- what the capture used lives while a definition, a clone or an executable does
local mem = pinned
local live_buffers0 = mem.live_buffers
x1:close(); in1:close()
x1, in1 = nil, nil
collectgarbage(); collectgarbage()
t.is(mem.live_buffers, live_buffers0, "closed buffers the graphs use stay live")
kdef:close()
kclone:close()
collectgarbage(); collectgarbage()
t.is(mem.live_buffers, live_buffers0, "executables keep them past their definitions' close")
e1:launch(s0); e2:launch(s0); s0:sync()
t.ok(true, "and launch")
e1:close()
t.is(mem.live_buffers, live_buffers0, "the last executable keeps them")
e2:close()
collectgarbage(); collectgarbage()
t.is(mem.live_buffers, live_buffers0 - 2, "closing the last executable frees them")

-- the definition as an update source
local u1 = fork_join(function(st) a:fill(1, st) end, function(st) b:fill(2, st) end)
local u2 = fork_join(function(st) a:fill(3, st) end, function(st) b:fill(4, st) end)
local ue = u1:instantiate()
ue:update(u2)
ue:launch(s0); s0:sync()
t.ok(all_bytes(a, 3) and all_bytes(b, 4), "g:update takes a definition")
u2:close()
ue:launch(s0); s0:sync()
t.ok(all_bytes(a, 3), "and keeps what it uses past its close")
t.raises(function() ue:update(u2) end, "cuda%.GraphDefinition is closed", "update from a closed definition")
ue:close(); u1:close()

-- a stream that joined the capture cannot end it: the capture and what it
-- keeps stay the origin's (before, the refusal gave back its counts)
do
  local x = pinned:allocate(N)
  local live0 = pinned.live_buffers
  s0:begin_capture()
  s1:wait(s0:record())
  x:fill(9, s1)
  s0:wait(s1:record())
  t.raises(function() s1:end_capture{instantiate = false} end, "joined a capture that another stream began",
           "a joined stream cannot end the capture")
  x:close()
  collectgarbage(); collectgarbage()
  t.is(pinned.live_buffers, live0, "the capture still keeps what the joined stream used")
  local jd = s0:end_capture{instantiate = false}
  t.raises(function() s1:end_capture() end, "joined a capture", "nor end it once it ended")
  local je = jd:instantiate()
  je:launch(s0); s0:sync()
  jd:close(); je:close()
  collectgarbage(); collectgarbage()
  t.is(pinned.live_buffers, live0 - 1, "and lets go of it with its graph")
end

-- cuda.h's restrictions on child graphs hold for definitions too: a
-- captured launch of a built graph with an event record node (the fake
-- inlines it) cannot go into a conditional body, directly or through a
-- builder that took it as a child
do
  local ev = dev:create_event()
  local inner = cuda.Graph(dev)
  inner:record(inner:memset(nil, a, 1), ev)
  local ig = inner:instantiate()
  s0:begin_capture()
  ig:launch(s0)
  local evdef = s0:end_capture{instantiate = false}
  t.is(types(evdef), "event_record=1,memset=1", "node_types: a record node")
  local outer = cuda.Graph(dev)
  local _, body = outer:if_cond(nil, outer:create_conditional_handle())
  t.raises(function() body:child(nil, evdef) end, "conditional body cannot hold event record",
           "a definition with an event node is refused in a conditional body")
  local mid = cuda.Graph(dev)
  mid:child(nil, evdef)
  t.raises(function() body:child(nil, mid) end, "nor a child graph with some",
           "and so is a builder that took it as a child")
  t.raises(function() outer:child(nil, outer) end, "its own child", "the builder checks still hold")
  outer:close(); mid:close(); evdef:close(); ig:close(); inner:close()
end

-- end_capture keeps its default: an executable
local plain = fork_join(function(st) a:fill(5, st) end, function(st) b:fill(6, st) end, {})
t.is(getmetatable(plain).__name, "cuda.Graph", "end_capture{} still instantiates")
plain:close()

-- bad input
s0:begin_capture()
a:fill(7, s0)
t.raises(function() s0:end_capture{instantiate = false, use_node_priority = true} end,
         "takes no instantiate options", "instantiate options with instantiate = false")
t.raises(function() s0:end_capture{instantiate = 1} end, "instantiate", "instantiate = 1")
t.raises(function() s0:end_capture{instantiat = false} end, "unknown option 'instantiat'", "misspelt option")
local d = s0:end_capture{instantiate = false}
t.raises(function() d:instantiate{bogus = true} end, "unknown option 'bogus'", "instantiate: unknown option")
t.raises(function() d:debug_dot_print() end, "string expected", "debug_dot_print without a path")
t.raises(function() d:debug_dot_print(path, {verbos = true}) end, "unknown option 'verbos'", "dot: unknown option")
t.raises(function() d:debug_dot_str{verbose = 1} end, "verbose", "dot: verbose = 1")
t.raises(function() d.clone(5) end, "cuda%.GraphDefinition expected", "clone of a number")
t.raises(function() cuda.Graph(dev):child(nil, 5) end, "cuda%.GraphBuilder expected", "child of a number")
d:close()
t.raises(function() d:clone() end, "cuda%.GraphDefinition is closed", "clone a closed definition")
t.raises(function() d:debug_dot_str() end, "cuda%.GraphDefinition is closed", "dot of a closed definition")
t.raises(function() return d.node_count end, "cuda%.GraphDefinition is closed", "count a closed definition")
t.raises(function() cuda.Graph(dev):child(nil, d) end, "cuda%.GraphDefinition is closed", "child of a closed definition")

-- graph memory: the driver clones no graph that allocates
local gm = cuda.GraphMemoryResource(dev)
s0:begin_capture()
local tmp = gm:allocate(N, s0)
tmp:fill(1, s0)
tmp:close(s0)
local mdef = s0:end_capture{instantiate = false}
t.is(types(mdef), "alloc=1,free=1,memset=1", "node_types: an allocation, a fill, a free")
t.raises(function() mdef:clone() end, "cuGraphClone", "a graph that allocates is not cloned")
local me = mdef:instantiate()
me:launch(s0); s0:sync()
me:close(); mdef:close()

-- finalizers that close the definition (or the capturing stream) in the
-- middle of each call: it is used or refused, never used closed
local function stress()
  collectgarbage("incremental", 0, 1000, 40)
  collectgarbage("setpause", 0)
  collectgarbage()
end
local function calm() collectgarbage("incremental", 200, 100, 13) end
local function close_at(o, n)
  setmetatable({}, {__gc = function()
    if n <= 1 then pcall(o.close, o) else close_at(o, n - 1) end
  end})
end
local calls = {
  instantiate = function(x) x:instantiate():close() end,
  clone = function(x) x:clone():close() end,
  dot = function(x) return x:debug_dot_str() end,
  child = function(x) local bb = cuda.Graph(dev); bb:child(nil, x); bb:close() end,
  count = function(x) return x.node_count, tostring(x), x.node_types end,
  update = function(x) local e = x:instantiate(); e:update(x); e:close() end,
}
local made, refused, bad = 0, 0, {}
for name, call in pairs(calls) do
  for n = 1, 10 do
    local x = fork_join(function(st) a:fill(n, st) end, function(st) b:fill(n, st) end)
    stress()
    close_at(x, n)
    local ok, err = pcall(call, x)
    calm()
    if ok then made = made + 1
    elseif tostring(err):match("cuda%.GraphDefinition is closed") then refused = refused + 1
    else bad[#bad + 1] = name .. ": " .. tostring(err) end
  end
end
for n = 1, 10 do
  local st = dev:create_stream()
  st:begin_capture()
  a:fill(n, st)
  stress()
  close_at(st, n)
  local ok, err = pcall(st.end_capture, st, {instantiate = false})
  calm()
  if ok then made = made + 1; err:close()
  elseif tostring(err):match("cuda%.Stream is closed") then refused = refused + 1
  else bad[#bad + 1] = "end_capture: " .. tostring(err) end
end
t.is(#bad, 0, "finalizers closing the definition mid-call: made or refused (" .. (bad[1] or "") .. ")")
t.ok(made > 0 and refused > 0, ("both happened: %d made, %d refused"):format(made, refused))

a:close(); b:close(); out:close()
x2, in2, out1, out2, want1, want2, tmp = nil
t.is(live("graphs"), graphs0, "no graph left")

-- the GPU test's fork/join of copies and kernels, here under the fake
local gpu_test = (os.getenv("CUDALUA_SRCDIR") or ".") .. "/t/graph_def_gpu.t"
local code, tap_out = t.run(t.cudalua() .. " '" .. gpu_test .. "'")
t.is(code, 0, "t/graph_def_gpu.t passes under the fake")
t.ok(not tap_out:find("not ok") and tap_out:find("ok %d+"), "and ran its tests" .. (tap_out:match("not ok[^\n]*") or ""))
t.done()
