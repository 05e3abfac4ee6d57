-- Bad input to every part of the cuda module: each row is {description,
-- code, pattern}; the code must raise an error whose message matches the
-- pattern (it names the problem). Rows marked device = true need a device:
-- without one they skip, so the table runs twice, once as is (no GPU
-- here: those rows skip) and once under the fake driver (every row).
-- A row marked todo = "reason" is a known bad message (TAP # TODO). One
-- marked fake = true needs the fake driver (it steers it): it skips on a GPU.
-- One marked clean = true may also raise nothing (it must not crash, and
-- an error must still match); one marked ok = true must raise nothing.
local t = require "tap"
local cuda = require "cuda"

local rows = {}
local function row(desc, code, pattern, opts)
  opts = opts or {}
  rows[#rows + 1] = {desc = desc, code = code, pattern = pattern, device = opts.device or opts.fake,
                     fake = opts.fake, todo = opts.todo, clean = opts.clean, ok = opts.ok}
end
local function drow(desc, code, pattern, opts)
  opts = opts or {}
  opts.device = true
  row(desc, code, pattern, opts)
end

-- cuda.* functions and typed scalars (no device needed)
row("Device: a string", "cuda.Device('x')", "number expected")
row("Device: a float", "cuda.Device(0.5)", "number has no integer representation")
row("Device: negative", "cuda.Device(-1)", "")
row("device_count: no args needed, extra table ok?", "cuda.LaunchConfig(5)", "table expected")
row("LaunchConfig: unknown key", "cuda.LaunchConfig{grid = 1, block = 1, gird = 2}", "unknown option 'gird'")
row("LaunchConfig: grid 0", "cuda.LaunchConfig{grid = 0, block = 1}", "grid")
row("LaunchConfig: block 0", "cuda.LaunchConfig{grid = 1, block = 0}", "block")
row("LaunchConfig: grid a string", "cuda.LaunchConfig{grid = 'x', block = 1}", "grid")
row("LaunchConfig: block a table of strings", "cuda.LaunchConfig{grid = 1, block = {'a'}}", "block")
row("LaunchConfig: grid with 4 dims", "cuda.LaunchConfig{grid = {1, 1, 1, 1}, block = 1}", "grid")
row("LaunchConfig: negative shmem", "cuda.LaunchConfig{grid = 1, block = 1, shmem = -1}", "shmem")
row("LaunchConfig: huge block", "cuda.LaunchConfig{grid = 1, block = 2^40}", "block")
row("LaunchConfig: cluster 0", "cuda.LaunchConfig{grid = 1, block = 1, cluster = 0}", "cluster")
row("LaunchConfig: a float grid", "cuda.LaunchConfig{grid = 1.5, block = 1}", "grid")
for _, ty in ipairs{"u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64", "f32", "f64"} do
  row(ty .. ": a string", ("cuda.%s('x')"):format(ty), "expects a number, got string")
  row(ty .. ": a table", ("cuda.%s({})"):format(ty), "expects a number, got table")
  row(ty .. ": nothing", ("cuda.%s()"):format(ty), "value expected")
end
for _, c in ipairs{{"u8", 256}, {"u8", -1}, {"u16", 65536}, {"i8", 128}, {"i8", -129}, {"i16", 32768},
                   {"u32", 2^32}, {"i32", 2^31}, {"u16", -1}, {"u32", -1}} do
  row(("%s(%s): out of range"):format(c[1], c[2]), ("cuda.%s(%d)"):format(c[1], c[2]), "out of range")
end
for _, ty in ipairs{"u8", "i32"} do
  row(ty .. ": a float", ("cuda.%s(1.5)"):format(ty), "integer")
end
row("u64: a float", "cuda.u64(1.5)", "uint64 expects an integer, got 1.5")
row("u64: not a number", "cuda.u64(0/0)", "uint64 expects an integer")
row("u64: infinite", "cuda.u64(1/0)", "uint64 expects an integer, got inf")
row("u64: past 2^64", "cuda.u64(2^64)", "out of range for uint64")
row("u64: a negative float", "cuda.u64(-2.0)", "out of range for uint64")
row("ptr: a string", "cuda.ptr('x')", "uint64 expects a number, got string")
row("ptr: negative", "cuda.ptr(-1)", "out of range for uint64")
row("ptr: nothing", "cuda.ptr()", "value expected")
row("ptr: two values", "cuda.ptr(1, 2)", "unexpected argument")
row("demangle: a table", "cuda.demangle({})", "string expected")
row("parse_signature: nothing", "cuda.parse_signature()", "string %(a declaration")
row("parse_signature: a number", "cuda.parse_signature(5)", "string %(a declaration")
row("parse_signature: garbage", "cuda.parse_signature('int (*)[3]')", "bad signature: parameter 1")
row("parse_signature: a NUL byte", "cuda.parse_signature('int\\0, float')", "bad signature")
row("PinnedMemoryResource: bad option", "cuda.PinnedMemoryResource{poool = true}", "unknown option 'poool'")
row("PinnedMemoryResource: a number", "cuda.PinnedMemoryResource(5)", "table expected")
row("HostMemoryResource: allocate 0", "cuda.HostMemoryResource():allocate(0)", "")
row("HostMemoryResource: allocate negative", "cuda.HostMemoryResource():allocate(-1)", "")
row("HostMemoryResource: allocate a string", "cuda.HostMemoryResource():allocate('x')", "number expected")
row("Program: no source", "cuda.Program()", "string expected")
row("Program: a table source", "cuda.Program({})", "string expected")
row("Program: bad language", "cuda.Program('x', 'fortran')", "fortran")
row("Program: bad option", "cuda.Program('x', 'c++', {archh = 'sm_90'})", "unknown option 'archh'")
row("Program: options not a table", "cuda.Program('x', 'c++', 5)", "table expected")
row("Program: compile a bad target", "cuda.Program('extern \"C\" __global__ void f(){}', 'c++', {arch = 'sm_90'}):compile('exe')", "exe")
row("Program: compile broken code", "cuda.Program('this is not C++', 'c++', {arch = 'sm_90'}):compile('ptx')", "error")
row("ObjectCode.from_data: a number", "cuda.ObjectCode.from_data(5)", "")
row("ObjectCode.from_file: missing", "cuda.ObjectCode.from_file('/nonexistent/x.cubin')", "nonexistent")
row("launch: no stream", "cuda.launch()", "cuda%.Stream expected")
row("launch: a number stream", "cuda.launch(5)", "cuda%.Stream expected")
row("Graph: a string device", "cuda.Graph('x')", "cuda%.Device expected")

-- fixtures for the device rows (made on first use)
local fixtures
local function fixture()
  if fixtures then return fixtures end
  local dev = cuda.Device(0)
  dev:set_current()
  local f = {dev = dev, s = dev:create_stream(), ev = dev:create_event(), pinned = cuda.PinnedMemoryResource()}
  f.buf = f.pinned:allocate(64)
  f.v = f.buf:view("float32")
  f.closed_s = dev:create_stream(); f.closed_s:close()
  f.closed_ev = dev:create_event(); f.closed_ev:close()
  f.closed_buf = f.pinned:allocate(64); f.closed_buf:close()
  f.k = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias")
  f.cfg = cuda.LaunchConfig{grid = 1, block = 32}
  f.b = cuda.Graph(dev)
  f.sm = dev.resources.sm
  fixtures = f
  return f
end

-- Device
drow("Device: out of range ordinal", "cuda.Device(99)", "")
drow("set_current on a number", "f.dev.set_current(5)", "cuda%.Device expected")
drow("create_stream: unknown option", "f.dev:create_stream{prio = 1}", "unknown option 'prio'")
drow("create_stream: priority a string", "f.dev:create_stream{priority = 'x'}", "priority")
drow("create_stream: priority a float", "f.dev:create_stream{priority = 1.5}", "'priority' must be an integer")
drow("create_stream: options a number", "f.dev:create_stream(5)", "table expected")
drow("create_event: unknown option", "f.dev:create_event{timming = true}", "unknown option 'timming'")
drow("create_event: options a string", "f.dev:create_event('x')", "table expected")
drow("memory_info on a string", "f.dev.memory_info('x')", "cuda%.Device expected")
drow("sync on a table", "f.dev.sync({})", "cuda%.Device expected")
drow("properties: assignment", "f.dev.properties = 1", "")
drow("create_context: no table", "f.dev:create_context()", "table expected")
drow("create_context: unknown option", "f.dev:create_context{sm = 1}", "unknown option 'sm'")
drow("create_context: a number resource", "f.dev:create_context{resources = {5}}", "not a cuda%.SMResource")
drow("create_context: no resources", "f.dev:create_context{resources = {}}", "1 to 32 resources")
drow("create_context: resources a string", "f.dev:create_context{resources = 'x'}", "list of cuda%.SMResource")
-- SMResource
drow("split: no table", "f.sm:split()", "table expected")
drow("split: no count", "f.sm:split{}", "'count'")
drow("split: count 0", "f.sm:split{count = 0}", "must be 1 to")
drow("split: count too large", "f.sm:split{count = 100000}", "must be 1 to")
drow("split: count a string", "f.sm:split{count = 'x'}", "count")
drow("split: unknown option", "f.sm:split{count = 8, groupz = 1}", "unknown option 'groupz'")
drow("split: too many groups", "f.sm:split{count = 8, groups = 1000}", "'groups' must be 1 to")
drow("split: on a string", "f.sm.split('x', {count = 1})", "cuda%.SMResource expected")
-- Stream
drow("record: a number", "f.s:record(5)", "")
drow("record: unknown option", "f.s:record{timming = true}", "unknown option")
drow("wait: a number", "f.s:wait(5)", "cuda%.Event or cuda%.Stream")
drow("wait: nothing", "f.s:wait()", "cuda%.Event or cuda%.Stream")
drow("wait: a closed event", "f.s:wait(f.closed_ev)", "cuda%.Event is closed")
drow("wait: a closed stream", "f.s:wait(f.closed_s)", "cuda%.Stream is closed")
drow("sync: closed stream", "f.closed_s:sync()", "cuda%.Stream is closed")
drow("record: closed stream", "f.closed_s:record()", "cuda%.Stream is closed")
drow("is_done: closed stream", "return f.closed_s.is_done", "cuda%.Stream is closed")
drow("priority: closed stream", "return f.closed_s.priority", "cuda%.Stream is closed")
drow("begin_capture: unknown mode", "f.s:begin_capture('globall')", "globall")
drow("begin_capture: closed", "f.closed_s:begin_capture()", "cuda%.Stream is closed")
drow("end_capture: not capturing", "f.s:end_capture()", "")
drow("sync on a string", "f.s.sync('x')", "cuda%.Stream expected")
-- Event
drow("event sync: closed", "f.closed_ev:sync()", "cuda%.Event is closed")
drow("event is_done: closed", "return f.closed_ev.is_done", "cuda%.Event is closed")
drow("event minus a number", "return f.ev - 5", "")
drow("event minus a closed event", "return f.ev - f.closed_ev", "closed")
drow("event minus unrecorded", "return f.dev:create_event{timing = true} - f.dev:create_event{timing = true}", "")
drow("event sync on a table", "f.ev.sync({})", "cuda%.Event expected")
-- memory resources
drow("allocate 0 bytes", "f.pinned:allocate(0)", "")
drow("allocate negative", "f.pinned:allocate(-5)", "")
drow("allocate a string", "f.pinned:allocate('x')", "number expected")
drow("allocate with a number stream", "f.dev.memory_resource:allocate(64, 5)", "cuda%.Stream")
drow("allocate with a closed stream", "f.dev.memory_resource:allocate(64, f.closed_s)", "cuda%.Stream is closed")
drow("allocate too much", "f.dev.memory_resource:allocate(2^62, f.s)", "")
drow("DeviceMemoryResource: bad option", "cuda.DeviceMemoryResource(f.dev, {release = 1})", "unknown option 'release'")
drow("DeviceMemoryResource: a string device", "cuda.DeviceMemoryResource('x')", "cuda%.Device expected")
drow("DeviceMemoryResource: negative threshold", "cuda.DeviceMemoryResource(f.dev, {release_threshold = -1})", "release_threshold")
drow("trim: a string", "cuda.DeviceMemoryResource(f.dev):trim('x')", "bytes to keep must be an integer, got string")
drow("allocate on a closed pool", "local p = cuda.DeviceMemoryResource(f.dev); p:close(); p:allocate(8, f.s)", "closed")
-- Buffer
drow("copy_from: a number", "f.buf:copy_from(5)", "cuda%.Buffer or cuda%.View expected")
drow("copy_to: a string", "f.buf:copy_to('x')", "cuda%.Buffer or cuda%.View expected")
drow("copy_from: size mismatch", "f.buf:copy_from(f.pinned:allocate(8))", "size")
drow("copy_from: closed source", "f.buf:copy_from(f.closed_buf)", "cuda%.Buffer is closed")
drow("copy_to: closed buffer", "f.closed_buf:copy_to(f.buf)", "cuda%.Buffer is closed")
drow("fill: a string", "f.buf:fill('x')", "")
drow("fill: a table", "f.buf:fill({})", "")
drow("fill: u8 too big", "f.buf:fill(256)", "")
drow("fill: closed", "f.closed_buf:fill(cuda.u8(0))", "cuda%.Buffer is closed")
drow("fill: an f64 on a 4-byte multiple? no: u64 on 60 bytes", "f.pinned:allocate(60):fill(cuda.u64(1))", "")
drow("slice: negative offset", "f.buf:slice(-1, 8)", "")
drow("slice: past the end", "f.buf:slice(0, 1000)", "")
drow("slice: a string", "f.buf:slice('x', 8)", "number expected")
drow("view: unknown dtype", "f.buf:view('float128')", "float128")
drow("view: a number dtype", "f.buf:view(5)", "")
drow("view: closed buffer", "f.closed_buf:view('float32')", "cuda%.Buffer is closed")
drow("view: size not a multiple", "f.pinned:allocate(6):view('float32')", "")
drow("view: device memory, summed", "f.dev.memory_resource:allocate(64, f.s):view('float32'):sum()", "host cannot read")
drow("prefetch: pinned memory", "f.buf:prefetch(f.dev, f.s)", "")
drow("advise: unknown advice", "cuda.ManagedMemoryResource():allocate(64):advise('read_mostlyy', f.dev)", "read_mostlyy")
drow("advise: a number device", "cuda.ManagedMemoryResource():allocate(64):advise('read_mostly', 5)", "")
drow("buffer size: closed", "return f.closed_buf.size", "")
-- View
drow("view index 0", "return f.v[0]", "")
drow("view index past the end", "return f.v[17]", "")
drow("view index a string value", "f.v[1] = 'x'", "")
drow("view index a float", "return f.v[1.5]", "")
drow("view fill: a string", "f.v:fill('x')", "expects a number, got string")
drow("view iota: a string", "f.v:iota('x')", "number expected")
drow("view random: bad range", "f.v:random('a', 'b')", "number expected")
drow("view copy: other length", "f.v:copy(f.pinned:allocate(8):view('float32'))", "")
drow("view copy: a number", "f.v:copy(5)", "")
drow("view add: a string", "f.v:add('x')", "")
drow("view mul: a table", "f.v:mul({})", "")
drow("view div: a string", "f.v:div('x')", "")
drow("view scale: a string", "f.v:scale('x')", "")
drow("view allclose: a number", "f.v:allclose(5)", "")
drow("view allclose: other length", "f.v:allclose(f.pinned:allocate(8):view('float32'))", "")
drow("view range: reversed", "f.v:range(10, 2)", "")
drow("view range: past the end", "f.v:range(1, 100)", "")
drow("view of a closed buffer", "local b = f.pinned:allocate(8); local v = b:view('float32'); b:close(); return v[1]", "closed")
drow("view to_table: closed", "local b = f.pinned:allocate(8); local v = b:view('float32'); b:close(); return v:to_table()", "closed")
drow("view to_table: a string", "f.v:to_table('x')", "")
-- shaped and device views
drow("view: shape a string", "f.buf:view('float32', 'x')", "integer or table")
drow("view: shape negative", "f.buf:view('float32', {-1})", "shape%[1%]")
drow("view: shape a float", "f.buf:view('float32', {2.5})", "shape%[1%]")
drow("view: shape empty", "f.buf:view('float32', {})", "1 to 8 dimensions")
drow("view: nine dimensions", "f.buf:view('float32', {1, 1, 1, 1, 1, 1, 1, 1, 1})", "1 to 8 dimensions")
drow("view: shape past the buffer", "f.buf:view('float32', {17})", "past the buffer")
drow("view: shape overflow", "f.buf:view('float32', {2^62, 2^62})", "overflow")
drow("view: strides overflow", "f.buf:view('float32', {2, 2}, {2^62, 2^62})", "overflow")
drow("view: strides past the buffer", "f.buf:view('float32', {4, 4}, {5, 1})", "past the buffer")
drow("view: strides without shape", "f.buf:view('float32', nil, {1})", "strides need a shape")
drow("view: strides of another rank", "f.buf:view('float32', {4, 4}, {1})", "as many dimensions")
drow("view: strides a string", "f.buf:view('float32', {4}, {'x'})", "strides%[1%]")
drow("View: a number buffer", "cuda.View(5, 'float32')", "cuda%.Buffer expected")
drow("device view: read", "return f.dev.memory_resource:allocate(64, f.s):view('float32')[1]", "host cannot read")
drow("device view: write", "f.dev.memory_resource:allocate(64, f.s):view('float32')[1] = 1", "host cannot read")
drow("device view: fill", "f.dev.memory_resource:allocate(64, f.s):view('float32'):fill(1)", "host cannot read")
drow("device view: to_table", "f.dev.memory_resource:allocate(64, f.s):view('float32'):to_table()", "host cannot read")
drow("device view: an operand", "f.v:add(f.dev.memory_resource:allocate(64, f.s):view('float32'))", "host cannot read")
drow("strided view: sum", "f.buf:view('float32', {4, 4}, {1, 4}):sum()", "not contiguous")
drow("strided view: range", "f.buf:view('float32', {4, 4}, {1, 4}):range(1, 2)", "not contiguous")
drow("strided view: copy_to", "f.buf:view('float32', {4, 4}, {1, 4}):copy_to(f.pinned:allocate(64))", "strided")
drow("view copy_to: size mismatch", "f.v:copy_to(f.pinned:allocate(8))", "sizes must match")
drow("view copy_from: a number", "f.v:copy_from(5)", "cuda%.Buffer or cuda%.View expected")
drow("view copy_from: closed view", "local b = f.pinned:allocate(64); local v = b:view('float32'); b:close(); f.v:copy_from(v)", "closed")
drow("launch: a closed view", "local b = f.pinned:allocate(64); local v = b:view('float32'); b:close(); cuda.launch(f.s, f.cfg, f.k, v, cuda.f32(1), cuda.f32(1), cuda.u64(1))", "closed")
-- a device that reaches pageable memory (HMM, ATS) takes it: the row is for the others
if not (cuda.is_available() and cuda.Device(0).properties.pageable_memory_access == 1) then
  drow("launch: a pageable view", "cuda.launch(f.s, f.cfg, f.k, cuda.HostMemoryResource():allocate(64):view('float32'), cuda.f32(1), cuda.f32(1), cuda.u64(1))", "pageable")
end
-- copy_batch
drow("copy_batch: a number list", "cuda.copy_batch(f.s, 5)", "table expected")
drow("copy_batch: no stream", "cuda.copy_batch(nil, {})", "cuda%.Stream expected")
drow("copy_batch: closed stream", "cuda.copy_batch(f.closed_s, {{f.buf, f.buf}})", "cuda%.Stream is closed")
drow("copy_batch: legacy stream", "cuda.copy_batch(f.dev.legacy_default_stream, {{f.buf, f.buf}})", "legacy default stream")
drow("copy_batch: a number pair", "cuda.copy_batch(f.s, {5})", "copy 1 must be a table")
drow("copy_batch: a string dst", "cuda.copy_batch(f.s, {{'x', f.buf}})", "dst must be a cuda%.Buffer")
drow("copy_batch: no src", "cuda.copy_batch(f.s, {{f.buf}})", "src must be a cuda%.Buffer")
drow("copy_batch: closed src", "cuda.copy_batch(f.s, {{f.buf, f.closed_buf}})", "closed")
drow("copy_batch: closed dst", "cuda.copy_batch(f.s, {{f.closed_buf, f.buf}})", "closed")
drow("copy_batch: size mismatch", "cuda.copy_batch(f.s, {{f.buf, f.pinned:allocate(8)}})", "sizes must match")
drow("copy_batch: size too big", "cuda.copy_batch(f.s, {{f.buf, f.buf, 65}})", "do not fit")
drow("copy_batch: size 0", "cuda.copy_batch(f.s, {{f.buf, f.buf, 0}})", "size must be an integer >= 1")
drow("copy_batch: size negative", "cuda.copy_batch(f.s, {{f.buf, f.buf, -1}})", "size must be an integer >= 1")
drow("copy_batch: size huge", "cuda.copy_batch(f.s, {{f.buf, f.buf, math.maxinteger}})", "do not fit")
drow("copy_batch: size a float", "cuda.copy_batch(f.s, {{f.buf, f.buf, 2.5}})", "size must be an integer >= 1")
drow("copy_batch: unknown option", "cuda.copy_batch(f.s, {}, {order = 1})", "unknown option 'order'")
drow("copy_batch: bad order", "cuda.copy_batch(f.s, {}, {src_access_order = 'never'})", "never")
drow("copy_batch: order a number", "cuda.copy_batch(f.s, {}, {src_access_order = 5})", "src_access_order")
drow("copy_batch: bad hint", "cuda.copy_batch(f.s, {}, {dst_location_hint = 'gpu'})", "dst_location_hint must be")
drow("copy_batch: options a number", "cuda.copy_batch(f.s, {}, 5)", "table expected")
-- issue 27: copies of one batch that depend on each other
drow("copy_batch: overlapping destinations", "cuda.copy_batch(f.s, {{f.buf:slice(0, 8), f.pinned:allocate(8)}, {f.buf:slice(4, 8), f.pinned:allocate(8)}})", "copies 1 and 2 write overlapping bytes")
drow("copy_batch: the same destination twice", "local x = f.pinned:allocate(8); cuda.copy_batch(f.s, {{f.buf:slice(0, 8), x}, {f.pinned:allocate(8), x}, {f.buf:slice(0, 8), x}})", "copies 1 and 3 write overlapping bytes")
drow("copy_batch: reads another's destination", "cuda.copy_batch(f.s, {{f.buf:slice(0, 8), f.pinned:allocate(8)}, {f.pinned:allocate(8), f.buf:slice(0, 8)}})", "copy 2 reads bytes that copy 1 writes")
-- issue 27: a managed resource's preferred location
drow("ManagedMemoryResource: a bad location type", "cuda.ManagedMemoryResource{preferred_location_type = 'gpu'}", "invalid option 'gpu'")
drow("ManagedMemoryResource: host with a location", "cuda.ManagedMemoryResource{preferred_location = 1, preferred_location_type = 'host'}", "takes no preferred_location")
drow("ManagedMemoryResource: a table location", "cuda.ManagedMemoryResource{preferred_location = {}}", "preferred_location must be a cuda%.Device")
drow("ManagedMemoryResource: a float location", "cuda.ManagedMemoryResource{preferred_location = 0.5}", "preferred_location")
drow("ManagedMemoryResource: location -2", "cuda.ManagedMemoryResource{preferred_location = -2}", "preferred_location must be >= %-1")
drow("ManagedMemoryResource: a device on host_numa", "cuda.ManagedMemoryResource{preferred_location = f.dev, preferred_location_type = 'host_numa'}", "a host NUMA node id")
drow("ManagedMemoryResource: unknown option", "cuda.ManagedMemoryResource{prefered_location = 0}", "unknown option 'prefered_location'")
-- issue 27: per-copy options
drow("copy_batch: a list of options too short", "cuda.copy_batch(f.s, {{f.buf, f.pinned:allocate(64)}, {f.pinned:allocate(8), f.pinned:allocate(8)}}, {{}})", "a list of 1 option sets for 2 copies")
drow("copy_batch: a set that is a string", "cuda.copy_batch(f.s, {{f.buf, f.pinned:allocate(64)}}, {'any'})", "options%[1%]: a table of options expected")
drow("copy_batch: an unknown option in a set", "cuda.copy_batch(f.s, {{f.buf, f.pinned:allocate(64)}}, {{gran = 1}})", "options%[1%]: unknown option 'gran'")
drow("copy_batch: a bad order in a set", "cuda.copy_batch(f.s, {{f.buf, f.pinned:allocate(64)}}, {{src_access_order = 2}})", "options%[1%]: src_access_order: invalid option '2'")
drow("copy_batch: a list with a field", "cuda.copy_batch(f.s, {{f.buf, f.pinned:allocate(64)}}, {{}, prefer_overlap = true})", "has no field 'prefer_overlap'")
-- smaller cuda.core gaps
drow("set_deallocation_stream: a number", "f.buf:set_deallocation_stream(5)", "cuda%.Stream expected")
drow("set_deallocation_stream: closed stream", "f.buf:set_deallocation_stream(f.closed_s)", "cuda%.Stream is closed")
drow("set_deallocation_stream: closed buffer", "f.closed_buf:set_deallocation_stream(f.s)", "cuda%.Buffer is closed")
drow("set_deallocation_stream: a slice", "f.buf:slice(0, 8):set_deallocation_stream(f.s)", "a slice frees nothing")
drow("set_deallocation_stream: on a string", "f.buf.set_deallocation_stream('x', f.s)", "cuda%.Buffer expected")
-- ObjectCode, Kernel
drow("get_kernel: missing name", "require('cuda.kernels').load(f.dev, 'scale_and_bias.cu', 'nope')", "nope")
drow("occupancy: shmem a string", "f.k:occupancy(32, 'x')", "number expected")
drow("occupancy: block 0", "f.k:occupancy(0)", "")
drow("occupancy: a string", "f.k:occupancy('x')", "number expected")
drow("occupancy: block too big", "f.k:occupancy(4096)", "", {todo = "module.c gives a count for a block above the device's 1024 threads"})
drow("ObjectCode.from_data: garbage", "cuda.ObjectCode.from_data('garbage', 'cubin'):get_kernel('x')", "")
drow("signature: nothing", "f.k:signature()", "string %(a declaration")
drow("signature: too few types", "f.k:signature('float*')", "1 parameter declared, the kernel has 4")
drow("signature: a size that does not fit", "f.k:signature('float*, double, float, size_t')", "parameter 2 %(double%) is 8 bytes")
drow("get_kernel: a bad signature", "f.k.object_code:get_kernel('scale_and_bias', 'long float')", "'long float' is not a type")
drow("launch: 2.5 for a size_t", "cuda.launch(f.s, f.cfg, f.k, f.buf, 1, 1, 2.5)", "2%.5 is not an integer")
drow("launch: an address for a pointer", "cuda.launch(f.s, f.cfg, f.k, f.buf.ptr, 1, 1, 1)", "takes a cuda%.Buffer, a view or cuda%.ptr")
drow("launch: a string for a float", "cuda.launch(f.s, f.cfg, f.k, f.buf, '1', 1, 1)", "a string for a float parameter")
-- launch
drow("launch: too few arguments", "cuda.launch(f.s, f.cfg, f.k)", "takes 4 arguments")
drow("launch: too many arguments", "cuda.launch(f.s, f.cfg, f.k, f.buf, cuda.f32(1), cuda.f32(1), cuda.u64(1), 5)", "takes 4 arguments")
drow("launch: a boolean argument", "cuda.launch(f.s, f.cfg, f.k, f.buf, true, cuda.f32(1), cuda.u64(1))", "")
drow("launch: wrong scalar type", "cuda.launch(f.s, f.cfg, f.k, f.buf, cuda.f64(1), cuda.f32(1), cuda.u64(1))", "")
drow("launch: a string argument", "cuda.launch(f.s, f.cfg, f.k, 'x', cuda.f32(1), cuda.f32(1), cuda.u64(1))", "")
drow("launch: a closed buffer", "cuda.launch(f.s, f.cfg, f.k, f.closed_buf, cuda.f32(1), cuda.f32(1), cuda.u64(1))", "closed")
drow("launch: a closed stream", "cuda.launch(f.closed_s, f.cfg, f.k, f.buf, cuda.f32(1), cuda.f32(1), cuda.u64(1))", "cuda%.Stream is closed")
drow("launch: no config", "cuda.launch(f.s, 5, f.k)", "cuda%.LaunchConfig expected")
drow("launch: no kernel", "cuda.launch(f.s, f.cfg, 5)", "cuda%.Kernel expected")
drow("launch: block too big for the device", "cuda.launch(f.s, cuda.LaunchConfig{grid = 1, block = 2048}, f.k, f.buf, cuda.f32(1), cuda.f32(1), cuda.u64(1))", "")
drow("launch: shmem too big", "cuda.launch(f.s, cuda.LaunchConfig{grid = 1, block = 1, shmem = 2^30}, f.k, f.buf, cuda.f32(1), cuda.f32(1), cuda.u64(1))", "")
-- Graph (captured), GraphBuilder
drow("graph launch: a number stream", "f.s:begin_capture(); local g = f.s:end_capture(); g:launch(5)", "cuda%.Stream")
drow("graph launch: closed graph", "f.s:begin_capture(); local g = f.s:end_capture(); g:close(); g:launch(f.s)", "cuda%.Graph is closed")
drow("graph upload: closed stream", "f.s:begin_capture(); local g = f.s:end_capture(); g:upload(f.closed_s)", "cuda%.Stream is closed")
drow("end_capture: unknown option", "f.s:begin_capture(); local ok, e = pcall(f.s.end_capture, f.s, {auto_free = true}); f.s:end_capture(); error(e)", "unknown option 'auto_free'")
drow("update: a number source", "f.s:begin_capture(); local g = f.s:end_capture(); g:update(5)", "cuda%.GraphBuilder or cuda%.Graph expected")
drow("update: closed source", "f.s:begin_capture(); local g = f.s:end_capture(); f.s:begin_capture(); local h = f.s:end_capture(); h:close(); g:update(h)", "cuda%.Graph is closed")
drow("update: closed builder", "f.s:begin_capture(); local g = f.s:end_capture(); local b = cuda.Graph(f.dev); b:close(); g:update(b)", "cuda%.GraphBuilder is closed")
drow("update: another topology", "f.s:begin_capture(); local g = f.s:end_capture(); local b = cuda.Graph(f.dev); b:empty(); g:update(b)", "the topology changed")
drow("GraphMemoryResource: a string device", "cuda.GraphMemoryResource('x')", "cuda%.Device expected")
drow("graph memory: not capturing", "cuda.GraphMemoryResource(f.dev):allocate(16, f.s)", "the stream is not capturing")
drow("graph memory: size 0", "cuda.GraphMemoryResource(f.dev):allocate(0, f.s)", "at least 1 byte")
drow("graph memory: a float size", "cuda.GraphMemoryResource(f.dev):allocate(1.5, f.s)", "number has no integer representation")
drow("graph memory: closed stream", "cuda.GraphMemoryResource(f.dev):allocate(16, f.closed_s)", "cuda%.Stream is closed")
drow("graph memory: closed resource", "local gm = cuda.GraphMemoryResource(f.dev); gm:close(); gm:allocate(16, f.s)", "cuda%.GraphMemoryResource is closed")
drow("graph memory: free before the graph ran", "local gm = cuda.GraphMemoryResource(f.dev); f.s:begin_capture(); local b = gm:allocate(16, f.s); f.s:end_capture(); b:close(f.s)", "after a launch of the graph")
-- issue 27: a graph whose memory the program frees runs once per buffer
drow("graph memory: relaunch before the free", "local gm = cuda.GraphMemoryResource(f.dev); f.s:begin_capture(); local b = gm:allocate(16, f.s); local g = f.s:end_capture(); g:launch(f.s); local ok, e = pcall(g.launch, g, f.s); b:close(f.s); f.s:sync(); error(e)", "still allocated by its last launch: free it first")
drow("graph memory: relaunch after the program freed it", "local gm = cuda.GraphMemoryResource(f.dev); f.s:begin_capture(); local b = gm:allocate(16, f.s); local g = f.s:end_capture(); g:launch(f.s); b:close(f.s); g:launch(f.s)", "its buffer is closed: no buffer would own")
drow("graph memory: relaunch after close() for Lua", "local gm = cuda.GraphMemoryResource(f.dev); f.s:begin_capture(); local b = gm:allocate(16, f.s); local g = f.s:end_capture(); b:close(); g:launch(f.s)", "capture the work again")
drow("update_kernel on a captured graph", "f.s:begin_capture(); local g = f.s:end_capture(); g:update_kernel(nil, f.cfg, f.k)", "captured")
drow("builder memset: 256", "f.b:memset(nil, f.buf, 256)", "a byte is 0 to 255")
drow("builder memset: a string buffer", "f.b:memset(nil, 'x', 0)", "cuda%.Buffer expected")
drow("builder memcpy: size mismatch", "f.b:memcpy(nil, f.buf, f.pinned:allocate(8))", "sizes differ")
drow("builder memcpy: pageable", "f.b:memcpy(nil, f.buf, cuda.HostMemoryResource():allocate(64))", "pageable")
drow("builder empty: bad dependency", "f.b:empty{5}", "dependency 1 is not a cuda%.GraphNode")
drow("builder empty: a string dependency", "f.b:empty('x')", "cuda%.GraphNode or a list")
drow("builder empty: 65 dependencies", "local d = {} for i = 1, 65 do d[i] = f.b:empty() end f.b:empty(d)", "at most 64")
drow("builder child: itself", "f.b:child(nil, f.b)", "its own child")
drow("builder child: a number", "f.b:child(nil, 5)", "cuda%.GraphBuilder expected")
drow("builder record: a number", "f.b:record(nil, 5)", "cuda%.Event expected")
drow("builder wait: closed event", "f.b:wait(nil, f.closed_ev)", "cuda%.Event is closed")
drow("builder kernel: too few", "f.b:kernel(nil, f.cfg, f.k)", "takes 4 arguments")
drow("builder: another graph's node", "f.b:empty(cuda.Graph(f.dev):empty())", "belongs to another graph")
drow("builder instantiate: unknown option", "f.b:instantiate{device_launc = true}", "unknown option 'device_launc'")
drow("builder conditional handle: negative", "f.b:create_conditional_handle(-1)", "0 to 4294967295")
drow("builder if_cond: no handle", "f.b:if_cond(nil, 5)", "conditional handle")
drow("builder while_loop: a u32", "f.b:while_loop(nil, cuda.u32(1))", "conditional handle")
drow("builder: closed", "local b = cuda.Graph(f.dev); b:close(); b:empty()", "cuda%.GraphBuilder is closed")
drow("builder body: parent closed", "local b = cuda.Graph(f.dev); local _, body = b:if_cond(nil, b:create_conditional_handle()); b:close(); body:empty()", "owns this conditional body is closed")
-- Context
drow("context create_stream: blocking", "local c = f.dev:create_context{resources = {f.sm:split{count = 8}[1]}}; c:create_stream{non_blocking = false}", "non%-blocking")
drow("context: closed", "local c = f.dev:create_context{resources = {f.sm:split{count = 8}[1]}}; c:close(); return c.resources", "cuda%.Context is closed")
drow("context create_stream: closed", "local c = f.dev:create_context{resources = {f.sm:split{count = 8}[1]}}; c:close(); c:create_stream()", "cuda%.Context is closed")
drow("context create_stream: unknown option", "local c = f.dev:create_context{resources = {f.sm:split{count = 8}[1]}}; c:create_stream{prio = 1}", "unknown option 'prio'")
-- CUDA IPC (src/ipc.c)
drow("DeviceMemoryResource: pool a number", "cuda.DeviceMemoryResource(f.dev, {pool = 1})", "pool")
drow("ipc_export: pool memory", "f.dev.memory_resource:allocate(64, f.s):ipc_export()", "not made to be shared")
drow("ipc_export: host memory", "cuda.HostMemoryResource():allocate(64):ipc_export()", "only device memory")
drow("ipc_export: managed memory", "cuda.ManagedMemoryResource():allocate(64):ipc_export()", "only device memory")
drow("DeviceMemoryResource: ipc a string", "cuda.DeviceMemoryResource(f.dev, {ipc = 'yes'})", "ipc")
drow("DeviceMemoryResource: ipc without a pool", "cuda.DeviceMemoryResource(f.dev, {ipc = true, pool = false})", "ipc = true is a pool's option")
drow("ipc_pool_handle: not a shared pool", "f.dev.memory_resource:ipc_pool_handle()", "made to be shared")
drow("ipc_pool_handle: plain memory", "cuda.DeviceMemoryResource(f.dev, {pool = false}):ipc_pool_handle()", "made to be shared")
drow("ipc_pool_handle: a closed resource", "local m = cuda.DeviceMemoryResource(f.dev, {ipc = true}); m:close(); m:ipc_pool_handle()", "is closed")
drow("IpcPoolHandle: closed", "local h = cuda.DeviceMemoryResource(f.dev, {ipc = true}):ipc_pool_handle(); h:close(); return h.fd", "cuda%.IpcPoolHandle is closed")
drow("ipc_pool_open: no fd", "cuda.ipc_pool_open()", "file descriptor must be an integer")
drow("ipc_pool_open: a negative fd", "cuda.ipc_pool_open(-1)", "file descriptor")
drow("ipc_pool_open: a huge fd", "cuda.ipc_pool_open(1 << 40)", "file descriptor")
drow("ipc_pool_open: not a pool's", "cuda.ipc_pool_open(0)", "invalid argument")
drow("ipc_pool_open: a bad device", "cuda.ipc_pool_open(0, 'x')", "cuda%.Device expected")
drow("ipc_open: a pool not imported", "cuda.ipc_open(string.rep('x', 64), 64, f.dev.memory_resource)", "not a pool of another process")
drow("ipc_export: a closed buffer", "local b = cuda.DeviceMemoryResource(f.dev, {pool = false}):allocate(64); b:close(); b:ipc_export()", "cuda%.Buffer is closed")
drow("ipc_export: not a buffer", "f.buf.ipc_export(f.s)", "cuda%.Buffer expected")
drow("IpcExport: closed", "local e = cuda.DeviceMemoryResource(f.dev, {pool = false}):allocate(64):ipc_export(); e:close(); return e.handle", "cuda%.IpcExport is closed")
drow("ipc_open: a number", "cuda.ipc_open(5, 64)", "not a CUDA IPC handle")
drow("ipc_open: a short string", "cuda.ipc_open('abc', 64)", "not a CUDA IPC handle")
drow("ipc_open: size 0", "cuda.ipc_open(string.rep('x', 64), 0)", "size must be >= 1")
drow("ipc_open: a float size", "cuda.ipc_open(string.rep('x', 64), 1.5)", "size")
drow("ipc_open: a bad device", "cuda.ipc_open(string.rep('x', 64), 64, {})", "cuda%.Device expected")
drow("ipc_open: not a handle", "cuda.ipc_open(string.rep('x', 64), 64)", "invalid argument")
drow("ipc_open: own handle", "local e = cuda.DeviceMemoryResource(f.dev, {pool = false}):allocate(64):ipc_export(); cuda.ipc_open(e.handle, e.size)", "invalid device context")
-- Array, TextureObject, SurfaceObject
drow("Array: no table", "cuda.Array()", "table expected")
drow("Array: a string", "cuda.Array('float32')", "table expected")
drow("Array: no width", "cuda.Array{}", "needs width")
drow("Array: width a string", "cuda.Array{width = 'x'}", "field 'width'")
drow("Array: negative width", "cuda.Array{width = -4}", "field 'width' must be >= 1")
drow("Array: width NaN", "cuda.Array{width = 0/0}", "field 'width'")
drow("Array: width 2^63", "cuda.Array{width = 2^63}", "field 'width'")
drow("Array: height a table", "cuda.Array{width = 4, height = {}}", "field 'height'")
drow("Array: depth negative", "cuda.Array{width = 4, height = 4, depth = -1}", "field 'depth' must be >= 0")
drow("Array: 3 channels", "cuda.Array{width = 4, channels = 3}", "1, 2 or 4")
drow("Array: 0 channels", "cuda.Array{width = 4, channels = 0}", "field 'channels' must be >= 1")
drow("Array: unknown format", "cuda.Array{width = 4, format = 'double'}", "unknown format 'double'")
drow("Array: layered without depth", "cuda.Array{width = 4, layered = true}", "needs depth")
drow("Array: layered a number", "cuda.Array{width = 4, layered = 1}", "field 'layered' must be a boolean")
drow("Array: unknown option", "cuda.Array{width = 4, widht = 4}", "unknown option 'widht'")
drow("Array: an extra argument", "cuda.Array({width = 4}, 5)", "unexpected argument")
drow("Array: overflow", "cuda.Array{width = 2^30, height = 2^30, depth = 2^30, channels = 4}", "overflows")
drow("Array copy_from: a number", "cuda.Array{width = 4}:copy_from(5, f.s)", "cuda%.Buffer expected")
drow("Array copy_from: no stream", "cuda.Array{width = 16}:copy_from(f.buf)", "cuda%.Stream expected")
drow("Array copy_from: sizes", "cuda.Array{width = 4}:copy_from(f.buf, f.s)", "sizes must match")
drow("Array copy_to: closed buffer", "cuda.Array{width = 16}:copy_to(f.closed_buf, f.s)", "cuda%.Buffer is closed")
drow("Array copy_to: closed stream", "cuda.Array{width = 16}:copy_to(f.buf, f.closed_s)", "cuda%.Stream is closed")
drow("Array copy_to: closed array", "local a = cuda.Array{width = 16}; a:close(); a:copy_to(f.buf, f.s)", "cuda%.Array is closed")
drow("Array copy_to: on a string", "cuda.Array{width = 16}.copy_to('x', f.buf, f.s)", "cuda%.Array expected")
drow("TextureObject: nothing", "cuda.TextureObject()", "cuda%.Buffer expected")
drow("TextureObject: a stream", "cuda.TextureObject(f.s)", "cuda%.Buffer expected")
drow("TextureObject: options a number", "cuda.TextureObject(cuda.Array{width = 4}, 5)", "table expected")
drow("TextureObject: unknown option", "cuda.TextureObject(cuda.Array{width = 4}, {filter = 'linear'})", "unknown option 'filter'")
drow("TextureObject: bad filter mode", "cuda.TextureObject(cuda.Array{width = 4}, {filter_mode = 'nearest'})", "unknown value 'nearest'")
drow("TextureObject: bad read mode", "cuda.TextureObject(cuda.Array{width = 4}, {read_mode = 1})", "field 'read_mode' must be a string")
drow("TextureObject: address mode a number", "cuda.TextureObject(cuda.Array{width = 4}, {address_mode = 1})", "must be \"wrap\"")
drow("TextureObject: 4 address modes", "cuda.TextureObject(cuda.Array{width = 4}, {address_mode = {'wrap', 'wrap', 'wrap', 'wrap'}})", "1 to 3 modes")
drow("TextureObject: border colour strings", "cuda.TextureObject(cuda.Array{width = 4}, {border_color = {'a', 'b', 'c', 'd'}})", "4 numbers")
drow("TextureObject: negative anisotropy", "cuda.TextureObject(cuda.Array{width = 4}, {max_anisotropy = -1})", "must be >= 0")
drow("TextureObject: normalized_coords a string", "cuda.TextureObject(cuda.Array{width = 4}, {normalized_coords = 'yes'})", "must be a boolean")
drow("TextureObject: format on an array", "cuda.TextureObject(cuda.Array{width = 4}, {channels = 2})", "unknown option 'channels'")
drow("TextureObject: pinned buffer, bad format", "cuda.TextureObject(f.buf, {format = 'f32'})", "unknown format 'f32'")
drow("TextureObject: buffer, pitch too small", "cuda.TextureObject(f.buf, {width = 4, height = 2, pitch = 8})", "pitch' must be at least")
drow("TextureObject: buffer, too tall", "cuda.TextureObject(f.buf, {width = 4, height = 5})", "smaller than")
drow("Array: cubemap not square", "cuda.Array{width = 4, height = 5, cubemap = true}", "faces are square")
drow("Array: cubemap depth 12", "cuda.Array{width = 4, height = 4, depth = 12, cubemap = true}", "a cubemap has depth 6")
drow("Array: layered cubemap depth 9", "cuda.Array{width = 4, height = 4, depth = 9, layered = true, cubemap = true}", "multiple of 6")
drow("Array: cubemap a string", "cuda.Array{width = 4, height = 4, cubemap = 'yes'}", "field 'cubemap' must be a boolean")
drow("Array copy_from: face of a 2-D array", "cuda.Array{width = 4, height = 4}:copy_from(f.buf, f.s, {face = 1})", "'face' is for a cubemap")
drow("Array copy_from: face 7", "cuda.Array{width = 4, height = 4, cubemap = true}:copy_from(f.buf, f.s, {face = 7})", "must be <= 6")
drow("Array copy_to: layer past the last", "cuda.Array{width = 4, depth = 2, layered = true}:copy_to(f.buf, f.s, {layer = 3})", "must be <= 2")
drow("Array copy_to: face without its layer", "cuda.Array{width = 4, height = 4, depth = 12, layered = true, cubemap = true}:copy_to(f.buf, f.s, {face = 1})", "needs its layer")
drow("Array copy_to: options a string", "cuda.Array{width = 4}:copy_to(f.buf, f.s, 'face')", "table expected")
drow("Array copy_to: unknown option", "cuda.Array{width = 4}:copy_to(f.buf, f.s, {slice = 1})", "unknown option 'slice'")
drow("register_host: nothing", "cuda.register_host()", "cuda%.Buffer, cuda%.View, string or address")
drow("register_host: a table", "cuda.register_host({})", "cuda%.Buffer, cuda%.View, string or address")
drow("register_host: pinned", "cuda.register_host(f.buf)", "page%-locked already")
drow("register_host: closed buffer", "cuda.register_host(f.closed_buf)", "cuda%.Buffer is closed")
drow("register_host: size too big", "cuda.register_host(cuda.HostMemoryResource():allocate(64), 65)", "more than the 64 bytes")
drow("register_host: size 0", "cuda.register_host(cuda.HostMemoryResource():allocate(64), 0)", "size must be >= 1")
drow("register_host: raw address, no size", "cuda.register_host(cuda.ptr(4096))", "needs its size")
drow("register_host: null", "cuda.register_host(0, 64)", "null address")
drow("register_host: wraps", "cuda.register_host(-8, 64)", "wraps past the end")
drow("register_host: writable string", "cuda.register_host('abc', nil, {read_only = false})", "immutable")
drow("register_host: empty string", "cuda.register_host('')", "nothing to register")
drow("register_host: unknown option", "cuda.register_host('abc', nil, {locked = true})", "unknown option 'locked'")
drow("register_host: option not a boolean", "cuda.register_host('abc', nil, {portable = 'yes'})", "must be a boolean")
drow("register_host: extra argument", "cuda.register_host('abc', nil, nil, 1)", "unexpected argument")
drow("register_host: twice", "local b = cuda.HostMemoryResource():allocate(64); local r = cuda.register_host(b); cuda.register_host(b)", "overlaps a live registration")
drow("TextureObject: pitch * (height - 1) wraps to 0", "cuda.TextureObject(f.buf, {width = 4, height = 2^24 + 1, pitch = 2^40})", "smaller than the texture's pitch")
drow("TextureObject: pitch * height far past 2^64", "cuda.TextureObject(f.buf, {width = 4, height = 2^30, pitch = 2^40 - 32})", "smaller than the texture's pitch")
drow("TextureObject: closed buffer", "cuda.TextureObject(f.closed_buf)", "cuda%.Buffer is closed")
drow("TextureObject: closed array", "local a = cuda.Array{width = 4}; a:close(); cuda.TextureObject(a)", "cuda%.Array is closed")
drow("TextureObject: extra argument", "cuda.TextureObject(f.buf, nil, 5)", "unexpected argument")
-- TensorMap (tiled, im2col, replace_address)
local TM = "{dtype = 'float32', shape = {16}, box = {4}}"
drow("TensorMap.tiled: nothing", "cuda.TensorMap.tiled()", "cuda%.Buffer expected")
drow("TensorMap.tiled: a stream", "cuda.TensorMap.tiled(f.s, " .. TM .. ")", "cuda%.Buffer expected")
drow("TensorMap.tiled: no options", "cuda.TensorMap.tiled(f.buf)", "table expected")
drow("TensorMap.tiled: unknown option", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {16}, box = {4}, boxes = 1})", "unknown option 'boxes'")
drow("TensorMap.tiled: extra argument", "cuda.TensorMap.tiled(f.buf, " .. TM .. ", 5)", "unexpected argument")
drow("TensorMap.tiled: dtype a number", "cuda.TensorMap.tiled(f.buf, {dtype = 7, shape = {16}, box = {4}})", "field 'dtype'")
drow("TensorMap.tiled: unknown dtype", "cuda.TensorMap.tiled(f.buf, {dtype = 'int8', shape = {16}, box = {4}})", "unknown value 'int8'")
drow("TensorMap.tiled: shape a number", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = 16, box = {4}})", "field 'shape' must be a list")
drow("TensorMap.tiled: rank 6", "cuda.TensorMap.tiled(f.buf, {dtype = 'uint8', shape = {16, 1, 1, 1, 1, 1}, box = {16, 1, 1, 1, 1, 1}})", "rank %(#shape%) must be 1 to 5")
drow("TensorMap.tiled: size a string", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {'x'}, box = {4}})", "field 'shape'%[1%]")
drow("TensorMap.tiled: size NaN", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {0/0}, box = {4}})", "field 'shape'%[1%]")
drow("TensorMap.tiled: size 2^63", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {2^63}, box = {4}})", "field 'shape'%[1%]")
drow("TensorMap.tiled: size 1.5", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {1.5}, box = {4}})", "field 'shape'%[1%]")
drow("TensorMap.tiled: box 0", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {16}, box = {0}})", "field 'box'%[1%] must be >= 1")
drow("TensorMap.tiled: box 512", "cuda.TensorMap.tiled(f.buf, {dtype = 'uint8', shape = {1024}, box = {512}})", "field 'box'%[1%] must be <= 256")
drow("TensorMap.tiled: box missing", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {16}})", "field 'box' must be a list of 1 integers")
drow("TensorMap.tiled: box of 12 bytes", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {16}, box = {3}})", "multiple of 16 bytes")
drow("TensorMap.tiled: element stride 9", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {16}, box = {4}, element_strides = {9}})", "must be <= 8")
drow("TensorMap.tiled: stride not 16", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {4, 2}, strides = {24}, box = {4, 1}})", "multiple of 16")
drow("TensorMap.tiled: stride negative", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {4, 2}, strides = {-16}, box = {4, 1}})", "must be >= 0")
drow("TensorMap.tiled: stride too small", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {8, 2}, strides = {16}, box = {4, 1}})", "less than the 32 bytes")
drow("TensorMap.tiled: bad swizzle", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {16}, box = {4}, swizzle = 'big'})", "unknown value 'big'")
drow("TensorMap.tiled: swizzle too narrow", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {64}, box = {16}, swizzle = '32B'})", "exceeds the swizzle span")
drow("TensorMap.tiled: nan fill on ints", "cuda.TensorMap.tiled(f.buf, {dtype = 'int32', shape = {16}, box = {4}, oob_fill = 'nan'})", "floating%-point dtype")
drow("TensorMap.tiled: interleave rank 1", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {16}, box = {4}, interleave = '16B'})", "needs rank")
drow("TensorMap.tiled: bigger than the buffer", "cuda.TensorMap.tiled(f.buf, {dtype = 'float32', shape = {1 << 30}, box = {4}})", "the memory holds")
drow("TensorMap.tiled: overflow", "cuda.TensorMap.tiled(f.buf, {dtype = 'float64', shape = {2^32, 2^32, 2^32}, strides = {2^35, 2^39}, box = {2, 1, 1}})", "spans 2%^64 bytes or more")
drow("TensorMap.tiled: misaligned", "cuda.TensorMap.tiled(f.buf:slice(8, 56), {dtype = 'float32', shape = {4}, box = {4}})", "aligned to 16 bytes")
drow("TensorMap.tiled: closed buffer", "cuda.TensorMap.tiled(f.closed_buf, " .. TM .. ")", "cuda%.Buffer is closed")
drow("TensorMap.tiled: host memory", "cuda.TensorMap.tiled(cuda.HostMemoryResource():allocate(64), " .. TM .. ")", "pageable host memory")
drow("TensorMap.im2col: rank 2", "cuda.TensorMap.im2col(f.buf, {dtype = 'float32', shape = {4, 4}, lower_corner = {}, upper_corner = {}, channels_per_pixel = 4, pixels_per_column = 4})", "must be 3 to 5 for im2col")
drow("TensorMap.im2col: corner too far", "cuda.TensorMap.im2col(f.buf, {dtype = 'float32', shape = {4, 2, 2, 2, 1}, lower_corner = {16, 0, 0}, upper_corner = {0, 0, 0}, channels_per_pixel = 4, pixels_per_column = 4})", "must be <= 15")
drow("TensorMap.im2col: no corners", "cuda.TensorMap.im2col(f.buf, {dtype = 'float32', shape = {4, 2, 2}, channels_per_pixel = 4, pixels_per_column = 4})", "field 'lower_corner' must be a list")
drow("TensorMap.im2col: 0 channels", "cuda.TensorMap.im2col(f.buf, {dtype = 'float32', shape = {4, 2, 2}, lower_corner = {0}, upper_corner = {0}, channels_per_pixel = 0, pixels_per_column = 4})", "must be >= 1")
drow("TensorMap.im2col: a box", "cuda.TensorMap.im2col(f.buf, {dtype = 'float32', shape = {4, 2, 2}, box = {4, 1, 1}})", "unknown option 'box'")
drow("TensorMap replace_address: a number", "cuda.TensorMap.tiled(f.buf, " .. TM .. "):replace_address(5)", "cuda%.Buffer expected")
drow("TensorMap replace_address: closed buffer", "cuda.TensorMap.tiled(f.buf, " .. TM .. "):replace_address(f.closed_buf)", "cuda%.Buffer is closed")
drow("TensorMap replace_address: too small", "cuda.TensorMap.tiled(f.buf, " .. TM .. "):replace_address(f.buf:slice(0, 16))", "the memory holds 16")
drow("TensorMap replace_address: closed map", "local m = cuda.TensorMap.tiled(f.buf, " .. TM .. "); m:close(); m:replace_address(f.buf)", "cuda%.TensorMap is closed")
drow("TensorMap replace_address: on a string", "cuda.TensorMap.tiled(f.buf, " .. TM .. ").replace_address('x', f.buf)", "cuda%.TensorMap expected")
drow("SurfaceObject: nothing", "cuda.SurfaceObject()", "cuda%.Array expected")
drow("SurfaceObject: a buffer", "cuda.SurfaceObject(f.buf)", "cuda%.Array expected")
drow("SurfaceObject: no surface flag", "cuda.SurfaceObject(cuda.Array{width = 4})", "surface = true")
drow("SurfaceObject: closed array", "local a = cuda.Array{width = 4, surface = true}; a:close(); cuda.SurfaceObject(a)", "cuda%.Array is closed")
drow("launch: closed texture", "local tx = cuda.TextureObject(cuda.Array{width = 4}); tx:close(); cuda.launch(f.s, f.cfg, f.k, tx, cuda.f32(1), cuda.f32(1), cuda.u64(1))", "cuda%.TextureObject %(closed%) for a pointer parameter")
drow("launch: a texture for a float", "cuda.launch(f.s, f.cfg, f.k, f.buf, cuda.TextureObject(cuda.Array{width = 4}), cuda.f32(1), cuda.u64(1))", "cuda%.TextureObject.* for a float parameter")
drow("VirtualMemoryResource: a string", "cuda.VirtualMemoryResource('x')", "cuda%.Device expected")
drow("VirtualMemoryResource: device -1", "cuda.VirtualMemoryResource(-1)", "device id must be >= 0")
drow("VirtualMemoryResource: unknown option", "cuda.VirtualMemoryResource(f.dev, {gran = 1})", "unknown option 'gran'")
drow("VirtualMemoryResource: bad location", "cuda.VirtualMemoryResource{location = 'gpu'}", "'location' must be")
drow("VirtualMemoryResource: bad handle type", "cuda.VirtualMemoryResource{handle_type = 'dmabuf'}", "'handle_type' must be")
drow("VirtualMemoryResource: a Windows handle type", "cuda.VirtualMemoryResource{handle_type = 'win32'}", "is for Windows")
drow("VirtualMemoryResource: bad access", "cuda.VirtualMemoryResource{access = 'w'}", "'access' must be")
drow("VirtualMemoryResource: bad granularity", "cuda.VirtualMemoryResource{granularity = 4096}", "field 'granularity' must be a string")
drow("VirtualMemoryResource: numa_id on a device", "cuda.VirtualMemoryResource{numa_id = 1}", "for location = \"host_numa\"")
drow("VirtualMemoryResource: negative numa_id", "cuda.VirtualMemoryResource{location = 'host_numa', numa_id = -1}", "must be >= 0")
drow("VirtualMemoryResource: extra argument", "cuda.VirtualMemoryResource(f.dev, nil, 1)", "unexpected argument")
-- issue 27: cuda.core's VirtualMemoryResourceOptions, combinations the driver refuses
drow("VirtualMemoryResource: managed", "cuda.VirtualMemoryResource{allocation_type = 'managed'}", "pinned allocations only")
drow("VirtualMemoryResource: bad allocation type", "cuda.VirtualMemoryResource{allocation_type = 'paged'}", "'allocation_type' must be one of")
drow("VirtualMemoryResource: host_numa_current", "cuda.VirtualMemoryResource{location_type = 'host_numa_current'}", "give \"host_numa\" and numa_id")
drow("VirtualMemoryResource: an exported host allocation", "cuda.VirtualMemoryResource{location_type = 'host', handle_type = 'posix_fd'}", "exports no host allocation")
drow("VirtualMemoryResource: rdma on the host", "cuda.VirtualMemoryResource{location_type = 'host', gpu_direct_rdma = true}", "gpu_direct_rdma is for device memory")
drow("VirtualMemoryResource: rdma a number", "cuda.VirtualMemoryResource{gpu_direct_rdma = 1}", "'gpu_direct_rdma' must be a boolean")
drow("VirtualMemoryResource: location and location_type", "cuda.VirtualMemoryResource{location = 'device', location_type = 'host'}", "not both")
drow("VirtualMemoryResource: access and self_access", "cuda.VirtualMemoryResource{access = 'rw', self_access = 'r'}", "not both")
drow("VirtualMemoryResource: bad self_access", "cuda.VirtualMemoryResource{self_access = 'none'}", "'self_access' must be one of")
-- issue 29: an allocation spread over devices
drow("VirtualMemoryResource: devices a number", "cuda.VirtualMemoryResource{devices = 0}", "field 'devices' must be a list")
drow("VirtualMemoryResource: no devices", "cuda.VirtualMemoryResource{devices = {}}", "1 to 64 devices")
drow("VirtualMemoryResource: a device twice", "cuda.VirtualMemoryResource{devices = {f.dev, 0}}", "lists device 0 twice")
drow("VirtualMemoryResource: a string device", "cuda.VirtualMemoryResource{devices = {'gpu0'}}", "devices%[1%] must be a cuda%.Device")
drow("VirtualMemoryResource: a negative device", "cuda.VirtualMemoryResource{devices = {-1}}", "devices%[1%] must be >= 0")
drow("VirtualMemoryResource: a device and devices", "cuda.VirtualMemoryResource(f.dev, {devices = {f.dev}})", "not both")
drow("VirtualMemoryResource: devices on the host", "cuda.VirtualMemoryResource{devices = {f.dev, 1}, location_type = 'host'}", "location_type must be \"device\"")
drow("virtual_memory_info: a pool", "cuda.virtual_memory_info(f.pinned)", "not a cuda%.VirtualMemoryResource")
drow("grow: a pinned buffer", "f.buf:grow(128)", "only a buffer of a cuda%.VirtualMemoryResource")
drow("grow: shrinking", "cuda.VirtualMemoryResource():allocate(4096):grow(1)", "only grows")
drow("grow: a float", "cuda.VirtualMemoryResource():allocate(4096):grow(1.5)", "number has no integer representation")
drow("grow: a closed buffer", "f.closed_buf:grow(128)", "cuda%.Buffer is closed")
drow("grow: a closed stream", "cuda.VirtualMemoryResource():allocate(4096):grow(8192, f.closed_s)", "cuda%.Stream is closed")
drow("grow: huge", "cuda.VirtualMemoryResource():allocate(4096):grow(math.maxinteger)", "")
-- issue 27: what was made before a move is refused. The fake moves on an
-- injected failure; a GPU where the range after the buffer is taken by
-- the next allocation (made right after it).
local function moved_row(desc, make, use)
  drow("after a move: " .. desc, "local ok, fc = pcall(require, 'fakecuda'); " ..
       "local vmr = cuda.VirtualMemoryResource(); local b = vmr:allocate(4096, f.s); " .. make ..
       "; local blocker = vmr:allocate(4096, f.s); if ok then fc.fail('cuMemAddressReserve') end; " ..
       "b:grow(64 << 20, f.s); " .. use, "moved when it grew")
