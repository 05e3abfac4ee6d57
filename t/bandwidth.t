-- cuda.bandwidth: the fit, the overlap prediction, the table and the
-- options on the CPU; on a GPU, a small verified sweep and --reference.
local t = require "tap"
local cuda = require "cuda"
local bandwidth = require "cuda.bandwidth"
local cudalua = t.cudalua()
local nodrv = "CUDALUA_LIBCUDA=/nonexistent " .. cudalua

-- --- the fit -------------------------------------------------------------------
local function synthetic(fixed_us, gbps, sizes, noise)
  local points = {}
  for i, bytes in ipairs(sizes) do
    local ms = fixed_us / 1e3 + bytes / (gbps * 1e6)
    points[i] = {bytes = bytes, ms = ms * (1 + (noise and noise[i] or 0))}
  end
  return points
end

local sizes = bandwidth.default_sizes()
t.is(#sizes, 17, "default sizes: 4 KiB to 256 MiB by powers of two")
t.is(sizes[1], 4096, "from 4 KiB")
t.is(sizes[#sizes], 256 << 20, "to 256 MiB")

local fit = bandwidth.fit(synthetic(2.6, 53.7, sizes))
t.near(fit.fixed_us, 2.6, 1e-6, "exact data: the fixed cost")
t.near(fit.gbps, 53.7, 1e-6, "exact data: the rate")
t.near(fit.r2, 1, 1e-12, "exact data: R^2 = 1")
t.is(fit.n, 17, "the fit counts its points")

math.randomseed(12345)
local noise = {}
for i = 1, #sizes do noise[i] = (math.random() - 0.5) * 0.02 end   -- +-1%
fit = bandwidth.fit(synthetic(2.6, 53.7, sizes, noise))
t.ok(math.abs(fit.fixed_us - 2.6) < 0.1, "1% noise: fixed cost within 0.1 us, got " .. fit.fixed_us)
t.ok(math.abs(fit.gbps / 53.7 - 1) < 0.02, "1% noise: rate within 2%, got " .. fit.gbps)
t.ok(fit.r2 > 0.99 and fit.r2 < 1, "1% noise: R^2 high but below 1")

local d2d = bandwidth.fit(synthetic(1.9, 1900, {1 << 20, 64 << 20}))
t.near(d2d.gbps, 1900, 1e-6, "two points determine the line")
t.ok(bandwidth.fit({{bytes = 4096, ms = 0.01}}) == nil, "one point: no fit")
t.ok(bandwidth.fit({{bytes = 4096, ms = 0.01}, {bytes = 4096, ms = 0.02}}) == nil, "one size twice: no fit")
-- The H200's device-to-device copies at 4 KiB and 64 KiB took the same 3.50 us: a rate of 1/0 (inf),
-- which JSON cannot hold, ended `bandwidth --json` before it wrote anything.
local flat, why = bandwidth.fit({{bytes = 4096, ms = 0.0035}, {bytes = 65536, ms = 0.0035}})
t.ok(flat == nil and why:find("do not grow", 1, true), "equal times at two sizes: no fit, and why")
t.ok(bandwidth.fit({{bytes = 4096, ms = 0.004}, {bytes = 65536, ms = 0.0035}}) == nil,
  "times falling with the size: no fit (a negative rate)")
t.near(bandwidth.copy_ms({fixed_us = 3, gbps = 50}, 50e6), 1.003, 1e-12, "copy_ms of a fit")

-- --- the prediction ---------------------------------------------------------------
-- An independent model of the pipeline: the flow-shop recurrence, chunk by
-- chunk, with every stage the same for every chunk.
local function simulate(h, k, d, n)
  local in_end, k_end, out_end = 0, 0, 0
  for _ = 1, n do
    in_end = in_end + h
    k_end = math.max(k_end, in_end) + k
    out_end = math.max(out_end, k_end) + d
  end
  return out_end
end

local copy = {fixed_us = 6, gbps = 50}
local costs = {bytes = 64e6, kernel_ms = 1.16, h2d = copy, d2h = copy, both = copy}
local brute, brute_ms
for n = 1, 64 do
  local c = bandwidth.copy_ms(copy, 64e6 / n)
  local ms = simulate(c, 1.16 / n, c, n)
  t.near(bandwidth.pipeline_ms(costs, n), ms, 1e-9, "pipeline_ms matches the simulated pipeline, N=" .. n)
  if not brute_ms or ms < brute_ms then brute, brute_ms = n, ms end
end
local best = bandwidth.best_chunks(costs)
t.is(best.chunks, brute, "best_chunks finds the brute-force minimum of the simulation")
t.near(best.ms, brute_ms, 1e-9, "and its time")
t.ok(best.continuous and math.abs(best.continuous - best.chunks) <= 1.5,
  ("the closed form N* (%.2f) is near the best integer (%d)"):format(best.continuous or -1, best.chunks))

-- Distinct costs each way: the minimum over N of the formula, by brute force.
local skewed = {bytes = 64e6, kernel_ms = 0.3, h2d = {fixed_us = 2.6, gbps = 55}, d2h = {fixed_us = 1.9, gbps = 57},
                both = {fixed_us = 6, gbps = 45}}
local least, least_n = math.huge, nil
for n = 1, 40 do
  local ms = bandwidth.pipeline_ms(skewed, n)
  if ms < least then least, least_n = ms, n end
end
t.is(bandwidth.best_chunks(skewed, 40).chunks, least_n, "best_chunks minimises the formula over N")
t.ok(least_n > 1 and least_n < 40, "the minimum is inside the range: fill/drain against fixed costs")
local free = {bytes = 64e6, kernel_ms = 0.3, h2d = {fixed_us = 0, gbps = 55}, d2h = {fixed_us = 0, gbps = 57},
              both = {fixed_us = 0, gbps = 45}}
t.is(bandwidth.best_chunks(free, 40).chunks, 40, "no fixed cost: the most chunks win")
t.ok(bandwidth.continuous_chunks(free) == nil, "no fixed cost: no closed form")
local dearer = {bytes = 64e6, kernel_ms = 0.3, h2d = skewed.h2d, d2h = skewed.d2h, both = {fixed_us = 24, gbps = 45}}
t.ok(bandwidth.best_chunks(dearer).chunks < bandwidth.best_chunks(skewed).chunks, "dearer copies: fewer chunks")

-- A copy queued behind another pays g, not the isolated fixed cost: the
-- steady state's copies cost g + bytes / rate, the fill and drain the fit.
local queued = {bytes = 64e6, kernel_ms = 0.3, h2d = skewed.h2d, d2h = skewed.d2h, both = skewed.both, queued_us = 1.5}
for _, n in ipairs{1, 2, 7, 24} do
  local h, d = bandwidth.copy_ms(skewed.h2d, 64e6 / n), bandwidth.copy_ms(skewed.d2h, 64e6 / n)
  local c = 1.5e-3 + 64e6 / n / 45e6
  t.near(bandwidth.pipeline_ms(queued, n), h + 0.3 / n + d + (n - 1) * math.max(c, 0.3 / n), 1e-12,
    "pipeline_ms: the steady state prices a chunk at queued_us, N=" .. n)
end
t.near(bandwidth.continuous_chunks(queued), math.sqrt((64e6 * (1 / 55e6 + 1 / 57e6 - 1 / 45e6) + 0.3) / 1.5e-3), 1e-9,
  "continuous_chunks divides by queued_us")
t.is(bandwidth.chunk_cost_us{both = skewed.both, queued_us = -0.4}, skewed.both.fixed_us,
  "chunk_cost_us: a queued cost that noise made <= 0 falls back to the fit's fixed cost")
t.ok(bandwidth.best_chunks(queued).chunks > bandwidth.best_chunks(skewed).chunks,
  "a copy cheaper queued than alone: more chunks")
-- The H200's figures (cudalua bandwidth --overlap: the fits, a 0.3 ms
-- kernel, 64 MB each way): priced at the fit's fixed cost the model
-- printed 10 chunks, 1.515 ms, where the search found 18 to 22 chunks and
-- 1.417 ms; priced at a queued copy's 2.5 us it comes nearer.
local h200 = {bytes = 64e6, kernel_ms = 0.3, h2d = {fixed_us = 6.2, gbps = 53.2}, d2h = {fixed_us = 8.6, gbps = 56.6},
              both = {fixed_us = 13.6, gbps = 51.7}}
local alone = bandwidth.best_chunks(h200)
t.ok(alone.chunks == 10 and math.abs(alone.ms - 1.515) < 5e-4, "H200 figures, the fit's fixed cost: 10 chunks, 1.515 ms")
h200.queued_us = 2.5
local queued_best = bandwidth.best_chunks(h200)
t.ok(queued_best.chunks >= 18 and queued_best.chunks <= 26 and math.abs(queued_best.ms - 1.417) < 0.06,
  ("H200 figures, a queued copy's 2.5 us: %d chunks, %.3f ms"):format(queued_best.chunks, queued_best.ms))

-- --- parsing and formatting ---------------------------------------------------------
t.is(bandwidth.parse_size("4K"), 4096, "4K")
t.is(bandwidth.parse_size("64M"), 64 << 20, "64M")
t.is(bandwidth.parse_size("1g"), 1 << 30, "1g")
t.is(bandwidth.parse_size("4096"), 4096, "4096")
t.ok(bandwidth.parse_size("4097") == nil, "not a multiple of 4")
t.ok(bandwidth.parse_size("0") == nil, "zero")
t.ok(bandwidth.parse_size("-4") == nil and bandwidth.parse_size("4X") == nil, "not a size")
local list = bandwidth.parse_sizes("4K, 1M,8")
t.ok(list and list[1] == 4096 and list[2] == 1 << 20 and list[3] == 8 and #list == 3, "a list of sizes")
local paths, why = bandwidth.word_list(bandwidth.PATHS)("h2d,up")
t.ok(paths == nil and why:find("'up' is not one of"), "an unknown path is refused, by name")

local series = bandwidth.series_list({"h2d", "d2d"}, {"pinned", "pageable"}, {"copy", "sm"})
local names = {}
for i, s in ipairs(series) do names[i] = bandwidth.series_name(s) end
t.is(table.concat(names, "|"), "h2d pinned copy|h2d pageable copy|d2d device copy|h2d pinned sm|d2d device sm",
  "series: d2d once an engine, no SM copies of pageable memory")

local sweep = {sizes = {4096, 8192}, series = {
  {path = "h2d", resource = "pinned", engine = "copy",
   points = {{bytes = 4096, ms = 0.004, gbps = 1.024, verified = true},
             {bytes = 8192, ms = 0.005, gbps = 1.6384, verified = false}}},
  {path = "d2d", resource = "device", engine = "sm", points = {}, skipped = "why"}}}
local text = bandwidth.format_table(sweep)
t.like(text, "h2d pinned copy", "the table names the series")
t.like(text, "\n%s+4096%s+1%.02 ", "a verified figure")
t.like(text, "1%.64!", "a failed check is marked")
t.like(text, "8192.-%-", "a missing figure is a dash")
bandwidth.fit_all(sweep)
t.near(sweep.series[1].fit.fixed_us, 3, 1e-9, "fit_all fits each series")
t.ok(sweep.series[2].fit == nil and sweep.series[2].fit_error, "and says why it cannot")
text = bandwidth.format_fits(sweep)
t.like(text, "h2d pinned copy%s+3%.00%s+4%.1", "the fits table: fixed cost and rate")
t.ok(bandwidth.find(sweep, "d2d", "device", "sm") == sweep.series[2], "find a series")

-- --- the cost per operation -----------------------------------------------------
local line = bandwidth.slope({{x = 1, y = 1}, {x = 2, y = 3}, {x = 3, y = 2}})
t.ok(math.abs(line.slope - 0.5) < 1e-12 and math.abs(line.intercept - 1) < 1e-12, "slope: least squares by hand")
t.near(line.se, math.sqrt(1.5 / 1 / 2), 1e-12, "slope: its standard error, sqrt(rss / (n - 2) / sxx)")
local exact = {}
local a, b = math.random() * 100, math.random() * 10
for i, n in ipairs(bandwidth.OP_COUNTS) do exact[i] = {n = n, us = a + b * n} end
local cost = bandwidth.op_cost_fit(exact)
t.ok(math.abs(cost.us - b) < 1e-9 and math.abs(cost.intercept_us - a) < 1e-9 and cost.se < 1e-9,
  "op_cost_fit: a random exact line gives its slope, intercept and no error")
t.is(select(2, bandwidth.slope({{x = 1, y = 2}})), "a slope needs at least two points", "slope: one point is refused")
t.is(select(2, bandwidth.slope({{x = 2, y = 1}, {x = 2, y = 3}})), "a slope needs two different x",
  "slope: one x is refused")
t.is(table.concat(bandwidth.OP_COUNTS, ","), "1,2,4,8,16,32,64", "the chunk counts, as bandwidth_ref --op-cost's")
local figures = {}
for _, n in ipairs(bandwidth.OP_COUNTS) do
  figures["ops_h2d_" .. n] = {median = 1000 + 2.5 * n, ci_lo = 999, ci_hi = 1001 + 2.5 * n}
  figures["ops_both_" .. n] = {median = 1200 + 6.5 * n}
end
local ref = bandwidth.reference_op_costs(figures, "ops")
t.ok(math.abs(ref.h2d.us - 2.5) < 1e-9 and math.abs(ref.both.us - 6.5) < 1e-9 and ref.d2h == nil,
  "reference_op_costs: each mode the reference printed, by its slope")
t.is(bandwidth.reference_op_costs(figures, "batch"), nil, "reference_op_costs: none printed, nil")
local text = bandwidth.format_op_costs(ref, {h2d = {us = 2.4, se = 0.1}}, "raw C")
t.like(text, "^h2d +2%.50 us a copy %(\u{b1}0%.00%) +raw C +2%.40 us %(\u{b1}0%.10%)\n", "format_op_costs: ours and theirs")
t.like(text, "\nboth +6%.50 us a pair", "format_op_costs: both ways is a pair")

-- --- the script without a GPU -------------------------------------------------------
local code, out, err = t.run(nodrv .. " bandwidth --help")
t.is(code, 0, "--help exits 0 without a GPU")
t.like(out, "Usage: cudalua bandwidth", "--help shows the usage")
t.like(out, "%-%-reference", "and the options")
for _, bad in ipairs{{"--sizes 4097", "sizes"}, {"--paths sideways", "paths"}, {"--runs 0", "runs"},
                     {"--op-cost 1000", "multiple of 256"}, {"--op-cost 0", "op%-cost"}} do
  code, out, err = t.run(nodrv .. " bandwidth " .. bad[1])
  t.is(code, 2, bad[1] .. " is a usage error")
  t.like(err, bad[2], bad[1] .. ": the error names the option")
end
code, out, err = t.run(nodrv .. " bandwidth")
t.is(code, 2, "without a driver exits 2")
t.like(err, "^cudalua: no NVIDIA driver found", "and says why")
t.is(select(2, err:gsub("\n", "")), 1, "in one line")

if not cuda.is_available() then
  t.skip("no CUDA device", 13)
  t.done()
end

-- --- on a GPU --------------------------------------------------------------------
local dev = cuda.Device(0)
dev:set_current()
local small = bandwidth.sweep(dev, {sizes = {4096, 65536, 1 << 20}, runs = 3, warmup = 1,
                                    resources = {"pinned", "pageable"}, engines = {"copy", "sm"}})
t.is(small.failures, 0, "every copy of a small sweep verified")
local measured, all_verified = 0, true
for _, s in ipairs(small.series) do
  for _, p in ipairs(s.points) do
    measured = measured + 1
    all_verified = all_verified and p.verified and p.ms > 0
  end
end
t.is(measured, 3 * #bandwidth.series_list(bandwidth.PATHS, {"pinned", "pageable"}, {"copy", "sm"}),
  "every series measured at every size")
t.ok(all_verified, "each point verified, with a positive time")
local h2d = bandwidth.find(small, "h2d", "pinned", "copy")
t.ok(h2d.fit and h2d.fit.fixed_us > 0 and h2d.fit.gbps > 1, "the pinned H2D fit has a fixed cost and a rate")
local costs = bandwidth.op_cost(dev, {bytes = 1 << 20, counts = {1, 4, 16}, runs = 3, warmup = 1})
t.is(costs.failures, 0, "op_cost: every copy verified, separate and batched")
t.ok(costs.h2d and costs.batch.h2d and costs.batch.both and costs.batch.h2d.points[3].n == 16,
  "op_cost: a fit per mode for separate copies and for one cuda.copy_batch a direction")

-- --reference with a stand-in for bench/bandwidth_ref: every copy 10 us.
local dir = t.tmpdir()
local fake = dir .. "/fake_ref"
t.write_file(fake, [[
#!/bin/sh
printf '%s\n' "$@" > "$(dirname "$0")/args"
while [ $# -gt 0 ]; do case $1 in --sizes) sizes=$2 ;; esac; shift; done
echo "# fake_ref"
for p in h2d d2h both d2d; do for s in $(echo "$sizes" | tr , ' '); do echo "${p}_$s 10.0 9.0 11.0"; done; done
]])
os.execute("chmod +x '" .. fake .. "'")
local tmp = os.tmpname()
-- 64 KiB and 4 MiB: at 4 KiB and 64 KiB the H100's h2d copies took 9.1 and 7.1 us (their fixed
-- cost and noise), a series with no fit, and so no prediction
code, out = t.run(cudalua .. " bandwidth --sizes 64K,4M --runs 2 --warmup 1 --reference " .. fake .. " --json " .. tmp)
t.is(code, 0, "--reference runs")
t.like(out, "Every copy verified%.", "the sweep verified")
t.like(out, "Best chunk count: %d+", "the prediction is printed")
t.like(t.read_file(dir .. "/args") or "", "%-%-sizes\n65536,4194304\n", "the reference gets the sizes")
local report = require("cuda.json").decode(t.read_file(tmp) or "null")
local rows = report and report.details and report.details.reference and report.details.reference.rows or {}
local row = rows[1]
t.ok(#rows == 8 and row.c_us == 10 and math.abs(row.ratio - row.cudalua_us / 10) < 1e-9,
  "JSON: every path and size against C")
t.write_file(fake, "#!/bin/sh\necho 'h2d_4096 1.0 1.0 1.0'\n")
code, out, err = t.run(cudalua .. " bandwidth --sizes 4K,64K --runs 2 --warmup 1 --reference " .. fake)
t.is(code, 1, "a reference that leaves out a figure fails the run")
t.like(err, "did not report", "and says which")
os.execute("rm -rf '" .. dir .. "'")
os.remove(tmp)
t.done()
