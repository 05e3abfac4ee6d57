-- Host cost and GPU time of N small copies: one call each against one cuda.copy_batch
-- SPDX-License-Identifier: MIT
--
-- N copies of --bytes each, from one --kind buffer (pinned by default) into
-- device memory, issued two ways on one stream: N copy_from calls, or one
-- cuda.copy_batch of the N pairs (cuMemcpyBatchAsync). The slices are made
-- before the clock starts, so both ways time issuing only. Host cost: the
-- wall time of issuing the N copies, on an idle stream (bench.host_batches);
-- GPU time: between events recorded around them (bench.gpu_batches). Each is
-- the median (with min and p90) over --repeats. Both ways' results are
-- verified against the source bytes.
local cuda = require "cuda"
local cli = require "cuda.cli"
local bench = require "cuda.bench"

local KINDS = {"pinned", "pageable", "managed", "device"}

local function parse_options(argv)
  local parser = cli.parser("copy_batch_cost",
    "Host cost and GPU time of N small copies: one call each against one cuda.copy_batch")
  parser:option("--copies", "Copies per batch (N).", "1000"):convert(cli.positive_integer)
  parser:option("--bytes", "Bytes per copy.", "4096"):convert(cli.positive_integer)
  parser:option("--repeats", "Timed repeats of each way.", "50"):convert(cli.positive_integer)
  parser:option("--kind", "Source memory: " .. table.concat(KINDS, ", ") .. ".", "pinned")
    :convert(cli.choice(KINDS))
  cli.device_option(parser)
  return cli.parse(parser, argv)
end

local function resource(dev, kind)
  if kind == "pinned" then return cuda.PinnedMemoryResource() end
  if kind == "pageable" then return cuda.HostMemoryResource() end
  if kind == "managed" then return cuda.ManagedMemoryResource() end
  return dev.memory_resource
end

-- The source (random bytes), the destination, and their N slices.
local function setup(dev, s, args)
  local total = args.copies * args.bytes
  local stage = cuda.PinnedMemoryResource():allocate(total)
  stage:view("uint8"):random(0, 256, 42)
  local src = resource(dev, args.kind):allocate(total, s)
  src:copy_from(stage, s)
  local dst = dev.memory_resource:allocate(total, s)
  local pairs_, srcs, dsts = {}, {}, {}
  for i = 1, args.copies do
    local off = (i - 1) * args.bytes
    srcs[i], dsts[i] = src:slice(off, args.bytes), dst:slice(off, args.bytes)
    pairs_[i] = {dsts[i], srcs[i]}
  end
  s:sync()
  return {stage = stage, src = src, dst = dst, pairs = pairs_, srcs = srcs, dsts = dsts}
end

-- Poison the destination, copy one way, read it back and compare.
local function verify(s, w, issue)
  w.dst:fill(0xA5, s)
  issue()
  local back = cuda.PinnedMemoryResource():allocate(w.dst.size)
  back:copy_from(w.dst, s)
  s:sync()
  local ok, _, first_bad = back:view("uint8"):allclose(w.stage:view("uint8"), 0, 0)
  back:close()
  return ok, first_bad
end

local function main(argv)
  local args = parse_options(argv)
  local dev = cuda.Device(args.device)
  dev:set_current()
  local s = dev:create_stream{non_blocking = true}
  local w = setup(dev, s, args)
  local n = args.copies
  local ways = {
    {name = "one call each", issue = function()
      local dsts, srcs = w.dsts, w.srcs
      for i = 1, n do dsts[i]:copy_from(srcs[i], s) end
    end},
    {name = "one copy_batch", issue = function() cuda.copy_batch(s, w.pairs) end},
  }
  local opts = {warmup = 3, repeats = args.repeats}
  print(("%d copies of %d bytes, %s -> device, device %d; median (min, p90) of %d repeats")
    :format(n, args.bytes, args.kind, dev.id, args.repeats))
  print(("%-16s %14s %14s %14s %10s"):format("", "host us/copy", "host ms/all", "GPU ms/all", "verified"))
  local failed = false
  local figures = {}
  for _, way in ipairs(ways) do
    local ok, bad = verify(s, w, way.issue)
    failed = failed or not ok
    local host = bench.host_batches(s, way.issue, 1, opts)   -- microseconds per N copies
    local gpu = bench.gpu_batches(s, way.issue, 1, opts)
    figures[#figures + 1] = {way = way.name, host = host, gpu = gpu}
    print(("%-16s %14.3f %14.3f %14.4f %10s"):format(way.name, host.median / n, host.median / 1e3,
      gpu.median, ok and "yes" or ("NO, byte " .. tostring(bad))))
    print(("%-16s %14s %14s %14s"):format("  (min, p90)",
      ("%.3f, %.3f"):format(host.min / n, host.p90 / n), ("%.3f, %.3f"):format(host.min / 1e3, host.p90 / 1e3),
      ("%.4f, %.4f"):format(gpu.min, gpu.p90)))
  end
  local each, batch = figures[1], figures[2]
  print(("batch / each: host %.3f, GPU %.3f"):format(batch.host.median / each.host.median,
    batch.gpu.median / each.gpu.median))
  if failed then
    io.stderr:write("copy_batch_cost: a copy gave wrong bytes\n")
    os.exit(1)
  end
end

main(arg)
