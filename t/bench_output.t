-- What `cudalua bench` writes, against NVBench's (cuda-bench 0.3.0) printers:
-- the summaries (computed here again from the samples), the number forms of
-- fmt and nlohmann, the markdown document, the CSV table, the JSON keys and
-- their order, --jsonbin's files, the log lines, the options with their
-- per -b scoping and ranges, and cudalua compare on NVBench JSON. The
-- cpu-only runs need no driver; the cold ones run under the fake.
local t = require "tap"
local json = require "cuda.json"
local run = require "cuda.bench.run"
local output = require "cuda.bench.output"
local nvc = require "cuda.bench.compare"
local bcli = require "cuda.bench.cli"

t.seed()
local cudalua = t.cudalua()
local src = os.getenv("CUDALUA_SRCDIR") or "."
local dir = t.tmpdir()

-- Runs a group of checks; one that raises (a function missing) fails the
-- group and the others still run.
local function guard(name, fn)
  local ok, err = pcall(fn)
  if not ok then t.ok(false, name .. ": " .. tostring(err)) end
end

-- --- statistics, as NVBench's: computed here the plain way ------------------------
local function plain_stats(xs)
  local n, sum = #xs, 0
  for _, x in ipairs(xs) do sum = sum + x end
  local sorted = table.move(xs, 1, n, 1, {})
  table.sort(sorted)
  local mean = sum / n
  local sq = 0
  for _, x in ipairs(xs) do sq = sq + (x - mean) * (x - mean) end
  local stdev = n >= 5 and math.sqrt(sq / (n - 1)) or math.huge
  local function rank(p) return sorted[math.floor(p * (n - 1) + 0.5) + 1] end
  return {min = sorted[1], max = sorted[n], mean = mean, stdev = stdev,
    noise = stdev < math.huge and stdev / mean or math.huge, q1 = rank(0.25), median = rank(0.5), q3 = rank(0.75)}
end

guard("statistics", function()
local ok_stats = true
for _ = 1, 50 do
  local n = math.random(1, 40)
  local xs = {}
  for i = 1, n do xs[i] = math.random() * 1e-3 + 1e-6 end
  local got, want = run.statistics(xs, n), plain_stats(xs)
  for _, k in ipairs{"min", "max", "mean", "stdev", "noise", "q1", "median", "q3"} do
    local a, b = got[k], want[k]
    if not (a == b or math.abs(a - b) <= 1e-12 * math.abs(b)) then ok_stats = false end
  end
  if math.abs(got.iqr - (want.q3 - want.q1)) > 1e-15 or math.abs(got.rel_iqr - got.iqr / want.median) > 1e-12 then
    ok_stats = false
  end
end
t.ok(ok_stats, "statistics: min, max, mean, stdev (+inf below 5), noise, quartiles at rank round(p(n-1)), IQR")
end)

