-- bench/graph_launch_probe.lua: where does Graph:launch's host cost go, batch by
-- batch? launch_cost's graph100_replay_host read 1.12 and 1.52 of C on two
-- H200s the same day, cudalua's batches falling in two groups where C's did
-- not. This times batches of replays of a 100-launch graph (as launch_cost
-- does: sync, clock, replays, clock), in turns over several variants, and
-- prints each one's quantiles and how its batches spread:
--   method   g:launch(s)                       (launch_cost's loop)
--   local    launch(g, s), the method fetched once (no __index call)
--   nogc     g:launch(s) with the collector stopped
--   small    g:launch(s), 10 replays a batch instead of 100 (less queued)
--   synced   g:launch(s), each replay followed by s:sync() (nothing queued; timed together)
--
--   cudalua bench/graph_launch_probe.lua [rounds] [batches]
local cuda = require "cuda"
local bench = require "cuda.bench"
local rounds, batches = tonumber(arg[1]) or 5, tonumber(arg[2]) or 200

local dev = cuda.Device(0)
dev:set_current()
local s <close> = dev:create_stream{non_blocking = true}
local source_file <close> = assert(io.open(cuda.find_kernel("empty.cu"), "r"))
local empty4 = cuda.Program(source_file:read("a"), "c++", {arch = "sm_" .. dev.arch})
  :compile("cubin"):get_kernel("empty4")
local config = cuda.LaunchConfig{grid = 1, block = 32}
local a, b = dev.memory_resource:allocate(4096, s), dev.memory_resource:allocate(4096, s)
s:begin_capture()
for _ = 1, 100 do cuda.launch(s, config, empty4, a, b, cuda.f32(2.5), cuda.u64(1024)) end
local g = s:end_capture()
print("pinned to CPU " .. tostring(bench.pin("auto")))

local variants = {
  {name = "method", per = 100, issue = function(n) local graph, st = g, s; for _ = 1, n do graph:launch(st) end end},
  {name = "local", per = 100, issue = function(n) local graph, st, launch = g, s, g.launch; for _ = 1, n do launch(graph, st) end end},
  {name = "nogc", per = 100, gc = "stop", issue = function(n) local graph, st = g, s; for _ = 1, n do graph:launch(st) end end},
  {name = "small", per = 10, issue = function(n) local graph, st = g, s; for _ = 1, n do graph:launch(st) end end},
  {name = "synced", per = 10, issue = function(n) local graph, st = g, s; for _ = 1, n do graph:launch(st); st:sync() end end},
}

local samples = {}
for _, v in ipairs(variants) do samples[v.name] = {} end
for _ = 1, rounds do
  for _, v in ipairs(variants) do
    if v.gc then collectgarbage(v.gc) end
    for _ = 1, 10 do s:sync(); v.issue(v.per) end   -- warm-up
    local out = samples[v.name]
    for _ = 1, batches do
      s:sync()
      local t0 = cuda.clock()
      v.issue(v.per)
      out[#out + 1] = (cuda.clock() - t0) * 1e6 / v.per
    end
    collectgarbage("restart")
  end
end
s:sync()

print(("%d rounds of %d batches each; us per replay"):format(rounds, batches))
print(("%-8s %7s %7s %7s %7s %7s %7s  %s"):format("variant", "min", "p10", "p25", "p50", "p75", "p90",
  "batches within 15% of min / 15-40% over / more"))
for _, v in ipairs(variants) do
  local x = samples[v.name]
  table.sort(x)
  local low, mid = 0, 0
  for _, u in ipairs(x) do if u <= 1.15 * x[1] then low = low + 1 elseif u <= 1.4 * x[1] then mid = mid + 1 end end
  local q = function(p) return bench.percentile(x, p) end
  print(("%-8s %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f  %d / %d / %d"):format(v.name, x[1], q(10), q(25), q(50),
    q(75), q(90), low, mid, #x - low - mid))
end
