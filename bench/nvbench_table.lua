-- The comparison table of NVBench (bench/nvbench_ref.py) and cudalua bench on the same kernels
-- SPDX-License-Identifier: MIT
--
--   cudalua bench/nvbench_table.lua nvbench.json cudalua.json > table.md
--
-- Per state: both cold GPU times with their noise, their ratio and whether
-- it is within the combined noise (sqrt(a^2 + b^2)); the bandwidth
-- utilisations and their difference in points; both sample counts; both
-- batch GPU times and cudalua's batch / cold ratio; and each harness's own
-- cost, the share of the cold wall time that was not GPU time.
local json = require "cuda.json"
local nvc = require "cuda.bench.compare"
local fmt = require("cuda.bench.run").format_duration

local function load(path)
  local f = assert(io.open(path), "cannot open " .. path)
  local doc = json.decode(f:read("a"))
  f:close()
  assert(nvc.is_nvbench(doc), path .. " is not NVBench JSON")
  return doc
end

local nv, cl = load(arg[1]), load(arg[2])
local V = nvc.value
local function cost(st)
  local wall, n, mean = V(st, "nv/cold/walltime"), V(st, "nv/cold/sample_size"), V(st, "nv/cold/time/gpu/mean")
  if not (wall and n and mean) or wall <= 0 then return nil end
  return 1 - n * mean / wall
end
local function pct(x) return x and ("%.2f%%"):format(100 * x) or "-" end

print("| Benchmark | State | NVBench GPU | cudalua GPU | ratio | within noise | NVBench BWUtil | cudalua BWUtil | " ..
  "diff (points) | NVBench samples | cudalua samples | NVBench batch | cudalua batch | cudalua batch/cold | " ..
  "NVBench cost | cudalua cost |")
print("|---|---|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
local nv_by = {}
for _, b in ipairs(nv.benchmarks) do
  for _, st in ipairs(b.states) do nv_by[b.name .. st.name] = st; nv_by[b.name .. nvc.state_key(st)] = st end
end
local outside = 0
for _, b in ipairs(cl.benchmarks) do
  for _, c in ipairs(b.states) do
    local n = nv_by[b.name .. c.name] or nv_by[b.name .. nvc.state_key(c)]
    if n and V(c, "nv/cold/time/gpu/mean") and V(n, "nv/cold/time/gpu/mean") then
      local tn, tc = V(n, "nv/cold/time/gpu/mean"), V(c, "nv/cold/time/gpu/mean")
      local en, ec = V(n, "nv/cold/time/gpu/stdev/relative") or 0, V(c, "nv/cold/time/gpu/stdev/relative") or 0
      local ratio = tc / tn
      local within = math.abs(ratio - 1) <= math.sqrt(en * en + ec * ec)
      outside = outside + (within and 0 or 1)
      local un, uc = V(n, "nv/cold/bw/global/utilization"), V(c, "nv/cold/bw/global/utilization")
      local bn, bc = V(n, "nv/batch/time/gpu/mean"), V(c, "nv/batch/time/gpu/mean")
      print(("| %s | %s | %s \u{b1}%s | %s \u{b1}%s | %.3f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"):format(
        b.name, c.name, fmt(tn), pct(en), fmt(tc), pct(ec), ratio, within and "yes" or "**no**", pct(un), pct(uc),
        (un and uc) and ("%.2f"):format(100 * (uc - un)) or "-", tostring(V(n, "nv/cold/sample_size") or "-"),
        tostring(V(c, "nv/cold/sample_size") or "-"), bn and fmt(bn) or "-", bc and fmt(bc) or "-",
        bc and ("%.2f"):format(bc / tc) or "-", pct(cost(n)), pct(cost(c))))
    end
  end
end
print()
print(("%d state(s) whose GPU times differ by more than the combined noise"):format(outside))
