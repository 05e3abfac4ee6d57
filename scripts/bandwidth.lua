-- Copy bandwidth over transfer sizes: each copy's fixed cost and rate, fitted, and the overlap's best chunk count
-- SPDX-License-Identifier: MIT
--
-- Sweeps copies from 4 KiB to 256 MiB over paths (H2D, D2H, both at once, device to device), host memory
-- (pinned, pinned pool, pageable, managed) and engines (the copy engines, an SM copy kernel), verifying every
-- copy; fits time = fixed + bytes / rate per series, and predicts from the fits how many chunks the
-- streaming overlap pipeline should use. The sweep, the fit and the model are cuda.bandwidth.
local cuda = require "cuda"
local cli = require "cuda.cli"
local bench = require "cuda.bench"
local bandwidth = require "cuda.bandwidth"
local results = require "cuda.results"

local function parse_args()
  local parser = cli.parser("bandwidth", results.description())
  parser:option("--sizes", "Bytes per copy, comma-separated (4096, 4K, 64M; default 4K..256M by powers of two).")
    :convert(bandwidth.parse_sizes)
  parser:option("--paths", "Paths: " .. table.concat(bandwidth.PATHS, ",") .. ".", table.concat(bandwidth.PATHS, ","))
    :convert(bandwidth.word_list(bandwidth.PATHS))
  parser:option("--resources", "Host memory: " .. table.concat(bandwidth.RESOURCES, ",") .. ".", "pinned")
    :convert(bandwidth.word_list(bandwidth.RESOURCES))
  parser:option("--engines", "Engines: copy (copy engines), sm (a copy kernel); default copy, with --matrix both.")
    :convert(bandwidth.word_list(bandwidth.ENGINES))
  parser:option("--runs", "Timed copies per size (median reported).", "10"):convert(cli.positive_integer)
  parser:option("--warmup", "Untimed copies per size first.", "3"):convert(cli.positive_integer)
  cli.device_option(parser)
  parser:flag("--matrix", "Instead of the sweep: copies between GPUs, GPU x GPU, read and write, one way and " ..
    "both ways, at one size (the largest of --sizes, default 64M), and each GPU's host copies.")
  parser:option("--devices", "With --matrix: the GPUs, comma-separated ids (default: all)."):convert(bandwidth.parse_devices)
  parser:option("--op-cost", "Bytes each way of the cost-per-operation measurement (the same bytes as 1, 2, 4, " ..
    "..., 64 copies; a multiple of 256); none: leave it out.", "64M"):argname("BYTES"):convert(function(text)
      if text == "none" then return false end
      local n, why = bandwidth.parse_size(text)
      if n and n % 256 ~= 0 then return nil, ("'%s' is not a multiple of 256 bytes"):format(text) end
      return n, why
    end)
  parser:option("--elements", "Float32 elements of the overlap problem the prediction is for.", "16000000")
    :convert(cli.positive_integer)
  parser:flag("--overlap", "Also search the overlap schedules (streaming_overlap --auto) and compare the " ..
    "searched best chunk count with the predicted one.")
  parser:option("--reference", "bench/bandwidth_ref: the same sweep through the raw C driver API; " ..
    "prints cudalua / C time ratios at every size."):argname("PROGRAM")
  results.options(parser, {"json", "csv", "md", "mpi"})
  require("cuda.mpi_bench").options(parser)
  parser:option("--svg", "Draw the sweep to FILE as SVG: GB/s against bytes, a line per series."):argname("FILE")
  return cli.parse(parser, arg)
end

local function fail(message)
  io.stderr:write("bandwidth: ", message, "\n")
  os.exit(1)
end

local function run_sweep(dev, args)
  local sizes = args.sizes or bandwidth.default_sizes()
  local count = #bandwidth.series_list(args.paths, args.resources, args.engines) * #sizes
  local progress <close> = cli.progress(count, "copying")
  local sweep = bandwidth.sweep(dev, {sizes = sizes, paths = args.paths, resources = args.resources,
                                      engines = args.engines, runs = args.runs, warmup = args.warmup,
                                      progress = progress})
  progress:done()
  print(("--- Copy bandwidth, GB/s (median of %d, every copy verified; 'both': each direction) ---"):format(args.runs))
  print(bandwidth.format_table(sweep))
  for _, s in ipairs(sweep.series) do
    if s.skipped then print(("(%s skipped: %s)"):format(bandwidth.series_name(s), s.skipped)) end
  end
  print()
  print("--- Fit: time = fixed + bytes / rate ---")
  print(bandwidth.format_fits(sweep))
  return sweep
