-- Streaming copy/compute overlap: sequential against 2, 4, 8 streams, measured against the hardware's limit
--
-- A port of cuda.core's "Streaming Copy + Compute Overlap" sample, then
-- beyond it: the limits of this machine measured in the same run, every
-- configuration's efficiency against them, and a search (--auto) for the
-- schedule that comes closest. Every result is verified on the host.
local cuda = require "cuda"
local cli = require "cuda.cli"
local bench = require "cuda.bench"

local SCALE = 2.5
local BLOCK = 256
local RTOL, ATOL = 1e-4, 1e-4

local function parse_args()
  local parser = cli.parser("streaming_overlap",
    "Overlap host-device copies with compute on several CUDA streams, and compare " ..
    "every schedule with the limits measured on this machine.")
  parser:option("--elements", "Number of float32 elements.", "16000000"):convert(cli.positive_integer)
  parser:option("--streams", "Stream counts to try, comma-separated.", "2,4,8"):convert(cli.integer_list)
  parser:option("--runs", "Timed runs per configuration (median reported).", "10"):convert(cli.positive_integer)
  parser:option("--warmup", "Untimed runs before timing.", "3"):convert(cli.positive_integer)
  parser:option("--device", "CUDA device id.", "0"):convert(cli.device_id)
  parser:option("--pinned", "Host memory: legacy (cuMemHostAlloc) or pool.", "legacy")
    :choices{"legacy", "pool"}
  parser:option("--seed", "Seed for the input data (default: fresh).")
    :convert(cli.positive_integer)
  parser:flag("--graph", "Capture each streamed pipeline once as a CUDA graph and replay it.")
  parser:flag("--auto", "Search chunk counts, stream layouts and issue orders for the best schedule.")
  parser:option("--reference", "Path to bench/overlap_ref: run the same schedules through the raw " ..
    "C driver API afterwards and print cudalua / C ratios.")
  parser:option("--json", "Write every figure to FILE as JSON.")
  parser:option("--trace", "Write a Chrome trace (Perfetto) of one pipelined run to FILE.")
  parser:flag("--timeline", "Draw a terminal Gantt chart of one pipelined run.")
  parser:flag("--quiet", "Print only the results.")
  return cli.parse(parser, arg)
end

local args = parse_args()
local function say(...) if not args.quiet then print(...) end end

-- --- setup -------------------------------------------------------------------

-- Host and device buffers, the input drawn fresh, the reference computed
-- on the host in float32 with the same operations as the kernel.
local function make_data(dev, stream, n)
  local pinned = cuda.PinnedMemoryResource{pool = args.pinned == "pool"}
  local host = cuda.HostMemoryResource()
  local bytes = n * 4
  local data = {n = n, bytes = bytes}
  data.h_in = pinned:allocate(bytes, stream)
  data.h_out = pinned:allocate(bytes, stream)
  data.d_in = dev.memory_resource:allocate(bytes, stream)
  data.d_out = dev.memory_resource:allocate(bytes, stream)
  data.reference = host:allocate(bytes)
  data.seed = args.seed or (os.time() ~ math.floor(cuda.clock() * 1e6)) % (2^31 - 1) + 1
  stream:sync()
  data.h_in:view("float32"):random(0, 100, data.seed)
  data.reference:view("float32"):copy(data.h_in:view("float32"))
  local ref = data.reference:view("float32")
  -- Cache-sized chunks: 151 passes over 64 MB would be memory-bound.
  local chunk = 1 << 15
  for first = 1, n, chunk do
    local v = ref:range(first, math.min(first + chunk - 1, n))
    v:scale(SCALE)
    for _ = 1, 50 do v:mul(v):add(1):sqrt() end
  end
  return data
end

