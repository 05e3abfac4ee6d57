-- host_reference: time the streaming-overlap benchmark's host reference on typed views.
--
-- usage: cudalua bench/host_reference.lua [n_elements] [chunk_elements]
--
-- n float32 values (default 16,000,000) drawn uniformly from [0, 100) with a
-- fixed seed, then, in float32: scale(2.5) and 50 times val = sqrt(val * val + 1)
-- (mul by itself, add(1), sqrt). Two ways:
--   whole    each operation over the whole array: 151 passes over 64 MB,
--            bound by memory bandwidth;
--   chunked  all 151 operations on one cache-sized range (v:range) before
--            the next, so the data stays in cache.
-- Both do the same float32 operations on every element in the same order,
-- so their results must be bitwise equal; the script checks that, and checks
-- sampled elements against the same computation done in Lua. Times are the
-- median of 3 runs (cuda.clock, monotonic). Needs no GPU.
local cuda = require "cuda"

local N = math.tointeger(tonumber(arg[1] or "")) or 16000000
local FIXED_CHUNK = math.tointeger(tonumber(arg[2] or ""))
local ITERATIONS, SCALE, SEED = 50, 2.5, 20240601
local CHUNKS = FIXED_CHUNK and {FIXED_CHUNK} or {4096, 8192, 16384, 32768, 65536, 262144}
local TARGET_S = 2.0

local host = cuda.HostMemoryResource()
local input = host:allocate(4 * N):view("float32"):random(0, 100, SEED)

local function whole(v)
  v:scale(SCALE)
  for _ = 1, ITERATIONS do v:mul(v):add(1):sqrt() end
end

local function chunked(v, chunk)
  for first = 1, #v, chunk do
    local c = v:range(first, math.min(first + chunk - 1, #v))
    c:scale(SCALE)
    for _ = 1, ITERATIONS do c:mul(c):add(1):sqrt() end
  end
end

-- Median of 3 timed runs of f(v), each on a fresh copy of the input.
local function time(v, f, ...)
  local times = {}
  for run = 1, 3 do
    v:copy(input)
    local t0 = cuda.clock()
    f(v, ...)
    times[run] = cuda.clock() - t0
  end
  table.sort(times)
  return times[2]
end

local function f32(x) return (string.unpack("f", string.pack("f", x))) end

-- The same float32 computation in Lua, one element at a time.
local function reference(x)
  x = f32(x * f32(SCALE))
  for _ = 1, ITERATIONS do x = f32(math.sqrt(f32(f32(x * x) + 1))) end
  return x
end

print(("host reference: %d float32 values, scale(%g), then %d x (mul self, add 1, sqrt)")
      :format(N, SCALE, ITERATIONS))

local result_whole = host:allocate(4 * N):view("float32")
local t_whole = time(result_whole, whole)
print(("  whole array        %8.3f s   (%d passes over %.0f MB)"):format(t_whole,
      1 + 3 * ITERATIONS, 4 * N / 1e6))

local result = host:allocate(4 * N):view("float32")
local best_chunk, best_time = nil, math.huge
local failures = 0
for _, chunk in ipairs(CHUNKS) do
  local t = time(result, chunked, chunk)
  local same, max_err, first_bad = result:allclose(result_whole, 0, 0)
  print(("  chunks of %7d   %8.3f s   (%4d KB)  %s"):format(chunk, t, 4 * chunk // 1024,
        same and "bitwise equal to whole" or ("DIFFERS from whole at " .. first_bad ..
        ", max abs err " .. max_err)))
  if not same then failures = failures + 1 end
  if t < best_time then best_chunk, best_time = chunk, t end
end

-- Sampled elements against the Lua computation, first and last included.
local samples, bad = {1, N}, 0
for _ = 1, 998 do samples[#samples + 1] = math.random(N) end
for _, i in ipairs(samples) do
  local want = reference(input[i])
  if result_whole[i] ~= want or result[i] ~= want then
    bad = bad + 1
    if bad <= 3 then
      print(("  element %d: whole %s, chunked %s, Lua %s"):format(i, result_whole[i], result[i], want))
    end
  end
end
print(("  %d sampled elements match the Lua float32 computation: %s"):format(#samples,
      bad == 0 and "yes" or ("NO, " .. bad .. " differ")))

print(("best: chunks of %d elements, %.3f s (whole array %.3f s, %.1fx); target <= %.1f s: %s")
      :format(best_chunk, best_time, t_whole, t_whole / best_time, TARGET_S,
              best_time <= TARGET_S and "met" or "MISSED"))
if failures > 0 or bad > 0 then
  io.stderr:write("host_reference: results do not verify\n")
  os.exit(1)
end