end

-- The overlap problem's costs from the pinned copy-engine fits, or nil and why.
local function pipeline_costs(sweep, bytes)
  local costs = {bytes = bytes}
  for _, path in ipairs{"h2d", "d2h", "both"} do
    local s = bandwidth.find(sweep, path, "pinned", "copy")
    if not (s and s.fit) then return nil, ("the prediction needs the fit of %s pinned copy"):format(path) end
    costs[path] = s.fit
  end
  return costs
end

-- The copy engines' cost per operation, one way and both ways (cuda.bandwidth.op_cost), printed.
local function run_op_cost(dev, args)
  local progress <close> = cli.progress(#bandwidth.OP_MODES * #bandwidth.OP_COUNTS, "copying in chunks")
  local costs = bandwidth.op_cost(dev, {bytes = args.op_cost, runs = args.runs, warmup = args.warmup, progress = progress})
  progress:done()
  print()
  print(("--- Copy-engine cost per operation: %s each way as 1..64 copies, the slope of time against copies ---")
        :format(cli.format_bytes(costs.bytes)))
  print(bandwidth.format_op_costs(costs))
  print("The same copies as one cuda.copy_batch a direction, the cost per batched segment:")
  print(bandwidth.format_op_costs(costs.batch))
  return costs
end

-- The kernel's time: measured with --overlap (the pipeline's limits), else the slower copy's time (a
-- balanced pipeline). A queued chunk's cost: the measured cost per operation both ways (a pair), else
-- the limits' one-way cost of a copy (--overlap), else the "both" fit's fixed cost.
local function predict(sweep, bytes, measured, op_costs)
  local costs, why = pipeline_costs(sweep, bytes)
  print()
  if not costs then print("(no prediction: " .. why .. ")") return nil end
  costs.kernel_ms = measured and measured.kernel_ms
    or math.max(bandwidth.copy_ms(costs.h2d, bytes), bandwidth.copy_ms(costs.d2h, bytes))
  local pair = op_costs and op_costs.both
  costs.queued_us = pair and pair.us or measured and measured.copy_cost_us
  local source = not (costs.queued_us and costs.queued_us > 0) and "the fit's fixed cost"
                 or pair and "a pair's measured cost per operation" or "the limits' one-way cost of a copy"
  local best = bandwidth.best_chunks(costs)
  print(("--- Predicted overlap pipeline, %s each way, kernel %.3f ms (%s), %.1f us a chunk (%s) ---"):format(
    cli.format_bytes(bytes), costs.kernel_ms, measured and "measured" or "assumed: the slower copy",
    bandwidth.chunk_cost_us(costs), source))
  print(("Best chunk count: %d, %.3f ms (closed form N* = %s)"):format(best.chunks, best.ms,
    best.continuous and ("%.1f"):format(best.continuous) or "n/a"))
  for _, n in ipairs{4, 8, 16, 24, 32, 48, 64} do
    io.write(("  N=%d: %.3f ms"):format(n, bandwidth.pipeline_ms(costs, n)))
  end
  print()
  best.kernel_ms, best.kernel_assumed, best.queued_us, best.queued_from = costs.kernel_ms, not measured,
    costs.queued_us, source
  return best
end

