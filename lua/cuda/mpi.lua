-- cuda.mpi: experiments across a cluster's GPUs through MPI.
-- SPDX-License-Identifier: MIT
--
-- The C part, cuda.mpi_core (src/mpi.c), talks to MPI; this layer moves
-- cudalua buffers, host or device, over any MPI (CUDA-aware or not) with a
-- protocol of its own. Every buffer message starts with a header on the
-- users' communicator (so that sources, tags and ANY_SOURCE match as in
-- MPI), then takes one of three paths:
--
--   inline  up to INLINE bytes ride in the header message itself;
--   ipc     a device buffer on the same node (MPI_COMM_TYPE_SHARED) is
--           exported once: plain allocations (cuda.DeviceMemoryResource(dev,
--           {pool = false})) by cuIpcGetMemHandle, pool memory of a pool
--           made to be shared ({ipc = true}) by cuMemPoolExportPointer, its
--           pool's descriptor sent once a peer over a Unix socket first
--           (src/mpi_fds.c); the receiver imports each pool once and maps
--           each buffer once, keeps the mapping under (sender, export id),
--           and copies device to device on a stream, then acknowledges;
--   staged  chunks of chunk_size bytes on cuda.mpi's own communicator;
--           device memory crosses through a pinned ring per device, peer
--           and direction (allocated once, grown on demand), so that
--           device-to-host, the transfer and host-to-device of successive
--           chunks overlap. Host memory is sent and received in place.
--
-- A sender falls back to staging when IPC is not possible (another node,
-- memory of a pool not made to be shared, CUDALUA_MPI_STAGING=pinned) or
-- the receiver's driver refuses the mapping; mpi.path(peer) says which
-- path the last message with a peer took, and why not IPC. Each operation is a coroutine, resumed by the
-- wait or test of its request and by every other wait of this process,
-- so that no rank waits on a transfer nobody progresses.
--
-- An export holds its buffer's memory (buf:close() then defers the free)
-- until the receiver has closed its mapping: the sender asks for that in
-- the header of its next IPC message to that receiver, for buffers closed
-- since, and for the least recently used exports beyond MAX_EXPORTS.
--
-- The collectives of buffers (bcast, allreduce, gather, allgather,
-- scatter) go through mpi.backend, a table of those five functions on
-- resolved buffers; the default one is built on the messages above (its
-- allreduce reduces device buffers with a kernel on the device). A
-- cuda.nccl backend can replace it (mpi.set_backend) without changing a
-- caller. MPI starts on first use: a field (mpi.rank, ...) or a call.
local found, core = pcall(require, "cuda.mpi_core")
if not found then
  error("cuda.mpi is not available: its C part, cuda.mpi_core, did not load. " ..
        "cudalua builds it when configure finds MPI (--with-mpi; Debian: libopenmpi-dev).\n" ..
        tostring(core), 2)
end
local cuda = require "cuda"

local M = {
  ANY_SOURCE = core.ANY_SOURCE, ANY_TAG = core.ANY_TAG, barrier = core.barrier,
}

local HEADER = 512              -- bytes of a header, in front of an inline payload
local INLINE = 8192             -- payload bytes carried in the header message
local SLOTS = 4                 -- chunks in flight through a ring
local MAX_EXPORTS = 64          -- live exports per peer before the oldest is released
local DEFAULT_CHUNK = 4 << 20
local MIN_CHUNK = 256 << 10
local HDR = "<Bjjjjjjjs1s2"     -- kind, size, wire tag, chunk, export id, offset, allocation size, pool token, handle, releases
local K_INLINE, K_STAGED, K_IPC = 1, 2, 3
local ACK_OK, ACK_REFUSED, ACK_DROPPED = 0, 1, 2
local USERS, WIRE, COLL = 0, 1, 2   -- core's communicators
local FORCED = os.getenv("CUDALUA_MPI_STAGING") == "pinned"

local function positive_integer(v, what)
  local n = math.tointeger(tonumber(v))
  if not n or n <= 0 or n > 1 << 30 then
    error(("%s must be an integer from 1 to 2^30, got %s"):format(what, tostring(v)), 3)
  end
  return n
end

local settings = {chunk_size = DEFAULT_CHUNK}
if os.getenv("CUDALUA_MPI_CHUNK") then
  settings.chunk_size = positive_integer(os.getenv("CUDALUA_MPI_CHUNK"), "CUDALUA_MPI_CHUNK")
end

