-- A seeded fuzzer: random calls over live objects, with random and extreme
-- arguments, random closes (parents before children too), collections at
-- random points, finalizers that close objects and injected driver
-- failures. The process must survive and every error must be a string or
-- a cuda.Error. FUZZ_SEED=N replays a run (FUZZ_SEED="1 2 3" runs those
-- seeds in turn), FUZZ_CALLS=N sets each run's length; it runs under the
-- fake driver, or on the real GPU with FUZZ_REAL=1.
--
-- Each call draws from a generator of its own, seeded by (seed, call): what
-- a call draws does not depend on the calls before it, so FUZZ_ONLY="3 17
-- 40" (run only those calls) keeps their draws, and bench/fuzz_reduce.lua
-- can cut a crashing run down to the calls the crash needs. FUZZ_TRACE=1
-- writes each call's number and action to stderr; FUZZ_TRACE=2 also what
-- it picked (that allocates strings, so collections fall elsewhere).
-- FUZZ_DRAWS=sequential draws from one generator a run instead, as the
-- fuzzer did before 2026-12-05: it replays the runs recorded then.
--
-- Under `make check-gcstress` every allocation runs the pending finalizers,
-- and the "closer" finalizers armed here close one of the handles the call
-- in flight was given (the `recent` list): the class of crash HACKING.md's
-- rule is about. They re-arm themselves at random, so a closer can fire at
-- any allocation of the next call, not only at its first.
local t = require "tap"
local cuda, fakecuda
if os.getenv("FUZZ_REAL") == "1" then
  cuda = require "cuda"
  if not cuda.is_available() then t.skip_all("FUZZ_REAL=1 but no CUDA device") end
else
  cuda, fakecuda = require("fake").start()
end