-- streaming_overlap's problem (vector_scale on --elements float32) searched by cuda.overlap; the best
-- copy-engine schedule is checked against the sequential schedule's output, element for element.
local function run_overlap(dev, args)
  local overlap = require "cuda.overlap"
  local kernel = require("cuda.kernels").load(dev, "vector_scale.cu", "vector_scale")
  local p = overlap.pipeline(dev, {n = args.elements, kernel = kernel, args = {cuda.f32(2.5)}, streams = 16})
  p.buffers.h_in:view("float32"):random(0, 100, os.time() % 2^31)
  local limits = p:limits()
  local _, sequential = p:measure(p:bind(overlap.schedule(p.n, {kind = "sequential"})), {runs = 1})
  p.buffers.h_out:fill(0xFF)
  sequential(p.main)
  p.main:sync()
  local expected = cuda.HostMemoryResource():allocate(p.bytes):view("float32"):copy(p.buffers.h_out:view("float32"))
  local list = overlap.candidates()
  local found = overlap.search(p, {candidates = list, progress = cli.progress(#list, "searching schedules")})
  local best = found.copy_engines
  local v = p:verify(best.fn, expected, 0, 0)
  if best.graph then best.graph:close() end
  return {kernel_ms = limits.kernel.median, copy_cost_us = limits.copy_cost_us, chunks = #best.sched.chunks,
          name = best.sched.name, ms = best.stats.median, verified = v.passed, tried = best.tried}
end

local function print_overlap(searched, predicted)
  print()
  print(("--- Searched (streaming_overlap --auto, %d copy-engine schedules tried) ---"):format(searched.tried))
  print(("Best copy-engine schedule: %s, %d chunks, %.3f ms; verification: %s"):format(searched.name,
    searched.chunks, searched.ms, searched.verified and "PASSED" or "FAILED"))
  if predicted then
    print(("Predicted best chunk count %d (%.3f ms) against searched %d (%.3f ms)"):format(predicted.chunks,
      predicted.ms, searched.chunks, searched.ms))
  end
end

-- bench/bandwidth_ref's times for the pinned copy-engine series: cudalua / C at every size, each ratio
-- with its uncertainty (the two medians' 95% intervals) and a flag where it is outside it; and the
-- reference's cost per operation (and per batched segment) beside cudalua's.
local function compare_with_reference(args, sweep, op_costs)
  local words = {"--sizes", table.concat(sweep.sizes, ","), "--runs", args.runs, "--warmup", args.warmup,
                 "--device", args.device}
  if op_costs then table.move({"--op-cost", op_costs.bytes}, 1, 2, #words + 1, words) end
  local figures, header = bench.reference(args.reference, words, bench.REFERENCE_COLUMNS, bench.REFERENCE_SPREAD)
  if not figures then fail(header) end
  print()
  print(("--- Against the raw C driver API (%s), same run: time ratio cudalua / C, \u{b1} its 95%% uncertainty ---")
        :format(args.reference))
  if header[1] then print(header[1]) end
  local rows = {}
  for _, s in ipairs(sweep.series) do
    if s.engine == "copy" and (s.resource == "pinned" or s.resource == "device") then
      for _, p in ipairs(s.points) do
        local key = ("%s_%d"):format(s.path, p.bytes)
        rows[#rows + 1] = {label = ("%-6s %10d"):format(s.path, p.bytes), key = key,
                           ours = {median = p.ms * 1e3, ci_lo = p.ci_lo_ms * 1e3, ci_hi = p.ci_hi_ms * 1e3},
                           theirs = figures[key] or fail(("%s did not report %s"):format(args.reference, key))}
      end
    end
  end
  local flagged
  rows, flagged = bench.print_ratios(rows, {columns = {"path   bytes", "cudalua us", "raw C us"}, width = 17,
                                            below = "cudalua faster", above = "cudalua slower"})
  for _, row in ipairs(rows) do
    row.cudalua_us, row.c_us, row.label, row.ours, row.theirs = row.ours.median, row.theirs.median
  end
  local out = {program = args.reference, rows = rows, flagged = flagged}
  if op_costs then
    out.op_costs, out.batch_costs = bandwidth.reference_op_costs(figures, "ops"), bandwidth.reference_op_costs(figures, "batch")
    print()
    print("--- Cost per operation: cudalua against raw C (separate cuMemcpyAsync), and batched segments ---")
    print(bandwidth.format_op_costs(op_costs, out.op_costs, "raw C"))
    if out.batch_costs then
      print("One cuda.copy_batch a direction, against raw C's one cuMemcpyBatchAsync:")
      print(bandwidth.format_op_costs(op_costs.batch, out.batch_costs, "raw C"))
    else
      for _, line in ipairs(header) do if line:find("skip batch", 1, true) then print(line) end end
    end
  end
  return out
end

-- The peer matrix (cuda.bandwidth.peer_matrix), one table per mode, and the host copies beside it.
local function run_matrix(args)
  local ids = args.devices or {}
  if not args.devices then
    for id = 0, cuda.device_count() - 1 do ids[#ids + 1] = id end
    ids[1] = ids[1] or 0   -- no device: cuda.Device(0) says why
  end
  local devices = {}
  for i, id in ipairs(ids) do
    devices[i] = cuda.Device(id)
    print(("GPU %d: %s (sm_%s)"):format(id, devices[i].name, devices[i].arch))
  end
  local engines = args.engines or bandwidth.ENGINES
  local bytes = args.sizes and math.max(table.unpack(args.sizes)) or bandwidth.MATRIX_BYTES
  local progress <close> = cli.progress(#bandwidth.matrix_modes(engines) * #ids * #ids + #ids, "copying")
  local matrix = bandwidth.peer_matrix(devices, {bytes = bytes, engines = engines, runs = args.runs,
                                                 warmup = args.warmup, progress = progress})
  progress:done()
  if #ids == 1 then
    print(cuda.device_count() == 1 and "One GPU: the matrix is 1x1, a copy within it; peer pairs need two GPUs."
          or "One GPU listed: the matrix is 1x1, a copy within it; list two or more for peer pairs.")
  end
  for _, mode in ipairs(matrix.modes) do
    print(("\n--- %s, GB/s each way (%s, median of %d, every copy verified) ---"):format(mode.name,
      cli.format_bytes(bytes), args.runs))
    print(bandwidth.format_matrix(matrix, mode))
  end
  print("(row: the GPU that runs the copies; column: its peer. read: row <- column; write: row -> column;")
  print(" both ways: the column runs the opposite copy at once. n/a: no peer access for SM copies)")
  print(("\n--- Host <-> GPU, pinned, copy engines, GB/s each way (%s) ---"):format(cli.format_bytes(bytes)))
  print(bandwidth.format_host(matrix))
  local run = results.new("bandwidth", {device = devices[1], argv = arg})
  for _, item in ipairs(bandwidth.matrix_points(matrix)) do
    local p = item[2]
    if p.gbps then run:add(item[1], "GB/s", bandwidth.rates(p), {median = p.gbps, bytes = p.bytes, verified = p.verified}) end
  end
  run:finish(args, matrix.failures == 0, {matrix = matrix})
  if matrix.failures > 0 then fail(("%d check(s) FAILED."):format(matrix.failures)) end
  print("\nEvery copy verified.")
  os.exit(0)
end

local args = parse_args()
if args.mpi then os.exit(require("cuda.mpi_bench").run(args) and 0 or 1) end
if args.matrix then run_matrix(args) end
args.engines = args.engines or {"copy"}
local dev = cuda.Device(args.device)
dev:set_current()
print(("Device: %s (sm_%s)"):format(dev.name, dev.arch))
local sweep = run_sweep(dev, args)
local op_costs = args.op_cost and run_op_cost(dev, args) or nil
local searched = args.overlap and run_overlap(dev, args) or nil
local predicted = predict(sweep, args.elements * 4, searched, op_costs)
if searched then print_overlap(searched, predicted) end
local reference = args.reference and compare_with_reference(args, sweep, op_costs) or nil
-- Every size of every series a result in GB/s, with each timed copy's rate; the sweep drawn as SVG.
local run = results.new("bandwidth", {device = dev, argv = arg})
local lines = {}
for _, s in ipairs(sweep.series) do
  local line = {name = bandwidth.series_name(s), points = {}}
  for _, p in ipairs(s.points or {}) do
    run:add(("%s %d"):format(line.name, p.bytes), "GB/s", bandwidth.rates(p), {median = p.gbps, bytes = p.bytes,
      verified = p.verified})
    line.points[#line.points + 1] = {p.bytes, p.gbps}
  end
  if #line.points > 0 then lines[#lines + 1] = line end
end
if args.svg then
  results.write_text(args.svg, require("cuda.svg").lines(lines, {title = "Copy bandwidth on " .. dev.name,
    x_label = "bytes per copy", y_label = "GB/s", x_base = 4, y_log = true, x_format = cli.format_bytes}))
end
if op_costs then
  for _, mode in ipairs(bandwidth.OP_MODES) do
    local c = op_costs[mode]
    if c then run:add(("cost per operation %s"):format(mode), "us", {c.us}, {median = c.us, se = c.se}) end
    local b = op_costs.batch[mode]
    if b then run:add(("cost per batched segment %s"):format(mode), "us", {b.us}, {median = b.us, se = b.se}) end
  end
end
local op_failures = op_costs and op_costs.failures or 0
run:finish(args, sweep.failures + op_failures == 0 and (not searched or searched.verified), {sizes = sweep.sizes,
  series = sweep.series, failures = sweep.failures, op_costs = op_costs, predicted = predicted, searched = searched,
  reference = reference})
local failed = sweep.failures + op_failures + (searched and not searched.verified and 1 or 0)
if failed > 0 then fail(("%d check(s) FAILED."):format(failed)) end
print("\nEvery copy verified.")
