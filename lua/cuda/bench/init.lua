-- cuda.bench: repeated timing with summary statistics.
-- SPDX-License-Identifier: MIT
--
-- bench.time measures GPU work with CUDA events after a warm-up; bench.host
-- measures host-side cost (launch overhead) with cuda.clock. Both report
-- milliseconds and summarise with bench.stats, whose median is the figure
-- to quote: it ignores the occasional run disturbed by something else.
-- bench.summary, bench.combine and bench.reference speak the figures of the
-- raw C references in bench/: a median, a min and a percentile or max.
local M = {}

local function sorted_copy(values)
  local sorted = table.move(values, 1, #values, 1, {})
  table.sort(sorted)
  return sorted
end

-- The middle of a sorted list, or the mean of its two middle values.
local function middle(sorted)
  local n, half = #sorted, #sorted // 2
  return n % 2 == 1 and sorted[half + 1] or (sorted[half] + sorted[half + 1]) / 2
end

-- The median of a list of numbers; the list is left as it is.
function M.median(values)
  assert(#values > 0, "bench.median needs at least one value")
  return middle(sorted_copy(values))
end

-- The p-th percentile (0..100) of a sorted list, interpolated between the
-- two nearest ranks (numpy's default), exactly as ref_percentile in
-- bench/ref.h computes it, so that both sides of a ratio agree.
function M.percentile(sorted, p)
  local pos = p / 100 * (#sorted - 1)
  local lo = math.floor(pos)
  if lo >= #sorted - 1 then return sorted[#sorted] end
  return sorted[lo + 1] + (pos - lo) * (sorted[lo + 2] - sorted[lo + 1])
end

-- {median, min, p90, max} of a list of numbers, as ref_summarize in
-- bench/ref.h reports a figure (median and p90 interpolated); raw is a copy
-- of the samples in the order given.
function M.summary(samples)
  assert(#samples > 0, "bench.summary needs at least one sample")
  local sorted = sorted_copy(samples)
  return {median = M.percentile(sorted, 50), min = sorted[1], p90 = M.percentile(sorted, 90),
          max = sorted[#sorted], raw = table.move(samples, 1, #samples, 1, {})}
end

-- How a column of a figure is combined over rounds: the least min, the
-- greatest max, the median of anything else (a median, a percentile).
local COMBINERS = {
  min = function(values) return sorted_copy(values)[1] end,
  max = function(values) return sorted_copy(values)[#values] end,
}

-- Rounds of figures (each key -> {column = number}) as one figure for each
-- of keys, with just the given columns, each combined over the rounds.
function M.combine(rounds, keys, columns)
  assert(#rounds > 0, "bench.combine needs at least one round")
  local combined = {}
  for _, key in ipairs(keys) do
    local figure = {}
    for _, column in ipairs(columns) do
      local values = {}
      for i, round in ipairs(rounds) do values[i] = round[key][column] end
      figure[column] = (COMBINERS[column] or M.median)(values)
    end
    combined[key] = figure
  end
  return combined
end

-- Summary of a list of numbers: {n, median, mean, std, min, max, samples,
-- raw}, std being the sample standard deviation (0 for a single sample),
-- samples a sorted copy and raw a copy in the order given (run order).
function M.stats(samples)
  local n = #samples
  assert(n > 0, "bench.stats needs at least one sample")
  local sorted = sorted_copy(samples)
  local sum = 0
  for i = 1, n do sum = sum + sorted[i] end
  local mean = sum / n
  local squares = 0           -- second pass: no cancellation as in sum(x^2) - n*mean^2
  for i = 1, n do squares = squares + (sorted[i] - mean) ^ 2 end
  return {
    n = n, median = middle(sorted), mean = mean, std = n > 1 and math.sqrt(squares / (n - 1)) or 0.0,
    min = sorted[1], max = sorted[n], samples = sorted, raw = table.move(samples, 1, n, 1, {}),
  }
end

-- A count from the options table; integral floats (3.0) are accepted.
local function count_option(opts, key, default, least)
  local value = opts[key]
  if value == nil then return default end
  local n = math.tointeger(value)
  assert(n and n >= least, ("bench: option '%s' must be an integer >= %d"):format(key, least))
  return n
end

-- The start/stop events to time with: the caller's (opts.events = {start,
-- stop}), or a new pair plus a to-be-closed object that frees it.
local function timing_events(stream, events)
  if events then
    assert(events[1] and events[2], "bench.time: events must be {start_event, stop_event}")
    return events[1], events[2], nil
  end
  local device = stream.device
  local start = device:create_event{timing = true}
  local stop = device:create_event{timing = true}
  local closer = setmetatable({}, {__close = function() start:close(); stop:close() end})
  return start, stop, closer
end

-- --- the median's confidence interval ----------------------------------------

-- The ranks (lo, hi) of a distribution-free confidence interval for the
-- median of n samples: [x(lo), x(hi)] of the sorted samples covers the true
-- median with probability at least `confidence` (default 0.95), whatever
-- the distribution. The count of samples below the median is
-- Binomial(n, 1/2), so lo is the greatest rank with P(X <= lo - 1) <=
-- alpha/2, hi = n + 1 - lo. Nil when n is too small for that confidence
-- (n < 6 at 95%).
function M.median_ci_ranks(n, confidence)
  local tail = (1 - (confidence or 0.95)) / 2
  -- P(X <= j) summed term by term in log space: 0.5^n underflows for n > 1074
  local lo, cdf, log_choose, log_half_n = nil, 0.0, 0.0, n * math.log(0.5)
  for j = 0, n // 2 do
    if j > 0 then log_choose = log_choose + math.log(n - j + 1) - math.log(j) end
    cdf = cdf + math.exp(log_choose + log_half_n)
    if cdf > tail then break end
    lo = j + 1
  end
  if lo then return lo, n + 1 - lo end
  return nil
end

-- The confidence interval {lo, hi} of the median of sorted samples, or nil.
function M.median_ci(sorted, confidence)
  local lo, hi = M.median_ci_ranks(#sorted, confidence)
  return lo and {sorted[lo], sorted[hi]} or nil
end

-- The interval's half width relative to the median: the precision the
-- adaptive mode of bench.time reaches. math.huge without an interval.
function M.relative_ci(stats)
  if not stats.ci or stats.median <= 0 then return math.huge end
  return (stats.ci[2] - stats.ci[1]) / 2 / stats.median
end

-- bench.stats plus the percentiles p10, p50, p90 (interpolated, as
-- bench.percentile) and the median's 95% interval (ci, nil below 6 runs).
local function timing_stats(samples)
  local st = M.stats(samples)
  st.p10, st.p50, st.p90 = M.percentile(st.samples, 10), M.percentile(st.samples, 50), M.percentile(st.samples, 90)
  st.ci = M.median_ci(st.samples)
  return st
end

-- --- timing GPU work ---------------------------------------------------------

-- The SM clock in MHz, measured: a one-thread kernel spins for CYCLES of
-- clock64() and two events time it, so cycles / microseconds is the clock
-- one SM ran at during those ~5 ms. It is the clock under a light load
-- (a busy GPU may run slower, an idle one boosts); what matters is that the
-- same probe before and after a measurement agrees. The driver reports
-- only the maximum clock; NVML is not linked. One probe per device.
local PROBE_CYCLES = 10000000
local PROBE_SOURCE = [[
extern "C" __global__ void cudalua_spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
}]]
local probes = setmetatable({}, {__mode = "k"})

function M.sm_clock_probe(device)
  if probes[device] then return probes[device] end
  local cuda = require "cuda"
  local kernel = cuda.Program(PROBE_SOURCE, "c++", {arch = "sm_" .. device.arch}):compile("cubin")
    :get_kernel("cudalua_spin")
  local config, cycles = cuda.LaunchConfig{grid = 1, block = 1}, cuda.i64(PROBE_CYCLES)
  local probe = function(stream)
    local start <close> = device:create_event{timing = true}
    local stop <close> = device:create_event{timing = true}
    stream:record(start)
    cuda.launch(stream, config, kernel, cycles)
    stream:record(stop)
    stop:sync()
    local ms = stop - start
    return ms > 0 and PROBE_CYCLES / (ms * 1000) or nil   -- nil: no reading
  end
  probes[device] = probe
  return probe
end

M.CLOCK_TOLERANCE = 0.02   -- relative change of the SM clock that earns a warning

-- The warning lines of an adaptive measurement: a spread that stayed above
-- the target, an SM clock that moved. nil when there is nothing to say.
local function timing_warning(st, precision, clocks)
  local lines = {}
  local reached = M.relative_ci(st)
  if reached > precision then
    lines[#lines + 1] = reached < math.huge
      and ("spread stays high: the median is known to \u{b1}%.1f%% after %d runs (target %.1f%%)")
        :format(100 * reached, st.n, 100 * precision)
      or ("too few runs (%d) for a confidence interval of the median"):format(st.n)
  end
  if clocks and clocks[1] and clocks[2] and math.abs(clocks[2] - clocks[1]) > M.CLOCK_TOLERANCE * clocks[1] then
    lines[#lines + 1] = ("the SM clock moved during the runs: %.0f MHz before, %.0f MHz after")
      :format(clocks[1], clocks[2])
  end
  return #lines > 0 and table.concat(lines, "; ") or nil
end

-- One timed run of fn between the two events, in milliseconds.
local function timed_run(stream, fn, start, stop, prepare)
  if prepare then prepare(stream) end   -- queued before the start event: not timed
  stream:record(start)
  fn(stream)
  stream:record(stop)
  stop:sync()
  return stop - start
end

-- Whether the adaptive loop checks the interval after n runs: from
-- min_runs on, every tenth more, so the sorting stays a small share.
local function check_due(n, min_runs, last_check)
  return n >= min_runs and n - last_check >= math.max(1, last_check // 10)
end

-- Runs until the median's relative interval is below precision, the time
-- budget is spent or max_runs are done; at least min_runs.
local function adaptive_samples(stream, fn, start, stop, a)
  local samples, last_check, t0 = {}, 0, a.clock()
  repeat
    samples[#samples + 1] = timed_run(stream, fn, start, stop, a.prepare)
    local n, done = #samples, false
    if check_due(n, a.min_runs, last_check) then
      last_check = n
      local sorted = sorted_copy(samples)
      local lo, hi = M.median_ci_ranks(n)
      done = lo ~= nil and (sorted[hi] - sorted[lo]) / 2 <= a.precision * middle(sorted)
    end
  until done or #samples >= a.max_runs or (#samples >= a.min_runs and a.clock() - t0 >= a.max_time)
  return samples
end

-- The adaptive options, or nil for a fixed run count: adaptive when
-- opts.precision (> 0) or opts.max_time is given.
local function adaptive_options(opts)
  local precision, max_time = opts.precision, opts.max_time
  if not ((precision and precision > 0) or max_time) then return nil end
  assert(precision == nil or (type(precision) == "number" and precision >= 0), "bench: precision must be a number >= 0")
  assert(max_time == nil or (type(max_time) == "number" and max_time > 0), "bench: max_time must be a number > 0")
  return {precision = precision or 0.01, max_time = max_time or 1.0,
          min_runs = count_option(opts, "runs", 10, 1), max_runs = count_option(opts, "max_runs", 100000, 1),
          clock = opts.clock or require("cuda").clock, prepare = opts.prepare}
end

-- Runs fn(stream) opts.warmup times (default 3), then times it between two
-- events, waiting for each run to finish; returns the stats of the elapsed
-- milliseconds (bench.stats plus p10, p50, p90 and ci). Events are created
-- (or passed in as opts.events) before the loop, so the timed region
-- allocates none. opts.prepare(stream), when given, is issued before each
-- timed run's start event: queued work the start event waits behind.
--   fixed:    opts.runs runs (default 10), when no precision or max_time;
--   adaptive: opts.precision (default 0.01) and/or opts.max_time (seconds,
--             default 1): runs until the median's 95% interval is within
--             +-precision of it, or max_time has passed, with opts.runs as
--             the least number of runs and opts.max_runs (100000) the most.
--             stats.warning says when the spread stayed above the target
--             or the SM clock, read by opts.clock_probe(stream) (in MHz,
--             bench.sm_clock_probe) before and after, moved.
function M.time(stream, fn, opts)
  opts = opts or {}
  local warmup = count_option(opts, "warmup", 3, 0)
  local adaptive = adaptive_options(opts)
  local runs = count_option(opts, "runs", 10, 1)
  local start, stop, owned_events <close> = timing_events(stream, opts.events)
  for _ = 1, warmup do fn(stream) end
  stream:sync()
  if not adaptive then
    local samples = {}
    for run = 1, runs do samples[run] = timed_run(stream, fn, start, stop, opts.prepare) end
    return timing_stats(samples)
  end
  local probe = opts.clock_probe
  local clock_before = probe and probe(stream)
  local st = timing_stats(adaptive_samples(stream, fn, start, stop, adaptive))
  local clocks = probe and {clock_before, probe(stream)}
  st.precision, st.clocks = adaptive.precision, clocks
  st.warning = timing_warning(st, adaptive.precision, clocks)
  return st
end

-- --- the adaptive mode's command-line options ------------------------------------

-- "1%", "1" or "0.5": a percentage, as a fraction; 0 is allowed.
local function percent(text)
  local value = tonumber((tostring(text):gsub("%%$", "")))
  if not value or value < 0 or value ~= value or value == math.huge then
    return nil, ("'%s' is not a percentage (0 or more, e.g. 1%%)"):format(tostring(text))
  end
  return value / 100
end

local function seconds(text)
  local value = tonumber(text)
  if not value or not (value > 0) or value == math.huge then
    return nil, ("'%s' is not a positive number of seconds"):format(tostring(text))
  end
  return value
end

-- Adds --precision and --max-time to a cuda.cli parser.
function M.add_timing_options(parser)
  parser:option("--precision", "Time each configuration until the median's 95% confidence interval is " ..
    "within +-P of it, after the fixed runs (--runs, where there is one); 0: the fixed runs only.", "1%"):convert(percent)
  parser:option("--max-time", "Seconds of timed runs per configuration at most, when --precision is not " ..
    "reached sooner.", "1"):convert(seconds)
end

-- The options for bench.time that those give, added to a copy of base:
-- the adaptive mode with device's SM clock probe, or nothing for
-- --precision 0.
function M.timing_options(args, device, base)
  local opts = {}
  for k, v in pairs(base or {}) do opts[k] = v end
  if args.precision > 0 then
    opts.precision, opts.max_time, opts.clock_probe = args.precision, args.max_time, M.sm_clock_probe(device)
  end
  return opts
end

-- --- host-cost measurements that hold still ---------------------------------------

-- Adds --cpu to a cuda.cli parser: "auto", "none" or a CPU number.
function M.add_cpu_option(parser)
  parser:option("--cpu", "Pin the measuring thread (and the reference) to this CPU; auto: the last CPU " ..
    "this process may use (CPU 0 takes most interrupts); none: do not pin.", "auto"):convert(function(text)
      if text == "auto" or text == "none" then return text end
      local cpu = tostring(text):match("^%d+$") and math.tointeger(tonumber(text))
      if not cpu then return nil, ("'%s' is not a CPU number, auto or none"):format(tostring(text)) end
      return cpu
    end)
end

-- Pins the calling thread as --cpu says (cuda.set_affinity); returns the
-- CPU, or nil for "none".
function M.pin(choice)
  if choice == "none" then return nil end
  local cuda = require "cuda"
  local cpu = choice
  if choice == "auto" then
    local allowed = cuda.get_affinity()
    cpu = allowed[#allowed]
  end
  cuda.set_affinity(cpu)
  return cpu
end

-- Host-side cost of one call of fn, in milliseconds: opts.runs (default 10)
-- batches of opts.inner calls (default 100), each batch's mean per call is
-- one sample; batches dilute the clock's own cost and resolution. opts.warmup
-- (default 1) batches run first, untimed.
function M.host(fn, opts)
  opts = opts or {}
  local warmup = count_option(opts, "warmup", 1, 0)
  local runs = count_option(opts, "runs", 10, 1)
  local inner = count_option(opts, "inner", 100, 1)
  local clock = opts.clock or require("cuda").clock
  for _ = 1, warmup * inner do fn() end
  local samples = {}
  for run = 1, runs do
    local t0 = clock()
    for _ = 1, inner do fn() end
    samples[run] = (clock() - t0) * 1000 / inner
  end
  return M.stats(samples)
end

-- The method of the raw C references in bench/ (bench/ref.h): issue(count)
-- issues a batch of work on stream; each batch starts on an idle stream;
-- opts.warmup (default 10) batches run before opts.repeats (default 200)
-- timed ones. Both return bench.summary of the timed batches.
local function batch_counts(opts)
  return count_option(opts, "warmup", 10, 0), count_option(opts, "repeats", 200, 1)
end

-- Host microseconds per call (the references' unit) of issue(batch), read
-- with opts.clock (default cuda.clock). A full garbage collection first,
-- so that earlier garbage is not collected mid-batch; garbage the calls
-- themselves make is part of their cost.
function M.host_batches(stream, issue, batch, opts)
  opts = opts or {}
  local warmup, repeats = batch_counts(opts)
  local clock = opts.clock or require("cuda").clock
  for _ = 1, warmup do
    stream:sync()
    issue(batch)
  end
  local samples = {}
  collectgarbage("collect")
  for r = 1, repeats do
    stream:sync()
    local t0 = clock()
    issue(batch)
    local t1 = clock()
    samples[r] = (t1 - t0) * 1e6 / batch
  end
  stream:sync()
  return M.summary(samples)
end

-- GPU milliseconds between two events recorded around issue(count), the
-- warm-up batches timed too but not kept. opts.events = {start, stop} as
-- in bench.time.
function M.gpu_batches(stream, issue, count, opts)
  opts = opts or {}
  local warmup, repeats = batch_counts(opts)
  local start, stop, owned_events <close> = timing_events(stream, opts.events)
  local samples = {}
  for r = 1, warmup + repeats do
    stream:sync()
    stream:record(start)
    issue(count)
    stream:record(stop)
    stop:sync()
    if r > warmup then samples[r - warmup] = stop - start end
  end
  return M.summary(samples)
end

local function shell_quote(word)
  return "'" .. tostring(word):gsub("'", "'\\''") .. "'"
end

-- "<key> <number> ...": the key and the numbers named by columns, then
-- those named by optional (all of them or none), or nil if the line has
-- another number of words or a word that is not a number.
local function parse_figure(line, columns, optional)
  local words = {}
  for word in line:gmatch("%S+") do words[#words + 1] = word end
  local names = table.move(columns, 1, #columns, 1, {})
  if optional and #words == #columns + #optional + 1 then table.move(optional, 1, #optional, #names + 1, names) end
  if #words ~= #names + 1 then return nil end
  local figure = {}
  for i, column in ipairs(names) do
    figure[column] = tonumber(words[i + 1])
    if not figure[column] then return nil end
  end
  return words[1], figure
end

-- Runs a raw C reference program (bench/*_ref) with the given argument
-- words and reads what it prints: '#' header lines, then one line per
-- figure, "<key> <number> ...", its numbers named by columns (for example
-- {"median", "min", "max"}). Returns the figures by key and the header
-- lines, or nil and a message if the program cannot run, fails, or prints
-- any other line. optional: more columns a line may carry after those
-- (the references print {"n", "ci_lo", "ci_hi"}: the run count and the
-- median's 95% interval).
function M.reference(path, arguments, columns, optional)
  local words = {shell_quote(path)}
  for _, a in ipairs(arguments) do words[#words + 1] = shell_quote(a) end
  local pipe, why = io.popen(table.concat(words, " "), "r")
  if not pipe then return nil, ("cannot run %s: %s"):format(path, why) end
  local figures, header, stray = {}, {}, nil
  for line in pipe:lines() do
    if line:sub(1, 1) == "#" then
      header[#header + 1] = line
    else
      local key, figure = parse_figure(line, columns, optional)
      if key then figures[key] = figure else stray = stray or line end
    end
  end
  local ok, how, code = pipe:close()
  if not ok then return nil, ("%s failed (%s %s); see its message above"):format(path, how, code) end
  if stray then
    return nil, ("%s printed a line that is not '<key> <%s>': %q"):format(path, table.concat(columns, "> <"), stray)
  end
  return figures, header
end

-- --- ratios with their uncertainty -------------------------------------------------

M.REFERENCE_COLUMNS = {"median", "min", "max"}
M.REFERENCE_SPREAD = {"n", "ci_lo", "ci_hi"}

-- A figure for ratio from samples (any order): {median, ci_lo, ci_hi, n},
-- the interval the median's 95% confidence interval (bench.median_ci), or
-- the samples' min and max below 6 samples.
function M.figure(samples)
  local sorted = sorted_copy(samples)
  local ci = M.median_ci(sorted) or {sorted[1], sorted[#sorted]}
  return {median = middle(sorted), ci_lo = ci[1], ci_hi = ci[2], n = #sorted}
end

-- The half width of a figure's interval relative to its median, or nil
-- when the figure carries none (a reference of the older format).
local function relative_spread(f)
  if not (f.ci_lo and f.ci_hi) or f.median <= 0 then return nil end
  return (f.ci_hi - f.ci_lo) / 2 / f.median
end

-- ours / theirs, two figures ({median, ci_lo, ci_hi}): {ratio, uncertainty,
-- outside}. The uncertainty is the two medians' relative half widths added
-- in quadrature, times the ratio; outside says the ratio is further from 1
-- than that (nil without intervals).
function M.ratio(ours, theirs)
  local r = {ratio = ours.median / theirs.median}
  local a, b = relative_spread(ours), relative_spread(theirs)
  if a and b then
    r.uncertainty = r.ratio * math.sqrt(a * a + b * b)
    r.outside = math.abs(r.ratio - 1) > r.uncertainty
  end
  return r
end

-- "1.013 ±0.008", or the ratio alone without an uncertainty.
function M.format_ratio(r)
  if not r.uncertainty then return ("%.3f"):format(r.ratio) end
  return ("%.3f \u{b1}%.3f"):format(r.ratio, r.uncertainty)
end

-- The one-line flag of a ratio outside its band around 1, or nil. what
-- names the figure; lower says what a ratio below 1 means ("cudalua
-- faster" for a time ratio).
function M.ratio_flag(what, r, lower, higher)
  if not r.outside then return nil end
  return ("FLAG %s: ratio %s is outside its uncertainty of 1 (%s)"):format(what, M.format_ratio(r),
    r.ratio < 1 and (lower or "below") or (higher or "above"))
end

-- Prints a comparison with raw C: a header of opts.columns (the label's,
-- ours, theirs), then a line per row {label, ours, theirs} (figures as
-- for ratio) with both medians (opts.value, default "%12.2f"), the ratio
-- and its uncertainty ('*' outside it), then a FLAG line for each ratio
-- outside its band (opts.below, opts.above: what a ratio under or over 1
-- means) and a closing count. opts.width: the label column (24). Returns
-- the rows, each with ratio, uncertainty and outside added, and the count
-- flagged.
function M.print_ratios(rows, opts)
  local width, value = opts.width or 24, opts.value or "%12.2f"
  local cols = opts.columns
  print(("%-" .. width .. "s %12s %12s %16s"):format(cols[1], cols[2], cols[3], "ratio"))
  local flags = {}
  for _, row in ipairs(rows) do
    local r = M.ratio(row.ours, row.theirs)
    row.ratio, row.uncertainty, row.outside = r.ratio, r.uncertainty, r.outside
    print(("%-" .. width .. "s " .. value .. " " .. value .. " %16s%s"):format(row.label, row.ours.median,
      row.theirs.median, M.format_ratio(r), r.outside and " *" or ""))
    flags[#flags + 1] = M.ratio_flag((row.label:gsub("%s+", " ")), r, opts.below, opts.above)
  end
  for _, line in ipairs(flags) do print(line) end
  print(#flags == 0 and "(every ratio within its uncertainty of 1)"
        or ("(%d of %d ratios outside their uncertainty of 1: *)"):format(#flags, #rows))
  return rows, #flags
end

-- "1.23 ms (±0.04)": median, then the sample standard deviation.
function M.format_ms(stats, digits)
  digits = digits or 2
  local fmt = ("%%.%df ms (\u{b1}%%.%df)"):format(digits, digits)
  return fmt:format(stats.median, stats.std)
end

-- "1.234 [1.200, 1.300]": a figure's median [min, p90], digits (default 3)
-- decimals each.
function M.format_spread(figure, digits)
  local number = "%." .. (digits or 3) .. "f"
  return (number .. " [" .. number .. ", " .. number .. "]"):format(figure.median, figure.min, figure.p90)
end

-- --- NVBench-shaped benchmarks (cuda.bench.harness) ---------------------------------

-- bench.register(fn) -> a benchmark (cuda.bench.harness): axes, settings,
-- and fn(state) measured by state:exec; `cudalua bench FILE.lua` runs them.
function M.register(fn)
  return require("cuda.bench.harness").register(fn)
end

-- The benchmarks registered so far, in order.
function M.registered()
  return require("cuda.bench.harness").registry
end

-- NVBench's run_all_benchmarks(argv): parses cudalua bench's options from
-- argv (the script's `arg`) and runs every registered benchmark. Under
-- `cudalua bench FILE.lua` it does nothing: the command runs them once the
-- file is loaded. A second call raises, as NVBench's.
function M.run_all_benchmarks(argv)
  local harness = require "cuda.bench.harness"
  if argv ~= nil and type(argv) ~= "table" then
    error(("bad argument #1 to 'run_all_benchmarks' (a list of arguments expected, got %s)"):format(type(argv)), 2)
  end
  if harness.loading then return end
  if harness.finalized then error("bench.run_all_benchmarks: the benchmarks were already executed", 2) end
  if #harness.registry == 0 then error("bench.run_all_benchmarks: no benchmark was registered (bench.register(fn))", 2) end
  harness.finalized = true
  local script = (argv and argv[0] or "bench"):match("[^/]*$")
  require("cuda.bench.cli").main(table.move(argv or {}, 1, #(argv or {}), 1, {}), script, nil, harness.registry)
end

-- Python's decorator form (@bench.axis.int64(...), @bench.option.timeout(...))
-- has no Lua syntax: each name says which chained setter does the same.
local function decorator_table(kind, setters)
  return setmetatable({}, {__index = function(_, name)
    local setter = setters[name] or (type(name) == "string" and (name:match("^set_") and name or "set_" .. name))
    if not require("cuda.bench.harness").Benchmark[setter] then
      error(("bench.%s.%s: no such NVBench %s"):format(kind, tostring(name), kind), 2)
    end
    error(("bench.%s.%s: Python's decorator form has no Lua syntax; chain the setter on what bench.register "
      .. "returns: bench.register(fn):%s(...)"):format(kind, tostring(name), setter), 2)
  end})
end
M.axis = decorator_table("axis", {int64 = "add_int64_axis", int64_power_of_two = "add_int64_power_of_two_axis",
  power_of_two = "add_int64_power_of_two_axis", float64 = "add_float64_axis", string = "add_string_axis",
  add_int64_axis = "add_int64_axis", add_int64_power_of_two_axis = "add_int64_power_of_two_axis",
  add_float64_axis = "add_float64_axis", add_string_axis = "add_string_axis"})
M.option = decorator_table("option", {name = "set_name", is_cpu_only = "set_is_cpu_only", run_once = "set_run_once"})

return M
