-- cuda.mpi_bench: the exchange between ranks 0 and 1 of an MPI job
-- SPDX-License-Identifier: MIT
-- (cudalua bandwidth --mpi): ping-pong and bidirectional rates over message
-- sizes, in host and in device buffers, every size verified.
--
-- Times are host wall-clock (cuda.clock) around the MPI calls, as an
-- application sees them: a device buffer's path through cuda.mpi (CUDA IPC
-- on a node, the pinned staging ring elsewhere) is part of the time, and
-- each row names the path its messages took (mpi.path). Host buffers are
-- cuda.HostMemoryResource's, so the host rows need no GPU; device buffers
-- are plain allocations (cuda.DeviceMemoryResource(dev, {pool = false})),
-- pool buffers those of a pool made to be shared ({ipc = true}): IPC maps
-- both kinds. With device buffers, rank 0 also times the device's
-- own copies in the same run (device to device, pinned host to device, at
-- the largest size): the yardsticks of the exchange's rates.
local cuda = require "cuda"
local cli = require "cuda.cli"
local bench = require "cuda.bench"

local M = {}

M.TESTS = {"ping-pong", "bidirectional"}
-- Latency from 8 B to 4 KiB, rate up to 256 MiB.
M.DEFAULT_SIZES = {8, 64, 512, 4096, 64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20}
M.BUFFERS = {"host", "device", "pool"}
local TAG = 4242
local POISON = 0xA5

-- One exchange. Ping-pong: rank 0 sends, rank 1 sends back what arrived;
-- bidirectional: both send and receive at once.
local function exchange(mpi, test, pair, send, recv)
  if test == "bidirectional" then
    local incoming = mpi.irecv(recv, pair.peer, TAG)
    local outgoing = mpi.isend(send, pair.peer, TAG)
    incoming:wait()
    outgoing:wait()
  elseif pair.me == 0 then
    mpi.send(send, pair.peer, TAG)
    mpi.recv(recv, pair.peer, TAG)
  else
    mpi.recv(recv, pair.peer, TAG)
    mpi.send(recv, pair.peer, TAG)
  end
end

-- Ranks 0 and 1 meet (a barrier of their own: the other ranks are not in
-- the exchange): a one-byte ping-pong.
local function meet(mpi, space)
  local token = space.token
  if space.pair.me == 0 then
    mpi.send(token, 1, TAG + 1)
    mpi.recv(token, 1, TAG + 1)
  else
    mpi.recv(token, 0, TAG + 1)
    mpi.send(token, 0, TAG + 1)
  end
end

-- The bytes rank r sends at a size: random, from the seed and r.
local function pattern(space, r, bytes)
  local buf = space.host:allocate(bytes)
  buf:view("uint8"):random(0, 256, space.seed * 2 + r)
  return buf
end

-- Send and receive buffers of a kind (M.BUFFERS), the send one holding
-- this rank's pattern.
local function buffers(space, kind, bytes)
  local mine = pattern(space, space.pair.me, bytes)
  if kind == "host" then return mine, space.host:allocate(bytes) end
  local mr = kind == "pool" and space.shared or space.plain
  local send, recv = mr:allocate(bytes, space.stream), mr:allocate(bytes, space.stream)
  send:copy_from(mine, space.stream)
  space.stream:sync()
  mine:close()
  return send, recv
end

local function poison(space, kind, buf)
  if kind == "host" then buf:view("uint8"):fill(POISON) return end
  buf:fill(POISON, space.stream)
  space.stream:sync()
end

-- Whether recv holds what should have arrived: rank 0's pattern (a
-- ping-pong comes back to rank 0 as it left), else the peer's.
local function arrived(space, kind, test, recv)
  local from = (test == "ping-pong") and 0 or space.pair.peer
  local want <close> = pattern(space, from, recv.size)
  local got = recv
  if kind ~= "host" then
    got = space.host:allocate(recv.size)   -- collected with the rest
    recv:copy_to(got, space.stream)
    space.stream:sync()
  end
  return got:view("uint8"):allclose(want:view("uint8"), 0, 0)
end

