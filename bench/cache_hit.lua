-- cache_hit.lua: how long a compile-cache hit takes on a large entry.
--
--     cudalua bench/cache_hit.lua [megabytes]       (default 5.5)
--
-- Compiles a small kernel for sm_90 into a private cuda.ProgramCache, then
-- replaces its entry with the same cubin padded to the given size (the
-- padding lies past every table the bounds check reads, so it is a sound
-- cubin), and times prog:compile hits: key, file read, checksum, ObjectCode.
-- Needs no GPU. See bench/README.md for the numbers before and after.
local cuda = require "cuda"

local megabytes = tonumber(arg[1]) or 5.5
local runs = 30
local dir = os.tmpname()
os.remove(dir)

local source = 'extern "C" __global__ void k(float *x) { x[0] = 1.0f; }'
local options = {arch = "sm_90", name = "cache_hit.cu"}
local pc = cuda.ProgramCache(dir)
local cubin = cuda.Program(source, "c++", options):compile("cubin", {cache = pc}).code
local padded = cubin .. ("\0"):rep(math.floor(megabytes * 1e6) - #cubin)
pc:store(cuda.program_cache_key(source, "c++", options, "cubin"), cuda.ObjectCode.from_cubin(padded))

local times = {}
for i = 1, runs do
  local prog = cuda.Program(source, "c++", options)
  collectgarbage()                                -- the last run's 5 MB, not timed
  local t0 = cuda.clock()
  local obj = prog:compile("cubin", {cache = pc})
  times[i] = (cuda.clock() - t0) * 1e3
  assert(prog.cached and obj.size == #padded, "not a hit on the padded entry")
end
table.sort(times)
print(("cache hit on a %.1f MB entry: median %.2f ms, best %.2f ms (%d runs)")
      :format(#padded / 1e6, times[runs // 2 + 1], times[1], runs))
pc:clear()
os.remove(dir)
