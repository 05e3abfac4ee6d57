-- A seeded fuzzer: random calls over live objects, with random and extreme
-- arguments, random closes (parents before children too), collections at
-- random points, finalizers that close objects and injected driver
-- failures. The process must survive and every error must be a string or
-- a cuda.Error. FUZZ_SEED=N replays a run (FUZZ_SEED="1 2 3" runs those
-- seeds in turn), FUZZ_CALLS=N sets each run's length; it runs under the
-- fake driver, or on the real GPU with FUZZ_REAL=1.
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
local recent = {}                   -- what pick() handed to the call in flight
local origin = setmetatable({}, {__mode = "k"})   -- for FUZZ_TRACE: where a stream or graph came from
local function add(kind, obj) if obj ~= nil then pool[kind] = pool[kind] or {} table.insert(pool[kind], obj) end return obj end
local function pick(kind)
  local list = pool[kind]
  if not list or #list == 0 then return nil end
  local obj = list[math.random(#list)]
  recent[#recent + 1] = obj
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
  function() local b = pick("buffer"); if b then
      if fakecuda and math.random(2) == 1 then fakecuda.fail("cuMemAddressReserve") end
      b:grow(math.random(2) == 1 and (b.size or 0) + math.random(0, 5 << 20) or any(), pick("stream")) end end,
  function() add("mr", cuda.PinnedMemoryResource{numa_id = math.random(2) == 1 and dev.host_numa_id or any()}) end,
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
}

local trace = os.getenv("FUZZ_TRACE")   -- FUZZ_TRACE=1: each call's action on stderr, for a crash's repro
local skip = {}                         -- FUZZ_SKIP="36 39": actions left out, to tell a hang's cause
for a in (os.getenv("FUZZ_SKIP") or ""):gmatch("%d+") do skip[tonumber(a)] = true end

local function fuzz(seed)
  math.randomseed(seed)
  print("# seed " .. seed)
  local errors_ok, bad_error = 0, nil
  for i = 1, ncalls do
    local a = math.random(#actions)
    if trace then io.stderr:write(i, " ", a, "\n") end
    local ok, err = true, nil
    if not skip[a] then ok, err = pcall(actions[a]) end
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
  if fakecuda then fakecuda.reset() end
  t.ok(bad_error == nil, "every error is a string or a cuda.Error" .. (bad_error and (": " .. bad_error) or ""))
  t.ok(errors_ok > 0, ("seed %d: %d calls, %d raised"):format(seed, ncalls, errors_ok))
  pool = {}
  collectgarbage(); collectgarbage()
  t.ok(true, "the process survived seed " .. seed)
end

for _, seed in ipairs(seeds) do fuzz(seed) end
t.done()
