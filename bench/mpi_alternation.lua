-- bench/mpi_alternation.lua: what a message costs when two processes take
-- turns on one GPU. Two ranks ping-pong 8 host bytes (cuda.mpi, inline);
-- on its turn a rank may also copy 4 KiB device to device on its stream
-- and wait for it (an event, polled, as cuda.mpi waits):
--   none   no GPU work: MPI's own round trip
--   one    only rank 0 works on the GPU: one process uses it
--   both   both do: each round trip the GPU goes from one process's
--          context to the other's and back
--   alone  rank 0 does both turns' GPU work itself, no MPI: two turns
--          with no switch between processes
-- A CUDA IPC message is a turn of the receiving process on the GPU between
-- turns of the sender: "both" minus "one" is what the switch adds.
--
--   mpirun -n 2 cudalua bench/mpi_alternation.lua [ROUNDS]
local cuda = require "cuda"
local mpi = require "cuda.mpi"
local bench = require "cuda.bench"

local rounds = math.tointeger(tonumber(arg[1])) or 2000
local me = mpi.rank
assert(mpi.size >= 2, "run it under mpirun -n 2")
local dev = cuda.Device(mpi.local_rank % cuda.device_count())
dev:set_current()
local s, ev = dev:create_stream(), dev:create_event()
local a, b = dev.memory_resource:allocate(4096, s), dev.memory_resource:allocate(4096, s)
a:fill(7, s)
s:sync()
local token = cuda.HostMemoryResource():allocate(8)

local function gpu_turn()
  a:copy_to(b, s)
  s:record(ev)
  while not ev.is_done do end
end

local function round_trip(work0, work1)
  if me == 0 then
    if work0 then gpu_turn() end
    mpi.send(token, 1)
    mpi.recv(token, 1)
  elseif me == 1 then
    mpi.recv(token, 0)
    if work1 then gpu_turn() end
    mpi.send(token, 0)
  end
end

local function median_us(fn)
  for _ = 1, 100 do fn() end
  local t = {}
  for i = 1, rounds do
    local t0 = cuda.clock()
    fn()
    t[i] = (cuda.clock() - t0) * 1e6
  end
  return bench.median(t)
end

local rows = {
  {"none", median_us(function() round_trip(false, false) end)},
  {"one", median_us(function() round_trip(true, false) end)},
  {"both", median_us(function() round_trip(true, true) end)},
}
mpi.barrier()
local alone = me == 0 and median_us(function() gpu_turn() gpu_turn() end)
mpi.barrier()
if me == 0 then
  print(("%d round trips each, median microseconds, %s"):format(rounds, dev.name))
  for _, r in ipairs(rows) do print(("%-6s %8.1f"):format(r[1], r[2])) end
  print(("%-6s %8.1f   (two GPU turns of rank 0, no MPI)"):format("alone", alone))
  print(("both - one: %.1f us for the other process's turn on the GPU"):format(rows[3][2] - rows[2][2]))
end