-- One (kind, test, size): warm-up, timed exchanges, then one exchange
-- into a poisoned buffer, checked. A row of M.exchange.
local function measure(mpi, space, kind, test, bytes)
  -- the path and why are those of the last message to the peer: this one's
  local send, recv = buffers(space, kind, bytes)
  local closing <close> = setmetatable({}, {__close = function() send:close() recv:close() end})
  -- bytes moved per exchange; a ping-pong's message takes half the round trip
  local moved, halves = bytes, 2
  if test == "bidirectional" then moved, halves = 2 * bytes, 1 end
  for _ = 1, space.warmup do exchange(mpi, test, space.pair, send, recv) end
  local rates = {}
  for i = 1, space.runs do
    meet(mpi, space)
    local t0 = cuda.clock()
    exchange(mpi, test, space.pair, send, recv)
    rates[i] = moved / ((cuda.clock() - t0) / halves) / 1e9
  end
  poison(space, kind, recv)
  meet(mpi, space)
  exchange(mpi, test, space.pair, send, recv)
  local gbps = bench.median(rates)
  local path, why = mpi.path(space.pair.peer)
  return {buffers = kind, test = test, bytes = bytes, rates = rates, gbps = gbps, us = moved / gbps / 1e3,
          verified = arrived(space, kind, test, recv), path = path, why = why}
end

