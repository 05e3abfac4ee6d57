-- cuda.bench.compare: two NVBench JSON result files, state by state, with noise-aware verdicts.
-- SPDX-License-Identifier: MIT
--
-- States are matched by benchmark and state name. The verdict follows
-- nvbench_compare.py: the relative difference of the mean cold GPU times
-- against the smaller of the two runs' noises (relative standard
-- deviations): within it "same", else "faster" or "slower"; "undecided"
-- when neither run has a noise estimate.
local M = {}

function M.is_nvbench(doc)
  return type(doc) == "table" and type(doc.benchmarks) == "table"
end

-- A state's key independent of how a tool spells its name: the device and
-- each axis value ("T=double", "Bytes=65536"), sorted.
function M.state_key(state)
  local words = {"device=" .. tostring(state.device)}
  for _, av in ipairs(state.axis_values or {}) do
    local n = tonumber(av.value)   -- "65536", 65536 and 65536.0 are one value
    words[#words + 1] = tostring(av.name) .. "=" .. (n and ("%.17g"):format(n) or tostring(av.value))
  end
  table.sort(words)
  return "\0" .. table.concat(words, " ")
end

-- The number value of a state's summary tag, or nil.
function M.value(state, tag)
  for _, s in ipairs(state.summaries or {}) do
    if s.tag == tag then
      for _, d in ipairs(s.data or {}) do
        if d.name == "value" then return tonumber(d.value) end
      end
    end
  end
  return nil
end

local TIME = {"nv/cold/time/gpu/mean", "nv/cpu_only/time/cpu/mean"}
local NOISE = {"nv/cold/time/gpu/stdev/relative", "nv/cpu_only/time/cpu/stdev/relative"}

local function figure(state)
  for i, tag in ipairs(TIME) do
    local t = M.value(state, tag)
    if t then return t, M.value(state, NOISE[i]) end
  end
  return nil
end

-- The verdict of ref -> cmp: "faster", "slower", "same" or "undecided", and the relative difference.
function M.verdict(ref_time, ref_noise, cmp_time, cmp_noise)
  local frac = (cmp_time - ref_time) / ref_time
  local noise
  if ref_noise and cmp_noise then noise = math.min(ref_noise, cmp_noise) else noise = ref_noise or cmp_noise end
  if not noise or noise == 0 then return "undecided", frac end
  if math.abs(frac) <= noise then return "same", frac end
  return frac < 0 and "faster" or "slower", frac
end

-- Rows {bench, state, ref_time, ref_noise, cmp_time, cmp_noise, frac, verdict} of the common states.
function M.compare(ref, cmp)
  local rows, ref_benches = {}, {}
  for _, b in ipairs(ref.benchmarks) do ref_benches[b.name] = b end
  for _, cb in ipairs(cmp.benchmarks) do
    local rb = ref_benches[cb.name]
    if rb then
      local ref_states = {}
      for _, s in ipairs(rb.states or {}) do
        ref_states[s.name] = s
        ref_states[M.state_key(s)] = ref_states[M.state_key(s)] or s
      end
      for _, cs in ipairs(cb.states or {}) do
        local rs = ref_states[cs.name] or ref_states[M.state_key(cs)]
        local rt, rn
        if rs then rt, rn = figure(rs) end
        local ct, cn = figure(cs)
        if rt and ct and rt > 0 then
          local verdict, frac = M.verdict(rt, rn, ct, cn)
          rows[#rows + 1] = {bench = cb.name, state = cs.name, ref_time = rt, ref_noise = rn,
            cmp_time = ct, cmp_noise = cn, frac = frac, verdict = verdict}
        end
      end
    end
  end
  return rows
end

local function pct(x) return x and ("%.2f%%"):format(x * 100) or "inf" end

-- The rows as markdown, one table per benchmark, and a count of each verdict.
function M.markdown(rows)
  local format_duration = require("cuda.bench.run").format_duration
  local lines, counts, current = {}, {faster = 0, slower = 0, same = 0, undecided = 0}, nil
  for _, r in ipairs(rows) do
    if r.bench ~= current then
      current = r.bench
      lines[#lines + 1] = ""
      lines[#lines + 1] = "# " .. r.bench
      lines[#lines + 1] = ""
      lines[#lines + 1] = "| State | Ref Time | Ref Noise | Cmp Time | Cmp Noise | Diff | %Diff | Status |"
      lines[#lines + 1] = "|---|---:|---:|---:|---:|---:|---:|:---:|"
    end
    counts[r.verdict] = counts[r.verdict] + 1
    lines[#lines + 1] = ("| %s | %s | %s | %s | %s | %s | %.2f%% | %s |"):format(r.state, format_duration(r.ref_time),
      pct(r.ref_noise), format_duration(r.cmp_time), pct(r.cmp_noise),
      (r.cmp_time >= r.ref_time and "" or "-") .. format_duration(math.abs(r.cmp_time - r.ref_time)),
      r.frac * 100, r.verdict:upper())
  end
  lines[#lines + 1] = ""
  lines[#lines + 1] = ("%d states: %d faster, %d slower, %d same, %d undecided"):format(#rows, counts.faster,
    counts.slower, counts.same, counts.undecided)
  return table.concat(lines, "\n"), counts
end

return M
