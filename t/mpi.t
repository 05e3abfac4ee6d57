-- mpi.t: cuda.mpi across 4 ranks of this machine under mpirun, over the
-- loopback interface only. Each t/mpi_*.lua script writes its ranks'
-- results to files (see t/mpi_check.lua); this file turns them into TAP.
local t = require "tap"

local builddir = os.getenv("CUDALUA_BUILDDIR") or "."
local cudalua = builddir .. "/src/cudalua"
local core = builddir .. "/src/.libs/mpi_core.so"
local tdir = (os.getenv("CUDALUA_SRCDIR") or "..") .. "/t"
local NRANKS = 4

-- Without its C part, require "cuda.mpi" says why, in a sentence (cudalua
-- preloads the C part from where it was built: that preload taken away).
local code, _, err = t.run(("LUA_CPATH='/nonexistent/?.so' %s -e 'package.preload[\"cuda.mpi_core\"] = nil "
  .. "require \"cuda.mpi\"'"):format(cudalua))
t.ok(code ~= 0, "require 'cuda.mpi' without cuda.mpi_core fails")
t.like(err, "cuda.mpi is not available: its C part, cuda.mpi_core, did not load", "and says why")

-- Device binding: the launcher's node-local rank, from its variables, in
-- child processes; no MPI and no GPU needed.
local LOCAL_RANK_VARIABLES = {"OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                              "PMI_LOCAL_RANK", "PALS_LOCAL_RANKID", "SLURM_LOCALID"}
local function with_env(assignments, lua)
  local unset = {}
  for _, name in ipairs(LOCAL_RANK_VARIABLES) do unset[#unset + 1] = "-u " .. name end
  local rc, out = t.run(("env %s %s %s -e '%s'"):format(table.concat(unset, " "), assignments, cudalua, lua))
  return rc == 0 and (out:gsub("\n$", "")) or ("exit " .. tostring(rc))
end
local function local_rank(assignments)
  return with_env(assignments, 'print(require("cuda").launcher_local_rank())')
end
math.randomseed(os.time())
local r1, r2 = math.random(1, 500), math.random(501, 1000)
t.is(local_rank(""), "", "launcher_local_rank: nothing outside a launcher")
for _, name in ipairs(LOCAL_RANK_VARIABLES) do
  t.is(local_rank(name .. "=" .. r1), r1 .. "\t" .. name, "launcher_local_rank reads " .. name)
end
t.is(local_rank(("SLURM_LOCALID=%d OMPI_COMM_WORLD_LOCAL_RANK=%d"):format(r1, r2)), r2 .. "\tOMPI_COMM_WORLD_LOCAL_RANK",
     "mpirun's variable wins over an inherited SLURM_LOCALID")
for _, bad in ipairs{"-1", "3x", "''", "' 4'", "99999999999"} do
  t.is(local_rank(("OMPI_COMM_WORLD_LOCAL_RANK=%s SLURM_LOCALID=%d"):format(bad, r1)), r1 .. "\tSLURM_LOCALID",
       "a malformed local rank (" .. bad .. ") is skipped")
end
local ndevices = require("cuda").device_count()
t.is(with_env("OMPI_COMM_WORLD_LOCAL_RANK=" .. r1, 'print(require("cuda.cli").device_id("local"))'),
     tostring(ndevices > 0 and r1 % ndevices or 0), "--device's default: the local rank's GPU (local rank % GPUs), else 0")
if ndevices > 0 then
  t.is(with_env("OMPI_COMM_WORLD_LOCAL_RANK=" .. r1, "local cuda = require(\"cuda\") print(cuda.Device().id)"), tostring(r1 % ndevices),
       "cuda.Device(): the local rank's GPU, local rank % device count")
  t.is(with_env("SLURM_LOCALID=" .. r1, ("local cuda = require(\"cuda\") cuda.Device(%d):set_current() print(cuda.Device().id)"):format((r1 + 1) % ndevices)),
       tostring((r1 + 1) % ndevices), "set_current wins over the launcher")
else
  t.skip("no CUDA device: cuda.Device() under a launcher", 2)
end

-- Whether a launcher's variables say the job has several processes.
local results = require "cuda.results"
local function size_of(env) return results.launcher_size(function(name) return env[name] end) end
t.is(size_of{OMPI_COMM_WORLD_SIZE = tostring(r1)}, r1, "launcher_size: mpirun's job size")
t.is(select(2, size_of{SLURM_STEP_NUM_TASKS = "2"}), "SLURM_STEP_NUM_TASKS", "launcher_size: srun's, and its variable")
t.is(size_of{}, nil, "launcher_size: nil outside a launcher")
t.is(size_of{PMI_SIZE = "0"}, nil, "launcher_size: 0 is no job size")

local mpirun = os.getenv("CUDALUA_MPIRUN") or ""
if io.open(core) then
  local _, out = t.run(("LUA_CPATH='/nonexistent/?.so' %s -e 'print(require(\"cuda.mpi\").size)'"):format(cudalua))
  t.is(out, "1\n", "cudalua loads cuda.mpi_core from where it was built, whatever LUA_CPATH says")
end
if not io.open(core) then
  t.skip("cudalua was built without MPI (configure --with-mpi)")
  t.done()
elseif mpirun == "" or not os.execute(("test -x '%s'"):format(mpirun)) then
  t.skip("mpirun is missing")
  t.done()
end

-- Root is allowed (containers), processes may outnumber cores, and every
-- byte goes over loopback: shared memory, or TCP on lo (ob1, so that no
-- other transport picks an interface). No ssh is needed or tried.
local function launch(nranks, extra) return table.concat({
  "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
  "OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_plm_rsh_agent=false",
  -- Plugins stay loaded, so that leak reports can name them (t/lsan.supp).
  "OMPI_MCA_mca_base_component_disable_dlclose=1",
  -- Open MPI has no frame pointers: only a full unwind reaches its frames.
  "LSAN_OPTIONS=\"${LSAN_OPTIONS:+$LSAN_OPTIONS:}fast_unwind_on_malloc=0\"",
  "LUA_CPATH='" .. core .. "'",
  "timeout " .. t.time_limit(20), mpirun, "--oversubscribe -n", nranks,
  "--mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo",
  "--mca btl_vader_single_copy_mechanism none -x LUA_PATH -x LUA_CPATH", extra or "", cudalua,
}, " ") end

local function run_ranks(script, ...)
  return t.run(table.concat({launch(NRANKS), tdir .. "/mpi_" .. script .. ".lua", ...}, " "))
end

-- Every rank's checks, as TAP; a rank that did not finish is a failure.
local function report(script, dir, rc, stderr, nranks)
  if not t.is(rc, 0, script .. ": mpirun exits 0") then t.diag(stderr) end
  for rank = 0, (nranks or NRANKS) - 1 do
    local text = t.read_file(("%s/%s.%d"):format(dir, script, rank)) or ""
    for status, name, detail in text:gmatch("([^\t\n]+)\t([^\t\n]*)\t([^\n]*)\n") do
      if not t.ok(status == "ok", ("%s, rank %d: %s"):format(script, rank, name)) then t.diag(detail) end
    end
    if not t.ok(text:find("done\n$"), ("%s, rank %d ran to the end"):format(script, rank)) then
      t.diag(stderr)
    end
  end
end

local seed = os.time() % 100000
for _, script in ipairs{"values", "buffers", "close", "exchange"} do
  local dir = t.tmpdir()
  local rc, _, stderr = run_ranks(script, dir, seed, NRANKS)
  report(script, dir, rc, stderr)
  os.execute("rm -rf '" .. dir .. "'")
end

-- Device buffers through every operation, under the fake driver (device
-- memory is host memory there; cuMemAlloc's is shared between processes,
-- so CUDA IPC works between ranks): 2 and 4 ranks on 2 fake GPUs, with
-- IPC, with the driver refusing it, with staging forced, and without
-- NVRTC (device allreduce then reduces on the host).
local fake_so = os.getenv("CUDALUA_FAKE_LIBCUDA")
local function under_fake(mode)
  return ("-x CUDALUA_LIBCUDA='%s' -x FAKECUDA_DEVICES=2%s%s"):format(fake_so,
    mode == "refuse" and " -x FAKECUDA_IPC=refuse" or "", mode == "pinned" and " -x CUDALUA_MPI_STAGING=pinned"
    or mode == "nokernel" and " -x CUDALUA_NVRTC=/nonexistent/libnvrtc.so -x CUDALUA_CACHE=off" or "")
end
if fake_so and io.open(fake_so) then
  for _, case in ipairs{{2, "ipc"}, {4, "ipc"}, {2, "refuse"}, {4, "refuse"}, {2, "pinned"}, {4, "pinned"},
                       {2, "nokernel"}} do
    local nranks, mode = case[1], case[2]
    local dir = t.tmpdir()
    local rc, _, stderr = t.run(table.concat({launch(nranks, under_fake(mode)), tdir .. "/mpi_device.lua", dir, seed, mode}, " "))
    report(("device.%s.%d"):format(mode, nranks), dir, rc, stderr, nranks)
    os.execute("rm -rf '" .. dir .. "'")
  end
  -- A rank that dies while a device message streams through the ring.
  local began = os.time()
  local rc, out, stderr = t.run(table.concat({launch(NRANKS, under_fake("pinned")), tdir .. "/mpi_die.lua"}, " "))
  t.ok(rc ~= 0 and rc ~= 124, "a rank dying mid-transfer ends the job with a non-zero status, not a hang")
  t.like(stderr, "rank 1 dies mid%-transfer", "its message is on stderr")
  t.ok(not out:find("finished a send") and not out:find("passed the barrier"), "no rank carries on without it")
  t.ok(os.time() - began < t.time_limit(15), "the job ends at once")
else
  t.skip("no fake driver (CUDALUA_FAKE_LIBCUDA): device buffers through cuda.mpi", 1)
end

-- cuda.results across ranks (t/mpi_results.lua): rank 0 alone prints, one
-- table and one JSON file for the job, every rank's figures in it.
local function rank_figures(seed, r)   -- as t/mpi_results.lua makes them: the medians
  return r == 2 and seed / 2 or seed + r, r == 2 and 3 * seed or seed + r / 10
end
local function median4(list)
  local sorted = table.move(list, 1, #list, 1, {})
  table.sort(sorted)
  return (sorted[2] + sorted[3]) / 2
end
do
  local dir = t.tmpdir()
  local fig_seed = math.random(1, 1000)
  local rc, out, stderr = run_ranks("results", fig_seed, "--json", dir .. "/r.json", "--csv", dir .. "/r.csv")
  if not t.is(rc, 0, "results: mpirun exits 0") then t.diag(stderr) end
  t.like(out, "rank 0 prints %(seed " .. fig_seed .. "%)", "results: rank 0 prints")
  t.ok(not out:find("rank [123] prints") and not out:find("rank [123] writes"), "results: the other ranks print nothing (print, io.write, io.stdout)")
  t.like(stderr, "rank 3 writes to stderr", "results: stderr stays on every rank")
  t.like(out, "Across 4 ranks on 2 GPUs", "results: one table, across the ranks")
  t.like(out, "|%s+3 |[^\n]*GPU of rank 3 |%s+NO ", "results: the table names the rank that failed")
  local _, slowest = out:gsub("| [^|\n]+ GPU 0 %(rank 2%) |", "")
  t.is(slowest, 2, "results: the slowest GPU is named for a rate and for a time")
  local doc, why = results.read(dir .. "/r.json")
  t.ok(doc, "results: rank 0 wrote one results file " .. tostring(why))
  doc = doc or {results = {}, ranks = {}, environment = {}}
  t.is(doc.passed, false, "results: the job failed as a rank did")
  t.is(#doc.ranks, 4, "results: the JSON holds every rank's envelope")
  local rates, times, tagged = {}, {}, true
  for r = 0, 3 do
    rates[r + 1], times[r + 1] = rank_figures(fig_seed, r)
    local env = doc.ranks[r + 1] or {results = {}, environment = {device = {}}}
    tagged = tagged and env.rank == r and type(env.host) == "string" and env.environment.device.id == r % 2
      and env.results[1] and env.results[1].median == rates[r + 1] and env.results[2].median == times[r + 1]
  end
  t.ok(tagged, "results: each rank's results, tagged rank, host and GPU")
  local copy, latency = doc.results[1] or {}, doc.results[2] or {}
  t.is(copy.name, "copy", "results: the figures across GPUs, by name")
  t.near(copy.median, median4(rates), 1e-12, "results: a rate's median across GPUs")
  t.near(latency.median, median4(times), 1e-12, "results: a time's median across GPUs")
  t.ok(copy.samples and copy.samples[3] == rates[3] and copy.samples[4] == rates[4], "results: samples: each GPU's median, by rank")
  t.like(tostring(copy.slowest), "GPU 0 %(rank 2%)", "results: the JSON names the slowest GPU")
  t.near(latency.spread, (3 * fig_seed - fig_seed) / median4(times), 1e-9, "results: the spread, (max - min) / median")
  t.is(doc.environment.mpi and doc.environment.mpi.size, 4, "results: the job's size")
  local csv = t.read_file(dir .. "/r.csv") or ""
  t.like(csv, "^name,unit,n,median.-\r\ncopy,GB/s,4,.-\r\nlatency,us,4,", "results: the CSV holds the figures across GPUs")
  rc, out = run_ranks("results", fig_seed, "--verbose")
  local _, printed = out:gsub("rank %d prints", "")
  t.ok(rc == 0 and printed == 4, "results --verbose: every rank prints")
  os.execute("rm -rf '" .. dir .. "'")
end

-- bandwidth --mpi: ping-pong and bidirectional between ranks 0 and 1, host
-- buffers (no GPU needed), every size verified, each row naming its path;
-- ranks 2 and 3 wait. Device buffers on a GPU, and under the fake driver
-- (IPC between the ranks, then forced staging).
local function bandwidth_mpi(n, buffers, extra, path, path_pattern)
  local dir = t.tmpdir()
  local rc, out, stderr = t.run(table.concat({launch(n, extra), "bandwidth --mpi --mpi-buffers", buffers,
    "--sizes 4K,1M --runs 3 --warmup 1 --json", dir .. "/b.json"}, " "))
  local what = ("bandwidth --mpi, %s buffers%s"):format(buffers, extra and ", " .. path or "")
  if not t.is(rc, 0, what .. ": exit 0") then t.diag(stderr) end
  t.like(out, "MPI exchange between ranks 0 and 1 %((.-)%)", what .. ": names the staging path")
  t.ok(out:find("ipc on a node") or out:find("pinned staging"), what .. ": the staging path is one of the two")
  local _, verified = out:gsub("\n" .. buffers .. "%s+[%a-]+%s+%d+ [KM]B%s+[%d.]+%s+[%d.]+%s+" .. (path_pattern or path or "[%a-]+") .. "%s+yes", "")
  t.is(verified, 4, what .. ": 2 tests x 2 sizes, each verified, each naming its path")
  local doc = results.read(dir .. "/b.json") or {results = {}}
  local names = {}
  for _, r in ipairs(doc.results) do
    if r.name:find("^mpi") then names[#names + 1] = r.name .. (r.verified and "" or " (not verified)") end
  end
  t.is(table.concat(names, ","), ("mpi ping-pong B 4096,mpi ping-pong B 1048576,mpi bidirectional B 4096,"
    .. "mpi bidirectional B 1048576"):gsub("B", buffers), what .. ": the JSON holds every exchange, verified")
  if buffers ~= "host" then
    t.like(out, "the device's own copies at 1 MB: device to device [%d.]+ GB/s, pinned host to device [%d.]+ GB/s",
           what .. ": the device's own rates, measured in the same run")
  end
  os.execute("rm -rf '" .. dir .. "'")
end
bandwidth_mpi(NRANKS, "host")
if require("cuda").device_count() > 0 then
  bandwidth_mpi(2, "device")   -- two ranks on one GPU exchange device buffers
  bandwidth_mpi(2, "pool", nil, "ipc")   -- and a shared pool's, through IPC
else
  t.skip("no CUDA device: bandwidth --mpi with device and pool buffers", 10)
end
if fake_so and io.open(fake_so) then
  bandwidth_mpi(2, "device", under_fake("ipc"), "ipc")
  bandwidth_mpi(2, "pool", under_fake("ipc"), "ipc")
  bandwidth_mpi(2, "device", under_fake("pinned"), "staged", "[inlestagd]+")   -- 4K inline, 1M staged
else
  t.skip("no fake driver: bandwidth --mpi with device and pool buffers, fake", 18)
end

-- A rank that raises an error ends the whole job, with its message.
local started = os.time()
local rc, out, stderr = run_ranks("fail")
t.ok(rc ~= 0 and rc ~= 124, "a failing rank ends the job with a non-zero status, not a hang")
t.like(stderr, "rank 1 fails on purpose", "its message is on stderr")
t.ok(not out:find("passed the barrier"), "no rank passes a barrier without it")
t.ok(os.time() - started < 15, "the job ends at once")
t.done()
