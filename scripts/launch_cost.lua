-- Host cost of cuda.launch, copy_to and record against the raw C driver API
--
-- Measures, per call, what issuing work costs the host through cudalua:
-- cuda.launch of an empty kernel with no parameters and with four, a 4 KiB
-- pinned -> device Buffer:copy_to, Stream:record, and the replay of a graph
-- of 100 launches (host cost, and GPU time against 100 direct launches).
-- With --reference bench/launch_ref it runs the raw driver-API program that
-- measures the same operations by the same method and prints the ratios.
--
-- Method (the same as bench/launch_ref.c, so the ratio is fair): warm up;
-- then for each of R repeats synchronize the stream, read cuda.clock(),
-- issue a batch of B calls, read the clock again and keep (t1 - t0) / B.
-- Report the median, min and 90th percentile over the repeats. B stays far
-- below the driver's launch queue depth, so the host never waits for the
-- GPU inside a batch.
local cuda = require "cuda"
local cli = require "cuda.cli"
local bench = require "cuda.bench"

local DEFAULT_REPEATS, DEFAULT_BATCH, MAX_BATCH = 200, 100, 500
local WARMUP_BATCHES = 10
local GRAPH_LAUNCHES = 100    -- launches captured in the graph, and direct launches compared
local SMALL_COPY_BYTES = 4096
local EMPTY4_ELEMENTS = 1024  -- n passed to empty4; the kernel touches nothing
local LAUNCH_TARGET = 1.15    -- the project's target for cudalua / C, launches

-- Each figure: its key in launch_ref's output, its label, and its unit.
local FIGURES = {
  {key = "launch_empty", label = "cuda.launch, no parameters", unit = "us", target = true},
  {key = "launch_4params", label = "cuda.launch, 4 parameters", unit = "us", target = true},
  {key = "memcpy_htod_4k", label = "copy_to, 4 KiB pinned -> device", unit = "us"},
  {key = "event_record", label = "Stream:record(event)", unit = "us"},
  {key = "graph100_replay_host", label = "Graph:launch, 100 launches (host)", unit = "us"},
  {key = "graph100_gpu_ms", label = "graph of 100 launches (GPU)", unit = "ms"},
  {key = "direct100_gpu_ms", label = "100 direct launches (GPU)", unit = "ms"},
}

-- --- options ------------------------------------------------------------------

local function batch_size(text)
  local n, why = cli.positive_integer(text)
  if n and n > MAX_BATCH then
    return nil, ("'%s' is too large: at most %d calls per batch"):format(text, MAX_BATCH)
  end
  return n, why
end

local parser = cli.parser("launch_cost",
  "Host cost per call of cuda.launch, Buffer:copy_to and Stream:record, and of replaying a " ..
  "graph of 100 launches, measured like the raw C driver API reference bench/launch_ref.")
parser:option("--reference", "Path to bench/launch_ref: run it and print cudalua / C ratios.")
  :argname("<path>")
parser:option("--repeats", "Timed batches per figure.", tostring(DEFAULT_REPEATS))
  :convert(cli.positive_integer)
parser:option("--batch", ("Calls per timed batch (1..%d); graph replays are timed in " ..
  "batches of max(1, batch // 10)."):format(MAX_BATCH), tostring(DEFAULT_BATCH))
  :convert(batch_size)
parser:option("--device", "Device ordinal.", "0"):convert(cli.device_id)
parser:option("--rounds", "Rounds in which cudalua and the reference take turns.", "5")
  :convert(cli.positive_integer)
parser:option("--json", "Also write the figures to this JSON file."):argname("<file>")
local args = cli.parse(parser, arg)

