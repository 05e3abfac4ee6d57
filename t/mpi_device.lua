-- mpi_device.lua DIR SEED MODE: device buffers through every operation of
-- cuda.mpi, under the fake driver (t/mpi.t starts the ranks with it), or a
-- GPU. MODE: "ipc" (ranks of one node map each other's memory), "nokernel"
-- (ipc, without NVRTC: device allreduce falls back to the host), "refuse"
-- (the driver refuses the mapping: FAKECUDA_IPC=refuse) or "pinned"
-- (CUDALUA_MPI_STAGING=pinned). Chunks are small and message sizes odd, so
-- that the staging ring wraps many times within one message.
local cuda = require "cuda"
local mpi = require "cuda.mpi"
local check = require "mpi_check"
local dir, seed, mode = arg[1], math.tointeger(arg[2]), arg[3]
local me, n = mpi.rank, mpi.size
local c = check.open(dir, "device." .. mode .. "." .. n, me)
local ipc_mode = mode == "ipc" or mode == "nokernel"

local dev = cuda.Device()
dev:set_current()
local s = dev:create_stream()
local host = cuda.HostMemoryResource()
local pool = dev.memory_resource
local plain = cuda.DeviceMemoryResource(dev, {pool = false})
local shared = cuda.DeviceMemoryResource(dev, {ipc = true})   -- a pool other processes import
mpi.chunk_size = 3000
c.is(mpi.chunk_size, 3000, "chunk_size is settable")
c.raises(function() mpi.chunk_size = 0 end, "chunk_size must be an integer from 1", "chunk_size: 0 is refused")
c.raises(function() mpi.chunk_size = 1.5 end, "chunk_size must be an integer", "chunk_size: a fraction is refused")

-- Rank r's bytes for a tag: random, from the seed; the receiver makes the
-- same to compare.
local function pattern(r, tag, size)
  local b = host:allocate(size)
  b:view("uint8"):random(0, 256, seed * 1000 + r * 37 + tag)
  return b
end
local function on_device(mr, r, tag, size)
  local b = mr:allocate(size, s)
  b:copy_from(pattern(r, tag, size), s)
  s:sync()
  return b
end
local function poisoned(mr, size)
  local b = mr:allocate(size, s)
  b:fill(0xA5, s)
  s:sync()
  return b
end
local function to_host(b, size)
  size = size or b.size
  local h = host:allocate(size)
  if b.is_host_accessible then h:copy_from(b:slice(0, size)) return h end
  b:slice(0, size):copy_to(h, s)
  s:sync()
  return h
end
local function holds(b, r, tag, size)
  size = size or b.size
  return to_host(b, size):view("uint8"):allclose(pattern(r, tag, size):view("uint8"), 0, 0)
end

local right, left = (me + 1) % n, (me - 1) % n
local SIZES = {8, 4096, 100003}

-- Blocking ring, every size, plain (IPC-capable) and pool memory, into
-- device and host buffers.
for _, case in ipairs{{"plain", plain, pool}, {"pool", pool, pool}, {"shared pool", shared, pool},
                      {"plain->host", plain, host}, {"host->pool", host, pool}} do
  local what, from_mr, into_mr = case[1], case[2], case[3]
  for i, size in ipairs(SIZES) do
    local tag = 10 * i
    local out = from_mr == host and pattern(me, tag, size) or on_device(from_mr, me, tag, size)
    local into = into_mr == host and host:allocate(size + 5) or poisoned(into_mr, size + 5)
    local bytes, from, got
    if me % 2 == 0 then mpi.send(out, right, tag) bytes, from, got = mpi.recv(into, left, tag)
    else bytes, from, got = mpi.recv(into, left, tag) mpi.send(out, right, tag) end
    c.ok(bytes == size and from == left and got == tag, ("%s %d B: recv returns bytes, source, tag"):format(what, size),
         ("%s %s %s"):format(bytes, from, got))
    c.ok(holds(into, left, tag, size), ("%s %d B: the left neighbour's bytes arrived"):format(what, size))
    local path, why = mpi.path(right)
    local want = size <= 8192 and "inline" or "staged"
    if (from_mr == plain or from_mr == shared) and ipc_mode then want = "ipc" end
    if from_mr == plain and mode == "refuse" and i == 1 and what == "plain" then want = "staged" end  -- the refused one
    c.is(path, want, ("%s %d B: the path to the right"):format(what, size))
    if from_mr == pool and mode ~= "refuse" then
      c.ok(tostring(why):find(mode == "pinned" and "CUDALUA_MPI_STAGING" or "pool"), what .. ": why not IPC", tostring(why))
    end
    if (from_mr == plain or from_mr == shared) and mode == "refuse" then
      c.ok(tostring(why):find("refused"), what .. ": the refusal is the reason", tostring(why))
    end
  end
end

-- The IPC cache: a buffer sent, closed, another at the same size (its
-- memory may come back at the same address), each arriving as it is.
do
  local size = 50000
  if me == 0 then
    local addresses = {}
    for k = 1, 4 do
      local b = on_device(plain, 0, 500 + k, size)
      addresses[k] = b.ptr
      mpi.send(b, 1, 500 + k)
      b:close()
    end
    local reused = false
    for k = 2, 4 do for j = 1, k - 1 do reused = reused or addresses[k] == addresses[j] end end
    c.ok(reused or not ipc_mode or not os.getenv("CUDALUA_LIBCUDA"), "an address came back for a later buffer",
         table.concat(addresses, " "))
  elseif me == 1 then
    local into = poisoned(pool, size)
    for k = 1, 4 do
      mpi.recv(into, 0, 500 + k)
      c.ok(holds(into, 0, 500 + k, size), ("IPC cache: buffer %d arrived as it was, not a stale mapping"):format(k))
    end
  end
end

-- Pool memory through IPC: two shared pools, each imported once by the
-- receiver (its descriptor sent once), buffers closed and their memory
-- reused, each arriving as it is.
do
  local size = 40000
  local second = cuda.DeviceMemoryResource(dev, {ipc = true})
  if me == 0 then
    for k = 1, 6 do
      local b = on_device(k % 2 == 0 and second or shared, 0, 600 + k, size)
      mpi.send(b, 1, 600 + k)
      c.is(mpi.path(1), ipc_mode and "ipc" or "staged", ("shared pool message %d: the path"):format(k))
      b:close()
    end
  elseif me == 1 then
    local into = poisoned(pool, size)
    for k = 1, 6 do
      mpi.recv(into, 0, 600 + k)
      c.ok(holds(into, 0, 600 + k, size), ("shared pools: buffer %d arrived as it was, not a stale mapping"):format(k))
    end
    local _, _, pools = mpi.ipc_counts(0)
    c.is(pools, ipc_mode and 2 or 0, "each shared pool of a peer is imported once")
  end
end

-- Exports are released: those of closed buffers with the next message,
-- the least recently used beyond 64 a peer; the receiver's mappings follow.
if me < 2 and n >= 2 then
  local count = 70
  if me == 0 then
    local kept = {}
    for k = 1, count do
      kept[k] = on_device(plain, 0, 700 + k, 64 + k)
      mpi.send(kept[k], 1, 700 + k)
    end
    local exported = mpi.ipc_counts(1)
    c.ok(not ipc_mode or (exported >= 64 and exported <= 66), "at most 64 live exports a peer (+1 in flight)", exported)
    for k = 1, count do kept[k]:close() end
    local last = on_device(plain, 0, 800, 64)
    mpi.send(last, 1, 800)   -- releases 40 (a header's room)
    exported = mpi.ipc_counts(1)
    c.ok(not ipc_mode or exported > 1, "a header releases at most 40 exports", exported)
    mpi.send(last, 1, 801)   -- the rest
    exported = mpi.ipc_counts(1)
    c.is(exported, ipc_mode and 1 or 0, "the exports of closed buffers are released with the next messages")
  else
    for k = 1, count do
      local into = poisoned(pool, 64 + k)
      mpi.recv(into, 0, 700 + k)
      if not holds(into, 0, 700 + k) then c.ok(false, "buffer " .. k .. " of many arrived") end
    end
    local _, mapped = mpi.ipc_counts(0)
    c.ok(not ipc_mode or (mapped >= 64 and mapped <= 66), "at most 64 mappings of a peer's buffers", mapped)
    local into = poisoned(pool, 64)
    mpi.recv(into, 0, 800)
    mpi.recv(into, 0, 801)
    _, mapped = mpi.ipc_counts(0)
    c.is(mapped, ipc_mode and 1 or 0, "closed buffers' mappings are closed")
    c.ok(holds(into, 0, 800), "the messages after the releases arrived")
  end
end

-- isend/irecv all-to-all; the requests alone keep the buffers alive.
local recvs, sends, boxes = {}, {}, {}
for r = 0, n - 1 do
  if r ~= me then
    boxes[r] = poisoned(r % 2 == 0 and pool or plain, 20001)
    recvs[r] = mpi.irecv(boxes[r], r, 100 + r)
    sends[#sends + 1] = mpi.isend(on_device(me % 2 == 0 and plain or pool, me, 100 + me, 20001), r, 100 + me)
  end
end
collectgarbage("collect")
collectgarbage("collect")
for r, req in pairs(recvs) do
  local bytes, from, tag = req:wait()
  c.ok(bytes == 20001 and from == r and tag == 100 + r, "irecv:wait returns bytes, source, tag")
  c.ok(holds(boxes[r], r, 100 + r), "isend/irecv of device buffers from rank " .. r .. " arrived")
  c.ok(select(1, req:test()) == true and tostring(req):find("done"), "a finished request tests true and says done")
end
for _, req in ipairs(sends) do
  local done
  repeat done = req:test() until done
  c.ok(done, "isend of a device buffer completes (test)")
end

-- Three staged device messages from one peer share its receive ring;
-- testing only the last request moves the others on too.
if me < 2 and n >= 2 then
  local size = 100003
  if me == 0 then
    local reqs = {}
    for k = 1, 3 do reqs[k] = mpi.isend(on_device(pool, 0, 900 + k, size), 1, 900 + k) end
    for k = 1, 3 do reqs[k]:wait() end
  else
    local boxes, reqs = {}, {}
    for k = 1, 3 do
      boxes[k] = poisoned(pool, size)
      reqs[k] = mpi.irecv(boxes[k], 0, 900 + k)
    end
    -- testing the last request alone progresses whichever holds the ring
    -- (MPI may match the three headers in any order: tags differ)
    local spins = 0
    while not reqs[3]:test() do spins = spins + 1 end
    local states = {}
    for k = 1, 3 do
      reqs[k]:wait()
      states[k] = ("message %d: bytes %s"):format(k, holds(boxes[k], 0, 900 + k) and "right" or "WRONG")
    end
    c.ok(not table.concat(states):find("WRONG"), "three staged messages through one ring, the last request tested alone",
         spins .. " spins; " .. table.concat(states, "; "))
  end
end

-- sendrecv around the ring, both ways at once.
do
  local into = poisoned(pool, 70001)
  local bytes, from = mpi.sendrecv(on_device(plain, me, 7, 70001), right, into, left, 7, 7)
  c.ok(bytes == 70001 and from == left and holds(into, left, 7), "sendrecv of device buffers around the ring")
end

-- bcast from the last rank, in place, device memory.
do
  local root = n - 1
  local b = me == root and on_device(plain, root, 900, 30001) or poisoned(pool, 30001)
  c.ok(mpi.bcast(b, root) == b, "bcast of a buffer returns it")
  c.ok(holds(b, root, 900), "bcast: root's device buffer reached every rank")
end

-- allreduce on the device: float64 sums (to rounding), int32 min and max.
local N = 1001
local function values(r, dtype, tag)
  local h = host:allocate(N * 8)
  h:view(dtype):random(-1000, 1000, seed * 7 + r * 11 + tag)
  return h
end
local function reference(dtype, op, tag)
  local want = values(0, dtype, tag):view(dtype)
  for r = 1, n - 1 do
    local v = values(r, dtype, tag):view(dtype)
    if op == "sum" then want:add(v) else for i = 1, #want do want[i] = math[op](want[i], v[i]) end end
  end
  return want
end
for k, case in ipairs{{"float64", "sum"}, {"int32", "min"}, {"int32", "max"}, {"int32", "sum"}} do
  local dtype, op = case[1], case[2]
  local b = pool:allocate(N * 8, s)
  b:copy_from(values(me, dtype, k), s)
  s:sync()
  mpi.allreduce(b, op, dtype)
  local got = to_host(b):view(dtype)
  local ok = dtype == "float64" and got:allclose(reference(dtype, op, k), 1e-12, 1e-9)
             or got:allclose(reference(dtype, op, k), 0, 0)
  c.ok(ok, ("allreduce %s of %s device memory (reduced by the %s)"):format(op, dtype, mpi.reduce_path and "host" or "kernel"))
end
if mode == "nokernel" and me == 0 then
  c.ok(tostring(mpi.reduce_path):find("^host %(the reduction kernel did not build"), "without NVRTC, device allreduce says it reduced on the host",
       tostring(mpi.reduce_path))
elseif me == 0 then
  c.is(mpi.reduce_path, nil, "device allreduce: the kernel on the device")
end
c.raises(function() mpi.allreduce(pool:allocate(6, s), "sum", "float32") end, "size 6 is not a multiple",
         "allreduce of device memory: whole elements")
c.raises(function() mpi.allreduce(pool:allocate(8, s), "prod", "float32") end, "invalid option 'prod'",
         "allreduce of device memory: unknown op")

-- gather, allgather and scatter of device buffers.
do
  local part = 10007
  local root = 1 % n
  local mine = on_device(plain, me, 300, part)
  local all = poisoned(pool, part * n)
  local got = mpi.gather(mine, root, me == root and all or nil)
  if me == root then
    local ok = got == all
    for r = 0, n - 1 do ok = ok and holds(all:slice(r * part, part), r, 300) end
    c.ok(ok, "gather: every rank's device buffer at root, by rank")
  else
    c.is(got, nil, "gather returns nil off root")
  end
  local every = poisoned(plain, part * n)
  mpi.allgather(mine, every)
  local ok = true
  for r = 0, n - 1 do ok = ok and holds(every:slice(r * part, part), r, 300) end
  c.ok(ok, "allgather: every rank's device buffer everywhere")
  local src = me == root and every or nil
  local into = poisoned(pool, part)
  c.ok(mpi.scatter(src, into, root) == into and holds(into, me, 300), "scatter: part r of root's buffer to rank r")
  c.raises(function() mpi.allgather(mine, pool:allocate(part, s)) end, "bad argument #2 to 'allgather'",
           "allgather: a receive buffer too small")
end

-- A message longer than the device buffer it lands in: an error on the
-- receiver, the sender unharmed, the next message fine.
if n >= 2 and me < 2 then
  local size = 40000
  if me == 0 then
    mpi.send(on_device(plain, 0, 600, size), 1, 600)
    mpi.send(on_device(pool, 0, 601, size), 1, 601)
    mpi.send(on_device(plain, 0, 602, size), 1, 602)
  else
    c.raises(function() mpi.recv(poisoned(pool, 100), 0, 600) end, "truncat", "recv: an IPC message too long")
    c.raises(function() mpi.recv(poisoned(pool, 100), 0, 601) end, "truncat", "recv: a staged message too long")
    local into = poisoned(pool, size)
    mpi.recv(into, 0, 602)
    c.ok(holds(into, 0, 602), "the next message arrives")
  end
end
mpi.barrier()
c.done()
