-- cuda.results: the envelope every script's --json has, CSV quoting, the
-- Markdown table's alignment, the PCIe link from sysfs. No GPU needed: the
-- device is a table with a device's fields, and sysfs a folder made here.
local t = require "tap"
local json = require "cuda.json"
local bench = require "cuda.bench"
local results = require "cuda.results"

t.plan(39)
t.seed()

-- A device as the environment reads one, and a sysfs with its PCIe link.
local sys = t.tmpdir()
os.execute(("mkdir -p '%s/bus/pci/devices/0000:19:00.0'"):format(sys))
t.write_file(sys .. "/bus/pci/devices/0000:19:00.0/current_link_speed", "32.0 GT/s PCIe\n")
t.write_file(sys .. "/bus/pci/devices/0000:19:00.0/current_link_width", "16\n")
local device = {id = 0, name = "Test GPU", arch = "90", uuid = "GPU-0123", pci_bus_id = "00000000:19:00.0",
                properties = {clock_rate_khz = 1980000, memory_clock_rate_khz = 2619000}}

local samples = {}
for i = 1, 11 do samples[i] = math.random() * 10 end
local run = results.new("demo", {device = device, argv = {"--runs", "11", "--json", "a b.json"},
                                 sys_root = sys, columns = {"speedup"}})
local entry = run:add("sequential", "ms", samples, {speedup = 1.5})
run:add('pinned, "fast" -> device', "GB/s", {}, {median = 52.25, n = 0})
local doc = json.decode(json.encode(run:envelope(true, {elements = 1000})))

-- the envelope
t.is(doc.schema, "cudalua-results/1", "schema is versioned")
t.is(doc.tool.name, "cudalua", "tool names cudalua")
t.is(doc.tool.version, require("cuda").version, "and its version")
t.is(doc.tool.lua, _VERSION, "and Lua's")
t.is(doc.tool.script, "demo", "and the script")
t.is(doc.passed, true, "passed is a boolean")
t.is(doc.details.elements, 1000, "the script's own figures are under details")
local env = doc.environment
t.is(env.device.name, "Test GPU", "environment: the device name")
t.is(env.device.uuid, "GPU-0123", "its UUID")
t.is(env.device.pci_bus_id, "00000000:19:00.0", "its PCI bus id")
t.is(env.device.sm_clock_khz, 1980000, "its SM clock")
t.is(env.device.memory_clock_khz, 2619000, "its memory clock")
t.is(env.device.pcie_link_gen, 5, "the PCIe generation, from sysfs' link speed")
t.is(env.device.pcie_link_width, 16, "the PCIe link width, from sysfs")
t.like(env.time_utc, "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", "UTC time in ISO 8601")
t.is(env.command_line, "cudalua demo --runs 11 --json 'a b.json'", "the command line, quoted where needed")
t.ok(type(env.hostname) == "string" and #env.hostname > 0, "the hostname")
t.ok(env.driver_version == json.null or type(env.driver_version) == "string", "driver version: text or null")
t.ok(env.nvrtc_version == json.null or env.nvrtc_version:match("^%d+%.%d+$"), "NVRTC version: major.minor or null")

-- a result: every sample in run order, and the summary of them
local r = doc.results[1]
t.is(#doc.results, 2, "results is a list of every result")
t.is(table.concat(r.samples, ","), table.concat(samples, ","), "every raw sample, in run order")
local sorted = table.move(samples, 1, #samples, 1, {})
table.sort(sorted)
t.ok(r.median == sorted[6] and r.min == sorted[1] and r.max == sorted[11] and r.n == 11, "median, min, max, n")
t.near(r.p10, bench.percentile(sorted, 10), 1e-12, "p10 interpolated")
t.near(r.p90, bench.percentile(sorted, 90), 1e-12, "p90 interpolated")
t.ok(r.unit == "ms" and r.speedup == 1.5 and entry.speedup == 1.5, "unit and the script's own fields")

-- no device, no sysfs entry
local bare = json.decode(json.encode(results.new("bare"):envelope(false)))
t.ok(bare.environment.device == json.null and bare.passed == false and #bare.results == 0,
     "without a device: device null, an empty results list")
local gen, width = results.pcie_link("0000:aa:00.0", sys)
t.ok(gen == nil and width == nil, "no sysfs entry: no PCIe link figures")
t.is(results.sysfs_bus_id("00000000:1A:00.0"), "0000:1a:00.0", "bus ids as sysfs names them")

-- CSV: a header, quoting per RFC 4180, samples last
local csv = run:csv()
local lines = {}
for line in csv:gmatch("([^\r\n]*)\r\n") do lines[#lines + 1] = line end
t.is(lines[1], "name,unit,n,median,mean,std,min,p10,p90,max,speedup,samples", "CSV header")
t.like(lines[3], '^"pinned, ""fast"" %-> device",GB/s,0,52%.25,', "a name with a comma and quotes is quoted")
t.like(lines[2], "^sequential,ms,11,[%d.e-]+,", "a plain name is not")
t.is(select(2, lines[2]:gsub("[^,]+$", "")), 1, "the samples sit in the last field")
t.is(#lines[2]:match("([^,]+)$"):gsub("%S+", "x"):gsub(" ", ""), 11, "every sample, space-separated")

-- Markdown: every line as wide as the header, numbers right-aligned
local md = run:markdown()
local rows = {}
for line in md:gmatch("([^\n]*)\n") do rows[#rows + 1] = line end
t.is(#rows, 4, "Markdown: header, rule and a row per result")
local widths_equal = true
for _, row in ipairs(rows) do widths_equal = widths_equal and utf8.len(row) == utf8.len(rows[1]) end
t.ok(widths_equal, "every line padded to the same width")
t.like(rows[2], "^| :%-+ | :%-+ | %-+: | %-+: |", "text columns left-aligned, numbers right-aligned")
t.like(rows[4], "|%s+52%.25 |", "a number padded on the left")
t.like(rows[1], "| name +| unit +|", "names padded on the right")

-- reading back
local path = sys .. "/r.json"
run:finish({json = path}, true)
local back, why = results.read(path)
t.ok(back and back.results[1].name == "sequential", "read: a file written by finish" .. tostring(why or ""))
os.execute("rm -rf '" .. sys .. "'")
t.done()
