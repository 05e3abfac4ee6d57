-- cuda.copy_matrix: memory_resources --bandwidth, the copy rate between
-- every pair of memory resources, each copy verified, and its comparison
-- with the raw C reference (bench/copy_ref).
-- SPDX-License-Identifier: MIT
--
-- The comparison takes turns with the reference, round after round, and
-- each side's figure is the median of its rounds' medians, its interval
-- their spread: copies from pageable memory drift by a quarter from one
-- second to the next on the H200 (bench/pageable_copy.lua), so one run of
-- each side, seconds apart, compared two moments rather than two programs.
local cuda = require "cuda"
local cli = require "cuda.cli"
local bench = require "cuda.bench"

local M = {}

function M.resources(dev)
  return {
    {"pinned", cuda.PinnedMemoryResource()},
    {"pinned pool", cuda.PinnedMemoryResource{pool = true}},
    {"pageable", cuda.HostMemoryResource()},
    {"managed", cuda.ManagedMemoryResource()},
    {"device", dev.memory_resource},
  }
end

-- One copy measured: GB/s (1e9 bytes/s), the median of 10 runs (or more,
-- to --precision) after a warm-up; the destination is then checked against
-- the source. Also returns the check's result, bench.time's stats (each
-- run's time in stats.raw) and the rates as a figure (bench.figure).
local function measure_copy(ctx, from, to, nbytes)
  local s = ctx.stream
  local src, dst = from[2]:allocate(nbytes, s), to[2]:allocate(nbytes, s)
  src:copy_from(ctx.source, s)
  for _, b in ipairs{src, dst} do
    if b.memory_resource.kind == "managed" then b:prefetch(ctx.dev, s) end
  end
  local range <close> = cuda.nvtx.range(from[1] .. " -> " .. to[1])
  -- As bench/copy_ref: the destination poisoned, then the head start (cuda.bandwidth's), before the start
  -- event, so the start event fires with the copy queued behind it; on an idle stream the host's issuing
  -- would be timed (13% of a 64 MB D2D copy).
  local timing = setmetatable({prepare = function()
    dst:fill(0xA5, s)
    ctx.head_start:fill(0, s)
  end}, {__index = ctx.timing})
  local stats = bench.time(s, function() src:copy_to(dst, s) end, timing)
  local check = ctx.check
  check:fill(0, s)
  check:copy_from(dst, s)
  s:sync()
  local ok = check:view("uint32"):allclose(ctx.source:view("uint32"), 0, 0)
  if not ok then ctx.failures = ctx.failures + 1 end
  src:close(s)
  dst:close(s)
  local rates = {}
  for i, ms in ipairs(stats.raw) do rates[i] = nbytes / ms / 1e6 end
  return nbytes / stats.median / 1e6, ok, stats, bench.figure(rates)
end

-- Each pair compared with the reference, and its key there.
M.REFERENCE_PAIRS = {
  {"pinned -> device", "h2d_pinned"}, {"device -> pinned", "d2h_pinned"},
  {"pinned pool -> device", "h2d_pinned_pool"}, {"device -> pinned pool", "d2h_pinned_pool"},
  {"pageable -> device", "h2d_pageable"}, {"device -> pageable", "d2h_pageable"},
  {"device -> device", "d2d"}, {"managed -> device", "managed_prefetched_to_device"},
}

-- Our figures of the compared pairs, measured again (a later round).
local function measure_pairs(ctx, nbytes)
  local by_name, figures = {}, {}
  for _, r in ipairs(ctx.resources) do by_name[r[1]] = r end
  for _, pair in ipairs(M.REFERENCE_PAIRS) do
    local from, to = pair[1]:match("^(.-) %-> (.*)$")
    figures[pair[1]] = select(4, measure_copy(ctx, by_name[from], by_name[to], nbytes))
  end
  return figures
end

-- Rounds of figures (key -> figure) as one figure a key: with one round,
-- that round's; with more, the median of the rounds' medians, its interval
-- their spread (bench.figure of the medians).
local function across_rounds(rounds, key)
  if #rounds == 1 then return rounds[1][key] end
  local medians = {}
  for _, round in ipairs(rounds) do
    if not round[key] then return nil end
    medians[#medians + 1] = round[key].median
  end
  return bench.figure(medians)
end

-- bench/copy_ref with the same bytes, run count and adaptive timing as our side, args.rounds times,
-- taking turns with ours; each pair: GB/s both sides, the ratio with its uncertainty, a flag outside
-- it, and a warning where the reference's spread stayed above --precision.
local function compare_with_reference(ctx, args, figures, nbytes)
  local words = {"--bytes", nbytes, "--runs", 10}
  if args.precision > 0 then table.move({"--precision", 100 * args.precision, "--max-time", args.max_time}, 1, 4, 5, words) end
  local ours, theirs = {figures}, {}
  for round = 1, args.rounds do
    local ref, why = bench.reference(args.reference, words, bench.REFERENCE_COLUMNS, bench.REFERENCE_SPREAD)
    if not ref then io.stderr:write("memory_resources: ", why, "\n") os.exit(1) end
    theirs[round] = ref
    if round > 1 then ours[round] = measure_pairs(ctx, nbytes) end
  end
  print()
  print(("--- Against the raw C driver API (%s), same run, %d round(s) taking turns: GB/s ratio cudalua / C, " ..
         "\u{b1} its 95%% uncertainty ---"):format(args.reference, args.rounds))
  local rows, warnings = {}, {}
  for _, pair in ipairs(M.REFERENCE_PAIRS) do
    local mine, other = across_rounds(ours, pair[1]), across_rounds(theirs, pair[2])
    if mine and other then
      rows[#rows + 1] = {label = pair[1], key = pair[2], ours = mine, theirs = other}
      local spread = other.ci_lo and (other.ci_hi - other.ci_lo) / 2 / other.median
      if args.rounds == 1 and args.precision > 0 and spread and spread > args.precision then
        warnings[#warnings + 1] = ("Warning: %s, raw C: spread stays high: the median is known to \u{b1}%.1f%% after %d runs")
          :format(pair[1], 100 * spread, other.n or 0)
      end
    end
  end
  bench.print_ratios(rows, {columns = {"copy", "cudalua GB/s", "raw C GB/s"}, value = "%12.1f",
                            below = "cudalua slower", above = "cudalua faster"})
  for _, line in ipairs(warnings) do print(line) end
  for _, row in ipairs(rows) do
    row.pair, row.cudalua_gbps, row.c_gbps, row.label, row.ours, row.theirs = row.label, row.ours.median, row.theirs.median
  end
  return rows
end

-- The table of every pair, printed and added to ctx.run; then the comparison
-- (args.reference). Returns GB/s by pair, runs by pair, the comparison's rows
-- and the count of failed checks.
function M.run(ctx, args)
  local nbytes = args.bytes - args.bytes % 4
  ctx.resources = M.resources(ctx.dev)
  local pinned = ctx.resources[1][2]
  ctx.timing = bench.timing_options(args, ctx.dev, {warmup = 2, runs = 10})
  ctx.source, ctx.check, ctx.failures = pinned:allocate(nbytes), pinned:allocate(nbytes), 0
  ctx.source:view("uint32"):random(0, 2^32, ctx.seed)
  ctx.head_start = ctx.dev.memory_resource:allocate(require("cuda.bandwidth").HEAD_START_BYTES, ctx.stream)
  print()
  local runs = args.precision > 0 and ("10+ runs, \u{b1}%g%%"):format(100 * args.precision) or "10"
  print(("--- Copy bandwidth, GB/s (%s per copy, median of %s, verified) ---"):format(cli.format_bytes(nbytes), runs))
  local header = ("%-12s"):format("from \\ to")
  for _, to in ipairs(ctx.resources) do header = header .. ("%12s"):format(to[1]) end
  print(header)
  local results, runs_taken, warnings, figures = {}, {}, {}, {}
  for _, from in ipairs(ctx.resources) do
    local row = ("%-12s"):format(from[1])
    for _, to in ipairs(ctx.resources) do
      local gbps, ok, stats, figure = measure_copy(ctx, from, to, nbytes)
      local pair = from[1] .. " -> " .. to[1]
      results[pair], runs_taken[pair], figures[pair] = gbps, stats.n, figure
      if stats.warning then warnings[#warnings + 1] = ("Warning: %s: %s"):format(pair, stats.warning) end
      local rates = {}
      for i, ms in ipairs(stats.raw) do rates[i] = nbytes / ms / 1e6 end
      ctx.run:add(pair, "GB/s", rates, {median = gbps, bytes = nbytes, verified = ok, runs = stats.n})
      row = row .. ("%11.1f%s"):format(gbps, ok and " " or "!")
    end
    print(row)
  end
  print("(managed buffers are prefetched to the device first; '!' marks a failed check)")
  for _, warning in ipairs(warnings) do print(warning) end
  local compared = args.reference and compare_with_reference(ctx, args, figures, nbytes)
  ctx.source:close()
  ctx.check:close()
  ctx.head_start:close(ctx.stream)
  return results, runs_taken, compared, ctx.failures
end

return M