-- Runs the exchange on ranks 0 and 1 of mpi (cuda.mpi); other ranks wait.
-- opts: sizes (bytes), buffers (a subset of M.BUFFERS), runs, warmup, seed,
-- device (a cuda.Device, for device buffers). Returns, on ranks 0 and 1,
-- a row per buffer kind, test and size: {buffers, test, bytes, rates (GB/s
-- of each timed exchange; bidirectional: both directions together), gbps
-- (their median), us (the median message's time: half a ping-pong's round
-- trip, a whole bidirectional exchange), verified}. Collective: every rank
-- calls it.
function M.exchange(mpi, opts)
  if mpi.size < 2 then error("the MPI exchange needs two ranks (mpirun -n 2 or more)", 0) end
  local rows = {}
  -- rank 0's seed: ranks that read the clock on either side of a second
  -- would otherwise check against patterns the peer never sent
  local seed = mpi.bcast(opts.seed or os.time(), 0)
  if mpi.rank > 1 then mpi.barrier() return rows end
  local space = {pair = {me = mpi.rank, peer = 1 - mpi.rank}, host = cuda.HostMemoryResource(), dev = opts.device,
                 plain = opts.device and cuda.DeviceMemoryResource(opts.device, {pool = false}),
                 shared = opts.device and cuda.DeviceMemoryResource(opts.device, {ipc = true}),
                 stream = opts.device and opts.device:create_stream(), seed = seed,
                 runs = opts.runs or 10, warmup = opts.warmup or 3}
  space.token = space.host:allocate(1)
  for _, kind in ipairs(opts.buffers or M.BUFFERS) do
    for _, test in ipairs(M.TESTS) do
      for _, bytes in ipairs(opts.sizes) do rows[#rows + 1] = measure(mpi, space, kind, test, bytes) end
    end
  end
  mpi.barrier()
  return rows
end

-- The rows as a table, the staging path (mpi.staging) named, and the
-- reasons a device path was not IPC, once each.
function M.format_table(rows, staging)
  local lines = {("--- MPI exchange between ranks 0 and 1 (%s): median GB/s (bidirectional: both ways " ..
                  "together), us a message ---"):format(staging),
                 ("%-7s %-14s %10s %10s %12s  %-8s %s"):format("buffers", "test", "bytes", "GB/s", "us", "path", "verified")}
  local reasons, seen = {}, {}
  for _, r in ipairs(rows) do
    lines[#lines + 1] = ("%-7s %-14s %10s %10.2f %12.2f  %-8s %s"):format(r.buffers, r.test, cli.format_bytes(r.bytes),
      r.gbps, r.us, r.path or "-", r.verified and "yes" or "FAILED")
    if r.why and not seen[r.why] then seen[r.why] = true reasons[#reasons + 1] = "(not IPC: " .. r.why .. ")" end
  end
  for _, why in ipairs(reasons) do lines[#lines + 1] = why end
  return table.concat(lines, "\n")
end

-- The device's own rates at bytes, GB/s (median of runs): a device-to-device
-- copy, and pinned host memory to the device; the yardsticks of the
-- exchange, measured in the same run.
function M.references(dev, bytes, runs)
  local s = dev:create_stream()
  local a <close> = dev.memory_resource:allocate(bytes, s)
  local b <close> = dev.memory_resource:allocate(bytes, s)
  local h <close> = cuda.PinnedMemoryResource{device = dev}:allocate(bytes)
  local start, stop = dev:create_event{timing = true}, dev:create_event{timing = true}
  local function rate(copy)
    local samples = {}
    for i = 1, (runs or 10) + 2 do
      s:record(start)
      copy()
      s:record(stop)
      stop:sync()
      if i > 2 then samples[#samples + 1] = bytes / ((stop - start) / 1e3) / 1e9 end
    end
    return bench.median(samples)
  end
  return {d2d = rate(function() a:copy_to(b, s) end), h2d = rate(function() h:copy_to(a, s) end)}
end

-- Adds --mpi and --mpi-buffers to the bandwidth script's parser.
function M.options(parser)
  parser:flag("--mpi", "Instead of the copy sweep: ping-pong and bidirectional exchanges between ranks 0 and 1 " ..
    "under mpirun or srun, every size verified.")
  parser:option("--mpi-buffers", "With --mpi: any of host, device (plain allocations) and pool (a shared pool's); " ..
    "host needs no GPU.", "host,device,pool")
    :convert(require("cuda.bandwidth").word_list(M.BUFFERS))
end

-- cudalua bandwidth --mpi: the exchange, printed by rank 0 and recorded as
-- results (rank 0's: the two ranks measure the same exchanges). args: the
-- bandwidth script's (sizes, mpi_buffers, runs, warmup, device and the
-- output options). Returns whether every exchange this rank checked arrived.
function M.run(args)
  local default_sizes = M.DEFAULT_SIZES
  local mpi = require "cuda.mpi"
  local results = require "cuda.results"
  local kinds = args.mpi_buffers or M.BUFFERS
  local dev = nil
  for _, kind in ipairs(kinds) do if kind ~= "host" then dev = cuda.Device(args.device) end end
  if dev then dev:set_current() end
  local rows = M.exchange(mpi, {sizes = args.sizes or default_sizes, buffers = kinds, runs = args.runs,
                                warmup = args.warmup, device = dev, seed = os.time() % 100000})
  local passed = true
  for _, r in ipairs(rows) do passed = passed and r.verified end
  local refs
  if dev and mpi.rank == 0 then
    local at = 0   -- 64 MiB when among the sizes, else the largest
    for _, bytes in ipairs(args.sizes or default_sizes) do
      if at ~= 64 << 20 then at = (bytes == 64 << 20) and bytes or math.max(at, bytes) end
    end
    refs = M.references(dev, at, args.runs)
    refs.bytes = at
  end
  if mpi.rank == 0 then
    print(M.format_table(rows, mpi.staging))
    if refs then
      print(("--- the device's own copies at %s: device to device %.1f GB/s, pinned host to device %.1f GB/s ---")
            :format(cli.format_bytes(refs.bytes), refs.d2d, refs.h2d))
    end
  end
  local run = results.new("bandwidth", {device = dev, argv = arg})
  for _, r in ipairs(mpi.rank == 0 and rows or {}) do
    run:add(("mpi %s %s %d"):format(r.test, r.buffers, r.bytes), "GB/s", r.rates,
            {median = r.gbps, bytes = r.bytes, us = r.us, verified = r.verified, path = r.path, why = r.why})
  end
  if refs then
    run:add("copy d2d " .. refs.bytes, "GB/s", {refs.d2d}, {bytes = refs.bytes})
    run:add("copy h2d pinned " .. refs.bytes, "GB/s", {refs.h2d}, {bytes = refs.bytes})
  end
  run:finish(args, passed, {staging = mpi.staging, ranks = mpi.size})
  return passed
end

return M