-- --- M.summaries: NVBench's tags, order, descriptions ---------------------------------
guard("M.summaries: NVBench's tags, order, descriptions", function()
local function fake_cold(n)
  local gpu, cpu = {}, {}
  for i = 1, n do gpu[i] = 1e-4 * (1 + math.random()); cpu[i] = gpu[i] * 1.1 end
  return {n = n, gpu = gpu, cpu = cpu, total_gpu = 0, walltime = 0.25, discarded = 0, mean_clock = 1800}
end
local dev = {properties = {clock_rate_khz = 2000000}}
local st = {cold = fake_cold(20), element_count = 1000, global_bytes = 4096, device = dev,
  batch = {n = 50, total_gpu = 5e-3, walltime = 0.1},
  user_summaries = {{tag = "nv/python/before", name = "before", type = "int64", value = 1, before_exec = true},
                    {tag = "nv/python/after", name = "after", type = "string", value = "x", before_exec = false}}}
local tags, described, by = {}, true, {}
for i, s in ipairs(run.summaries(st, 1e12)) do
  tags[i] = s.tag
  by[s.tag] = s
  if s.tag:match("^nv/cold") or s.tag:match("^nv/batch") then described = described and type(s.description) == "string" end
end
-- cuda-bench 0.3.0's order (bench/recorded/nvbench-h200-2026-12-04/nvbench.json)
local COLD = {"sample_size", "walltime", "time/cpu/min", "time/cpu/max", "time/cpu/mean", "time/cpu/stdev/absolute",
  "time/cpu/stdev/relative", "time/cpu/q1", "time/cpu/median", "time/cpu/q3", "time/cpu/iqr/absolute",
  "time/cpu/iqr/relative", "time/gpu/min", "time/gpu/max", "time/gpu/mean", "time/gpu/stdev/absolute",
  "time/gpu/stdev/relative", "time/gpu/q1", "time/gpu/median", "time/gpu/q3", "time/gpu/iqr/absolute",
  "time/gpu/iqr/relative", "bw/item_rate", "bw/global/bytes_per_second", "bw/global/utilization",
  "sm_clock_rate/mean", "sm_clock_rate/scaling/percent"}
local want_tags = {"nv/python/before"}
for _, c in ipairs(COLD) do want_tags[#want_tags + 1] = "nv/cold/" .. c end
for _, b in ipairs{"sample_size", "time/gpu/mean", "walltime"} do want_tags[#want_tags + 1] = "nv/batch/" .. b end
want_tags[#want_tags + 1] = "nv/python/after"
t.is(table.concat(tags, " "), table.concat(want_tags, " "), "summaries: the user's from before exec, cold, batch, the user's later")
t.ok(described, "summaries: every cold and batch summary has NVBench's description")
local s_gpu = plain_stats(st.cold.gpu)
t.near(by["nv/cold/bw/item_rate"].value, 1000 / s_gpu.mean, 1e-12, "summaries: Elem/s = elements / mean GPU time")
t.near(by["nv/cold/bw/global/utilization"].value, 4096 / s_gpu.mean / 1e12, 1e-12, "summaries: BWUtil over the peak")
t.near(by["nv/cold/sm_clock_rate/scaling/percent"].value, 1800e6 / 2000e6, 1e-12, "summaries: clock scaling")
t.is(by["nv/cold/time/gpu/q1"].hide, "Hidden by default.", "summaries: the quartiles are hidden")
t.is(by["nv/batch/walltime"].value, 0.1, "summaries: the batch's walltime")
t.is(by["nv/cold/time/gpu/stdev/relative"].description,
  "Relative standard deviation of isolated kernel execution GPU times", "summaries: NVBench's words")
local few = run.summaries({cold = fake_cold(4), user_summaries = {}}, 0)
local noise = {}
for _, s in ipairs(few) do noise[s.tag] = s.value end
t.is(noise["nv/cold/time/gpu/stdev/relative"], math.huge, "summaries: Noise is +inf below 5 samples")
t.is(noise["nv/cold/time/cpu/stdev/absolute"], math.huge, "summaries: and the standard deviation")
local cpu_st = {cpu_only = {n = 10, cpu = fake_cold(10).cpu, total_cpu = 1, walltime = 2}, element_count = 7,
  global_bytes = 64, user_summaries = {}}
local cpu_by = {}
for _, s in ipairs(run.summaries(cpu_st, 0)) do cpu_by[s.tag] = s end
local s_cpu = plain_stats(cpu_st.cpu_only.cpu)
t.near(cpu_by["nv/cpu_only/bw/item_rate"] and cpu_by["nv/cpu_only/bw/item_rate"].value or 0, 7 / s_cpu.mean, 1e-12,
  "summaries: cpu-only Elem/s")
t.near(cpu_by["nv/cpu_only/bw/global/bytes_per_second"] and cpu_by["nv/cpu_only/bw/global/bytes_per_second"].value or 0,
  64 / s_cpu.mean, 1e-12, "summaries: cpu-only GlobalMem BW")
t.ok(cpu_by["nv/cpu_only/time/cpu/median"] and cpu_by["nv/cpu_only/time/cpu/iqr/absolute"],
  "summaries: cpu-only quartiles and IQR")
local skipped = run.summaries({cold = {skipped = "too fast", n = 0, discarded = 0}, user_summaries = {}}, 0)
t.is(#skipped, 0, "summaries: a state skipped by skip_time has no measurement summaries")
end)

-- --- formats, as NVBench's markdown printer -------------------------------------------
guard("formats, as NVBench's markdown printer", function()
local fmt_ok = true
for _ = 1, 200 do
  local e = math.random(-12, 16)
  local x = (1 + math.random() * 9) * 10 ^ e
  local function expect(got, want) if got ~= want then fmt_ok = false; t.diag(got .. " ~= " .. want) end end
  local d = x >= 1 and ("%.3f s"):format(x) or x >= 1e-3 and ("%.3f ms"):format(x * 1e3)
    or x >= 1e-6 and ("%.3f us"):format(x * 1e6) or ("%.3f ns"):format(x * 1e9)
  expect(run.format_duration(x), d)
  local units = {{1e15, "P"}, {1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "K"}}
  local want = ("%.3f"):format(x)
  for _, u in ipairs(units) do if x >= u[1] then want = ("%.3f%s"):format(x / u[1], u[2]); break end end
  expect(run.format_item_rate(x), want)
  expect(run.format_byte_rate(x), (want:match("%d$") and want .. " B/s" or want:sub(1, -2) .. " " .. want:sub(-1) .. "B/s"))
end
t.ok(fmt_ok, "formats: durations down to ns, item and byte rates up to P")
t.is(run.format_bytes(3 * 1024 * 1024), "3.000 MiB", "formats: bytes")
t.is(run.format_bytes(100), "100.000 B", "formats: bytes below a KiB")
t.is(run.format_frequency(1.41e9), "1.410 GHz", "formats: GHz")
t.is(run.format_frequency(2500), "2.500 KHz", "formats: KHz")
t.is(run.format_percentage(math.huge), "inf%", "formats: inf%")
t.is(run.format_percentage(0 / 0), "nan%", "formats: nan%, never -nan%")
t.is(run.format_value({hint = "sample_size", value = 12}), "12x", "formats: sample sizes")
t.is(run.format_value({value = 1 / 3}), "0.33333", "formats: a float without a hint, {:.5g}")
end)

-- --- fmt and nlohmann number forms --------------------------------------------------------
guard("fmt and nlohmann number forms", function()
local round_trip = true
for _ = 1, 500 do
  local x = (math.random() - 0.5) * 10 ^ math.random(-30, 30)
  local text = output.fmt_float(x)
  if tonumber(text) ~= x or text:find("%.0$") then round_trip = false end
  local back = json.decode(output.encode({x}))[1]
  if back ~= x then round_trip = false end
end
t.ok(round_trip, "numbers: fmt's and nlohmann's forms read back to the same double")
t.is(output.fmt_float(1e-5) .. " " .. output.fmt_float(1e-4) .. " " .. output.fmt_float(1e16) .. " " ..
  output.fmt_float(1e15) .. " " .. output.fmt_float(100.0), "1e-05 0.0001 1e+16 1000000000000000 100",
  "numbers: fmt::to_string's forms")
t.is(output.encode({100.0, 1e15, 1e-5, 0.0, 1 / 0, 7}), "[\n  100.0,\n  1e+15,\n  1e-05,\n  0.0,\n  null,\n  7\n]\n",
  "numbers: nlohmann's dump(2) forms, null for inf")
t.is(output.fmt_float(math.huge) .. output.fmt_float(-math.huge) .. output.fmt_float(0 / 0), "inf-infnan",
  "numbers: non-finite values as fmt writes them")
t.is(output.encode(output.object("b", 1, "a", 2, "c", nil)), '{\n  "b": 1,\n  "a": 2\n}\n',
  "json: keys in insertion order, unset keys left out")
t.is(output.encode({"a\1\"\xff\xc3\xa9"}), '[\n  "a\\u0001\\"\u{FFFD}\xc3\xa9"\n]\n', "json: escapes; a stray byte becomes U+FFFD")
t.raises(function() output.encode({print}) end, "cannot encode a function", "json: a function is refused")
end)

-- --- compare's rules -------------------------------------------------------------------------
guard("compare's rules", function()
t.is(nvc.verdict(math.huge, 0.01, math.huge, 0.01), "undecided", "compare: inf against inf is undecided, not slower")
t.is(nvc.verdict(1e-3, math.huge, 1e-3, math.huge), "undecided", "compare: +inf noises are no estimate")
t.like(select(2, nvc.check({benchmarks = {{states = {}}}})), "benchmarks%[1%] has no name", "compare: a nameless benchmark")
t.like(select(2, nvc.check({benchmarks = {{name = "x", states = {5}}}})), "states%[1%] is not an object",
  "compare: a state that is not an object")
t.like(select(2, nvc.check({benchmarks = {{name = "x", states = {{summaries = {{tag = 1}}}}}}})),
  "summaries%[1%] is not an object with a tag", "compare: a summary without a tag")
end)

-- --- cli.device_ids ---------------------------------------------------------------------------
guard("cli.device_ids", function()
local function ids(text, n) local list, why = bcli.device_ids(text, n); return list and table.concat(list, ",") or why end
t.is(ids("[0,1]", 3), "0,1", "devices: [0,1]")
t.is(ids("[0:2]", 3), "0,1,2", "devices: [0:2]")
t.is(ids("0,2", 3), "0,2", "devices: 0,2")
t.is(ids("all", 2), "0,1", "devices: all")
t.like(ids("all,0", 2), "^'all' is not a device id", "devices: all,0 names 'all', unshifted")
t.like(ids("[1,x]", 2), "^'x' is not a device id", "devices: a bad id in brackets, unshifted")
t.like(ids("3", 2), "no device 3 %(2 found%)", "devices: one that does not exist")
end)

-- --- cudalua bench, cpu-only (no driver needed) ------------------------------------------------
local nodrv = "CUDALUA_LIBCUDA=/nonexistent " .. cudalua
t.write_file(dir .. "/cpu.lua", [[
local bench = require "cuda.bench"
bench.register(function(state)
  local n = state:get_int64("N")
  state:add_summary("label", "\255bad byte")
  state:add_element_count(n)
  state:exec(function() local x = 0; for i = 1, n do x = x + i end end)
end):set_name("c"):add_int64_axis("N", {10, 20}):set_is_cpu_only(true)
bench.register(function(state) state:skip("not this one") end):set_name("skipped"):set_is_cpu_only(true)
bench.register(function(state) state:add_summary("before", 1); error("boom") end):set_name("fails"):set_is_cpu_only(true)
bench.register(function(state) state:exec(function() end) end):set_name("f"):set_is_cpu_only(true)
  :add_float64_axis("F", {math.huge, 0.5}):set_timeout(math.huge)
]])
local function bench(file, opts) return t.run(("cd '%s' && %s bench '%s' %s"):format(dir, nodrv, file, opts)) end
local code, out, err = bench("cpu.lua", "--cold-warmup-runs 3 --batch-target-time 0.25 --skip-time -1 " ..
  "-b c -a N=[10] --timeout 1 -b c -a N=[20] --min-samples 7 --stopping-criterion sample-count --target-samples 12 " ..
  "-b skipped -b fails -b f -a F=[1e999,0.5] --stopping-criterion sample_count --target-samples 3 --min-samples 3 " ..
  "--json out.json --csv out.csv --md out.md")
t.is(code, 1, "cpu-only run: a failed state gives exit status 1")
t.like(out, "^# Devices\n\n# Log\n\n```\nRun:  %[1/6%] c ", "markdown: the devices, then the log in a fenced block")
t.like(out, "\nPass: CpuOnly: [%d.]+ms mean CPU, [%d.]+s total CPU, [%d.]+s total wall, 12x \n",
  "log: NVBench's CpuOnly line (the second -b c took 12 samples)")
t.like(out, "\nSkip: not this one\n", "log: a skipped state")
t.like(out, "\nFail: Unexpected error: [^\n]*boom\n", "log: Fail: Unexpected error:")
t.like(out, "```\n\n# Benchmark Results\n\n## c\n\n", "markdown: the results after the log")
t.like(out, "\n## skipped\n\nNo data %-%- check log%.\n", "markdown: a table with no state says so")
t.ok(not out:find("not this one |", 1, true) and not err:find("Run:", 1, true), "markdown: skipped states are left out, no log on stderr")
t.like(out, "| Samples |  CPU Time  |", "markdown: the headers centred")
t.like(out, "|[^\n]*inf |", "markdown: an infinite float axis value reads inf")
t.is(t.read_file(dir .. "/out.md"), out, "--md FILE: the same document as stdout")
local doc = json.decode(t.read_file(dir .. "/out.json") or "{}")
local benches = doc.benchmarks or {}
t.is(#benches, 5, "json: one benchmark per configuration (c twice)")
t.is(benches[1] and benches[1].min_samples, 10, "json: the first c kept min_samples 10")
t.is(benches[2] and benches[2].min_samples, 7, "json: the second c's --min-samples 7, after its -b")
t.ok(benches[1] and benches[1].cold_warmup_runs == 3 and benches[1].batch_target_time == 0.25 and
  benches[5].skip_time == -1 and benches[1].timeout == 1 and benches[2].timeout == 15,
  "json: settings before any -b, in every benchmark; after one, in its own")
local text = t.read_file(dir .. "/out.json") or ""
t.like(text, '"name": "c",\n      "index": 0,\n      "min_samples": 10,\n      "cold_warmup_runs": 3,\n' ..
  '      "cold_max_warmup_walltime": %-1%.0,\n      "batch_target_time": 0%.25,\n      "skip_time": %-1%.0,\n' ..
  '      "timeout": 1%.0,\n      "devices": %[%],\n      "axes": %[', "json: the benchmark's keys in NVBench's order")
local function summary(state, tag)
  for _, s in ipairs(state.summaries or {}) do if s.tag == tag then return s end end
end
local c2 = benches[2] and benches[2].states[1] or {}
t.is(summary(c2, "nv/cpu_only/sample_size") and summary(c2, "nv/cpu_only/sample_size").data[1].value, "12",
  "json: --target-samples 12 for the second c only")
t.ok(c2.skip_reason == nil and c2.is_skipped == false, "json: skip_reason only when skipped")
local sk = benches[3] and benches[3].states[1] or {}
t.ok(sk.is_skipped == true and sk.skip_reason == "not this one", "json: a skipped state and its reason")
local fails = benches[4] and benches[4].states[1] or {}
t.like(fails.skip_reason or "", "^Unexpected error: .*boom", "json: a failed state's reason")
t.ok(summary(fails, "nv/python/before") or summary(fails, "user/before"), "json: a failed state keeps its summaries")
local f1 = benches[5] and benches[5].states[1] or {}
t.is(benches[5] and benches[5].axes[1].values[1].value, json.null, "json: an infinite axis value is null, as nlohmann")
t.is(f1.axis_values and f1.axis_values[1].value, "inf", "json: and \"inf\" in the state's axis values")
t.is(f1.timeout, json.null, "json: set_timeout(math.huge) is null")
t.is(summary(f1, "nv/cpu_only/time/cpu/stdev/relative") and summary(f1, "nv/cpu_only/time/cpu/stdev/relative").data[1].value,
  "inf", "json: Noise below 5 samples is \"inf\"")
t.like(out, "|%s+inf%% |", "markdown: and inf%")
local c1 = benches[1] and benches[1].states[1] or {}
t.ok(c1.device == json.null and summary(c1, "nv/cpu_only/bw/item_rate"), "json: cpu-only: no device, Elem/s declared")
local label = summary(c1, "nv/python/label") or summary(c1, "user/label")
t.is(label and label.data[1].value, "\u{FFFD}bad byte", "json: a byte that is not UTF-8 becomes U+FFFD")
local csv = t.read_file(dir .. "/out.csv") or ""
local header = csv:match("^[^\n]*")
t.is(select(2, csv:gsub("Benchmark,Device,Device Name", "")), 1, "csv: one header for every benchmark")
t.like(header, "^Benchmark,Device,Device Name,N,Skipped,", "csv: NVBench's first columns")
t.like(header, ",Samples,CPU Time %(sec%),Noise,Elem/s %(elem/sec%),", "csv: the visible summaries, units on durations and rates")
t.like(header, ",label,", "csv: a user column")
t.ok(#header > 0 and not header:find("Min CPU Time", 1, true) and not header:find("Walltime", 1, true), "csv: no hidden summary")
t.like(csv, "\nskipped,,,,Yes,", "csv: Skipped Yes, no values")
t.ok(#csv > 0 and not csv:find("nan", 1, true), "csv: no nan")

-- JSON read back by cuda-bench where it is installed
local pypath = os.getenv("CUDALUA_CUDA_BENCH_PYTHONPATH") or "/tmp/cb"
local py = ("PYTHONPATH='%s' python3"):format(pypath)
if t.run(py .. " -c 'import cuda.bench.results' 2>/dev/null") == 0 then
  local rc, pout, perr = t.run(("%s -c 'import sys; from cuda.bench.results import BenchmarkResult; " ..
    "r = BenchmarkResult.from_json(sys.argv[1]); print(len(r), [len(s) for s in r.values()])' '%s/out.json'"):format(py, dir))
  t.is(rc, 0, "BenchmarkResult reads the JSON with inf, null and U+FFFD" .. perr)
  t.like(pout, "^4 %[", "BenchmarkResult: four names (c twice is one name)")
else
  t.skip("python3 with cuda.bench.results is not available (" .. pypath .. ")", 2)
end

-- -q, --md stdout, queries
code, out, err = bench("cpu.lua", "-q -b c -a N=[10]")
t.ok(code == 0 and out == "" and not err:find("Run:", 1, true), "-q: nothing on stdout, no log on stderr" .. err)
code, out = bench("cpu.lua", "-q --md stdout -b c -a N=[10]")
t.like(out, "^# Devices\n\n# Log\n", "-q --md stdout: the document on stdout")
local PASS_TAG = "\27[1m\27[38;2;000;100;000m\27[48;2;000;000;000mPass:\27[0m CpuOnly:"
code, out = bench("cpu.lua", "--color -b c -a N=[10] --md plain.md")
t.ok(out:find(PASS_TAG, 1, true) and out:find("\27[48;2;020;020;032m|", 1, true) and
  not (t.read_file(dir .. "/plain.md") or "\27"):find("\27", 1, true), "--color: NVBench's colours on stdout only")
code, out = t.run(("cd '%s' && NVBENCH_COLOR=1 %s bench cpu.lua -b c -a N=[10]"):format(dir, nodrv))
t.ok(out:find(PASS_TAG, 1, true), "NVBENCH_COLOR=1: as --color")
code, out = bench("cpu.lua", "--version")
t.ok(code == 0 and out:find("^cudalua bench v"), "--version")
code, out = bench("cpu.lua", "--help-axes")
t.ok(code == 0 and out:find("# Axis Specification", 1, true), "--help-axes")
code, out = bench("cpu.lua", "--list")
t.like(out, "# Benchmarks\n\n## %[0%] `c` %(2 configurations%)\n\n### Axes\n\n%* `N` : int64\n  %* `10`\n  %* `20`\n",
  "--list: NVBench's format")
code, out = bench("cpu.lua", "--jsonlist-benches")
local list = code == 0 and json.decode(out) or {}
t.ok(list.benchmarks and list.benchmarks[1].name == "c" and list.benchmarks[1].axes[1].name == "N" and
  list.benchmarks[2].axes and #list.benchmarks[2].axes == 0, "--jsonlist-benches: names and axes ([] when none)")
code, out = bench("cpu.lua", "--jsonlist-devices")
local devs = code == 0 and json.decode(out).devices
t.ok(type(devs) == "table" and #devs == 0, "--jsonlist-devices: no device without a driver (a list, as readers iterate it)")

-- refused up front, naming the setting
for _, case in ipairs{
  {"--persistence-mode 1", "%-%-persistence%-mode: cudalua does not change device settings"},
  {"--lgc base", "%-%-lock%-gpu%-clocks: cudalua does not change"},
  {"--jsonbin stdout", "%-%-jsonbin requires a file path; 'stdout' is a stream destination"},
  {"--max-angle 1", "%-%-max%-angle 1: not valid for the active stopping criterion 'stdrel'"},
  {"--stopping-criterion entropy --max-noise 1", "%-%-max%-noise 1: not valid for the active stopping criterion 'entropy'"},
  {"--stopping-criterion fastest", "%-%-stopping%-criterion fastest: unknown stopping criterion"},
  {"--stopping-criterion sample-count --target-samples 0", "%-%-target%-samples 0: '0' is not an integer >= 1"},
  {"--batch-target-time 0", "%-%-batch%-target%-time 0: '0' is not finite and positive"},
  {"--batch-target-time inf", "%-%-batch%-target%-time inf: 'inf' is not finite and positive"},
  {"--timeout x", "%-%-timeout x: 'x' is not a number"},
  {"--min-samples 0", "%-%-min%-samples 0: '0' is not an integer >= 1"},
  {"--cold-warmup-runs 0", "%-%-cold%-warmup%-runs 0"},
  {"--throttle-threshold -5", "%-%-throttle%-threshold %-5"},
  {"--l2-flush 1e300", "%-%-l2%-flush 1e300: '1e300' is not a multiple of the L2 size in 0%.%.1024"},
  {"-d all,0", "%-%-devices all,0: 'all' is not a device id"},
  {"-b nope", "%-b nope: no such benchmark"},
  {"-a Nope=[1]", "has no axis .Nope."},
} do
  code, out, err = bench("cpu.lua", case[1] .. " --json x.json")
  t.ok(code == 2 and err:find(case[2]) and out == "", case[1] .. ": refused before anything runs (" .. err:gsub("\n", " ") .. ")")
end
code, out, err = t.run(("cd '%s' && CUDALUA_BENCH_L2_BYTES=1e30 %s bench cpu.lua -b c"):format(dir, nodrv))
t.ok(code == 2 and err:find("CUDALUA_BENCH_L2_BYTES=1e30: not a byte count", 1, true), "CUDALUA_BENCH_L2_BYTES=1e30 refused")

-- timeout warnings, one per unmet condition
code, out = bench("cpu.lua", "--timeout 0 -b c -a N=[10]")
t.like(out, "\nWarn: Current measurement timed out %([%d.]+s%) before accumulating enough samples to estimate noise " ..
  "%(1 < 5%)\nWarn: Current measurement timed out %([%d.]+s%) before accumulating min_samples %(1 < 10%)\nWarn: " ..
  "Current measurement timed out %([%d.]+s%) before accumulating min_time %([%d.]+s < 0%.50s%)\nPass: CpuOnly:",
  "log: a cpu-only timeout warns of each unmet condition")

-- cudalua compare on NVBench JSON: a file with itself, bad files
code, out = bench("cpu.lua", "-b c -b f --json self.json")
code, out, err = t.run(("cd '%s' && %s compare self.json self.json"):format(dir, cudalua))
t.ok(code == 0 and out:find("4 states: 0 faster, 0 slower, 4 same, 0 undecided", 1, true) or
  out:find("4 states: 0 faster, 0 slower, %d same, %d undecided"), "compare: a file with itself is the same" .. err)
t.ok(out:find("SAME", 1, true) and not out:find("SLOWER", 1, true) and not out:find("FASTER", 1, true), "compare: no state faster or slower than itself")
code, out = t.run(("cd '%s' && %s compare self.json self.json -b c -a 'N=[20]'"):format(dir, cudalua))
t.ok(code == 0 and out:find("\n1 states: ", 1, true) and out:find("N=20", 1, true) and not out:find("## f", 1, true),
  "compare -b c -a N=[20]: nvbench_compare.py's filters")
code, out = t.run(("cd '%s' && %s compare self.json self.json --threshold-diff 0.5"):format(dir, cudalua))
t.ok(code == 0 and not out:find("| Ref Time |", 1, true) and out:find("4 states: ", 1, true),
  "compare --threshold-diff: rows below it counted, not shown")
code, out, err = t.run(("cd '%s' && %s compare self.json self.json --plot"):format(dir, cudalua))
t.ok(code == 2 and err:find("nvbench_compare.py", 1, true), "compare --plot: refused with a sentence")
t.write_file(dir .. "/empty.json", "")
t.write_file(dir .. "/cut.json", (t.read_file(dir .. "/self.json") or ""):sub(1, 200))
t.write_file(dir .. "/noname.json", '{"benchmarks": [{"states": []}]}')
t.write_file(dir .. "/notobj.json", '{"benchmarks": [5]}')
for _, case in ipairs{{"missing.json", "missing%.json"}, {"empty.json", "empty%.json: the file is empty"},
    {"cut.json", "cut%.json: not JSON"}, {"noname.json", "noname%.json: [^\n]*benchmarks%[1%] has no name"},
    {"notobj.json", "notobj%.json: [^\n]*benchmarks%[1%] is not an object"}} do
  code, out, err = t.run(("cd '%s' && %s compare self.json %s"):format(dir, cudalua, case[1]))
  t.ok(code == 1 and err:find("^compare: " .. case[2]) and not err:find("traceback"), "compare: " .. case[1] ..
    " is named with the reason (" .. err:gsub("\n", " ") .. ")")
end

-- --- under the fake driver: cold, batch, --jsonbin ------------------------------------------
local so = os.getenv("CUDALUA_FAKE_LIBCUDA")
if not so or not io.open(so) then
  t.skip("no fake driver (CUDALUA_FAKE_LIBCUDA: run by make check)", 1)
  os.execute("rm -rf '" .. dir .. "'")
  t.done()
  return
end
local fake = require "fake"
local env = fake.env("CUDALUA_BENCH_L2_BYTES=65536")
local function gbench(file, opts) return t.run(("cd '%s' && %s %s bench '%s' %s"):format(dir, env, cudalua, file, opts)) end
local example = src .. "/scripts/bench_example.lua"
code, out, err = gbench(example, "--timeout 0.05 -b copy -a 'T=[uint32_t]' -a 'Bytes[pow2]=[16,20]' -b sleep " ..
  "-a 'Duration_us=[10]' --jsonbin run.json --json stdout --md run.md")
t.is(code, 0, "cold run under the fake" .. err)
local files = t.ls(dir .. "/run.json-bin")
table.sort(files)
t.is(table.concat(files, " "), "0.bin 1.bin 2.bin", "--jsonbin: FILE-bin/N.bin, numbered from 0")
local rdoc = json.decode(t.read_file(dir .. "/run.json") or "{}")
local bin_ok, stats_ok, freqs_ok, checked = true, true, true, 0
for _, b in ipairs(rdoc.benchmarks or {}) do
  for _, s in ipairs(b.states) do
    checked = checked + 1
    local times = summary(s, "nv/json/bin:nv/cold/sample_times")
    local freqs = summary(s, "nv/json/freqs-bin:nv/cold/sample_freqs")
    bin_ok = bin_ok and times and times.name == "Sample Times File" and times.hint == "file/sample_times" and
      times.hide == "Not needed in table." and times.data[1].value:match("^run%.json%-bin/%d%.bin$")
    local raw = times and t.read_file(dir .. "/" .. times.data[1].value) or ""
    local xs = {}
    for i = 1, #raw // 4 do xs[i] = ("<f"):unpack(raw, 4 * i - 3) end
    bin_ok = bin_ok and #xs == tonumber(times.data[2].value)
    local want = plain_stats(xs)
    for _, k in ipairs{"min", "max", "median", "q1", "q3"} do
      local got = tonumber(summary(s, "nv/cold/time/gpu/" .. k).data[1].value)
      stats_ok = stats_ok and math.abs(got - want[k]) <= 1e-6 * want[k]
    end
    local mean = tonumber(summary(s, "nv/cold/time/gpu/mean").data[1].value)
    stats_ok = stats_ok and math.abs(mean - want.mean) <= 1e-6 * want.mean
    local fraw = freqs and t.read_file(dir .. "/" .. freqs.data[1].value) or ""
    freqs_ok = freqs_ok and #fraw == #raw and ("<f"):unpack(fraw) > 1e8
  end
end
t.ok(checked == 3 and bin_ok, "--jsonbin: NVBench's nv/json/bin summaries; the files hold the samples")
t.ok(checked == 3 and stats_ok, "summaries: the GPU min, max, mean and quartiles are the samples' (read back from the files)")
t.ok(checked == 3 and freqs_ok, "--jsonbin: each sample's SM clock in FILE-freqs-bin/N.bin, in Hz")
t.like(t.read_file(dir .. "/run.md") or "", "\nInfo: Wrote '[^']*run%.json%-bin/0%.bin' in +[%d.]+ms\n",
  "log: NVBench's Info: Wrote line")
code = gbench(example, "--timeout 0.01 -b sleep -a 'Duration_us=[10]' --json stdout > /dev/null")
t.ok(code == 0 and not io.open("/dev/stdout-bin") and not io.open(dir .. "/stdout-bin"),
  "--json stdout: no sample folder anywhere (issue 38: /dev/stdout-bin)")
t.like(out, "^%{\n  \"meta\": %{\n", "--json stdout: the JSON alone on stdout (no default markdown printer)")
code, out = gbench(example, "--timeout 0.05 -b sleep -a 'Duration_us=[10]' --json plain.json -q")
t.ok(code == 0 and not io.open(dir .. "/plain.json-bin"), "--json FILE: no sample files")

-- a cpu-only benchmark beside a GPU: no device in its JSON, CSV or table heading
code, out = gbench(example, "--timeout 0.05 -b cpu -a 'Iterations=[3]' --json cpu.json --csv cpu.csv")
local cdoc = json.decode(t.read_file(dir .. "/cpu.json") or "{}")
local cb = cdoc.benchmarks and cdoc.benchmarks[1] or {}
t.ok(code == 0 and cb.devices and #cb.devices == 0 and cb.states[1].device == json.null and #cdoc.devices == 1,
  "cpu-only beside a GPU: devices [], the state's device null, the GPU still listed")
t.like(t.read_file(dir .. "/cpu.csv") or "", "\ncpu,,,3,No,", "cpu-only beside a GPU: no device in the CSV")
t.like(out, "\n## cpu\n\n| Iterations |", "cpu-only beside a GPU: no device heading in the table")

-- skip_time skips every state: the JSON, CSV and markdown still come
t.write_file(dir .. "/skip.lua", [[
local bench = require "cuda.bench"
bench.register(function(state) state:exec(function() end) end):set_name("fast"):set_skip_time(1)
  :add_int64_axis("N", {1, 2})
]])
code, out, err = gbench("skip.lua", "--timeout 0.05 --json skip.json --csv skip.csv")
local sdoc = json.decode(t.read_file(dir .. "/skip.json") or "{}")
local sstates = sdoc.benchmarks and sdoc.benchmarks[1].states or {}
t.ok(code == 0 and #sstates == 2 and sstates[1].is_skipped and sstates[2].is_skipped, "skip_time: --json written" .. err)
t.ok(not (t.read_file(dir .. "/skip.csv") or "nan"):find("nan") and not (t.read_file(dir .. "/skip.csv") or "inf"):find("inf"),
  "skip_time: no nan or inf in the CSV")
t.like(out, "## fast\n\n### %[0%] [^\n]*\n\nNo data %-%- check log%.\n", "skip_time: the table says to check the log")

-- timeout warnings for cold and batch; --no-batch; --profile
code, out = gbench(example, "--timeout 0 -b sleep -a 'Duration_us=[10]'")
t.like(out, "\nWarn: Current measurement timed out %([%d.]+s%) before accumulating enough samples to estimate noise " ..
  "%(1 < 5%)\n", "log: cold timed out: too few samples for a noise")
t.like(out, "\nWarn: Current measurement timed out %([%d.]+s%) before accumulating batch target time %(", "log: batch timed out")
code, out = gbench(example, "--timeout 0.05 -b sleep -a 'Duration_us=[10]' --no-batch --json nobatch.json -q")
t.ok(code == 0 and not (t.read_file(dir .. "/nobatch.json") or "nv/batch"):find("nv/batch", 1, true), "--no-batch: no batch")
code, out = gbench(example, "-b sleep -a 'Duration_us=[10]' --profile --json profile.json -q")
local pdoc = json.decode(t.read_file(dir .. "/profile.json") or "{}")
local pst = pdoc.benchmarks and pdoc.benchmarks[1].states[1] or {}
t.ok(code == 0 and summary(pst, "nv/cold/sample_size").data[1].value == "1" and not summary(pst, "nv/batch/sample_size"),
  "--profile: one sample, no batch")
for _, ids_text in ipairs{"0", "[0]", "[0:0]", "all"} do
  code = gbench(example, "-d '" .. ids_text .. "' -b sleep -a 'Duration_us=[10]' --timeout 0.01 -q")
  t.is(code, 0, "--devices " .. ids_text)
end

os.execute("rm -rf '" .. dir .. "'")
t.done()
