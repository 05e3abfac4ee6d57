-- Bad input to every part of the cuda module: each row is {description,
-- code, pattern}; the code must raise an error whose message matches the
-- pattern (it names the problem). Rows marked device = true need a device:
-- without one they skip, so the table runs twice, once as is (no GPU
-- here: those rows skip) and once under the fake driver (every row).
-- A row marked todo = "reason" is a known bad message (TAP # TODO).
local t = require "tap"
local cuda = require "cuda"

local rows = {}
local function row(desc, code, pattern, opts)
  rows[#rows + 1] = {desc = desc, code = code, pattern = pattern, device = opts and opts.device,
                     todo = opts and opts.todo}
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
drow("launch: a pageable view", "cuda.launch(f.s, f.cfg, f.k, cuda.HostMemoryResource():allocate(64):view('float32'), cuda.f32(1), cuda.f32(1), cuda.u64(1))", "pageable")
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
drow("ipc_export: pool memory", "f.dev.memory_resource:allocate(64, f.s):ipc_export()", "only plain device allocations")
drow("ipc_export: host memory", "cuda.HostMemoryResource():allocate(64):ipc_export()", "only plain device allocations")
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
drow("TextureObject: closed buffer", "cuda.TextureObject(f.closed_buf)", "cuda%.Buffer is closed")
drow("TextureObject: closed array", "local a = cuda.Array{width = 4}; a:close(); cuda.TextureObject(a)", "cuda%.Array is closed")
drow("TextureObject: extra argument", "cuda.TextureObject(f.buf, nil, 5)", "unexpected argument")
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
drow("VirtualMemoryResource: bad handle type", "cuda.VirtualMemoryResource{handle_type = 'win32'}", "'handle_type' must be")
drow("VirtualMemoryResource: bad access", "cuda.VirtualMemoryResource{access = 'w'}", "'access' must be")
drow("VirtualMemoryResource: bad granularity", "cuda.VirtualMemoryResource{granularity = 4096}", "field 'granularity' must be a string")
drow("VirtualMemoryResource: numa_id on a device", "cuda.VirtualMemoryResource{numa_id = 1}", "for location = \"host_numa\"")
drow("VirtualMemoryResource: negative numa_id", "cuda.VirtualMemoryResource{location = 'host_numa', numa_id = -1}", "must be >= 0")
drow("VirtualMemoryResource: extra argument", "cuda.VirtualMemoryResource(f.dev, nil, 1)", "unexpected argument")
drow("virtual_memory_info: a pool", "cuda.virtual_memory_info(f.pinned)", "not a cuda%.VirtualMemoryResource")
drow("grow: a pinned buffer", "f.buf:grow(128)", "only a buffer of a cuda%.VirtualMemoryResource")
drow("grow: shrinking", "cuda.VirtualMemoryResource():allocate(4096):grow(1)", "only grows")
drow("grow: a float", "cuda.VirtualMemoryResource():allocate(4096):grow(1.5)", "number has no integer representation")
drow("grow: a closed buffer", "f.closed_buf:grow(128)", "cuda%.Buffer is closed")
drow("grow: a closed stream", "cuda.VirtualMemoryResource():allocate(4096):grow(8192, f.closed_s)", "cuda%.Stream is closed")
drow("grow: huge", "cuda.VirtualMemoryResource():allocate(4096):grow(math.maxinteger)", "")
drow("PinnedMemoryResource: numa_id a string", "cuda.PinnedMemoryResource{numa_id = 'x'}", "field 'numa_id'")
drow("PinnedMemoryResource: numa_id negative", "cuda.PinnedMemoryResource{numa_id = -2}", "field 'numa_id' must be >= 0")
drow("PinnedMemoryResource: numa_id without a pool", "cuda.PinnedMemoryResource{numa_id = 0, pool = false}", "pool = false contradicts")
drow("trim_graph_memory on a string", "f.dev.trim_graph_memory('x')", "cuda%.Device expected")
-- metamethods on the wrong types
local registry = debug.getregistry()
for _, tname in ipairs{"cuda.Device", "cuda.Stream", "cuda.Event", "cuda.Buffer", "cuda.View", "cuda.Program",
                       "cuda.ObjectCode", "cuda.Kernel", "cuda.LaunchConfig", "cuda.Graph", "cuda.GraphBuilder",
                       "cuda.Context", "cuda.SMResource", "cuda.Array", "cuda.TextureObject",
                       "cuda.SurfaceObject"} do
  if registry[tname] and registry[tname].__tostring then
    row(tname .. ".__tostring on a number", ("debug.getregistry()[%q].__tostring(5)"):format(tname),
        tname:gsub("%.", "%%.") .. " expected")
  end
  if registry[tname] and registry[tname].__close then
    row(tname .. ".__close on a string", ("debug.getregistry()[%q].__close('x')"):format(tname),
        tname:gsub("%.", "%%.") .. " expected")
  end
end

-- Run the table: each row in its own environment with the fixtures.
local have_device = cuda.is_available()
local ran, skipped, todo, hard_failures = 0, 0, 0, 0
local fake_note = os.getenv("CUDALUA_LIBCUDA") and " (fake driver)" or ""
t.plan(#rows + 1)
for i, r in ipairs(rows) do
  local name = ("%d %s"):format(i, r.desc)
  if r.device and not have_device then
    skipped = skipped + 1
    t.skip("no CUDA device: " .. r.desc, 1)
  else
    local env = setmetatable({cuda = cuda, f = r.device and fixture() or nil}, {__index = _G})
    local chunk, syntax = load(r.code, "=" .. r.desc, "t", env)
    local ok, err = false, syntax
    if chunk then ok, err = pcall(chunk) end
    local msg = type(err) == "table" and (err.message or tostring(err)) or tostring(err)
    local good = not ok and msg:find(r.pattern) ~= nil and msg ~= "nil"
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
