-- cuda.bench: repeated timing with summary statistics.
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

-- Runs fn(stream) opts.warmup times (default 3), then opts.runs times
-- (default 10) between two events, waiting for each run to finish; returns
-- bench.stats of the elapsed milliseconds. Events are created (or passed in
-- as opts.events) before the loop, so the timed region allocates none.
function M.time(stream, fn, opts)
  opts = opts or {}
  local warmup = count_option(opts, "warmup", 3, 0)
  local runs = count_option(opts, "runs", 10, 1)
  local start, stop, owned_events <close> = timing_events(stream, opts.events)
  for _ = 1, warmup do fn(stream) end
  stream:sync()
  local samples = {}
  for run = 1, runs do
    stream:record(start)
    fn(stream)
    stream:record(stop)
    stop:sync()
    samples[run] = stop - start
  end
  return M.stats(samples)
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

-- "<key> <number> ...": the key and the numbers named by columns, or nil
-- if the line has another number of words or a word that is not a number.
local function parse_figure(line, columns)
  local words = {}
  for word in line:gmatch("%S+") do words[#words + 1] = word end
  if #words ~= #columns + 1 then return nil end
  local figure = {}
  for i, column in ipairs(columns) do
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
-- any other line.
function M.reference(path, arguments, columns)
  local words = {shell_quote(path)}
  for _, a in ipairs(arguments) do words[#words + 1] = shell_quote(a) end
  local pipe, why = io.popen(table.concat(words, " "), "r")
  if not pipe then return nil, ("cannot run %s: %s"):format(path, why) end
  local figures, header, stray = {}, {}, nil
  for line in pipe:lines() do
    if line:sub(1, 1) == "#" then
      header[#header + 1] = line
    else
      local key, figure = parse_figure(line, columns)
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

return M