end
moved_row("copy from a view", "local v = b:view('uint8', 64)", "v:copy_to(f.buf, f.s)")
moved_row("copy into a view", "local v = b:view('uint8', 64)", "f.buf:copy_to(v, f.s)")
moved_row("a slice", "local v = b:slice(0, 64)", "v:fill(0, f.s)")
moved_row("copy_batch", "local v = b:view('uint8', 64)", "cuda.copy_batch(f.s, {{f.buf, v}})")
moved_row("a tensor map of a view", "local v = b:view('uint8', 64)",
          "cuda.TensorMap.tiled(v, {dtype = 'uint8', shape = {64}, box = {16}})")
drow("PinnedMemoryResource: numa_id a string", "cuda.PinnedMemoryResource{numa_id = 'x'}", "field 'numa_id'")
drow("PinnedMemoryResource: numa_id negative", "cuda.PinnedMemoryResource{numa_id = -2}", "field 'numa_id' must be >= 0")
drow("PinnedMemoryResource: numa_id without a pool", "cuda.PinnedMemoryResource{numa_id = 0, pool = false}", "pool = false contradicts")
drow("trim_graph_memory on a string", "f.dev.trim_graph_memory('x')", "cuda%.Device expected")
-- Linker: archs nvJitLink must not be given (it ended the process for "3")
local LINK_PTX = "cuda.ObjectCode.from_ptx('.version 8.0\\n.target sm_90\\n.address_size 64\\n')"
for _, arch in ipairs{"3", "sm_3", "sm_9", "sm_09", "lto_7", "compute_1", "sm_", "", "sm_90 -foo", "sm_90aa", "sm_12345", "gfx90a"} do
  row(("Linker: arch %q"):format(arch), ("cuda.Linker({%s}, {arch = %q})"):format(LINK_PTX, arch),
      "option 'arch': '.*' is not an architecture name")