-- --- schedules ------------------------------------------------------------------
--
-- A schedule splits the array into chunks (offset, count) and says how they
-- go onto streams:
--   "streams"  chunk i on stream i (mod #streams), issued chunk by chunk
--              (depth first) as the cuda.core sample does;
--   "breadth"  the same streams, issued stage by stage: every copy in, then
--              every kernel, then every copy out;
--   "engines"  one stream per engine (copy in, compute, copy out) chained
--              by events per chunk, so each engine works back to back;
--   "pairs"    the same with two streams for each copy direction, taking
--              chunks in turn, so one copy's setup overlaps the other's
--              transfer (each copy costs a few microseconds on top);
-- and two that let the SMs move data instead of the copy engines (page-
-- locked memory is mapped into the GPU's address space):
--   "direct"   copy engine in, then the kernel writes its results straight
--              into the pinned output, so there is no copy out to set up;
--   "zerocopy" no copies at all: one kernel reads the pinned input and
--              writes the pinned output over PCIe.
-- A ramp makes the first and last chunks small (1/2, 1/4, ... of a body
-- chunk), so the pipeline fills and drains quickly.

local function chunk_weights(nchunks, ramp)
  local w = {}
  for r = ramp, 1, -1 do w[#w + 1] = 0.5 ^ r end
  for _ = 1, nchunks do w[#w + 1] = 1 end
  for r = 1, ramp do w[#w + 1] = 0.5 ^ r end
  return w
end

-- Chunk boundaries on 64-element (256-byte) multiples, covering [0, n).
local function split(n, weights)
  local total = 0
  for _, w in ipairs(weights) do total = total + w end
  local chunks, offset, acc = {}, 0, 0
  for i, w in ipairs(weights) do
    acc = acc + w
    local stop = i == #weights and n or math.min(n, math.floor(n * acc / total / 64 + 0.5) * 64)
    if stop > offset then
      chunks[#chunks + 1] = {offset = offset, count = stop - offset}
      offset = stop
    end
  end
  return chunks
end

local function describe(sched)
  local ramp = sched.ramp > 0 and (", ramp %d"):format(sched.ramp) or ""
  if sched.kind == "engines" then
    return ("3 engine streams, %d chunks%s"):format(#sched.chunks, ramp)
  elseif sched.kind == "pairs" then
    return ("2+1+2 copy/compute/copy streams, %d chunks%s"):format(#sched.chunks, ramp)
  elseif sched.kind == "direct" then
    return ("copy in, kernel writes to pinned host memory, %d chunks%s"):format(#sched.chunks, ramp)
  elseif sched.kind == "zerocopy" then
    return "zero-copy: one kernel reads and writes pinned host memory"
  end
  local order = sched.kind == "breadth" and ", breadth-first" or ""
  return ("%d streams%s%s"):format(sched.nstreams, order, ramp)
end

-- Everything one chunk needs, made before any timing: slices of the four
-- buffers, its launch configuration and its element count as a u64.
local function prepare_chunks(data, chunks)
  for _, c in ipairs(chunks) do
    local off, size = c.offset * 4, c.count * 4
    c.h_in, c.h_out = data.h_in:slice(off, size), data.h_out:slice(off, size)
    c.d_in, c.d_out = data.d_in:slice(off, size), data.d_out:slice(off, size)
    c.config = cuda.LaunchConfig{grid = (c.count + BLOCK - 1) // BLOCK, block = BLOCK}
    c.n = cuda.u64(c.count)
  end
  return chunks
end

local function make_schedule(ctx, kind, nchunks, ramp, nstreams)
  local sched = {kind = kind, ramp = ramp or 0}
  sched.chunks = prepare_chunks(ctx.data, split(ctx.data.n, chunk_weights(nchunks, sched.ramp)))
  local fixed = {engines = 3, pairs = 5, direct = 2, zerocopy = 1}
  sched.nstreams = fixed[kind] or nstreams or nchunks
  sched.streams = {table.unpack(ctx.streams, 1, sched.nstreams)}
  sched.rows = kind == "engines" and {"H2D engine", "compute", "D2H engine"}
            or kind == "pairs" and {"H2D 1", "H2D 2", "compute", "D2H 1", "D2H 2"}
            or kind == "direct" and {"H2D engine", "compute + D2H"}
            or {table.unpack(ctx.rows, 1, sched.nstreams)}
  sched.name = describe(sched)
  return sched
end

-- --- issuing work ------------------------------------------------------------------
--
-- Each issue function runs between a start and a stop event on ctx.main:
-- the other streams first wait for main (the fork), and main waits for
-- each of them at the end (the join), so the stop event covers everything
-- without the host synchronizing inside the timed region. tl, when given,
-- brackets each operation with timeline events.

local function span(tl, stream, row, label, op, ...)
  if not tl then return op(...) end
  local id = tl:begin(stream, row, label)
  op(...)
  tl:finish(stream, id)
end

local function copy_in(c, s) c.d_in:copy_from(c.h_in, s) end
local function copy_out(c, s) c.h_out:copy_from(c.d_out, s) end
local function compute(ctx, c, s) cuda.launch(s, c.config, ctx.kernel, c.d_in, c.d_out, ctx.scale, c.n) end
local function compute_out(ctx, c, s) cuda.launch(s, c.config, ctx.kernel, c.d_in, c.h_out, ctx.scale, c.n) end
local function compute_host(ctx, c, s) cuda.launch(s, c.config, ctx.kernel, c.h_in, c.h_out, ctx.scale, c.n) end

local function fork(ctx, streams)
  local main = ctx.main
  main:record(ctx.fork_event)
  for i = 1, #streams do
    if streams[i] ~= main then streams[i]:wait(ctx.fork_event) end
  end
end

local function join(ctx, streams)
  local main = ctx.main
  for i = 1, #streams do
    if streams[i] ~= main then
      streams[i]:record(ctx.join_events[i])
      main:wait(ctx.join_events[i])
    end
  end
end

local function issue_sequential(ctx, tl)
  local s, whole = ctx.main, ctx.whole
  span(tl, s, "stream 1", "H2D", copy_in, whole, s)
  span(tl, s, "stream 1", "kernel", compute, ctx, whole, s)
  span(tl, s, "stream 1", "D2H", copy_out, whole, s)
end

local function issue_depth_first(ctx, sched, tl)
  local streams = sched.streams
  local k = sched.nstreams
  fork(ctx, streams)
  for i, c in ipairs(sched.chunks) do
    local j = (i - 1) % k + 1
    local s, row = streams[j], ctx.rows[j]
    span(tl, s, row, "H2D", copy_in, c, s)
    span(tl, s, row, "kernel", compute, ctx, c, s)
    span(tl, s, row, "D2H", copy_out, c, s)
  end
  join(ctx, streams)
end

local function issue_breadth_first(ctx, sched, tl)
  local streams, chunks = sched.streams, sched.chunks
  local k = sched.nstreams
  fork(ctx, streams)
  for i, c in ipairs(chunks) do
    local j = (i - 1) % k + 1
    span(tl, streams[j], ctx.rows[j], "H2D", copy_in, c, streams[j])
  end
  for i, c in ipairs(chunks) do
    local j = (i - 1) % k + 1
    span(tl, streams[j], ctx.rows[j], "kernel", compute, ctx, c, streams[j])
  end
  for i, c in ipairs(chunks) do
    local j = (i - 1) % k + 1
    span(tl, streams[j], ctx.rows[j], "D2H", copy_out, c, streams[j])
  end
  join(ctx, streams)
end

-- Copy streams per direction (1 for "engines", 2 for "pairs") around one
-- compute stream; chunk i takes the copy streams in turn. Per chunk, the
-- kernel waits for its copy in and the copy out waits for its kernel.
-- Stream and row layout: copy-in streams, compute, copy-out streams.
local function issue_engines(ctx, sched, tl)
  local st, rows, k = sched.streams, sched.rows, (#sched.streams - 1) // 2
  local comp = st[k + 1]
  local copied, computed = ctx.copied_events, ctx.computed_events
  fork(ctx, st)
  for i, c in ipairs(sched.chunks) do
    local j = (i - 1) % k + 1
    local h2d, d2h = st[j], st[k + 1 + j]
    span(tl, h2d, rows[j], "H2D", copy_in, c, h2d)
    h2d:record(copied[i])
    comp:wait(copied[i])
    span(tl, comp, rows[k + 1], "kernel", compute, ctx, c, comp)
    comp:record(computed[i])
    d2h:wait(computed[i])
    span(tl, d2h, rows[k + 1 + j], "D2H", copy_out, c, d2h)
  end
  join(ctx, st)
end

-- The copy engine brings each chunk in; the kernel writes its results into
-- the pinned output itself.
local function issue_direct(ctx, sched, tl)
  local h2d, comp = sched.streams[1], sched.streams[2]
  local copied = ctx.copied_events
  fork(ctx, sched.streams)
  for i, c in ipairs(sched.chunks) do
    span(tl, h2d, "H2D engine", "H2D", copy_in, c, h2d)
    h2d:record(copied[i])
    comp:wait(copied[i])
    span(tl, comp, "compute + D2H", "kernel", compute_out, ctx, c, comp)
  end
  join(ctx, sched.streams)
end

local function issue_zerocopy(ctx, sched, tl)
  local s = sched.streams[1]
  for _, c in ipairs(sched.chunks) do
    span(tl, s, "stream 1", "kernel", compute_host, ctx, c, s)
  end
end

-- A schedule's copies alone: its copies in on one stream and its copies
-- out on another, all at once, with no kernel and no waits. What the copies
-- cost when split this finely; not a bound, since copying both ways at once
-- costs more per copy than one way, and a long pipeline (32 chunks and more
-- on the H200) copies one way alone for longer.
local function issue_copies_alone(ctx, sched)
  local pair = {ctx.streams[2], ctx.streams[3]}
  fork(ctx, pair)
  for _, c in ipairs(sched.chunks) do copy_in(c, pair[1]) end
  for _, c in ipairs(sched.chunks) do copy_out(c, pair[2]) end
  join(ctx, pair)
end

local ISSUE = {streams = issue_depth_first, breadth = issue_breadth_first, engines = issue_engines,
               pairs = issue_engines, direct = issue_direct, zerocopy = issue_zerocopy}
local USES_COPY_ENGINES = {streams = true, breadth = true, engines = true, pairs = true}

-- The function bench.time calls: a direct issue, or the replay of a graph
-- captured once from the same issue function.
local function runner(ctx, sched)
  local issue = ISSUE[sched.kind]
  if not args.graph then
    return function() issue(ctx, sched) end
  end
  ctx.main:begin_capture()
  issue(ctx, sched)
  local graph = ctx.main:end_capture()
  ctx.graphs[#ctx.graphs + 1] = graph
  return function(s) graph:launch(s) end
end

-- --- measuring and verifying ------------------------------------------------------------

local function time(ctx, fn, runs)
  return bench.time(ctx.main, fn, {warmup = args.warmup, runs = runs or args.runs,
                                   events = {ctx.start_event, ctx.stop_event}})
end

-- Poison the output, run once more, and compare every element with the
-- host reference.
local function verify(ctx, fn)
  local data = ctx.data
  data.h_out:fill(0xFF)   -- NaN in every float32
  fn(ctx.main)
  ctx.main:sync()
  local ok, max_err, first_bad = data.h_out:view("float32"):allclose(data.reference:view("float32"), RTOL, ATOL)
  return {passed = ok, max_abs_err = max_err, first_bad_index = first_bad}
end

local function verification_line(v)
  if v.passed then return "Verification: PASSED" end
  return ("Verification: FAILED (element %s, max abs error %g)"):format(tostring(v.first_bad_index), v.max_abs_err)
end

local function measure_limits(ctx)
  local data, s = ctx.data, ctx.main
  local whole = ctx.whole
  local limits = {}
  limits.h2d = time(ctx, function() copy_in(whole, s) end)
  limits.d2h = time(ctx, function() copy_out(whole, s) end)
  limits.kernel = time(ctx, function() compute(ctx, whole, s) end)
  local pair = {s, ctx.streams[2]}
  limits.both = time(ctx, function()
    fork(ctx, pair)
    copy_in(whole, s)
    copy_out(whole, pair[2])
    join(ctx, pair)
  end)
  -- the same bytes as 32 back-to-back copies: what each copy costs on top
  local pieces = prepare_chunks(data, split(data.n, chunk_weights(32, 0)))
  limits.h2d_pieces = time(ctx, function()
    for i = 1, #pieces do copy_in(pieces[i], s) end
  end)
  limits.copy_cost_us = (limits.h2d_pieces.median - limits.h2d.median) / (#pieces - 1) * 1000
  limits.limit = math.max(limits.h2d.median, limits.d2h.median, limits.kernel.median)
  limits.h2d_gbps = data.bytes / limits.h2d.median / 1e6
  limits.d2h_gbps = data.bytes / limits.d2h.median / 1e6
  return limits
end

local function finite(x) return x == x and x ~= math.huge and x ~= -math.huge and x or nil end

local function result(ctx, name, stats, v)
  return {
    name = name, median_ms = stats.median, std_ms = stats.std, min_ms = stats.min, max_ms = stats.max,
    runs = stats.n, efficiency = ctx.limits.limit / stats.median,
    speedup = ctx.sequential and ctx.sequential.median_ms / stats.median or 1,
    verified = v.passed, max_abs_err = finite(v.max_abs_err),
  }
end

local function run_schedule(ctx, sched, runs)
  local fn = runner(ctx, sched)
  local stats = time(ctx, fn, runs)
  return stats, fn
end

-- Times sched's copies alone and checks the copies out: the device still
-- holds the results of the schedule's own verification run.
local function copies_alone(ctx, sched)
  local fn = function() issue_copies_alone(ctx, sched) end
  local stats = time(ctx, fn)
  local v = verify(ctx, fn)
  return {chunks = #sched.chunks, median_ms = stats.median, std_ms = stats.std,
          efficiency = ctx.limits.limit / stats.median, verified = v.passed}, v
end

-- --- the search -----------------------------------------------------------------------

-- Each copy has a fixed cost, so fewer, larger chunks waste less; small
-- chunks at the ends (the ramp) shorten the fill and the drain. The search
-- covers both, for each layout.
local function candidates()
  local list = {}
  for _, n in ipairs{3, 4, 5, 6, 8, 10, 12, 16, 20, 24} do
    for ramp = 0, 6 do list[#list + 1] = {"engines", n, ramp} end
  end
  for _, n in ipairs{8, 12, 16, 20, 24, 32, 40, 48} do
    for ramp = 0, 2 do list[#list + 1] = {"pairs", n, ramp} end
  end
  for _, n in ipairs{4, 8, 12, 16, 20, 24, 32} do
    for _, ramp in ipairs{0, 2} do list[#list + 1] = {"direct", n, ramp} end
  end
  list[#list + 1] = {"zerocopy", 1, 0}
  for _, k in ipairs{4, 8, 16} do
    for _, ramp in ipairs{0, 3} do
      list[#list + 1] = {"streams", k, ramp, k}
      list[#list + 1] = {"breadth", k, ramp, k}
    end
  end
  return list
end

-- The best of the measured candidates (median of 5 runs each), chosen after
-- re-measuring the first three with the full run count.
local function pick_best(ctx, scored)
  table.sort(scored, function(a, b) return a.median < b.median end)
  local best
  for i = 1, math.min(3, #scored) do
    local stats, fn = run_schedule(ctx, scored[i].sched)
    if not best or stats.median < best.stats.median then
      best = {sched = scored[i].sched, stats = stats, fn = fn}
    end
  end
  return best
end

-- Returns the best schedule that moves data with the copy engines, the best
-- of all (which may let the SMs move it), and every candidate's median.
local function auto_search(ctx)
  local list = candidates()
  local progress = cli.progress(#list, "searching schedules")
  local engines, others, table_ = {}, {}, {}
  for _, c in ipairs(list) do
    local sched = make_schedule(ctx, c[1], c[2], c[3], c[4])
    local stats = run_schedule(ctx, sched, 5)
    local entry = {sched = sched, median = stats.median}
    table.insert(USES_COPY_ENGINES[sched.kind] and engines or others, entry)
    table_[#table_ + 1] = {name = sched.name, kind = sched.kind, median_ms = stats.median}
    progress:step(1)
  end
  progress:done()
  local best_engines = pick_best(ctx, engines)
  local best_all = best_engines
  if #others > 0 then
    local best_other = pick_best(ctx, others)
    if best_other.stats.median < best_engines.stats.median then best_all = best_other end
  end
  best_engines.tried, best_all.tried = #engines, #list
  return best_engines, best_all, table_
end

-- --- output ------------------------------------------------------------------------------

local function peak_rss_mb()
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmHWM:%s+(%d+)")
    if kb then return tonumber(kb) / 1024 end
  end
end

local function print_limits(limits)
  local function ms(st) return ("%.3f ms"):format(st.median) end
  say("--- Limits (measured) ---")
  print(("H2D alone:           %s (%.1f GB/s)"):format(ms(limits.h2d), limits.h2d_gbps))
  print(("D2H alone:           %s (%.1f GB/s)"):format(ms(limits.d2h), limits.d2h_gbps))
  print(("H2D + D2H together:  %s"):format(ms(limits.both)))
  print(("H2D as 32 copies:    %s (each copy costs %.1f us more)"):format(ms(limits.h2d_pieces), limits.copy_cost_us))
  print(("Kernel alone:        %s"):format(ms(limits.kernel)))
  print(("Limit:               %.3f ms = max(H2D, D2H, kernel); no schedule can beat it"):format(limits.limit))
  say()
end

local function streamed_line(r)
  return ("%s: %.2f ms (\u{b1}%.2f) - speedup: %.2fx  efficiency: %.0f%%"):format(
    r.name, r.median_ms, r.std_ms, r.speedup, 100 * r.efficiency)
end

local function draw_timeline(ctx, sched)
  local timeline = require "cuda.timeline"
  local tl <close> = timeline.new(ctx.dev, {capacity = 8 * #sched.chunks + 16})
  tl:origin(ctx.main)
  ISSUE[sched.kind](ctx, sched, tl)
  local spans = tl:collect()
  if args.timeline then
    print(("--- Timeline: %s ---"):format(sched.name))
    print(timeline.gantt(spans, {width = tonumber(os.getenv("COLUMNS")) or 100, rows = sched.rows}))
  end
  if args.trace then
    timeline.write_chrome_trace(args.trace, spans, {process_name = "streaming_overlap: " .. sched.name,
                                                   rows = sched.rows})
    say(("Trace of one run written to %s (open it in https://ui.perfetto.dev)"):format(args.trace))
  end
end

-- --- the raw C reference -----------------------------------------------------------------

-- Runs bench/overlap_ref on the same problem, after all of our own timing,
-- and prints each configuration both ways. With --auto the reference runs
-- the engine schedule with as many chunks as our best copy-engine schedule,
-- found (nil without --auto).
local function compare_with_reference(ctx, report, found)
  local kernel_dir = cuda.find_kernel("vector_scale.cu"):match("^(.*)/[^/]*$") or "."
  local chunks = found and #found.sched.chunks or 20
  local figures, header = bench.reference(args.reference, {"--elements", ctx.data.n, "--runs", args.runs,
      "--warmup", args.warmup, "--device", args.device, "--streams", table.concat(args.streams, ","),
      "--chunks", chunks, "--kernels", kernel_dir}, {"median", "min", "max"})
  if not figures then
    io.stderr:write("streaming_overlap: ", header, "\n")
    os.exit(1)
  end
  local limits = ctx.limits
  local rows = {
    {"H2D alone", limits.h2d.median, "h2d"}, {"D2H alone", limits.d2h.median, "d2h"},
    {"H2D + D2H together", limits.both.median, "both"}, {"Kernel alone", limits.kernel.median, "kernel"},
    {"Sequential", ctx.sequential.median_ms, "sequential"},
  }
  for _, r in ipairs(report.results) do
    if r.streams then rows[#rows + 1] = {r.name, r.median_ms, "streams_" .. r.streams} end
  end
  if found then
    local same = found.sched.kind == "engines" and found.sched.ramp == 0
    local name = same and found.sched.name or ("%s (C: 3 engine streams, %d chunks)"):format(found.sched.name, chunks)
    rows[#rows + 1] = {name, report.auto.copy_engines.median_ms, "engines_" .. chunks}
    rows[#rows + 1] = {("Its copies alone, %d each way"):format(chunks), report.auto.copies_alone.median_ms,
                       "copies_" .. chunks}
  end
  say()
  print(("--- Against the raw C driver API (%s), same run ---"):format(args.reference))
  if header[1] then say(header[1]) end
  print(("%-44s %10s %10s %7s"):format("configuration", "cudalua", "raw C", "ratio"))
  local out = {program = args.reference, rows = {}}
  for _, row in ipairs(rows) do
    local name, ours, theirs = row[1], row[2], figures[row[3]]
    if not theirs then
      io.stderr:write(("streaming_overlap: %s did not report %s\n"):format(args.reference, row[3]))
      os.exit(1)
    end
    print(("%-44s %7.3f ms %7.3f ms %7.3f"):format(name, ours, theirs.median, ours / theirs.median))
    out.rows[#out.rows + 1] = {name = name, key = row[3], cudalua_ms = ours, c_ms = theirs.median,
                               ratio = ours / theirs.median}
  end
  say("(ratio = cudalua's time / raw C's time: below 1 is faster)")
  if args.graph then say("(cudalua replayed graphs of the streamed schedules; the reference issues them directly)") end
  return out
end

-- --- main ----------------------------------------------------------------------------------

local function main()
  local wall0 = cuda.clock()
  local dev = cuda.Device(args.device)
  dev:set_current()
  say(("="):rep(60))
  say("Streaming Copy + Compute Overlap")
  say(("="):rep(60))
  print("Device: " .. dev.name)
  print("Compute Capability: " .. tostring(dev.compute_capability))
  local ctx = {dev = dev, graphs = {}, scale = cuda.f32(SCALE)}
  ctx.kernel = require("cuda.kernels").load(dev, "vector_scale.cu", "vector_scale")
  say("Kernel compiled \u{2713}")
  ctx.main = dev:create_stream()
  local n = args.elements
  ctx.data = make_data(dev, ctx.main, n)
  print(("Problem size: %s elements (%s)"):format(cli.format_int(n), cli.format_bytes(n * 4)))
  say(("Input: uniform in [0, 100), seed %d; host memory: %s pinned"):format(ctx.data.seed, args.pinned))
  say()

  -- streams, events and the whole-array "chunk", made once
  local most = 3
  for _, k in ipairs(args.streams) do most = math.max(most, k) end
  if args.auto then most = math.max(most, 16) end
  ctx.streams, ctx.rows, ctx.join_events = {ctx.main}, {"stream 1"}, {}
  for i = 2, most do
    ctx.streams[i], ctx.rows[i] = dev:create_stream(), "stream " .. i
  end
  for i = 1, most do ctx.join_events[i] = dev:create_event() end
  ctx.fork_event = dev:create_event()
  ctx.start_event, ctx.stop_event = dev:create_event{timing = true}, dev:create_event{timing = true}
  ctx.copied_events, ctx.computed_events = {}, {}
  for i = 1, 64 do ctx.copied_events[i], ctx.computed_events[i] = dev:create_event(), dev:create_event() end
  ctx.whole = prepare_chunks(ctx.data, {{offset = 0, count = n}})[1]

  ctx.limits = measure_limits(ctx)
  local report = {device = dev.name, elements = n, bytes = n * 4, seed = ctx.data.seed,
                  pinned = args.pinned, graph = args.graph or false, runs = args.runs, results = {}}
  local all_passed = true

  say("--- Sequential (no overlap) ---")
  local seq_fn = function() issue_sequential(ctx) end
  local seq_stats = time(ctx, seq_fn)
  local seq_v = verify(ctx, seq_fn)
  ctx.sequential = result(ctx, "sequential", seq_stats, seq_v)
  all_passed = all_passed and seq_v.passed
  print(("Time: %.2f ms (\u{b1}%.2f)  efficiency: %.0f%%"):format(seq_stats.median, seq_stats.std,
        100 * ctx.sequential.efficiency))
  print(verification_line(seq_v))
  report.results[#report.results + 1] = ctx.sequential
  say()

  say("--- Streamed (with overlap) ---")
  local best
  for _, k in ipairs(args.streams) do
    local sched = make_schedule(ctx, "streams", k)
    local stats, fn = run_schedule(ctx, sched)
    local v = verify(ctx, fn)
    local r = result(ctx, sched.name, stats, v)
    r.streams = k
    all_passed = all_passed and v.passed
    print(streamed_line(r))
    print(verification_line(v))
    report.results[#report.results + 1] = r
    if not best or r.median_ms < best.result.median_ms then best = {sched = sched, result = r} end
  end
  say()

  print_limits(ctx.limits)
  report.limits = {
    h2d_ms = ctx.limits.h2d.median, d2h_ms = ctx.limits.d2h.median, both_ms = ctx.limits.both.median,
    kernel_ms = ctx.limits.kernel.median, limit_ms = ctx.limits.limit,
    h2d_32_copies_ms = ctx.limits.h2d_pieces.median, copy_cost_us = ctx.limits.copy_cost_us,
    h2d_gbps = ctx.limits.h2d_gbps, d2h_gbps = ctx.limits.d2h_gbps,
    sequential_vs_sum = seq_stats.median / (ctx.limits.h2d.median + ctx.limits.kernel.median + ctx.limits.d2h.median),
  }

  local found_engines
  if args.auto then
    local found_all, candidates_measured
    found_engines, found_all, candidates_measured = auto_search(ctx)
    report.auto = {candidates = candidates_measured}
    local function settle(found, label)
      local v = verify(ctx, found.fn)
      local r = result(ctx, found.sched.name, found.stats, v)
      r.tried, r.kind = found.tried, found.sched.kind
      all_passed = all_passed and v.passed
      print(("%s (--auto, %d tried): %s"):format(label, found.tried, streamed_line(r)))
      print(verification_line(v))
      if not best or r.median_ms < best.result.median_ms then best = {sched = found.sched, result = r} end
      return r
    end
    report.auto.copy_engines = settle(found_engines, "Best copy-engine schedule")
    local copies, copies_v = copies_alone(ctx, found_engines.sched)
    all_passed = all_passed and copies_v.passed
    report.auto.copies_alone = copies
    print(("Its copies alone (%d each way, all at once, no kernel, no waits): %.2f ms = %.0f%% of the limit;")
          :format(copies.chunks, copies.median_ms, 100 * copies.efficiency))
    print(("  the schedule takes %.3fx as long as its copies alone"):format(report.auto.copy_engines.median_ms / copies.median_ms))
    print(verification_line(copies_v))
    if found_all ~= found_engines then
      report.auto.best = settle(found_all, "Best of all schedules")
    else
      report.auto.best = report.auto.copy_engines
      print("No schedule that lets the SMs move the data (direct, zero-copy) did better.")
    end
  end
  if best and (args.timeline or args.trace) then draw_timeline(ctx, best.sched) end
  if args.reference then report.reference = compare_with_reference(ctx, report, found_engines) end

  say()
  say("Key: sequential = one stream, the whole array copied in, computed, copied out.")
  say("     N streams = the array in N chunks, chunk i copied in, computed and copied out")
  say("     on stream i, so copies of one chunk overlap the compute of another.")
  say("Note: efficiency = limit / time; the limit is the slowest of H2D alone, D2H alone")
  say("     and the kernel alone, measured above. H2D and D2H share the PCIe link, so")
  say("     copying both ways at once is slower than either alone.")
  report.wall_s = cuda.clock() - wall0
  report.peak_rss_mb = peak_rss_mb()
  report.passed = all_passed
  say(("Wall time: %.2f s, peak RSS: %.0f MB"):format(report.wall_s, report.peak_rss_mb))
  if args.json then require("cuda.json").write_file(args.json, report, {indent = 2}) end
  for _, g in ipairs(ctx.graphs) do g:close() end
  if not all_passed then
    io.stderr:write("streaming_overlap: verification FAILED\n")
    os.exit(1)
  end
end

main()
