-- The bundled scripts: help and option errors everywhere; on a GPU, small
-- runs whose verification lines, efficiency figures and JSON are checked.
local t = require "tap"
local cuda = require "cuda"
local json = require "cuda.json"
local cudalua = t.cudalua()
local nodrv = "CUDALUA_LIBCUDA=/nonexistent " .. cudalua

local scripts = {"device_query", "streaming_overlap", "memory_resources", "launch_cost", "copy_batch_cost"}
for _, name in ipairs(scripts) do
  local code, out = t.run(nodrv .. " " .. name .. " --help")
  t.is(code, 0, name .. " --help exits 0 without a GPU")
  t.like(out, "Usage: cudalua " .. name, name .. " --help shows the usage")
  code, out = t.run(nodrv .. " " .. name .. " --no-such-option")
  t.is(code, 2, name .. ": unknown option exits 2")
end

local code, out, err = t.run(nodrv .. " streaming_overlap --streams 0")
t.is(code, 2, "--streams 0 is a usage error")
t.like(err, "streams", "the error names the option")
code, out, err = t.run(nodrv .. " streaming_overlap --elements -5")
t.is(code, 2, "--elements -5 is a usage error")
code, out, err = t.run(nodrv .. " streaming_overlap --pinned sometimes")
t.is(code, 2, "--pinned sometimes is a usage error")
-- The timing options: each bad value a usage error that says why.
for _, case in ipairs{
  {"streaming_overlap --precision x", "bad value for %-%-precision: 'x' is not a percentage"},
  {"memory_resources --max-time 0", "bad value for %-%-max%-time"},
  {"launch_cost --cpu first", "'first' is not a CPU number, auto or none"},
} do
  code, out, err = t.run(nodrv .. " " .. case[1])
  t.is(code, 2, case[1] .. " is a usage error")
  t.like(err, case[2], case[1] .. ": the error says why")
end
code, out, err = t.run(nodrv .. " memory_resources --device=1.5")
t.is(code, 2, "--device 1.5 is a usage error")
t.like(err, "not a device id", "and says why")
for _, name in ipairs{"streaming_overlap", "memory_resources"} do
  code, out, err = t.run(nodrv .. " " .. name)
  t.is(code, 2, name .. " without a driver exits 2")
  t.like(err, "^cudalua: no NVIDIA driver found", name .. " says why in one sentence")
  t.is(select(2, err:gsub("\n", "")), 1, name .. ": one line")
end