end
for _, arch in ipairs{"sm_50", "sm_101", "compute_35", "9999"} do
  row(("Linker: arch %q"):format(arch), ("cuda.Linker({%s}, {arch = %q})"):format(LINK_PTX, arch),
      "is not an architecture this toolkit links for; it links for 75")
end
row("Linker: arch a number", "cuda.Linker({" .. LINK_PTX .. "}, {arch = 90})", "field 'arch' must be a string")
row("Linker: arch a table", "cuda.Linker({" .. LINK_PTX .. "}, {arch = {}})", "field 'arch' must be a string")
row("Linker: objects a string", "cuda.Linker('x', {arch = 'sm_90'})", "table expected")
row("Linker: link a bad target", "cuda.Linker({" .. LINK_PTX .. "}, {arch = 'sm_90'}):link('exe')", "invalid option 'exe'")
row("Linker: duplicate kernels", "local o = cuda.Program('extern \"C\" __global__ void k() {}', 'c++', {arch = 'sm_90', relocatable_device_code = true}):compile('ptx') return cuda.Linker({o, o}, {arch = 'sm_90'}):link('cubin')",
    "Multiple definition of 'k'")
row("Linker: garbage LTO-IR", "cuda.Linker({cuda.ObjectCode.from_ltoir('\\xed\\x43\\x4e\\x7f' .. ('\\xa5'):rep(64))}, {arch = 'sm_90', lto = true}):link('cubin')",
    "[Ll]ink[a-z]* [cf]")   -- "linking failed: ..." or, now and then, "nvJitLink crashed (signal 11 ..."

