-- Host cost of cuda.launch, copy_to and record against the raw C driver API
-- SPDX-License-Identifier: MIT
--
-- Per call, what issuing work costs the host: cuda.launch (no, four typed, four plain, four
-- by-size parameters), a 4 KiB pinned -> device copy_to, Stream:record, graph replays (100
-- launches: host and GPU time against direct launches; 1000: host per launch) and a no-op C call.
-- --reference bench/launch_ref times the raw driver API by the same method (bench/README.md: both
-- pinned to one CPU, warm-up, then per repeat sync and time a batch of B calls; median, min, p90):
-- ratios, and each call against the Lua floor (the no-op call plus the C call), PASS or FAIL at 1.10.
local cuda = require "cuda"
local cli = require "cuda.cli"
local bench = require "cuda.bench"
local results = require "cuda.results"
local json = require "cuda.json"

local DEFAULT_REPEATS, DEFAULT_BATCH, MAX_BATCH, WARMUP_BATCHES = 200, 100, 500, 10
local GRAPH_LAUNCHES = 100    -- launches captured in the graph, and direct launches compared
local BIG_GRAPH_LAUNCHES, BIG_GRAPH_TARGET = 1000, 0.2   -- per launch: graph replay / direct launch
local SMALL_COPY_BYTES, EMPTY4_ELEMENTS = 4096, 1024   -- the copy's bytes; n passed to empty4 (it touches nothing)
-- The project's targets: cudalua / C for launches; cudalua / (no-op C call + C) for floor = true rows
local LAUNCH_TARGET, FLOOR_TARGET = 1.15, 1.10

-- Each figure: its key in launch_ref's output and its operation's, label and unit; target, floor:
-- held to LAUNCH_TARGET, FLOOR_TARGET; gpu: GPU time of that many calls, else host time per call
-- in batches of --batch, or of the "graph" or "big_graph" size.
local FIGURES = {
  {key = "launch_empty", label = "cuda.launch, no parameters", unit = "us", target = true, floor = true},
  {key = "launch_4params", label = "cuda.launch, 4 parameters", unit = "us", target = true, floor = true},
  {key = "launch_4params_typed", label = "  plain values by C type", unit = "us", target = true, floor = true,
   reference = "launch_4params"},
  {key = "launch_4params_sized", label = "  types unknown, by size", unit = "us", target = true, floor = true,
   reference = "launch_4params"},
  {key = "memcpy_htod_4k", label = "copy_to, 4 KiB pinned -> device", unit = "us", floor = true},
  {key = "event_record", label = "Stream:record(event)", unit = "us", floor = true},
  {key = "event_record_local", label = "  method in a local: record(s, ev)", unit = "us", floor = true,
   reference = "event_record"},
  {key = "lua_floor", label = "no-op C function, from a Lua loop", unit = "us", ours = true},
  {key = "graph100_replay_host", label = "Graph:launch, 100 launches (host)", unit = "us", batch = "graph"},
  {key = "graph100_gpu_ms", label = "graph of 100 launches (GPU)", unit = "ms", gpu = 1},
  {key = "direct100_gpu_ms", label = "100 direct launches (GPU)", unit = "ms", gpu = GRAPH_LAUNCHES},
  {key = "graph1000_host", label = "graph replay of 1000 launches (host, per launch)", unit = "us", ours = true,
   batch = "big_graph"},
}

local COLUMNS = {"median", "min", "p90"}   -- each reference figure's numbers, as launch_ref prints them
local FIGURE_KEYS, REFERENCE_KEYS = {}, {}   -- every figure; those launch_ref reports too
for i, f in ipairs(FIGURES) do
  FIGURE_KEYS[i] = f.key
  if not f.ours and not f.reference then table.insert(REFERENCE_KEYS, f.key) end
end
local DIGITS = {us = 3, ms = 4}   -- decimals printed per unit

local function fail(message) io.stderr:write("launch_cost: ", message, "\n"); os.exit(1) end

