-- Templates, relocatable code, linking and the program cache: name
-- expressions, LTO-IR linked by nvJitLink into an sm_90 cubin, link errors,
-- cuda.ProgramCache, and starting with no toolkit library at all. All of it
-- runs without a GPU; launches that verify the results run where there is one.
local t = require "tap"
local cudalua = t.cudalua()
local cuda = require "cuda"
t.seed()

local tmp = t.tmpdir()
local read, write, ls = t.read_file, t.write_file, t.ls

-- The SM of a CUDA ELF cubin (e_flags bits 8-15), or nil for anything else.
local function cubin_sm(code)
  if code:sub(1, 4) ~= "\127ELF" or string.unpack("<I2", code, 19) ~= 190 then return nil end
  return string.unpack("<I4", code, 0x31) >> 8 & 0xff
end

-- --- the bundled examples ----------------------------------------------------------

-- A templated kernel instantiated for two types through name expressions.
local TEMPLATED = [[
template <typename T>
__global__ void add(const T *a, const T *b, T *out, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = a[i] + b[i];
}
]]

-- A two-file LTO link: the kernel calls a device function of another file.
local LTO_MAIN = [[
extern __device__ float scale(float x);
extern "C" __global__ void scale_all(float *x, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = scale(x[i]);
}
]]
local LTO_LIB = [[
__device__ float scale(float x) { return 3.0f * x + 1.0f; }
]]

local function ltoir(source, name)
  return cuda.Program(source, "c++", {arch = "sm_90", relocatable_device_code = true,
                                      link_time_optimization = true, name = name}):compile("ltoir")
end

-- --- name expressions ---------------------------------------------------------------

local exprs = {"add<float>", "add<double>"}
local prog = cuda.Program(TEMPLATED, "c++", {arch = "sm_90", name = "add.cu"})
local obj = prog:compile("cubin", {name_expressions = exprs})
local names = obj.name_expressions
t.ok(type(names) == "table", "obj.name_expressions is a table")
names = names or {}
t.like(names["add<float>"], "^_Z3addIfEvPKT_S2_PS0_i$", "add<float> lowers to its mangled name")
t.like(names["add<double>"], "^_Z3addIdEvPKT_S2_PS0_i$", "add<double> lowers to its mangled name")
t.ok(names["add<float>"] and obj.code:find(names["add<float>"], 1, true) and
     obj.code:find(names["add<double>"], 1, true), "the cubin holds both instantiations")
t.is(cubin_sm(obj.code), 90, "an sm_90 cubin")
names["add<float>"] = "changed"
t.isnt(obj.name_expressions["add<float>"], "changed", "name_expressions is a copy")
t.is(prog:compile("cubin").name_expressions, nil, "without name expressions: nil")
local ptx = prog:compile("ptx", {name_expressions = {"add<int>"}})
t.ok(ptx.code:find("%.entry " .. ptx.name_expressions["add<int>"]:gsub("%p", "%%%0")) ~= nil,
     "PTX: the lowered name is the .entry")
local ok, err = pcall(prog.compile, prog, "cubin", {name_expressions = {"add<no_such_type>"}})
t.ok(not ok and tostring(err):find("no_such_type") ~= nil, "a bad name expression fails the compile, named")

-- --- argument checks ------------------------------------------------------------------

t.raises(function() prog:compile("cubin", {arch = "sm_90"}) end, "unknown option 'arch'",
         "compile: unknown option keys are named")
t.raises(function() prog:compile("cubin", {}, "extra") end, "#3 to 'compile' %(unexpected argument",
         "compile: an extra argument is an error")
t.raises(function() prog:compile("cubin", {name_expressions = "add<float>"}) end,
         "field 'name_expressions' must be a list of strings", "name_expressions must be a list")
t.raises(function() prog:compile("cubin", {name_expressions = {1}}) end, "item 1 is a number",
         "name_expressions items must be strings")
t.raises(function() cuda.Program(TEMPLATED, "c++", {arch = "sm_90"}, 4) end, "unexpected argument",
         "Program: an extra argument")
t.raises(function() cuda.ObjectCode.from_cubin(obj.code, "cubin") end, "unexpected argument",
         "from_cubin: an extra argument")
t.raises(function() cuda.Linker({obj}, {arch = "sm_90", bogus = 1}) end, "unknown option 'bogus'",
         "Linker: unknown options are named")

-- --- the new NVRTC options reach NVRTC --------------------------------------------------