-- cuda.system (NVML, src/nvml.c): arguments are checked before NVML is opened
row("system.is_available: an argument", "cuda.system.is_available(1)", "unexpected argument")
row("system.device_count: an argument", "cuda.system.device_count({})", "unexpected argument")
row("system.Device: a string", "cuda.system.Device('x')", "cuda%.Device expected")
row("system.Device: negative", "cuda.system.Device(-1)", "device id must be >= 0")
row("system.Device: a float", "cuda.system.Device(0.5)", "device id must be an integer, got 0.5")
row("system.Device: two arguments", "cuda.system.Device(0, 0)", "unexpected argument")
row("system.get_driver_version: two arguments", "cuda.system.get_driver_version(true, 1)", "unexpected argument")
row("system.Device.__tostring on a number", "debug.getregistry()['cuda.system.Device'].__tostring(5)", "cuda%.system%.Device expected")
drow("system.Device: out of range ordinal", "cuda.system.Device(99)", "")
drow("system clock: a bad kind", "cuda.system.Device(0):clock('shader')", "clock kind must be \"sm\", \"memory\", \"graphics\" or \"video\", got 'shader'")
drow("system clock: a number kind", "cuda.system.Device(0):clock(1)", "clock kind %(a string%) expected, got number")
drow("system clock: no kind", "cuda.system.Device(0):clock()", "clock kind %(a string%) expected, got no value")
drow("system max_clock: an extra argument", "cuda.system.Device(0):max_clock('sm', 1)", "unexpected argument")
drow("system application_clock on a string", "cuda.system.Device(0).application_clock('x', 'sm')", "cuda%.system%.Device expected")
drow("system get: an unknown field", "cuda.system.Device(0):get('temprature')", "no field 'temprature' of cuda%.system%.Device")
drow("system get: a table", "cuda.system.Device(0):get({})", "string expected")
drow("system clock_event_reasons: an argument", "cuda.system.Device(0):clock_event_reasons(1)", "unexpected argument")
-- cuda.bench's harness (lua/cuda/bench_*.lua): registration, axes, settings, state, overrides
local BR = "require('cuda.bench').register(function() end)"
row("bench.register: a number", "require('cuda.bench').register(5)", "a function expected, got number")
row("bench axis: a string in an int64 axis", BR .. ":add_int64_axis('N', {1, 'x'})", "axis 'N': value 2 must be an integer")
row("bench axis: a float in an int64 axis", BR .. ":add_int64_axis('N', {1.5})", "must be an integer")
row("bench axis: no values", BR .. ":add_float64_axis('F', {})", "non%-empty list")
row("bench axis: an empty name", BR .. ":add_string_axis('', {'x'})", "an axis name must be a non%-empty string, got ''")
row("bench axis: a number name", BR .. ":add_string_axis(5, {'x'})", "an axis name must be a non%-empty string, got 5")
row("bench axis: pow2 exponent 63", BR .. ":add_int64_power_of_two_axis('B', {63})", "exponent 1 must be in 0..62")
row("bench axis: twice", BR .. ":add_int64_axis('N', {1}):add_int64_axis('N', {2})", "axis 'N' already exists")
row("bench axis: a number in a type axis", BR .. ":add_type_axis('T', {4})", "must be a string")
row("bench: unknown criterion", BR .. ":set_stopping_criterion('fastest')", "unknown criterion 'fastest'")
row("bench: a criterion parameter a string", BR .. ":set_stopping_criterion('stdrel', {['max-noise'] = 'x'})",
    "must be a number")