local seeds = {}
for word in (os.getenv("FUZZ_SEED") or tostring(os.time())):gmatch("%d+") do seeds[#seeds + 1] = tonumber(word) end
local ncalls = tonumber(os.getenv("FUZZ_CALLS")) or 20000
t.plan(3 * #seeds)

local dev = cuda.Device(0)
dev:set_current()
local kernel = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
-- ObjectCodes of the fuzzer's own, to look kernels up in and to close
local cubin_path = t.tmpdir() .. "/scale_and_bias.cubin"
local cubin_code = cuda.Program(io.open(require("cuda.kernels").find("scale_and_bias.cu")):read("a"), "c++",
                                {arch = "sm_" .. dev.arch}):compile("cubin").code
t.write_file(cubin_path, cubin_code)
local tex_kernel = cuda.Program(dofile(os.getenv("CUDALUA_SRCDIR") .. "/t/texture_kernels.lua"), "c++",
                                {arch = "sm_" .. dev.arch}):compile("cubin"):get_kernel("tex_fetch")
local tmap_kernel = cuda.Program([[
struct alignas(64) Desc { unsigned long long v[16]; };
extern "C" __global__ void tmap_k(const __grid_constant__ Desc d, unsigned long long *x) { x[0] = d.v[1]; }
]], "c++", {arch = "sm_" .. dev.arch}):compile("cubin"):get_kernel("tmap_k")
local fuzz_dir = t.tmpdir()
local fuzz_src = 'extern "C" __global__ void k(int *x) { x[0] = 1; }'
local pool = {}                     -- live objects, by kind
local trace = os.getenv("FUZZ_TRACE")   -- 1: each call's action on stderr, for a crash's repro; 2: and its picks
local trace_picks = trace == "2"
local recent = {}                   -- what pick() handed to the call in flight
local origin = setmetatable({}, {__mode = "k"})   -- for FUZZ_TRACE: where a stream or graph came from
local function add(kind, obj) if obj ~= nil then pool[kind] = pool[kind] or {} table.insert(pool[kind], obj) end return obj end
local function pick(kind)
  local list = pool[kind]
  if not list or #list == 0 then return nil end
  local obj = list[math.random(#list)]
  recent[#recent + 1] = obj
  if trace_picks then io.stderr:write("  ", kind, ": ", tostring(obj), "\n") end
  return obj
end

local extremes = {0, -1, 1, 2^31, -2^31, 2^53, -2^63, math.maxinteger, math.mininteger, 0.5, -0.0,
                  1/0, -1/0, 0/0, "x", "", {}, true, false}
local function any()
  local r = math.random(10)
  if r <= 4 then return extremes[math.random(#extremes)] end
  if r <= 6 then return math.random(0, 4096) end
  local kinds = {"stream", "event", "buffer", "view", "graph", "builder", "node", "mr", "ctx", "handle", "array", "texture", "tmap"}
  return pick(kinds[math.random(#kinds)])
end
local scalars = {"u8", "u16", "u32", "i32", "f32", "f64", "u64"}   -- u64 last: see the launch
local function scalar() return cuda[scalars[math.random(#scalars)]](math.random(0, 255)) end

local function close(o) if o and o.close then o:close() end end

-- A finalizer that closes one of the handles the call in flight was given,
-- and at random arms another one for a later allocation.
local function arm_closer()
  setmetatable({}, {__gc = function()
    if #recent > 0 then pcall(close, recent[math.random(#recent)]) end
    if math.random(2) == 1 then arm_closer() end
  end})
end

-- Graphs keep the buffers and events they use (closing them defers the
-- free); the fixed set of buffers and events below, never closed, gives
-- the capture actions something always valid to use as well.
local graph_buffers, graph_events = {}, {}
for i = 1, 8 do
  graph_buffers[i] = cuda.PinnedMemoryResource():allocate(256)
  graph_events[i] = dev:create_event()
end
local function graph_buffer() return graph_buffers[math.random(#graph_buffers)] end
local function graph_event() return graph_events[math.random(#graph_events)] end

-- A StridedMemoryView over one of the fixed buffers, in a random layout
-- that fits it; nil when the layout drawn does not.
local function foreign_view()
  local dtypes, sizes = {"uint8", "int16", "float32", "float64"}, {1, 2, 4, 8}
  local d = math.random(#dtypes)
  local ndim, shape, strides, last = math.random(2), {}, {}, 0
  local c_order = math.random(2) == 1
  for i = 1, ndim do shape[i], strides[i] = math.random(0, 6), math.random(0, 6) end
  if c_order then strides = {ndim == 2 and shape[2] or 1, 1} end
  for i = 1, ndim do last = last + math.max(shape[i] - 1, 0) * strides[i] end
  local off = math.random(0, 8) * 8     -- aligned for any kernel the fuzzer launches
  if off + (last + 1) * sizes[d] > 256 then return nil end
  return cuda.StridedMemoryView{ptr = graph_buffer().ptr + off, dtype = dtypes[d], shape = shape,
                                strides = not c_order and strides or nil,
                                memory = math.random(2) == 1 and "pinned" or "host",
                                owner = any(), readonly = math.random(2) == 1}
end

-- the actions: each makes, uses or closes something
local actions = {
  function() add("stream", dev:create_stream{priority = any()}) end,
  function() add("stream", dev:create_stream()) end,
  function() add("event", dev:create_event{timing = math.random(2) == 1}) end,
  function() add("mr", cuda.PinnedMemoryResource()) end,
  function() add("mr", cuda.ManagedMemoryResource()) end,
  function() add("mr", cuda.DeviceMemoryResource(dev, {release_threshold = math.random(0, 1 << 20)})) end,
  function() add("mr", cuda.DeviceMemoryResource(dev, {pool = false})) end,
  -- CUDA IPC: exports of any buffer (refused but for plain allocations),
  -- their fields, closes; opening a handle (this process's own: refused)
  function() local b = pick("buffer"); if b then add("export", b:ipc_export()) end end,
  function() local e = pick("export"); if e then return e.handle, e.offset, e.size, e.buffer_closed, tostring(e) end end,
  function() local e = pick("export"); if e then add("buffer", cuda.ipc_open(e.handle, any(), any())) end end,
  function() local mr = pick("mr") or dev.memory_resource; add("buffer", mr:allocate(math.random(1, 64) * 4, pick("stream"))) end,
  -- extreme sizes, but none that would succeed and make every later fill slow
  function() local mr, n = pick("mr"), any()
    if mr and not (type(n) == "number" and n > 1 << 16 and n < 1 << 40) then add("buffer", mr:allocate(n, any())) end end,
  function() local b = pick("buffer"); if b then add("view", b:view(({"float32", "uint8", "int32", "float64"})[math.random(4)])) end end,
  function() local v = pick("view"); if v then v:fill(math.random(0, 9)) end end,
  function() local v = pick("view"); if v then return v[any()] end end,
  function() local v = pick("view"); if v then v[math.random(0, #v + 1)] = any() end end,
  function() local v = pick("view"); if v then return v:sum(), #v, tostring(v) end end,
  function() local v, w = pick("view"), pick("view"); if v and w then v:copy(w) end end,
  function() local b = pick("buffer"); if b then b:fill(scalar(), pick("stream")) end end,
  function() local a, b = pick("buffer"), pick("buffer"); if a and b then a:copy_from(b, pick("stream")) end end,
  function() local b = pick("buffer"); if b then add("buffer", b:slice(any(), any())) end end,
  function() local s, e = pick("stream"), pick("event"); if s then s:record(e) end end,
  function() local s = pick("stream"); if s then s:wait(any()) end end,
  function() local s = pick("stream"); if s then s:sync() end end,
  function() local e = pick("event"); if e then return e.is_done, e - (pick("event") or e) end end,
  function() local b, s = pick("buffer"), pick("stream")
    -- the element count never exceeds the buffer (an overrun is the script's bug, as
    -- on a GPU); a wrong type instead of it must be refused
    if b and s then
      local n = math.random(2) == 1 and cuda.u64(b.size // 4) or cuda[scalars[math.random(#scalars - 2)]](1)
      cuda.launch(s, cuda.LaunchConfig{grid = math.random(1, 4), block = 32}, kernel, b, scalar(), scalar(), n)
    end end,
  function() local s = pick("stream"); if s then
      s:begin_capture()
      graph_buffer():fill(cuda.u8(1), s)
      local g = add("graph", s:end_capture()); origin[g] = "captured on " .. (origin[s] or "stream") end end,
  function() local g, s = pick("graph"), pick("stream"); if g and s then
      if os.getenv("FUZZ_TRACE") then io.stderr:write("  ", origin[g] or "?", " graph on ", origin[s] or "stream", "\n") end
      g:launch(s); g:upload(s) end end,
  function() add("builder", cuda.Graph(dev)) end,
  function() local b = pick("builder"); if b then add("node", b:empty(pick("node"))) end end,
  function() local b = pick("builder"); if b then add("node", b:memset(pick("node"), graph_buffer(), math.random(0, 300))) end end,
  function() local b = pick("builder"); if b then add("node", b:record(nil, graph_event())) end end,
  function() local b, c = pick("builder"), pick("builder"); if b and c then add("node", b:child(nil, c)) end end,
  function() local b = pick("builder"); if b then local n, body = b:if_cond(nil, b:create_conditional_handle(math.random(0, 1))); add("node", n); add("builder", body) end end,
  function() local b = pick("builder"); if b then origin[add("graph", b:instantiate())] = "built" end end,
  function() add("ctx", dev:create_context{resources = dev.resources.sm:split{count = math.random(1, 40), groups = 1}}) end,
  function() local c = pick("ctx"); if c then origin[add("stream", c:create_stream())] = "green stream" end end,
  function() local c = pick("ctx"); if c then return c.resources, c.handle end end,
  function() local kinds = {"stream", "event", "buffer", "graph", "builder", "mr", "ctx", "obj", "kernel", "pc", "export", "array", "texture", "tmap"}; close(pick(kinds[math.random(#kinds)])) end,
  function() local kinds = {"stream", "event", "buffer", "graph", "builder", "mr", "ctx", "view", "obj", "kernel", "pc", "export", "array", "texture", "tmap"}
    local list = pool[kinds[math.random(#kinds)]]; if list and #list > 0 then table.remove(list, math.random(#list)) end end,
  function() collectgarbage(math.random(2) == 1 and "step" or "collect") end,
  function() local o = any(); setmetatable({}, {__gc = function() close(o) end}) end,
  function() arm_closer() end,
  function() arm_closer() end,
  -- host functions that close what a wait uses, or arm closers
  function() local s = pick("stream"); if s then
      s:launch_host_func(function() close(pick(({"stream", "event", "buffer", "graph"})[math.random(4)])); arm_closer() end)
      if math.random(2) == 1 then s:sync() else cuda.poll() end end end,
  function() local s, e = pick("stream"), pick("event"); if s and e then
      s:record(e); s:launch_host_func(function() close(e); close(s) end); e:sync() end end,
  -- releases behind a pending host function never wait behind it
  function() local s = pick("stream"); if s then
      s:launch_host_func(function() end)
      local b = (pick("mr") or dev.memory_resource):allocate(64)
      b:close()                 -- no stream: deferred until the host function ran
      if math.random(2) == 1 then cuda.poll() else s:sync() end end end,
  -- a host function closes a green context (or anything) and waits: refused
  function() local s = pick("stream"); if s then
      s:launch_host_func(function() close(pick("ctx")); arm_closer(); dev:sync() end)
      dev:sync() end end,
  function() return getmetatable(dev.properties).__index(any(), any()) end,
  -- object code and kernels
  function() add("obj", cuda.ObjectCode.from_file(cubin_path)) end,
  function() add("obj", cuda.ObjectCode.from_data(cubin_code)) end,
  function() local o = pick("obj"); if o then
      add("kernel", o:get_kernel(math.random(2) == 1 and "scale_and_bias" or "no_such_kernel")) end end,
  function() local k = pick("kernel"); if k then return k.attributes.num_regs, k.params, tostring(k) end end,
  function() local k, b, s = pick("kernel"), pick("buffer"), pick("stream"); if k and b and s then
      cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 32}, k, b, scalar(), scalar(), cuda.u64(b.size // 4)) end end,
  function() local b, k = pick("builder"), pick("kernel"); if b and k then
      add("node", b:kernel(pick("node"), cuda.LaunchConfig{grid = 1, block = 32}, k, graph_buffer(),
                           cuda.f32(1), cuda.f32(0), cuda.u64(64))) end end,
  function() local o = pick("obj"); if o then return o.code and #o.code, tostring(o) end end,
  -- program caches: entries stored, read back, damaged; compiles whose cache an __index makes
  function() add("pc", cuda.ProgramCache(fuzz_dir .. "/pc" .. math.random(3), {max_size = math.random(0, 1) * math.random(0, 1 << 16)})) end,
  function() local pc, o = pick("pc"), pick("obj"); if pc and o then pc:store(tostring(math.random(8)), o) end end,
  function() local pc = pick("pc"); if pc then add("obj", pc:get(tostring(math.random(8)))) end end,
  function() local pc = pick("pc"); if pc then return pc.hits, pc.size, pc.corrupt, tostring(pc) end end,
  function() local pc = pick("pc"); if pc then pc:clear() end end,
  function() local pc = pick("pc"); if pc then   -- damage an entry: a flipped byte anywhere
      local f = io.popen("ls '" .. pc.dir .. "' 2>/dev/null"); local name = f:read("l"); f:close()
      local h = name and io.open(pc.dir .. "/" .. name, "r+b")
      if h then local size = h:seek("end"); if size > 0 then local at = math.random(0, size - 1)
        h:seek("set", at); local c = h:read(1); h:seek("set", at); h:write(string.char(c:byte() ~ (1 << math.random(0, 7)))) end
        h:close() end end end,
  function() local o = pick("obj"); if o then add("obj", cuda.ObjectCode.from_data(o.code:sub(1, math.random(0, #o.code)))) end end,
  function() if math.random(10) == 1 then local pc = pick("pc")   -- NVRTC is slow: a tenth of the time
      add("obj", cuda.Program(fuzz_src, "c++", {arch = "sm_" .. dev.arch}):compile("cubin",
        setmetatable({}, {__index = function(_, k) if k == "cache" then return math.random(2) == 1 and pc or cuda.ProgramCache(fuzz_dir .. "/anon") end end}))) end end,
  function() local a, b = pick("obj"), pick("obj"); if a and b then
      add("obj", cuda.Linker({a, b}, {arch = "sm_" .. dev.arch}):link("cubin")) end end,
  function() local k = pick("kernel"); if k then return k:occupancy(math.random(1, 1024)) end end,
  -- typed arguments: any value for the float parameters, declared signatures, raw addresses
  function() local k, b, s = pick("kernel"), pick("buffer"), pick("stream"); if k and b and s then
      cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 32}, k, b, any(), any(), b.size // 4) end end,
  function() local k = pick("kernel"); if k then
      local sigs = {"float*, float, float, size_t", "float *data, float s, float b, unsigned long long n",
                    "void*, float, float, uint64_t", "float*, int, int, size_t", "float*", "long float", tostring(any())}
      k:signature(sigs[math.random(#sigs)]) end end,
  function() return cuda.ptr(any()), cuda.parse_signature(tostring(any())), cuda.demangle(tostring(any())) end,
  function() local o = pick("obj"); if o then
      add("kernel", o:get_kernel("scale_and_bias", math.random(2) == 1 and "float*, float, float, size_t" or "float*, double")) end end,
  function() local o = any(); return tostring(o), o ~= nil and type(o) == "userdata" and o.device end,
  -- views of any memory, shaped and strided; batched copies; deallocation streams
  function() local b = pick("buffer"); if b then
      add("view", b:view("float32", {any(), math.random(1, 4)}, math.random(2) == 1 and {any(), 1} or nil)) end end,
  function() local b = pick("buffer"); if b then add("view", b:view("uint8", {math.random(1, b.size)})) end end,
  function() local v = pick("view"); if v then return v.shape, v.strides, v.device, v.is_device, v.ptr, v.nbytes end end,
  function() local v, s = pick("view"), pick("stream"); if v and s then v:copy_to(pick("buffer") or pick("view"), s) end end,
  function() local v, s = pick("view"), pick("stream"); if v and s then
      cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 32}, kernel, v, scalar(), scalar(), cuda.u64(0)) end end,
  function() local s = pick("stream"); if s then
      local list = {}
      for k = 1, math.random(0, 6) do
        list[k] = {pick("buffer") or pick("view"), pick("view") or pick("buffer"), math.random(3) == 1 and any() or nil}
      end
      cuda.copy_batch(s, list, math.random(2) == 1 and {src_access_order = ({"stream", "any", "during_api_call", any()})[math.random(4)]} or nil) end end,
  -- issue 27: a managed resource's preferred location, a pool's node read back
  function() add("mr", cuda.ManagedMemoryResource(math.random(4) == 1 and any() or
      {preferred_location = ({dev, 0, -1, "host", any()})[math.random(5)],
       preferred_location_type = ({nil, "device", "host", "host_numa", any()})[math.random(5)]})) end,
  function() local m = pick("mr"); if m then return m.numa_id, m.preferred_location, m.preferred_location_type end end,
  -- issue 27: per-copy options (a list of sets), and slices of one buffer that may overlap
  function() local s, b = pick("stream"), pick("buffer"); if s and b and (b.size or 0) >= 64 then
      local list, opts = {}, {}
      for k = 1, math.random(1, 6) do
        local len = math.random(1, 16)
        list[k] = {b:slice(math.random(0, 48), len), (pick("buffer") or b):slice(math.random(0, 48), len)}
        opts[k] = math.random(6) > 1 and {src_access_order = ({"stream", "any", "during_api_call"})[math.random(3)],
          prefer_overlap = math.random(2) == 1, src_location_hint = math.random(2) == 1 and dev or "host"} or any()
      end
      if math.random(4) == 1 then opts[#opts + 1] = {} end
      cuda.copy_batch(s, list, opts) end end,
  function() local b, s = pick("buffer"), pick("stream"); if b and s then b:set_deallocation_stream(s) end end,
  function() return dev.default_stream, dev.per_thread_default_stream, dev.memory_resource.release_threshold end,
  -- arrays, textures and surfaces (issue 21): made from random and extreme
  -- extents, copied from and to any buffer, sampled by a kernel, closed in
  -- any order (an array or buffer before its texture)
  function() add("array", cuda.Array{format = ({"float32", "uint8", "int16", "float16"})[math.random(4)],
                                     channels = ({1, 2, 4})[math.random(3)], width = math.random(1, 16),
                                     height = math.random(0, 8), surface = math.random(2) == 1}) end,
  function() add("array", cuda.Array{width = any(), height = any(), depth = any(), layered = any(),
                                     channels = any(), format = any()}) end,
  function() local a, b = pick("array"), pick("buffer"); if a and b then
      if math.random(2) == 1 then a:copy_from(b, pick("stream")) else a:copy_to(b, any()) end end end,
  function() local a, s = pick("array"), pick("stream"); if a and s and a.size then
      local b = (pick("mr") or dev.memory_resource):allocate(a.size, s)
      a:copy_from(b, s):copy_to(b, s) end end,
  function() local src = math.random(2) == 1 and pick("array") or pick("buffer"); if src then
      add("texture", cuda.TextureObject(src, math.random(2) == 1 and
        {filter_mode = ({"point", "linear"})[math.random(2)], address_mode = ({"wrap", "clamp", "border"})[math.random(3)],
         border_color = any(), normalized_coords = math.random(2) == 1} or
        {format = "float32", width = any(), height = any(), pitch = any()})) end end,
  function() local a = pick("array"); if a then add("texture", cuda.SurfaceObject(a)) end end,
  function() local x, b, s = pick("texture"), pick("buffer"), pick("stream"); if x and b and s then
      cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 32}, tex_kernel, x, b, cuda.u64(4), cuda.u64(b.size // 4)) end end,
  function() local x = pick("texture"); if x then return x.handle, x.source, tostring(x) end end,
  function() local a = pick("array"); if a then return a.size, a.format, a.device, tostring(a) end end,
  -- cubemaps (issue 29): plausible and extreme shapes, copies of a face or
  -- a layer with any options, textures over them
  function() local n = math.random(1, 8); add("array", cuda.Array{width = n, height = n,
      depth = ({0, 6, 12, 7, any()})[math.random(5)], layered = math.random(2) == 1, cubemap = true,
      surface = math.random(2) == 1}) end,
  function() add("array", cuda.Array{width = any(), height = any(), depth = any(), cubemap = any(),
                                     layered = any()}) end,
  function() local a, b = pick("array"), pick("buffer"); if a and b then
      local opts = ({{face = math.random(0, 7)}, {layer = math.random(0, 3)},
                     {face = math.random(1, 6), layer = math.random(1, 2)}, {face = any(), layer = any()}, any()})[math.random(5)]
      if math.random(2) == 1 then a:copy_from(b, pick("stream"), opts) else a:copy_to(b, pick("stream"), opts) end end end,
  function() local a = pick("array"); if a then return a.cubemap, a.layered, a.depth end end,
  -- host registrations (issue 29): pageable buffers, their slices and
  -- views, strings, any value, with any options; the buffer closed under
  -- its registration, kernels on the mapped pointer, closes in any order
  function() local b = add("hbuf", cuda.HostMemoryResource():allocate(math.random(1, 64) * 4))
      add("buffer", b) end,
  function() local b = pick("hbuf"); if b then
      local target = ({b, b:slice(0, 4), b:view("uint8"), "fuzz" .. math.random(99), any()})[math.random(5)]
      add("hostreg", cuda.register_host(target, math.random(3) == 1 and any() or nil,
        math.random(3) > 1 and {mapped = math.random(2) == 1, portable = math.random(2) == 1,
                                read_only = math.random(4) == 1 or nil} or any())) end end,
  function() close(pick("hostreg")) end,
  function() local r = pick("hostreg"); if r then return r.ptr, r.size, r.device_ptr, r.source, tostring(r) end end,
  function() local r, b, s = pick("hostreg"), pick("buffer"), pick("stream"); if r and b and s and r.device_ptr and not r.read_only then   -- never into a string
      cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 32}, tex_kernel, cuda.u64(0), r.device_ptr, cuda.u64(1), cuda.u64(1)) end end,
  function() return dev.graph_mem_used, dev.graph_mem_reserved_high, dev:trim_graph_memory() end,
  -- tensor maps (issue 21): encoded over any buffer or view with plausible
  -- and extreme options, repointed, launched by value, closed in any order
  -- (the buffer before its map)
  function() local src = math.random(2) == 1 and pick("buffer") or pick("view"); if src then
      local n = math.random(1, math.max(1, math.min(256, math.tointeger(src.size) or 16) // 16)) * 4
      add("tmap", cuda.TensorMap.tiled(src, math.random(3) > 1 and
        {dtype = ({"float32", "int32", "uint8", "float16"})[math.random(4)], shape = {n, 1},
         box = {({4, 16, 32})[math.random(3)], 1}, swizzle = ({"none", "none", "128B", "32B"})[math.random(4)]} or
        {dtype = any(), shape = {any(), any()}, strides = {any()}, box = {any(), any()},
         element_strides = {any(), any()}, oob_fill = any(), l2_promotion = any()})) end end,
  function() local src = math.random(2) == 1 and pick("buffer") or pick("view"); if src then
      add("tmap", cuda.TensorMap.im2col(src, {dtype = math.random(2) == 1 and "float32" or any(),
        shape = {4, math.random(1, 4), math.random(1, 4)}, lower_corner = {any()}, upper_corner = {0},
        channels_per_pixel = 4, pixels_per_column = math.random(2) == 1 and 8 or any()})) end end,
  function() local m = pick("tmap"); if m then m:replace_address(math.random(3) > 1 and (pick("buffer") or pick("view")) or any()) end end,
  function() local m, b, s = pick("tmap"), pick("buffer"), pick("stream"); if m and b and s then
      cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 1}, tmap_kernel, m, b) end end,
  function() local m = pick("tmap"); if m then return m.bytes, m.source, m.address, m.kind, tostring(m) end end,
  -- virtual memory (issue 21): grow buffers in place and by moving (an
  -- injected failure of the hint under the fake), slices of moved buffers
  function() add("mr", cuda.VirtualMemoryResource(dev, {granularity = ({"minimum", "recommended"})[math.random(2)]})) end,
  -- issue 29: one allocation spread over devices (the fuzzer's one device, listed once or twice, or junk)
  function() add("mr", cuda.VirtualMemoryResource{devices = ({{dev}, {0}, {dev, dev}, {}, {any()}, any()})[math.random(6)],
      granularity = "minimum"}) end,
  -- issue 27: cuda.core's VirtualMemoryResourceOptions, good and bad combinations
  function() local pickone = function(l) return l[math.random(#l)] end
      local mr = add("mr", cuda.VirtualMemoryResource(dev, {allocation_type = pickone{"pinned", "managed", any()},
        location_type = pickone{"device", "host", "host_numa", "host_numa_current"}, numa_id = pickone{0, nil, any()},
        handle_type = pickone{"none", "posix_fd", "fabric", "win32"}, self_access = pickone{"rw", "r"},
        gpu_direct_rdma = pickone{true, false}, granularity = pickone{"minimum", "recommended"}}))
      return mr.handle_type, mr.location_type, mr.numa_id, mr.gpu_direct_rdma, cuda.virtual_memory_info(mr) end,
  function() local b = pick("buffer"); if b then
      if fakecuda and math.random(2) == 1 then fakecuda.fail("cuMemAddressReserve") end
      b:grow(math.random(2) == 1 and (b.size or 0) + math.random(0, 5 << 20) or any(), pick("stream")) end end,
  function() add("mr", cuda.PinnedMemoryResource{numa_id = math.random(2) == 1 and dev.host_numa_id or any()}) end,
  -- issue 27: views, slices and tensor maps made before a buffer moved
  -- (buf:grow) are refused, never used at the old, unmapped address
  function() local mr = pick("mr"); if mr then
      local b = add("buffer", mr:allocate(math.random(1, 3 << 20), pick("stream")))
      local v, sl = add("view", b:view("uint8")), add("buffer", b:slice(0, math.min(b.size, 4096)))
      local m = add("tmap", cuda.TensorMap.tiled(b, {dtype = "uint8", shape = {16, 1}, box = {16, 1}}))
      if fakecuda and math.random(4) > 1 then fakecuda.fail("cuMemAddressReserve") end
      b:grow(b.size + math.random(0, 5 << 20), pick("stream"))
      local s, r = pick("stream"), math.random(4)
      if not s then return end
      if r == 1 then v:copy_to(pick("buffer") or v, s)
      elseif r == 2 then sl:fill(math.random(0, 255), s)
      elseif r == 3 then cuda.copy_batch(s, {{pick("buffer") or b, v}})
      else cuda.launch(s, cuda.LaunchConfig{grid = 1, block = 1}, tmap_kernel, m, pick("buffer") or b) end end end,
  -- graphs: event nodes, conditional handles (forged ones too), memsets and
  -- copies of any buffer, kernel updates, events recorded into captures
  function() local b, e = pick("builder"), pick("event"); if b and e then
      add("node", (math.random(2) == 1 and b.record or b.wait)(b, pick("node"), e)) end end,
  function() local b = pick("builder"); if b then add("handle", b:create_conditional_handle(any())) end end,
  function() local b = pick("builder"); if b then   -- a handle of any builder, or a forged one
      local h = math.random(3) == 1 and cuda.u64(math.random(0, 1 << 33)) or pick("handle") or b:create_conditional_handle(math.random(0, 1))
      local n, body = b:if_cond(pick("node"), h); add("node", n); add("builder", body) end end,
  function() local b = pick("builder"); if b then   -- default 0: a real GPU never loops
      local n, body = b:while_loop(nil, b:create_conditional_handle(0)); add("node", n); add("builder", body) end end,
  function() local b, x = pick("builder"), pick("buffer"); if b and x then
      add("node", math.random(2) == 1 and b:memset(pick("node"), x, math.random(0, 255)) or b:memcpy(pick("node"), x, pick("buffer") or x)) end end,
  function() local g, k, x = pick("graph"), pick("kernel"), pick("buffer"); if g and k and x then
      g:update_kernel(pick("node"), cuda.LaunchConfig{grid = 1, block = 32}, k, x, cuda.f32(1), cuda.f32(0), cuda.u64(1)) end end,
  function() local s = pick("stream"); if s then   -- graph memory: freed in the graph, after it, or left
      local gm = cuda.GraphMemoryResource(dev)
      s:begin_capture()
      local b = gm:allocate(math.random(1, 4096), s)
      b:fill(cuda.u8(3), s)
      local how = math.random(3)
      if how == 1 then b:close(s) end
      add("graph", s:end_capture())
      -- kept apart from "buffer": its memory exists only while the graph runs,
      -- and a copy into it outside the graph would fault a real GPU
      if how == 2 then add("gbuf", b) end end end,
  function() local b, s = pick("gbuf"), pick("stream"); if b then
      if math.random(2) == 1 then b:close(s) else b:close() end end end,
  function() local s = pick("stream"); if s then   -- issue 27: a builder older than its buffer's pool
      local b, mr = cuda.Graph(dev), cuda.DeviceMemoryResource(dev)
      local x = mr:allocate(math.random(1, 4096), s)
      b:memset(nil, x, math.random(0, 255))
      if math.random(2) == 1 then x:close(s) end
      if math.random(2) == 1 then add("builder", b) end end end,
  function() local s = pick("stream"); if s then   -- issue 27: memory the program frees, relaunched
      local gm = cuda.GraphMemoryResource(dev)
      s:begin_capture()
      local b = gm:allocate(math.random(1, 4096), s)
      b:fill(cuda.u8(1), s)
      local g = s:end_capture()
      for _ = 1, math.random(0, 4) do
        local r = math.random(4)
        if r == 1 then g:launch(s) elseif r == 2 then b:close(pick("stream") or s) elseif r == 3 then b:close() else g:close() end
      end
      if math.random(2) == 1 then add("graph", g) end end end,
  function() local g, src = pick("graph"), pick(math.random(2) == 1 and "graph" or "builder"); if g and src then
      g:update(src) end end,
  function() local s, e = pick("stream"), pick("event"); if s and e then
      s:begin_capture(); s:record(e); graph_buffer():fill(cuda.u8(2), s); add("graph", s:end_capture()) end end,
  function() local b = pick("builder"); if b then return b.node_count, tostring(b), b[1] end end,
  function() local s = pick("stream"); if s then   -- a collection inside a capture: the finalizers'
      for _ = 1, math.random(0, 3) do                 -- frees and destroys wait for its end
        local list = pool[({"buffer", "graph", "mr", "builder", "def", "gbuf"})[math.random(6)]]
        if list and #list > 0 then table.remove(list, math.random(#list)) end
      end
      s:begin_capture(({"global", "thread_local", "relaxed"})[math.random(3)])
      graph_buffer():fill(cuda.u8(4), s)
      collectgarbage()
      local ok, g = pcall(s.end_capture, s)
      if not ok and tostring(g):find("INVALIDATED", 1, true) then   -- not a string: the run fails
        local why = "a collection inside a capture invalidated it: " .. tostring(g)
        error(setmetatable({}, {__tostring = function() return why end}))
      end
      if not ok then error(g, 0) end
      add("graph", g) end end,
  function() local g = pick("graph"); if g then return g.node_count, tostring(g), g[1] end end,
  function() if fakecuda then
      local names = fakecuda.names(); fakecuda.fail(names[math.random(#names)], math.random(1, 5)) end end,
  -- pools made to be shared: their handles (refused but for those pools),
  -- fields, closes; imports of this process's own (the fake refuses them;
  -- a GPU's driver might hand the same pool back, so only the fake's), and
  -- opening exports through any resource (refused: none is imported)
  function() add("mr", cuda.DeviceMemoryResource(dev, {ipc = true, release_threshold = math.random(0, 1 << 20)})) end,
  function() local mr = pick("mr"); if mr then add("phandle", mr:ipc_pool_handle()) end end,
  function() local h = pick("phandle"); if h then
      if math.random(2) == 1 then h:close() else return h.fd, tostring(h) end end end,
  function() local h = pick("phandle"); if h and fakecuda then add("mr", cuda.ipc_pool_open(h.fd, any())) end end,
  function() local e, mr = pick("export"), pick("mr"); if e then add("buffer", cuda.ipc_open(e.handle, any(), mr)) end end,
  -- links nvJitLink must survive (it runs in a child process): garbage
  -- LTO-IR and PTX, the same object twice, archs that ended the process
  -- ("3", "lto_7") and any value as arch; an eighth of the time (a link forks)
  function() if math.random(8) == 1 then
      local junk = {} for i = 1, math.random(0, 256) do junk[i] = string.char(math.random(0, 255)) end
      junk = table.concat(junk)
      local o = math.random(2) == 1 and cuda.ObjectCode.from_ltoir("\xed\x43\x4e\x7f" .. junk)
                or cuda.ObjectCode.from_ptx(".version 8.0\n.target sm_" .. dev.arch .. "\n.address_size 64\n" .. junk)
      local other = pick("obj") or o
      add("obj", cuda.Linker({o, other}, {arch = "sm_" .. dev.arch, lto = math.random(2) == 1}):link("cubin")) end end,
  function() local o = pick("obj"); if o and math.random(8) == 1 then
      add("obj", cuda.Linker({o, o}, {arch = "sm_" .. dev.arch, lto = math.random(2) == 1}):link(math.random(4) == 1 and "ptx" or "cubin")) end end,
  function() local o = pick("obj"); if o then
      local archs = {"3", "sm_3", "sm_09", "lto_7", "sm_50", "compute_" .. dev.arch, "sm_" .. dev.arch .. "a", any()}
      local linker = cuda.Linker({o}, {arch = archs[math.random(#archs)]})
      if math.random(8) == 1 then add("obj", linker:link("cubin")) end end end,
  -- cuda.system (NVML): devices by any argument, every field and clock read
  -- with any kind, NVML failures and throttles injected into the fake's
  function() add("nd", cuda.system.Device(math.random(2) == 1 and 0 or any())) end,
  function() local nd = pick("nd"); if nd then
      local kinds = {"sm", "memory", "graphics", "video"}
      return nd:clock(math.random(2) == 1 and kinds[math.random(4)] or any()), nd:max_clock(kinds[math.random(4)]),
             nd:application_clock(kinds[math.random(4)]), nd:clock_event_reasons() end end,
  function() local nd = pick("nd"); if nd then
      local fields = {"temperature", "power_usage", "power_limit", "utilization", "pcie", "ecc", "persistence_mode",
                      "compute_mode", "mig_mode", "nvlink", "peak_memory_bandwidth", "memory_bus_width", "name",
                      "uuid", "pci_bus_id", "index", "id", "device"}
      local f = fields[math.random(#fields)]
      return nd[f], nd:get(math.random(2) == 1 and f or any()), nd[any()], tostring(nd) end end,
  function() return cuda.system.is_available(), cuda.system.device_count(), cuda.system.driver_version,
                    cuda.system.nvml_version, cuda.system.get_driver_version(any()) end,
  function() if fakecuda then
      if math.random(2) == 1 then fakecuda.nvml_throttle(math.random(100, 1900), math.random(0, 4), math.random(0, 0x3ff))
      else
        local names = {"nvmlDeviceGetClockInfo", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetTemperatureV",
                       "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByUUID", "nvmlDeviceGetPciInfo_v3",
                       "nvmlDeviceGetCurrentClocksEventReasons", "nvmlSystemGetDriverVersion"}
        fakecuda.nvml_fail(names[math.random(#names)], math.random(1, 3), ({3, 15, 999})[math.random(3)])
      end end end,
  -- a hostile NVML (t/fake/nvml.c): strings without a NUL, failing calls, absurd numbers; calm again now and then
  function() if fakecuda then
      local r = math.random(4)
      if r == 1 then fakecuda.nvml_hostile("strings", ({"~", "9", ".1-", "\xff x"})[math.random(4)])
      elseif r == 2 then fakecuda.nvml_hostile("fail", math.random(0, 6), ({1, 3, 15, 999, -7})[math.random(5)])
      elseif r == 3 then
        fakecuda.nvml_hostile("absurd", ({0, 1, 0xffffffff, 3000000, 2^31, math.random(0, 0xffffffff)})[math.random(6)])
      else fakecuda.nvml_hostile() end end end,
  -- a metamethod of a live object's type called on any value (it checks its argument)
  function() local o = any(); local mt = getmetatable(o)
      if type(mt) == "table" then
        local f = mt[({"__gc", "__close", "__tostring", "__index", "__len", "__eq"})[math.random(6)]]
        if type(f) == "function" then return f(any(), any()) end
      end end,
  function() local nd, s = pick("nd"), pick("stream"); if nd then s:wait(nd) end end,
  -- cuda.bench's harness: axes of random values, random overrides, and a
  -- tiny measured benchmark whose work fills a pool buffer (closed at random by then)
  function() local h = require("cuda.bench.harness"); local b = h.register(function() end)
      local kinds = {"add_int64_axis", "add_int64_power_of_two_axis", "add_float64_axis", "add_string_axis",
                     "add_type_axis"}
      b[kinds[math.random(#kinds)]](b, "A", {any(), any()})
      for i = #h.registry, 1, -1 do h.registry[i] = nil end end,
  function() local axes = require("cuda.bench.axes")
      local specs = {"A=[1:9:2]", "A[pow2]=[1,2]", "A=[x]", "A=", "B=[1]", "A=[0.5:1:0.25]", "A[bad]=[1]"}
      return axes.parse_override(specs[math.random(#specs)], {axes.new("A", "int64", {1})}) end,
  function() local buf, h, run = pick("buffer"), require("cuda.bench.harness"), require("cuda.bench.run")
      local b = h.register(function(state)
        state:exec(function(launch) if buf then buf:fill(cuda.u8(1), launch.stream) end end,
                   {batched = ({true, false, "graph"})[math.random(3)], sync = math.random(4) == 1})
      end):set_stopping_criterion(({"sample_count", "stdrel", "entropy"})[math.random(3)], {["sample-count"] = 3})
        :set_batch_target_time(1e-4):set_timeout(0.01):set_min_samples(math.random(1, 3))
        -- a fill of host memory waits for the stream the blocker holds: on a GPU that
        -- sample times out (the H200 spent 30 s a sample there); a short timeout keeps the misuse
        :set_blocking_kernel_timeout(0.05)
      for i = #h.registry, 1, -1 do h.registry[i] = nil end
      run.run(run.plan({b}, {}, {dev}), {log = function() end, l2_bytes = math.random(0, 8192), clock_source = false}) end,
  -- the ci criterion: parameters out of range (refused by name) or not, and a
  -- tiny benchmark measured on it (grouped cold samples, timer, cpu-only), its pictures
  function() local h = require("cuda.bench.harness"); local b = h.register(function() end)
      local params = {["max-width"] = ({any(), 0, -1, 1/0, 0/0, 1e-300, 0.5})[math.random(7)],
                      confidence = ({any(), 0, 1, 1.5, 0/0, 0.5, 0.999})[math.random(7)]}
      for i = #h.registry, 1, -1 do h.registry[i] = nil end
      return b:set_stopping_criterion("ci", params) end,
  function() local buf, h, run = pick("buffer"), require("cuda.bench.harness"), require("cuda.bench.run")
      local timer, cpu = math.random(3) == 1, math.random(4) == 1
      local b = h.register(function(state)
        state:exec(function(launch, tm)
          if tm then tm:start() end
          if buf and not cpu then buf:fill(cuda.u8(2), launch.stream) end
          if tm then tm:stop() end
        end, {timer = timer or nil, batched = not timer and math.random(2) == 1})
      end):set_stopping_criterion("ci", {["max-width"] = ({0.5, 1e-3, any()})[math.random(3)]})
        :set_timeout(0.01):set_blocking_kernel_timeout(0.05):set_is_cpu_only(cpu):set_batch_target_time(1e-4)
      for i = #h.registry, 1, -1 do h.registry[i] = nil end
      local results = run.run(run.plan({b}, {}, {dev}), {log = function() end, l2_bytes = math.random(0, 8192),
        clock_source = false})
      return require("cuda.bench.svg").pictures(results) end,
  -- cuda.bench.stats and the pictures with values of any kind, and --svg's folders that cannot be
  function() local stats = require("cuda.bench.stats")
      local fns = {function() return stats.t_quantile(any(), any()) end, function() return stats.t_cdf(any(), any()) end,
        function() return stats.t_table(any(), any()) end, function() return stats.incomplete_beta(any(), any(), any()) end,
        function() return stats.interval({any(), any(), 1.0}, any(), any()) end,
        function() return stats.median_interval({1.0, 2.0, any()}, any(), any(), any()) end}
      return fns[math.random(#fns)]() end,
  function() local bsvg = require("cuda.bench.svg")
      local dirs = {({42, {}, true})[math.random(3)], "", "/dev/null/x", fuzz_dir .. "/svg\0x", cubin_path .. "/x",
        fuzz_dir .. "/svg"}
      local st = {name = "s", index = {}, samples = {any(), 1e-6, 2e-6}, n_samples = math.random(0, 3),
        summaries = {{tag = "nv/cold/time/gpu/mean", value = any()}}}
      return bsvg.write({{name = "f", axes = {}, states = {st}}}, dirs[math.random(#dirs)]) end,
  -- a state measuring a stream it was given (a picked one: maybe closed, capturing, or a
  -- context's), with summary columns of any type
  function() local s, h, run = pick("stream"), require("cuda.bench.harness"), require("cuda.bench.run")
      local b = h.register(function(state)
        if math.random(2) == 1 then state:set_stream(math.random(4) == 1 and any() or s) end
        state:add_element_count(math.random(0, 9), math.random(2) == 1 and "E" or any())
        state:add_global_memory_reads(math.random(0, 9), math.random(2) == 1 and "R" or any())
        state:add_global_memory_writes(math.random(0, 9), math.random(2) == 1 and "W" or any())
        state:add_summary(math.random(2) == 1 and "S" or any(), any())
        state:exec(function(launch) if math.random(8) == 1 then state:set_stream(s) end end, {batched = false})
      end):set_stopping_criterion("sample_count", {["sample-count"] = 2}):set_timeout(0.01)
        :set_blocking_kernel_timeout(0.05)
      for i = #h.registry, 1, -1 do h.registry[i] = nil end
      run.run(run.plan({b}, {}, {dev}), {log = function() end, l2_bytes = math.random(0, 4096), clock_source = false}) end,
  -- overrides stitched from fragments: names with spaces and colons, flags, lists, ranges near the int64 limits
  function() local axes = require("cuda.bench.axes")
      local parts = {"A", " A ", "Dur (s)", "A:B", "", "[pow2]", "[]", "[x", "=", "==", "[1:9:2]", "[1,,2]",
                     "[0:9223372036854775807]", "[-9223372036854775808:9223372036854775807:4611686018427387904]",
                     "1,2", "[a:b]", "inf", "nan", "[1:2:3:4]", "[ 1 , 2 ]", "[0:1.1:0.3]", "[5:1]", "]"}
      local spec = {}
      for i = 1, math.random(1, 4) do spec[i] = parts[math.random(#parts)] end
      local kinds = {{"int64", {1}}, {"float64", {1.5}}, {"string", {"x"}}, {"type", {"int", "float"}}}
      local k = kinds[math.random(#kinds)]
      return axes.parse_override(table.concat(spec), {axes.new("A", k[1], k[2], math.random(4) == 1 and "pow2" or nil),
        axes.new("Dur (s)", "float64", {1})}) end,
  -- the State API with any arguments, on a GPU state or a cpu-only one
  function() local h = require("cuda.bench.harness")
      local b = h.register(function() end):add_int64_axis("N", {1}):add_float64_axis("F", {0.5})
      local st = h.new_state(b, b.axes, {N = 1, F = 1}, {}, math.random(2) == 1 and dev or nil)
      local calls = {"get_int64_or_default", "get_float64_or_default", "get_string_or_default", "get_int64", "get_float64",
                     "get_axis_values_as_string", "set_min_samples", "set_timeout", "set_throttle_threshold",
                     "set_cold_warmup_runs", "set_cold_max_warmup_walltime", "set_batch_target_time",
                     "set_blocking_kernel_timeout", "set_run_once", "set_disable_blocking_kernel", "skip",
                     "add_element_count", "set_element_count", "get_stream", "get_short_description", "get_kernel"}
      for _ = 1, math.random(1, 6) do
        local m = calls[math.random(#calls)]
        pcall(st[m], st, math.random(2) == 1 and "N" or any(), any())
      end
      h.close_state(st)
      for i = #h.registry, 1, -1 do h.registry[i] = nil end end,
  -- a hold (cuda.bench's blocking kernel, src/hold.c) around a few random
  -- calls: releases are deferred, waits let the hold go; it always ends
  function() local buf = pick("buffer")
      if not (buf and pcall(cuda.hold_begin, buf)) then return end
      local kinds = {"stream", "event", "buffer", "graph", "mr", "array"}
      for _ = 1, math.random(0, 3) do
        local r, o = math.random(3), pick(kinds[math.random(#kinds)])
        if r == 1 then pcall(close, o) elseif r == 2 then collectgarbage() elseif o and o.sync then pcall(o.sync, o) end
      end
      return cuda.hold_end() end,
  -- graph definitions (s:end_capture{instantiate = false}): a fork/join
  -- capture, clones, executables, child nodes, updates, DOT, closes
  function() local s, s2 = pick("stream"), pick("stream"); if s and s2 then
      s:begin_capture()
      s2:wait(s:record())
      graph_buffer():fill(cuda.u8(3), s2)
      s:wait(s2:record())
      graph_buffer():fill(cuda.u8(4), s)
      add("def", s:end_capture{instantiate = false}) end end,
  function() local s, g = pick("stream"), pick("graph"); if s and g then   -- a launch captured: its nodes
      s:begin_capture(); pcall(g.launch, g, s); add("def", s:end_capture{instantiate = false}) end end,
  function() local d = pick("def"); if d then add("def", d:clone()) end end,
  function() local d = pick("def"); if d then origin[add("graph", d:instantiate(math.random(2) == 1 and {use_node_priority = true} or nil))] = "definition" end end,
  function() local b, d = pick("builder"), pick("def"); if b and d then add("node", b:child(pick("node"), d)) end end,
  function() local g, d = pick("graph"), pick("def"); if g and d then g:update(d) end end,
  function() local d = pick("def"); if d then return d.node_count, d.node_types, tostring(d), d.device, d:debug_dot_str{verbose = math.random(2) == 1} end end,
  function() local d = pick("def"); if d then d:debug_dot_print(fuzz_dir .. "/def.dot", {handles = true}) end end,
  function() close(pick("def")) end,
  function() local list = pool.def; if list and #list > 0 then table.remove(list, math.random(#list)) end end,
  -- views of memory cudalua did not allocate (StridedMemoryView, DLPack):
  -- over the fixed buffers, which are never closed, in layouts that fit
  -- them (a foreign address is trusted); anything else only when it is
  -- made and dropped, never touched
  function() local sv = foreign_view(); if sv then add("view", sv); add("buffer", sv.buffer) end end,
  function() return cuda.StridedMemoryView{ptr = any(), dtype = any(), shape = any(), strides = any(),
                                            device = any(), memory = any(), owner = any(), readonly = any()} end,
  function() return cuda.StridedMemoryView{ptr = graph_buffer().ptr, dtype = "uint8", shape = {any(), any()},
                                            strides = {any(), any()}} end,
  function() local v = pick("view"); if v then return v.readonly, v.owner, v.exporting_obj end end,
  function() local v, versioned = pick("view"), math.random(2) == 1
    if not (v and fakecuda) then return end
    local a = v:to_dlpack{versioned = versioned}
    local ok, w = pcall(cuda.from_dlpack, a, {versioned = versioned})
    if not ok then fakecuda.dlpack_delete(a, versioned) error(w, 0) end
    add("view", w) end,
  function() if not fakecuda then return end
    local versioned = math.random(2) == 1
    local bits = ({8, 16, 32, 64})[math.random(4)]
    local a = fakecuda.dlpack_make{versioned = versioned, data = graph_buffer().ptr, shape = {math.random(0, 2048 // bits)},
                                   device_type = ({1, 2, 3, 13, 4})[math.random(5)], code = math.random(0, 2),
                                   bits = bits, flags = math.random(0, 1)}
    local ok, w = pcall(cuda.from_dlpack, a, {versioned = versioned})
    if not ok then fakecuda.dlpack_delete(a, versioned) error(w, 0) end
    add("view", w) end,
  function() local v = pick("view"); if v and fakecuda then
      local a = v:to_dlpack(any())      -- {} or nil only: a legacy tensor, deleted as a C library would
      fakecuda.dlpack_delete(a, false) end end,
  -- cudalua bench's printers, options and compare: NVBench's output of
  -- random values (the encoders raise strings on what they cannot write)
  function() local out, run = require("cuda.bench.output"), require("cuda.bench.run")
      local hints = {"duration", "item_rate", "byte_rate", "bytes", "frequency", "percentage", "sample_size", "x"}
      local s = {tag = "t", name = "n", hint = hints[math.random(#hints)], type = ({"int64", "float64", "string"})[math.random(3)],
                 value = any()}
      run.format_value(s)
      return out.encode({out.object("v", any(), "w", {any(), any()}), out.fmt_float(math.random() * 10 ^ math.random(-300, 300))}) end,
  function() local cl = require("cuda.bench.cli")
      local specs = {"all", "0", "[0,1]", "[0:1]", "0,1", "all,0", "[0:9:0]", "", "[", "-1", "1e9", any()}
      cl.device_ids(tostring(specs[math.random(#specs)]), math.random(0, 4))
      local targets = {"timeout", "skip_time", "min_samples", "max_noise", "max_angle", "target_samples", "stopping_criterion",
                       "batch_target_time", "throttle_threshold", "devices", "axis", "profile", "no_batch", "benchmark"}
      local b = require("cuda.bench.harness").register(function() end):add_int64_axis("N", {1})
      local h = require("cuda.bench.harness")
      for i = #h.registry, 1, -1 do h.registry[i] = nil end
      cl.configurations({{target = targets[math.random(#targets)], value = tostring(any())}}, {b}, math.random(0, 2)) end,
  function() local nvc = require("cuda.bench.compare")
      local doc = {benchmarks = {{name = tostring(any()), states = {{device = any(), axis_values = {{name = "N", value = any()}},
        summaries = {{tag = "nv/cold/time/gpu/mean", data = {{name = "value", value = any()}}}}}}}}}
      if math.random(3) == 1 then doc.benchmarks[1].states[1] = any() end
      if nvc.check(doc) then nvc.markdown(nvc.compare(doc, doc)) end end,
}

local skip = {}                         -- FUZZ_SKIP="36 39": actions left out, to tell a hang's cause
for a in (os.getenv("FUZZ_SKIP") or ""):gmatch("%d+") do skip[tonumber(a)] = true end
local per_call_draws = os.getenv("FUZZ_DRAWS") ~= "sequential"
local only                              -- FUZZ_ONLY="3 17 40": the calls run, the rest left out
for i in (os.getenv("FUZZ_ONLY") or ""):gmatch("%d+") do only = only or {}; only[tonumber(i)] = true end

local function fuzz(seed)
  math.randomseed(seed)
  print("# seed " .. seed)
  local errors_ok, bad_error = 0, nil
  for i = 1, ncalls do
    if per_call_draws then math.randomseed(seed, i) end
    local a = math.random(#actions)
    local run = not skip[a] and (only == nil or only[i])
    if trace and run then io.stderr:write(i, " ", a, "\n") end
    local ok, err = true, nil
    if run then ok, err = pcall(actions[a]) end
    recent = {}
    if not ok then
      if type(err) == "string" or getmetatable(err) == cuda.Error then
        errors_ok = errors_ok + 1
      elseif not bad_error then
        bad_error = ("call %d: a %s error: %s"):format(i, type(err), tostring(err))
      end
    end
    -- keep the pools small so the run stays fast
    for _, list in pairs(pool) do if #list > 32 then table.remove(list, 1) end end
  end
  if fakecuda then fakecuda.reset(); fakecuda.nvml_hostile() end
  t.ok(bad_error == nil, "every error is a string or a cuda.Error" .. (bad_error and (": " .. bad_error) or ""))
  t.ok(errors_ok > 0, ("seed %d: %d calls, %d raised"):format(seed, ncalls, errors_ok))
  pool = {}
  collectgarbage(); collectgarbage()
  t.ok(true, "the process survived seed " .. seed)
end

for _, seed in ipairs(seeds) do fuzz(seed) end
t.done()
