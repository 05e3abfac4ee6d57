-- bench/register_host.lua: do copies from a registered range (cuda.register_host
-- over a pageable HostMemoryResource buffer) run at the pinned rate? H2D (and
-- D2H) copies of the same size from a registered buffer and from a
-- PinnedMemoryResource buffer, interleaved in one run, timed with events:
-- the median of many repeats each, and their ratio, which must be within 2%.
-- A plain pageable buffer's rate is printed for scale. Exit status 1 when
-- the ratio is off or a copy's data is wrong.
--
--   cudalua bench/register_host.lua [MiB] [repeats]
local cuda = require "cuda"
local MiB, repeats = tonumber(arg[1]) or 64, tonumber(arg[2]) or 50
local N = math.tointeger(MiB * (1 << 20))
local dev = cuda.Device(0)
dev:set_current()
local s <close> = dev:create_stream()
local dbuf = dev.memory_resource:allocate(N, s)
local pinned = cuda.PinnedMemoryResource():allocate(N)
local host = cuda.HostMemoryResource()
local registered, pageable = host:allocate(N), host:allocate(N)
local reg <close> = cuda.register_host(registered)
for _, b in ipairs{pinned, registered, pageable} do b:view("uint32"):random(0, 2 ^ 32 - 1, 7) end

local e0, e1 = dev:create_event{timing = true}, dev:create_event{timing = true}
local function once(fn)
  s:record(e0)
  fn()
  s:record(e1)
  s:sync()
  return e1 - e0
end
local function median(t)
  table.sort(t)
  local n = #t
  return n % 2 == 1 and t[(n + 1) // 2] or (t[n // 2] + t[n // 2 + 1]) / 2
end
local function gbps(ms) return N / (ms / 1e3) / 1e9 end

-- the copies, interleaved so that drift (clocks, other load) hits all alike
local cases = {
  {"h2d pinned", function() pinned:copy_to(dbuf, s) end},
  {"h2d registered", function() registered:copy_to(dbuf, s) end},
  {"h2d pageable", function() pageable:copy_to(dbuf, s) end},
  {"d2h pinned", function() dbuf:copy_to(pinned, s) end},
  {"d2h registered", function() dbuf:copy_to(registered, s) end},
}
local times = {}
for _, c in ipairs(cases) do
  times[c[1]] = {}
  for _ = 1, 3 do once(c[2]) end
end
for _ = 1, repeats do
  for _, c in ipairs(cases) do table.insert(times[c[1]], once(c[2])) end
end
local rate = {}
print(("%d MiB, median of %d copies each"):format(MiB, repeats))
for _, c in ipairs(cases) do
  rate[c[1]] = gbps(median(times[c[1]]))
  print(("  %-16s %8.2f GB/s"):format(c[1], rate[c[1]]))
end

-- the data: what came back from the device is what the registered buffer held
registered:copy_to(dbuf, s)
local check = host:allocate(N)
dbuf:copy_to(check, s)
s:sync()
local data_ok = check:view("uint32"):allclose(registered:view("uint32"), 0, 0)
local ok = data_ok
for _, dir in ipairs{"h2d", "d2h"} do
  local ratio = rate[dir .. " registered"] / rate[dir .. " pinned"]
  local within = math.abs(ratio - 1) <= 0.02
  if dir == "h2d" then ok = ok and within end
  print(("%s registered / pinned = %.4f (%s)"):format(dir, ratio, within and "within 2%" or "OFF by more than 2%"))
end
print("data " .. (data_ok and "verified" or "WRONG"))
os.exit(ok and 0 or 1)
