-- cuda.overlap_report: what streaming_overlap prints and writes, from plain
-- SPDX-License-Identifier: MIT
-- tables (bench.stats, limits, verification results), so the formatting is
-- tested without a GPU and the script stays a short story in phases.
local M = {}

-- "Verification: PASSED", or FAILED with where and by how much.
function M.verification_line(v)
  local failed = ("FAILED (element %s, max abs error %g)"):format(tostring(v.first_bad_index), v.max_abs_err)
  return "Verification: " .. (v.passed and "PASSED" or failed)
end

-- A configuration's figures. base holds the limit and, once measured, the
-- sequential time the speedup is over; extra: streams, tried, kind.
function M.result(name, stats, v, base, extra)
  extra = extra or {}
  return {
    name = name, median_ms = stats.median, std_ms = stats.std, min_ms = stats.min, max_ms = stats.max,
    runs = stats.n, samples = stats.raw, efficiency = base.limit / stats.median,
    speedup = base.sequential_ms and base.sequential_ms / stats.median or 1,
    verified = v.passed, max_abs_err = math.abs(v.max_abs_err) < math.huge and v.max_abs_err or nil,
    streams = extra.streams, tried = extra.tried, kind = extra.kind,
  }
end

function M.streamed_line(r)
  return ("%s: %.2f ms (\u{b1}%.2f) - speedup: %.2fx  efficiency: %.0f%%"):format(r.name, r.median_ms, r.std_ms,
    r.speedup, 100 * r.efficiency)
end

-- The limits section's lines (Pipeline:limits' figures).
function M.limit_lines(limits)
  local function ms(st) return ("%.3f ms"):format(st.median) end
  return {
    ("H2D alone:           %s (%.1f GB/s)"):format(ms(limits.h2d), limits.h2d_gbps),
    ("D2H alone:           %s (%.1f GB/s)"):format(ms(limits.d2h), limits.d2h_gbps),
    ("H2D + D2H together:  %s"):format(ms(limits.both)),
    ("H2D as 32 copies:    %s (each copy costs %.1f us more)"):format(ms(limits.h2d_pieces), limits.copy_cost_us),
    ("Both, 32 copies each: %s (each pair costs %.1f us more)"):format(ms(limits.both_pieces), limits.copy_cost_both_us),
    ("Kernel alone:        %s"):format(ms(limits.kernel)),
    ("Limit:               %.3f ms = max(H2D, D2H, kernel); no schedule can beat it"):format(limits.limit),
  }
end

-- The report's limits: medians and derived figures.
function M.limits_report(limits, sequential)
  return {h2d_ms = limits.h2d.median, d2h_ms = limits.d2h.median, both_ms = limits.both.median,
          kernel_ms = limits.kernel.median, limit_ms = limits.limit, h2d_32_copies_ms = limits.h2d_pieces.median,
          copy_cost_us = limits.copy_cost_us, copy_cost_both_us = limits.copy_cost_both_us,
          both_32_copies_ms = limits.both_pieces.median, h2d_gbps = limits.h2d_gbps, d2h_gbps = limits.d2h_gbps,
          sequential_vs_sum = sequential and sequential.median_ms / (limits.h2d.median + limits.kernel.median
                                                                     + limits.d2h.median)}
end

-- The fastest {sched, result} of the lists given, the first on a tie.
function M.fastest(...)
  local best
  for _, runs in ipairs{...} do
    for _, run in ipairs(runs) do
      if not best or run.result.median_ms < best.result.median_ms then best = run end
    end
  end
  return best
end

-- The envelope's results, every sample of each: the configurations, the limits, the --auto winners.
function M.collect(run, configurations, limits, auto)
  for _, r in ipairs(configurations) do run:add(r.name, "ms", r.samples, r).group = "configuration" end
  for _, l in ipairs{{"H2D alone", "h2d"}, {"D2H alone", "d2h"}, {"H2D + D2H together", "both"},
                     {"H2D as 32 copies", "h2d_pieces"}, {"Kernel alone", "kernel"}} do
    run:add(l[1], "ms", limits[l[2]].raw, {group = "limit"})
  end
  local winners = auto and {"copy_engines", "copies_alone", "best"} or {}
  for _, k in ipairs(winners) do run:add("auto " .. k, "ms", auto[k].samples, auto[k]).group = "auto" end
end

-- --- several GPUs (--devices) --------------------------------------------------------

-- "1.52 ms alone, 1.61 ms together (1.06x)": together / alone, so
-- contention shows as a number above 1.
function M.contention(alone_ms, together_ms)
  return ("%.3f ms alone, %.3f ms together (%.2fx)"):format(alone_ms, together_ms, together_ms / alone_ms)
end

-- One line a GPU of its limits alone and together: limits_alone[i] and
-- limits_together[i] as Pipeline:limits gives them; gpus[i] = {id, name}.
function M.device_limit_lines(gpus, limits_alone, limits_together)
  local lines = {}
  for i, gpu in ipairs(gpus) do
    local a, t = limits_alone[i], limits_together[i]
    lines[i] = ("GPU %d: H2D %.3f / %.3f ms, D2H %.3f / %.3f ms, kernel %.3f / %.3f ms; limit %s"):format(gpu.id,
      a.h2d.median, t.h2d.median, a.d2h.median, t.d2h.median, a.kernel.median, t.kernel.median,
      M.contention(a.limit, t.limit))
  end
  return lines
end

-- A schedule on every GPU: a line each (rows[i] = {id, name, alone_ms,
-- together_ms, limit_ms (together), verified}), then the aggregate: the
-- bytes each way of every GPU over their own times alone, summed, against
-- all of them over the slowest time together (they start at once).
function M.device_lines(rows, bytes)
  local lines, alone_gbps, slowest = {}, 0, 0
  for i, r in ipairs(rows) do
    lines[i] = ("GPU %d (%s): %s; efficiency %.0f%%; verification: %s"):format(r.id, r.name,
      M.contention(r.alone_ms, r.together_ms), 100 * r.limit_ms / r.together_ms, r.verified and "PASSED" or "FAILED")
    alone_gbps, slowest = alone_gbps + bytes / r.alone_ms / 1e6, math.max(slowest, r.together_ms)
  end
  local together_gbps = #rows * bytes / slowest / 1e6
  lines[#lines + 1] = ("All %d GPUs: %.1f GB/s each way alone (summed), %.1f GB/s together (%.2fx)"):format(#rows,
    alone_gbps, together_gbps, together_gbps / alone_gbps)
  return lines, {alone_gbps = alone_gbps, together_gbps = together_gbps}
end

return M