-- rank, size, local_rank, hostname and staging are read once, on first use;
-- chunk_size is read and set (bytes a chunk of a staged message, from 1
-- byte to 1 GiB; CUDALUA_MPI_CHUNK sets the start value).
local info
local lazy_fields = {rank = true, size = true, local_rank = true, hostname = true, staging = true}
local function started()
  if not info then
    info = core.info()
    for name in pairs(lazy_fields) do rawset(M, name, info[name]) end
    rawset(M, "staging", FORCED and "pinned staging (CUDALUA_MPI_STAGING=pinned)"
                         or "ipc on a node, pinned staging across nodes")
  end
  return info
end
setmetatable(M, {
  __index = function(_, key)
    if key == "chunk_size" then return settings.chunk_size end
    if not lazy_fields[key] then return nil end
    started()
    return rawget(M, key)
  end,
  __newindex = function(t, key, value)
    if key == "chunk_size" then settings.chunk_size = positive_integer(value, "chunk_size")
    elseif lazy_fields[key] then error("cuda.mpi." .. key .. " is read-only", 2)
    else rawset(t, key, value) end
  end,
})

-- --- resources: streams, header areas, rings ---------------------------------

local streams, events = {}, {}
local function stream_for(id)
  streams[id] = streams[id] or cuda.Device(id):create_stream{non_blocking = true}
  return streams[id]
end
local function event_for(id)
  events[id] = events[id] or cuda.Device(id):create_event{timing = false}
  return events[id]
end

-- The device of this process that copies for a host buffer: the current one.
local function own_device()
  return cuda.Device().id
end

-- Header areas: pinned when there is a GPU (device payloads copy through
-- them), reused through a free list.
local area_mr
local free_areas = {}
local function take_area()
  local a = table.remove(free_areas)
  if a then return a end
  if not area_mr then
    area_mr = cuda.device_count() > 0 and cuda.PinnedMemoryResource() or cuda.HostMemoryResource()
  end
  return area_mr:allocate(HEADER + INLINE)