row("bench: ci max-width 0", BR .. ":set_stopping_criterion('ci', {['max-width'] = 0})",
    "criterion parameter 'max%-width' must be a number > 0")
row("bench: ci max-width infinite", BR .. ":set_stopping_criterion('ci', {['max-width'] = 1/0})",
    "criterion parameter 'max%-width' must be a number > 0")
row("bench: ci max-width NaN", BR .. ":set_stopping_criterion('ci', {['max-width'] = 0/0})", "'max%-width' must be")
row("bench: ci confidence 1", BR .. ":set_stopping_criterion('ci', {confidence = 1})",
    "criterion parameter 'confidence' must be a number between 0 and 1")
row("bench: ci confidence 0", BR .. ":set_stopping_criterion('ci', {confidence = 0})", "'confidence' must be")
row("bench: ci confidence a string", BR .. ":set_stopping_criterion('ci', {confidence = 'high'})",
    "'confidence' must be a number between 0 and 1 %(exclusive%), got high")
row("bench: ci confidence set later", "require('cuda.bench.criteria').new('ci', {confidence = -2})",
    "'confidence' must be")
row("bench stats: t_quantile of p 1", "require('cuda.bench.stats').t_quantile(1, 3)",
    "bad argument #1 to 't_quantile' %(a number between 0 and 1 expected, got 1%)")
