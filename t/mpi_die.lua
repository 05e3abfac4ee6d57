-- mpi_die.lua: rank 1 dies part way through receiving a staged device
-- message that rank 0 is sending through its ring; the job must end (MPI's
-- abort), not leave rank 0 waiting for chunks nobody takes. Rank 0 sends
-- a second message behind it that rank 1 never receives: however far the
-- first got before rank 1 died (its receive may even finish within those
-- tests), rank 0 never finishes sending.
local cuda = require "cuda"
local mpi = require "cuda.mpi"
mpi.chunk_size = 1 << 20   -- above every eager limit: each chunk waits for its receive
local dev = cuda.Device()
local s = dev:create_stream()
local size = 1 << 25
if mpi.rank == 0 then
  local buf = dev.memory_resource:allocate(size, s)
  mpi.send(buf, 1, 1)
  mpi.send(buf, 1, 2)
  print("rank 0 finished a send to a dead rank")
elseif mpi.rank == 1 then
  local req = mpi.irecv(dev.memory_resource:allocate(size, s), 0, 1)
  for _ = 1, 50 do req:test() end
  error("rank 1 dies mid-transfer")
end
mpi.barrier()
print("passed the barrier without rank 1")
