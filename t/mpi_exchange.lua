-- mpi_exchange.lua DIR SEED NRANKS: cuda.mpi_bench's exchange (bandwidth
-- --mpi) in host buffers, and device and pool buffers on a GPU, each rank
-- handed another seed, as ranks that read the clock on either side of a
-- second are: the patterns are rank 0's, so every exchange still arrives
-- as checked.
local cuda = require "cuda"
local mpi = require "cuda.mpi"
local mpi_bench = require "cuda.mpi_bench"
local check = require "mpi_check"
local dir, seed = arg[1], math.tointeger(arg[2])
local c = check.open(dir, "exchange", mpi.rank)

local gpu = cuda.device_count() > 0
local buffers = gpu and {"host", "device", "pool"} or {"host"}
local rows = mpi_bench.exchange(mpi, {sizes = {64, 4096, 1 << 20}, buffers = buffers, runs = 2, warmup = 1,
                                      seed = seed + mpi.rank, device = gpu and cuda.Device(0) or nil})
if mpi.rank > 1 then
  c.is(#rows, 0, "a rank outside the exchange has no rows")
else
  c.is(#rows, 6 * #buffers, "two tests at three sizes a kind of buffer")
  for _, r in ipairs(rows) do
    c.ok(r.verified, ("%s buffers, %s, %d bytes: arrived as sent"):format(r.buffers, r.test, r.bytes))
  end
end
c.done()
