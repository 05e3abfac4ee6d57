-- Hostile programs against object code, programs, caches and the linker
-- (issue 19): finalizers that close an ObjectCode while get_kernel lists its
-- kernels, a ProgramCache that only an __index holds, cache entries whose
-- bytes would make the driver read past them, NVRTC's empty PTX, eviction of
-- a cache with no entries, and nvJitLink quoting input names cudalua freed.
-- Each case runs in a child cudalua, so that a crash fails its test instead
-- of ending the suite; the ones that need NVRTC or nvJitLink skip without.
local t = require "tap"
local fake = require "fake"
local cudalua = t.cudalua()

-- Nothing here may touch the user's compile cache.
if os.getenv("CUDALUA_CACHE") ~= "off" then
  local _, how, code = os.execute("CUDALUA_CACHE=off " .. cudalua .. " '" .. arg[0] .. "'")
  os.exit(how == "exit" and code or 1)
end

local cuda = require "cuda"
local xxh64 = require "xxh64"
t.seed()
t.plan(32)

local dir = t.tmpdir()
local read, write, ls = t.read_file, t.write_file, t.ls

-- Whether a toolkit library can be used: NVRTC compiles, nvJitLink links.
local function unavailable(f)
  local ok, err = pcall(f)
  if ok then return nil end
  err = tostring(type(err) == "table" and err.message or err)
  return err:match("could not be opened") and err or nil, err
end
local TINY = 'extern "C" __global__ void k(int *x) { x[0] = 1; }'
local no_nvrtc = unavailable(function() cuda.Program(TINY, "c++", {arch = "sm_90"}):compile("ptx") end)
local no_nvjitlink = no_nvrtc or unavailable(function()
  local ptx = cuda.Program(TINY, "c++", {arch = "sm_90"}):compile("ptx")
  cuda.Linker({ptx}, {arch = "sm_90"}):link("cubin")
end)

local PRELUDE = [[
local cuda = require "cuda"
-- every allocation's GC check completes a whole cycle (as t/gcstress.lua)
local function aggressive_gc()
  collectgarbage("incremental", 0, 1000, 40)
  collectgarbage("setpause", 0)
end
-- Close obj at the n-th collection from now: the finalizer re-arms itself
-- n - 1 times, so n = 1, 2, ... lands the close at every allocation of a call.
local function close_after(n, obj)
  local function arm()
    setmetatable({}, {__gc = function()
      n = n - 1
      if n <= 0 then pcall(obj.close, obj) else arm() end
    end})
  end
  arm()
end
local DIR = ]] .. ("%q"):format(dir) .. "\n"

-- Run a script in a child (env: shell assignments before it); its exit code
-- (0 for a clean exit) and what it printed.
local function child(name, body, env)
  local path = dir .. "/" .. name:gsub("[^%w]+", "_") .. ".lua"
  write(path, PRELUDE .. body)
  local code, out, err = t.run((env or "") .. " " .. cudalua .. " '" .. path .. "'")
  return code, out .. err
end

-- The child must exit cleanly and print something matching pattern.
local function survives(name, body, pattern, env)
  local code, out = child(name, body, env)
  t.is(code, 0, name .. ": exits cleanly")
  t.like(out, pattern, name .. ": outcome")
end

-- PTX with many long kernel names: listing them outgrows luaL_Buffer's
-- first block, so the listing allocates between the driver's answers.
local NAMES = {}
for i = 1, 30 do NAMES[i] = ("kernel_with_a_rather_long_name_%02d_%s"):format(i, ("x"):rep(40)) end
local MANY_PTX = ".version 8.0\n.target sm_90\n.address_size 64\n"
for _, name in ipairs(NAMES) do MANY_PTX = MANY_PTX .. ".visible .entry " .. name .. "()\n{\n\tret;\n}\n" end
write(dir .. "/many.ptx", MANY_PTX)
local LISTED = table.concat(NAMES, ", ", 1, 24) .. ", ...)"
write(dir .. "/listed.txt", LISTED)

-- --- get_kernel lists the kernels while a finalizer closes the ObjectCode ----------------

