-- cuda.bandwidth: a transfer-size sweep of copies, the fit that explains
-- it, and what the fit predicts for the overlap pipeline.
--
-- A copy of b bytes takes about fixed + b / rate: a cost per copy (the
-- engine's setup, a few microseconds) and the link's rate. Small copies
-- show the first, large ones the second, and only a sweep over sizes
-- separates them (as NVIDIA's bandwidthTest --mode=shmoo and nvbandwidth
-- do). The overlap pipeline splits its array into N chunks, so it pays the
-- fixed cost N times a direction; best_chunks says which N balances that
-- against the fill and drain of a pipeline of few, large chunks.
--
-- Recording apart from fitting and drawing, as in cuda.timeline: sweep()
-- measures on the GPU and returns plain tables; fit, pipeline_ms,
-- best_chunks and the formatting work on plain tables and need no GPU.
--
-- How a copy is timed (time): the destination is poisoned, then a device
-- memset of HEAD_START_BYTES keeps the stream busy while the host issues
-- the start event, the copy and the stop event. So the start event fires
-- with the copy already queued behind it, and the time is the GPU's alone:
-- without the head start the start event fires on an idle stream and the
-- host's few microseconds of issuing the copy are timed too -- nothing at
-- 1 ms, 13% of a 34 us device-to-device copy. bench/bandwidth_ref times
-- its copies the same way.
local cuda = require "cuda"
local bench = require "cuda.bench"

local M = {}

M.PATHS = {"h2d", "d2h", "both", "d2d"}
M.RESOURCES = {"pinned", "pinned_pool", "pageable", "managed"}
M.ENGINES = {"copy", "sm"}
M.HEAD_START_BYTES = 256 << 20   -- ~60 us of memset on an H200: longer than issuing any path's copies
M.POISON = 0xA5
M.BLOCK = 256                    -- threads a block of the SM copy
M.MAX_CHUNKS = 64                -- the most chunks an overlap schedule may have

-- --- sizes and lists ----------------------------------------------------------------

-- 4 KiB, 8 KiB, ..., 256 MiB.
function M.default_sizes()
  local sizes = {}
  for shift = 12, 28 do sizes[#sizes + 1] = 1 << shift end
  return sizes
end

local SUFFIX = {[""] = 1, K = 1 << 10, M = 1 << 20, G = 1 << 30}

-- "4096", "4K", "64M", "1G" (binary multiples) -> bytes, a positive
-- multiple of 4 (copies are checked as uint32); or nil and why.
function M.parse_size(text)
  local digits, suffix = tostring(text):upper():match("^%s*(%d+)%s*([KMG]?)I?B?%s*$")
  local n = digits and math.tointeger(tonumber(digits))
  if not n then return nil, ("'%s' is not a size (4096, 4K, 64M, 1G)"):format(tostring(text)) end
  n = n * SUFFIX[suffix]
  if n < 4 or n % 4 ~= 0 then return nil, ("'%s' is not a positive multiple of 4 bytes"):format(text) end
  return n
end

-- A comma-separated list, each item converted by convert(item); or nil and why.
local function comma_list(text, convert)
  local list = {}
  for item in (tostring(text) .. ","):gmatch("(.-),") do
    local value, why = convert(item:match("^%s*(.-)%s*$"))
    if value == nil then return nil, why end
    list[#list + 1] = value
  end
  return list
end

-- "4K,1M,64M" -> {4096, 1048576, 67108864}; or nil and why.
function M.parse_sizes(text)
  return comma_list(text, M.parse_size)
end

-- A converter of comma-separated words, each one of choices.
function M.word_list(choices)
  local allowed = {}
  for _, c in ipairs(choices) do allowed[c] = true end
  return function(text)
    return comma_list(text, function(word)
      if allowed[word] then return word end
      return nil, ("'%s' is not one of: %s"):format(word, table.concat(choices, ", "))
    end)
  end
end

-- The series a sweep measures: every path, resource and engine asked for.
-- Device to device involves no host memory, so it is measured once an
-- engine (resource "device"); the SM engine cannot reach pageable memory.
function M.series_list(paths, resources, engines)
  local list = {}
  for _, engine in ipairs(engines) do
    for _, path in ipairs(paths) do
      for _, resource in ipairs(path == "d2d" and {"device"} or resources) do
        if not (engine == "sm" and resource == "pageable") then
          list[#list + 1] = {path = path, resource = resource, engine = engine}
        end
      end
    end
  end
  return list
end

function M.series_name(s)
  return ("%s %s %s"):format(s.path, s.resource, s.engine)
end

-- --- the fit ---------------------------------------------------------------------------

-- Least squares of time = fixed + bytes / rate over points {bytes =, ms =},
-- each residual relative to its time (weight 1/t^2): the times span five
-- decades, and unweighted the large copies' noise would swamp the fixed
-- cost. Returns {fixed_us, gbps, r2, n} (r2 weighted the same way), or nil
-- and why with fewer than two sizes.
function M.fit(points)
  if #points < 2 then return nil, "the fit needs at least two sizes" end
  local sw, sx, sy = 0, 0, 0
  for _, p in ipairs(points) do
    local w = 1 / (p.ms * p.ms)
    sw, sx, sy = sw + w, sx + w * p.bytes, sy + w * p.ms
  end
  local mx, my = sx / sw, sy / sw
  local sxx, sxy, syy = 0, 0, 0
  for _, p in ipairs(points) do
    local w, dx, dy = 1 / (p.ms * p.ms), p.bytes - mx, p.ms - my
    sxx, sxy, syy = sxx + w * dx * dx, sxy + w * dx * dy, syy + w * dy * dy
  end
  if sxx == 0 then return nil, "the fit needs at least two sizes" end
  local slope = sxy / sxx                     -- ms per byte
  local fixed = my - slope * mx
  local residual = 0
  for _, p in ipairs(points) do
    local r = p.ms - fixed - slope * p.bytes
    residual = residual + r * r / (p.ms * p.ms)
  end
  return {fixed_us = fixed * 1e3, gbps = 1 / (slope * 1e6), r2 = syy > 0 and 1 - residual / syy or 1,
          n = #points}
end

-- Milliseconds a copy of bytes takes by a fit.
function M.copy_ms(fit, bytes)
  return fit.fixed_us / 1e3 + bytes / (fit.gbps * 1e6)
end

-- --- the overlap prediction ---------------------------------------------------------
--
-- The pipeline ("engines" schedule) moves B bytes each way through N
-- chunks: chunk i is copied in, computed, copied out, each stage on its own
-- engine. With equal chunks each stage takes the same time for every
-- chunk, and a three-stage pipeline of N equal jobs takes
--     T(N) = h + k + d + (N - 1) * max(c, k)
-- where, from the fits (f fixed cost, r rate) and the kernel's time K:
--     h = f_h2d + B/N / r_h2d     the first copy in, alone (the fill)
--     d = f_d2h + B/N / r_d2h     the last copy out, alone (the drain)
--     k = K / N                   one chunk's kernel
--     c = f_both + B/N / r_both   a copy in and a copy out at once, the
--                                 steady state (both engines busy; the
--                                 "both" fit prices the pair)
-- More chunks shorten the fill and drain (B/N) but add a fixed cost per
-- chunk. While the copies are the bottleneck (c >= k):
--     T(N) = N f_both + (B/r_h2d + B/r_d2h + K - B/r_both) / N + const
-- which is least at N* = sqrt((B/r_h2d + B/r_d2h + K - B/r_both) / f_both).
-- best_chunks minimises T over the integers 1..max_chunks exactly (the
-- stage times are piecewise, so the closed form is a guide, reported too).

-- costs: {bytes = B, kernel_ms = K, h2d = fit, d2h = fit, both = fit}.
function M.pipeline_ms(costs, n)
  local chunk = costs.bytes / n
  local h, d = M.copy_ms(costs.h2d, chunk), M.copy_ms(costs.d2h, chunk)
  local c, k = M.copy_ms(costs.both, chunk), costs.kernel_ms / n
  return h + k + d + (n - 1) * math.max(c, k)
end

-- The closed form N* of the copy-bound regime (a real number), or nil
-- when the fixed cost is not positive.
function M.continuous_chunks(costs)
  local f = costs.both.fixed_us / 1e3
  local ms_per_byte = function(fit) return 1 / (fit.gbps * 1e6) end
  local numerator = costs.bytes * (ms_per_byte(costs.h2d) + ms_per_byte(costs.d2h) - ms_per_byte(costs.both))
                    + costs.kernel_ms
  if f <= 0 or numerator <= 0 then return nil end
  return math.sqrt(numerator / f)
end

-- {chunks, ms, continuous}: the chunk count 1..max_chunks (default
-- M.MAX_CHUNKS) of least pipeline_ms (the fewest on a tie), its time, and
-- the closed form.
function M.best_chunks(costs, max_chunks)
  local best, best_ms
  for n = 1, max_chunks or M.MAX_CHUNKS do
    local ms = M.pipeline_ms(costs, n)
    if not best_ms or ms < best_ms then best, best_ms = n, ms end
  end
  return {chunks = best, ms = best_ms, continuous = M.continuous_chunks(costs)}
end

-- --- formatting ---------------------------------------------------------------------

-- The sweep as a table: one row a size, one column a series, GB/s at the
-- median ('!' after a figure whose copies failed their check).
function M.format_table(sweep)
  local lines, header = {}, {("%10s"):format("bytes")}
  for _, s in ipairs(sweep.series) do header[#header + 1] = ("%21s"):format(M.series_name(s)) end
  lines[1] = table.concat(header, " ")
  for i, bytes in ipairs(sweep.sizes) do
    local row = {("%10d"):format(bytes)}
    for _, s in ipairs(sweep.series) do
      local p = s.points[i]
      row[#row + 1] = p and ("%20.2f%s"):format(p.gbps, p.verified and " " or "!") or ("%21s"):format("-")
    end
    lines[#lines + 1] = table.concat(row, " ")
  end
  return table.concat(lines, "\n")
end

-- One line a fitted series: fixed cost, rate, R^2.
function M.format_fits(sweep)
  local lines = {("%-24s %12s %12s %8s"):format("series", "fixed (us)", "rate (GB/s)", "R^2")}
  for _, s in ipairs(sweep.series) do
    local f = s.fit
    lines[#lines + 1] = f and ("%-24s %12.2f %12.1f %8.5f"):format(M.series_name(s), f.fixed_us, f.gbps, f.r2)
                        or ("%-24s %s"):format(M.series_name(s), s.fit_error or "no fit")
  end
  return table.concat(lines, "\n")
end

-- Fits every series of a sweep in place (s.fit, or s.fit_error); returns it.
function M.fit_all(sweep)
  for _, s in ipairs(sweep.series) do
    local points = {}
    for _, p in ipairs(s.points) do points[#points + 1] = {bytes = p.bytes, ms = p.ms} end
    s.fit, s.fit_error = M.fit(points)
  end
  return sweep
end

-- The series of sweep with path, resource and engine, or nil.
function M.find(sweep, path, resource, engine)
  for _, s in ipairs(sweep.series) do
    if s.path == path and s.resource == resource and s.engine == engine then return s end
  end
end

-- --- recording (needs a GPU) -------------------------------------------------------

local function host_resource(name)
  if name == "pinned" then return cuda.PinnedMemoryResource() end
  if name == "pinned_pool" then return cuda.PinnedMemoryResource{pool = true} end
  if name == "pageable" then return cuda.HostMemoryResource() end
  if name == "managed" then return cuda.ManagedMemoryResource() end
end

-- Times issue(stream) opts.runs times (default 10) after opts.warmup
-- (default 3) untimed runs, each run preceded, untimed but stream-ordered,
-- by opts.prepare(stream) and a memset of opts.head_start (a device
-- buffer, when given: see the top of this file); opts.check() runs after
-- each timed run. Returns bench.stats of the milliseconds.
function M.time(stream, issue, opts)
  local start, stop = opts.events[1], opts.events[2]
  local samples, runs, warmup = {}, opts.runs or 10, opts.warmup or 3
  for run = 1, warmup + runs do
    if opts.prepare then opts.prepare(stream) end
    if opts.head_start then opts.head_start:fill(0, stream) end
    stream:record(start)
    issue(stream)
    stream:record(stop)
    stop:sync()
    if run > warmup then
      samples[#samples + 1] = stop - start
      if opts.check then opts.check() end
    end
  end
  return bench.stats(samples)
end

-- The engines: move(src, dst, stream) for a copy of bytes.
local ENGINE = {
  copy = function() return function(src, dst, s) dst:copy_from(src, s) end end,
  sm = function(ctx, bytes)
    local vectors = math.max(1, bytes // 16)
    local grid = math.min((vectors + M.BLOCK - 1) // M.BLOCK, ctx.max_blocks)
    local config, count = cuda.LaunchConfig{grid = grid, block = M.BLOCK}, cuda.u64(bytes)
    return function(src, dst, s) cuda.launch(s, config, ctx.copy_kernel, src, dst, count) end
  end,
}

-- The copies of a path: {src, dst} buffers of the largest size ("both":
-- one copy each way, the second on its own stream).
local function path_legs(ctx, series, top)
  local dev, s = ctx.dev.memory_resource, ctx.streams[1]
  local host = series.resource ~= "device" and host_resource(series.resource)
  local function leg(from, to) return {src = from:allocate(top, s), dst = to:allocate(top, s)} end
  local legs = {
    h2d = function() return {leg(host, dev)} end,
    d2h = function() return {leg(dev, host)} end,
    both = function() return {leg(host, dev), leg(dev, host)} end,
    d2d = function() return {leg(dev, dev)} end,
  }
  local list = legs[series.path]()
  for i, l in ipairs(list) do l.stream = ctx.streams[i] end
  return list
end

-- Every leg's destination equals the expected bytes (device memory read
-- back into ctx.check first).
local function legs_correct(ctx, legs, bytes)
  local want = ctx.expect:slice(0, bytes):view("uint32")
  local ok = true
  for _, l in ipairs(legs) do
    local got = l.dst:slice(0, bytes)
    if not got.is_host_accessible then
      local check = ctx.check:slice(0, bytes)
      check:fill(0, ctx.streams[1])
      check:copy_from(got, ctx.streams[1])
      got = check
    end
    ctx.streams[1]:sync()
    ok = ok and got:view("uint32"):allclose(want, 0, 0)
  end
  return ok
end

-- Issues the legs of one size: the first on the main stream, the others
-- forked from the start event and joined back before the stop event.
local function issuer(ctx, legs, move, bytes)
  local slices = {}
  for i, l in ipairs(legs) do slices[i] = {l.src:slice(0, bytes), l.dst:slice(0, bytes), l.stream} end
  return function(main)
    for i, sl in ipairs(slices) do
      if i > 1 then sl[3]:wait(ctx.start) end
      move(sl[1], sl[2], sl[3])
      if i > 1 then sl[3]:record(ctx.joins[i]); main:wait(ctx.joins[i]) end
    end
  end
end

-- One size of a series: fresh random data into every source, then timed
-- copies, each into a poisoned destination and checked afterwards.
local function measure_size(ctx, series, legs, bytes, seed)
  local main = ctx.streams[1]
  ctx.expect:slice(0, bytes):view("uint32"):random(0, 2^32, seed)
  for _, l in ipairs(legs) do l.src:slice(0, bytes):copy_from(ctx.expect:slice(0, bytes), main) end
  main:sync()
  local verified = true
  local stats = M.time(main, issuer(ctx, legs, ENGINE[series.engine](ctx, bytes), bytes), {
    runs = ctx.runs, warmup = ctx.warmup, events = {ctx.start, ctx.stop}, head_start = ctx.head_start,
    prepare = function(s) for _, l in ipairs(legs) do l.dst:slice(0, bytes):fill(M.POISON, s) end end,
    check = function() verified = legs_correct(ctx, legs, bytes) and verified end,
  })
  return {bytes = bytes, ms = stats.median, min_ms = stats.min, max_ms = stats.max, samples_ms = stats.raw,
          gbps = bytes / stats.median / 1e6, verified = verified}
end

local function close_legs(ctx, legs)
  for _, l in ipairs(legs) do
    l.src:close(ctx.streams[1])
    l.dst:close(ctx.streams[1])
  end
  ctx.streams[1]:sync()
end

-- Why the series cannot run on this machine, or nil.
local function unsupported(legs, engine)
  if engine ~= "sm" then return nil end
  for _, l in ipairs(legs) do
    for _, b in ipairs{l.src, l.dst} do
      if not b.memory_resource.is_device_accessible then return "the SMs cannot reach this memory" end
    end
  end
end

local function measure_series(ctx, series, sizes, top)
  local legs = path_legs(ctx, series, top)
  series.points, series.skipped = {}, unsupported(legs, series.engine)
  if not series.skipped then
    for i, bytes in ipairs(sizes) do
      series.points[i] = measure_size(ctx, series, legs, bytes, ctx.seed + i)
      if ctx.progress then ctx.progress:step(1) end
    end
  end
  close_legs(ctx, legs)
  return series
end

local function open_context(dev, opts, top)
  local main = dev:create_stream()
  local pinned = cuda.PinnedMemoryResource()
  local ctx = {
    dev = dev, runs = opts.runs, warmup = opts.warmup, progress = opts.progress,
    seed = opts.seed or (os.time() ~ math.floor(cuda.clock() * 1e6)) % 2^31,
    streams = {main, dev:create_stream()}, expect = pinned:allocate(top), check = pinned:allocate(top),
    start = dev:create_event{timing = true}, stop = dev:create_event{timing = true},
    joins = {nil, dev:create_event()},
    head_start = opts.head_start ~= false and dev.memory_resource:allocate(M.HEAD_START_BYTES, main) or nil,
    max_blocks = dev.properties.multiprocessor_count * 8,
  }
  if opts.kernel then ctx.copy_kernel = opts.kernel end
  return ctx
end

-- Measures every series (opts.paths, opts.resources, opts.engines:
-- default all) at every size of opts.sizes (default default_sizes()),
-- opts.runs timed copies (default 10) after opts.warmup (3), on device dev.
-- opts.kernel: the compiled copy_bytes kernel (loaded from copy.cu when an
-- "sm" series needs it); opts.progress: a cli.progress to step a size.
-- Returns {sizes, series = {{path, resource, engine, points = {{bytes, ms,
-- min_ms, max_ms, gbps, verified}}, skipped}}, failures}, each series fitted.
function M.sweep(dev, opts)
  opts = opts or {}
  local sizes = opts.sizes or M.default_sizes()
  local list = M.series_list(opts.paths or M.PATHS, opts.resources or M.RESOURCES, opts.engines or M.ENGINES)
  local top = math.max(table.unpack(sizes))
  local ctx = open_context(dev, opts, top)
  for _, s in ipairs(list) do
    if s.engine == "sm" and not ctx.copy_kernel then
      ctx.copy_kernel = require("cuda.kernels").load(dev, "copy.cu", "copy_bytes")
    end
    measure_series(ctx, s, sizes, top)
  end
  local failures = 0
  for _, s in ipairs(list) do
    for _, p in ipairs(s.points) do if not p.verified then failures = failures + 1 end end
  end
  if ctx.head_start then ctx.head_start:close(ctx.streams[1]) end
  ctx.streams[1]:sync()
  return M.fit_all({sizes = sizes, series = list, failures = failures, seed = ctx.seed})
end

return M
