-- cuda.bench.cli: the command line of `cudalua bench FILE.lua` (NVBench's options).
-- SPDX-License-Identifier: MIT
local cli = require "cuda.cli"
local json = require "cuda.json"
local harness = require "cuda.bench.harness"
local criteria = require "cuda.bench.criteria"
local runner = require "cuda.bench.run"
local output = require "cuda.bench.output"

local M = {}

-- The parser: with a file argument for `cudalua bench FILE.lua`, without
-- one for a benchmark file run directly (`cudalua bench_example`).
function M.parser(name, description, with_file)
  local parser = cli.parser(name, description)
    :usage(with_file and ("Usage: cudalua %s FILE.lua [options]"):format(name) or ("Usage: cudalua %s [options]"):format(name))
  if with_file then parser:argument("file", "The Lua file that registers the benchmarks.") end
  M.options(parser)
  return parser
end

function M.options(parser)
  parser:flag("-l --list", "List the devices and benchmarks (their axes) without running them.")
  parser:option("-b --benchmark", "Run only this benchmark (name or index from --list); repeatable.")
    :count("*"):argname("NAME")
  parser:option("-d --devices", "Device ids to run on: all or a list such as 0,1.", "0"):argname("IDS")
  parser:option("-a --axis", "Override an axis: 'Name=v', 'Name=[v1,v2]', 'Name=[start:stop:step]', " ..
    "'Bytes[pow2]=[16:28:4]' (exponents); repeatable.")
    :count("*"):argname("SPEC")
  parser:option("--min-samples", "Least number of samples per state (default 10)."):convert(cli.positive_integer)
    :argname("N")
  parser:option("--max-noise", "stdrel: stop when the noise is at most this percentage (default 0.5).")
    :convert(tonumber):argname("PERCENT")
  parser:option("--min-time", "stdrel: least seconds of GPU time before stopping (default 0.5).")
    :convert(tonumber):argname("SECONDS")
  parser:option("--timeout", "Seconds per state at most (default 15).")
    :convert(tonumber):argname("SECONDS")
  parser:option("--stopping-criterion", "stdrel, entropy or sample_count.")
    :convert(cli.choice(criteria.NAMES)):argname("NAME")
  parser:option("--throttle-threshold", "Discard samples below this percentage of the maximum SM clock (default 75; 0: off).")
    :convert(tonumber):argname("PERCENT")
  parser:option("--l2-flush", "Bytes written before each cold sample, in L2 sizes (default 2; NVBench's is 1; 0: no flush).")
    :convert(tonumber):argname("FACTOR")
  parser:flag("--run-once", "One sample per state, no warm-up, no batch (for profilers).")
  parser:flag("--disable-blocking-kernel", "Queue the work without holding the stream.")
  parser:option("--json", "Write the results as NVBench JSON to FILE."):argname("FILE")
  parser:option("--csv", "Write the results as CSV to FILE."):argname("FILE")
  parser:option("--md", "Also write the markdown to FILE."):argname("FILE")
  parser:option("--svg", "Draw each benchmark's times against its axes and each state's sample histogram "
    .. "as SVG files in DIR (made if need be)."):argname("DIR")
  parser:flag("-q --quiet", "No progress log on stderr.")
end

-- Parses argv and runs: the benchmarks of args.file, or registered (a
-- list) when a benchmark file runs itself. name and description: the
-- command's, for --help.
function M.main(argv_in, name, description, registered)
  local parser = M.parser(name, description, registered == nil)
  local args = cli.parse(parser, argv_in)
  local function die(text, status)
    io.stderr:write("bench: ", text, "\n")
    os.exit(status or 1)
  end

  for _, what in ipairs{"json", "csv", "md"} do
    local path = args[what]
    if path == "stdout" then args[what] = "/dev/stdout" elseif path == "stderr" then args[what] = "/dev/stderr" end
    if args[what] then
      local ok, why = json.can_write(args[what])
      if not ok then die(("--%s: %s"):format(what, why), 2) end
    end
  end
  if args.svg then
    local ok, why = require("cuda.bench.svg").can_write(args.svg)
    if not ok then die("--svg: " .. why, 2) end
  end
  for _, what in ipairs{"max_noise", "min_time", "timeout", "throttle_threshold", "l2_flush"} do
    local v = args[what]
    if v ~= nil and (v ~= v or v < 0 or v == math.huge) then die(("--%s must be a number >= 0"):format(what:gsub("_", "-")), 2) end
  end

  local benchmarks = registered
  if not benchmarks then
    -- Load the file: its benchmarks are registered as it runs.
    local count_before = #harness.registry
    local chunk, why = loadfile(args.file)
    if not chunk then die(why, 2) end
    harness.loading = true
    local ok, err = pcall(chunk)
    harness.loading = false
    if not ok then die(("%s: %s"):format(args.file, tostring(err))) end
    benchmarks = table.move(harness.registry, count_before + 1, #harness.registry, 1, {})
  end
  if #benchmarks == 0 then die(("%s registers no benchmark (bench.register(fn))"):format(args.file or name), 2) end

  -- Select with -b.
  if #args.benchmark > 0 then
    local chosen = {}
    for _, want in ipairs(args.benchmark) do
      local found
      for i, b in ipairs(benchmarks) do
        if b.name == want or tostring(i - 1) == want then found = b end
      end
      if not found then die(("-b %s: no such benchmark (see --list)"):format(want), 2) end
      chosen[#chosen + 1] = found
    end
    benchmarks = chosen
  end

  -- Devices.
  local cuda = require "cuda"
  local devices, device_count = {}, 0
  do
    local okc, n = pcall(cuda.device_count)
    device_count = okc and n or 0
  end
  local wanted = {}
  if args.devices == "all" then
    for i = 0, device_count - 1 do wanted[#wanted + 1] = i end
  else
    local list, bad = cli.integer_list((args.devices:gsub("(%d+)", function(d) return tostring(tonumber(d) + 1) end)))
    if not list then die("--devices: " .. tostring(bad), 2) end
    for _, i in ipairs(list) do wanted[#wanted + 1] = i - 1 end
  end
  local gpu_work = false
  for _, b in ipairs(benchmarks) do gpu_work = gpu_work or not b.is_cpu_only end
  if device_count == 0 and gpu_work and not args.list then
    local _, why = cuda.is_available()
    die(("no CUDA device to run on (%s); only cpu-only benchmarks can run without one"):format(tostring(why)), 2)
  end
  for _, id in ipairs(wanted) do
    if device_count > 0 then
      if id >= device_count then die(("--devices: no device %d (%d found)"):format(id, device_count), 2) end
      devices[#devices + 1] = cuda.Device(id)
    end
  end

  if args.list then
    print("# Devices\n")
    for _, dev in ipairs(devices) do print(("* [%d] %s"):format(dev.id, dev.name)) end
    print("\n# Benchmarks\n")
    for i, b in ipairs(benchmarks) do
      print(("* [%d] %s"):format(i - 1, b.name))
      for _, axis in ipairs(b.axes) do
        local shown = {}
        for j in ipairs(axis.values) do shown[j] = require("cuda.bench.axes").display(axis, j) end
        print(("  * %s : %s%s = [%s]"):format(axis.name, axis.kind, axis.flags ~= "" and (" (" .. axis.flags .. ")") or "",
          table.concat(shown, ", ")))
      end
    end
    os.exit(0)
  end

  local okp, plan = pcall(runner.plan, benchmarks, args.axis, devices)
  if not okp then die(tostring(plan), 2) end

  local params = {}
  if args.max_noise then params["max-noise"] = args.max_noise / 100 end
  if args.min_time then params["min-time"] = args.min_time end
  local l2 = tonumber(os.getenv("CUDALUA_BENCH_L2_BYTES") or "")
  local results, failures = runner.run(plan, {
    min_samples = args.min_samples, timeout = args.timeout, criterion = args.stopping_criterion,
    criterion_params = next(params) and params or nil,
    throttle_threshold = args.throttle_threshold and args.throttle_threshold / 100 or nil,
    run_once = args.run_once or nil, no_blocking = args.disable_blocking_kernel or nil, l2_bytes = l2, l2_flush = args.l2_flush,
    log = args.quiet and function() end or nil,
  })

  local by_id = {}
  for _, dev in ipairs(devices) do by_id[dev.id] = dev end
  local md = output.markdown(results, by_id)
  io.stdout:write(md, "\n")
  io.stdout:flush()
  local function write(what, text)
    local okw, werr = pcall(function()
      if args[what] == "/dev/stdout" then io.stdout:write(text); return end
      local f <close> = assert(io.open(args[what], "w"))
      assert(f:write(text))
    end)
    if not okw then io.stderr:write(("bench: --%s: %s (the results are above)\n"):format(what, tostring(werr))) end
  end
  if args.md then write("md", md .. "\n") end
  if args.csv then write("csv", output.csv(results)) end
  if args.svg then
    local okw, werr = pcall(require("cuda.bench.svg").write, results, args.svg)
    if not okw then io.stderr:write(("bench: --svg: %s (the results are above)\n"):format(tostring(werr))) end
  end
  if args.json then
    local argv = {"cudalua", name}
    for _, a in ipairs(argv_in) do argv[#argv + 1] = a end
    write("json", json.encode(output.json_document(results, devices, argv, args.json), {indent = 2}) .. "\n")
  end
  if failures > 0 then
    io.stderr:write(("bench: %d state(s) failed (see 'Fail:' above)\n"):format(failures))
    os.exit(1)
  end
end

return M
