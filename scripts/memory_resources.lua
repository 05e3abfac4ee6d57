-- Memory resources and buffers: device pool, pinned staging, managed memory, an explicit pool, each verified
-- SPDX-License-Identifier: MIT
--
-- A port of cuda.core's "Memory Resources and Buffers" sample. With
-- --bandwidth it also measures copy bandwidth between every pair of
-- resources, so you can see which host memory feeds the GPU at full rate.
local cuda = require "cuda"
local cli = require "cuda.cli"
local bench = require "cuda.bench"
local results = require "cuda.results"

local parser = cli.parser("memory_resources", results.description())
parser:option("--elements", "Number of float32 elements per demo.", "65536"):convert(cli.positive_integer)
cli.device_option(parser)
parser:flag("--bandwidth", "Also measure copy bandwidth between every pair of resources.")
parser:flag("--peer", "Also run the peer-to-peer demo: a kernel on GPU 1 writes a buffer of GPU 0, and a copy " ..
  "between the GPUs (needs two GPUs; skipped with the reason on one).")
parser:option("--bytes", "Bytes per copy for --bandwidth.", "64000000"):convert(cli.positive_integer)
bench.add_timing_options(parser)
parser:option("--reference", "With --bandwidth: the raw C reference (bench/copy_ref) to compare with.")
  :argname("PROGRAM")
parser:option("--rounds", "With --reference: rounds in which cudalua and the reference take turns.", "3")
  :convert(cli.positive_integer)
results.options(parser, {"json", "csv", "md", "mpi"})
local args = cli.parse(parser, arg)

local BLOCK = 256
local failures = 0

local function status(ok, detail)
  if not ok then failures = failures + 1 end
  return (ok and "PASSED" or "FAILED") .. (detail and (" (" .. detail .. ")") or "")
end

-- The expected result, computed on the host in float32.
local function expected(host, input, scale, bias)
  local want = host:allocate(input.buffer.size):view("float32")
  return want:copy(input):mul(scale):add(bias)
end

local function compare(got, want)
  local ok, err, bad = got:allclose(want, 1e-6, 1e-6)
  return status(ok, ok and ("max abs error %g"):format(err) or ("first bad element %d"):format(bad))
end

-- [1] the device's default pool, fed through pinned staging buffers
local function demo_device_pool(ctx)
  local n, s = ctx.n, ctx.stream
  print("[1] Device memory pool with pinned staging")
  local pool = ctx.dev.memory_resource
  print("    resource: " .. tostring(pool))
  local staging <close> = cuda.PinnedMemoryResource():allocate(n * 4)
  local input = staging:view("float32"):iota(1, 1)
  local want = expected(ctx.host, input, 3.0, -0.5)
  local d <close> = pool:allocate(n * 4, s)
  d:copy_from(staging, s)
  cuda.launch(s, ctx.config, ctx.kernel, d, cuda.f32(3.0), cuda.f32(-0.5), cuda.u64(n))
  staging:fill(0xFF, s)                 -- poison before the copy back
  d:copy_to(staging, s)
  s:sync()
  print("    iota -> H2D -> scale_and_bias(3.0, -0.5) -> D2H: " .. compare(staging:view("float32"), want))
  d:close(s)
end

-- [2] managed memory: the host writes and reads through one view, no copies
local function demo_managed(ctx)
  local n, s = ctx.n, ctx.stream
  print("[2] Managed memory")
  if ctx.dev.properties.concurrent_managed_access ~= 1 then
    print("    skipped: this device does not report concurrent managed access")
    return
  end
  local m <close> = cuda.ManagedMemoryResource():allocate(n * 4)
  local v = m:view("float32"):random(-1000, 1000, ctx.seed)
  local want = expected(ctx.host, v, 0.5, 10.0)
  m:prefetch(ctx.dev, s)
  cuda.launch(s, ctx.config, ctx.kernel, m, cuda.f32(0.5), cuda.f32(10.0), cuda.u64(n))
  s:sync()
  print("    host writes, kernel scale_and_bias(0.5, 10.0), host reads the same view: " .. compare(v, want))
end