do
  local P = function(o) o.arch = "sm_90"; return cuda.Program("", "c++", o).options end
  local function has(list, flag)
    for _, f in ipairs(list) do if f == flag then return true end end
    return false
  end
  local cases = {
    {{relocatable_device_code = true}, "--relocatable-device-code=true"},
    {{link_time_optimization = true}, "--dlink-time-opt"},
    {{max_register_count = 32}, "--maxrregcount=32"},
    {{ftz = true}, "--ftz=true"}, {{ftz = false}, "--ftz=false"},
    {{prec_sqrt = false}, "--prec-sqrt=false"}, {{prec_div = true}, "--prec-div=true"},
    {{fma = false}, "--fmad=false"},
    {{device_as_default_execution_space = true}, "--device-as-default-execution-space"},
    {{split_compile = 2}, "--split-compile=2"}, {{time = tmp .. "/t.csv"}, "--time=" .. tmp .. "/t.csv"},
    {{no_cache = true}, "--no-cache"}, {{diag_suppress = {177, 550}}, "--diag-suppress=550"},
    {{undefine_macro = {"FOO"}}, "--undefine-macro=FOO"}, {{device_int128 = true}, "--device-int128"},
    {{extra_device_vectorization = true}, "--extra-device-vectorization"},
    {{ptxas_options = {"-v"}}, "--ptxas-options=-v"}, {{use_fast_math = true}, "--use_fast_math"},
  }
  for _, c in ipairs(cases) do
    local key, value = next(c[1])
    t.ok(has(P(c[1]), c[2]), ("%s = %s -> %s"):format(key, tostring(value), c[2]))
  end
  t.raises(function() P{max_register_count = "32"} end, "field 'max_register_count' must be an integer",
           "max_register_count is type-checked")
  t.raises(function() P{ftz = 1} end, "field 'ftz' must be a boolean", "ftz is type-checked")
  t.raises(function() P{split_compile = -1} end, "field 'split_compile' must be >= 0", "split_compile >= 0")
  t.raises(function() P{diag_error = {"x"}} end, "list of integers", "diag_error takes integers")
  -- every option is one NVRTC accepts
  local all = {relocatable_device_code = true, max_register_count = 64, ftz = true, prec_sqrt = true,
               prec_div = true, fma = true, device_as_default_execution_space = true,
               split_compile = 1, no_cache = true,
               device_code_optimize = true, builtin_move_forward = true, builtin_initializer_list = true,
               restrict = true, device_int128 = true, no_display_error_number = true,
               diag_warn = {177}, brief_diagnostics = true, arch = "sm_90"}
  ok, err = pcall(function()
    return cuda.Program('extern "C" __global__ void k(float *x) { x[0] = 1; }', "c++", all):compile("cubin")
  end)
  t.ok(ok, "NVRTC accepts every flag the options map to: " .. tostring(err))
  -- max_register_count reaches the code: a register-hungry kernel capped at 32
  local src = 'extern "C" __global__ void k(float *x) { x[0] = x[1] * x[2]; }'
  t.is(cubin_sm(cuda.Program(src, "c++", {arch = "sm_90", max_register_count = 32}):compile("cubin").code), 90,
       "max_register_count compiles")
end

-- --- LTO: two LTO-IR objects into an sm_90 cubin -------------------------------------------

local main_ir, lib_ir = ltoir(LTO_MAIN, "main.cu"), ltoir(LTO_LIB, "scale.cu")
t.ok(main_ir.kind == "ltoir" and main_ir.code:sub(1, 4) == "\xed\x43\x4e\x7f", "compile('ltoir'): LTO-IR")
t.raises(function() cuda.Program(LTO_LIB, "c++", {arch = "sm_90"}):compile("ltoir") end,
         "link_time_optimization = true", "compile('ltoir') without LTO says what is missing")
local linker = cuda.Linker({main_ir, lib_ir}, {arch = "sm_90", lto = true})
t.is(linker.log, nil, "no log before linking")
local linked = linker:link("cubin")
t.is(linked.kind, "cubin", "link('cubin') gives a cubin")
t.is(cubin_sm(linked.code), 90, "for sm_90")
t.ok(linked.code:find("scale_all", 1, true) ~= nil, "holding the kernel")
t.ok(pcall(cuda.ObjectCode.from_data, linked.code), "the linked cubin passes the bounds check")
t.is(type(linker.log), "string", "linker.log after a link")
local lptx = cuda.Linker({main_ir, lib_ir}, {arch = "sm_90", lto = true}):link("ptx")
t.ok(lptx.kind == "ptx" and lptx.code:find("%.entry scale_all") ~= nil, "link('ptx') of LTO-IR")
t.ok(lptx.code:find("3%.0") ~= nil or lptx.code:find("0f40400000") ~= nil,
     "the PTX has scale() inlined across files (3.0f)")
