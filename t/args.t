-- Kernel arguments by their C++ type: the mangled-name decoder, the
-- signature parser, and every cell of the conversion table (Lua value x
-- parameter type), under the fake driver, whose echo_params kernels write
-- back the parameter bytes cudalua packed.
local t = require "tap"
local fake = require "fake"
local cuda = fake.start()
local seed = t.seed()

-- --- the decoder: every builtin type -------------------------------------------------
local builtins = {
  {"v", nil}, {"b", "bool", 1}, {"c", "char", 1}, {"a", "signed char", 1}, {"h", "unsigned char", 1},
  {"s", "short", 2}, {"t", "unsigned short", 2}, {"i", "int", 4}, {"j", "unsigned int", 4},
  {"l", "long", 8}, {"m", "unsigned long", 8}, {"x", "long long", 8}, {"y", "unsigned long long", 8},
  {"w", "wchar_t", 4}, {"f", "float", 4}, {"d", "double", 8}, {"n", "__int128", 16},
  {"o", "unsigned __int128", 16}, {"e", "long double"}, {"g", "__float128", 16},
  {"Ds", "char16_t", 2}, {"Di", "char32_t", 4}, {"Du", "char8_t", 1}, {"Dn", "decltype(nullptr)", 8},
  {"Dh", "__fp16", 2}, {"DF16_", "_Float16", 2},
}
for _, b in ipairs(builtins) do
  local name, params = cuda.demangle("_Z1f" .. b[1])
  if b[2] == nil then
    t.ok(name == "f" and #params == 0, "f(void) has no parameters")
  else
    t.ok(name == "f" and #params == 1 and params[1].type == b[2] and params[1].size == b[3],
         ("_Z1f%s is f(%s), %s bytes"):format(b[1], b[2], b[3] or "unknown"))
  end
end

-- pointers, qualifiers, classes, namespaces, templates, substitutions
-- (the symbols g++ gives for these declarations; c++filt agrees)
local function decoded(symbol)
  local name, params = cuda.demangle(symbol)
  if not name then return "error: " .. params end
  local types = {}
  for i, p in ipairs(params) do types[i] = p.type .. "/" .. (p.size or "?") end
  return name .. "(" .. table.concat(types, ", ") .. ")"
end
local symbols = {
  {"_Z2f1dfiybPKf6Params", "f1(double/8, float/4, int/4, unsigned long long/8, bool/1, const float*/8, Params/?)"},
  {"_Z3addIfEvPT_PKS0_i", "add<float>(float*/8, const float*/8, int/4)"},
  {"_Z2spIdEv4SpanIT_ES2_PS1_", "sp<double>(Span<double>/?, Span<double>/?, double*/8)"},
  {"_Z1hIfLi3EEvN2ns3ArrIT_XT0_EEES2_PKPKS2_PVS2_",
   "h<float, 3>(ns::Arr<float, 3>/?, float/4, const float* const*/8, volatile float*/8)"},
  {"_ZN2ns1gENS_1AEPS0_PKS0_NS_4SpanIfEEPS5_NS_3ArrIiLi4EEE",
   "ns::g(ns::A/?, ns::A*/8, const ns::A*/8, ns::Span<float>/?, ns::Span<float>*/8, ns::Arr<int, 4>/?)"},
  {"_Z3litILb1EjEvT0_", "lit<true, unsigned int>(unsigned int/4)"},
  {"_Z3negILin5EEvi", "neg<-5>(int/4)"},
  {"_Z3retIfET_PS0_", "ret<float>(float*/8)"},
  {"_ZN12_GLOBAL__N_14anonEPi", "(anonymous namespace)::anon(int*/8)"},
  {"_Z2fpPFviEPA4_iPf", "fp(void(*)(int)/8, int[4]*/8, float*/8)"},
  {"_Z1fP14CUtensorMap_stPrVKd", "f(CUtensorMap_st*/8, const volatile double __restrict__*/8)"},
}
for _, s in ipairs(symbols) do t.is(decoded(s[1]), s[2], "demangle " .. s[1]) end
for _, bad in ipairs{"empty4", "_Z", "_Z3fooIS_E", "_Z3fooPS3_", "_Z3fooT_", "_Z9foo", "_Z3fooLi3",
                     "_Z1f" .. ("P"):rep(200) .. "i", "_Z3fooIiEvT1_"} do
  local name, why = cuda.demangle(bad)
  t.ok(name == nil and type(why) == "string", ("%s does not decode: %s"):format(bad:sub(1, 24), why))
end
-- random bytes after _Z never crash the decoder
math.randomseed(seed)
local alphabet = "_0123456789ABCDEFGINKPRSTVXLEabcdfhijlmnostvwxyz"
for _ = 1, 2000 do
  local n, s = math.random(1, 30), {"_Z"}
  for i = 1, n do local k = math.random(#alphabet); s[i + 1] = alphabet:sub(k, k) end
  cuda.demangle(table.concat(s))
end
t.ok(true, "2000 random symbols decode or fail cleanly (seed " .. seed .. ")")

-- --- the signature parser ------------------------------------------------------------
local function parsed(sig)
  local ok, params = pcall(cuda.parse_signature, sig)
  if not ok then return params end
  local types = {}
  for i, p in ipairs(params) do types[i] = p.type .. "/" .. (p.size or "?") end
  return table.concat(types, ", ")
end
local signatures = {
  {"const float*, float*, double, size_t", "const float*/8, float*/8, double/8, size_t/8"},
  {"const float * __restrict__ x, float *y, double a, std::size_t n",
   "const float*/8, float*/8, double/8, std::size_t/8"},
  {"bool, char, signed char, unsigned char, short, unsigned short int, int, unsigned, long, " ..
   "unsigned long, long long, long long int, unsigned long long, float, double",
   "bool/1, char/1, signed char/1, unsigned char/1, short/2, unsigned short/2, int/4, unsigned int/4, " ..
   "long/8, unsigned long/8, long long/8, long long/8, unsigned long long/8, float/4, double/8"},
  {"int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t, ptrdiff_t, uintptr_t",
   "int8_t/1, uint8_t/1, int16_t/2, uint16_t/2, int32_t/4, uint32_t/4, int64_t/8, uint64_t/8, ptrdiff_t/8, uintptr_t/8"},
  {"struct Span s, Span<float, 2>, ns::Params p, const __grid_constant__ CUtensorMap map",
   "Span/?, Span<float, 2>/?, ns::Params/?, const CUtensorMap/128"},
  {"void*, const void *, char **argv, float * const * p", "void*/8, const void*/8, char**/8, float* const*/8"},
  {"__int128 a, unsigned __int128", "__int128/16, unsigned __int128/16"},
  {"", ""}, {"void", ""}, {"  void  ", ""},
}
for _, s in ipairs(signatures) do t.is(parsed(s[1]), s[2], ("parse '%s'"):format(s[1])) end
local bad_signatures = {
  {"long float", "parameter 1: 'long float' is not a type"},
  {"int, unsigned double", "parameter 2: 'unsigned double' is not a type"},
  {"short long", "parameter 1: 'short long' is not a type"},
  {"long long long", "parameter 1: 'long long long' repeats 'long'"},
  {"signed unsigned int", "is both signed and unsigned"},
  {"int,,int", "parameter 2: empty"},
  {"int,", "parameter 2: empty"},
  {"float[4]", "arrays and function pointers are not supported"},
  {"void (*)(int)", "parameter 1: arrays and function pointers are not supported"},
  {"int&", "a kernel parameter cannot be a reference"},
  {"void", nil}, {"void x", "void is not a parameter type"},
  {"float x y", "unexpected 'y'"},
  {"float x *", "'%*' after the parameter's name"},
  {"Span<float", "'<' without its '>'"},
  {"long double", "long double is not a type CUDA kernels take"},
  {"int $", "unexpected '%$'"},
  {("int, "):rep(64) .. "int", "more than 64 parameters"},
}
for _, b in ipairs(bad_signatures) do
  if b[2] then
    t.raises(function() cuda.parse_signature(b[1]) end, "bad signature: .*" .. b[2], ("'%s' is refused"):format(b[1]:sub(1, 30)))
  end
end

-- --- every cell of the conversion table --------------------------------------------
local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local TYPES = {
  {"bool"}, {"char", "i1", "I1"}, {"signed char", "i1"}, {"unsigned char", "I1"}, {"short", "i2"},
  {"unsigned short", "I2"}, {"int", "i4"}, {"unsigned int", "I4"}, {"long long", "i8"},
  {"unsigned long long", "I8"}, {"float", "f"}, {"double", "d"}, {"const float*"}, {"Span"},
}
local SOURCE = [[
struct Span { float *p; long n; };
template <class T> __global__ void echo_params(unsigned char *out, T v)
{
  const unsigned char *b = (const unsigned char *)&v;
  for (unsigned i = 0; i < sizeof v; i++) out[i] = b[i];
}
struct alignas(64) Desc { unsigned long long v[16]; };   // a CUtensorMap's size and alignment
extern "C" __global__ void echo_params_tmap(unsigned char *out, const __grid_constant__ Desc d)
{
  for (int i = 0; i < 16; i++) ((unsigned long long *)out)[i] = d.v[i];
}
extern "C" __global__ void echo_params_c(unsigned char *out, /* the scale */ double x, const float *p, int n)
{
  *(double *)out = x; *(const float **)(out + 8) = p; *(int *)(out + 16) = n;
}
]]
local names = {}
for i, ty in ipairs(TYPES) do names[i] = "echo_params<" .. ty[1] .. ">" end
local obj = cuda.Program(SOURCE, "c++", {arch = "sm_90"}):compile("cubin", {name_expressions = names})
local kernels = {}
for i, ty in ipairs(TYPES) do
  kernels[i] = obj:get_kernel(names[i])
  local p = kernels[i].params[2]
  t.is(p.type, ty[1] == "Span" and "Span" or ty[1], names[i] .. ": the parameter's type from the lowered name")
end
t.is(kernels[13].params[1].type, "unsigned char*", "the first parameter's type too")
t.is(kernels[14].params[2].size, 16, "a struct's size comes from the driver")

local out = pinned:allocate(64)
local dbuf = dev.memory_resource:allocate(256, s)
local viewed = pinned:allocate(64)
local VIEW = viewed:view("float32"):range(3, 6)   -- its first element is 8 bytes in
local one = cuda.LaunchConfig{grid = 1, block = 1}

-- What cudalua must pass, computed independently: what string.pack gives
-- for the type's format (either format for char), with the rules
-- string.pack does not have: bool takes booleans, pointers buffers and
-- cuda.ptr, a struct a string of its size; a float beyond float's range is
-- an error (string.pack casts it); unsigned long long takes a float up to
-- 2^64 (as cuda.u64 does; a Lua integer stops at 2^63). Typed scalars
-- count as their value, cuda.ptr only for pointers. nil: an error.
local SPAN = string.pack("<Jj", 0x1000, 77)
local function expected(ty, v)
  local name = ty[1]
  local is_scalar = type(v) == "userdata" and getmetatable(v) and tostring(v):match("^cuda%.%a?%d+%(") ~= nil
  local is_ptr = type(v) == "userdata" and tostring(v):match("^cuda%.ptr") ~= nil
  local is_buffer = type(v) == "userdata" and tostring(v):match("^cuda%.Buffer") ~= nil
  if name == "bool" then
    return type(v) == "boolean" and string.pack("B", v and 1 or 0) or nil
  elseif name == "const float*" then
    if is_buffer then return string.pack("<J", v.ptr) end
    if is_ptr then return string.pack("<J", v.value) end
    if v == VIEW then return string.pack("<J", viewed.ptr + 8) end
    return nil
  elseif name == "Span" then
    if type(v) == "string" then return #v == 16 and v or nil end
    return nil   -- numbers, buffers and scalars are 8 bytes or less: a 16-byte struct takes none
  end
  if is_scalar and not is_ptr then   -- of the parameter's size and kind (integer or floating)
    local float_type = ty[2] == "f" or ty[2] == "d"
    if v.size ~= #string.pack(ty[2], 0) or (v.dtype:match("^float") ~= nil) ~= float_type then return nil end
    v = v.value
  end
  if math.type(v) == nil then return nil end
  if ty[2] == "f" and math.type(v) == "float" and v == v and math.abs(v) ~= math.huge and math.abs(v) > 3.4028234663852886e38 then
    return nil
  end
  if ty[2] == "I8" and math.type(v) == "float" and v >= 2^63 and v < 2^64 then
    return string.pack("<i8", math.tointeger(v - 2^64))
  end
  if ty[2] == "I8" and v < 0 then return nil end   -- string.pack's I8 wraps negatives
  for k = 2, #ty do
    local ok, bytes = pcall(string.pack, "<" .. ty[k], v)
    if ok then return bytes end
  end
  return nil
end

local VALUES = {
  0, 1, -1, 3, 127, 128, 255, 256, -129, 32767, 65535, 65536, -32769, 2^31 // 1, -2^31 // 1,
  4294967295, 4294967296, math.maxinteger, math.mininteger,
  0.0, 1.0, 2.0, -2.0, 2.5, -0.5, 0.1, 2^31, 2^53, 2^63, 2^64, -2^63, 1e300, -1e300, 3.4e38,
  math.huge, -math.huge, 0 / 0,
  true, false, "abc", SPAN, SPAN .. "x",
  cuda.f32(1.5), cuda.f64(2.25), cuda.f64(2.0), cuda.i8(-3), cuda.i32(-70000), cuda.i64(-1),
  cuda.u8(200), cuda.u32(4000000000), cuda.u64(2^63 + 2^20), cuda.u64(5), cuda.ptr(0x1000),
  cuda.ptr(0),
}
local function random_value()
  local r = math.random(4)
  if r == 1 then return math.random(math.mininteger, math.maxinteger) >> math.random(0, 63) end
  if r == 2 then return -(math.random(math.mininteger, math.maxinteger) >> math.random(0, 63)) end
  if r == 3 then return (math.random() - 0.5) * 2.0 ^ math.random(-10, 70) end
  return math.random(-70000, 70000) + 0.0
end
for _ = 1, 30 do VALUES[#VALUES + 1] = random_value() end
VALUES[#VALUES + 1] = dbuf
VALUES[#VALUES + 1] = VIEW

local cells, wrong = 0, {}
local POISON = ("\xA5"):rep(64)
for i, ty in ipairs(TYPES) do
  local k, size = kernels[i], kernels[i].params[2].size
  for _, v in ipairs(VALUES) do
    out:view("uint8"):fill(0xA5)
    local want = expected(ty, v)
    local ok, err = pcall(cuda.launch, s, one, k, out, v)
    s:sync()
    local got = out:view("uint8")
    local bytes = {}
    for b = 1, size do bytes[b] = string.char(got[b]) end
    bytes = table.concat(bytes)
    local label = ("%s <- %s (%s)"):format(ty[1], tostring(v), math.type(v) or type(v))
    if want and not ok then
      wrong[#wrong + 1] = label .. ": raised " .. tostring(err)
    elseif want and bytes ~= want then
      wrong[#wrong + 1] = label .. (": passed %q, expected %q"):format(bytes, want)
    elseif not want and ok then
      wrong[#wrong + 1] = label .. (": passed %q, expected an error"):format(bytes)
    elseif not want and not tostring(err):match("^cuda%.launch: kernel 'echo_params<.*' argument 2: ") then
      wrong[#wrong + 1] = label .. ": an error that does not name the argument: " .. tostring(err)
    elseif not want and got[1] ~= 0xA5 then
      wrong[#wrong + 1] = label .. ": an error, but the kernel ran"
    end
    cells = cells + 1
  end
end
t.is(#wrong, 0, ("%d cells of the conversion table (%d types x %d values) as string.pack and the rules say%s")
     :format(cells, #TYPES, #VALUES, #wrong > 0 and (":\n  " .. table.concat(wrong, "\n  ", 1, math.min(#wrong, 20))) or ""))
local _ = POISON

-- the messages say what the parameter takes
local function launch_error(k, v) return select(2, pcall(cuda.launch, s, one, k, out, v)) end
t.like(launch_error(kernels[7], 2.5), "argument 2: 2%.5 is not an integer %(the parameter is an int%)", "2.5 for an int")
t.like(launch_error(kernels[5], 40000), "40000 is out of range for a short", "40000 for a short")
t.like(launch_error(kernels[4], -1), "%-1 is out of range for an unsigned char", "-1 for an unsigned char")
t.like(launch_error(kernels[11], 1e300), "1e%+300 is out of range for a float", "1e300 for a float")
t.like(launch_error(kernels[1], 1), "1 for a bool parameter, which takes true or false", "1 for a bool")
t.like(launch_error(kernels[13], 4096), "4096 for a pointer parameter, which takes a cuda%.Buffer, a view or cuda%.ptr%(address%)",
       "an address needs cuda.ptr")
t.like(launch_error(kernels[13], nil), "a null pointer is cuda%.ptr%(0%)", "nil for a pointer")
t.like(launch_error(kernels[12], "x"), "a string for a double parameter, which takes a number", "a string for a double")
t.like(launch_error(kernels[14], "short"), "a string of 5 bytes for a parameter of 16 bytes", "a struct's size is checked")
t.like(launch_error(kernels[14], 3), "a number cannot fill this parameter %(the parameter is 16 bytes; a struct takes a string",
       "a number for a struct")
t.like(launch_error(kernels[7], cuda.ptr(8)), "cuda%.ptr%(0x8%) for an int parameter", "cuda.ptr for an int")
t.like(launch_error(kernels[11], cuda.f64(1)), "cuda%.f64%(1%.0%) for a float parameter: a typed scalar must be of the parameter's size",
       "a typed scalar of another size")
t.like(launch_error(kernels[7], cuda.f32(1)), "cuda%.f32%(1%.0%) for an int parameter: a typed scalar must be of the parameter's size and kind",
       "a typed scalar of another kind")
t.like(launch_error(kernels[8], cuda.i32(-1)), "cuda%.i32%(%-1%) is out of range for an unsigned int", "a typed scalar out of range")
t.is(tostring(cuda.ptr(255)), "cuda.ptr(0xff)", "cuda.ptr's tostring")
t.raises(function() cuda.ptr(-1) end, "out of range for uint64", "cuda.ptr(-1)")
t.raises(function() cuda.ptr(1.5) end, "uint64 expects an integer", "cuda.ptr(1.5)")

-- --- extern "C": the types from the source's declaration ---------------------------
local c = obj:get_kernel("echo_params_c")
local p = c.params
t.ok(p[2].type == "double" and p[3].type == "const float*" and p[4].type == "int",
     "extern \"C\": the declaration in the source gives the types")
local function echo_c(k, x, ptr, n)
  out:view("uint8"):fill(0xA5)
  cuda.launch(s, one, k, out, x, ptr, n)
  s:sync()
  local bytes = {}
  for b = 1, 20 do bytes[b] = string.char(out:view("uint8")[b]) end
  return table.concat(bytes)
end
t.is(echo_c(c, 1.0, dbuf, 2.0), string.pack("<dJi4", 1.0, dbuf.ptr, 2), "1.0 is a double, 2.0 an int")
-- the same code loaded from its bytes has no source: the size rule, and its message
local bare = cuda.ObjectCode.from_data(obj.code)
local u = bare:get_kernel("echo_params_c")
t.is(u.params[2].type, nil, "code without its source: types unknown")
t.raises(function() echo_c(u, 1.0, dbuf, 2) end,
         "1%.0 is a float with an integer value.*declare the kernel's signature %(obj:get_kernel%(name, ",
         "unknown types: the message says how to declare them")
t.is(echo_c(u, 1.5, dbuf, 2), string.pack("<dJi4", 1.5, dbuf.ptr, 2), "unknown types: the size rule as before")
t.is(u:signature("unsigned char *out, double x, const float *p, int n"), u, "k:signature returns the kernel")
t.is(echo_c(u, 1.0, dbuf, 2.0), string.pack("<dJi4", 1.0, dbuf.ptr, 2), "a declared signature types the launch")
t.is(u.params[3].type, "const float*", "k.params has the declared types")
local d = bare:get_kernel("echo_params_c", "unsigned char*, double, const float*, int")
t.is(echo_c(d, 3, cuda.ptr(0x1234), 0.0), string.pack("<dJi4", 3.0, 0x1234, 0), "get_kernel(name, signature)")
t.raises(function() bare:get_kernel("echo_params_c", "unsigned char*, double, const float*") end,
         "the signature does not fit kernel 'echo_params_c': 3 parameters declared, the kernel has 4", "a count that does not fit")
t.raises(function() u:signature("unsigned char*, float, const float*, int") end,
         "parameter 2 %(float%) is 4 bytes, the kernel's is 8 bytes", "a size that does not fit")
t.raises(function() bare:get_kernel("echo_params_c", "double x y") end,
         "bad argument #2 to 'get_kernel' %(bad signature: parameter 1: unexpected 'y'%)", "a bad signature")
t.raises(function() u:signature(42) end, "bad argument #1 to 'signature' %(string %(a declaration", "a signature is a string")
-- a struct parameter declared by name takes its driver-reported size
local sd = bare:get_kernel("echo_params_c", "Out* out, struct Scale x, const float*, int")
t.is(echo_c(sd, string.pack("<d", 0.25), dbuf, 7), string.pack("<dJi4", 0.25, dbuf.ptr, 7), "a named type takes bytes of its size")

-- a 128-byte descriptor by value (a CUtensorMap's size and 64-byte alignment)
local tm = obj:get_kernel("echo_params_tmap")
t.ok(tm.params[2].type == "const Desc" and tm.params[2].size == 128 and tm.params[2].offset % 16 == 0,
     "a 128-byte parameter, where the cubin places it")
local desc = {}
for i = 1, 128 do desc[i] = string.char(math.random(0, 255)) end
desc = table.concat(desc)
local big = pinned:allocate(128)
big:view("uint8"):fill(0)
cuda.launch(s, one, tm, big, desc)
s:sync()
local got = {}
for i = 1, 128 do got[i] = string.char(big:view("uint8")[i]) end
t.is(table.concat(got), desc, "128 random bytes arrive bit for bit")
local declared = bare:get_kernel("echo_params_tmap", "unsigned char *out, const __grid_constant__ CUtensorMap map")
t.is(declared.params[2].type, "const CUtensorMap", "declared as a CUtensorMap, checked as 128 bytes")
t.raises(function() cuda.launch(s, one, declared, big, desc:sub(1, 64)) end,
         "a string of 64 bytes for a parameter of 128 bytes", "a descriptor of the wrong size")

-- declarations the source scanner must find, or must not be fooled by
local function declared_types(source, name)
  local o = cuda.Program(source, "c++", {arch = "sm_90"}):compile("cubin")
  local ps, types = o:get_kernel(name).params, {}
  for i, q in ipairs(ps) do types[i] = q.type or "?" end
  return table.concat(types, ", ")
end
t.is(declared_types([[
// extern "C" __global__ void k(int a) -- a comment
#define K_ARGS(x) void k(float x)
extern "C" {
/* __global__ void k(char) */
__device__ int helper(int k) { return k; }
__global__ void __launch_bounds__(128) k(const double *__restrict__ x, /* n: */ unsigned n,
                                        bool flag)
{ }
}
]], "k"), "const double*, unsigned int, bool", "the declaration past comments, macros and attributes")
t.is(declared_types([[
typedef unsigned long long u64;
extern "C" __global__ void k(u64 n, float x) {}
]], "k"), "u64, float", "a typedef the scanner does not know keeps its driver size")

-- --- PTX: the driver reports no parameters; a signature lays them out --------------
local ptx = cuda.Program([[extern "C" __global__ void p(double a, int b, char c, float *d) {}]], "c++",
                         {arch = "sm_90"}):compile("ptx")
t.raises(function() cuda.launch(s, one, ptx:get_kernel("p"), 1.5, 2, 3, cuda.ptr(0)) end,
         "did not report the parameters of kernel 'p': declare its signature",
         "no parameters without a signature (types read from the source do not lay them out)")
local pk = cuda.ObjectCode.from_data(ptx.code):get_kernel("p", "double, int, char, float*")
local offsets = {}
for i, q in ipairs(pk.params) do offsets[i] = q.offset .. "+" .. q.size end
t.is(table.concat(offsets, " "), "0+8 8+4 12+1 16+8", "laid out as C lays out a struct's members")
t.ok(pcall(cuda.launch, s, one, pk, 1.0, 2, 3, cuda.ptr(0)), "and launched by them")
t.raises(function() cuda.ObjectCode.from_data(ptx.code):get_kernel("p", "Span, int, char, float*") end,
         "parameter 1 %(Span%) has no size and alignment cudalua knows", "a struct of unknown size cannot be laid out")

-- --- graphs: captured and built kernel nodes pack by type --------------------------
local k3 = obj:get_kernel("echo_params_c")
s:begin_capture()
cuda.launch(s, one, k3, out, 1.0, dbuf, 2.0)
local g = s:end_capture()
out:view("uint8"):fill(0)
g:launch(s)
s:sync()
local function first20()
  local bytes = {}
  for b = 1, 20 do bytes[b] = string.char(out:view("uint8")[b]) end
  return table.concat(bytes)
end
t.is(first20(), string.pack("<dJi4", 1.0, dbuf.ptr, 2), "a captured launch replays the typed values")
local b = cuda.Graph(dev)
local node = b:kernel(nil, one, kernels[14], out, SPAN)
t.raises(function() b:kernel(nil, one, k3, out, 1.0, dbuf, 2.5) end, "2%.5 is not an integer", "a kernel node checks types")
local exec = b:instantiate()
out:view("uint8"):fill(0)
exec:launch(s)
s:sync()
t.is(first20():sub(1, 16), SPAN, "a built kernel node passes a struct by value")
exec:update_kernel(node, one, kernels[14], out, string.pack("<Jj", 0x2000, -1))
out:view("uint8"):fill(0)
exec:launch(s)
s:sync()
t.is(first20():sub(1, 16), string.pack("<Jj", 0x2000, -1), "update_kernel packs the same way")

t.done()