row("bench stats: t_quantile of dof 0", "require('cuda.bench.stats').t_quantile(0.9, 0)",
    "bad argument #2 to 't_quantile' %(a finite number > 0 expected")
row("bench stats: t_cdf of dof -inf", "require('cuda.bench.stats').t_cdf(1, -1/0)", "bad argument #2 to 't_cdf'")
row("bench stats: incomplete_beta of a NaN", "require('cuda.bench.stats').incomplete_beta(0.5, 0/0, 1)",
    "bad argument #2 to 'incomplete_beta'")
row("bench stats: t_table too long", "require('cuda.bench.stats').t_table(0.95, 2^40)", "bad argument #2 to 't_table'")
row("bench stats: interval of strings", "require('cuda.bench.stats').interval({'a'}, 1, 0.95)",
    "bad argument #1 to 'interval' %(a number at 1 expected")
row("bench stats: interval past the samples", "require('cuda.bench.stats').interval({1}, 3, 0.95)",
    "bad argument #1 to 'interval'")
row("bench stats: median_interval of 0 sections", "require('cuda.bench.stats').median_interval({1, 2}, 2, 0, 0.9)",
    "bad argument #3 to 'median_interval'")
row("bench svg: onto a file", "require('cuda.bench.svg').write({}, '/dev/null/sub')",
    "cannot write into")
row("bench svg: a folder name not a string", "require('cuda.bench.svg').write({}, 42)", "a folder name is needed")
row("bench svg: a NUL in the folder name", "require('cuda.bench.svg').write({}, 'a\\0b')", "NUL")
row("svg.histogram: no bins", "require('cuda.svg').histogram({})", "svg.histogram: no bins")
row("svg.histogram: a bin backwards", "require('cuda.svg').histogram({{2, 1, 3}})", "bin 1 must be {lo, hi, count}")
row("bench: min_samples -1", BR .. ":set_min_samples(-1)", "integer >= 0 expected")
row("bench: timeout NaN", BR .. ":set_timeout(0/0)", "'set_timeout' %(a number of seconds >= 0")
row("bench: run_once a number", BR .. ":set_run_once(1)", "a boolean expected")
row("bench: zip of a missing axis", BR .. ":add_int64_axis('A', {1}):zip_axes{'A', 'B'}", "no axis named 'B'")
row("bench: an iteration space not a function", BR .. ":set_iteration_space(5)", "a function expected")
row("bench override: no such axis", "require('cuda.bench.axes').parse_override('X=[1]', {})", "names no axis")
row("bench override: a bad value", "local a = require('cuda.bench.axes'); a.parse_override('N=[1,y]', {a.new('N', 'int64', {1})})",
    "'y' is not an integer")
row("bench override: a zero step", "local a = require('cuda.bench.axes'); a.parse_override('N=[1:4:0]', {a.new('N', 'int64', {1})})",
    "the step of a range must be > 0")
row("bench state: a missing axis", "local h = require('cuda.bench.harness'); local b = h.register(function() end); " ..
    "h.new_state(b, {}, {}, {}, nil, nil):get_int64('Nope')", "has no axis of that name")
row("bench state: exec of a number", "local h = require('cuda.bench.harness'); local b = h.register(function() end); " ..
    "h.new_state(b, {}, {}, {}, nil, nil):exec(5)", "a function expected")
row("bench state: exec with an unknown option", "local h = require('cuda.bench.harness'); local b = h.register(function() end); " ..
    "h.new_state(b, {}, {}, {}, nil, nil):exec(function() end, {batch = true})", "unknown option 'batch'")
row("bench state: add_element_count negative", "local h = require('cuda.bench.harness'); local b = h.register(function() end); " ..
    "h.new_state(b, {}, {}, {}, nil, nil):add_element_count(-1)", "integer >= 0 expected")
row("bench state: skip without a reason", "local h = require('cuda.bench.harness'); local b = h.register(function() end); " ..
    "h.new_state(b, {}, {}, {}, nil, nil):skip()", "a reason string expected")
local ST = "local h = require('cuda.bench.harness'); local st = h.new_state(h.register(function() end), {}, {}, {}, nil); "
row("bench state: set_stream of a table", ST .. "st:set_stream({__cuda_stream__ = function() end})",
    "a cuda%.Stream expected, got table %(cudalua has no __cuda_stream__ protocol%)")
row("bench state: set_stream of nothing", ST .. "st:set_stream()", "a cuda%.Stream expected, got nil")
drow("bench state: set_stream of a closed stream", "local h = require('cuda.bench.harness'); " ..
     "h.new_state(h.register(function() end), {}, {}, {}, f.dev):set_stream(f.closed_s)", "the cuda%.Stream is closed")
