-- Streaming copy/compute overlap: sequential against 2, 4, 8 streams, measured against the hardware's limit
-- SPDX-License-Identifier: MIT
--
-- A port of cuda.core's "Streaming Copy + Compute Overlap" sample, then beyond it: the limits of this
-- machine measured in the same run, every configuration's efficiency against them, and a search (--auto)
-- for the schedule that comes closest. The schedules and the search are cuda.overlap; this script runs them
-- in phases, verifies every result on the host, and reports.
local cuda = require "cuda"
local cli = require "cuda.cli"
local bench = require "cuda.bench"
local overlap = require "cuda.overlap"
local bandwidth = require "cuda.bandwidth"
local results = require "cuda.results"
local report = require "cuda.overlap_report"

local SCALE, RTOL, ATOL = 2.5, 1e-4, 1e-4

local function parse_args()
  local parser = cli.parser("streaming_overlap", results.description())
  parser:option("--elements", "Number of float32 elements.", "16000000"):convert(cli.positive_integer)
  parser:option("--streams", "Stream counts to try, comma-separated.", "2,4,8"):convert(cli.integer_list)
  parser:option("--runs", "Timed runs per configuration (median reported).", "10"):convert(cli.positive_integer)
  parser:option("--warmup", "Untimed runs before timing.", "3"):convert(cli.positive_integer)
  bench.add_timing_options(parser)
  cli.device_option(parser)
  parser:option("--devices", "Run the streamed schedules on each GPU listed (0,1,...) alone and all at once.")
    :convert(require("cuda.bandwidth").parse_devices)
  parser:option("--pinned", "Host memory: legacy (cuMemHostAlloc) or pool.", "legacy"):choices{"legacy", "pool"}
  parser:option("--seed", "Seed for the input data (default: fresh)."):convert(cli.positive_integer)
  parser:flag("--graph", "Capture each streamed pipeline once as a CUDA graph and replay it.")
  parser:flag("--auto", "Search chunk counts, stream layouts and issue orders for the best schedule.")
  parser:option("--reference", "bench/overlap_ref: run the same schedules through the raw " ..
    "C driver API afterwards and print cudalua / C ratios."):argname("PROGRAM")
  results.options(parser, {"json", "csv", "md", "mpi"})
  parser:option("--trace", "Write a Chrome trace (Perfetto) of one pipelined run to FILE."):argname("FILE")
  parser:flag("--timeline", "Draw a terminal Gantt chart of one pipelined run.")
  parser:option("--svg", "Draw the --timeline Gantt chart to FILE as SVG."):argname("FILE")
  parser:flag("--quiet", "Print only the results.")
  local args = cli.parse(parser, arg)
  for _, o in ipairs{"auto", "graph", "reference", "trace", "timeline", "svg"} do
    if args.devices and args[o] then io.stderr:write(("streaming_overlap: --devices does not go with --%s\n"):format(o)) os.exit(2) end
  end
  return args
end

-- The device, the kernel, and a pipeline with streams enough for every
-- schedule asked for (the search needs 16).
local function open_pipeline(args, say, id, banner)
  local dev = cuda.Device(id)
  dev:set_current()
  if banner then say(("="):rep(60) .. "\nStreaming Copy + Compute Overlap\n" .. ("="):rep(60)) end
  print("Device: " .. dev.name .. "\nCompute Capability: " .. tostring(dev.compute_capability))
  local kernel = require("cuda.kernels").load(dev, "vector_scale.cu", "vector_scale")
  say("Kernel compiled \u{2713}")
  return overlap.pipeline(dev, {
    n = args.elements, kernel = kernel, args = {cuda.f32(SCALE)}, warmup = args.warmup, runs = args.runs,
    streams = math.max(3, args.auto and 16 or 3, table.unpack(args.streams)),
    host_resource = cuda.PinnedMemoryResource{pool = args.pinned == "pool"}, timing = bench.timing_options(args, dev),
  })
end

-- The input drawn fresh, and the reference computed on the host in float32
-- with the same operations as the kernel.
local function make_input(p, seed)
  seed = seed or (os.time() ~ math.floor(cuda.clock() * 1e6)) % (2^31 - 1) + 1
  local h_in = p.buffers.h_in:view("float32"):random(0, 100, seed)
  local ref = cuda.HostMemoryResource():allocate(p.bytes):view("float32"):copy(h_in)
  -- Cache-sized chunks: 151 passes over 64 MB would be memory-bound.
  local chunk = 1 << 15
  for first = 1, p.n, chunk do
    local v = ref:range(first, math.min(first + chunk - 1, p.n))
    v:scale(SCALE)
    for _ = 1, 50 do v:mul(v):add(1):sqrt() end
  end
  return {seed = seed, reference = ref}