local fake_so = os.getenv("CUDALUA_FAKE_LIBCUDA")
if fake_so and io.open(fake_so) then
  survives("get_kernel's list of kernels while a finalizer closes the ObjectCode", [[
local f = assert(io.open(DIR .. "/many.ptx")); local ptx = f:read("a"); f:close()
f = assert(io.open(DIR .. "/listed.txt")); local listed = f:read("a"); f:close()
aggressive_gc()
local counts = {listed = 0, closed = 0}
for n = 1, 80 do
  local obj = cuda.ObjectCode.from_ptx(ptx)
  close_after(n % 8 + 1, obj)
  for _ = 1, n // 8 do local _ = {} end           -- shifts where the close lands
  local ok, err = pcall(obj.get_kernel, obj, "no_such_kernel")
  assert(not ok)
  err = tostring(err)
  if err:find("closed", 1, true) then
    counts.closed = counts.closed + 1
  else
    assert(err:find("(it has: " .. listed, 1, true), "a wrong list: " .. err)
    counts.listed = counts.listed + 1
  end
end
print(("listed %d closed %d"):format(counts.listed, counts.closed))
]], "listed [1-9]%d* closed %d+", fake.env())

  survives("kernels made, queried and measured while a finalizer closes their ObjectCode", [[
local f = assert(io.open(DIR .. "/many.ptx")); local ptx = f:read("a"); f:close()
aggressive_gc()
local done, closed = 0, 0
for n = 1, 60 do
  local obj = cuda.ObjectCode.from_ptx(ptx)
  local ok, k = pcall(obj.get_kernel, obj, "]] .. NAMES[3] .. [[")
  if ok then
    close_after(n % 12 + 1, obj)
    local a = pcall(function() return k.attributes.num_regs end)
    local b = pcall(function() return k.params end)
    local c = pcall(k.occupancy, k, 128)
    if a and b and c then done = done + 1 else closed = closed + 1 end
  end
end
print(("done %d closed %d"):format(done, closed))
]], "done [1-9]%d* closed %d+", fake.env())
else
  t.skip("no fake driver (CUDALUA_FAKE_LIBCUDA: run by make check)", 4)
end

-- --- a ProgramCache that only an __index holds -----------------------------------------------

if no_nvrtc then
  t.skip("no NVRTC: " .. no_nvrtc, 3)
