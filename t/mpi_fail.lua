-- mpi_fail.lua: rank 1 fails while the others wait in a barrier; the job
-- must end, with the message, instead of hanging.
local mpi = require "cuda.mpi"
if mpi.rank == 1 then error("rank 1 fails on purpose") end
mpi.barrier()
print("passed the barrier without rank 1")
