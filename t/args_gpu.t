-- Typed kernel arguments on the GPU: a kernel taking (double, float, int,
-- unsigned long long, bool, const float*, struct {float* p; long n;}),
-- launched with plain Lua values (1.0, 0 and 2.0 among them), writes what it
-- received to memory that is compared bit for bit with what string.pack
-- makes of the same values; the same through a captured graph and a built
-- one; an mdspan-style struct by value. Runs under the fake driver too
-- (t/fake.t), whose echo_params and span2d_scale emulations stand in.
local t = require "tap"
local cuda = require "cuda"
local seed = t.seed()

if not cuda.is_available() then t.skip_all("no CUDA device: " .. select(2, cuda.is_available())) end
t.plan(24)

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local pinned = cuda.PinnedMemoryResource()

local SOURCE = [[
struct Span { float *p; long n; };
struct Received { double a; float b; int c; unsigned long long d; bool e; const float *f; Span g; };
__global__ void echo_params7(Received *out, double a, float b, int c, unsigned long long d, bool e,
                             const float *f, Span g)
{
  out->a = a; out->b = b; out->c = c; out->d = d; out->e = e; out->f = f; out->g = g;
}
struct Span2D { float *data; long rows, cols, stride; };
extern "C" __global__ void span2d_scale(Span2D m, float s)
{
  for (long i = blockIdx.x; i < m.rows; i += gridDim.x)
    for (long j = threadIdx.x; j < m.cols; j += blockDim.x)
      m.data[i * m.stride + j] *= s;
}
]]
local obj = cuda.Program(SOURCE, "c++", {arch = "sm_" .. dev.arch}):compile("cubin", {name_expressions = {"echo_params7"}})
local k = obj:get_kernel("echo_params7")
local types = {}
for i, p in ipairs(k.params) do types[i] = p.type end
t.is(table.concat(types, ", "), "Received*, double, float, int, unsigned long long, bool, const float*, Span",
     "the types from the mangled name")

local out = pinned:allocate(64)
local data = dev.memory_resource:allocate(1024, s)
local one = cuda.LaunchConfig{grid = 1, block = 1}
local base = k.params[2].offset
-- each field: its parameter (for the offset), its string.pack format
local FIELDS = {{2, "<d"}, {3, "<f"}, {4, "<i4"}, {5, "<I8"}, {6, "<B"}, {7, "<J"}, {8, "c16"}}

local function poison() out:view("uint8"):fill(0xA5) end
local function received()
  local v, bytes = out:view("uint8"), {}
  for i = 1, 56 do bytes[i] = string.char(v[i]) end
  return table.concat(bytes)
