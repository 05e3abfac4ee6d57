-- Several GPUs in one host: the peer matrix (cudalua bandwidth --matrix),
-- streaming_overlap --devices, memory_resources --peer. The layout, the
-- formatting and the option checks run on the CPU; one GPU runs the 1x1
-- matrix, --devices 0 and --peer's skip; two GPUs run the rest.
local t = require "tap"
local cuda = require "cuda"
local bandwidth = require "cuda.bandwidth"
local report = require "cuda.overlap_report"
local cudalua = t.cudalua()
local nodrv = "CUDALUA_LIBCUDA=/nonexistent " .. cudalua

-- --- parsing --devices -------------------------------------------------------------
local ids = bandwidth.parse_devices("0, 2,1")
t.ok(ids and #ids == 3 and ids[1] == 0 and ids[2] == 2 and ids[3] == 1, "--devices keeps the order given")
for _, bad in ipairs{{"0,0", "listed twice"}, {"a", "not a device id"}, {"-1", "not a device id"},
                     {"0,", "not a device id"}, {"1.5", "not a device id"}} do
  local list, why = bandwidth.parse_devices(bad[1])
  t.ok(list == nil and tostring(why):find(bad[2], 1, true), ("--devices %s: %s"):format(bad[1], bad[2]))
end

-- --- the matrix layout ------------------------------------------------------------
local modes = bandwidth.matrix_modes({"copy", "sm"})
local names = {}
for i, m in ipairs(modes) do names[i] = m.name end
t.is(table.concat(names, "|"), "copy read|copy write|copy read both ways|copy write both ways|" ..
  "sm read|sm write|sm read both ways|sm write both ways", "modes: each engine, read and write, one way and both")
local function copies(mode, r, c)
  local out = {}
  for i, cp in ipairs(bandwidth.cell_copies(mode, r, c)) do out[i] = ("%d>%d@%d"):format(cp.from, cp.to, cp.runner) end
  return table.concat(out, " ")
end
t.is(copies(modes[1], 1, 3), "3>1@1", "read: the row's GPU pulls from its peer")
t.is(copies(modes[2], 1, 3), "1>3@1", "write: the row's GPU pushes to its peer")
t.is(copies(modes[3], 2, 3), "3>2@2 2>3@3", "read both ways: the peer pulls back at once")
t.is(copies(modes[4], 2, 3), "2>3@2 3>2@3", "write both ways: the peer pushes back at once")
t.is(copies(modes[3], 2, 2), "2>2@2 2>2@2", "the diagonal copies within one GPU")

-- A synthetic 3x3 matrix: rate = 100 * row + column, one failed check, one cell not possible.
local function point(gbps, verified) return {bytes = 1000, gbps = gbps, verified = verified, samples_ms = {0.01, 0.02}} end
local gpus = {{id = 0, name = "A"}, {id = 4, name = "B"}, {id = 7, name = "C"}}
local m3 = bandwidth.new_matrix(gpus, bandwidth.matrix_modes({"copy"}), 1000)
for _, mode in ipairs(m3.modes) do
  for r = 1, 3 do
    for c = 1, 3 do m3.cells[mode.name][r][c] = point(100 * r + c, true) end
  end
end
m3.cells["copy write"][2][3] = point(5, false)
m3.cells["copy read"][3][1] = {skipped = "no peer access"}
for r = 1, 3 do m3.host[r] = {h2d = point(50 + r, true), d2h = point(40 + r, true), both = point(30 + r, true)} end
local text = bandwidth.format_matrix(m3, m3.modes[1])
local lines = {}
for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
t.is(#lines, 4, "3x3: a header and a row per GPU")
t.like(lines[1], "^%s+GPU 0%s+GPU 4%s+GPU 7$", "the columns are the peers, by device id")
t.like(lines[2], "^GPU 0%s+101%.0 %s+102%.0 %s+103%.0 $", "row GPU 0: its copies with each peer")
t.like(lines[4], "^GPU 7%s+n/a%s+302%.0 %s+303%.0 $", "a cell that cannot run is n/a")
t.like(bandwidth.format_matrix(m3, m3.modes[2]), "\nGPU 4 .- 5%.0!", "a failed check is marked '!'")
local host = bandwidth.format_host(m3)
t.like(host, "^%s+h2d%s+d2h%s+both\n", "the host table: H2D, D2H, both")
t.like(host, "\nGPU 7%s+53%.0 %s+43%.0 %s+33%.0 $", "a row per GPU")
local points = bandwidth.matrix_points(m3)
t.is(#points, 4 * 9 - 1 + 3 * 3, "every measured cell and host copy is a result; n/a cells are not")
t.is(points[2][1], "copy read GPU 0 peer GPU 4", "results are named by mode, GPU and peer")
t.is(points[#points][1], "both pinned GPU 7", "host results are named by path and GPU")
t.is(bandwidth.matrix_failures(m3), 1, "the failed check is counted")
local r = bandwidth.rates(point(1, true))
t.ok(#r == 2 and math.abs(r[1] - 0.1) < 1e-12 and math.abs(r[2] - 0.05) < 1e-12, "rates: GB/s of each timed copy")

-- A 1x1 matrix: one GPU, copies within it.
local m1 = bandwidth.new_matrix({{id = 0, name = "A"}}, bandwidth.matrix_modes({"copy"}), 1000)
for _, mode in ipairs(m1.modes) do m1.cells[mode.name][1][1] = point(1234.5, true) end
t.is(bandwidth.format_matrix(m1, m1.modes[1]), ("%-8s%11s\n%-8s %9.1f "):format("", "GPU 0", "GPU 0", 1234.5),
  "1x1: one row, one column")
t.is(#bandwidth.matrix_points(m1), 4, "1x1: a cell a mode")
t.is(bandwidth.matrix_failures(m1), 0, "1x1: no failures")

-- --- the --devices report -------------------------------------------------------------
t.is(report.contention(1.52, 1.6112), "1.520 ms alone, 1.611 ms together (1.06x)", "contention as a number")
local rows = {{id = 0, name = "A", alone_ms = 1, together_ms = 1.25, limit_ms = 1, verified = true},
              {id = 3, name = "B", alone_ms = 2, together_ms = 2, limit_ms = 1.5, verified = false}}
local dl, aggregate = report.device_lines(rows, 1e6)
t.like(dl[1], "^GPU 0 %(A%): 1%.000 ms alone, 1%.250 ms together %(1%.25x%); efficiency 80%%; verification: PASSED$",
  "a GPU's line")
t.like(dl[2], "GPU 3 .-FAILED$", "a failed GPU says so")
t.near(aggregate.alone_gbps, 1.5, 1e-12, "aggregate alone: each GPU's rate, summed")
t.near(aggregate.together_gbps, 1.0, 1e-12, "aggregate together: all bytes over the slowest time")
t.like(dl[3], "^All 2 GPUs: 1%.5 GB/s each way alone %(summed%), 1%.0 GB/s together %(0%.67x%)$", "the aggregate line")
local function lim(h2d, d2h, k)
  return {h2d = {median = h2d}, d2h = {median = d2h}, kernel = {median = k}, limit = math.max(h2d, d2h, k)}
end
local ll = report.device_limit_lines({{id = 5}}, {lim(1, 2, 0.5)}, {lim(1.5, 2.2, 0.5)})
t.is(ll[1], "GPU 5: H2D 1.000 / 1.500 ms, D2H 2.000 / 2.200 ms, kernel 0.500 / 0.500 ms; " ..
  "limit 2.000 ms alone, 2.200 ms together (1.10x)", "a GPU's limits alone / together")

-- --- the scripts without a GPU -------------------------------------------------------------
local code, out, err
for _, help in ipairs{{"bandwidth", "%-%-matrix"}, {"bandwidth", "%-%-devices"}, {"streaming_overlap", "%-%-devices"},
                      {"memory_resources", "%-%-peer"}} do
  code, out = t.run(nodrv .. " " .. help[1] .. " --help")
  t.like(out, help[2], help[1] .. " --help shows " .. help[2]:gsub("%%", ""))
end
for _, usage in ipairs{
  {"bandwidth --matrix --devices 0,0", "bad value for %-%-devices: device 0 is listed twice"},
  {"streaming_overlap --devices x", "bad value for %-%-devices: 'x' is not a device id"},
  {"streaming_overlap --devices 0 --auto", "%-%-devices does not go with %-%-auto"},
  {"bandwidth --matrix", "no NVIDIA driver found"},   -- no GPU: status 2 too
} do
  code, out, err = t.run(nodrv .. " " .. usage[1])
  t.is(code, 2, usage[1] .. " exits 2")
  t.like(err, usage[2], usage[1] .. ": says why")
end

if not cuda.is_available() then
  t.skip("no CUDA device", 12)
  t.done()
end

-- --- one GPU ---------------------------------------------------------------------------------
local json = require "cuda.json"
local tmp = os.tmpname()
code, out, err = t.run(cudalua .. " bandwidth --matrix --devices 0 --sizes 1M --runs 2 --warmup 1 --json " .. tmp)
t.is(code, 0, "bandwidth --matrix --devices 0 runs: " .. err)
t.like(out, cuda.device_count() == 1 and "One GPU: the matrix is 1x1, a copy within it; peer pairs need two GPUs%."
  or "One GPU listed: the matrix is 1x1, a copy within it; list two or more for peer pairs%.", "one GPU: the sentence")
t.like(out, "%-%-%- sm write both ways, GB/s.-\n%s+GPU 0\nGPU 0%s+[%d.]+ \n", "a 1x1 matrix, verified")
t.like(out, "Every copy verified%.", "every copy verified")
local env = json.decode(t.read_file(tmp) or "null") or {}
t.is(env.results and #env.results, 8 + 3, "JSON: a result a mode and host path")
code, out, err = t.run(cudalua .. " streaming_overlap --devices 0 --elements 1000000 --streams 2,4 --runs 3 --warmup 1 --json " .. tmp)
t.is(code, 0, "streaming_overlap --devices 0 runs: " .. err)
t.like(out, "GPU 0 %(.-%): [%d.]+ ms alone, [%d.]+ ms together %([%d.]+x%); efficiency %d+%%; verification: PASSED",
  "--devices 0: alone and together, verified")
t.like(out, "All 1 GPUs: [%d.]+ GB/s each way alone", "and the aggregate")
env = json.decode(t.read_file(tmp) or "null") or {}
t.ok(env.passed == true and env.details and #env.details.schedules == 2, "JSON: passed, a schedule each stream count")
code, out = t.run(cudalua .. " memory_resources --peer --elements 4096")
t.is(code, 0, "memory_resources --peer exits 0")
if cuda.device_count() < 2 then
  t.like(out, "%[4%] Peer to peer\n    skipped: peer to peer needs two GPUs, and this machine has 1\n",
    "one GPU: --peer skips, with the reason")
else
  t.like(out, "%[4%] Peer to peer\n    kernel on GPU 1 writes GPU 0's buffer, copied to GPU 1 and back: PASSED",
    "two GPUs: the peer demo verified")
end
code, out, err = t.run(cudalua .. " streaming_overlap --devices " .. cuda.device_count() .. " --elements 1000")
t.ok(code ~= 0 and err:find("no CUDA device", 1, true), "a device that does not exist: an error that names it")

if cuda.device_count() < 2 then
  t.skip("several GPUs needed", 9)
  os.remove(tmp)
  t.done()
end

-- --- two GPUs or more ------------------------------------------------------------------------
code, out, err = t.run(cudalua .. " bandwidth --matrix --devices 0,1 --sizes 4M --runs 2 --warmup 1 --json " .. tmp)
t.is(code, 0, "bandwidth --matrix --devices 0,1 runs: " .. err)
t.like(out, "%-%-%- copy read, GB/s.-\n%s+GPU 0%s+GPU 1\nGPU 0%s+[%d.]+ %s+[%d.]+ \nGPU 1%s+[%d.]+ %s+[%d.]+ \n",
  "a 2x2 matrix of copy-engine reads, verified")
t.ok(not out:find("peer pairs need two GPUs"), "no one-GPU sentence")
env = json.decode(t.read_file(tmp) or "null") or {}
t.ok(env.passed == true and env.results and #env.results >= 4 * 4 + 6, "JSON: every cell of the copy modes, passed")
code, out, err = t.run(cudalua .. " streaming_overlap --devices 0,1 --elements 2000000 --streams 4 --runs 3 --warmup 1")
t.is(code, 0, "streaming_overlap --devices 0,1 runs: " .. err)
t.like(out, "GPU 0 .-verification: PASSED\nGPU 1 .-verification: PASSED\nAll 2 GPUs", "both GPUs verified, then the aggregate")
-- CUDA_VISIBLE_DEVICES=1,0: ids are the order the variable gives; names map through.
local name0, name1 = cuda.Device(0).name, cuda.Device(1).name
code, out = t.run("CUDA_VISIBLE_DEVICES=1,0 " .. cudalua .. " -e 'local c = require \"cuda\" " ..
  "print(c.device_count(), c.Device(0).name, c.Device(1).name, c.Device(0).pci_bus_id)'")
t.like(out, "^2\t" .. name1:gsub("%p", "%%%0") .. "\t" .. name0:gsub("%p", "%%%0") .. "\t",
  "CUDA_VISIBLE_DEVICES=1,0: device 0 is the physical GPU 1")
t.is(out:match("\t([^\t\n]+)\n$"), cuda.Device(1).pci_bus_id, "the same bus id as physical GPU 1")
code, out = t.run("CUDA_VISIBLE_DEVICES=1,0 " .. cudalua .. " bandwidth --matrix --devices 1 --engines copy --sizes 1M --runs 2 --warmup 1")
t.like(out, "GPU 1: " .. name0:gsub("%p", "%%%0"), "bandwidth --devices 1 under 1,0 is the physical GPU 0")
os.remove(tmp)
t.done()
