-- The persistent compile cache: hits skip NVRTC, corrupt entries are caught
-- and rewritten, the directory follows CUDALUA_CACHE / XDG_CACHE_HOME / HOME.
-- Each compile runs in a child process with its own environment; no GPU needed.
local t = require "tap"
local cudalua = t.cudalua()
local cuda = require "cuda"
t.seed()

local srcdir = os.getenv("CUDALUA_SRCDIR") or "."
local tmp = t.tmpdir()
local read, write, ls = t.read_file, t.write_file, t.ls

-- The child compiles a source file `times` times in one process and returns,
-- as a Lua table: the stats, whether each compile was cached, the last log,
-- and writes the last code to out.
write(tmp .. "/child.lua", [[
local cuda = require "cuda"
local source, target, out, define, times = ...
local f = assert(io.open(source, "rb"))
local src = f:read("a")
f:close()
local defines = {}
if define and define ~= "" then
  local k, v = define:match("^(%w+)=(%w+)$")
  defines[k] = v
end
local r = {cached = {}}
local prog
for i = 1, tonumber(times) or 1 do
  prog = cuda.Program(src, "c++", {arch = "sm_80", defines = defines, name = "k.cu"})
  local ok, obj = pcall(prog.compile, prog, target)
  r.ok = ok
  r.cached[i] = prog.cached
  if ok then
    local o = assert(io.open(out, "wb"))
    o:write(obj.code)
    o:close()
  end
end
r.log = prog.log
for k, v in pairs(cuda.compile_cache_stats()) do r[k] = v end
local function ser(v)
  if type(v) == "table" then
    local parts = {}
    for k, x in pairs(v) do parts[#parts + 1] = ("[%q]=%s"):format(k, ser(x)) end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return type(v) == "string" and ("%q"):format(v) or tostring(v)
end
io.write("return ", ser(r))
]])

local kernel = tmp .. "/k.cu"
write(kernel, read(srcdir .. "/kernels/scale_and_bias.cu"))

-- env: shell assignments (and `env -u`) for the child; returns its table.
local function compile(env, opts)
  opts = opts or {}
  local cmd = ("%s %s %s/child.lua '%s' %s '%s' '%s' %d"):format(env, cudalua, tmp,
    opts.source or kernel, opts.target or "cubin", opts.out or tmp .. "/out.bin",
    opts.define or "", opts.times or 1)
  local code, out, err = t.run(cmd)
  local chunk = code == 0 and load(out)
  if not chunk then
    t.diag(("child failed (%s): %s%s"):format(tostring(code), out, err))
    return {cached = {}}
  end
  return chunk()
end

local function counts(r)
  return ("hits=%s misses=%s writes=%s corrupt=%s"):format(r.hits, r.misses, r.writes, r.corrupt)
end

local HEADER = "<c8 I8 I8 I8 I4 I4 c32 i8 c16"

-- XXH64 (seed 0), written from the specification, independently of the
-- xxHash library cache.c checksums with.
local xxh64 = require "xxh64"

local function tohex(s)
  return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

local have_sha256sum = t.run("command -v sha256sum") == 0
local function sha256(data)
  write(tmp .. "/payload", data)
  local _, out = t.run("sha256sum '" .. tmp .. "/payload'")
  return out:match("^(%x+)")
end

-- --- a miss, then a hit -------------------------------------------------------------

local D = tmp .. "/cache"
local env = "CUDALUA_CACHE='" .. D .. "'"
local r1 = compile(env)
t.is(counts(r1), "hits=0 misses=1 writes=1 corrupt=0", "first compile: a miss, written")
t.is(r1.cached[1], false, "prog.cached is false after a miss")
t.is(r1.dir, D, "stats.dir is CUDALUA_CACHE")
t.is(r1.enabled, true, "stats.enabled")
local code1 = read(tmp .. "/out.bin")
local entries = ls(D)
t.ok(#entries == 1 and entries[1]:match("^%x+%.entry$") and #entries[1] == 64 + 6,
     "one entry, named by its 256-bit key: " .. table.concat(entries, " "))
local entry_path = D .. "/" .. (entries[1] or "")
local entry = read(entry_path) or ""

local r2 = compile(env)
t.is(counts(r2), "hits=1 misses=0 writes=0 corrupt=0", "second compile, new process: a hit")
t.is(r2.cached[1], true, "prog.cached is true after a hit")
t.ok(code1 and read(tmp .. "/out.bin") == code1, "the hit returns the same cubin")

local r3 = compile("CUDALUA_CACHE='" .. tmp .. "/inproc'", {times = 3})
t.is(counts(r3), "hits=2 misses=1 writes=1 corrupt=0", "one process: a miss, then hits")
t.is(table.concat({tostring(r3.cached[1]), tostring(r3.cached[2]), tostring(r3.cached[3])}, " "),
     "false true true", "prog.cached for each compile")

-- --- the entry format --------------------------------------------------------------

local ok, magic, code_len, log_len, names_len, kind, reserved, key, sum, tail =
  pcall(string.unpack, HEADER, entry)
t.ok(ok and magic == "CLCACHE3" and kind == 0 and reserved == 0 and tail == ("\0"):rep(16),
     "the header: magic, kind (cubin), reserved bytes")
t.ok(ok and #entry == 96 + code_len + log_len + names_len, "the header's lengths add up to the file size")
t.ok(ok and entry:sub(97, 96 + code_len) == code1, "the payload is the cubin")
t.is(ok and names_len, 0, "no name expressions, no names")
t.is(ok and tohex(key) .. ".entry", entries[1], "the file is named by the key in the header")
t.is(ok and sum, xxh64(entry:sub(1, 72) .. ("\0"):rep(8) .. entry:sub(81)),
     "the checksum is XXH64 of the whole entry, its own 8 bytes as zero (checked in Lua)")
t.is(xxh64(""), 0xEF46DB3751D8E999, "the Lua XXH64 gives the specification's value for ''")
t.is(xxh64("a"), 0xD24EC4F1A98C6E5B, "and for 'a'")
local program_key = cuda.program_cache_key(read(kernel), "c++", {arch = "sm_80", defines = {}, name = "k.cu"},
                                           "cubin")
t.like(program_key, "^" .. ("%x"):rep(64) .. "$", "program_cache_key: 64 hex digits")
if have_sha256sum then
  t.is(entries[1], sha256(program_key) .. ".entry",
       "the entry is named by the SHA-256 of cuda.program_cache_key (checked by sha256sum)")
else
  t.skip("no sha256sum")
end

-- A planted entry, with a log NVRTC never wrote and a checksum made in Lua:
-- it is served, so a hit does not run NVRTC.
if ok then
  local planted_log = "planted by t/cache.t " .. math.random(1e9)
  local payload = code1 .. planted_log
  local header = string.pack(HEADER, magic, #code1, #planted_log, 0, kind, 0, key, 0, ("\0"):rep(16))
  header = string.pack(HEADER, magic, #code1, #planted_log, 0, kind, 0, key, xxh64(header .. payload),
                       ("\0"):rep(16))
  write(entry_path, header .. payload)
  local r = compile(env)
  t.is(r.log, planted_log, "a hit serves the stored log: NVRTC did not run")
  t.is(counts(r), "hits=1 misses=0 writes=0 corrupt=0", "the planted entry is a hit")
else
  t.skip("no entry", 2)
end

-- --- corrupt entries are detected, recompiled and rewritten ----------------------------

local function corrupted(name, data)
  write(entry_path, data)
  local r = compile(env)
  -- a magic flipped into the previous format's is an old entry: a plain miss
  local corrupt = data:sub(1, 8) == "CLCACHE2" and 0 or 1
  t.is(counts(r), "hits=0 misses=1 writes=1 corrupt=" .. corrupt, name .. ": detected as corrupt and rewritten")
  t.ok(r.cached[1] == false and read(tmp .. "/out.bin") == code1, name .. ": recompiled to the same cubin")
  local again = compile(env)
  t.is(counts(again), "hits=1 misses=0 writes=0 corrupt=0", name .. ": the rewritten entry is sound")
end

local function flip(s, i)
  return s:sub(1, i - 1) .. string.char(s:byte(i) ~ (1 << math.random(0, 7))) .. s:sub(i + 1)
end

corrupted("truncated", entry:sub(1, math.random(97, #entry - 1)))
corrupted("a flipped payload byte", flip(entry, math.random(97, #entry)))
corrupted("a flipped checksum byte", flip(entry, math.random(73, 80)))
corrupted("a flipped magic byte", flip(entry, math.random(1, 8)))
corrupted("a flipped kind byte", flip(entry, math.random(33, 36)))
corrupted("a flipped length byte", flip(entry, math.random(9, 32)))
corrupted("a flipped reserved byte", flip(entry, math.random(81, 96)))
corrupted("an empty file", "")
corrupted("a longer file", entry .. "x")
t.is(read(entry_path), entry, "the rewritten entry is byte for byte the first one")

-- --- what the key covers ----------------------------------------------------------------

local r = compile(env, {define = "EXTRA=1"})
t.is(counts(r), "hits=0 misses=1 writes=1 corrupt=0", "another define is another entry")
r = compile(env, {target = "ptx"})
t.is(counts(r), "hits=0 misses=1 writes=1 corrupt=0", "PTX is another entry")
t.like(read(tmp .. "/out.bin"), "%.version", "and is PTX")
write(tmp .. "/k2.cu", read(kernel) .. "\n// a changed source " .. math.random(1e9) .. "\n")
r = compile(env, {source = tmp .. "/k2.cu"})
t.is(counts(r), "hits=0 misses=1 writes=1 corrupt=0", "a changed source is another entry")
t.is(#ls(D), 4, "four entries, no temporary files left")

write(tmp .. "/bad.cu", "extern \"C\" __global__ void k() { undefined_here; }\n")
r = compile(env, {source = tmp .. "/bad.cu"})
t.ok(r.ok == false and r.writes == 0 and #ls(D) == 4, "a failed compile is not cached")

-- The log of a compile with warnings is stored with the code.
write(tmp .. "/warn.cu", "extern \"C\" __global__ void k(int *x) { int unused_here; x[0] = 1; }\n")
local w1 = compile(env, {source = tmp .. "/warn.cu"})
local w2 = compile(env, {source = tmp .. "/warn.cu"})
t.like(w1.log, "warning.*unused_here", "a warning in the log of a miss")
t.ok(w2.cached[1] == true and w2.log == w1.log, "the same log on the hit")

-- --- where the cache lives ----------------------------------------------------------------

local home = tmp .. "/home"
os.execute("mkdir -p '" .. home .. "'")
r = compile("CUDALUA_CACHE=off XDG_CACHE_HOME='" .. home .. "' HOME='" .. home .. "'")
t.ok(r.ok and r.enabled == false and r.dir == false, "CUDALUA_CACHE=off: disabled, no dir")
t.is(counts(r), "hits=0 misses=0 writes=0 corrupt=0", "CUDALUA_CACHE=off: nothing counted")
-- (the NVIDIA driver keeps its own JIT cache in ~/.nv on GPU machines)
local written = {}
for _, name in ipairs(ls(home)) do if name ~= ".nv" then written[#written + 1] = name end end
t.is(table.concat(written, " "), "", "CUDALUA_CACHE=off writes nothing")

local xdg = tmp .. "/xdg"
r = compile("env -u CUDALUA_CACHE XDG_CACHE_HOME='" .. xdg .. "' HOME='" .. home .. "'")
t.is(r.dir, xdg .. "/cudalua", "XDG_CACHE_HOME/cudalua")
t.is(#ls(xdg .. "/cudalua"), 1, "the entry is there (the directory was created)")
r = compile("env -u CUDALUA_CACHE XDG_CACHE_HOME='" .. xdg .. "' HOME='" .. home .. "'")
t.is(r.hits, 1, "and is hit")

r = compile("env -u CUDALUA_CACHE -u XDG_CACHE_HOME HOME='" .. home .. "'")
t.ok(r.dir == home .. "/.cache/cudalua" and #ls(home .. "/.cache/cudalua") == 1,
     "without XDG_CACHE_HOME: ~/.cache/cudalua")
r = compile("env -u CUDALUA_CACHE XDG_CACHE_HOME=relative/dir HOME='" .. home .. "'")
t.is(r.dir, home .. "/.cache/cudalua", "a relative XDG_CACHE_HOME is ignored, as the spec says")

local deep = tmp .. "/a/b/c"
r = compile("CUDALUA_CACHE='" .. deep .. "'")
t.ok(r.writes == 1 and #ls(deep) == 1, "missing parent directories are created")

write(tmp .. "/a_file", "")
r = compile("CUDALUA_CACHE='" .. tmp .. "/a_file/sub'")
t.ok(r.ok and r.writes == 0 and r.errors >= 1, "an unusable cache directory: the compile works, the error is counted")

-- --- concurrent writers ------------------------------------------------------------------

local C = tmp .. "/concurrent"
local jobs = {}
for i = 1, 6 do
  jobs[i] = ("CUDALUA_CACHE='%s' %s %s/child.lua '%s' cubin '%s/out%d.bin' '' 1 >/dev/null 2>&1 &")
            :format(C, cudalua, tmp, kernel, tmp, i)
end
os.execute(table.concat(jobs, " ") .. " wait")
local names = ls(C)
t.ok(#names == 1 and names[1]:match("%.entry$"), "six concurrent writers leave one entry and no temporaries")
r = compile("CUDALUA_CACHE='" .. C .. "'")
t.ok(r.cached[1] == true and r.corrupt == 0 and read(tmp .. "/out.bin") == code1,
     "the entry they leave is sound")

-- --- in this process -------------------------------------------------------------------------

local s = cuda.compile_cache_stats()
t.ok(math.type(s.hits) == "integer" and math.type(s.misses) == "integer" and
     math.type(s.writes) == "integer" and math.type(s.corrupt) == "integer" and
     math.type(s.errors) == "integer" and type(s.enabled) == "boolean",
     "compile_cache_stats() fields")

os.execute("rm -rf '" .. tmp .. "'")
t.done()
