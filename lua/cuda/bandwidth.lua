-- cuda.bandwidth: a transfer-size sweep of copies, the fit that explains
-- SPDX-License-Identifier: MIT
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
--
-- The peer matrix (peer_matrix) times copies between the GPUs of one host
-- at one size: GPU x GPU, read and write, one way and both ways at once,
-- through the copy engines and through the SM copy kernel over peer
-- mappings. A copy engine moves data between any two devices (through
-- the host where peer access is missing); an SM kernel needs peer access,
-- granted on each device's own pool. On one GPU the matrix is 1x1: a
-- device-to-device copy on that GPU. NVLink multicast is never used.
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
-- and why with fewer than two sizes or times that do not grow with the size.
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
  -- Small copies bound by their fixed cost can take equal times (or the larger
  -- less): no rate to fit, where 1/slope would be infinite or negative.
  if not (slope > 0) then return nil, "the times do not grow with the size: no rate to fit" end
  local fixed = my - slope * mx
  local residual = 0
  for _, p in ipairs(points) do
    local r = p.ms - fixed - slope * p.bytes
    residual = residual + r * r / (p.ms * p.ms)
  end
  return {fixed_us = fixed * 1e3, gbps = 1 / (slope * 1e6), r2 = syy > 0 and 1 - residual / syy or 1,
          n = #points}
end

-- Milliseconds a copy of bytes takes by a fit (its fixed cost replaced by
-- fixed_us where given).
function M.copy_ms(fit, bytes, fixed_us)
  return (fixed_us or fit.fixed_us) / 1e3 + bytes / (fit.gbps * 1e6)
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
--     c = g + B/N / r_both        a copy in and a copy out at once, the
--                                 steady state (both engines busy; the
--                                 "both" fit prices the pair)
-- g is what a copy costs queued behind another on its engine: its latency
-- hides behind the copy before it, so only the gap between the two is paid
-- (cuda.overlap's limits measure it as copy_cost_us: the copy in as 32
-- copies against one). An isolated copy's fixed cost is mostly latency:
-- taking g = f_both over-prices every chunk (on the H200, 13.6 us against
-- 2.5: it predicted 10 chunks where the search found 18 to 22). Without a
-- measured g, f_both stands in.
-- More chunks shorten the fill and drain (B/N) but add g per chunk. While
-- the copies are the bottleneck (c >= k):
--     T(N) = N g + (B/r_h2d + B/r_d2h + K - B/r_both) / N + const
-- which is least at N* = sqrt((B/r_h2d + B/r_d2h + K - B/r_both) / g).
-- best_chunks minimises T over the integers 1..max_chunks exactly (the
-- stage times are piecewise, so the closed form is a guide, reported too).

-- g, the steady state's cost per chunk on top of its bytes, in microseconds:
-- a positive queued_us (a measured difference, which noise can make <= 0),
-- else the fit's fixed cost.
function M.chunk_cost_us(costs)
  local queued = costs.queued_us
  return queued and queued > 0 and queued or costs.both.fixed_us
end

-- costs: {bytes = B, kernel_ms = K, h2d = fit, d2h = fit, both = fit,
-- queued_us = g (optional)}.
function M.pipeline_ms(costs, n)
  local chunk = costs.bytes / n
  local h, d = M.copy_ms(costs.h2d, chunk), M.copy_ms(costs.d2h, chunk)
  local c, k = M.copy_ms(costs.both, chunk, M.chunk_cost_us(costs)), costs.kernel_ms / n
  return h + k + d + (n - 1) * math.max(c, k)
end

-- The closed form N* of the copy-bound regime (a real number), or nil
-- when the cost per chunk is not positive.
function M.continuous_chunks(costs)
  local g = M.chunk_cost_us(costs) / 1e3
  local ms_per_byte = function(fit) return 1 / (fit.gbps * 1e6) end
  local numerator = costs.bytes * (ms_per_byte(costs.h2d) + ms_per_byte(costs.d2h) - ms_per_byte(costs.both))
                    + costs.kernel_ms
  if g <= 0 or numerator <= 0 then return nil end
  return math.sqrt(numerator / g)
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

-- A point's GB/s in width characters, '!' after it when its copies failed
-- their check; a dash without a point.
local function figure(p, width, decimals)
  if not p or not p.gbps then return ("%" .. width .. "s"):format(p and p.skipped and "n/a" or "-") end
  return ("%" .. (width - 1) .. "." .. decimals .. "f%s"):format(p.gbps, p.verified and " " or "!")
end

-- Each timed copy's rate in GB/s.
function M.rates(p)
  local rates = {}
  for i, ms in ipairs(p.samples_ms or {}) do rates[i] = p.bytes / ms / 1e6 end
  return rates
end

-- The sweep as a table: one row a size, one column a series, GB/s at the
-- median ('!' after a figure whose copies failed their check).
function M.format_table(sweep)
  local lines, header = {}, {("%10s"):format("bytes")}
  for _, s in ipairs(sweep.series) do header[#header + 1] = ("%21s"):format(M.series_name(s)) end
  lines[1] = table.concat(header, " ")
  for i, bytes in ipairs(sweep.sizes) do
    local row = {("%10d"):format(bytes)}
    for _, s in ipairs(sweep.series) do
      row[#row + 1] = figure(s.points[i], 21, 2)
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

-- --- the peer matrix: plain values ------------------------------------------------

M.MATRIX_BYTES = 64 << 20
M.DIRECTIONS = {"read", "write"}
M.HOST_PATHS = {"h2d", "d2h", "both"}

-- "0,1,3" -> {0, 1, 3}: device ids, each once; or nil and why.
function M.parse_devices(text)
  local seen = {}
  return comma_list(text, function(item)
    local id = item:match("^%d+$") and math.tointeger(tonumber(item))
    if not id then return nil, ("'%s' is not a device id (0, 1, ...)"):format(item) end
    if seen[id] then return nil, ("device %d is listed twice"):format(id) end
    seen[id] = true
    return id
  end)
end

-- The matrices a peer run measures, for each engine: read and write, one
-- way and both ways at once. {engine, direction, bidirectional, name} each.
function M.matrix_modes(engines)
  local modes = {}
  for _, engine in ipairs(engines) do
    for _, bidirectional in ipairs{false, true} do
      for _, direction in ipairs(M.DIRECTIONS) do
        modes[#modes + 1] = {engine = engine, direction = direction, bidirectional = bidirectional,
                             name = ("%s %s%s"):format(engine, direction, bidirectional and " both ways" or "")}
      end
    end
  end
  return modes
end

-- The copies of the cell at row r, column c (matrix positions): the GPU of
-- row r runs the copy and column c is its peer. Read: r pulls from c
-- (c -> r); write: r pushes to c (r -> c). Both ways: c runs the opposite
-- copy at the same time. Each copy is {from, to, runner}; the diagonal
-- copies within one GPU.
function M.cell_copies(mode, r, c)
  local from, to = c, r
  if mode.direction == "write" then from, to = r, c end
  local list = {{from = from, to = to, runner = r}}
  if mode.bidirectional then list[2] = {from = to, to = from, runner = c} end
  return list
end

-- An empty matrix: devices ({id, name} each), modes, the bytes a copy;
-- cells[mode name][row][column] and host[row][path] take the points.
function M.new_matrix(devices, modes, bytes)
  local matrix = {devices = devices, modes = modes, bytes = bytes, cells = {}, host = {}}
  for _, mode in ipairs(modes) do
    local rows = {}
    for r = 1, #devices do rows[r] = {} end
    matrix.cells[mode.name] = rows
  end
  for r = 1, #devices do matrix.host[r] = {} end
  return matrix
end

-- Every point of a matrix with its result name, in order: {name, point}.
function M.matrix_points(matrix)
  local list, devices = {}, matrix.devices
  for _, mode in ipairs(matrix.modes) do
    for r, row in ipairs(devices) do
      for c, col in ipairs(devices) do
        local p = matrix.cells[mode.name][r][c]
        if p and p.gbps then list[#list + 1] = {("%s GPU %d peer GPU %d"):format(mode.name, row.id, col.id), p} end
      end
    end
  end
  for r, row in ipairs(devices) do
    for _, path in ipairs(M.HOST_PATHS) do
      local p = matrix.host[r][path]
      if p then list[#list + 1] = {("%s pinned GPU %d"):format(path, row.id), p} end
    end
  end
  return list
end

-- The copies of a matrix whose check failed.
function M.matrix_failures(matrix)
  local failures = 0
  for _, item in ipairs(M.matrix_points(matrix)) do
    if item[2].gbps and not item[2].verified then failures = failures + 1 end
  end
  return failures
end

-- A table of GB/s: a row per label of rows, a column per label of columns,
-- cell(r, c) the point there.
local function grid(rows, columns, cell)
  local header = {("%-8s"):format("")}
  for _, label in ipairs(columns) do header[#header + 1] = ("%11s"):format(label) end
  local lines = {table.concat(header)}
  for r, label in ipairs(rows) do
    local line = {("%-8s"):format(label)}
    for c = 1, #columns do line[#line + 1] = " " .. figure(cell(r, c), 10, 1) end
    lines[#lines + 1] = table.concat(line)
  end
  return table.concat(lines, "\n")
end

local function gpu_labels(matrix)
  local labels = {}
  for i, d in ipairs(matrix.devices) do labels[i] = "GPU " .. d.id end
  return labels
end

-- One mode of a matrix: a row per GPU that runs the copies, a column per
-- peer, GB/s each direction ('!' a failed check, n/a not possible).
function M.format_matrix(matrix, mode)
  local cells = matrix.cells[mode.name]
  return grid(gpu_labels(matrix), gpu_labels(matrix), function(r, c) return cells[r][c] end)
end

-- Each GPU's copies with pinned host memory: H2D, D2H, both at once.
function M.format_host(matrix)
  return grid(gpu_labels(matrix), M.HOST_PATHS, function(r, c) return matrix.host[r][M.HOST_PATHS[c]] end)
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
  -- kernel: the copy kernel of the stream's device (a module is per device).
  sm = function(ctx, bytes)
    local vectors = math.max(1, bytes // 16)
    local grid = math.min((vectors + M.BLOCK - 1) // M.BLOCK, ctx.max_blocks)
    local config, count = cuda.LaunchConfig{grid = grid, block = M.BLOCK}, cuda.u64(bytes)
    return function(src, dst, s, kernel) cuda.launch(s, config, kernel, src, dst, count) end
  end,
}

-- A leg is one copy of a measurement: src and dst buffers of the largest
-- size, the stream that issues it (the first leg's is the timed stream),
-- the event that joins it back, the copy kernel of that stream's device,
-- and streams of src's and dst's devices (src_home, dst_home) that fill
-- and read back their buffers: a stream of a third device cannot.

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
  for i, l in ipairs(list) do
    l.stream, l.join, l.kernel, l.src_home, l.dst_home = ctx.streams[i], ctx.joins[i], ctx.copy_kernel, s, s
  end
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
      check:fill(0, l.dst_home)
      check:copy_from(got, l.dst_home)
      got = check
    end
    l.dst_home:sync()
    ok = ok and got:view("uint32"):allclose(want, 0, 0)
  end
  return ok
end

-- Issues the legs of one size: the first on the main stream, the others
-- forked from the start event and joined back before the stop event.
local function issuer(ctx, legs, move, bytes)
  local slices = {}
  for i, l in ipairs(legs) do slices[i] = {l.src:slice(0, bytes), l.dst:slice(0, bytes), l} end
  return function(main)
    for i, sl in ipairs(slices) do
      local l = sl[3]
      if i > 1 then l.stream:wait(ctx.start) end
      move(sl[1], sl[2], l.stream, l.kernel)
      if i > 1 then l.stream:record(l.join); main:wait(l.join) end
    end
  end
end

-- One size of a series: fresh random data into every source, then timed
-- copies, each into a poisoned destination and checked afterwards.
local function measure_size(ctx, series, legs, bytes, seed)
  local main = ctx.streams[1]
  ctx.expect:slice(0, bytes):view("uint32"):random(0, 2^32, seed)
  for _, l in ipairs(legs) do
    l.src:slice(0, bytes):copy_from(ctx.expect:slice(0, bytes), l.src_home)
    l.src_home:sync()
  end
  local verified = true
  local stats = M.time(main, issuer(ctx, legs, ENGINE[series.engine](ctx, bytes), bytes), {
    runs = ctx.runs, warmup = ctx.warmup, events = {ctx.start, ctx.stop}, head_start = ctx.head_start,
    -- Destinations poisoned by their own device, ahead of the timed stream.
    prepare = function(s)
      for _, l in ipairs(legs) do
        l.dst:slice(0, bytes):fill(M.POISON, l.dst_home)
        if l.dst_home ~= s then s:wait(l.dst_home) end
      end
    end,
    check = function() verified = legs_correct(ctx, legs, bytes) and verified end,
  })
  local f = bench.figure(stats.raw)
  return {bytes = bytes, ms = stats.median, min_ms = stats.min, max_ms = stats.max, samples_ms = stats.raw,
          ci_lo_ms = f.ci_lo, ci_hi_ms = f.ci_hi, gbps = bytes / stats.median / 1e6, verified = verified}
end

local function close_legs(legs)
  for _, l in ipairs(legs) do
    l.src:close(l.src_home)
    l.dst:close(l.dst_home)
    l.src_home:sync()
    l.dst_home:sync()
  end
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
  close_legs(legs)
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

-- --- the cost per operation -------------------------------------------------------
--
-- What one more copy costs the copy engines, on top of its bytes: the same
-- bytes (M.OP_COST_BYTES each way) issued as N copies, N = 1, 2, 4, ...,
-- 64, all between the two events, one way (h2d, d2h: one stream) and both
-- ways at once (both: the copies in on the main stream and the copies out
-- on the second, chunk by chunk). The time grows by the slope for each
-- copy; the slope of the least-squares line through (N, time) is the cost
-- of one operation (both: of a pair, one copy each way). The pipeline
-- model's steady state pays exactly that per chunk (queued_us).
-- bench/bandwidth_ref --op-cost issues the same copies, and the same bytes
-- as one cuMemcpyBatchAsync a direction: the cost per batched segment.

M.OP_COUNTS = {1, 2, 4, 8, 16, 32, 64}
M.OP_MODES = {"h2d", "d2h", "both"}
M.OP_COST_BYTES = 64 << 20

-- Least squares of y = intercept + slope * x over points {x =, y =}:
-- {slope, intercept, se (the slope's standard error; 0 with two points),
-- n}, or nil and why without two distinct x.
function M.slope(points)
  local n, sx, sy = #points, 0, 0
  if n < 2 then return nil, "a slope needs at least two points" end
  for _, p in ipairs(points) do sx, sy = sx + p.x, sy + p.y end
  local mx, my = sx / n, sy / n
  local sxx, sxy = 0, 0
  for _, p in ipairs(points) do sxx, sxy = sxx + (p.x - mx) ^ 2, sxy + (p.x - mx) * (p.y - my) end
  if sxx == 0 then return nil, "a slope needs two different x" end
  local slope = sxy / sxx
  local intercept = my - slope * mx
  local rss = 0
  for _, p in ipairs(points) do rss = rss + (p.y - intercept - slope * p.x) ^ 2 end
  local se = n > 2 and math.sqrt(rss / (n - 2) / sxx) or 0
  return {slope = slope, intercept = intercept, se = se, n = n}
end

-- The cost per operation of one mode's points ({n =, us =} each): {us, se,
-- intercept_us, points}, or nil and why.
function M.op_cost_fit(points)
  local xy = {}
  for i, p in ipairs(points) do xy[i] = {x = p.n, y = p.us} end
  local line, why = M.slope(xy)
  if not line then return nil, why end
  return {us = line.slope, se = line.se, intercept_us = line.intercept, points = points}
end

-- "h2d 2.51 us (±0.10)" lines: one a mode of costs ({mode = fit}), with
-- other ({mode = fit}, e.g. the raw C reference's) beside each where given.
function M.format_op_costs(costs, other, other_label)
  local lines = {}
  for _, mode in ipairs(M.OP_MODES) do
    local c = costs[mode]
    if c then
      local line = ("%-5s %7.2f us a %s (\u{b1}%.2f)"):format(mode, c.us, mode == "both" and "pair" or "copy", c.se)
      local o = other and other[mode]
      if o then line = line .. ("   %s %7.2f us (\u{b1}%.2f)"):format(other_label, o.us, o.se) end
      lines[#lines + 1] = line
    end
  end
  return table.concat(lines, "\n")
end

-- Measures the cost per operation on device dev: opts.bytes (default
-- M.OP_COST_BYTES, a multiple of 256) each way as each count of opts.counts
-- (default M.OP_COUNTS) copies, opts.runs timed runs (10) after
-- opts.warmup (3), pinned host memory and the device's pool; the last run's
-- destinations checked. Each count is issued twice: as separate copies, and
-- as one cuda.copy_batch a direction (the cost per batched segment).
-- Returns {bytes, failures, [mode] = op_cost_fit, batch = {[mode] = op_cost_fit}}.
function M.op_cost(dev, opts)
  opts = opts or {}
  local total, counts = opts.bytes or M.OP_COST_BYTES, opts.counts or M.OP_COUNTS
  local ctx = open_context(dev, opts, total)
  local main, pinned, pool = ctx.streams[1], cuda.PinnedMemoryResource(), dev.memory_resource
  local function leg(from, to, i)
    return {src = from:allocate(total, main), dst = to:allocate(total, main), stream = ctx.streams[i],
            join = ctx.joins[i], src_home = main, dst_home = main}
  end
  local result = {bytes = total, failures = 0, batch = {}}
  for m, mode in ipairs(M.OP_MODES) do
    local legs = mode == "h2d" and {leg(pinned, pool, 1)} or mode == "d2h" and {leg(pool, pinned, 1)}
                 or {leg(pinned, pool, 1), leg(pool, pinned, 2)}
    ctx.expect:slice(0, total):view("uint32"):random(0, 2^32, ctx.seed + m)
    for _, l in ipairs(legs) do l.src:copy_from(ctx.expect:slice(0, total), main) end
    main:sync()
    local points, batch_points = {}, {}
    for _, n in ipairs(counts) do
      local chunk, pieces, batches = total // n, {}, {}
      for k, l in ipairs(legs) do batches[k] = {} end
      for i = 0, n - 1 do
        for k, l in ipairs(legs) do
          local piece = {l.src:slice(i * chunk, chunk), l.dst:slice(i * chunk, chunk), l.stream}
          pieces[#pieces + 1], batches[k][i + 1] = piece, {piece[2], piece[1]}
        end
      end
      local function measure(issue, into)
        local stats = M.time(main, function()
          if #legs > 1 then legs[2].stream:wait(ctx.start) end
          issue()
          if #legs > 1 then legs[2].stream:record(legs[2].join); main:wait(legs[2].join) end
        end, {runs = opts.runs, warmup = opts.warmup, events = {ctx.start, ctx.stop}, head_start = ctx.head_start,
              prepare = function(s) for _, l in ipairs(legs) do l.dst:fill(M.POISON, s) end end})
        if not legs_correct(ctx, legs, total) then result.failures = result.failures + 1 end
        local f = bench.figure(stats.raw)
        into[#into + 1] = {n = n, us = f.median * 1e3, ci_lo = f.ci_lo * 1e3, ci_hi = f.ci_hi * 1e3}
      end
      measure(function() for _, piece in ipairs(pieces) do piece[2]:copy_from(piece[1], piece[3]) end end, points)
      -- The same copies as one cuda.copy_batch a direction (bench/bandwidth_ref's batch_* keys).
      measure(function() for k, l in ipairs(legs) do cuda.copy_batch(l.stream, batches[k]) end end, batch_points)
      if opts.progress then opts.progress:step(1) end
    end
    result[mode], result.batch[mode] = M.op_cost_fit(points), M.op_cost_fit(batch_points)
    close_legs(legs)
  end
  if ctx.head_start then ctx.head_start:close(main) end
  main:sync()
  return result
end

-- The raw C reference's op-cost figures (bench.reference's, "<prefix>_<mode>_<n>"
-- in microseconds) as fits by mode, or nil when it printed none.
function M.reference_op_costs(figures, prefix)
  local costs, any = {}, false
  for _, mode in ipairs(M.OP_MODES) do
    local points = {}
    for _, n in ipairs(M.OP_COUNTS) do
      local f = figures[("%s_%s_%d"):format(prefix, mode, n)]
      if f then points[#points + 1] = {n = n, us = f.median, ci_lo = f.ci_lo, ci_hi = f.ci_hi} end
    end
    if #points >= 2 then costs[mode], any = M.op_cost_fit(points), true end
  end
  return any and costs or nil
end

-- --- the peer matrix: recording (needs a GPU) ------------------------------------------

-- One device of a peer run: the context a measurement needs, an explicit
-- pool (so peer grants leave the default pool alone) and two slots of
-- buffers, {src, dst} each: a bidirectional cell's two copies use one each.
local function open_node(dev, opts, bytes, engines)
  dev:set_current()
  local node = open_context(dev, opts, bytes)
  node.pool = cuda.DeviceMemoryResource(dev)
  node.slots = {}
  for slot = 1, 2 do
    node.slots[slot] = {src = node.pool:allocate(bytes, node.streams[1]), dst = node.pool:allocate(bytes, node.streams[1])}
  end
  for _, engine in ipairs(engines) do
    if engine == "sm" and not node.copy_kernel then
      node.copy_kernel = require("cuda.kernels").load(dev, "copy.cu", "copy_bytes")
    end
  end
  node.streams[1]:sync()
  return node
end

-- Each pool grants access to every other device whose kernels can use it.
local function grant_peers(nodes)
  for _, owner in ipairs(nodes) do
    local users = {}
    for _, user in ipairs(nodes) do
      if user ~= owner and user.dev:can_access_peer(owner.dev) then users[#users + 1] = user.dev end
    end
    owner.pool.peer_accessible_by = users
  end
end

local function close_node(node)
  local s = node.streams[1]
  for _, slot in ipairs(node.slots) do
    slot.src:close(s)
    slot.dst:close(s)
  end
  if node.head_start then node.head_start:close(s) end
  s:sync()
  node.pool.peer_accessible_by = {}
  node.pool:close()
end

-- The legs of a cell, or nil and why it cannot run: an SM copy needs its
-- GPU to reach both buffers.
local function cell_legs(nodes, mode, r, c)
  local legs = {}
  for i, copy in ipairs(M.cell_copies(mode, r, c)) do
    local from, to, runner = nodes[copy.from], nodes[copy.to], nodes[copy.runner]
    for _, other in ipairs{from, to} do
      if mode.engine == "sm" and not runner.dev:can_access_peer(other.dev) then
        return nil, ("GPU %d has no peer access to GPU %d"):format(runner.dev.id, other.dev.id)
      end
    end
    legs[i] = {src = from.slots[i].src, dst = to.slots[i].dst, stream = runner.streams[i], join = runner.joins[i],
               kernel = runner.copy_kernel, src_home = from.streams[1], dst_home = to.streams[1]}
  end
  return legs
end

-- Each GPU's copies with pinned host memory at the matrix's size: the sweep at one size.
local function host_rates(node, opts, bytes)
  node.dev:set_current()   -- the sweep's pinned resources are the current device's
  local sweep = M.sweep(node.dev, {sizes = {bytes}, paths = M.HOST_PATHS, resources = {"pinned"}, engines = {"copy"},
                                   runs = opts.runs, warmup = opts.warmup, seed = node.seed})
  local row = {}
  for _, s in ipairs(sweep.series) do row[s.path] = s.points[1] end
  return row
end

-- Measures the peer matrix of devices (a list of cuda.Device) at opts.bytes
-- (default M.MATRIX_BYTES) per copy: every mode of opts.engines (default
-- both), opts.runs timed copies after opts.warmup, each into a poisoned
-- destination and checked; then each GPU's host copies at the same size.
-- opts.progress steps once a cell and once a GPU's host copies. Returns
-- the matrix (new_matrix) with its failures counted.
function M.peer_matrix(devices, opts)
  opts = opts or {}
  local bytes, engines = opts.bytes or M.MATRIX_BYTES, opts.engines or M.ENGINES
  local seed = opts.seed or (os.time() ~ math.floor(cuda.clock() * 1e6)) % 2^31
  local node_opts = setmetatable({seed = seed}, {__index = opts})
  local nodes, list = {}, {}
  for i, dev in ipairs(devices) do
    nodes[i], list[i] = open_node(dev, node_opts, bytes, engines), {id = dev.id, name = dev.name}
  end
  grant_peers(nodes)
  local matrix = M.new_matrix(list, M.matrix_modes(engines), bytes)
  for m, mode in ipairs(matrix.modes) do
    for r = 1, #nodes do
      for c = 1, #nodes do
        local legs, why = cell_legs(nodes, mode, r, c)
        matrix.cells[mode.name][r][c] = legs and measure_size(nodes[r], mode, legs, bytes, seed + m * 4096 + r * 64 + c)
                                        or {skipped = why}
        if opts.progress then opts.progress:step(1) end
      end
    end
  end
  for r, node in ipairs(nodes) do
    matrix.host[r] = host_rates(node, opts, bytes)
    if opts.progress then opts.progress:step(1) end
  end
  for _, node in ipairs(nodes) do close_node(node) end
  matrix.failures, matrix.seed = M.matrix_failures(matrix), seed
  return matrix
end

return M
