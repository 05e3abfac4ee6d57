-- mpi_results.lua SEED [--verbose] [--json FILE] [--csv FILE]: cuda.results
-- under mpirun, with no GPU: every rank adds figures of its own (rank 2 the
-- slowest, rank 3 failing), prints a line, and finishes; t/mpi.t checks
-- that rank 0 alone printed, its table and its JSON.
local cli = require "cuda.cli"
local results = require "cuda.results"

local parser = cli.parser("mpi_results", "cuda.results across ranks")
parser:argument("seed", "Figures derive from it."):convert(cli.positive_integer)
results.options(parser, {"json", "csv", "md", "mpi"})
local args = cli.parse(parser, arg)

local mpi = require "cuda.mpi"
local me, seed = mpi.rank, args.seed
print(("rank %d prints (seed %d)"):format(me, seed))
io.write(("rank %d writes\n"):format(me))
io.stdout:write(("rank %d writes to io.stdout\n"):format(me))
io.stderr:write(("rank %d writes to stderr\n"):format(me))

-- Rates: rank 2 the lowest; times: rank 2 the longest.
local rate = me == 2 and seed / 2 or seed + me
local time = me == 2 and 3 * seed or seed + me / 10
local run = results.new("mpi_results", {device = {id = me % 2, name = "GPU of rank " .. me}, argv = arg})
run:add("copy", "GB/s", {rate, rate, rate + 1})
run:add("latency", "us", {time - 1, time, time})
run:finish(args, me ~= 3, {rank = me})
