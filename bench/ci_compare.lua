-- The ci stopping criterion against NVBench's stdrel, state by state (issue 37)
-- SPDX-License-Identifier: MIT
--
--   cudalua bench/ci_compare.lua nvbench.json cudalua-ci.json > ci.md
--
-- nvbench.json: cuda-bench 0.3.0 with its default criterion (stdrel);
-- cudalua-ci.json: cudalua bench with --stopping-criterion ci, the same
-- states. Per state: NVBench's mean, cudalua's mean and its interval,
-- whether NVBench's mean lies in that interval, both sample counts, and
-- both wall times (the cold measurement, and cold plus batch) with their
-- ratio. The closing lines count the states inside their interval and give
-- the largest wall-time ratio over the copy states of 2^16 to 2^24 bytes.
local json = require "cuda.json"
local nvc = require "cuda.bench.compare"
local fmt = require("cuda.bench.run").format_duration
local V = nvc.value

local function load(path)
  local f = assert(io.open(path), "cannot open " .. path)
  local doc = json.decode(f:read("a"))
  f:close()
  assert(nvc.is_nvbench(doc), path .. " is not NVBench JSON")
  return doc
end

local nv, cl = load(arg[1]), load(arg[2])
local by_key = {}
for _, b in ipairs(nv.benchmarks) do
  for _, st in ipairs(b.states) do by_key[b.name .. "\0" .. nvc.state_key(st)] = st end
end

local function walls(st)
  local cold = V(st, "nv/cold/walltime") or 0
  return cold, cold + (V(st, "nv/batch/walltime") or 0)
end

-- the copy states whose wall time the issue bounds: 2^16 to 2^24 bytes
local function bounded(bench, st)
  if bench ~= "copy" then return false end
  local e = tonumber(st.name:match("Bytes=2%^(%d+)"))
  return e ~= nil and e >= 16 and e <= 24
end

print("| Benchmark | State | NVBench mean (stdrel) | cudalua mean (ci) | cudalua interval | inside | NVBench samples | "
  .. "cudalua samples | NVBench cold wall | cudalua cold wall | cold ratio | NVBench wall | cudalua wall | ratio |")
print("|---|---|---:|---:|---|:---:|---:|---:|---:|---:|---:|---:|---:|---:|")
local states, inside, worst, wall_nv, wall_cl = 0, 0, 0, 0, 0
for _, b in ipairs(cl.benchmarks) do
  for _, c in ipairs(b.states) do
    local n = by_key[b.name .. "\0" .. nvc.state_key(c)]
    local tn, tc = n and V(n, "nv/cold/time/gpu/mean"), V(c, "nv/cold/time/gpu/mean")
    local lo, hi = V(c, "cudalua/cold/time/gpu/mean/ci_lo"), V(c, "cudalua/cold/time/gpu/mean/ci_hi")
    if tn and tc then
      states = states + 1
      local ok = lo ~= nil and hi ~= nil and tn >= lo and tn <= hi
      inside = inside + (ok and 1 or 0)
      local cn, an = walls(n)
      local cc, ac = walls(c)
      if bounded(b.name, c) then
        worst = math.max(worst, ac / an)
        wall_nv, wall_cl = wall_nv + an, wall_cl + ac
      end
      print(("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.3f | %s | %s | %.3f |"):format(b.name, c.name,
        fmt(tn), fmt(tc), lo and hi and ("[%s, %s]"):format(fmt(lo), fmt(hi)) or "none", ok and "yes" or "**no**",
        tostring(V(n, "nv/cold/sample_size")), tostring(V(c, "nv/cold/sample_size")), fmt(cn), fmt(cc), cc / cn,
        fmt(an), fmt(ac), ac / an))
    end
  end
end
print()
print(("%d of %d states: NVBench's stdrel mean inside cudalua's ci interval"):format(inside, states))
if wall_nv > 0 then
  print(("copy states of 2^16 to 2^24 bytes: wall time %s against NVBench's %s (%.3f); the largest state ratio %.3f")
    :format(fmt(wall_cl), fmt(wall_nv), wall_cl / wall_nv, worst))
end