row("bench state: a column name a number", ST .. "st:add_element_count(1, 5)",
    "bad argument #2 to 'add_element_count' %(a column name %(string%) or nil expected, got 5%)")
row("bench state: a reads column a table", ST .. "st:add_global_memory_reads(1, {})", "a column name %(string%) or nil expected, got table")
row("bench state: a writes column a boolean", ST .. "st:add_global_memory_writes(1, true)", "a column name %(string%) or nil expected, got true")
row("bench state: add_summary of a boolean", ST .. "st:add_summary('X', false)", "an integer, number or string expected, got false")
row("bench state: add_summary of an empty name", ST .. "st:add_summary('', 1)", "a column name %(non%-empty string%) expected")
row("bench state: or_default of the wrong type", ST .. "st:get_int64_or_default('N', 'x')", "a default int64 expected, got 'x'")
row("bench state: axis values in colour 1", ST .. "st:get_axis_values_as_string(1)", "a boolean expected, got 1")
row("bench state: get_kernel of a cpu-only state", ST .. "st:get_kernel('', 'k')", "a cpu%-only state has no device to compile")
row("bench state: get_stream of a cpu-only state", ST .. "st:get_stream()", "a cpu%-only state has no device, so no stream")
row("bench state: set_batch_target_time 0", ST .. "st:set_batch_target_time(0)", "a finite number of seconds > 0 expected, got 0")
row("bench state: set_timeout NaN", ST .. "st:set_timeout(0/0)", "'set_timeout' %(a number of seconds >= 0")
row("bench: throttle threshold 2", BR .. ":set_throttle_threshold(2)", "a fraction of the SM clock in 0%.%.1 %(0: no throttle watch%) expected, got 2")
row("bench: batch target time inf", BR .. ":set_batch_target_time(math.huge)", "a finite number of seconds > 0 expected, got inf")
row("bench: criterion string of a number", BR .. ":set_criterion_param_string('x', 5)", "bad argument #2 to 'set_criterion_param_string' %(a string expected, got 5%)")
row("bench: criterion string of a float parameter", BR .. ":set_criterion_param_string('max-noise', 'x')", "is a float64 parameter")
row("bench: criterion param name a number", BR .. ":set_criterion_param_float64(5, 1)", "a parameter name %(string%) expected, got 5")
row("bench axis: a repeated value", BR .. ":add_string_axis('S', {'a', 'a'})", "values 1 and 2 are the same")
row("bench override: a name with ':'", "require('cuda.bench.axes').parse_override('A:B=1', {})", "cannot hold ':'")
row("bench override: not a string", "require('cuda.bench.axes').parse_override(5, {})", "a string expected, got number")
row("bench override: an unbracketed list", "local a = require('cuda.bench.axes'); a.parse_override('N=1,2', {a.new('N', 'int64', {1})})",
    "is not a value, a list")
row("bench override: a range too large", "local a = require('cuda.bench.axes'); a.parse_override('N=[0:9223372036854775807]', {a.new('N', 'int64', {1})})",
    "more than 100000 values")
row("bench override: a range of strings", "local a = require('cuda.bench.axes'); a.parse_override('S=[a:b]', {a.new('S', 'string', {'a'})})",
    "needs a numeric axis")
row("bench override: an unclosed flag", "local a = require('cuda.bench.axes'); a.parse_override('N[pow2=1', {a.new('N', 'int64', {1})})",
    "not closed")
row("bench plan: a global override a benchmark lacks", "local r = require('cuda.bench.run'); " ..
    "r.plan({require('cuda.bench').register(function() end):set_name('x')}, {'N=1'}, {})", "the benchmark 'x' has no axis 'N'")
row("bench plan: not a benchmark", "require('cuda.bench.run').plan({5}, {}, {})", "a benchmark or {bench = b")
row("bench.run_all_benchmarks: a number", "require('cuda.bench').run_all_benchmarks(5)", "a list of arguments expected, got number")
row("bench.axis: the decorator form", "return require('cuda.bench').axis.int64", "add_int64_axis")
row("bench.option: no such option", "return require('cuda.bench').option.fastest", "no such NVBench option")
-- cudalua bench's command line, printers and compare (cuda.bench.cli, output, compare)
local BCLI = "local c = require('cuda.bench.cli'); local b = " .. BR .. "; "
row("bench --devices: all,0", "assert(require('cuda.bench.cli').device_ids('all,0', 2))", "'all' is not a device id")
row("bench --devices: a zero stride", "assert(require('cuda.bench.cli').device_ids('[0:1:0]', 2))", "not a stride")
row("bench --devices: a range past the devices", "assert(require('cuda.bench.cli').device_ids('[0:1000000000]', 2))",
    "no device 1000000000 %(2 found%)")
row("bench --devices: no such device", "assert(require('cuda.bench.cli').device_ids('[0,7]', 2))", "no device 7 %(2 found%)")
row("bench --timeout: a word", BCLI .. "c.configurations({{target = 'timeout', value = 'soon'}}, {b}, 0)",
    "%-%-timeout soon: 'soon' is not a number")
row("bench --batch-target-time: inf", BCLI .. "c.configurations({{target = 'batch_target_time', value = 'inf'}}, {b}, 0)",
    "not finite and positive")
row("bench --max-angle with stdrel", BCLI .. "c.configurations({{target = 'max_angle', value = '1'}}, {b}, 0)",
    "not valid for the active stopping criterion 'stdrel'")
row("bench -b: no such benchmark", BCLI .. "c.configurations({{target = 'benchmark', value = 'x'}}, {b}, 0)",
    "%-b x: no such benchmark")
row("bench output: encode a function", "require('cuda.bench.output').encode({print})", "cannot encode a function")
row("bench output: encode a table with keys", "require('cuda.bench.output').encode({a = coroutine.create(print)})",
    "neither a list nor an output.object")
row("bench compare: a benchmark without a name", "assert(require('cuda.bench.compare').check({benchmarks = {{}}}))",
    "benchmarks%[1%] has no name")
row("bench compare: benchmarks not a list", "assert(require('cuda.bench.compare').check({benchmarks = {x = 1}}))",
    "is not a list")
row("bench compare: an axis filter without =", "assert(require('cuda.bench.compare').axis_filter('N'))",
    "must be NAME=VALUE")
-- the hold of a stream by cuda.bench's blocking kernel (src/hold.c)
row("hold_begin: nothing", "cuda.hold_begin()", "cuda%.Buffer expected")
row("hold_begin: a number", "cuda.hold_begin(4)", "cuda%.Buffer expected")
drow("hold_begin: a closed buffer", "cuda.hold_begin(f.closed_buf)", "cuda%.Buffer is closed")
drow("hold_begin: device memory", "cuda.hold_begin(f.dev.memory_resource:allocate(64, f.s))", "the host cannot read")
drow("hold_begin: a slice", "cuda.hold_begin(f.buf:slice(0, 8))", "not a slice")
drow("hold_begin: a buffer too small for the flag", "cuda.hold_begin(f.pinned:allocate(2))", "must hold an int32")
drow("hold_begin: twice", "cuda.hold_begin(f.buf); local ok, e = pcall(cuda.hold_begin, f.buf); cuda.hold_end(); error(e)",
     "a stream is held already")
