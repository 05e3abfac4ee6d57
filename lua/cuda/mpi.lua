-- cuda.mpi: experiments across a cluster's GPUs through MPI.
-- SPDX-License-Identifier: MIT
--
-- The C part, cuda.mpi_core (src/mpi.c), talks to MPI. This layer stages
-- device buffers through pinned memory when the MPI library cannot take
-- device pointers, with the cuda module's own copies, so that a script is
-- the same on a CUDA-aware MPI and on any other. MPI starts on first use:
-- a field (mpi.rank, ...) or a call.
local found, core = pcall(require, "cuda.mpi_core")
if not found then
  error("cuda.mpi is not available: its C part, cuda.mpi_core, did not load. " ..
        "cudalua builds it when configure finds MPI (--with-mpi; Debian: libopenmpi-dev).\n" ..
        tostring(core), 2)
end
local cuda = require "cuda"

local M = {
  ANY_SOURCE = core.ANY_SOURCE, ANY_TAG = core.ANY_TAG,
  barrier = core.barrier, bcast = core.bcast, gather = core.gather, allgather = core.allgather,
}

-- rank, size, local_rank, hostname and staging are read once, on first use.
local lazy_fields = {rank = true, size = true, local_rank = true, hostname = true, staging = true}
setmetatable(M, {__index = function(_, key)
  if not lazy_fields[key] then return nil end
  local info = core.info()
  for name in pairs(lazy_fields) do rawset(M, name, info[name]) end
  rawset(M, "staging", info.cuda_aware and "cuda-aware" or "pinned staging")
  return rawget(M, key)
end})

-- Whether MPI can take buf as it is: host-accessible memory, views (always
-- host memory), or any memory on a CUDA-aware MPI. Anything that is not a
-- buffer goes to the C part, which names what is wrong with it.
local function direct(buf)
  return not core.is_device(buf) or M.staging == "cuda-aware"
end

-- One stream and pinned resource for staging, per device.
local stagers = {}
local function stager(buf)
  local id = buf.device_id
  stagers[id] = stagers[id] or {
    stream = cuda.Device(id):create_stream{non_blocking = true},
    mr = cuda.PinnedMemoryResource(),
  }
  return stagers[id]
end

-- A pinned buffer the size of device buffer buf, holding its contents when
-- copy_in; returns it and the staging stream, synchronized.
local function stage(buf, copy_in)
  local s = stager(buf)
  local pinned = s.mr:allocate(buf.size, s.stream)
  if copy_in then buf:copy_to(pinned, s.stream) end
  s.stream:sync()
  return pinned, s.stream
end

local function unstage(pinned, buf, stream)
  pinned:copy_to(buf, stream)
  stream:sync()
end

-- fn(pinned) on a pinned copy of device buffer buf, holding buf's contents
-- when copy_in, copied back into buf after when copy_back.
local function through_pinned(buf, copy_in, copy_back, fn)
  local pinned <close>, stream = stage(buf, copy_in)
  local bytes, from, tag = fn(pinned)
  if copy_back then unstage(pinned, buf, stream) end
  return bytes, from, tag
end

-- send(buf, dest [, tag]): buf is a cuda.Buffer or cuda.View.
function M.send(buf, dest, tag)
  if direct(buf) then
    core.send(buf, dest, tag)
  else
    through_pinned(buf, true, false, function(pinned) core.send(pinned, dest, tag) end)
  end
end

-- recv(buf [, src [, tag]]) -> bytes received, source, tag. (No tail calls
-- into the C part: argument errors name the function only without them.)
function M.recv(buf, src, tag)
  if not direct(buf) then
    return through_pinned(buf, false, true, function(pinned)
      local bytes, from, got_tag = core.recv(pinned, src, tag)
      return bytes, from, got_tag
    end)
  end
  local bytes, from, got_tag = core.recv(buf, src, tag)
  return bytes, from, got_tag
end

-- isend(buf, dest [, tag]) -> request: req:wait(), req:test(). The request
-- keeps the buffer (or its pinned copy) alive until it completes.
function M.isend(buf, dest, tag)
  local req = core.isend(direct(buf) and buf or (stage(buf, true)), dest, tag)
  return req
end

-- irecv(buf [, src [, tag]]) -> request; a staged receive lands in buf when
-- the request completes (wait, or a test that returns true).
function M.irecv(buf, src, tag)
  if direct(buf) then
    local req = core.irecv(buf, src, tag)
    return req
  end
  local pinned, stream = stage(buf, false)
  local req = core.irecv(pinned, src, tag, function()
    unstage(pinned, buf, stream)
    pinned:close()
  end)
  return req
end

-- allreduce(buf, op, dtype): in place; op "sum", "min" or "max"; a view
-- carries its own dtype.
function M.allreduce(buf, op, dtype)
  if direct(buf) then
    core.allreduce(buf, op, dtype)
  else
    through_pinned(buf, true, true, function(pinned) core.allreduce(pinned, op, dtype) end)
  end
end

return M
