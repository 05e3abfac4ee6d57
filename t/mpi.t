-- mpi.t: cuda.mpi across 4 ranks of this machine under mpirun, over the
-- loopback interface only. Each t/mpi_*.lua script writes its ranks'
-- results to files (see t/mpi_check.lua); this file turns them into TAP.
local t = require "tap"

local builddir = os.getenv("CUDALUA_BUILDDIR") or "."
local cudalua = builddir .. "/src/cudalua"
local core = builddir .. "/src/.libs/mpi_core.so"
local tdir = (os.getenv("CUDALUA_SRCDIR") or "..") .. "/t"
local NRANKS = 4

-- Without its C part, require "cuda.mpi" says why, in a sentence.
local code, _, err = t.run(("LUA_CPATH='/nonexistent/?.so' %s -e 'require \"cuda.mpi\"'"):format(cudalua))
t.ok(code ~= 0, "require 'cuda.mpi' without cuda.mpi_core fails")
t.like(err, "cuda.mpi is not available: its C part, cuda.mpi_core, did not load", "and says why")

local mpirun = os.getenv("CUDALUA_MPIRUN") or ""
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
local launch = table.concat({
  "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
  "OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_plm_rsh_agent=false",
  -- Plugins stay loaded, so that leak reports can name them (t/lsan.supp).
  "OMPI_MCA_mca_base_component_disable_dlclose=1",
  -- Open MPI has no frame pointers: only a full unwind reaches its frames.
  "LSAN_OPTIONS=\"${LSAN_OPTIONS:+$LSAN_OPTIONS:}fast_unwind_on_malloc=0\"",
  "LUA_CPATH='" .. core .. "'",
  "timeout 20", mpirun, "--oversubscribe -n", NRANKS,
  "--mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo",
  "--mca btl_vader_single_copy_mechanism none -x LUA_PATH -x LUA_CPATH", cudalua,
}, " ")

local function run_ranks(script, ...)
  return t.run(table.concat({launch, tdir .. "/mpi_" .. script .. ".lua", ...}, " "))
end

-- Every rank's checks, as TAP; a rank that did not finish is a failure.
local function report(script, dir, rc, stderr)
  if not t.is(rc, 0, script .. ": mpirun exits 0") then t.diag(stderr) end
  for rank = 0, NRANKS - 1 do
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
for _, script in ipairs{"values", "buffers"} do
  local dir = t.tmpdir()
  local rc, _, stderr = run_ranks(script, dir, seed, NRANKS)
  report(script, dir, rc, stderr)
  os.execute("rm -rf '" .. dir .. "'")
end

-- A rank that raises an error ends the whole job, with its message.
local started = os.time()
local rc, out, stderr = run_ranks("fail")
t.ok(rc ~= 0 and rc ~= 124, "a failing rank ends the job with a non-zero status, not a hang")
t.like(stderr, "rank 1 fails on purpose", "its message is on stderr")
t.ok(not out:find("passed the barrier"), "no rank passes a barrier without it")
t.ok(os.time() - started < 15, "the job ends at once")
t.done()