-- GraphDefinition (s:end_capture{instantiate = false})
local DEF = "f.s:begin_capture(); local d = f.s:end_capture{instantiate = false}; "
drow("end_capture: instantiate = 1", "f.s:end_capture{instantiate = 1}", "field 'instantiate' must be a boolean")
drow("end_capture: instantiate options without instantiating", "f.s:end_capture{instantiate = false, device_launch = true}", "takes no instantiate options")
drow("end_capture{instantiate = false}: closed stream", "f.closed_s:end_capture{instantiate = false}", "cuda%.Stream is closed")
drow("end_capture{instantiate = false}: not capturing", "f.s:end_capture{instantiate = false}", "")   -- the driver's words (as end_capture's)
drow("def instantiate: unknown option", DEF .. "d:instantiate{auto_free = true}", "unknown option 'auto_free'")
drow("def instantiate: closed", DEF .. "d:close(); d:instantiate()", "cuda%.GraphDefinition is closed")
drow("def instantiate: on a number", DEF .. "d.instantiate(5)", "cuda%.GraphDefinition expected")
drow("def clone: closed", DEF .. "d:close(); d:clone()", "cuda%.GraphDefinition is closed")
drow("def debug_dot_print: no path", DEF .. "d:debug_dot_print()", "string expected")
drow("def debug_dot_print: a table path", DEF .. "d:debug_dot_print({})", "string expected")
drow("def debug_dot_print: unknown option", DEF .. "d:debug_dot_print('/dev/null', {verbos = true})", "unknown option 'verbos'")
drow("def debug_dot_print: unwritable path", DEF .. "d:debug_dot_print('/nonexistent/dir/x.dot')", "OS call failed")
drow("def debug_dot_str: a number option", DEF .. "d:debug_dot_str{handles = 1}", "field 'handles' must be a boolean")
drow("def debug_dot_str: closed", DEF .. "d:close(); d:debug_dot_str()", "cuda%.GraphDefinition is closed")
drow("def node_count: closed", DEF .. "d:close(); return d.node_count", "cuda%.GraphDefinition is closed")
drow("def node_types: closed", DEF .. "d:close(); return d.node_types", "cuda%.GraphDefinition is closed")
drow("def: executable's node count after close", DEF .. "local g = d:instantiate(); d:close(); return g.node_count", "GraphDefinition of this graph is closed")
drow("builder child: closed definition", DEF .. "d:close(); f.b:child(nil, d)", "cuda%.GraphDefinition is closed")
drow("update: closed definition", DEF .. "local g = d:instantiate(); d:close(); g:update(d)", "cuda%.GraphDefinition is closed")
drow("update: from an executable of a closed definition", DEF .. "local g = d:instantiate(); d:close(); g:update(g)", "cuda%.GraphDefinition is closed")
row("cuda.GraphDefinition.__tostring on a number", "debug.getregistry()['cuda.GraphDefinition'].__tostring(5)", "cuda%.GraphDefinition expected")
row("cuda.GraphDefinition.__close on a string", "debug.getregistry()['cuda.GraphDefinition'].__close('x')", "cuda%.GraphDefinition expected")
-- views of memory cudalua did not allocate (StridedMemoryView) and DLPack
row("StridedMemoryView: nothing", "cuda.StridedMemoryView()", "table expected")
row("StridedMemoryView: no ptr", "cuda.StridedMemoryView{dtype = 'uint8', shape = 1}", "ptr must be an address")
row("StridedMemoryView: ptr a string", "cuda.StridedMemoryView{ptr = '4096', dtype = 'uint8', shape = 1}", "ptr must be an address")
row("StridedMemoryView: ptr negative", "cuda.StridedMemoryView{ptr = -1, dtype = 'uint8', shape = 1}", "ptr must be >= 0")
row("StridedMemoryView: ptr a float", "cuda.StridedMemoryView{ptr = 4096.5, dtype = 'uint8', shape = 1}", "integer")
row("StridedMemoryView: null ptr", "cuda.StridedMemoryView{ptr = 0, dtype = 'uint8', shape = 1}", "null pointer")
row("StridedMemoryView: misaligned", "cuda.StridedMemoryView{ptr = 4097, dtype = 'int32', shape = 1}", "not a multiple of 4")
row("StridedMemoryView: no dtype", "cuda.StridedMemoryView{ptr = 4096, shape = 1}", "dtype is missing")
row("StridedMemoryView: unknown dtype", "cuda.StridedMemoryView{ptr = 4096, dtype = 'bfloat16', shape = 1}", "bfloat16")
row("StridedMemoryView: no shape", "cuda.StridedMemoryView{ptr = 4096, dtype = 'uint8'}", "shape is missing")
row("StridedMemoryView: negative shape", "cuda.StridedMemoryView{ptr = 4096, dtype = 'uint8', shape = {2, -1}}", "shape%[2%] must be >= 0")
row("StridedMemoryView: shape a string", "cuda.StridedMemoryView{ptr = 4096, dtype = 'uint8', shape = 'x'}", "shape must be an integer or a list")
row("StridedMemoryView: nine dimensions", "cuda.StridedMemoryView{ptr = 4096, dtype = 'uint8', shape = {1, 1, 1, 1, 1, 1, 1, 1, 1}}", "1 to 8 dimensions")
row("StridedMemoryView: strides of another rank", "cuda.StridedMemoryView{ptr = 4096, dtype = 'uint8', shape = {2, 2}, strides = {1}}", "as many dimensions")
row("StridedMemoryView: negative stride", "cuda.StridedMemoryView{ptr = 4096, dtype = 'uint8', shape = {2}, strides = {-2}}", "strides%[1%] must be >= 0")
row("StridedMemoryView: shape overflow", "cuda.StridedMemoryView{ptr = 4096, dtype = 'uint8', shape = {2^62, 2^62}}", "overflow")
row("StridedMemoryView: strides overflow", "cuda.StridedMemoryView{ptr = 4096, dtype = 'float64', shape = {2, 2}, strides = {2^61, 1}}", "overflow")
row("StridedMemoryView: past 2^63", "cuda.StridedMemoryView{ptr = math.maxinteger - 7, dtype = 'uint8', shape = 64}", "end of the address space")
row("StridedMemoryView: unknown option", "cuda.StridedMemoryView{ptr = 4096, dtype = 'uint8', shape = 1, onwer = 1}", "unknown option 'onwer'")
row("StridedMemoryView: unknown memory", "cuda.StridedMemoryView{ptr = 4096, dtype = 'uint8', shape = 1, memory = 'gpu'}", "invalid option 'gpu'")
row("StridedMemoryView: readonly a number", "cuda.StridedMemoryView{ptr = 4096, dtype = 'uint8', shape = 1, readonly = 1}", "readonly")
row("StridedMemoryView: device for host memory", "cuda.StridedMemoryView{ptr = 4096, dtype = 'uint8', shape = 1, device = 0, memory = 'host'}", "host memory has no device")
row("StridedMemoryView: two arguments", "cuda.StridedMemoryView({ptr = 4096, dtype = 'uint8', shape = 1}, 1)", "unexpected argument")
row("from_dlpack: nothing", "cuda.from_dlpack()", "address")
row("from_dlpack: null", "cuda.from_dlpack(0)", "null tensor")
row("from_dlpack: negative", "cuda.from_dlpack(-8)", "must be >= 0")
row("from_dlpack: a table", "cuda.from_dlpack({})", "address")
row("from_dlpack: unknown option", "cuda.from_dlpack(4096, {versoined = true})", "unknown option 'versoined'")
row("from_dlpack: options a number", "cuda.from_dlpack(4096, 5)", "table expected")
row("from_dlpack: a third argument", "cuda.from_dlpack(4096, nil, 1)", "unexpected argument")
drow("StridedMemoryView: no such device", "cuda.StridedMemoryView{ptr = f.buf.ptr, dtype = 'uint8', shape = 1, device = 4096}", "no CUDA device 4096")
drow("StridedMemoryView: a stream as device", "cuda.StridedMemoryView{ptr = f.buf.ptr, dtype = 'uint8', shape = 1, device = f.s}", "cuda%.Device expected")
drow("foreign view: its resource allocates", "cuda.StridedMemoryView{ptr = f.buf.ptr, dtype = 'uint8', shape = 4}.buffer.memory_resource:allocate(4)", "another library owns")
drow("foreign view: closed", "local v = cuda.StridedMemoryView{ptr = f.buf.ptr, dtype = 'uint8', shape = 4}; v.buffer:close(); return v[1]", "closed")
drow("to_dlpack: versioned a string", "f.v:to_dlpack{versioned = 'yes'}", "versioned")
drow("to_dlpack: unknown option", "f.v:to_dlpack{flags = 1}", "unknown option 'flags'")
drow("to_dlpack: a closed view", "local b = f.pinned:allocate(8); local v = b:view('uint8'); b:close(); v:to_dlpack()", "closed")
drow("to_dlpack: read-only as legacy", "cuda.StridedMemoryView{ptr = f.buf.ptr, dtype = 'uint8', shape = 4, readonly = true}:to_dlpack()", "read%-only")
drow("to_dlpack: not a view", "f.v.to_dlpack(f.buf)", "cuda%.View expected")
-- cuda.system against a hostile fake NVML (t/fake/nvml.c's hostile modes):
-- where a function must answer and NVML gives nothing usable, one sentence
local function hostile_nvml(mode, a1, a2, fn)
  local fakecuda = require "fakecuda"
  fakecuda.nvml_hostile(mode, a1, a2)
  local ok, err = pcall(fn)
  fakecuda.nvml_hostile()
  if not ok then error(err, 0) end
  return err
end
local function hrow(desc, code, pattern) row("system under a hostile NVML: " .. desc, code, pattern, {fake = true}) end
hrow("get_num_devices, every call failing", "hostile_nvml('fail', 0, 15, cuda.system.get_num_devices)",
     "^nvmlDeviceGetCount_v2: GPU is lost$")
hrow("get_num_devices, UINT_MAX devices", "hostile_nvml('absurd', 0xffffffff, nil, cuda.system.get_num_devices)",
     "^nvmlDeviceGetCount_v2 reported 4294967295, which is not a device count %(0 to 65536%)$")
hrow("get_driver_version, a negative CUDA version", "hostile_nvml('absurd', 0xffffffff, nil, cuda.system.get_driver_version)",
     "^nvmlSystemGetCudaDriverVersion_v2 reported %-1, which is not a CUDA version")
hrow("get_driver_version(true), a version past 9 digits",
     "hostile_nvml('strings', '1234567890', nil, function() return cuda.system.get_driver_version(true) end)",
     "^nvmlSystemGetDriverVersion gave '580%.65%.061234567890123")
hrow("get_nvml_version, failing", "hostile_nvml('fail', 0, 999, cuda.system.get_nvml_version)",
     "^nvmlSystemGetNVMLVersion: Unknown Error$")
hrow("Device, every call failing", "hostile_nvml('fail', 0, 999, function() return cuda.system.Device(0) end)",
     "NVML finds no device at PCI bus id")

-- metamethods on the wrong types: every metamethod of every type the
-- module registers (debug.getregistry()["cuda.*"], what getmetatable(obj)
-- gives a script), called on a string, on another type's userdata and on
-- a userdata not of cudalua's, must name the type it wanted; the
-- finalizers of internal types (cuda.LinkJob, cuda.NVRTCProgram,
-- cuda.GraphRefs) too. A comparison may also just say false.
local registry = debug.getregistry()
local function metamethods(mt)
  local list = {}
  for key, fn in pairs(mt) do
    if type(key) == "string" and key:find("^__") and type(fn) == "function" then list[#list + 1] = key end
  end
  table.sort(list)
  return list
end
local type_names = {}
for name, mt in pairs(registry) do
  if type(name) == "string" and name:find("^cuda%.") and type(mt) == "table" and #metamethods(mt) > 0 then
    type_names[#type_names + 1] = name
  end
end
table.sort(type_names)
local wrong_values = {{"a string", "'x'"}, {"a cuda.Scalar", "cuda.u8(1)"}, {"a FILE*", "io.stdout"}}
local compares = {__eq = true, __lt = true, __le = true}
for _, tname in ipairs(type_names) do
  -- a table-shaped type (ComputeCapability, Error) wants a table
  local wanted = (tname == "cuda.ComputeCapability" or tname == "cuda.Error") and "table" or tname:gsub("%.", "%%.")
  for _, mm in ipairs(metamethods(registry[tname])) do
    for _, w in ipairs(wrong_values) do
      local other = tname == "cuda.Scalar" and w[1] == "a cuda.Scalar" and "cuda.LaunchConfig{grid = 1, block = 1}" or w[2]
      row(("%s.%s on %s"):format(tname, mm, w[1]),
          ("return debug.getregistry()[%q].%s(%s, 'no_such_field', 1)"):format(tname, mm, other),
          wanted .. " expected", {clean = compares[mm]})
    end
  end
end
-- The finalizers of the module's internal values (the NVML hold, the
-- DLPack hub, the context sentinel, pending host unregistrations, the
-- collector's hold; the NVTX range value's __close; a script reaches them
-- through the registry or getmetatable) do nothing on any other value: no
-- context released, NVML not shut down, no range popped, no crash.
drow("internal metamethods on the wrong values: no-ops", [[
  local sys_name = cuda.system.Device(0).name
  local r <close> = cuda.nvtx.range("badinput")
  local depth = cuda.nvtx.depth()
  local ok, fc = pcall(require, "fakecuda")
  local releases = ok and fc.calls("cuDevicePrimaryCtxRelease")
  local metatables = {getmetatable(cuda.system), getmetatable(f.dev.properties), getmetatable(r)}
  for key, v in pairs(debug.getregistry()) do
    local mt = key ~= "_CLIBS" and getmetatable(v)   -- _CLIBS: Lua's own, and it trusts its argument
    local named = type(mt) == "table" and type(mt.__name) == "string" and debug.getregistry()[mt.__name] == mt
    if type(mt) == "table" and not named then metatables[#metatables + 1] = mt end
  end
  for _, mt in ipairs(metatables) do
    for key, fn in pairs(mt) do
      if type(key) == "string" and key:find("^__") and type(fn) == "function" then
        for _, w in ipairs{"x", 5, {}, cuda.u8(1), io.stdout} do
          local done, e = pcall(fn, w, "x")
          assert(done or type(e) == "string" or getmetatable(e) == cuda.Error, key .. ": an unclean error")
        end
      end
    end
  end
  assert(cuda.nvtx.depth() == depth, "an NVTX range was popped")
  assert(not ok or fc.calls("cuDevicePrimaryCtxRelease") == releases, "a primary context was released")
  assert(not ok or fc.nvml_refs() == 1, "NVML was shut down")
  assert(cuda.system.Device(0).name == sys_name and cuda.from_dlpack(f.v:to_dlpack())[1] == f.v[1], "NVML or DLPack broke")
  local b = f.pinned:allocate(64)
  b:fill(cuda.u8(7), f.s)
  f.s:sync()
  assert(b:view("uint8")[64] == 7, "the device broke")]], nil, {ok = true})

-- Run the table: each row in its own environment with the fixtures.
local have_device = cuda.is_available()
local have_fake = (pcall(require, "fakecuda"))
local ran, skipped, todo, hard_failures = 0, 0, 0, 0
local fake_note = os.getenv("CUDALUA_LIBCUDA") and " (fake driver)" or ""
t.plan(#rows + 1)
for i, r in ipairs(rows) do
  local name = ("%d %s"):format(i, r.desc)
  if r.device and not have_device then
    skipped = skipped + 1
    t.skip("no CUDA device: " .. r.desc, 1)
  elseif r.fake and not have_fake then
    skipped = skipped + 1
    t.skip("not the fake driver: " .. r.desc, 1)
  else
    local env = setmetatable({cuda = cuda, f = r.device and fixture() or nil, hostile_nvml = hostile_nvml},
                             {__index = _G})
    local chunk, syntax = load(r.code, "=" .. r.desc, "t", env)
    local ok, err = false, syntax
    if chunk then ok, err = pcall(chunk) end
    local msg = type(err) == "table" and (err.message or tostring(err)) or tostring(err)
    local good = not ok and not r.ok and msg:find(r.pattern) ~= nil and msg ~= "nil"
    if ok then good = r.ok or r.clean or false end
    if r.todo then todo = todo + 1 name = name .. " # TODO " .. r.todo end
    t.ok(good, name .. (good and "" or (" -- " .. (ok and "no error" or msg))))
    if not good and not r.todo then hard_failures = hard_failures + 1 end
    ran = ran + 1
  end
end
t.diag(("%d rows: %d ran, %d skipped, %d todo%s"):format(#rows, ran, skipped, todo, fake_note))

-- again under the fake driver, every row
local so = os.getenv("CUDALUA_FAKE_LIBCUDA")
if os.getenv("CUDALUA_LIBCUDA") or not so then
  t.skip("no fake driver run from here", 1)
else
  local code, out = t.run(require("fake").env() .. t.cudalua() .. " '" .. arg[0] .. "'")
  local failures = ""   -- every failed row but the TODO ones (messages may hold '#')
  for line in out:gmatch("\n(not ok [^\n]*)") do
    if not line:find("# TODO", 1, true) then failures = failures .. " | " .. line end
  end
  t.diag((out:match("# (%d+ rows: [^\n]*)") or "no counts") )
  -- the exit status counts the todo rows' failures: the counts line proves the run ended
  local ended = out:find("# %d+ rows: %d+ ran") ~= nil and code ~= nil
  if not t.ok(ended and failures == "", "every row raises under the fake driver" .. failures) then
    hard_failures = hard_failures + 1
  end
end
-- not t.done(): tap.lua would count the todo rows' "not ok" as failures
os.exit(hard_failures == 0, true)