t.raises(function() cuda.Linker({main_ir}, {arch = "sm_90"}):link("ptx") end, "needs the option lto",
         "link('ptx') without lto is refused clearly")
local verbose = cuda.Linker({main_ir, lib_ir}, {arch = "sm_90", lto = true, verbose = true,
                                                optimization_level = 3, ftz = true, fma = true})
verbose:link("cubin")
t.ok(#verbose.info_log > 0 and verbose.log:find(verbose.info_log, 1, true) ~= nil,
     "verbose: the info log is kept, and in linker.log")

-- relocatable cubins and PTX link too (no LTO)
do
  local function rdc(source, target)
    return cuda.Program(source, "c++", {arch = "sm_90", relocatable_device_code = true}):compile(target)
  end
  local c = cuda.Linker({rdc(LTO_MAIN, "cubin"), rdc(LTO_LIB, "ptx")}, {arch = "sm_90"}):link("cubin")
  t.is(cubin_sm(c.code), 90, "a relocatable cubin and PTX link into a cubin")
end

-- --- a failed link: the log reaches the user ------------------------------------------------

do
  local lone = cuda.Linker({main_ir}, {arch = "sm_90", lto = true})
  local lok, lerr = pcall(lone.link, lone, "cubin")
  t.ok(not lok and getmetatable(lerr) == cuda.Error, "a failed link raises a cuda.Error")
  lerr = type(lerr) == "table" and lerr or {}
  t.like(lerr.name, "^NVJITLINK_ERROR_", "err.name is nvJitLink's result")
  t.like(lerr.message, "scale", "the message carries the log, naming the undefined symbol")
  t.ok(lerr.log and lerr.log:find("scale") ~= nil, "err.log is the error log")
  t.ok(lone.error_log and lone.error_log:find("scale") ~= nil, "linker.error_log keeps it")
  t.like(tostring(lerr), "^nvJitLink%w+: NVJITLINK_ERROR_", "tostring(err) names the API")
end

-- --- object kinds --------------------------------------------------------------------------

do
  local O = cuda.ObjectCode
  t.is(O.from_ltoir(main_ir.code).kind, "ltoir", "from_ltoir")
  t.is(O.from_cubin(linked.code).kind, "cubin", "from_cubin")
  t.is(O.from_ptx(lptx.code).kind, "ptx", "from_ptx")
  t.is(O.from_data(main_ir.code).kind, "ltoir", "from_data detects LTO-IR")
  t.raises(function() O.from_ltoir(linked.code) end, "not LTO%-IR", "from_ltoir checks the magic")
  t.raises(function() O.from_library("not an archive") end, "not a library", "from_library checks the magic")
  t.is(O.from_library("!<arch>\n").kind, "library", "from_library")
  t.raises(function() O.from_fatbin(linked.code) end, "not a fatbin", "from_fatbin checks the magic")
  t.raises(function() main_ir:get_kernel("scale_all") end,
           "cuda%.ObjectCode%(ltoir%) cannot be loaded: link it with cuda%.Linker",
           "get_kernel on LTO-IR: a clear error")
  -- an ObjectCode made by from_ltoir links like a compiled one
  local c = cuda.Linker({O.from_ltoir(main_ir.code), O.from_ltoir(lib_ir.code)}, {arch = "90", lto = true})
  t.is(cubin_sm(c:link("cubin").code), 90, "from_ltoir objects link")
  t.raises(function() cuda.Linker({main_ir, "x"}, {arch = "sm_90"}) end, "item 2 is a string",
           "Linker: every object is an ObjectCode")
  t.raises(function() cuda.Linker({}, {arch = "sm_90"}) end, "empty table", "Linker: no objects")
  c:close()
  t.raises(function() c:link("cubin") end, "cuda.Linker is closed", "a closed linker")
  t.is(tostring(c), "cuda.Linker (closed)", "tostring of a closed linker")
end

-- --- cuda.ProgramCache ------------------------------------------------------------------------

