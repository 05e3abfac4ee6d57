-- bench/ipc_copy.lua: do copies from another process's memory run slower?
-- Rank 0 exports a 64 MiB plain buffer and a 64 MiB shared-pool buffer;
-- rank 1 opens both and times copies from and to each (events, median of
-- 20 after 3), by the copy engine and by a kernel, against local copies.
--
--   mpirun -n 2 cudalua bench/ipc_copy.lua
local cuda = require "cuda"
local mpi = require "cuda.mpi"
local core = require "cuda.mpi_core"
local N = 64 << 20
local dev = cuda.Device(mpi.local_rank % cuda.device_count())
dev:set_current()
local s = dev:create_stream()
local plain_mr = cuda.DeviceMemoryResource(dev, {pool = false})
local shared_mr = cuda.DeviceMemoryResource(dev, {ipc = true})
assert(mpi.size >= 2, "run it under mpirun -n 2")
if mpi.rank == 0 then
  local p, q = plain_mr:allocate(N), shared_mr:allocate(N, s)
  p:fill(1, s) q:fill(2, s) s:sync()
  local h = shared_mr:ipc_pool_handle()
  assert(core.send_fd(h.fd, 1, 77))
  local ep, eq = p:ipc_export(), q:ipc_export()
  mpi.bcast({ep.handle, ep.size, eq.handle, eq.size}, 0)
  mpi.barrier()
  return
end
local info = mpi.bcast(nil, 0)
local fd = core.receive_fd(0, 77)
local pool = cuda.ipc_pool_open(fd, dev)
core.close_fd(fd)
local rp = cuda.ipc_open(info[1], info[2], dev)
local rq = cuda.ipc_open(info[3], info[4], pool)
local lp, lq, ld = plain_mr:allocate(N), shared_mr:allocate(N, s), dev.memory_resource:allocate(N, s)
local prog = cuda.Program([[
extern "C" __global__ void copy16(const uint4 *src, uint4 *dst, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) dst[i] = src[i];
}]], "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
local k = prog:get_kernel("copy16")
local cfg = cuda.LaunchConfig{grid = dev.properties.multiprocessor_count * 8, block = 512}
local e0, e1 = dev:create_event{timing = true}, dev:create_event{timing = true}
local function med(fn)
  for _ = 1, 3 do fn() end
  local t = {}
  for i = 1, 20 do s:record(e0) fn() s:record(e1) s:sync() t[i] = e1 - e0 end
  table.sort(t)
  return N / (t[10] / 1e3) / 1e9
end
local rows = {
  {"local plain -> local plain (copy engine)", function() lp:copy_to(ld, s) end},
  {"local shared-pool -> local plain", function() lq:copy_to(ld, s) end},
  {"ipc plain -> local plain", function() rp:copy_to(ld, s) end},
  {"ipc plain -> local shared-pool", function() rp:copy_to(lq, s) end},
  {"imported pool -> local plain", function() rq:copy_to(ld, s) end},
  {"imported pool -> local shared-pool", function() rq:copy_to(lq, s) end},
  {"local plain -> imported pool", function() ld:copy_to(rq, s) end},
  {"kernel: ipc plain -> local", function() cuda.launch(s, cfg, k, rp, ld, cuda.u64(N // 16)) end},
  {"kernel: imported pool -> local", function() cuda.launch(s, cfg, k, rq, ld, cuda.u64(N // 16)) end},
  {"kernel: local -> local", function() cuda.launch(s, cfg, k, lp, ld, cuda.u64(N // 16)) end},
}
for _, r in ipairs(rows) do
  local ok, gbps = pcall(med, r[2])
  print(("%-40s %s"):format(r[1], ok and ("%8.1f GB/s"):format(gbps) or ("error: " .. tostring(type(gbps) == "table" and gbps.message or gbps))))
end
rp:close() rq:close()
mpi.barrier()
