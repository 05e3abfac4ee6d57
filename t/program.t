-- Programs, object code and kernels: NVRTC compiles, object-code recognition,
-- bad input and find_kernel need no GPU and always run; kernel queries run
-- where there is one.
local t = require "tap"
local cudalua = t.cudalua()

-- These tests are about NVRTC: compile every time, and leave nothing in the
-- user's compile cache (t/cache.t tests the cache).
if os.getenv("CUDALUA_CACHE") ~= "off" then
  local _, how, code = os.execute("CUDALUA_CACHE=off " .. cudalua .. " '" .. arg[0] .. "'")
  os.exit(how == "exit" and code or 1)
end

local cuda = require "cuda"
t.seed()

local srcdir = os.getenv("CUDALUA_SRCDIR") or "."
local tmp = t.tmpdir()
local read, write = t.read_file, t.write_file

local function compile(source, target, options)
  options = options or {}
  options.arch = options.arch or "sm_80"
  return cuda.Program(source, "c++", options):compile(target or "cubin")
end

-- The CUDA ELF checks, written independently of program.c: ELF64,
-- little-endian, e_machine EM_CUDA (190); e_flags bits 8-15 hold the SM.
local function cubin_sm(code)
  if code:sub(1, 4) ~= "\127ELF" or code:byte(5) ~= 2 or code:byte(6) ~= 1 then return nil end
  if string.unpack("<I2", code, 19) ~= 190 then return nil end
  return string.unpack("<I4", code, 0x31) >> 8 & 0xff
end