end
local function give_area(a) free_areas[#free_areas + 1] = a end

-- A pinned ring of SLOTS chunks for (device, peer, direction); one
-- operation uses it at a time.
local rings = {}
local function ring_for(id, peer, dir, chunk)
  local key = id .. ":" .. peer .. ":" .. dir
  local r = rings[key]
  if r and r.chunk < chunk then
    r.buf:close()
    r = nil
  end
  if not r then
    local mr = cuda.PinnedMemoryResource{device = cuda.Device(id)}
    r = {chunk = chunk, buf = mr:allocate(SLOTS * chunk), events = {}, busy = false}
    for s = 0, SLOTS - 1 do r.events[s] = cuda.Device(id):create_event{timing = false} end
    rings[key] = r
  end
  return r
end

local staging_pools = {}
local function staging_pool(id)
  staging_pools[id] = staging_pools[id] or cuda.PinnedMemoryResource{pool = true, device = cuda.Device(id)}
  return staging_pools[id]
end

-- Give back every staging ring and header area (they go at exit in any
-- case); not while an operation is pending.
local pending = {}              -- operations not finished, in no order
function M.release()
  if next(pending) then error("mpi.release: operations are still pending", 2) end
  for k, r in pairs(rings) do r.buf:close() rings[k] = nil end
  for i = #free_areas, 1, -1 do free_areas[i]:close() free_areas[i] = nil end
end

-- --- operations as coroutines -------------------------------------------------

local yield = coroutine.yield

-- Wait for an MPI request inside an operation: its status.
local function await(req)
  while true do
    local done, bytes, from, tag = req:test()
    if done then return bytes, from, tag end
    yield()
  end
end

local function await_event(ev)
  while not ev.is_done do yield() end
end

-- The copies of an operation on stream s are done.
local function await_stream(id, s)
  local ev = event_for(id)
  s:record(ev)
  await_event(ev)
end

-- One resumption of op, unless it is done or running (a finalizer that
-- calls cuda.mpi while an operation runs must not resume that one).
local function step(op)
  if op.done or coroutine.status(op.co) ~= "suspended" then return end
  local ok, err = coroutine.resume(op.co)
  if not ok then
    op.err, op.done = err, true
  elseif coroutine.status(op.co) == "dead" then
    op.done = true
  end
  if op.done then pending[op] = nil end
end

local function step_others(op)
  for other in pairs(pending) do
    if other ~= op then step(other) end
  end
end

-- Drive op to its end, progressing every other pending operation too.
local function drive(op)
  while not op.done do
    step(op)
    step_others(op)
  end
  if op.err then
    op.raised = true
    error(op.err, 0)
  end
  return table.unpack(op.status, 1, 3)
end

local function start(fn, ...)
  local args = table.pack(...)
  local op = {status = {}}
  op.co = coroutine.create(function() op.status = {fn(table.unpack(args, 1, args.n))} end)
  pending[op] = true
  step(op)
  return op
end

-- --- the paths ---------------------------------------------------------------

-- A message's tag on the wire communicator, from a sequence per peer: even
-- for its chunks, odd (wtag + 1) for the receiver's acknowledgement, so
-- that an acknowledgement never matches a chunk the peer sends us.
local seq = {}
local function wire_tag(peer)
  local s = (seq[peer] or 0) % (info.tag_ub // 2 - 1) + 1
  seq[peer] = s
  return 2 * s
end

local paths = {}                -- paths[peer] = {path, reason}
local refused = {}              -- refused[peer] = why the peer's driver refused IPC
local function note_path(peer, path, why) paths[peer] = {path, why} end

-- mpi.path(peer) -> the path of the last buffer sent to peer ("inline",
-- "ipc", "staged", nil before any), and why not IPC for device memory (nil
-- when it was, and for host memory).
function M.path(peer)
  local p = paths[peer]
  if p then return p[1], p[2] end
  return nil
end

-- Exports, sender side: exports[buffer][peer] = record; live[peer][id] = record.
local exports = setmetatable({}, {__mode = "k"})
local live, next_id, clock = {}, 0, 0

-- An error's words for mpi.path: a cuda.Error's call and message.
local function reason(err)
  if type(err) ~= "table" then return tostring(err) end
  return (err.api and err.api .. ": " or "") .. tostring(err.message)
end

-- Pools made to be shared, sender side: pools[mr] = {token, sent = {[dest] = true}}.
-- A token names a pool in headers; the receiver imports the pool once,
-- from the descriptor sent with that token before the first message.
local pools, next_token = setmetatable({}, {__mode = "k"}), 0

-- The token of mr's pool, its descriptor sent to dest once; or nil, why.
local function pool_token(mr, dest)
  local p = pools[mr]
  if not p then
    next_token = next_token + 1
    p = {token = next_token, sent = {}}
    pools[mr] = p
  end
  if not p.sent[dest] then
    local ok, handle = pcall(mr.ipc_pool_handle, mr)
    if not ok then return nil, reason(handle) end
    local sent, why = core.send_fd(handle.fd, dest, p.token)
    handle:close()
    if not sent then return nil, why end
    p.sent[dest] = true
  end
  return p.token
end

-- Why buf (on device id) cannot go to dest through IPC, or nil and its record.
local function export_for(buf, id, dest)
  if FORCED then return "CUDALUA_MPI_STAGING=pinned" end
  if info.node[dest + 1] ~= info.node[info.rank + 1] then return "another node" end
  if refused[dest] then return refused[dest] end
  local per = exports[buf]
  local rec = per and per[dest]
  if rec and not rec.exp.buffer_closed then
    clock = clock + 1
    rec.used = clock
    return nil, rec
  end
  local token, why = 0, nil
  local mr = buf.memory_resource
  if mr.ipc then   -- a shared pool: its descriptor goes to dest once, before the first header
    token, why = pool_token(mr, dest)
    if not token then return why end
  end
  local ok, exp = pcall(buf.ipc_export, buf)
  if not ok then return reason(exp) end
  next_id, clock = next_id + 1, clock + 1
  rec = {exp = exp, id = next_id, used = clock, device = id, token = token}
  per = per or {}
  per[dest], exports[buf] = rec, per
  live[dest] = live[dest] or {}
  live[dest][rec.id] = rec
  return nil, rec
end

-- The exports to dest to release with the next message: those of closed
-- buffers, and the least recently used beyond MAX_EXPORTS; at most 40 (the
-- header's room). Returns the records and their ids, packed.
local NO_RELEASES = {}
local function releases_for(dest, keep)
  local list, count, crowded = nil, 0, false
  for _, rec in pairs(live[dest] or NO_RELEASES) do
    count = count + 1
    if rec ~= keep and rec.exp.buffer_closed then
      list = list or {}
      if #list < 40 then list[#list + 1] = rec end
    end
  end
  crowded = count > MAX_EXPORTS
  if crowded then   -- the oldest open ones too
    local open = {}
    for _, rec in pairs(live[dest]) do
      if rec ~= keep and not rec.exp.buffer_closed then open[#open + 1] = rec end
    end
    table.sort(open, function(a, b) return a.used < b.used end)
    list = list or {}
    for i = 1, count - MAX_EXPORTS do
      if #list == 40 or not open[i] then break end
      list[#list + 1] = open[i]
    end
  end
  if not list then return NO_RELEASES, "" end
  local ids = {}
  for i, rec in ipairs(list) do ids[i] = string.pack("<j", rec.id) end
  return list, table.concat(ids)
end

local function drop_exports(dest, list)
  for _, rec in ipairs(list) do
    live[dest][rec.id] = nil
    rec.exp:close()
  end
end

-- Receiver side: opened[src][id] = the mapped allocation;
-- imported[src][token] = src's pool, imported here.
local opened, imported = {}, {}

-- The allocation src exported, mapped on device dev: through its pool,
-- imported once, when it is pool memory (token ~= 0).
local function open_export(src, token, handle, size, dev)
  if token == 0 then return cuda.ipc_open(handle, size, dev) end
  local per = imported[src] or {}
  imported[src] = per
  if not per[token] then
    local fd = core.receive_fd(src, token)
    if not fd then error("the descriptor of rank " .. src .. "'s pool did not arrive", 0) end
    local ok, pool = pcall(cuda.ipc_pool_open, fd, dev)
    core.close_fd(fd)
    if not ok then error(pool, 0) end
    per[token] = pool
  end
  return cuda.ipc_open(handle, size, per[token])
end

-- mpi.ipc_counts(peer) -> exports of this rank's buffers that peer still
-- maps, mappings of peer's buffers this rank holds, and peer's pools
-- imported here.
function M.ipc_counts(peer)
  local exported, mapped, pools_in = 0, 0, 0
  for _ in pairs(live[peer] or NO_RELEASES) do exported = exported + 1 end
  for _ in pairs(opened[peer] or NO_RELEASES) do mapped = mapped + 1 end
  for _ in pairs(imported[peer] or NO_RELEASES) do pools_in = pools_in + 1 end
  return exported, mapped, pools_in
end

local function chunks_of(size, chunk)
  return size == 0 and 0 or (size + chunk - 1) // chunk
end

-- Send size bytes of host buffer buf in chunks, in place.
local function send_host_chunks(buf, size, chunk, dest, wtag)
  local reqs = {}
  for c = 0, chunks_of(size, chunk) - 1 do
    local off = c * chunk
    reqs[#reqs + 1] = core.wire_isend(buf, off, math.min(chunk, size - off), dest, wtag, WIRE)
  end
  for _, r in ipairs(reqs) do await(r) end
end

-- fn(ring) with the ring of (device id, peer, direction) to itself, of
-- chunks of at least chunk bytes: others wait their turn (a ring grows only
-- when no one uses it); an error gives the ring back.
local function with_ring(id, peer, dir, chunk, fn)
  local key = id .. ":" .. peer .. ":" .. dir
  while rings[key] and rings[key].busy do yield() end
  local ring = ring_for(id, peer, dir, chunk)
  ring.busy = true
  local ok, err = pcall(fn, ring)
  ring.busy = false
  if not ok then error(err, 0) end
end

-- Device buffer buf through the send ring: device-to-host of a chunk
-- overlaps the transfer of the ones before it.
local function send_ring(buf, id, size, chunk, dest, wtag)
  with_ring(id, dest, "send", chunk, function(ring)
    local s = stream_for(id)
    local n = chunks_of(size, chunk)
    local sends, issued, posted = {}, 0, 0
    local function len(c) return math.min(chunk, size - c * chunk) end
    while posted < n do
      local progressed = false
      while issued < n and issued - posted < SLOTS do
        local slot = issued % SLOTS
        if sends[slot] and not sends[slot]:test() then break end
        sends[slot] = nil
        local l = len(issued)
        buf:slice(issued * chunk, l):copy_to(ring.buf:slice(slot * chunk, l), s)
        s:record(ring.events[slot])
        issued, progressed = issued + 1, true
      end
      local slot = posted % SLOTS
      if posted < issued and ring.events[slot].is_done then
        sends[slot] = core.wire_isend(ring.buf, slot * chunk, len(posted), dest, wtag, WIRE)
        posted, progressed = posted + 1, true
      end
      if not progressed then yield() end
    end
    for slot = 0, SLOTS - 1 do if sends[slot] then await(sends[slot]) end end
  end)
end

-- Device buffer buf staged whole (a non-blocking send may not hold a ring
-- while its peer has not started receiving).
local function send_staged_whole(buf, id, size, chunk, dest, wtag)
  local s = stream_for(id)
  local tmp <close> = staging_pool(id):allocate(size, s)
  buf:slice(0, size):copy_to(tmp, s)
  await_stream(id, s)
  send_host_chunks(tmp, size, chunk, dest, wtag)
end

-- Receive chunks into device buffer dst through the receive ring:
-- host-to-device of a chunk overlaps the transfer of the next ones.
local function recv_ring(dst, id, size, chunk, src, wtag)
  with_ring(id, src, "recv", chunk, function(ring)
    local s = stream_for(id)
    local n = chunks_of(size, chunk)
    local recvs, posted, copied = {}, 0, 0
    local function len(c) return math.min(chunk, size - c * chunk) end
    while copied < n do
      local progressed = false
      while posted < n and posted < copied + SLOTS and ring.events[posted % SLOTS].is_done do
        local slot = posted % SLOTS
        recvs[slot] = core.wire_irecv(ring.buf, slot * chunk, len(posted), src, wtag, WIRE)
        posted, progressed = posted + 1, true
      end
      local slot = copied % SLOTS
      if copied < posted and recvs[slot]:test() then
        if dst then
          local l = len(copied)
          ring.buf:slice(slot * chunk, l):copy_to(dst:slice(copied * chunk, l), s)
          s:record(ring.events[slot])
        end
        copied, progressed = copied + 1, true
      end
      if not progressed then yield() end
    end
    await_stream(id, s)
  end)
end

local function recv_host_chunks(dst, size, chunk, src, wtag)
  local reqs = {}
  for c = 0, chunks_of(size, chunk) - 1 do
    local off = c * chunk
    reqs[#reqs + 1] = core.wire_irecv(dst, off, math.min(chunk, size - off), src, wtag, WIRE)
  end
  for _, r in ipairs(reqs) do await(r) end
end

-- Send buffer buf (size bytes; device id or nil for host memory) to dest:
-- a header on comm with tag, then the payload. whole: stage device memory
-- whole instead of through the ring (non-blocking sends).
local function send_op(buf, size, id, dest, tag, comm, whole)
  local _ <close> = core.hold(buf)   -- closing buf meanwhile keeps its memory until the end
  local area = take_area()
  -- at least 8 chunks of at least 256 KiB, so that mid-sized messages
  -- overlap too; never more than chunk_size
  local chunk = math.min(settings.chunk_size, math.max(MIN_CHUNK, (size + 7) // 8))
  local wtag = wire_tag(dest)
  local why, rec
  if id then why, rec = export_for(buf, id, dest) end
  if rec then
    local list, ids = releases_for(dest, rec)
    local exp = rec.exp
    core.poke(area, 0, string.pack(HDR, K_IPC, size, wtag, chunk, rec.id, exp.offset, exp.size, rec.token, exp.handle, ids))
    local ack = core.wire_irecv(area, HEADER, 256, dest, wtag + 1, WIRE)
    local hdr = core.wire_isend(area, 0, HEADER, dest, tag, comm)
    await(hdr)
    await(ack)
    local status, refusal = string.unpack("<Bs1", core.peek(area, HEADER, 256))
    drop_exports(dest, list)
    if status == ACK_REFUSED then drop_exports(dest, {rec}) exports[buf][dest] = nil end
    if status ~= ACK_REFUSED then
      give_area(area)
      note_path(dest, "ipc")
      return size, dest, tag
    end
    refused[dest] = "the peer's driver refused the mapping: " .. refusal
    why = refused[dest]
  else
    local kind = size <= INLINE and K_INLINE or K_STAGED
    core.poke(area, 0, string.pack(HDR, kind, size, wtag, chunk, 0, 0, 0, 0, "", ""))
    local total = HEADER
    if kind == K_INLINE and size > 0 then
      local into = area:slice(HEADER, size)
      if id then
        local s = stream_for(id)
        buf:slice(0, size):copy_to(into, s)
        await_stream(id, s)
      else
        into:copy_from(buf:slice(0, size))
      end
      total = HEADER + size
    end
    await(core.wire_isend(area, 0, total, dest, tag, comm))
    give_area(area)
    if kind == K_INLINE then
      note_path(dest, "inline", id and why)
      return size, dest, tag
    end
  end
  if id == nil then
    send_host_chunks(buf, size, chunk, dest, wtag)
  elseif whole then
    send_staged_whole(buf, id, size, chunk, dest, wtag)
  else
    send_ring(buf, id, size, chunk, dest, wtag)
  end
  note_path(dest, "staged", id and why)
  return size, dest, tag
end

local function truncated_message(size, room)
  return ("MPI_Recv: message truncated (%d bytes into a buffer of %d)"):format(size, room)
end

-- Receive into buffer dst (room bytes; device id or nil) from src with tag
-- on comm: bytes, source, tag.
local function recv_op(dst, room, id, src, tag, comm)
  local _ <close> = core.hold(dst)   -- closing dst meanwhile keeps its memory until the end
  local area = take_area()
  local _, from, got_tag = await(core.wire_irecv(area, 0, HEADER + INLINE, src, tag, comm))
  local kind, size, wtag, chunk, eid, offset, asize, token, handle, ids = string.unpack(HDR, core.peek(area, 0, HEADER))
  -- device memory is copied through its Buffer, which refuses once closed:
  -- then the message is taken and dropped, as one that does not fit
  local closed = id and not core.is_open(dst)
  local fits = size <= room and not closed
  local function truncated(size, room) return closed and "cuda.Buffer is closed" or truncated_message(size, room) end
  if kind == K_INLINE then
    if fits and size > 0 then
      local from_area = area:slice(HEADER, size)
      if id then
        local s = stream_for(id)
        from_area:copy_to(dst:slice(0, size), s)
        await_stream(id, s)
      else
        dst:slice(0, size):copy_from(from_area)
      end
    end
    give_area(area)
    if not fits then error(truncated(size, room), 0) end
    return size, from, got_tag
  end
  if kind == K_IPC then
    local maps = opened[from] or {}
    opened[from] = maps
    for i = 1, #ids, 8 do
      local gone = string.unpack("<j", ids, i)
      if maps[gone] then maps[gone]:close() maps[gone] = nil end
    end
    local copier = id or own_device()
    local status, refusal = ACK_OK, ""
    local mapped = maps[eid]
    if not mapped then
      local ok, m = pcall(open_export, from, token, handle, asize, copier)
      if ok then mapped, maps[eid] = m, m
      else status, refusal = ACK_REFUSED, reason(m):sub(1, 200) end
    end
    if status == ACK_OK and fits then
      local s = stream_for(copier)
      if size > 0 then mapped:slice(offset, size):copy_to(dst:slice(0, size), s) end
      await_stream(copier, s)
    elseif status == ACK_OK then
      status = ACK_DROPPED
    end
    core.poke(area, HEADER, string.pack("<Bs1", status, refusal))
    await(core.wire_isend(area, HEADER, 256, from, wtag + 1, WIRE))
    give_area(area)
    if status ~= ACK_REFUSED then
      if not fits then error(truncated(size, room), 0) end
      return size, from, got_tag
    end
  else
    give_area(area)
  end
  if not fits then   -- drain the chunks, so that the sender is not left waiting
    local scratch <close> = cuda.HostMemoryResource():allocate(chunk)
    for c = 0, chunks_of(size, chunk) - 1 do
      await(core.wire_irecv(scratch, 0, math.min(chunk, size - c * chunk), from, wtag, WIRE))
    end
    error(truncated(size, room), 0)
  end
  if id then recv_ring(dst, id, size, chunk, from, wtag)
  else recv_host_chunks(dst, size, chunk, from, wtag) end
  return size, from, got_tag
end

-- --- point to point ------------------------------------------------------------

-- Argument checks under the public functions' names: argument errors name
-- them ("bad argument #2 to 'send'").
local check = {send = core.check_message, recv = core.check_message, isend = core.check_message,
               irecv = core.check_message, sendrecv = core.check_message}

-- send(buf, dest [, tag]): buf is a cuda.Buffer or cuda.View.
function M.send(buf, dest, tag)
  local b, size, id = check.send(buf, dest, tag, false)
  started()
  drive(start(send_op, b, size, id, dest, tag or 0, USERS, false))
end

-- recv(buf [, src [, tag]]) -> bytes received, source, tag.
function M.recv(buf, src, tag)
  local b, size, id = check.recv(buf, src, tag, true)
  started()
  local bytes, from, got = drive(start(recv_op, b, size, id, src or M.ANY_SOURCE, tag or M.ANY_TAG, USERS))
  return bytes, from, got
end

local Request = {}
Request.__index = Request
Request.__name = "cuda.mpi.Request"

-- req:wait() -> bytes, source, tag
function Request:wait()
  local bytes, from, tag = drive(self.op)
  return bytes, from, tag
end

-- req:test() -> true, bytes, source, tag | false
function Request:test()
  local op = self.op
  if not op.done then
    step(op)
    step_others(op)
    if not op.done then return false end
  end
  return true, drive(op)
end

function Request:__tostring()
  return self.op.done and "cuda.mpi.Request (done)" or "cuda.mpi.Request (pending)"
end

-- isend(buf, dest [, tag]) -> request: req:wait(), req:test(). The request
-- (and the operation, until it ends) keeps the buffer alive.
function M.isend(buf, dest, tag)
  local b, size, id = check.isend(buf, dest, tag, false)
  started()
  return setmetatable({op = start(send_op, b, size, id, dest, tag or 0, USERS, true), buffer = buf}, Request)
end

-- irecv(buf [, src [, tag]]) -> request; the data is in buf once the
-- request completes (wait, or a test that returns true).
function M.irecv(buf, src, tag)
  local b, size, id = check.irecv(buf, src, tag, true)
  started()
  local op = start(recv_op, b, size, id, src or M.ANY_SOURCE, tag or M.ANY_TAG, USERS)
  return setmetatable({op = op, buffer = buf}, Request)
end

-- sendrecv(sendbuf, dest, recvbuf, src [, sendtag [, recvtag]]) -> bytes,
-- source, tag of the receive. Both at once: no deadlock whatever the order.
function M.sendrecv(sendbuf, dest, recvbuf, src, sendtag, recvtag)
  local sb, ssize, sid = check.sendrecv(sendbuf, dest, sendtag, false)
  local rb, rsize, rid = check.sendrecv(recvbuf, src, recvtag, true)
  started()
  local incoming = start(recv_op, rb, rsize, rid, src or M.ANY_SOURCE, recvtag or M.ANY_TAG, USERS)
  local outgoing = start(send_op, sb, ssize, sid, dest, sendtag or 0, USERS, true)
  drive(outgoing)
  local bytes, from, got = drive(incoming)
  return bytes, from, got
end

-- --- collectives -------------------------------------------------------------------

local function csend(b, dest)
  local size, id = b.size, b.is_host_accessible and nil or b.device_id
  drive(start(send_op, b, size, id, dest, 0, COLL, false))
end
local function crecv(b, src)
  local size, id = b.size, b.is_host_accessible and nil or b.device_id
  drive(start(recv_op, b, size, id, src, 0, COLL))
end

-- Copy src into dst (same size), on the device's stream when one is device memory.
local function local_copy(src, dst)
  local id = (not src.is_host_accessible and src.device_id) or (not dst.is_host_accessible and dst.device_id)
  if id then
    local s = stream_for(id)
    src:copy_to(dst, s)
    s:sync()
  else
    src:copy_to(dst)
  end
end

-- Reduction kernels (kernels/mpi_reduce.cu), compiled once per device;
-- false when they cannot be built (no NVRTC): then device buffers are
-- reduced on the host, and mpi.reduce_path says why.
local objects, kernels = {}, {}
local function reduce_kernel(id, op, dtype)
  local name = ("mpi_reduce_%s_%s"):format(op, dtype)
  local key = id .. name
  if kernels[key] == nil then
    local ok, k = pcall(function()
      if not objects[id] then
        local dev = cuda.Device(id)
        local f <close> = assert(io.open(require("cuda.kernels").find("mpi_reduce.cu")))
        objects[id] = cuda.Program(f:read("a"), "c++", {arch = "sm_" .. dev.arch, name = "mpi_reduce.cu"}):compile("cubin")
      end
      return objects[id]:get_kernel(name)
    end)
    kernels[key] = ok and k or false
    if not ok then M.reduce_path = "host (the reduction kernel did not build: " .. tostring(k) .. ")" end
  end
  return kernels[key]
end

local WIDTH = {float32 = 4, float64 = 8, int8 = 1, int16 = 2, int32 = 4, int64 = 8,
               uint8 = 1, uint16 = 2, uint32 = 4, uint64 = 8}

local backend = {name = "mpi"}

-- bcast(buf, root): a binomial tree from root.
function backend.bcast(b, root)
  local n, me = info.size, info.rank
  local rel, mask = (me - root) % n, 1
  while mask < n do
    if rel & mask ~= 0 then crecv(b, (rel - mask + root) % n) break end
    mask = mask << 1
  end
  mask = mask >> 1
  while mask > 0 do
    if rel + mask < n then csend(b, (rel + mask + root) % n) end
    mask = mask >> 1
  end
end

-- allreduce(buf, op, dtype) of device memory: rank 0 gathers and reduces
-- with a kernel, then broadcasts.
function backend.allreduce(b, op, dtype)
  local id = b.device_id
  if info.rank ~= 0 then
    csend(b, 0)
  else
    local kernel = reduce_kernel(id, op, dtype)
    local s = stream_for(id)
    local tmp <close> = cuda.Device(id).memory_resource:allocate(b.size, s)
    local count = b.size // WIDTH[dtype]
    local config = cuda.LaunchConfig{grid = math.max(1, math.min(1024, (count + 255) // 256)), block = 256}
    for r = 1, info.size - 1 do
      crecv(tmp, r)
      if kernel then
        cuda.launch(s, config, kernel, b, tmp, cuda.u64(count))
        s:sync()
      else
        local pool = staging_pool(id)
        local ha <close> = pool:allocate(b.size, s)
        local hb <close> = pool:allocate(b.size, s)
        b:copy_to(ha, s) tmp:copy_to(hb, s) s:sync()
        local va, vb = ha:view(dtype), hb:view(dtype)
        if op == "sum" then va:add(vb)
        else for i = 1, #va do va[i] = math[op](va[i], vb[i]) end end
        ha:copy_to(b, s) s:sync()
      end
    end
  end
  backend.bcast(b, 0)
end

-- gather(send, recv, root): rank r's send lands at r * send.size in root's recv.
function backend.gather(sb, rb, root)
  local size = sb.size
  if info.rank ~= root then csend(sb, root) return end
  for r = 0, info.size - 1 do
    local part = rb:slice(r * size, size)
    if r == root then local_copy(sb, part) else crecv(part, r) end
  end
end

function backend.allgather(sb, rb)
  backend.gather(sb, rb, 0)
  backend.bcast(rb, 0)
end

-- scatter(send, recv, root): part r of root's send goes to rank r.
function backend.scatter(sb, rb, root)
  local size = rb.size
  if info.rank ~= root then crecv(rb, root) return end
  for r = 0, info.size - 1 do
    local part = sb:slice(r * size, size)
    if r == root then local_copy(part, rb) else csend(part, r) end
  end
end

M.backend = backend

-- set_backend(b): the collectives of buffers through b, a table of bcast,
-- allreduce, gather, allgather and scatter (as mpi.backend's), and name.
function M.set_backend(b)
  for _, f in ipairs{"bcast", "allreduce", "gather", "allgather", "scatter"} do
    if type(b) ~= "table" or type(b[f]) ~= "function" then
      error("bad argument #1 to 'set_backend' (a backend needs a function " .. f .. ")", 2)
    end
  end
  M.backend = b
end

local is_buffer = core.is_buffer

local function size_check(fname, i, b, want)
  if b == nil or b.size < want then
    error(("bad argument #%d to '%s' (a buffer of at least %d bytes expected)"):format(i, fname, want), 3)
  end
end

-- bcast(value, root) -> root's value; a Buffer or View is broadcast in place.
function M.bcast(value, root)
  if not is_buffer(value) then return core.bcast(value, root) end
  local b = check.send(value, root, 0, false)
  started()
  M.backend.bcast(b, root)
  return value
end

-- allreduce(buf, op, dtype): in place; op "sum", "min" or "max"; a view
-- carries its own dtype.
function M.allreduce(buf, op, dtype)
  if not core.is_device(buf) then
    core.allreduce(buf, op, dtype)
    return
  end
  local b, size = check.send(buf, 0, 0, false)
  local vt = buf ~= b and buf.dtype or nil
  if dtype ~= nil and vt and dtype ~= vt then
    error(("bad argument #3 to 'allreduce' (the view's dtype is %s)"):format(vt), 2)
  end
  dtype = dtype or vt
  if op ~= "sum" and op ~= "min" and op ~= "max" then
    error(("bad argument #2 to 'allreduce' (invalid option '%s')"):format(tostring(op)), 2)
  end
  if not WIDTH[dtype] then
    error(("bad argument #3 to 'allreduce' (%s)"):format(dtype and ("invalid option '" .. tostring(dtype) .. "'")
          or "dtype expected for a cuda.Buffer (float32, int32, ...)"), 2)
  end
  if size % WIDTH[dtype] ~= 0 then
    error(("bad argument #1 to 'allreduce' (size %d is not a multiple of %s's %d bytes)"):format(size, dtype, WIDTH[dtype]), 2)
  end
  started()
  M.backend.allreduce(b, op, dtype)
end

-- gather(value, root) -> {value of rank 0, ...} on root; with buffers,
-- gather(send, root, recv) -> recv on root (every rank's send, by rank).
function M.gather(value, root, recv)
  if not is_buffer(value) then return core.gather(value, root) end
  local sb, size = check.send(value, root, 0, false)
  started()
  local rb
  if info.rank == root then
    rb = select(1, check.recv(recv, nil, nil, true))
    size_check("gather", 3, rb, size * info.size)
  end
  M.backend.gather(sb, rb, root)
  return info.rank == root and recv or nil
end

-- allgather(value) -> {value of rank 0, ...}; with buffers,
-- allgather(send, recv) -> recv, every rank's send by rank.
function M.allgather(value, recv)
  if not is_buffer(value) then return core.allgather(value) end
  local sb, size = check.send(value, 0, 0, false)
  started()
  local rb = select(1, check.recv(recv, nil, nil, true))
  size_check("allgather", 2, rb, size * info.size)
  M.backend.allgather(sb, rb)
  return recv
end

-- scatter(send, recv, root) -> recv: part r (recv.size bytes) of root's
-- send goes to rank r; send is only read on root.
function M.scatter(send, recv, root)
  local rb, size = check.recv(recv, root, nil, true)
  started()
  local sb
  if info.rank == root then
    sb = select(1, check.send(send, root, 0, false))
    size_check("scatter", 1, sb, size * info.size)
  end
  M.backend.scatter(sb, rb, root)
  return recv
end

return M
