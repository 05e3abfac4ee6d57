-- link_cost.lua: what one cuda.Linker link costs, median wall time.
--
--     cudalua bench/link_cost.lua [runs] [megabytes]    (default 40 runs, 0)
--
-- Times linker:link("cubin") of two small relocatable PTX objects (one
-- calls the other's device function) and of the same pair as LTO-IR, each
-- with a fresh cuda.Linker. With a size in megabytes, the process first
-- allocates and touches that much host memory (a Lua string), so that the
-- cost of a larger process (page tables that fork copies) shows; on a GPU
-- it holds a context and that much pinned memory too. Needs no GPU. See bench/README.md and the comment at the top of src/linker.c.
local cuda = require "cuda"

local runs = math.tointeger(tonumber(arg[1])) or 40
local megabytes = tonumber(arg[2]) or 0
local ballast = megabytes > 0 and ("x"):rep(math.floor(megabytes * 2^20)) or nil
-- With a GPU, the process holds a CUDA context (driver threads, mappings)
-- and as much pinned memory again, as a real program does when it links.
local pinned
if cuda.is_available() then
  cuda.Device(0):set_current()
  pinned = cuda.PinnedMemoryResource():allocate(math.max(1, math.floor(megabytes * 2^20)))
end

local MAIN = [[
extern __device__ float scale(float x);
extern "C" __global__ void scale_all(float *x, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = scale(x[i]);
}
]]
local LIB = [[__device__ float scale(float x) { return 3.0f * x + 1.0f; }]]

local function compile(source, target, lto)
  return cuda.Program(source, "c++", {arch = "sm_90", relocatable_device_code = true,
                                      link_time_optimization = lto}):compile(target)
end

local function median(times)
  table.sort(times)
  local n = #times
  return n % 2 == 1 and times[(n + 1) // 2] or (times[n // 2] + times[n // 2 + 1]) / 2
end

local function bench(name, objects, options)
  local times = {}
  cuda.Linker(objects, options):link("cubin")     -- warm-up, not timed
  for i = 1, runs do
    local linker = cuda.Linker(objects, options)
    local t0 = cuda.clock()
    linker:link("cubin")
    times[i] = (cuda.clock() - t0) * 1e3
  end
  table.sort(times)
  print(("%-22s median %8.3f ms   min %8.3f   max %8.3f   (%d links)"):format(
    name, median(times), times[1], times[#times], runs))
end

bench("two PTX objects", {compile(MAIN, "ptx"), compile(LIB, "ptx")}, {arch = "sm_90"})
bench("two LTO-IR objects", {compile(MAIN, "ltoir", true), compile(LIB, "ltoir", true)},
      {arch = "sm_90", lto = true})
if ballast then print(("(with %d MB of host memory touched)"):format(#ballast >> 20)) end
if pinned then print(("(with a CUDA context and %d bytes of pinned memory)"):format(pinned.size)) end