local function kernel_names(source)
  local names = {}
  for name in source:gmatch('extern%s+"C"%s+__global__%s+void%s+([%w_]+)') do
    names[#names + 1] = name
  end
  return names
end

-- A subprocess running a chunk of Lua; returns code, stdout, stderr.
local function child(env, chunk)
  local script = tmp .. "/child.lua"
  write(script, chunk)
  return t.run(env .. " " .. cudalua .. " " .. script)
end

-- --- every bundled kernel, for three architectures, to cubin and PTX -----------

local files, refused = {}, {}
for name in io.popen("ls '" .. srcdir .. "/kernels'"):lines() do
  if name:match("%.cu$") then files[#files + 1] = name end
end
table.sort(files)
t.ok(#files >= 3, "kernels/ holds the .cu files (" .. table.concat(files, ", ") .. ")")

for _, file in ipairs(files) do
  local source = read(srcdir .. "/kernels/" .. file)
  local names = kernel_names(source)
  t.like(source, "^// [^\n]+\n", file .. " starts with a one-line comment")
  t.ok(#names > 0, file .. " defines extern \"C\" kernels")
  for _, arch in ipairs{"sm_75", "sm_80", "sm_90"} do
    local sm = tonumber(arch:match("%d+"))
    local prog = cuda.Program(source, "c++", {arch = arch, name = file})
    local cubin = prog:compile("cubin")
    local sound, why = pcall(cuda.ObjectCode.from_data, cubin.code)
    if not sound then refused[#refused + 1] = ("%s for %s: %s"):format(file, arch, why) end
    t.ok(cubin.kind == "cubin" and cubin_sm(cubin.code) == sm,
         ("%s for %s: a CUDA ELF cubin for SM %d"):format(file, arch, sm))
    local missing = {}
    for _, name in ipairs(names) do
      if not cubin.code:find(name, 1, true) then missing[#missing + 1] = name end
    end
    t.is(table.concat(missing, ","), "", ("%s for %s: the cubin names every kernel"):format(file, arch))
    local ptx = prog:compile("ptx")
    t.ok(ptx.kind == "ptx" and ptx.code:match("\n%.target (sm_%d+)") == arch,
         ("%s for %s: PTX targets %s"):format(file, arch, arch))
    missing = {}
    for _, name in ipairs(names) do
      if not ptx.code:find("%.entry " .. name .. "%(") then missing[#missing + 1] = name end
    end
    t.is(table.concat(missing, ","), "", ("%s for %s: the PTX has an .entry per kernel"):format(file, arch))
  end
end
t.is(table.concat(refused, "; "), "", "every cubin NVRTC made passes the bounds check")

-- --- compile errors reach the user with file and line ----------------------------

do
  local lines = {
    "// a kernel with an error on a known line",
    'extern "C" __global__ void broken(float *x)',
    "{",
    "  x[0] = 1.0f;",
    "  x[1] = undefined_name_" .. math.random(1e6) .. ";",
    "}",
  }
  local bad_line
  for i, l in ipairs(lines) do if l:find("undefined_name") then bad_line = i end end
  local prog = cuda.Program(table.concat(lines, "\n"), "c++", {arch = "sm_80", name = "bad_kernel.cu"})
  local ok, err = pcall(prog.compile, prog, "cubin")
  t.ok(not ok and getmetatable(err) == cuda.Error, "a failed compile raises a cuda.Error")
  err = type(err) == "table" and err or {}
  t.is(err.name, "NVRTC_ERROR_COMPILATION", "err.name")
  t.is(err.api, "nvrtcCompileProgram", "err.api")
  t.is(math.type(err.code), "integer", "err.code is the nvrtcResult")
  t.like(err.message, ("bad_kernel%%.cu%%(%d%%): error: identifier \"undefined_name_%%d+\" is undefined")
         :format(bad_line), "the message carries the log with file(line)")
  t.like(tostring(err), "^nvrtcCompileProgram: NVRTC_ERROR_COMPILATION %(.*bad_kernel%.cu%(" .. bad_line,
         "tostring(err) names the API and the place")
  t.like(prog.log, "bad_kernel%.cu%(" .. bad_line .. "%)", "prog.log keeps the failed compile's log")
  t.is(err.log, prog.log, "err.log is the whole log")
end

do
  local prog = cuda.Program('extern "C" __global__ void warns(int *x) { int unused_var; x[0] = 1; }',
                            "c++", {arch = "sm_80", name = "warns.cu"})
  t.is(prog.log, nil, "no log before compiling")
  prog:compile("cubin")
  t.like(prog.log, "warns%.cu%(1%): warning.*unused_var", "prog.log keeps the warnings of a good compile")
  t.is(prog.cached, false, "prog.cached is false with the cache off")
end

-- --- options reach NVRTC ------------------------------------------------------------

do
  local w = math.random(1, 1e6)
  local needs_w = ('#if !defined(WIDTH) || WIDTH != %d\n#error "WIDTH must be %d"\n#endif\n' ..
                   'extern "C" __global__ void k(int *x) { x[0] = WIDTH; }\n'):format(w, w)
  t.raises(function() compile(needs_w) end, "WIDTH must be " .. w, "without the define the #error fires")
  t.ok(pcall(compile, needs_w, "cubin", {defines = {WIDTH = w}}), "defines: an integer value")
  t.raises(function() compile(needs_w, "cubin", {defines = {WIDTH = w + 1}}) end, "WIDTH must be",
           "defines: the value is the one given")
  t.ok(pcall(compile, needs_w, "cubin", {defines = {WIDTH = ("(%d + 1)"):format(w - 1)}}),
       "defines: a string value")

  local needs_flag = '#ifndef FLAG\n#error "FLAG is not defined"\n#endif\n' ..
                     'extern "C" __global__ void k() {}\n'
  t.ok(pcall(compile, needs_flag, "cubin", {defines = {FLAG = true}}), "defines: true defines the macro")
  t.raises(function() compile(needs_flag, "cubin", {defines = {FLAG = false}}) end, "FLAG is not defined",
           "defines: false leaves it undefined")

  local s = math.random(1, 1000) + 0.25
  local needs_s = ('static_assert(SCALE > %.2f && SCALE < %.2f, "SCALE is off");\n' ..
                   'extern "C" __global__ void k() {}\n'):format(s - 0.01, s + 0.01)
  t.ok(pcall(compile, needs_s, "cubin", {defines = {SCALE = s}}), "defines: a float value")

  local prog = cuda.Program("", "c++", {arch = "sm_80", defines = {ZB = 1, AA = 2, MM = "x"}})
  local defs = {}
  for _, o in ipairs(prog.options) do if o:match("^%-D") then defs[#defs + 1] = o end end
  t.is(table.concat(defs, " "), "-DAA=2 -DMM=x -DZB=1", "defines are passed sorted by name")

  local header = "cudalua_test_header_" .. w .. ".h"
  write(tmp .. "/" .. header, ("#define FROM_HEADER %d\n"):format(w))
  local needs_header = ('#include "%s"\n#if FROM_HEADER != %d\n#error "wrong header"\n#endif\n' ..
                        'extern "C" __global__ void k() {}\n'):format(header, w)
  t.raises(function() compile(needs_header) end, "cannot open source file", "without include_path the header is missing")
  t.ok(pcall(compile, needs_header, "cubin", {include_path = {"/nonexistent", tmp}}), "include_path reaches NVRTC")

  local needs_extra = ('#if VIA_EXTRA != %d\n#error "VIA_EXTRA"\n#endif\nextern "C" __global__ void k() {}\n'):format(w)
  t.ok(pcall(compile, needs_extra, "cubin", {extra = {"-DVIA_EXTRA=" .. w}}), "extra options reach NVRTC")
  local ok, err = pcall(compile, needs_extra, "cubin", {extra = {"--no-such-option-" .. w}})
  t.ok(not ok and type(err) == "table" and err.name == "NVRTC_ERROR_INVALID_OPTION" and
       err.message:find("no%-such%-option") ~= nil, "a bad extra option is NVRTC's INVALID_OPTION, named")

  local needs17 = '#if __cplusplus < 201703L\n#error "needs C++17"\n#endif\nextern "C" __global__ void k() {}\n'
  t.raises(function() compile(needs17, "cubin", {std = "c++14"}) end, "needs C%+%+17", "std = c++14 reaches NVRTC")
  t.ok(pcall(compile, needs17, "cubin", {std = "c++17"}), "std = c++17")

  local vs = read(srcdir .. "/kernels/vector_scale.cu")
  local plain = compile(vs, "ptx").code
  t.ok(not plain:find("%.loc") and compile(vs, "ptx", {lineinfo = true}).code:find("%.loc") ~= nil,
       "lineinfo adds .loc line information")
  t.like(compile(vs, "ptx", {debug = true}).code, "%.target sm_80, debug", "debug compiles for debugging")
  t.ok(plain:find("sqrt%.rn%.f32") and compile(vs, "ptx", {fast_math = true}).code:find("sqrt%.approx"),
       "fast_math turns sqrtf into sqrt.approx")

  t.ok(pcall(compile, '#include <cuda/std/cstdint>\n#include <cuda_fp16.h>\n' ..
                      'extern "C" __global__ void k(cuda::std::uint32_t *x, __half h) { x[0] = 1; }\n'),
       "CUDA's and CCCL's headers are on the include path")
  t.is(cuda.Program("", "c++", {arch = "90"}).options[1], "--gpu-architecture=sm_90", 'arch "90" means sm_90')
end

-- --- bad input ------------------------------------------------------------------------

do
  local vs = read(srcdir .. "/kernels/vector_scale.cu")
  local P = cuda.Program
  t.raises(function() P(nil, "c++", {arch = "sm_80"}) end, "#1.*string expected, got nil", "nil source")
  t.raises(function() P(42, "c++", {arch = "sm_80"}) end, "#1.*string expected, got number", "number source")
  t.raises(function() P("a\0b", "c++", {arch = "sm_80"}) end, "NUL", "source with a NUL byte")
  t.raises(function() P(vs, "fortran") end, '#2.*code type must be "c%+%+" or "ptx", got \'fortran\'', "unknown code type")
  t.raises(function() P(vs) end, "#2.*expected, got no value", "missing code type")
  t.raises(function() P(vs, "c++", "sm_80") end, "#3.*table expected", "options not a table")
  t.raises(function() P(vs, "c++", {arch = "sm_80", archh = 1}) end, "unknown option 'archh'", "unknown option")
  t.raises(function() P(vs, "c++", {arch = 80}) end, "field 'arch' must be a string, got number", "arch of the wrong type")
  t.raises(function() P(vs, "c++", {arch = "sm_80", std = 17}) end, "field 'std' must be a string", "std of the wrong type")
  t.raises(function() P(vs, "c++", {arch = "sm_80", lineinfo = "yes"}) end, "field 'lineinfo' must be a boolean", "lineinfo of the wrong type")
  t.raises(function() P(vs, "c++", {arch = "sm_80", debug = 1}) end, "field 'debug' must be a boolean", "debug of the wrong type")
  t.raises(function() P(vs, "c++", {arch = "sm_80", fast_math = "on"}) end, "field 'fast_math' must be a boolean", "fast_math of the wrong type")
  t.raises(function() P(vs, "c++", {arch = "sm_80", name = {}}) end, "field 'name' must be a string", "name of the wrong type")
  t.raises(function() P(vs, "c++", {arch = "sm_80", defines = "N=4"}) end, "field 'defines' must be a table", "defines not a table")
  t.raises(function() P(vs, "c++", {arch = "sm_80", defines = {4}}) end, "field 'defines' must map macro names", "defines with a list entry")
  t.raises(function() P(vs, "c++", {arch = "sm_80", defines = {["2x"] = 1}}) end, "bad key: 2x", "defines with a bad macro name")
  t.raises(function() P(vs, "c++", {arch = "sm_80", defines = {N = {}}}) end, "field 'defines.N' must be a string, number or boolean", "a define of the wrong type")
  t.raises(function() P(vs, "c++", {arch = "sm_80", include_path = "/usr/include"}) end, "field 'include_path' must be a list of strings, got string", "include_path not a list")
  t.raises(function() P(vs, "c++", {arch = "sm_80", include_path = {"/a", 2}}) end, "item 2 is a number", "include_path with a number")
  t.raises(function() P(vs, "c++", {arch = "sm_80", extra = {true}}) end, "field 'extra' must be a list of strings", "extra with a boolean")

  local prog = P(vs, "c++", {arch = "sm_80"})
  t.raises(function() prog:compile("exe") end, 'target must be "cubin", "ptx" or "ltoir", got \'exe\'', "unknown target")
  t.raises(function() prog:compile() end, "string expected, got no value", "missing target")
  local ok, err = pcall(function() return P(vs, "c++", {arch = "sm_1"}):compile("cubin") end)
  t.ok(not ok and type(err) == "table" and err.name == "NVRTC_ERROR_INVALID_OPTION" and
       tostring(err):find("invalid value for %-%-gpu%-architecture") ~= nil, "arch sm_1: NVRTC's invalid-arch error")
  t.raises(function() P(vs, "c++", {arch = "compute_80"}):compile("cubin") end, "virtual architecture",
           "a cubin for a virtual arch is refused clearly")
  t.is(P(vs, "c++", {arch = "compute_80"}):compile("ptx").kind, "ptx", "PTX for a virtual arch")

  t.is(tostring(prog), "cuda.Program(c++, default_program)", "tostring(prog)")
  t.is(prog.code_type, "c++", "prog.code_type")
  prog:close()
  prog:close()
  t.is(tostring(prog), "cuda.Program (closed)", "a closed program says so")
  t.raises(function() prog:compile("cubin") end, "cuda.Program is closed", "compiling a closed program raises")
end

-- --- PTX programs -------------------------------------------------------------------------

do
  local ptx = compile(read(srcdir .. "/kernels/empty.cu"), "ptx").code
  local prog = cuda.Program(ptx, "ptx", {name = "empty.ptx"})
  local obj = prog:compile("ptx")
  t.ok(obj.kind == "ptx" and obj.code == ptx, "a PTX program compiles to itself")
  t.raises(function() prog:compile("cubin") end, 'compile%("cubin"%) of a PTX program is not supported',
           "compile('cubin') of PTX is a clear error")
  t.raises(function() cuda.Program("not ptx at all", "ptx") end, "not PTX", "PTX source is checked")
end

-- --- ObjectCode -------------------------------------------------------------------------------

local es = read(srcdir .. "/kernels/empty.cu")
local cubin, ptx = compile(es, "cubin"), compile(es, "ptx")
local fatbin_body = cubin.code
local fatbin = string.pack("<I4I2I2I8", 0xBA55ED50, 1, 16, #fatbin_body) .. fatbin_body

do
  local O = cuda.ObjectCode
  t.is(tostring(cubin), ("cuda.ObjectCode(cubin, %d bytes)"):format(#cubin.code), "tostring(objectcode)")
  t.is(cubin.size, #cubin.code, "obj.size")

  local o = O.from_data(cubin.code)
  t.ok(o.kind == "cubin" and o.code == cubin.code, "from_data detects a cubin")
  t.is(O.from_data(cubin.code, "cubin").kind, "cubin", "from_data with kind cubin")
  o = O.from_data(ptx.code)
  t.ok(o.kind == "ptx" and o.code == ptx.code, "from_data detects PTX")
  t.is(O.from_data("/* block */\n// line\n  .version 8.0\n.target sm_80\n").kind, "ptx",
       "PTX after comments")
  o = O.from_data(fatbin)
  t.ok(o.kind == "fatbin" and o.code == fatbin, "from_data detects a fatbin")
  t.is(O.from_data(fatbin, "fatbin").kind, "fatbin", "from_data with kind fatbin")

  t.raises(function() O.from_data(cubin.code, "ptx") end, "not PTX", "a cubin is not PTX")
  t.raises(function() O.from_data(ptx.code, "cubin") end, "not a cubin", "PTX is not a cubin")
  t.raises(function() O.from_data(cubin.code, "fatbin") end, "not a fatbin", "a cubin is not a fatbin")
  t.raises(function() O.from_data(cubin.code, "elf") end, 'kind must be "cubin", "ptx", "fatbin", "ltoir", "object" or "library"', "unknown kind")
  t.raises(function() O.from_data(42) end, "string expected", "from_data of a number")
  t.raises(function() O.from_data("") end, "not CUDA object code", "from_data of nothing")
  local garbage = {}
  for i = 1, 256 do garbage[i] = string.char(math.random(0, 255)) end
  garbage[1] = "G"
  t.raises(function() O.from_data(table.concat(garbage)) end, "not CUDA object code", "from_data of garbage")
  t.raises(function() O.from_data(cubin.code:sub(1, 200)) end, "truncated cubin", "a truncated cubin")
  t.raises(function() O.from_data(cubin.code:sub(1, 40)) end, "truncated cubin", "a cubin cut inside its header")
  t.raises(function() O.from_data(fatbin:sub(1, -2)) end, "truncated fatbin", "a truncated fatbin")
  t.raises(function() O.from_data(ptx.code .. "\0junk") end, "NUL", "PTX with a NUL byte")
  local host_elf = read(os.getenv("CUDALUA_BUILDDIR") and os.getenv("CUDALUA_BUILDDIR") .. "/src/cudalua" or "/bin/sh")
  t.raises(function() O.from_data(host_elf) end, "not a cubin: an ELF file for machine", "a host ELF file is not a cubin")

  -- cuLibraryLoadData takes no length: whatever a cubin's headers point at
  -- must lie in the data. The headers are found here the ELF64 way.
  local code = cubin.code
  local function patch(pos, fmt, value, base)
    base = base or code
    local packed = string.pack(fmt, value)
    return base:sub(1, pos - 1) .. packed .. base:sub(pos + #packed)
  end
  local shoff, shnum = string.unpack("<I8", code, 0x29), string.unpack("<I2", code, 0x3d)
  local sec, sh                                   -- a section with bytes in the file
  for i = 1, shnum - 1 do
    local pos = shoff + 64 * i + 1
    local type, size = string.unpack("<I4", code, pos + 4), string.unpack("<I8", code, pos + 0x20)
    if type ~= 8 and size > 0 then sec, sh = i, pos break end
  end
  local sec_size = string.unpack("<I8", code, sh + 0x20)
  t.raises(function() O.from_data(patch(sh + 0x20, "<i8", -1)) end,
           "truncated cubin: section " .. sec .. " ends past its " .. #code .. " bytes",
           "a cubin whose section is 2^64-1 bytes long")
  t.raises(function() O.from_data(patch(sh + 0x18, "<I8", #code - sec_size + 1)) end,
           "truncated cubin: section " .. sec .. " ends past", "a cubin whose section starts too late")
  t.raises(function() O.from_data(patch(sh + 0x18, "<i8", -1)) end,
           "truncated cubin: section " .. sec .. " ends past", "a cubin whose section starts at 2^64-1")
  t.ok(pcall(O.from_data, patch(sh + 0x20, "<i8", -1, patch(sh + 4, "<I4", 8))),
       "a NOBITS section owns no bytes of the file: its size is not checked")
  t.raises(function() O.from_data(patch(0x29, "<I8", #code - 64 * shnum + 1)) end,
           "truncated cubin: its section headers end past", "a cubin whose section headers start too late")
  t.raises(function() O.from_data(patch(0x3b, "<I2", 40)) end, "not a cubin: it has no ELF64 section header table",
           "a cubin whose section headers are not ELF64's")
  local phoff, phnum = string.unpack("<I8", code, 0x21), string.unpack("<I2", code, 0x39)
  local seg, ph
  for i = 0, phnum - 1 do
    local pos = phoff + 56 * i + 1
    if string.unpack("<I8", code, pos + 0x20) > 0 then seg, ph = i, pos break end
  end
  if seg then
    t.raises(function() O.from_data(patch(ph + 0x20, "<I8", #code + 1)) end,
             "truncated cubin: segment " .. seg .. " ends past", "a cubin whose segment ends past the data")
  else
    t.skip("NVRTC's cubin has no segment with bytes")
  end
  local shared = compile('extern "C" __global__ void big(float *x) { __shared__ float s[12000]; ' ..
                         's[threadIdx.x] = x[0]; __syncthreads(); x[1] = s[11999 - threadIdx.x]; }').code
  local nobits_past_end = false
  shoff, shnum = string.unpack("<I8", shared, 0x29), string.unpack("<I2", shared, 0x3d)
  for i = 1, shnum - 1 do
    local pos = shoff + 64 * i + 1
    nobits_past_end = nobits_past_end or string.unpack("<I4", shared, pos + 4) == 8 and
      string.unpack("<I8", shared, pos + 0x18) + string.unpack("<I8", shared, pos + 0x20) > #shared
  end
  t.ok(nobits_past_end and pcall(O.from_data, shared),
       "a cubin with 48000 bytes of static shared memory (NOBITS past its end) passes")

  local kinds = {cubin = cubin.code, ptx = ptx.code, fatbin = fatbin}
  for kind, code in pairs(kinds) do
    local path = tmp .. "/code." .. kind
    write(path, code)
    local f = O.from_file(path)
    t.ok(f.kind == kind and f.code == code, "from_file reads a " .. kind)
  end
  t.raises(function() O.from_file(tmp .. "/code.cubin", "fatbin") end, "cannot load .*code%.cubin.*not a fatbin",
           "from_file checks a given kind")
  t.raises(function() O.from_file(tmp .. "/missing.cubin") end,
           "cannot read object code from '.*missing%.cubin': No such file", "from_file of a missing file")
  t.raises(function() O.from_file(tmp) end, "Is a directory", "from_file of a directory")
  write(tmp .. "/garbage.bin", table.concat(garbage))
  t.raises(function() O.from_file(tmp .. "/garbage.bin") end, "cannot load .*garbage%.bin.*not CUDA object code",
           "from_file of a corrupt file")
  write(tmp .. "/cut.cubin", cubin.code:sub(1, #cubin.code // 2))
  t.raises(function() O.from_file(tmp .. "/cut.cubin") end, "truncated cubin", "from_file of a truncated cubin")

  local nvcc = io.popen("command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null"):read("l")
  if nvcc then
    local code = t.run(("'%s' -fatbin -arch=sm_80 -o %s/real.fatbin %s/kernels/empty.cu"):format(nvcc, tmp, srcdir))
    local ok, f = pcall(O.from_file, tmp .. "/real.fatbin")
    t.ok(code == 0 and ok and f.kind == "fatbin", "a fatbin made by nvcc is recognized")
    code = t.run(("'%s' -cubin -lineinfo -arch=sm_80 -o %s/real.cubin %s/kernels/scale_and_bias.cu")
                 :format(nvcc, tmp, srcdir))
    ok, f = pcall(O.from_file, tmp .. "/real.cubin")
    t.ok(code == 0 and ok and f.kind == "cubin", "a cubin made by nvcc passes the bounds check: " .. tostring(f))
  else
    t.skip("no nvcc to make a real fatbin or cubin", 2)
  end

  o = O.from_data(cubin.code)
  t.raises(function() o:get_kernel() end, "string expected", "get_kernel without a name")
  t.raises(function() o:get_kernel("") end, "empty", "get_kernel with an empty name")
  o:close()
  o:close()
  t.is(tostring(o), "cuda.ObjectCode (closed)", "a closed ObjectCode says so")
  t.raises(function() return o.code end, "cuda.ObjectCode is closed", "a closed ObjectCode has no code")
  t.raises(function() o:get_kernel("empty") end, "cuda.ObjectCode is closed", "get_kernel on a closed ObjectCode")
end

-- --- without a driver -----------------------------------------------------------------------

do
  local code, out = child("CUDALUA_LIBCUDA=/nonexistent CUDALUA_CACHE=off", [[
    local cuda = require "cuda"
    local src = 'extern "C" __global__ void k() {}'
    print(pcall(cuda.Program, src, "c++"))
    local obj = cuda.Program(src, "c++", {arch = "sm_80"}):compile("cubin")
    print(obj.kind)
    local ok, e = pcall(obj.get_kernel, obj, "k")
    print(ok, e.unavailable, e.message)
  ]])
  local l1, l2, l3 = out:match("([^\n]*)\n([^\n]*)\n([^\n]*)")
  t.like(l1, "^false\t.*needs the option 'arch'.*no NVIDIA driver found", "no device: the error says arch is required and why")
  t.is(l2, "cubin", "no device: compiling with an arch works")
  t.like(l3, "^false\ttrue\tno NVIDIA driver found", "no device: get_kernel raises the unavailable error")
end

-- --- find_kernel --------------------------------------------------------------------------------

do
  local p = cuda.find_kernel("vector_scale.cu")
  t.ok(p and read(p) == read(srcdir .. "/kernels/vector_scale.cu"), "find_kernel finds the bundled kernel: " .. tostring(p))
  t.raises(function() cuda.find_kernel() end, "string expected", "find_kernel without a name")
  t.raises(function() cuda.find_kernel("") end, "empty", "find_kernel of an empty name")

  os.execute(("mkdir -p %s/k1 %s/k2 %s/proj/sub %s/proj/kernels"):format(tmp, tmp, tmp, tmp))
  local tag = tostring(math.random(1e9))
  write(tmp .. "/k2/both.cu", "// k2 " .. tag)
  write(tmp .. "/k1/both.cu", "// k1 " .. tag)
  write(tmp .. "/k2/only2.cu", "// only2")
  write(tmp .. "/proj/sub/beside.cu", "// beside")
  write(tmp .. "/proj/kernels/above.cu", "// above")
  write(tmp .. "/proj/sub/script.lua", [[
    local cuda = require "cuda"
    for _, n in ipairs{"both.cu", "only2.cu", "beside.cu", "above.cu", "vector_scale.cu"} do
      print(n, cuda.find_kernel(n))
    end
    print("ERR:" .. select(2, pcall(cuda.find_kernel, "nowhere_]] .. tag .. [[.cu")))
  ]])
  local code, out, err = t.run(("CUDALUA_KERNEL_PATH='%s/k1::%s/k2' %s %s/proj/sub/script.lua")
                               :format(tmp, tmp, cudalua, tmp))
  local found = {}
  for n, path in out:gmatch("([%w_]+%.cu)\t([^\n]+)") do found[n] = path end
  t.is(found["both.cu"], tmp .. "/k1/both.cu", "CUDALUA_KERNEL_PATH: earlier directories first")
  t.is(found["only2.cu"], tmp .. "/k2/only2.cu", "CUDALUA_KERNEL_PATH: each directory is searched")
  t.is(found["beside.cu"], tmp .. "/proj/sub/beside.cu", "the script's directory")
  t.is(found["above.cu"], tmp .. "/proj/sub/../kernels/above.cu", "the script's ../kernels")
  t.like(found["vector_scale.cu"], "/kernels/vector_scale%.cu$", "the installed kernels/ last")
  local msg = out:match("ERR:(.*)") or err
  t.like(msg, "kernel file 'nowhere_" .. tag .. "%.cu' not found", "a missing kernel file raises")
  local places = {tmp .. "/k1/", tmp .. "/k2/", tmp .. "/proj/sub/nowhere", tmp .. "/proj/sub/../kernels/", "/kernels/nowhere"}
  local unnamed = {}
  for _, place in ipairs(places) do
    if not msg:find(place, 1, true) then unnamed[#unnamed + 1] = place end
  end
  t.is(table.concat(unnamed, ", "), "", "the error names every place it looked")

  t.is(cuda.datadir, os.getenv("CUDALUA_SRCDIR"), "cuda.datadir: from the build tree, the source tree")
  local lua = os.getenv("LUA")
  if lua and lua ~= "" and (os.getenv("CUDALUA_SANITIZERS") or "") == "" then
    local so = (os.getenv("CUDALUA_BUILDDIR") or ".") .. "/src/.libs/?.so"
    code, out = t.run(("LUA_CPATH='%s' LUA_PATH='%s/lua/?.lua' CUDALUA_KERNEL_PATH='%s/k2' %s -e " ..
                       "'print(require(\"cuda\").find_kernel(\"only2.cu\"))'"):format(so, srcdir, tmp, lua))
    t.is(out, tmp .. "/k2/only2.cu\n", "require \"cuda\" in stock lua5.4 has cuda.find_kernel")
  else
    t.skip("no stock Lua interpreter, or a sanitizer build")
  end
end

-- --- on a GPU ------------------------------------------------------------------------------------

local GPU_TESTS = 28
if not cuda.is_available() then
  t.skip("no CUDA device: " .. select(2, cuda.is_available()), GPU_TESTS)
else
  local dev = cuda.Device()
  local arch = "sm_" .. dev.arch
  local vs = read(srcdir .. "/kernels/vector_scale.cu")
  local obj = compile(vs, "cubin", {arch = arch})
  local k = obj:get_kernel("vector_scale")
  t.is(tostring(k), "cuda.Kernel(vector_scale, 4 params)", "tostring(kernel)")
  t.is(k.name, "vector_scale", "k.name")
  local params = k.params
  local sizes = {}
  for i, p in ipairs(params) do sizes[i] = p.size end
  t.is(table.concat(sizes, ","), "8,8,4,8", "vector_scale's parameter sizes")
  local aligned = params[1].offset == 0
  for i = 2, #params do
    aligned = aligned and params[i].offset >= params[i - 1].offset + params[i - 1].size
                      and params[i].offset % params[i].size == 0
  end
  t.ok(aligned, "parameter offsets are increasing and aligned")

  local a = k.attributes
  t.ok(a.num_regs > 0 and a.num_regs <= 255, "attributes.num_regs " .. a.num_regs)
  t.ok(a.max_threads_per_block > 0 and a.max_threads_per_block <= 1024,
       "attributes.max_threads_per_block " .. a.max_threads_per_block)
  t.is(a.binary_version, tonumber(dev.arch), "attributes.binary_version is the compiled arch")
  t.ok(a.ptx_version > 0 and a.shared_size_bytes == 0 and a.local_size_bytes >= 0 and a.const_size_bytes >= 0,
       "attributes: ptx_version, shared/local/const sizes")

  local per_sm = dev.properties.max_threads_per_multiprocessor // 256
  local occ = k:occupancy(256, 0)
  t.ok(occ >= 1 and occ <= per_sm, ("occupancy(256) = %d, at most %d"):format(occ, per_sm))
  t.ok(k:occupancy(512) <= occ, "occupancy with larger blocks is not higher")
  t.raises(function() k:occupancy(0) end, "block size must be > 0", "occupancy(0)")

  local ok, err = pcall(obj.get_kernel, obj, "no_such_kernel")
  t.ok(not ok and type(err) == "table" and err.name == "CUDA_ERROR_NOT_FOUND", "a missing kernel: CUDA_ERROR_NOT_FOUND")
  t.like(type(err) == "table" and err.message, "no kernel named 'no_such_kernel'.*it has: vector_scale",
         "a missing kernel is named, with the kernels there are")

  local eo = compile(es, "cubin", {arch = arch})
  t.is(tostring(eo:get_kernel("empty")), "cuda.Kernel(empty, 0 params)", "empty: no parameters")
  sizes = {}
  for i, p in ipairs(eo:get_kernel("empty4").params) do sizes[i] = p.size end
  t.is(table.concat(sizes, ","), "8,8,4,8", "empty4's parameter sizes")
  ok, err = pcall(eo.get_kernel, eo, "nope")
  t.like(type(err) == "table" and err.message, "it has: .*empty", "the list names the kernels of a multi-kernel cubin")
  sizes = {}
  local sb = compile(read(srcdir .. "/kernels/scale_and_bias.cu"), "cubin", {arch = arch})
  for i, p in ipairs(sb:get_kernel("scale_and_bias").params) do sizes[i] = p.size end
  t.is(table.concat(sizes, ","), "8,4,4,8", "scale_and_bias's parameter sizes")

  local pk = compile(vs, "ptx", {arch = arch}):get_kernel("vector_scale")
  t.is(pk.attributes.binary_version, tonumber(dev.arch), "PTX is JIT-compiled for the device")
  ok, err = pcall(function() return compile(vs, "ptx", {arch = arch}):get_kernel("nope") end)
  t.like(type(err) == "table" and err.message, "it has: vector_scale", "PTX: missing kernels list the .entry names")

  write(tmp .. "/vs.cubin", obj.code)
  t.is(tostring(cuda.ObjectCode.from_file(tmp .. "/vs.cubin"):get_kernel("vector_scale")),
       "cuda.Kernel(vector_scale, 4 params)", "a kernel from a cubin file")
  local nvcc = io.popen("command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null"):read("l")
  if nvcc and t.run(("'%s' -fatbin -arch=%s -o %s/dev.fatbin %s/kernels/vector_scale.cu"):format(nvcc, arch, tmp, srcdir)) == 0 then
    local fat = cuda.ObjectCode.from_file(tmp .. "/dev.fatbin")
    t.is(tostring(fat:get_kernel("vector_scale")), "cuda.Kernel(vector_scale, 4 params)",
         "a kernel from an nvcc fatbin")
    ok, err = pcall(fat.get_kernel, fat, "nope")
    t.like(type(err) == "table" and err.message, "no kernel named 'nope' in cuda%.ObjectCode%(fatbin.*it has: vector_scale%)",
           "fatbin: missing kernels list the kernels the driver found")
  else
    t.skip("no nvcc to make a fatbin", 2)
  end

  local sources = {}
  for i = 1, 30 do sources[i] = ('extern "C" __global__ void k%d(int *x) { x[%d] = %d; }'):format(i, i, i) end
  ok, err = pcall(function() return compile(table.concat(sources, "\n"), "cubin", {arch = arch}):get_kernel("nope") end)
  local listed, names = type(err) == "table" and err.message:match("it has: (.*)%)$") or "", {}
  for name in listed:gmatch("[^, ]+") do names[#names + 1] = name end
  local seen, fine = {}, #names == 25 and names[25] == "..."
  for i = 1, 24 do
    fine = fine and names[i]:match("^k%d+$") ~= nil and not seen[names[i]]
    seen[names[i] or i] = true
  end
  t.ok(fine, "30 kernels: the error names 24 different ones, then ...: " .. listed)

  local wrong = tonumber(dev.arch) >= 100 and "sm_75" or "sm_120"
  ok, err = pcall(function() return compile(vs, "cubin", {arch = wrong}):get_kernel("vector_scale").attributes end)
  t.like(not ok and tostring(err), "CUDA_ERROR_", "a cubin for another GPU raises a driver error")

  local many = {}
  for i = 1, 65 do many[i] = "int p" .. i end
  local big = compile('extern "C" __global__ void many(' .. table.concat(many, ", ") .. ") {}", "cubin", {arch = arch})
  t.raises(function() big:get_kernel("many") end, "more than 64 parameters", "more than CL_MAX_PARAMS parameters")

  local k2 = obj:get_kernel("vector_scale")
  obj:close()
  t.is(tostring(k2), "cuda.Kernel (closed)", "closing the ObjectCode closes its kernels")
  t.raises(function() k2:occupancy(256) end, "closed", "a kernel of a closed ObjectCode raises")
  t.raises(function() return k.attributes end, "closed", "every kernel of it")
end

os.execute("rm -rf '" .. tmp .. "'")
t.done()