end

local function run_sequential(p, input, limits, say)
  say("--- Sequential (no overlap) ---")
  local stats, fn = p:measure(p:bind(overlap.schedule(p.n, {kind = "sequential"})))
  local v = p:verify(fn, input.reference, RTOL, ATOL)
  local r = report.result("sequential", stats, v, {limit = limits.limit})
  print(("Time: %.2f ms (\u{b1}%.2f)  efficiency: %.0f%%"):format(r.median_ms, r.std_ms, 100 * r.efficiency))
  print(report.verification_line(v))
  say()
  return r
end

-- Each stream count of --streams; returns {sched, result} for each.
local function run_streamed(p, input, base, args, say)
  say("--- Streamed (with overlap) ---")
  local runs = {}
  for _, k in ipairs(args.streams) do
    local sched = p:bind(overlap.schedule(p.n, {kind = "streams", chunks = k}))
    local stats, fn, graph <close> = p:measure(sched, {graph = args.graph})
    local v = p:verify(fn, input.reference, RTOL, ATOL)
    local r = report.result(sched.name, stats, v, base, {streams = k})
    print(report.streamed_line(r))
    print(report.verification_line(v))
    runs[#runs + 1] = {sched = sched, result = r}
  end
  say()
  return runs
end

-- Times sched's copies alone and checks the copies out: the device still
-- holds the results of the schedule's own verification run.
local function run_copies_alone(p, input, sched, base, schedule_ms)
  local copies = p:bind(overlap.copies(sched))
  local stats, fn = p:measure(copies)
  local v = p:verify(fn, input.reference, RTOL, ATOL)
  local r = {chunks = #copies.chunks, median_ms = stats.median, std_ms = stats.std, samples = stats.raw,
             efficiency = base.limit / stats.median, verified = v.passed}
  print(("Its copies alone (%d each way, all at once, no kernel, no waits): %.2f ms = %.0f%% of the limit;")
        :format(r.chunks, r.median_ms, 100 * r.efficiency))
  print(("  the schedule takes %.3fx as long as its copies alone"):format(schedule_ms / r.median_ms))
  print(report.verification_line(v))
  return r
end

-- The search, its two winners verified; returns the report's auto section
-- and {sched, result} for each winner.
local function run_auto(p, input, base, args)
  local list = overlap.candidates()
  local found = overlap.search(p, {candidates = list, graph = args.graph,
                                   progress = cli.progress(#list, "searching schedules")})
  local function settle(f, label)
    local v = p:verify(f.fn, input.reference, RTOL, ATOL)
    local r = report.result(f.sched.name, f.stats, v, base, {tried = f.tried, kind = f.sched.kind})
    print(("%s (--auto, %d tried): %s"):format(label, f.tried, report.streamed_line(r)))
    print(report.verification_line(v))
    return {sched = f.sched, result = r}
  end
  local engines = settle(found.copy_engines, "Best copy-engine schedule")
  local copies = run_copies_alone(p, input, engines.sched, base, engines.result.median_ms)
  local bound = overlap.bound(base.limits, p.bytes)
  print(("The bound the cost per operation implies (%.1f us a pair both ways): %d chunks, %.3f ms;"):format(
    bandwidth.chunk_cost_us(bound.costs), bound.chunks, bound.ms))
  print(("  the best copy-engine schedule is %.1f%% above it"):format(100 * (engines.result.median_ms / bound.ms - 1)))
  local best = found.best ~= found.copy_engines and settle(found.best, "Best of all schedules") or engines
  if best == engines then print("No schedule that lets the SMs move the data (direct, zero-copy) did better.") end
  for _, f in ipairs{found.copy_engines, found.best} do if f.graph then f.graph:close() end end
  return {candidates = found.measured, copy_engines = engines.result, copies_alone = copies, best = best.result,
          bound = {chunks = bound.chunks, ms = bound.ms, chunk_cost_us = bandwidth.chunk_cost_us(bound.costs)}},
         {engines, best}
end

local function draw_timeline(p, sched, args, say)
  local timeline = require "cuda.timeline"
  local tl <close> = timeline.new(p.dev, {capacity = 8 * #sched.chunks + 16})
  tl:origin(p.main)
  p:issue(sched, tl)
  local spans = tl:collect()
  if args.timeline then
    print(("--- Timeline: %s ---"):format(sched.name))
    print(timeline.gantt(spans, {rows = sched.rows}))
  end
  if args.trace then
    timeline.write_chrome_trace(args.trace, spans, {process_name = "streaming_overlap: " .. sched.name, rows = sched.rows})
    say(("Trace of one run written to %s (open it in https://ui.perfetto.dev)"):format(args.trace))
  end
  if args.svg then results.write_text(args.svg, require("cuda.svg").gantt(spans, {rows = sched.rows, title = sched.name})) end
end

local function fail(message)
  io.stderr:write("streaming_overlap: ", message, "\n")
  os.exit(1)
end

-- Runs bench/overlap_ref on the same problem, after all of our own timing, and prints each configuration
-- both ways. With --auto (engines, the best copy-engine schedule) the reference runs the engine schedule
-- with as many chunks.
local function compare_with_reference(args, p, limits, results, auto, engines, say)
  local kernel_dir = cuda.find_kernel("vector_scale.cu"):match("^(.*)/[^/]*$") or "."
  local chunks = engines and #engines.sched.chunks or 20
  local figures, header = bench.reference(args.reference, {"--elements", p.n, "--runs", args.runs,
      "--warmup", args.warmup, "--device", args.device, "--streams", table.concat(args.streams, ","),
      "--chunks", chunks, "--kernels", kernel_dir}, bench.REFERENCE_COLUMNS, bench.REFERENCE_SPREAD)
  if not figures then fail(header) end
  local rows = {
    {"H2D alone", limits.h2d.raw, "h2d"}, {"D2H alone", limits.d2h.raw, "d2h"},
    {"H2D + D2H together", limits.both.raw, "both"}, {"Kernel alone", limits.kernel.raw, "kernel"},
    {"Sequential", results[1].samples, "sequential"},
  }
  for _, r in ipairs(results) do
    if r.streams then rows[#rows + 1] = {r.name, r.samples, "streams_" .. r.streams} end
  end
  if engines then
    local same = engines.sched.kind == "engines" and engines.sched.ramp == 0
    local name = same and engines.sched.name or ("%s (C: 3 engine streams, %d chunks)"):format(engines.sched.name, chunks)
    rows[#rows + 1] = {name, auto.copy_engines.samples, "engines_" .. chunks}
    rows[#rows + 1] = {("Its copies alone, %d each way"):format(chunks), auto.copies_alone.samples, "copies_" .. chunks}
  end
  say()
  print(("--- Against the raw C driver API (%s), same run: time ratio cudalua / C, \u{b1} its 95%% uncertainty ---")
        :format(args.reference))
  if header[1] then say(header[1]) end
  for i, row in ipairs(rows) do
    local theirs = figures[row[3]] or fail(("%s did not report %s"):format(args.reference, row[3]))
    rows[i] = {label = row[1], key = row[3], ours = bench.figure(row[2]), theirs = theirs}
  end
  local out = {program = args.reference}
  out.rows, out.flagged = bench.print_ratios(rows, {columns = {"configuration", "cudalua ms", "raw C ms"}, width = 44,
                                                    value = "%12.3f", below = "cudalua faster", above = "cudalua slower"})
  for _, row in ipairs(out.rows) do
    row.name, row.cudalua_ms, row.c_ms, row.label, row.ours, row.theirs = row.label, row.ours.median, row.theirs.median
  end
  say("(ratio = cudalua's time / raw C's time: below 1 is faster)")
  if args.graph then say("(cudalua replayed graphs of the streamed schedules; the reference issues them directly)") end
  return out
end

-- --devices: each --streams schedule on every GPU listed, alone and all at once (overlap.time_together),
-- against each GPU's limits measured alone and together; every GPU's output verified.
local function run_devices(args)
  local say, list, gpus = args.quiet and function() end or print, {}, {}
  for i, id in ipairs(args.devices) do
    list[i] = open_pipeline(args, say, id, i == 1)
    gpus[i] = {id = id, name = list[i].dev.name}
  end
  local input, n, bytes = make_input(list[1], args.seed), list[1].n, list[1].bytes
  for i = 2, #list do list[i].buffers.h_in:copy_from(list[1].buffers.h_in) end
  print(("Problem size: %s elements (%s) on each of %d GPUs"):format(cli.format_int(n), cli.format_bytes(bytes), #list))
  local alone, together = {}, overlap.limits_together(list)
  for i, p in ipairs(list) do alone[i] = p:limits() end
  say("\n--- Limits: each GPU alone / all GPUs at once (together) ---")
  print(table.concat(report.device_limit_lines(gpus, alone, together), "\n"))
  local run = results.new("streaming_overlap", {device = list[1].dev, argv = arg})
  local details = {devices = gpus, elements = n, seed = input.seed, schedules = {}, limits = {alone = {}, together = {}}}
  for i = 1, #list do
    details.limits.alone[i], details.limits.together[i] = report.limits_report(alone[i]), report.limits_report(together[i])
  end
  for _, k in ipairs(args.streams) do
    local by, rows = {}, {}
    for _, p in ipairs(list) do by[p] = p:bind(overlap.schedule(n, {kind = "streams", chunks = k})) end
    local name = by[list[1]].name
    local stats = overlap.time_together(list, function(p) p:issue(by[p]) end, name)
    for i, p in ipairs(list) do
      local a, fn = p:measure(by[p])
      local v = p:verify(fn, input.reference, RTOL, ATOL)
      rows[i] = {id = gpus[i].id, name = gpus[i].name, alone_ms = a.median, together_ms = stats[i].median,
                 limit_ms = together[i].limit, verified = v.passed}
      run:add(("%s GPU %d alone"):format(name, gpus[i].id), "ms", a.raw, {verified = v.passed})
      run:add(("%s GPU %d together"):format(name, gpus[i].id), "ms", stats[i].raw, {verified = v.passed})
    end
    say(("\n--- %s on %d GPUs: alone (each by itself) and together (all at once) ---"):format(name, #list))
    local lines, aggregate = report.device_lines(rows, bytes)
    print(table.concat(lines, "\n"))
    details.schedules[#details.schedules + 1] = {name = name, gpus = rows, aggregate = aggregate}
  end
  for i, p in ipairs(list) do for _, w in ipairs(p.warnings) do print(("Warning: GPU %d: %s"):format(gpus[i].id, w)) end end
  run:finish(args, run:verified(), details)
  if not run:verified() then fail("verification FAILED") end
end

local function main(args)
  local wall0 = cuda.clock()
  local say = args.quiet and function() end or print
  local p = open_pipeline(args, say, args.device, true)
  local input = make_input(p, args.seed)
  print(("Problem size: %s elements (%s)"):format(cli.format_int(p.n), cli.format_bytes(p.bytes)))
  say(("Input: uniform in [0, 100), seed %d; host memory: %s pinned"):format(input.seed, args.pinned))
  say()
  local limits = p:limits()
  local sequential = run_sequential(p, input, limits, say)
  local base = {limit = limits.limit, sequential_ms = sequential.median_ms, limits = limits}
  local streamed = run_streamed(p, input, base, args, say)
  say("--- Limits (measured) ---")
  print(table.concat(report.limit_lines(limits), "\n"))
  say()
  local auto, winners = nil, {}
  if args.auto then auto, winners = run_auto(p, input, base, args) end
  local configs = {sequential}
  for _, run in ipairs(streamed) do configs[#configs + 1] = run.result end
  local best = report.fastest(streamed, winners)
  if best and (args.timeline or args.trace or args.svg) then draw_timeline(p, best.sched, args, say) end
  local reference = args.reference and compare_with_reference(args, p, limits, configs, auto, winners[1], say)
  for _, warning in ipairs(p.warnings) do print("Warning: " .. warning) end
  say()
  say("Key: sequential = one stream, the whole array copied in, computed, copied out.")
  say("     N streams = the array in N chunks, chunk i copied in, computed and copied out")
  say("     on stream i, so copies of one chunk overlap the compute of another.")
  say("Note: efficiency = limit / time; the limit is the slowest of H2D alone, D2H alone")
  say("     and the kernel alone, measured above. H2D and D2H share the PCIe link, so")
  say("     copying both ways at once is slower than either alone.")
  local details = {device = p.dev.name, elements = p.n, bytes = p.bytes, seed = input.seed, pinned = args.pinned,
                  graph = args.graph or false, runs = args.runs, limits = report.limits_report(limits, sequential), auto = auto,
                  precision = args.precision, max_time = args.precision > 0 and args.max_time or nil, timing_warnings = p.warnings,
                  reference = reference, wall_s = cuda.clock() - wall0, peak_rss_mb = results.peak_rss_mb()}
  say(("Wall time: %.2f s, peak RSS: %.0f MB"):format(details.wall_s, details.peak_rss_mb))
  local run = results.new("streaming_overlap", {device = p.dev, argv = arg, columns = {"group", "speedup", "efficiency"}})
  report.collect(run, configs, limits, auto)
  run:finish(args, run:verified(), details)
  if not run:verified() then fail("verification FAILED") end
end

local args = parse_args()
if args.devices then run_devices(args) else main(args) end