-- --help describes each bundled script in the words of its --list line, and
-- names its options' values the same way everywhere.
local PLACEHOLDERS = {json = "FILE", csv = "FILE", trace = "FILE", svg = "FILE", reference = "PROGRAM"}
-- cudalua bench draws a picture per benchmark and state: its --svg names a folder
local FOLDERS = {bench = {svg = "DIR"}, bench_example = {svg = "DIR"}}
code, out = t.run(cudalua .. " --list")
local listed = {}
for name, line in out:gmatch("\n  (%S+) +([^\n]+)") do listed[#listed + 1] = {name, line} end
t.ok(#listed >= #scripts + 1, "--list shows every bundled script, compare too")
for _, entry in ipairs(listed) do
  local name, line = entry[1], entry[2]
  code, out = t.run(nodrv .. " " .. name .. " --help")
  local description = (out:match("^[^\n]*\n\n(.-)\n\n") or ""):gsub("%s+", " ")
  t.is(description, line, name .. ": --help's description is its --list line")
  local wrong = {}
  for option, placeholder in pairs(PLACEHOLDERS) do
    placeholder = FOLDERS[name] and FOLDERS[name][option] or placeholder
    local shown = out:match("\n +%-%-" .. option .. " (%S+)")
    if shown and shown ~= placeholder then wrong[#wrong + 1] = "--" .. option .. " " .. shown end
  end
  t.is(table.concat(wrong, ", "), "", name .. ": --json FILE, --reference PROGRAM, ... placeholders")
end
for _, name in ipairs{"streaming_overlap", "memory_resources", "launch_cost"} do
  code, out = t.run(nodrv .. " " .. name .. " --help")
  t.ok(out:find("--json FILE", 1, true) and out:find("--csv FILE", 1, true) and out:find("--md", 1, true),
       name .. ": --json FILE, --csv FILE and --md")
end

if not cuda.is_available() then
  t.skip("no CUDA device", 86)
  t.done()
end

local tmp = os.tmpname()
code, out, err = t.run(cudalua .. " streaming_overlap --elements 1000003 --streams 2,3 --runs 3 --warmup 1 --json " .. tmp)
t.is(code, 0, "streaming_overlap runs on a small odd size")
local _, passed = out:gsub("Verification: PASSED", "")
t.is(passed, 3, "sequential and both streamed configurations verified")
t.like(out, "2 streams: [%d.]+ ms %(\u{b1}[%d.]+%) %- speedup: [%d.]+x  efficiency: %d+%%", "streamed line with speedup and efficiency")
t.like(out, "Limit: +[%d.]+ ms", "limit line")
local f = io.open(tmp)
local report = f and json.decode(f:read("a"))
if f then f:close() end
local function group(doc, name)
  local list = {}
  for _, r in ipairs(doc and doc.results or {}) do if r.group == name then list[#list + 1] = r end end
  return list
end
t.ok(report and report.passed == true and #group(report, "configuration") == 3, "JSON has every result")
t.ok(report and report.details.limits.limit_ms > 0 and report.details.limits.h2d_gbps > 0, "JSON has the limits")
t.ok(report and report.results[2].efficiency > 0 and report.results[2].efficiency <= 1.05, "efficiency is a fraction of the limit")
t.is(report and report.details.elements, 1000003, "JSON records the size")
t.ok(report and report.details.precision == 0.01 and report.details.max_time == 1, "JSON: adaptive timing by default, 1% or 1 s")
t.ok(report and report.results[1].runs >= 6 and report.results[2].runs >= 6,
  "JSON: each configuration's runs, enough for the median's interval")

code, out = t.run(cudalua .. " streaming_overlap --elements 300000 --streams 2 --runs 4 --warmup 1 --precision 0 --quiet --json " .. tmp)
f = io.open(tmp)
report = f and json.decode(f:read("a"))
if f then f:close() end
t.ok(code == 0 and report and report.results[1].runs == 4 and report.results[2].runs == 4 and report.details.max_time == nil,
  "--precision 0: exactly --runs runs per configuration")

code, out = t.run(cudalua .. " streaming_overlap --elements 300000 --streams 2 --runs 2 --warmup 1 --graph --quiet")
t.is(code, 0, "--graph runs")
t.like(out, "Verification: PASSED", "--graph verified")

local trace = os.tmpname()
code, out = t.run(cudalua .. " streaming_overlap --elements 300000 --streams 4 --runs 2 --warmup 1 --timeline --trace " .. trace)
t.is(code, 0, "--timeline and --trace run")
t.like(out, "H2D", "the timeline shows copies")
f = io.open(trace)
local events = f and json.decode(f:read("a"))
if f then f:close() end
t.ok(events and (events.traceEvents or events)[1] ~= nil, "the trace is JSON with events")

-- --auto with a stand-in for bench/overlap_ref: every figure 2.0 ms, and
-- the arguments it was given written down.
local dir = t.tmpdir()
local fake = dir .. "/fake_ref"
t.write_file(fake, [[
#!/bin/sh
printf '%s\n' "$@" > "$(dirname "$0")/args"
while [ $# -gt 0 ]; do
  case $1 in --streams) streams=$2 ;; --chunks) chunks=$2 ;; esac
  shift
done
echo "# fake_ref"
for key in h2d d2h both kernel sequential; do echo "$key 2.0 1.0 3.0"; done
for k in $(echo "$streams" | tr , ' '); do echo "streams_$k 2.0 1.0 3.0"; done
for c in $(echo "$chunks" | tr , ' '); do echo "engines_$c 2.0 1.0 3.0"; echo "copies_$c 2.0 1.0 3.0"; done
]])
os.execute("chmod +x '" .. fake .. "'")
code, out, err = t.run(cudalua .. " streaming_overlap --elements 200000 --streams 2 --runs 2 --warmup 1 --auto --reference "
  .. fake .. " --json " .. tmp)
t.is(code, 0, "--auto --reference runs" .. (code ~= 0 and " (" .. err:gsub("%s+", " "):sub(-300) .. ")" or ""))
t.like(out, "Best copy%-engine schedule %(%-%-auto, %d+ tried%)", "--auto reports the best copy-engine schedule")
t.like(out, "Its copies alone %(%d+ each way, all at once, no kernel, no waits%): [%d.]+ ms", "and its copies alone")
_, passed = out:gsub("Verification: PASSED", "")
local _, failed = out:gsub("Verification: FAILED", "")
t.ok(passed >= 4 and failed == 0, "every --auto result verified, the copies alone too")
f = io.open(tmp)
report = f and json.decode(f:read("a"))
if f then f:close() end
local copies = report and report.details.auto and report.details.auto.copies_alone
t.ok(copies and copies.verified and copies.median_ms > 0 and copies.chunks >= 3, "JSON: the copies alone")
local rows = report and report.details.reference and report.details.reference.rows or {}
local by_key = {}
for _, r in ipairs(rows) do by_key[r.key] = r end
t.ok(by_key.h2d and by_key.sequential and by_key.streams_2, "JSON: limits, sequential and streams compared with C")
local engines = copies and by_key["engines_" .. copies.chunks]
t.ok(engines and engines.c_ms == 2.0 and math.abs(engines.ratio - engines.cudalua_ms / 2.0) < 1e-12
  and engines.cudalua_ms == report.details.auto.copy_engines.median_ms,
  "JSON: the best copy-engine schedule against C's engine schedule with as many chunks")
local args_given = t.read_file(dir .. "/args") or ""
t.like(args_given, "%-%-elements\n200000\n", "the reference gets the problem size")
t.like(args_given, "%-%-chunks\n" .. (copies and copies.chunks or "?") .. "\n", "and the best schedule's chunk count")
local kernels = args_given:match("%-%-kernels\n([^\n]+)")
t.ok(kernels and io.open(kernels .. "/vector_scale.cu") ~= nil, "and the folder of the kernel we compiled")
t.like(out, "%-%-%- Against the raw C driver API", "the comparison is printed")

-- Adaptive timing this short crashed LeakSanitizer at exit, every time, in
-- the sanitizer build (Makefile.am's ASAN_TLS says why).
code, out, err = t.run(cudalua .. " streaming_overlap --elements 200000 --streams 2 --warmup 1 --auto "
  .. "--precision 0.001 --max-time 0.01 --reference " .. fake)
t.is(code, 0, "--auto --reference with adaptive timing runs" .. (code ~= 0 and " (" .. err:gsub("%s+", " "):sub(-300) .. ")" or ""))

t.write_file(fake, "#!/bin/sh\necho 'h2d 2.0 1.0 3.0'\n")
code, out, err = t.run(cudalua .. " streaming_overlap --elements 100000 --streams 2 --runs 2 --warmup 1 --reference " .. fake)
t.is(code, 1, "a reference that leaves out a figure fails the run")
t.like(err, "did not report d2h", "and the error names the figure")
t.write_file(fake, "#!/bin/sh\necho broken >&2\nexit 4\n")
code, out, err = t.run(cudalua .. " streaming_overlap --elements 100000 --streams 2 --runs 2 --warmup 1 --reference " .. fake)
t.is(code, 1, "a failing reference fails the run")
t.like(err, "failed %(exit 4%)", "and the error says how")
os.execute("rm -rf '" .. dir .. "'")


code, out = t.run(cudalua .. " memory_resources --elements 4099")
t.is(code, 0, "memory_resources runs")
t.like(out, "All memory resource demos passed%.", "memory_resources verified")
local _, n = out:gsub("PASSED", "")
t.ok(n >= 2, "each demo reports PASSED")

code, out = t.run(cudalua .. " launch_cost --repeats 3 --rounds 1 --batch 10 --json " .. tmp)
t.is(code, 0, "launch_cost runs")
t.like(out, "grid 1, block 32; pinned to CPU %d+", "launch_cost pins itself by default")
f = io.open(tmp)
report = f and json.decode(f:read("a"))
if f then f:close() end
t.ok(report and math.type(report.details.cpu) == "integer", "JSON: the CPU it ran on")
code, out = t.run(cudalua .. " launch_cost --repeats 3 --rounds 1 --batch 10 --cpu none")
t.like(out, "grid 1, block 32; not pinned", "--cpu none does not pin")
-- --reference with a stand-in for bench/launch_ref whose calls take what puts cudalua's, as the run
-- above measured them, at a random ratio around the 1.10 target of the floor: the vs-floor figure
-- of each row is cudalua / (the reference's call + the no-op call), and the verdicts and the
-- summary follow it.
do
  local measured = {}
  for _, entry in ipairs(report and report.results or {}) do measured[entry.name] = entry.median end
  local dir = t.tmpdir()
  local stand_in = dir .. "/launch_ref"
  local reference, lines = {}, {"#!/bin/sh", "echo '# stand-in launch_ref'"}
  for _, key in ipairs{"launch_empty", "launch_4params", "memcpy_htod_4k", "event_record",
                       "graph100_replay_host", "graph100_gpu_ms", "direct100_gpu_ms"} do
    local us = math.max(1e-6, (measured[key] or 1) / (0.9 + 0.4 * math.random()) - (measured.lua_floor or 0))
    reference[key] = tonumber(("%.6f"):format(us))   -- as the stand-in prints it
    lines[#lines + 1] = ("echo '%s %.6f %.6f %.6f'"):format(key, reference[key], reference[key], reference[key])
  end
  t.write_file(stand_in, table.concat(lines, "\n") .. "\n")
  os.execute("chmod +x '" .. stand_in .. "'")
  code, out = t.run(cudalua .. " launch_cost --repeats 3 --rounds 2 --batch 10 --reference " .. stand_in ..
    " --json " .. tmp)
  t.is(code, 0, "launch_cost --reference runs")
  report = json.decode(t.read_file(tmp) or "null")
  local entries = {}
  for _, entry in ipairs(report and report.results or {}) do entries[entry.name] = entry end
  local floor = entries.lua_floor and entries.lua_floor.median
  local rows = {{"launch_empty", "launch_empty"}, {"launch_4params", "launch_4params"},
    {"launch_4params_typed", "launch_4params"}, {"launch_4params_sized", "launch_4params"},
    {"memcpy_htod_4k", "memcpy_htod_4k"}, {"event_record", "event_record"}, {"event_record_local", "event_record"}}
  local printed = {}
  for ratio, verdict in out:gmatch("  (%d+%.%d%d) (%u%u%u%u)\n") do printed[#printed + 1] = ratio .. " " .. verdict end
  local wrong, failed = {}, {}
  for i, row in ipairs(rows) do
    local key, entry = row[1], entries[row[1]]
    local want = entry and floor and entry.median / (reference[row[2]] + floor)
    if not (want and entry.vs_floor and math.abs(entry.vs_floor - want) <= 1e-9 * want) then
      wrong[#wrong + 1] = key
    elseif printed[i] ~= ("%.2f %s"):format(want, want > 1.10 and "FAIL" or "PASS") then
      wrong[#wrong + 1] = key .. " (printed " .. tostring(printed[i]) .. ")"
    end
    if want and want > 1.10 then failed[#failed + 1] = key end
  end
  table.sort(wrong)
  t.is(table.concat(wrong, ", "), "", "vs floor: cudalua / (C + the no-op call), and its verdict, on every row")
  local summary = out:match("Against the Lua floor %(that call plus the raw C call; target <= 1%.10%): ([^\n]*)")
  local named = {}
  for key in (summary or ""):gmatch("[%w_]+") do if entries[key] then named[#named + 1] = key end end
  table.sort(named)
  table.sort(failed)
  t.is(table.concat(named, " "), table.concat(failed, " "), "the summary names the rows over the target")
  t.is(report and report.details.floor and report.details.floor.passed, #failed == 0,
    "JSON: whether every row passed")
  os.execute("rm -rf '" .. dir .. "'")
end
-- cudalua-results/1: the envelope, every raw sample, CSV, Markdown, SVG
local function read_json(path)
  local text = t.read_file(path)
  local ok, doc = pcall(json.decode, text or "")
  return ok and doc or nil
end
local function lines_of(text)
  local list = {}
  for line in (text or ""):gmatch("([^\r\n]+)") do list[#list + 1] = line end
  return list
end
-- Whether doc has results and check(r) holds for each.
local function every_result(doc, check)
  local list = doc.results or {}
  for _, r in ipairs(list) do if not check(r) then return false end end
  return #list > 0
end
local csv, svg_file = os.tmpname(), os.tmpname()
code, out, err = t.run(cudalua .. " streaming_overlap --elements 300000 --streams 2,4 --runs 3 --warmup 1 --precision 0 --quiet --json "
  .. tmp .. " --csv " .. csv .. " --md --svg " .. svg_file)
t.is(code, 0, "--json --csv --md --svg run" .. err)
report = read_json(tmp) or {}
local dev0 = cuda.Device(0)
t.is(report.schema, "cudalua-results/1", "JSON: the schema")
t.ok(report.tool and report.tool.version == cuda.version and report.tool.lua == _VERSION, "JSON: cudalua's and Lua's versions")
local env = report.environment or {}
t.ok(env.device and env.device.name == dev0.name and env.device.uuid == dev0.uuid
  and env.device.pci_bus_id == dev0.pci_bus_id, "JSON: the device's name, UUID and PCI bus id")
t.like(env.driver_version or "", "^%d+%.%d+$", "JSON: the driver version")
t.like(env.command_line or "", "^cudalua streaming_overlap .*%-%-md", "JSON: the command line")
t.like(env.time_utc or "", "Z$", "JSON: the UTC time")
local configs = group(report, "configuration")
t.is(#configs, 3, "JSON: sequential, 2 and 4 streams")
local all_samples = #configs > 0
for _, r in ipairs(configs) do
  local sorted = table.move(r.samples, 1, #r.samples, 1, {})
  table.sort(sorted)
  all_samples = all_samples and #r.samples == 3 and r.n == 3 and r.median == sorted[2] and r.unit == "ms"
end
t.ok(all_samples, "JSON: each configuration has its 3 raw samples, their median, unit ms")
t.is(#group(report, "limit"), 5, "JSON: the 5 limits are results too")
t.is(report.passed, true, "JSON: passed")
local csv_lines = lines_of(t.read_file(csv))
t.like(csv_lines[1] or "", "^name,unit,n,median,", "CSV: the header")
t.is(#csv_lines, #(report.results or {}) + 1, "CSV: a line per result")
t.like(out, "\n| name +| unit +|", "--md: a Markdown table on stdout")
t.like(out, "\n| sequential +| ms +|", "--md: a row per result")
local svg_text = t.read_file(svg_file) or ""
t.like(svg_text, "^<svg ", "--svg writes an SVG document")
t.like(svg_text, "H2D", "--svg: the chart shows copies")
-- the chart is the fastest schedule's: 2 or 4 streams, a chunk each, 3 operations a chunk
local drawn = tonumber(svg_text:match(">(%d+) streams<") or 4)
t.ok(select(2, svg_text:gsub("<title>", "")) >= 3 * drawn,
     ("--svg: a rectangle per operation (%d streams drawn)"):format(drawn))
local a_json = tmp .. ".a"
os.rename(tmp, a_json)

code, out, err = t.run(cudalua .. " memory_resources --elements 4099 --bandwidth --bytes 1000000 --precision 0 --json " .. tmp
  .. " --csv " .. csv .. " --md")
t.is(code, 0, "memory_resources --bandwidth --json --csv --md runs" .. err)
report = read_json(tmp) or {}
t.is(report.schema, "cudalua-results/1", "memory_resources: the schema")
t.is(#(report.results or {}), 25, "memory_resources: a result per pair of resources")
t.ok(every_result(report, function(r)
  return r.unit == "GB/s" and #r.samples == 10 and r.verified == true and r.median > 0
end), "memory_resources: each pair's 10 rates, GB/s, verified")
t.ok(report.details and report.details.failures == 0 and report.details.bandwidth_gbps["pinned -> device"] > 0,
  "memory_resources: its own fields under details")
t.is(report.passed, true, "memory_resources: passed")
t.is(#lines_of(t.read_file(csv)), 26, "memory_resources: CSV header and 25 lines")
t.like(out, "\n| pinned %-> device +| GB/s +|", "memory_resources: --md table")

-- --reference with a stand-in for bench/copy_ref that counts its runs: the
-- rounds take turns, and each pair's figure is the median of its rounds.
local copy_dir = t.tmpdir()
local copy_fake, runs_file = copy_dir .. "/copy_fake", copy_dir .. "/copy_runs"
t.write_file(copy_fake, "#!/bin/sh\necho run >> '" .. runs_file .. "'\necho '# copy_fake'\n" ..
  "for k in h2d_pinned d2h_pinned h2d_pinned_pool d2h_pinned_pool h2d_pageable d2h_pageable d2d " ..
  "managed_prefetched_to_device; do echo \"$k 0.5 0.4 0.6 10 0.45 0.55\"; done\n")
os.execute("chmod +x '" .. copy_fake .. "'")
code, out, err = t.run(cudalua .. " memory_resources --elements 4099 --bandwidth --bytes 1000000 --rounds 3 --reference "
  .. copy_fake .. " --json " .. tmp)
t.is(code, 0, "memory_resources --reference --rounds 3 runs" .. err)
t.is(#lines_of(t.read_file(runs_file) or ""), 3, "the reference ran once a round")
t.like(out, "3 round%(s%) taking turns", "the comparison says how many rounds")
report = read_json(tmp) or {}
local compared = report.details and report.details.reference or {}
t.ok(#compared == 8 and compared[5].pair == "pageable -> device" and compared[5].c_gbps == 0.5
  and compared[5].cudalua_gbps > 0, "every compared pair, the reference's median over its rounds")
os.execute("rm -rf '" .. copy_dir .. "'")

code, out, err = t.run(cudalua .. " launch_cost --repeats 5 --batch 10 --rounds 2 --json " .. tmp .. " --csv " .. csv .. " --md")
t.is(code, 0, "launch_cost --json --csv --md runs" .. err)
report = read_json(tmp) or {}
t.is(report.schema, "cudalua-results/1", "launch_cost: the schema")
t.is(#(report.results or {}), 12, "launch_cost: a result per figure")
t.ok(every_result(report, function(r)
  return #r.samples == 10 and (r.unit == "us" or r.unit == "ms") and r.median > 0
end), "launch_cost: every batch of both rounds")
local launch = report.results and report.results[1] or {}
t.ok(report.details and launch.name == "launch_empty" and launch.median == report.details.cudalua.launch_empty.median,
  "launch_cost: the median printed, its own figures under details")
t.is(#lines_of(t.read_file(csv)), 13, "launch_cost: CSV")
t.like(out, "\n| launch_empty +| us +|", "launch_cost: --md table")

code, out, err = t.run(cudalua .. " device_query --json " .. tmp)
t.is(code, 0, "device_query --json runs" .. err)
report = read_json(tmp) or {}
t.ok(report.schema == "cudalua-results/1" and report.passed == true and #(report.results or {1}) == 0,
  "device_query: the envelope, no figures")
local first = report.details and report.details.devices[1] or {}
t.ok(first.name == dev0.name and first.properties.multiprocessor_count == dev0.properties.multiprocessor_count,
  "device_query: every device's properties under details")
t.is(#report.details.devices, cuda.device_count(), "device_query: every device")

code, out, err = t.run(cudalua .. " compare " .. a_json .. " " .. a_json)
t.is(code, 0, "compare of a run with itself exits 0" .. err)
t.like(out, "\nsequential +ms +[%d.]+ +[%d.]+ +1%.000\n", "compare: a run against itself, ratio 1")
t.like(out, "0 flagged", "compare: nothing flagged")
os.remove(tmp); os.remove(trace); os.remove(csv); os.remove(svg_file); os.remove(a_json)
t.done()