end
-- What arrived, field by field, against the values packed by string.pack:
-- a list of the fields that differ.
local function compare(got, values)
  local bad = {}
  for i, f in ipairs(FIELDS) do
    local offset = k.params[f[1]].offset - base
    local size = k.params[f[1]].size
    local want = string.pack(f[2], values[i])
    if got:sub(offset + 1, offset + size) ~= want then
      bad[#bad + 1] = ("%s: got %q, want %q"):format(types[f[1]], got:sub(offset + 1, offset + size), want)
    end
  end
  return table.concat(bad, "; ")
end

-- plain Lua values, the awkward ones first: 1.0 for a double, 0 for a float, 2.0 for an int
local span = string.pack("<Jj", data.ptr, 256)
poison()
cuda.launch(s, one, k, out, 1.0, 0, 2.0, 2^63, true, data, span)
s:sync()
t.is(compare(received(), {1.0, 0.0, 2, math.mininteger, 1, data.ptr, span}), "",
     "1.0, 0, 2.0, 2^63, true, a buffer and a struct arrive bit for bit")

-- random values of every type; the pointer a buffer, a view or cuda.ptr
math.randomseed(seed)
local pbuf = pinned:allocate(64)
local pview = pbuf:view("float32"):range(2, 10)   -- its first element is 4 bytes in
local function random_pointer()
  local r = math.random(3)
  return r == 1 and data or r == 2 and pview or cuda.ptr(data.ptr + 4 * math.random(0, 255))
end
local function random_values()
  local f32 = string.unpack("<f", string.pack("<f", (math.random() - 0.5) * 1e6))
  return {(math.random() - 0.5) * 2.0 ^ math.random(-60, 60), f32, math.random(-2^31, 2^31 - 1),
          math.random(0, math.maxinteger), math.random(0, 1) == 1,
          random_pointer(),
          string.pack("<Jj", math.random(0, math.maxinteger), math.random(math.mininteger, math.maxinteger))}
end
local function expected(v)
  local ptr = v[6] == pview and pbuf.ptr + 4 or (v[6].ptr or v[6].value)
  return {v[1], v[2], v[3], v[4], v[5] and 1 or 0, ptr, v[7]}
end
local bad = ""
for round = 1, 20 do
  local v = random_values()
  poison()
  cuda.launch(s, one, k, out, table.unpack(v))
  s:sync()
  local why = compare(received(), expected(v))
  if why ~= "" then bad = bad .. ("round %d: %s; "):format(round, why) end
end
t.is(bad, "", "20 rounds of random values arrive bit for bit (seed " .. seed .. ")")
-- a launch, the hottest path, allocates nothing: plain values by their C types, a view, a struct
do
  local v = random_values()
  v[6] = pview
  local launch, stream, config, kernel = cuda.launch, s, one, k
  launch(stream, config, kernel, out, table.unpack(v))
  collectgarbage()
  collectgarbage("stop")
  local before = collectgarbage("count")
  for _ = 1, 100 do launch(stream, config, kernel, out, v[1], v[2], v[3], v[4], v[5], v[6], v[7]) end
  local grew = collectgarbage("count") - before
  collectgarbage("restart")
  s:sync()
  t.is(grew, 0, "100 launches with seven typed arguments allocate no Lua memory")
  t.is(compare(received(), expected(v)), "", "and the last one's arguments arrived")
end
-- what the parameter types refuse, before anything runs
poison()
t.raises(function() cuda.launch(s, one, k, out, 1.0, 0, 2.5, 0, true, data, span) end,
         "argument 4: 2%.5 is not an integer %(the parameter is an int%)", "2.5 for an int")
t.raises(function() cuda.launch(s, one, k, out, 1.0, 0, 2, -1, true, data, span) end,
         "argument 5: %-1 is out of range for an unsigned long long", "-1 for an unsigned long long")
t.raises(function() cuda.launch(s, one, k, out, 1.0, 0, 2, 0, 1, data, span) end,
         "argument 6: 1 for a bool parameter", "1 for a bool")
t.raises(function() cuda.launch(s, one, k, out, 1.0, 0, 2, 0, true, data.ptr, span) end,
         "argument 7: %d+ for a pointer parameter, which takes a cuda%.Buffer, a view or cuda%.ptr", "an address for a pointer")
t.raises(function() cuda.launch(s, one, k, out, 1.0, 0, 2, 0, true, data, span:sub(2)) end,
         "argument 8: a string of 15 bytes for a parameter of 16 bytes", "a struct of the wrong size")
s:sync()
t.is(out:view("uint8")[1], 0xA5, "nothing ran")

-- the same through a captured graph, replayed with the values of its capture
local v1 = random_values()
s:begin_capture()
cuda.launch(s, one, k, out, table.unpack(v1))
local g = s:end_capture()
poison()
g:launch(s)
s:sync()
t.is(compare(received(), expected(v1)), "", "a captured launch replays the typed values bit for bit")
poison()
g:launch(s)
s:sync()
t.is(compare(received(), expected(v1)), "", "and again")

-- and through a built graph's kernel node, then updated
local b = cuda.Graph(dev)
local node = b:kernel(nil, one, k, out, 1.0, 0, 2.0, 2^63, false, data, span)
local exec = b:instantiate()
poison()
exec:launch(s)
s:sync()
t.is(compare(received(), {1.0, 0.0, 2, math.mininteger, 0, data.ptr, span}), "",
     "a kernel node of plain values, bit for bit")
local v2 = random_values()
exec:update_kernel(node, one, k, out, table.unpack(v2))
poison()
exec:launch(s)
s:sync()
t.is(compare(received(), expected(v2)), "", "update_kernel: the new typed values, bit for bit")
t.raises(function() b:kernel(nil, one, k, out, 1.0, 0, 2.0, 0.5, false, data, span) end,
         "argument 5: 0%.5 is not an integer", "a kernel node refuses what a launch refuses")

-- an mdspan-style struct by value: {data, rows, cols, stride}, packed with
-- C's alignment by string.pack ("!8": each member aligned to its size)
local rows, cols, stride = 37, 50, 64
local host = pinned:allocate(rows * stride * 4)
local hv = host:view("float32")
hv:random(-10, 10, seed)
local before = {}
for i = 1, #hv do before[i] = hv[i] end
local dm = dev.memory_resource:allocate(rows * stride * 4, s)
dm:copy_from(host, s)
local sk = obj:get_kernel("span2d_scale")
t.is(sk.params[1].size, 32, "Span2D is 32 bytes")
t.is(sk.params[1].type, "Span2D", "its type from the source's declaration")
local m = string.pack("<!8 T j j j", dm.ptr, rows, cols, stride)
cuda.launch(s, cuda.LaunchConfig{grid = 8, block = 32}, sk, m, 3)
dm:copy_to(host, s)
s:sync()
local wrong = 0
for i = 0, rows - 1 do
  for j = 0, stride - 1 do
    local idx = i * stride + j + 1
    local want = j < cols and string.unpack("<f", string.pack("<f", before[idx] * 3)) or before[idx]
    if hv[idx] ~= want then wrong = wrong + 1 end
  end
end
t.is(wrong, 0, ("the kernel scaled the %dx%d block of a %d-float stride through the struct, and nothing else"):format(rows, cols, stride))
-- the same struct through a graph node
local gb = cuda.Graph(dev)
gb:kernel(nil, cuda.LaunchConfig{grid = 8, block = 32}, sk, m, 0.5)
local ge = gb:instantiate()
ge:launch(s)
dm:copy_to(host, s)
s:sync()
wrong = 0
for i = 0, rows - 1 do
  for j = 0, cols - 1 do
    local idx = i * stride + j + 1
    local want = string.unpack("<f", string.pack("<f", string.unpack("<f", string.pack("<f", before[idx] * 3)) * 0.5))
    if hv[idx] ~= want then wrong = wrong + 1 end
  end
end
t.is(wrong, 0, "the struct by value through a graph's kernel node")
t.raises(function() cuda.launch(s, one, sk, string.pack("<!8 T j j", dm.ptr, rows, cols), 3) end,
         "a string of 24 bytes for a parameter of 32 bytes", "a struct one member short")
t.raises(function() cuda.launch(s, one, sk, m, "3") end, "a string for a float parameter", "a string for a float")
t.ok(pcall(cuda.launch, s, one, sk, m, 1), "1 for a float")

-- a 128-byte CUtensorMap by value, as a TMA kernel takes it, declared
local tsrc = [[
typedef struct alignas(64) CUtensorMap_st { unsigned long long opaque[16]; } CUtensorMap;   // as cuda.h
extern "C" __global__ void echo_params_tensormap(unsigned long long *out, const __grid_constant__ CUtensorMap map)
{
  for (int i = 0; i < 16; i++) out[i] = ((const unsigned long long *)&map)[i];
}
]]
local ok_compile, tobj = pcall(function() return cuda.Program(tsrc, "c++", {arch = "sm_" .. dev.arch}):compile("cubin") end)
if ok_compile then
  local tk = tobj:get_kernel("echo_params_tensormap", "unsigned long long*, const __grid_constant__ CUtensorMap")
  local desc = {}
  for i = 1, 16 do desc[i] = string.pack("<I8", math.random(0, math.maxinteger)) end
  desc = table.concat(desc)
  local tout = pinned:allocate(128)
  tout:view("uint8"):fill(0)
  cuda.launch(s, one, tk, tout, desc)
  s:sync()
  local got = {}
  for i = 1, 128 do got[i] = string.char(tout:view("uint8")[i]) end
  t.is(table.concat(got), desc, "a CUtensorMap parameter receives the 128 bytes of a string")
else
  t.skip("NVRTC cannot include <cuda.h> here: " .. tostring(tobj), 1)
end
s:sync()
t.done()