do
  local dir = tmp .. "/pc"
  local pc = cuda.ProgramCache(dir)
  local key = cuda.program_cache_key(TEMPLATED, "c++", {arch = "sm_90", name = "add.cu"}, "cubin", exprs)
  t.like(key, "^" .. ("%x"):rep(64) .. "$", "program_cache_key: 64 hex digits")
  t.isnt(key, cuda.program_cache_key(TEMPLATED, "c++", {arch = "sm_90", name = "add.cu"}, "cubin"),
         "the name expressions are part of the key")
  t.is(pc:get(key), nil, "get on an empty cache: nil")
  t.is(pc.misses, 1, "a miss is counted")
  local p = cuda.Program(TEMPLATED, "c++", {arch = "sm_90", name = "add.cu"})
  local o1 = p:compile("cubin", {name_expressions = exprs, cache = pc})
  t.is(p.cached, false, "compile with {cache = pc}: a miss first")
  t.is(#ls(dir), 1, "one entry written")
  local o2 = p:compile("cubin", {name_expressions = exprs, cache = pc})
  t.is(p.cached, true, "then a hit")
  t.is(o2.code, o1.code, "the same code")
  t.is(o2.name_expressions["add<double>"], o1.name_expressions["add<double>"],
       "the lowered names survive the cache")
  local hit = pc:get(key)
  t.ok(hit and hit.code == o1.code, "pc:get(program_cache_key(...)) finds what compile stored")
  t.is(hit and hit.name_expressions["add<float>"], o1.name_expressions["add<float>"],
       "with its name expressions")
  t.is(pc.hits, 2, "hits counted")

  pc:store("mine", linked)
  local back = pc:get("mine")
  t.ok(back and back.kind == "cubin" and back.code == linked.code, "store(key, obj), then get(key)")
  t.is(pc.size, (function() local n = 0; for _, f in ipairs(ls(dir)) do n = n + #read(dir .. "/" .. f) end; return n end)(),
       "pc.size is the bytes of its entries")

  -- corrupt: flip a byte of the payload; a miss, counted, and the file removed
  local before = ls(dir)
  for _, f in ipairs(before) do
    local data = read(dir .. "/" .. f)
    if data:find(linked.code, 1, true) then
      local at = 97 + math.random(0, #linked.code - 1)
      write(dir .. "/" .. f, data:sub(1, at - 1) .. string.char(data:byte(at) ~ 1) .. data:sub(at + 1))
    end
  end
  t.is(pc:get("mine"), nil, "a corrupt entry is a miss")
  t.is(pc.corrupt, 1, "and counted as corrupt")
  t.is(#ls(dir), #before - 1, "and removed")

  pc:clear()
  t.is(#ls(dir), 0, "clear() removes every entry")
  t.is(pc.size, 0, "size 0 after clear")

  -- eviction: room for two entries; the least recently used goes first
  local one = #linked.code + 96
  local small = cuda.ProgramCache(tmp .. "/lru", {max_size = 2 * one + 10})
  small:store("a", linked)
  small:store("b", linked)
  t.ok(small:get("a") ~= nil, "a is used again: b is now the least recently used")
  small:store("c", linked)
  t.is(small.evictions, 1, "a third entry evicts one")
  t.ok(small:get("b") == nil and small:get("a") ~= nil and small:get("c") ~= nil,
       "the least recently used one (b)")
  t.ok(small.size <= small.max_size, "the cache fits max_size")
  -- Stores and uses within one tick of the kernel's file clock: the order
  -- still holds, whatever order the directory lists the entries in (with
  -- the file system's own times, about half of these rounds evicted the
  -- wrong entry).
  local wrong = 0
  for round = 1, 20 do
    local lru = cuda.ProgramCache(("%s/lru%d"):format(tmp, round), {max_size = 2 * one + 10})
    local a, b, c = "a" .. round, "b" .. round, "c" .. round
    lru:store(a, linked)
    lru:store(b, linked)
    lru:get(a)
    lru:store(c, linked)
    if lru:get(b) ~= nil or lru:get(a) == nil or lru:get(c) == nil then wrong = wrong + 1 end
  end
  t.is(wrong, 0, "least recently used first, in 20 rounds of quick stores and uses")

  t.raises(function() cuda.ProgramCache(dir, {max_size = -1}) end, "max_size' must be >= 0", "max_size >= 0")
  t.raises(function() cuda.ProgramCache(dir, {maxsize = 1}) end, "unknown option 'maxsize'", "unknown option")
  t.raises(function() pc:get("k", 2) end, "unexpected argument", "get: an extra argument")
  t.raises(function() pc:store("k", "code") end, "cuda.ObjectCode expected", "store needs an ObjectCode")
  pc:close()
  t.raises(function() pc:get("k") end, "cuda.ProgramCache is closed", "a closed cache")
end

-- --- no toolkit, no driver: what still works ------------------------------------------------

do
  local code, out = t.run("/lib64/ld-linux-x86-64.so.2 --inhibit-cache " .. cudalua .. " --version")
  t.ok(code == 0 and out:find("cudalua") ~= nil, "cudalua --version starts with the loader's cache inhibited")
  local ldd = io.popen("ldd " .. cudalua .. " 2>&1"):read("a")
  t.ok(not ldd:find("nvrtc") and not ldd:find("nvJitLink") and not ldd:find("libcuda"),
       "cudalua links no NVRTC, nvJitLink or libcuda")
  local script = tmp .. "/nvrtc.lua"
  write(script, [[
local cuda = require "cuda"
local ok, err = pcall(function()
  return cuda.Program('extern "C" __global__ void k() {}', "c++", {arch = "sm_90"}):compile("cubin")
end)
print(ok, err.unavailable, err.message)
]])
  local c, o = t.run("CUDALUA_CACHE=off CUDALUA_NVRTC=/nonexistent " .. cudalua .. " " .. script)
  t.like(o, "^false\ttrue\tcompiling CUDA C%+%+ needs NVRTC %(the CUDA runtime compiler%), which could not be opened %(/nonexistent",
         "without NVRTC a compile raises one sentence naming the library")
  t.ok(c == 0 and not o:find("\n.+\n"), "one line")
  -- a cached compile needs no NVRTC
  local cache = tmp .. "/nonvrtc"
  write(script, [[
local cuda = require "cuda"
local p = cuda.Program('extern "C" __global__ void k() {}', "c++", {arch = "sm_90"})
local o = p:compile("cubin")
io.write(tostring(p.cached), " ", o.kind)
]])
  t.run("CUDALUA_CACHE='" .. cache .. "' " .. cudalua .. " " .. script)
  c, o = t.run("CUDALUA_CACHE='" .. cache .. "' CUDALUA_NVRTC=/nonexistent " .. cudalua .. " " .. script)
  t.is(o, "true cubin", "with the entry cached, compile works without NVRTC")
  write(script, [[
local cuda = require "cuda"
local ir = cuda.ObjectCode.from_ltoir(io.open(arg[1], "rb"):read("a"))
local ok, err = pcall(function() return cuda.Linker({ir}, {arch = "sm_90", lto = true}):link("cubin") end)
io.write(tostring(err.message))
]])
  write(tmp .. "/main.ltoir", main_ir.code)
  c, o = t.run("CUDALUA_NVJITLINK=/nonexistent " .. cudalua .. " " .. script .. " " .. tmp .. "/main.ltoir")
  t.like(o, "^linking needs nvJitLink %(the CUDA device linker%), which could not be opened",
         "without nvJitLink a link raises one sentence naming the library")
end

-- --- nvJitLink cannot take the process down ---------------------------------------------
-- nvJitLink ends the process (exit 1, "fatal : Unknown arch name 'compute_3'")
-- for -arch=sm_3, and after one LTO link it segfaults in nvJitLinkAddData on
-- two PTX objects that define the same kernel. The arch is refused when the
-- linker is made; every link runs in a child process, so a crash there is a
-- cuda.Error here. Each case runs in a process of its own, which must live.

local function run_script(source, env)
  local script = tmp .. "/nvjitlink_case.lua"
  write(script, source)
  return t.run((env or "") .. " " .. cudalua .. " " .. script)
end

local PRELUDE = [[
local cuda = require "cuda"
local function rdc(source, target, lto)
  return cuda.Program(source, "c++", {arch = "sm_90", relocatable_device_code = true,
                                      link_time_optimization = lto}):compile(target)
end
local K = 'extern "C" __global__ void k(float *x) { x[0] = 1; }'
local function try(f) local ok, err = pcall(f); return ok and "ok" or tostring(err) end
]]

do
  for _, arch in ipairs{"3", "sm_3", "sm_9", "sm_09", "lto_7", "compute_1"} do
    local code, out = run_script(PRELUDE .. ([[
local ptx = rdc(K, "ptx")
io.write(try(function() return cuda.Linker({ptx}, {arch = "sm_90"}):link("cubin") end), "\n")
io.write(try(function() return cuda.Linker({ptx}, {arch = %q}):link("cubin") end), "\n")
]]):format(arch))
    t.ok(code == 0 and out:find("^ok\n") and out:find("option 'arch': '[%w_]+' is not an architecture name"),
         ("arch %q after a link: refused clearly, and the process lives (exit %s: %s)"):format(arch, code, out))
  end
  t.raises(function() cuda.Linker({main_ir}, {arch = "sm_50", lto = true}) end,
           "'sm_50' is not an architecture this toolkit links for; it links for 75, 80",
           "an arch this toolkit does not support names those it does")
  t.raises(function() cuda.Linker({main_ir}, {arch = "sm_101"}) end, "sm_101' is not an architecture this",
           "sm_101 (gone from CUDA 13) is refused")
  for _, arch in ipairs{"sm_90a", "sm_100f", "compute_90", "lto_90", "120"} do
    t.ok(pcall(cuda.Linker, {main_ir}, {arch = arch}), "arch " .. arch .. " is accepted")
  end
  t.raises(function() cuda.Linker({main_ir}, {arch = "sm_90 -foo"}) end, "not an architecture name",
           "an arch with more after it is refused")

  -- the duplicate definition: after an LTO link, and without one
  for _, case in ipairs{{"ptx", true}, {"cubin", true}, {"ptx", false}, {"cubin", false}} do
    local code, out = run_script(PRELUDE .. ([[
if %s then
  assert(cuda.Linker({rdc(%q, "ltoir", true), rdc(%q, "ltoir", true)}, {arch = "sm_90", lto = true}):link("cubin"))
end
local a, b = rdc(K, %q), rdc(K, %q)
local ok, err = pcall(function() return cuda.Linker({a, b}, {arch = "sm_90"}):link("cubin") end)
io.write(tostring(ok), "\t", tostring(getmetatable(err) == cuda.Error), "\t", tostring(err))
]]):format(tostring(case[2]), LTO_MAIN, LTO_LIB, case[1], case[1]))
    t.ok(code == 0 and out:find("^false\ttrue\t") and out:find("Multiple definition of 'k'", 1, true),
         ("two %s objects defining k%s: a cuda.Error naming k (exit %s: %s)"):format(
           case[1], case[2] and ", after an LTO link" or "", code, out))
  end
  local lok, lerr = pcall(function()
    local a = cuda.Program(LTO_LIB .. 'extern "C" __global__ void k(float *x) { x[0] = 1; }', "c++",
                           {arch = "sm_90", relocatable_device_code = true}):compile("ptx")
    return cuda.Linker({a, a}, {arch = "sm_90"}):link("cubin")
  end)
  lerr = type(lerr) == "table" and lerr or {}
  t.ok(not lok and lerr.name == "NVJITLINK_ERROR_INVALID_INPUT" and lerr.log:find("Multiple definition", 1, true),
       "the same object twice: NVJITLINK_ERROR_INVALID_INPUT, the log says why")
end

-- A stand-in nvJitLink (CUDALUA_NVJITLINK) that crashes, exits, prints or
-- hands back a large cubin, as FAKE_NVJITLINK says: what the child process
-- must turn into errors or bytes, deterministically.
local FAKE_NVJITLINK = [[
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
typedef struct { int added; } Handle;
static const char *mode(void) { const char *m = getenv("FAKE_NVJITLINK"); return m ? m : ""; }
static char *output; static size_t output_size;
int nvJitLinkVersion(unsigned *major, unsigned *minor) { *major = 13; *minor = 0; return 0; }
int nvJitLinkCreate(Handle **h, uint32_t n, const char **opts)
{
  (void)n; (void)opts;
  if (strcmp(mode(), "exit") == 0) { fprintf(stderr, "fatal   : the stand-in exits\n"); exit(3); }
  *h = calloc(1, sizeof **h);
  return 0;
}
int nvJitLinkDestroy(Handle **h) { free(*h); *h = NULL; return 0; }
int nvJitLinkAddData(Handle *h, int type, const void *data, size_t size, const char *name)
{
  (void)type; (void)data; (void)size; (void)name;
  if (++h->added == 2 && strcmp(mode(), "segv") == 0) { puts("about to crash"); fflush(stdout); raise(SIGSEGV); }
  return 0;
}
int nvJitLinkComplete(Handle *h)
{
  (void)h;
  if (strcmp(mode(), "abort") == 0) abort();
  FILE *f = fopen(getenv("FAKE_NVJITLINK_CUBIN"), "rb");
  if (!f) return 6;
  output_size = strtoull(getenv("FAKE_NVJITLINK_SIZE"), NULL, 10);
  output = calloc(1, output_size);
  size_t got = fread(output, 1, output_size, f);
  fclose(f);
  return got > 0 ? 0 : 6;
}
int nvJitLinkGetLinkedCubinSize(Handle *h, size_t *size) { (void)h; *size = output_size; return 0; }
int nvJitLinkGetLinkedCubin(Handle *h, void *cubin) { (void)h; memcpy(cubin, output, output_size); return 0; }
int nvJitLinkGetLinkedPtxSize(Handle *h, size_t *size) { (void)h; *size = 0; return 0; }
int nvJitLinkGetLinkedPtx(Handle *h, char *ptx) { (void)h; (void)ptx; return 0; }
int nvJitLinkGetErrorLogSize(Handle *h, size_t *size) { (void)h; *size = 1; return 0; }
int nvJitLinkGetErrorLog(Handle *h, char *log) { (void)h; log[0] = 0; return 0; }
int nvJitLinkGetInfoLogSize(Handle *h, size_t *size) { (void)h; *size = 6; return 0; }
int nvJitLinkGetInfoLog(Handle *h, char *log) { (void)h; memcpy(log, "fake\n", 6); return 0; }
]]

do
  local so = tmp .. "/libfake_nvjitlink.so"
  write(tmp .. "/fake_nvjitlink.c", FAKE_NVJITLINK)
  local cc = os.getenv("CC") or "cc"
  local built = t.run(("%s -shared -fPIC -o '%s' '%s/fake_nvjitlink.c'"):format(cc, so, tmp, tmp)) == 0
  if not built then
    t.skip("no C compiler to build the stand-in nvJitLink", 9)
  else
    local cubin_file = tmp .. "/linked.cubin"
    write(cubin_file, linked.code)
    local size = 48 * 1024 * 1024 + 17           -- far past a pipe's buffer
    local env = ("CUDALUA_NVJITLINK='%s' FAKE_NVJITLINK_CUBIN='%s' FAKE_NVJITLINK_SIZE=%d"):format(
      so, cubin_file, size)
    local case = [[
local cuda = require "cuda"
local ir = cuda.ObjectCode.from_ltoir(io.open(arg[1], "rb"):read("a"))
io.write("unflushed ")
local linker = cuda.Linker({ir, ir}, {arch = "sm_90", lto = true})
local ok, err = pcall(linker.link, linker, "cubin")
if ok then
  local want = io.open(arg[2], "rb"):read("a")
  io.write("linked ", #err.code, " ", tostring(err.code:sub(1, #want) == want), " ", linker.info_log)
else
  io.write(tostring(getmetatable(err) == cuda.Error), "|", tostring(err.crashed), "|", tostring(err.signal),
           "|", tostring(err.exit_status), "|", tostring(err.api), "|", err.message)
end
]]
    write(tmp .. "/main.ltoir", main_ir.code)
    local function fake(mode)
      local script = tmp .. "/fake_case.lua"
      write(script, case)
      return t.run(("%s FAKE_NVJITLINK=%s %s %s '%s/main.ltoir' '%s'"):format(env, mode, cudalua, script, tmp, cubin_file))
    end
    local code, out = fake("segv")
    t.like(out, "^unflushed true|true|11|nil|nvJitLinkAddData|nvJitLink crashed %(signal 11, [^)]+%) while adding object 2 %(ltoir%)",
           "a segfault in nvJitLinkAddData: a cuda.Error naming the signal and the object")
    t.ok(code == 0 and out:find("about to crash", 1, true), "with what it printed, and the process lives")
    code, out = fake("exit")
    t.like(out, "^unflushed true|true|nil|3|nvJitLinkCreate|nvJitLink ended its process %(exit status 3%) while creating the link handle: fatal   : the stand%-in exits",
           "exit() inside nvJitLink: the status, the stage and the message")
    t.is(select(2, out:gsub("unflushed", "")), 1, "what the script wrote before is not written twice")
    code, out = fake("abort")
    t.like(out, "^unflushed true|true|6|nil|nvJitLinkComplete|nvJitLink crashed %(signal 6, [^)]+%) while completing the link",
           "abort() in nvJitLinkComplete")
    code, out = fake("big")
    t.is(out, ("unflushed linked %d true fake\n"):format(size), "a 48 MB cubin comes back whole through the pipe")
    t.is(code, 0, "and the process exits 0")
    -- many links: no descriptor, child or memory left behind
    write(tmp .. "/many.lua", [[
local cuda = require "cuda"
local function slurp(path) local f <close> = assert(io.open(path, "rb")); return f:read("a") end
local ir = cuda.ObjectCode.from_ltoir(slurp(arg[1]))
local pid = math.tointeger(slurp("/proc/self/stat"):match("^%d+"))
local function fds()   -- the descriptors open, by probing (a popen'd ls races with popen's own)
  collectgarbage()
  local n = 0
  for fd = 0, 1023 do
    local f = io.open(("/proc/%d/fdinfo/%d"):format(pid, fd))
    if f then n = n + 1; f:close() end
  end
  return n
end
local before = fds()
for _ = 1, 40 do
  local linker = cuda.Linker({ir, ir}, {arch = "sm_90", lto = true})
  pcall(linker.link, linker, "cubin")
end
local children = slurp(("/proc/%d/task/%d/children"):format(pid, pid))
io.write(fds() - before, " [", (children:gsub("%s", "")), "]")
]])
    code, out = t.run(("%s FAKE_NVJITLINK=segv FAKE_NVJITLINK_SIZE=64 %s '%s/many.lua' '%s/main.ltoir'"):format(env, cudalua, tmp, tmp))
    t.is(out, "0 []", "40 crashed links leave no descriptor open and no child behind")
    code, out = t.run(("%s FAKE_NVJITLINK=big FAKE_NVJITLINK_SIZE=4096 %s '%s/many.lua' '%s/main.ltoir'"):format(env, cudalua, tmp, tmp))
    t.is(out, "0 []", "nor do 40 good ones")
  end
end

-- --- on the GPU: launch both examples and verify ------------------------------------------

if not cuda.is_available() then
  t.skip("no CUDA device", 3)
  os.execute("rm -rf '" .. tmp .. "'")
  t.done()
end

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local pinned = cuda.PinnedMemoryResource()
local arch = "sm_" .. dev.arch
local n = 1000
local cfg = cuda.LaunchConfig{grid = (n + 255) // 256, block = 256}

local tobj = cuda.Program(TEMPLATED, "c++", {arch = arch}):compile("cubin", {name_expressions = exprs})
for _, case in ipairs{{"add<float>", "float32"}, {"add<double>", "float64"}} do
  local kernel = tobj:get_kernel(case[1])
  local size = case[2] == "float32" and 4 or 8
  local a, b, out = pinned:allocate(n * size), pinned:allocate(n * size), pinned:allocate(n * size)
  local va, vb, vo = a:view(case[2]), b:view(case[2]), out:view(case[2])
  for i = 1, n do va[i], vb[i] = i, 0.5 * i end
  cuda.launch(s, cfg, kernel, a, b, out, n)
  s:sync()
  local bad = 0
  for i = 1, n do if vo[i] ~= 1.5 * i then bad = bad + 1 end end
  t.is(bad, 0, case[1] .. ": out = a + b for every element")
end

local lobj = cuda.Linker({ltoir(LTO_MAIN, "main.cu"), ltoir(LTO_LIB, "scale.cu")},
                         {arch = arch, lto = true}):link("cubin")
-- (ltoir() compiles for sm_90; recompile for this device when it differs)
if arch ~= "sm_90" then
  local function ir(src) return cuda.Program(src, "c++", {arch = arch, relocatable_device_code = true,
                                                          link_time_optimization = true}):compile("ltoir") end
  lobj = cuda.Linker({ir(LTO_MAIN), ir(LTO_LIB)}, {arch = arch, lto = true}):link("cubin")
end
local x = pinned:allocate(n * 4)
local vx = x:view("float32")
for i = 1, n do vx[i] = i end
cuda.launch(s, cfg, lobj:get_kernel("scale_all"), x, n)
s:sync()
local bad = 0
for i = 1, n do if vx[i] ~= 3 * i + 1 then bad = bad + 1 end end
t.is(bad, 0, "the LTO-linked kernel: x = 3x + 1 for every element")

os.execute("rm -rf '" .. tmp .. "'")
t.done()
