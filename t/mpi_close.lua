-- mpi_close.lua DIR SEED: a buffer closed while a non-blocking send or
-- receive on it is pending (buf:close(), or a finalizer) is closed for
-- Lua only: MPI never reads or writes its memory after it went back, and
-- memory allocated meanwhile is left alone. Two ranks; host memory.
local cuda = require "cuda"
local mpi = require "cuda.mpi"
local check = require "mpi_check"
local dir = arg[1]
local c = check.open(dir, "close", mpi.rank)
local host = cuda.HostMemoryResource()
local N = 1 << 20                     -- past malloc's mmap threshold: freed memory faults

local function pattern(byte)
  local b = host:allocate(N)
  b:fill(byte)
  return b
end
local function all_bytes(b, byte)
  local v = b:view("uint8")
  return v:min() == byte and v:max() == byte
end

if mpi.rank == 0 then
  -- receive into a buffer closed at once; a buffer made afterwards must not be written
  local inbox = host:allocate(N)
  local r = mpi.irecv(inbox, 1, 5)
  inbox:close()
  local later = pattern(0x11)
  mpi.barrier()                       -- now rank 1 sends
  local ok, err = pcall(r.wait, r)
  c.ok(ok or tostring(err):match("closed"), "irecv into a closed buffer: completes or says closed", tostring(err))
  c.ok(all_bytes(later, 0x11), "a buffer allocated after the close is left alone")
  -- the send side: what arrives is what the closed buffer held
  local got = pattern(0)
  mpi.recv(got, 1, 6)
  c.ok(all_bytes(got, 0x5a), "isend from a buffer closed while pending sends its bytes")
elseif mpi.rank == 1 then
  mpi.barrier()
  mpi.send(pattern(0x77), 0, 5)
  local out = pattern(0x5a)
  local r = mpi.isend(out, 0, 6)
  setmetatable({}, {__gc = function() out:close() end})
  out:close()
  local poison = pattern(0xee)       -- likely the memory out had
  r:wait()
  c.ok(all_bytes(poison, 0xee), "the sender's later buffer is left alone")
else
  mpi.barrier()
end
mpi.barrier()
c.done()