local GRAPH_BATCH = math.max(1, args.batch // 10)   -- as in launch_ref.c

local function fail(message)
  io.stderr:write("launch_cost: ", message, "\n")
  os.exit(1)
end

-- --- statistics: the same as ref_summarize in bench/ref.h ---------------------

-- p-th percentile of a sorted list, interpolating between the two nearest
-- ranks (numpy's default); pos is 0-based as in ref.h.
local function percentile(sorted, p)
  local pos = p / 100 * (#sorted - 1)
  local lo = math.floor(pos)
  if lo >= #sorted - 1 then return sorted[#sorted] end
  return sorted[lo + 1] + (pos - lo) * (sorted[lo + 2] - sorted[lo + 1])
end

local function summarize(samples)
  table.sort(samples)
  return {median = percentile(samples, 50), min = samples[1], p90 = percentile(samples, 90),
          max = samples[#samples]}
end

-- --- the reference --------------------------------------------------------------

-- Runs launch_ref with our options; returns its figures by key and its
-- header lines. Any failure of the reference ends the script.
local function run_reference(path, kernels_dir)
  local figures, header = bench.reference(path, {"--repeats", args.repeats, "--batch", args.batch,
    "--device", args.device, "--kernels", kernels_dir}, {"median", "min", "p90"})
  if not figures then fail(header) end
  for _, f in ipairs(FIGURES) do
    if not figures[f.key] then fail(("%s did not report %s"):format(path, f.key)) end
  end
  return figures, header
end

-- --- the device and what the timed loops use -----------------------------------

cuda.Device(args.device)   -- without a driver or GPU: one sentence, exit 2 (the interpreter's)

local kernel_path = cuda.find_kernel("empty.cu")
local kernels_dir = kernel_path:match("^(.*)/[^/]*$") or "."


local dev = cuda.Device(args.device)
dev:set_current()
local s = dev:create_stream{non_blocking = true}

local source_file = assert(io.open(kernel_path, "r"))
local source = source_file:read("a")
source_file:close()
local code = cuda.Program(source, "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
local k_empty, k_empty4 = code:get_kernel("empty"), code:get_kernel("empty4")
local cfg = cuda.LaunchConfig{grid = 1, block = 32}

-- Device memory from the device's default pool, as launch_ref allocates it
-- with cuMemAllocAsync; page-locked host memory without a pool, as
-- launch_ref's cuMemHostAlloc: the same kinds of memory on both sides.
local device_mr = dev.memory_resource
local d_a = device_mr:allocate(EMPTY4_ELEMENTS * 4, s)
local d_b = device_mr:allocate(EMPTY4_ELEMENTS * 4, s)
local scale, n = cuda.f32(2.5), cuda.u64(EMPTY4_ELEMENTS)
local pinned_mr = cuda.PinnedMemoryResource{pool = false}
local host_small = pinned_mr:allocate(SMALL_COPY_BYTES)
local dev_small = device_mr:allocate(SMALL_COPY_BYTES, s)
local marker = dev:create_event{timing = false}   -- as launch_ref's CU_EVENT_DISABLE_TIMING
local gpu_start = dev:create_event{timing = true}
local gpu_end = dev:create_event{timing = true}

-- The bytes the small copies carry, checked on the device afterwards.
local host_bytes = host_small:view("uint8")
for i = 1, SMALL_COPY_BYTES do host_bytes[i] = (i * 7 + 3) % 256 end
dev_small:fill(0xa5, s)
s:sync()

-- --- the operations measured ---------------------------------------------------
-- Each issues `count` calls on s. The values a loop uses are copied into
-- locals first, so the loop body reads registers, not upvalues.

local function launch_empty(count)
  local launch, stream, config, kernel = cuda.launch, s, cfg, k_empty
  for _ = 1, count do launch(stream, config, kernel) end
end

local function launch_empty4(count)
  local launch, stream, config, kernel = cuda.launch, s, cfg, k_empty4
  local a, b, sc, nn = d_a, d_b, scale, n
  for _ = 1, count do launch(stream, config, kernel, a, b, sc, nn) end
end

local function copy_small(count)
  local src, dst, stream = host_small, dev_small, s
  for _ = 1, count do src:copy_to(dst, stream) end
end

local function record_marker(count)
  local stream, ev = s, marker
  for _ = 1, count do stream:record(ev) end
end

s:begin_capture()
launch_empty4(GRAPH_LAUNCHES)
local graph = s:end_capture()

local function replay_graph(count)
  local g, stream = graph, s
  for _ = 1, count do g:launch(stream) end
end

-- --- measuring ---------------------------------------------------------------------

local clock = cuda.clock

-- Host microseconds per call over batches of `batch` calls. A full garbage
-- collection first, so that setup's garbage is not collected mid-batch;
-- garbage the calls themselves make is part of their cost.
local function time_host_per_call(issue, batch)
  local stream, repeats = s, args.repeats
  for _ = 1, WARMUP_BATCHES do
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
  return summarize(samples)
end

-- GPU milliseconds between events recorded around `count` calls, which
-- start on an idle stream. For direct launches this includes the time the
-- GPU waits for the host to submit the next launch: the time the work
-- takes on the GPU's timeline, the figure a graph replay improves.
local function time_gpu_ms(issue, count)
  local samples = {}
  for r = 1, WARMUP_BATCHES + args.repeats do
    s:sync()
    s:record(gpu_start)
    issue(count)
    s:record(gpu_end)
    gpu_end:sync()
    if r > WARMUP_BATCHES then samples[r - WARMUP_BATCHES] = gpu_end - gpu_start end
  end
  return summarize(samples)
end

local function measure_ours()
  return {
    launch_empty = time_host_per_call(launch_empty, args.batch),
    launch_4params = time_host_per_call(launch_empty4, args.batch),
    memcpy_htod_4k = time_host_per_call(copy_small, args.batch),
    event_record = time_host_per_call(record_marker, args.batch),
    graph100_replay_host = time_host_per_call(replay_graph, GRAPH_BATCH),
    graph100_gpu_ms = time_gpu_ms(replay_graph, 1),
    direct100_gpu_ms = time_gpu_ms(launch_empty4, GRAPH_LAUNCHES),
  }
end

local function median_of(list)
  table.sort(list)
  local n = #list
  return n % 2 == 1 and list[(n + 1) // 2] or (list[n // 2] + list[n // 2 + 1]) / 2
end

-- One figure per key over the rounds: the median of the rounds' medians,
-- the smallest min, the median p90.
local function combine(rounds)
  local out = {}
  for _, f in ipairs(FIGURES) do
    local medians, mins, p90s = {}, {}, {}
    for i, r in ipairs(rounds) do
      medians[i], mins[i], p90s[i] = r[f.key].median, r[f.key].min, r[f.key].p90
    end
    out[f.key] = {median = median_of(medians), min = math.min(table.unpack(mins)), p90 = median_of(p90s)}
  end
  return out
end

-- The machine's speed drifts between runs of a few seconds, so the
-- reference and cudalua take turns, round after round, and each side's
-- figure is its median over the rounds. The reference runs first: a broken
-- one fails before any time is spent here.
local ours, theirs, reference_header = {}, {}, nil
for round = 1, args.rounds do
  if args.reference then
    theirs[round], reference_header = run_reference(args.reference, kernels_dir)
  end
  ours[round] = measure_ours()
end
local results = combine(ours)
local reference = args.reference and combine(theirs) or nil

-- --- verification ------------------------------------------------------------------

-- The small copies must have delivered their bytes (the device buffer was
-- poisoned before them).
local check = pinned_mr:allocate(SMALL_COPY_BYTES)
local check_bytes = check:view("uint8")
check_bytes:fill(0)
dev_small:copy_to(check, s)
s:sync()
for i = 1, SMALL_COPY_BYTES do
  if check_bytes[i] ~= host_bytes[i] then
    fail(("the 4 KiB copies are wrong: byte %d on the device is %d, expected %d")
      :format(i, check_bytes[i], host_bytes[i]))
  end
end
for _, key in ipairs{"graph100_gpu_ms", "direct100_gpu_ms"} do
  if not (results[key].min > 0) then fail(("%s: the events measured no GPU time"):format(key)) end
end

-- --- report ----------------------------------------------------------------------

local function spread(fig, unit)
  local digits = unit == "ms" and 4 or 3
  return ("%." .. digits .. "f [%." .. digits .. "f, %." .. digits .. "f]")
    :format(fig.median, fig.min, fig.p90)
end

local major, minor = cuda.driver_version()
print(("launch_cost: %s (device %d, sm_%s), driver %d.%d, cudalua %s"):format(
  dev.name, dev.id, dev.arch, major, minor, cuda.version))
print(("%d rounds of %d repeats of batches of %d calls (graph replays: %d per batch) after %d " ..
  "warm-up batches; non-blocking stream; grid 1, block 32"):format(args.rounds, args.repeats,
  args.batch, GRAPH_BATCH, WARMUP_BATCHES))
if reference_header then
  for _, line in ipairs(reference_header) do print(line) end
end
print("Each cell: median [min, p90]; microseconds per call, milliseconds for the GPU rows.")
print()

local function print_row(...)
  print((("%-38s  %-26s  %-26s  %s"):format(...):gsub("%s+$", "")))
end
print_row("operation", "cudalua", reference and "raw C driver API" or "", reference and "ratio" or "")
local ratios, missed = {}, {}
for _, f in ipairs(FIGURES) do
  local mine = results[f.key]
  local theirs = reference and reference[f.key]
  local ratio_text = ""
  if theirs and theirs.median > 0 then
    ratios[f.key] = mine.median / theirs.median
    ratio_text = ("%.2f"):format(ratios[f.key])
    if f.target and ratios[f.key] > LAUNCH_TARGET then
      missed[#missed + 1] = f.key
      ratio_text = ratio_text .. "  over the target"
    end
  end
  local label = f.label .. (f.unit == "ms" and ", ms" or ", us")
  print_row(label, spread(mine, f.unit), theirs and spread(theirs, f.unit) or "", ratio_text)
end
print()

-- How many times longer 100 direct launches take on the GPU than one replay.
local function graph_gain(figs)
  local graph_ms = figs.graph100_gpu_ms.median
  if not (graph_ms > 0) then return "n/a" end
  return ("%.1fx"):format(figs.direct100_gpu_ms.median / graph_ms)
end
print(("On the GPU, 100 direct launches take %s the time of one replay of their graph%s.")
  :format(graph_gain(results), reference and ("; with the raw C API %s"):format(graph_gain(reference)) or ""))
-- A host that had to wait for queue space would run at the GPU's pace.
if results.graph100_replay_host.median * 1e-3 > 0.5 * results.graph100_gpu_ms.median then
  print("Warning: a graph replay costs the host nearly its GPU time: the host may have " ..
    "waited on a full queue; try a smaller --batch.")
end
if reference then
  if #missed == 0 then
    print(("Launches are within the project's target of cudalua / C <= %.2f."):format(LAUNCH_TARGET))
  else
    print(("Over the project's target of cudalua / C <= %.2f: %s."):format(LAUNCH_TARGET,
      table.concat(missed, ", ")))
  end
end
print("For scale, cuda.core on the H200 (the project's measurements): a launch from Python " ..
  "4.2-6.1 us, through the driver API 3.2-3.7 us; cuMemcpyHtoDAsync 2.2-2.3 us; " ..
  "cuEventRecord 1.3 us.")

if args.json then
  local json = require "cuda.json"
  json.write_file(args.json, {
    script = "launch_cost",
    device = {id = dev.id, name = dev.name, arch = dev.arch},
    driver_version = ("%d.%d"):format(major, minor),
    cudalua_version = cuda.version,
    repeats = args.repeats, batch = args.batch, graph_batch = GRAPH_BATCH,
    warmup_batches = WARMUP_BATCHES,
    units = {host = "us per call", gpu = "ms (keys ending in _gpu_ms)"},
    cudalua = results,
    reference = reference,
    ratios = reference and ratios or nil,
    launch_target = LAUNCH_TARGET,
  })
end
