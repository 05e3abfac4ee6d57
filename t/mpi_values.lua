-- mpi_values.lua DIR SEED NRANKS: Lua values through cuda.mpi, on every rank.
local mpi = require "cuda.mpi"
local check = require "mpi_check"
local dir, seed, nranks = arg[1], math.tointeger(arg[2]), math.tointeger(arg[3])
local c = check.open(dir, "values", mpi.rank)
local me, n = mpi.rank, mpi.size

c.is(n, nranks, "size is the number of ranks started")
c.ok(math.type(me) == "integer" and me >= 0 and me < n, "rank is in 0..size-1")
c.is(mpi.local_rank, me, "local_rank is the rank (one node)")
c.ok(type(mpi.hostname) == "string" and #mpi.hostname > 0, "hostname is a name")
c.ok(mpi.staging == "ipc on a node, pinned staging across nodes" or mpi.staging:find("^pinned staging"), "staging names the paths", mpi.staging)

-- What rank r sends: every kind of value, derived from the seed and r only,
-- so every rank knows what every other rank sent.
local function value(r)
  return {
    rank = r, int = seed * 1000 + r, float = seed + r / 4, whole_float = 1.0 * r, one = 1,
    big = math.maxinteger - r, small = math.mininteger + r, huge = -math.huge, nan = 0 / 0,
    text = string.rep("x", r) .. "\0" .. tostring(seed), flags = {true, false, r % 2 == 0},
    nested = {{{r, {deeper = "s" .. r}}}}, [1.5] = "float key", [true] = "boolean key",
    [r + 10] = "integer key", holes = {1, nil, 3}, empty = {},
  }
end

local ranks = {}
for r = 0, n - 1 do ranks[r + 1] = r end
c.same(mpi.allgather(me), ranks, "allgather of ranks gives 0..size-1 in order")
local hosts = mpi.allgather(mpi.hostname)
c.ok(#hosts == n and hosts[1] == mpi.hostname, "allgather of hostnames: one per rank, all this node")

for root = 0, n - 1 do
  c.same(mpi.bcast(me == root and value(me) or "not sent", root), value(root), "bcast from root " .. root)
  local got = mpi.gather(value(me), root)
  if me == root then
    local want = {}
    for r = 0, n - 1 do want[r + 1] = value(r) end
    c.same(got, want, "gather to root " .. root .. ": every rank's value, by rank")
  else
    c.is(got, nil, "gather to root " .. root .. ": nil on the other ranks")
  end
end
c.same(mpi.bcast(me == 0 and 2^53 | 0 or nil, 0), 2^53 | 0, "bcast keeps an integer an integer")
c.same(mpi.bcast(me == 0 and 3.0 or nil, 0), 3.0, "bcast keeps a float a float")
c.is(mpi.bcast(nil, n - 1), nil, "bcast of nil")
c.is(mpi.bcast(me ~= 1, 1), false, "bcast of false (rank 1 sends it)")

local all = mpi.allgather(value(me))
c.is(#all, n, "allgather: one value per rank")
for r = 0, n - 1 do c.same(all[r + 1], value(r), "allgather: rank " .. r .. "'s value") end
local long = mpi.allgather(string.rep(seed .. ":" .. me, 100000))
for r = 0, n - 1 do
  c.is(long[r + 1], string.rep(seed .. ":" .. r, 100000), "allgather of a long string from rank " .. r)
end

-- The barrier: rank 0 writes a file late; nobody may pass before it does.
local marker = ("%s/barrier.%d"):format(dir, seed)
if me == 0 then
  os.execute("sleep 0.3")
  assert(io.open(marker, "w")):close()
end
mpi.barrier()
c.ok(io.open(marker) ~= nil, "barrier: no rank passes before rank 0 reaches it")

-- Bad values: argument errors on every rank, before MPI is asked anything.
-- (bcast serializes on the root only, so only the root may try one.)
c.raises(function() mpi.allgather(print) end, "bad argument #1 to 'allgather' %(cannot send a function %(at value%)%)",
         "a function cannot be sent")
c.raises(function() mpi.allgather({a = {b = io.stdout}}) end, "cannot send a userdata %(at value%.a%.b%)",
         "a userdata cannot be sent; the error names the key")
c.raises(function() mpi.gather({1, {2, print}}, 0) end, "cannot send a function %(at value%[2%]%[2%]%)",
         "gather names the bad key")
c.raises(function() mpi.allgather({[{}] = 1}) end, "cannot send a table as a key", "a table cannot be a key")
local cycle = {}
cycle.self = cycle
c.raises(function() mpi.allgather(cycle) end, "nested this deep %(or a cycle%)", "a cycle is an error, not a crash")
c.raises(function() mpi.bcast(1, n) end, "rank " .. n .. " out of range 0%.%." .. n - 1, "bcast: root out of range")
c.raises(function() mpi.gather(1, -1) end, "rank %-1 out of range", "gather: negative root")
c.raises(function() mpi.bcast(1, "zero") end, "number expected", "bcast: root must be a number")
if me == 0 then
  c.raises(function() mpi.bcast(coroutine.create(print), 0) end, "cannot send a thread", "bcast: the root checks its value")
end
mpi.barrier()
c.done()