else
  os.execute("mkdir -p '" .. dir .. "/anchored'")
  survives("compile{cache = pc}: pc made by __index and collected mid-compile", [[
aggressive_gc()
local made = 0
local options = setmetatable({}, {__index = function(_, key)
  if key == "cache" then
    made = made + 1
    return cuda.ProgramCache(DIR .. "/anchored")    -- anchored nowhere
  end
end})
for i = 1, 3 do
  local src = 'extern "C" __global__ void k(int *x) { x[0] = ' .. i .. '; }'
  local obj = cuda.Program(src, "c++", {arch = "sm_90"}):compile("cubin", options)
  assert(obj.kind == "cubin")
end
print("made " .. made)
]], "made 3")
  t.is(#ls(dir .. "/anchored"), 3, "compile{cache = pc}: each compile stored its entry in pc's directory")
end

-- --- untrusted bytes: cache entries -------------------------------------------------------------

-- A cache entry, as cache.c writes it: "CLCACHE3", whose checksum covers the
-- whole entry (its own 8 bytes read as zero), or the previous "CLCACHE2",
-- whose checksum covered the payload only.
local HEADER = "<c8 I8 I8 I8 I4 I4 c32 i8 c16"
local function entry(format, kind, code, key_digest)
  local payload = code
  local function header(sum)
    return string.pack(HEADER, format == 2 and "CLCACHE2" or "CLCACHE3", #code, 0, 0, kind, 0,
                       key_digest, sum, ("\0"):rep(16))
  end
  if format == 2 then return header(xxh64(payload)) .. payload end
  return header(xxh64(header(0) .. payload)) .. payload
end

local PTX = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n"
-- An ELF64 CUDA header whose section table lies far past the bytes: the
-- driver, which takes no length, would read there.
local BAD_CUBIN = "\127ELF\2\1\1" .. ("\0"):rep(11) .. string.pack("<I2", 190) ..
  ("\0"):rep(64 - 20)
BAD_CUBIN = BAD_CUBIN:sub(1, 0x28) .. string.pack("<I8", 1 << 40) .. BAD_CUBIN:sub(0x31)
BAD_CUBIN = BAD_CUBIN:sub(1, 0x3a) .. string.pack("<I2I2", 64, 3) .. BAD_CUBIN:sub(0x3f)

-- Plants each entry under a key the child then reads with pc:get; the child
-- prints what it got and the cache's counts.
local planted = {
  {"an old-format entry whose kind says fatbin over PTX bytes", 2, 2, PTX},
  {"an old-format entry of a cubin that reads past its end", 2, 0, BAD_CUBIN},
  {"a sound entry of a cubin that reads past its end", 3, 0, BAD_CUBIN},
  {"a sound entry whose PTX has a NUL byte", 3, 1, (PTX:gsub("ret", "r\0t"))},
  {"a sound entry whose kind says cubin over PTX bytes", 3, 0, PTX},
  {"a sound entry whose kind byte was flipped to fatbin", 3, 1, PTX, 2},
}
for i, p in ipairs(planted) do
  local d = dir .. "/planted" .. i
  -- the entry's file name and key digest come from a real store
  survives("store a sound entry (" .. i .. ")", ([[
local pc = cuda.ProgramCache(%q)
pc:store("the key", cuda.ObjectCode.from_ptx(%q))
print("stored " .. pc.writes)
]]):format(d, PTX), "stored 1")
  local name = ls(d)[1] or "missing"
  local sound = read(d .. "/" .. name) or ""
  local digest = sound:sub(41, 72)
  local e = entry(p[2], p[3], p[4], digest)
  if p[5] then e = e:sub(1, 32) .. string.pack("<I4", p[5]) .. e:sub(37) end   -- after the checksum
  write(d .. "/" .. name, e)
end
survives("pc:get of entries that fail the checks from_data applies", ([[
local results = {}
for i = 1, %d do
  local pc = cuda.ProgramCache(DIR .. "/planted" .. i)
  local obj = pc:get("the key")
  if obj then pcall(obj.get_kernel, obj, "k") end   -- what would reach the driver
  results[#results + 1] = ("%%s m%%d c%%d"):format(obj and tostring(obj) or "nil", pc.misses, pc.corrupt)
end
print(table.concat(results, "; "))
]]):format(#planted), "^nil m1 c0; nil m1 c0; nil m1 c1; nil m1 c1; nil m1 c1; nil m1 c1\n", fake.env())
t.ok(#ls(dir .. "/planted1") == 1 and #ls(dir .. "/planted3") == 0,
     "an old-format entry stays until a store replaces it; a corrupt one is removed")

-- The automatic cache: an entry, sound but for its cubin, is a corrupt miss
-- and is recompiled and rewritten.
if no_nvrtc then
  t.skip("no NVRTC: " .. no_nvrtc, 4)
else
  local auto = dir .. "/auto"
  local script = [[
local obj = cuda.Program('extern "C" __global__ void k(int *x) { x[0] = 7; }', "c++", {arch = "sm_90"}):compile("cubin")
local s = cuda.compile_cache_stats()
print(("%s hits %d misses %d corrupt %d"):format(obj.kind, s.hits, s.misses, s.corrupt))
]]
  survives("the automatic cache: a first compile", script, "cubin hits 0 misses 1 corrupt 0",
           "CUDALUA_CACHE='" .. auto .. "'")
  local name = ls(auto)[1] or "missing"
  local sound = read(auto .. "/" .. name) or ""
  write(auto .. "/" .. name, entry(3, 0, BAD_CUBIN, sound:sub(41, 72)))
  survives("the automatic cache: a sound entry of a bad cubin", script,
           "cubin hits 0 misses 1 corrupt 1", "CUDALUA_CACHE='" .. auto .. "'")
end

-- --- NVRTC's empty PTX --------------------------------------------------------------------------

if no_nvrtc then
  t.skip("no NVRTC: " .. no_nvrtc, 2)
else
  survives("compile(\"ptx\") with link-time optimization", [[
local prog = cuda.Program('__device__ float f(float x) { return x; }\nextern "C" __global__ void k(float *x) { x[0] = f(x[0]); }',
                          "c++", {arch = "sm_90", link_time_optimization = true})
local ok, obj = pcall(prog.compile, prog, "ptx")
if ok then pcall(obj.get_kernel, obj, "k") end      -- an empty PTX would reach the driver
print(ok, ok and obj.size or obj)
]], "^false\t.*no PTX: with link_time_optimization NVRTC makes LTO%-IR only", fake.env())
end

-- --- eviction of a cache with no entries -------------------------------------------------------

write(dir .. "/a_file", "not a directory")
survives("eviction when the cache directory cannot be made", [[
local pc = cuda.ProgramCache(DIR .. "/a_file/cache", {max_size = 1})
pc:store("k", cuda.ObjectCode.from_ptx(".version 8.0\n.target sm_90\n"))
print(("errors %d evictions %d writes %d"):format(pc.errors, pc.evictions, pc.writes))
]], "errors 1 evictions 0 writes 0")

-- --- nvJitLink quotes the input names at nvJitLinkComplete --------------------------------------

if no_nvjitlink then
  t.skip("no nvJitLink: " .. no_nvjitlink, 2)
else
  survives("nvJitLink's error names its inputs after collections", [[
local function cubin(src)
  return cuda.Program(src, "c++", {arch = "sm_90", relocatable_device_code = true}):compile("cubin")
end
local lib = cubin("__device__ float other(float x) { return x; }")
local main = cubin('extern __device__ float missing_fn(float); extern "C" __global__ void k(float *x) { x[0] = missing_fn(x[0]); }')
local again = cubin("__device__ float other(float x) { return x + 1; }")
aggressive_gc()
local linker = cuda.Linker({lib, main, again}, {arch = "sm_90"})
local ok, err = pcall(linker.link, linker, "cubin")
print(ok, linker.error_log)
]], "^false\t.*Undefined reference to '_Z10missing_fnf' in 'object 2 %(cubin%)'.*" ..
    "Multiple definition of '_Z5otherf' in 'object 3 %(cubin%)', first defined in 'object 1 %(cubin%)'")
end

os.execute("rm -rf '" .. dir .. "'")