-- [3] an explicit pool: filled on the device, biased, verified, closed
local function demo_explicit_pool(ctx)
  local n, s = ctx.n, ctx.stream
  print("[3] Explicit device memory pool")
  local pool = cuda.DeviceMemoryResource(ctx.dev, {release_threshold = 0})
  print("    resource: " .. tostring(pool))
  local d = pool:allocate(n * 4, s)
  local fill = 7.25
  d:fill(cuda.f32(fill), s)
  cuda.launch(s, ctx.config, ctx.kernel, d, cuda.f32(1.0), cuda.f32(100.0), cuda.u64(n))
  local back <close> = cuda.PinnedMemoryResource():allocate(n * 4)
  back:fill(0xFF, s)
  d:copy_to(back, s)
  s:sync()
  local want = ctx.host:allocate(n * 4):view("float32"):fill(fill):add(100.0)
  print(("    fill %.2f on the device, bias +100: %s"):format(fill, compare(back:view("float32"), want)))
  print(("    pool in use: %d bytes while the buffer is open"):format(pool.used))
  d:close(s)
  s:sync()
  pool:close()
  print("    pool closed: " .. tostring(pool))
end

-- [4] peer to peer: GPU 0's pool grants GPU 1 access, a kernel on GPU 1 writes
-- GPU 0's buffer through it, and the result is copied to GPU 1 and back
local function demo_peer(ctx)
  print("[4] Peer to peer")
  if cuda.device_count() < 2 then
    print("    skipped: peer to peer needs two GPUs, and this machine has " .. cuda.device_count())
    return
  end
  local d0, d1 = cuda.Device(0), cuda.Device(1)
  if not d1:can_access_peer(d0) then
    print(("    skipped: GPU 1 (%s) cannot access the memory of GPU 0 (%s)"):format(d1.name, d0.name))
    return
  end
  local n, s0, s1 = ctx.n, d0:create_stream(), d1:create_stream()
  local pool <close> = cuda.DeviceMemoryResource(d0)
  pool.peer_accessible_by = {d1}
  local on0, on1 = pool:allocate(n * 4, s0), d1.memory_resource:allocate(n * 4, s1)
  local back <close> = cuda.PinnedMemoryResource():allocate(n * 4)
  local input = back:view("float32"):random(-1000, 1000, ctx.seed)
  local want = expected(ctx.host, input, 2.0, 1.0)
  on0:copy_from(back, s0)
  s0:sync()
  d1:set_current()
  local kernel = require("cuda.kernels").load(d1, "scale_and_bias.cu", "scale_and_bias")
  cuda.launch(s1, ctx.config, kernel, on0, cuda.f32(2.0), cuda.f32(1.0), cuda.u64(n))
  on1:fill(0xFF, s1)                    -- poison the copy's destination
  on1:copy_from(on0, s1)                -- GPU 0 -> GPU 1
  back:fill(0xFF, s1)
  on1:copy_to(back, s1)
  s1:sync()
  print(("    kernel on GPU 1 writes GPU 0's buffer, copied to GPU 1 and back: %s"):format(compare(back:view("float32"), want)))
  on0:close(s0)
  on1:close(s1)
  s1:sync()
  s0:sync()
  pool.peer_accessible_by = {}
  ctx.dev:set_current()
end

-- --- main ---------------------------------------------------------------------------

local dev = cuda.Device(args.device)
dev:set_current()
print(("="):rep(60))
print("Memory Resources and Buffers")
print(("="):rep(60))
print("Device: " .. dev.name)
local n = args.elements
print(("Elements per demo: %s (%s)"):format(cli.format_int(n), cli.format_bytes(n * 4)))
local ctx = {
  run = results.new("memory_resources", {device = dev, argv = arg}),
  dev = dev, n = n, stream = dev:create_stream(), host = cuda.HostMemoryResource(),
  kernel = require("cuda.kernels").load(dev, "scale_and_bias.cu", "scale_and_bias"), config = cuda.LaunchConfig{grid = (n + BLOCK - 1) // BLOCK, block = BLOCK},
  seed = (os.time() ~ math.floor(cuda.clock() * 1e6)) % 2^31,
}
print()
for _, demo in ipairs{{"device pool", demo_device_pool}, {"managed", demo_managed}, {"explicit pool", demo_explicit_pool}} do
  local range <close> = cuda.nvtx.range(demo[1])
  demo[2](ctx)
end
if args.peer then
  local range <close> = cuda.nvtx.range("peer")
  demo_peer(ctx)
end
local report = {device = dev.name, elements = n, failures = 0}
if args.bandwidth then
  local range <close> = cuda.nvtx.range("bandwidth")
  local failed
  report.bandwidth_gbps, report.bandwidth_runs, report.reference, failed = require("cuda.copy_matrix").run(ctx, args)
  failures = failures + failed
end
report.failures = failures
print()
print(failures > 0 and ("%d check(s) FAILED."):format(failures) or "All memory resource demos passed.")
ctx.run:finish(args, failures == 0, report)
if failures > 0 then os.exit(1) end