local function parse_options(argv)
  local parser = cli.parser("launch_cost", results.description())
  parser:option("--reference", "bench/launch_ref: run it and print cudalua / C ratios."):argname("PROGRAM")
  parser:option("--repeats", "Timed batches per figure.", tostring(DEFAULT_REPEATS)):convert(cli.positive_integer)
  parser:option("--batch", ("Calls per timed batch (1..%d); graph replays are timed in batches of " ..
    "max(1, batch // 10)."):format(MAX_BATCH), tostring(DEFAULT_BATCH))
    :convert(cli.positive_integer_at_most(MAX_BATCH, "calls per batch"))
  parser:option("--device", "Device ordinal.", "0"):convert(cli.device_id)
  bench.add_cpu_option(parser)
  parser:option("--rounds", "Rounds in which cudalua and the reference take turns.", "5"):convert(cli.positive_integer)
  results.options(parser, {"json", "csv", "md"})
  return cli.parse(parser, argv)
end

-- Device memory from the default pool (launch_ref's cuMemAllocAsync), page-locked memory without a
-- pool (its cuMemHostAlloc); the small copies' bytes go to poisoned device memory.
local function make_buffers(dev, s)
  local device_mr, pinned_mr = dev.memory_resource, cuda.PinnedMemoryResource{pool = false}
  local b = {d_a = device_mr:allocate(EMPTY4_ELEMENTS * 4, s), d_b = device_mr:allocate(EMPTY4_ELEMENTS * 4, s),
    pinned_mr = pinned_mr, host_small = pinned_mr:allocate(SMALL_COPY_BYTES),
    dev_small = device_mr:allocate(SMALL_COPY_BYTES, s)}
  local host_bytes = b.host_small:view("uint8")
  for i = 1, SMALL_COPY_BYTES do host_bytes[i] = (i * 7 + 3) % 256 end
  b.dev_small:fill(0xa5, s)
  s:sync()
  return b
end

-- The operations measured, by figure; each issues `count` calls on s, from locals (registers, not upvalues).
local function operations(s, kernels, buffers)
  local cfg, scale, n = cuda.LaunchConfig{grid = 1, block = 32}, cuda.f32(2.5), cuda.u64(EMPTY4_ELEMENTS)
  local marker, op = s.device:create_event{timing = false}, {}   -- as launch_ref's CU_EVENT_DISABLE_TIMING
  function op.launch_empty(count)
    local launch, stream, config, kernel = cuda.launch, s, cfg, kernels.empty
    for _ = 1, count do launch(stream, config, kernel) end
  end
  local function launch4(k, x, y)   -- k(d_a, d_b, x, y)
    return function(count)
      local launch, stream, config, kernel, a, b, xx, yy = cuda.launch, s, cfg, k, buffers.d_a, buffers.d_b, x, y
      for _ = 1, count do launch(stream, config, kernel, a, b, xx, yy) end
    end
  end
  op.launch_4params = launch4(kernels.empty4, scale, n)
  op.launch_4params_typed = launch4(kernels.empty4, 2.5, EMPTY4_ELEMENTS)   -- float, unsigned long long by C type
  op.launch_4params_sized = launch4(kernels.empty4_sized, scale, n)
  function op.memcpy_htod_4k(count)
    local src, dst, stream = buffers.host_small, buffers.dev_small, s; for _ = 1, count do src:copy_to(dst, stream) end
  end
  function op.event_record(count) local stream, ev = s, marker; for _ = 1, count do stream:record(ev) end end
  -- without the method lookup (Stream's __index is a C function)
  function op.event_record_local(count) local r, a, b = s.record, s, marker; for _ = 1, count do r(a, b) end end
  -- The floor: Lua's rawequal, a C function that takes two values and returns one, as record does,
  -- and does next to nothing (two argument checks, one comparison): what any binding costs at least.
  function op.lua_floor(count) local f, a, b = rawequal, s, marker; for _ = 1, count do f(a, b) end end
  local function replay(launches, per)   -- issue(count): count // per replays of a graph of `launches`
    s:begin_capture()
    op.launch_4params(launches)
    local graph = s:end_capture()
    return function(count) local g, stream = graph, s; for _ = 1, count // per do g:launch(stream) end end
  end
  op.graph100_replay_host, op.graph1000_host = replay(GRAPH_LAUNCHES, 1), replay(BIG_GRAPH_LAUNCHES, BIG_GRAPH_LAUNCHES)
  op.graph100_gpu_ms, op.direct100_gpu_ms = op.graph100_replay_host, op.launch_4params
  return op
end

-- The device, its stream, the kernels' folder (for the reference), buffers, operations, events.
local function set_up(device_id)
  local dev = cuda.Device(device_id)   -- without a driver or GPU: one sentence, exit 2 (the interpreter's)
  local kernel_path = cuda.find_kernel("empty.cu")
  dev:set_current()
  local s = dev:create_stream{non_blocking = true}
  local source_file <close> = assert(io.open(kernel_path, "r"))
  local code = cuda.Program(source_file:read("a"), "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
  local buffers = make_buffers(dev, s)
  return {dev = dev, stream = s, kernels_dir = kernel_path:match("^(.*)/[^/]*$") or ".", buffers = buffers,
    -- empty4_sized: the same code without its source, the parameters' types unknown
    op = operations(s, {empty = code:get_kernel("empty"), empty4 = code:get_kernel("empty4"),
      empty4_sized = cuda.ObjectCode.from_data(code.code):get_kernel("empty4")}, buffers),
    gpu_events = {dev:create_event{timing = true}, dev:create_event{timing = true}}}
end

-- One round of every figure, by key, in FIGURES' order.
local function measure_ours(rig, repeats, batch, graph_batch)
  local counts = {warmup = WARMUP_BATCHES, repeats = repeats, events = rig.gpu_events}
  local sizes = {graph = graph_batch, big_graph = graph_batch * BIG_GRAPH_LAUNCHES}   -- us per launch for big_graph
  local figures = {}
  for _, f in ipairs(FIGURES) do
    figures[f.key] = f.gpu and bench.gpu_batches(rig.stream, rig.op[f.key], f.gpu, counts)
      or bench.host_batches(rig.stream, rig.op[f.key], sizes[f.batch] or batch, counts)
  end
  return figures
end

-- Runs launch_ref with our options: its figures by key, its header lines; a failure ends the script.
local function run_reference(path, options, kernels_dir)
  local figures, header = bench.reference(path, {"--repeats", options.repeats, "--batch", options.batch,
    "--device", options.device, "--kernels", kernels_dir, options.pinned and "--cpu", options.pinned}, COLUMNS)
  if not figures then fail(header) end
  for _, key in ipairs(REFERENCE_KEYS) do if not figures[key] then fail(path .. " did not report " .. key) end end
  return figures, header
end

-- The machine's speed drifts over seconds, so the reference and cudalua take turns, round after
-- round; each side's figure is its median over the rounds (bench.combine). The reference runs first
-- (a broken one fails early). Returns ours, the reference's (or nil), its header lines, our rounds.
local function measure_rounds(rig, options, graph_batch)
  local ours, theirs, header = {}, {}, nil
  for round = 1, options.rounds do
    if options.reference then theirs[round], header = run_reference(options.reference, options, rig.kernels_dir) end
    ours[round] = measure_ours(rig, options.repeats, options.batch, graph_batch)
  end
  return bench.combine(ours, FIGURE_KEYS, COLUMNS),
    options.reference and bench.combine(theirs, REFERENCE_KEYS, COLUMNS) or nil, header, ours
end

-- The small copies must have delivered their bytes, and the events measured GPU time.
local function verify(rig, ours)
  local b, s = rig.buffers, rig.stream
  local check = b.pinned_mr:allocate(SMALL_COPY_BYTES)
  local host_bytes, check_bytes = b.host_small:view("uint8"), check:view("uint8")
  check_bytes:fill(0)
  b.dev_small:copy_to(check, s)
  s:sync()
  local same, _, i = check_bytes:allclose(host_bytes, 0, 0)
  if not same then
    fail(("the 4 KiB copies are wrong: byte %d on the device is %d, expected %d"):format(i, check_bytes[i], host_bytes[i]))
  end
  for _, key in ipairs{"graph100_gpu_ms", "direct100_gpu_ms"} do
    if not (ours[key].min > 0) then fail(key .. ": the events measured no GPU time") end
  end
end

local function reference_row(reference, f) return reference and reference[f.reference or f.key] end

local function verdict(floor_ratio) return floor_ratio <= FLOOR_TARGET and "PASS" or "FAIL" end

-- ratios: cudalua / C for each figure the reference timed, missed: launches over the target;
-- floor_ratios: cudalua / (no-op C call + C) for the floor figures, floor_missed: over FLOOR_TARGET.
local function compare(ours, reference)
  local ratios, missed, floor_ratios, floor_missed = {}, {}, {}, {}
  for _, f in ipairs(FIGURES) do
    local theirs = reference_row(reference, f)
    if theirs and theirs.median > 0 then
      ratios[f.key] = ours[f.key].median / theirs.median
      if f.target and ratios[f.key] > LAUNCH_TARGET then missed[#missed + 1] = f.key end
      if f.floor then
        floor_ratios[f.key] = ours[f.key].median / (theirs.median + ours.lua_floor.median)
        if verdict(floor_ratios[f.key]) == "FAIL" then floor_missed[#floor_missed + 1] = f.key end
      end
    end
  end
  return {ratios = ratios, missed = missed, floor_ratios = floor_ratios, floor_missed = floor_missed}
end

local function print_header(rig, options, graph_batch, reference_header)
  local major, minor = cuda.driver_version()
  print(("launch_cost: %s (device %d, sm_%s), driver %d.%d, cudalua %s"):format(
    rig.dev.name, rig.dev.id, rig.dev.arch, major, minor, cuda.version))
  print(("%d rounds of %d repeats of batches of %d calls (graph replays: %d per batch) after %d " ..
    "warm-up batches; non-blocking stream; grid 1, block 32; %s"):format(options.rounds, options.repeats,
    options.batch, graph_batch, WARMUP_BATCHES, options.pinned and "pinned to CPU " .. options.pinned or "not pinned"))
  for _, line in ipairs(reference_header or {}) do print(line) end
  print("Each cell: median [min, p90]; microseconds per call, milliseconds for the GPU rows.")
  print()
end

local function print_row(...) print((("%-38s  %-26s  %-26s  %-21s  %s"):format(...):gsub("%s+$", ""))) end

local function print_table(ours, reference, compared)
  print_row("operation", "cudalua", reference and "raw C driver API" or "", reference and "ratio" or "",
    reference and "vs floor" or "")
  for _, f in ipairs(FIGURES) do
    local theirs, ratio, floor_ratio = reference_row(reference, f), compared.ratios[f.key],
      compared.floor_ratios[f.key]
    local over = ratio and f.target and ratio > LAUNCH_TARGET
    print_row(f.label .. ", " .. f.unit, bench.format_spread(ours[f.key], DIGITS[f.unit]),
      theirs and bench.format_spread(theirs, DIGITS[f.unit]) or "",
      ratio and ("%.2f"):format(ratio) .. (over and "  over the target" or "") or "",
      floor_ratio and ("%.2f %s"):format(floor_ratio, verdict(floor_ratio)) or "")
  end
  print()
end

local function graph_gain(f)   -- how many times longer 100 direct launches take than one replay
  local g = f.graph100_gpu_ms.median; return g > 0 and ("%.1fx"):format(f.direct100_gpu_ms.median / g) or "n/a"
end

local function print_notes(ours, reference, compared)
  local missed, floor_missed = compared.missed, compared.floor_missed   -- keys over the targets
  print(("On the GPU, 100 direct launches take %s the time of one replay of their graph%s.")
    :format(graph_gain(ours), reference and ("; with the raw C API %s"):format(graph_gain(reference)) or ""))
  -- A host that had to wait for queue space would run at the GPU's pace.
  if ours.graph100_replay_host.median * 1e-3 > 0.5 * ours.graph100_gpu_ms.median then
    print("Warning: a graph replay costs the host nearly its GPU time: the host may have " ..
      "waited on a full queue; try a smaller --batch.")
  end
  if reference then
    print(#missed == 0 and ("Launches are within the project's target of cudalua / C <= %.2f."):format(LAUNCH_TARGET)
      or ("Over the project's target of cudalua / C <= %.2f: %s."):format(LAUNCH_TARGET, table.concat(missed, ", ")))
  end
  print(("Typed packing: plain values by C type cost %.3f of typed scalars packed by size (the packing " ..
    "before types were known; target <= 1.05)."):format(ours.launch_4params_typed.median / ours.launch_4params_sized.median))
  print(("Per launch, replaying a graph of %d costs the host %.3f of a direct launch (target <= %.2f)."):format(
    BIG_GRAPH_LAUNCHES, ours.graph1000_host.median / ours.launch_4params.median, BIG_GRAPH_TARGET))
  if reference then
    local record = reference.event_record.median
    -- A sum, not a bound: the call's and the driver's work overlap a little in the processor.
    print(("A call from a Lua loop costs %.3f us on its own: with cuEventRecord's %.3f us in C, about %.2f of C " ..
      "for any binding of it."):format(ours.lua_floor.median, record, (record + ours.lua_floor.median) / record))
    print(("Against the Lua floor (that call plus the raw C call; target <= %.2f): %s."):format(FLOOR_TARGET,
      #floor_missed == 0 and "PASS, every call within it" or "FAIL for " .. table.concat(floor_missed, ", ")))
  end
end

-- Each figure with every batch of every round; its median the one printed (the median over the rounds).
local function write_outputs(options, rig, graph_batch, ours, rounds, reference, compared)
  local run = results.new("launch_cost", {device = rig.dev, argv = arg, columns = {"ratio", "vs_floor"}})
  for _, f in ipairs(FIGURES) do
    local samples = {}
    for _, round in ipairs(rounds) do table.move(round[f.key].raw, 1, #round[f.key].raw, #samples + 1, samples) end
    run:add(f.key, f.unit, samples, {label = f.label, median = ours[f.key].median, ratio = compared.ratios[f.key],
      vs_floor = compared.floor_ratios[f.key]})
  end
  local floor = reference and {target = FLOOR_TARGET, noop_us = ours.lua_floor.median, ratios = compared.floor_ratios,
    failed = json.array(compared.floor_missed), passed = #compared.floor_missed == 0} or nil
  run:finish(options, true, {repeats = options.repeats, batch = options.batch, graph_batch = graph_batch,
    rounds = options.rounds, cpu = options.pinned, warmup_batches = WARMUP_BATCHES, launch_target = LAUNCH_TARGET,
    units = {host = "us per call", gpu = "ms (keys ending in _gpu_ms)"},
    cudalua = ours, reference = reference, ratios = reference and compared.ratios or nil, floor = floor})
end

local function main(argv)
  local options = parse_options(argv)
  local graph_batch = math.max(1, options.batch // 10)   -- as in launch_ref.c
  local rig = set_up(options.device)
  options.pinned = bench.pin(options.cpu)   -- after the driver started its threads, as launch_ref
  local ours, reference, reference_header, rounds = measure_rounds(rig, options, graph_batch)
  verify(rig, ours)
  local compared = compare(ours, reference)
  print_header(rig, options, graph_batch, reference_header)
  print_table(ours, reference, compared)
  print_notes(ours, reference, compared)
  write_outputs(options, rig, graph_batch, ours, rounds, reference, compared)
end

main(arg)
