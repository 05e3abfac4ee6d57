-- Pageable host memory in a kernel, as CUDA's systemWideAtomics sample
-- does: every thread applies system-scope atomics (atomicAdd_system,
-- ..._Sub, _Max, _Min, _And, _Or, _Xor, _CAS) to a HostMemoryResource
-- buffer that the host poisoned first, and the host checks every result
-- against values it computes itself. Where the GPU reaches pageable memory
-- (HMM or ATS: pageable_memory_access = 1) the kernel takes the buffers;
-- elsewhere (launches of pageable memory are refused there:
-- t/pageable_fake.t) it takes managed buffers instead, as the sample does:
-- system-scope atomics on registered (pinned, mapped) host memory need
-- host-native atomics, which a PCIe-attached GPU lacks (compute-sanitizer
-- reports each one as invalid on the H100).
local t = require "tap"
local cuda = t.need_gpu()
local dev = cuda.Device(0)
local hmm = dev.properties.pageable_memory_access == 1
local seed = t.seed()
t.plan(10)
t.diag(hmm and "the kernel takes the pageable buffers (pageable_memory_access = 1)"
  or "pageable_memory_access = 0: managed buffers instead, as CUDA's sample does")

dev:set_current()
local s <close> = dev:create_stream()
local k = cuda.Program([[
extern "C" __global__ void system_atomics(int *a, unsigned *u, int threads) {
  int tid = blockIdx.x * blockDim.x + threadIdx.x;
  if (tid >= threads) return;
  atomicAdd_system(&a[0], 10);
  atomicSub_system(&a[1], 10);
  atomicMax_system(&a[2], tid);
  atomicMin_system(&a[3], tid);
  atomicAnd_system(&a[4], 2 * tid + 1);
  atomicOr_system(&a[5], 1 << (tid % 32));
  atomicXor_system(&a[6], tid);
  if (atomicCAS_system(&a[7], 0, tid + 1) == 0)
    atomicAdd_system(&a[8], 1);
  atomicAdd_system(&u[tid % 64], 1u);
}
]], "c++", {arch = "sm_" .. dev.arch}):compile("cubin"):get_kernel("system_atomics")

local mr = hmm and cuda.HostMemoryResource() or cuda.ManagedMemoryResource()
local a <close> = mr:allocate(9 * 4)
local u <close> = mr:allocate(64 * 4)
local A, U = a:view("int32"), u:view("uint32")
local T = math.random(1000, 8000)
local and0 = math.random(0, 2 ^ 31 - 1) | 1
A[1], A[2], A[3], A[4], A[5], A[6], A[7], A[8], A[9] = 0, 0, -1, T + 100, and0, 0, 0, 0, 0
local base = math.random(1, 2 ^ 20)   -- the counters start from a value the host chose
U:fill(base)
cuda.launch(s, cuda.LaunchConfig{grid = (T + 255) // 256, block = 256}, k, a, u, cuda.i32(T))
s:sync()

local want_and, want_xor = and0, 0
for tid = 0, T - 1 do
  want_and = want_and & (2 * tid + 1)
  want_xor = want_xor ~ tid
end
t.is(A[1], 10 * T, ("atomicAdd_system by %d threads on %s memory"):format(T, hmm and "pageable" or "managed"))
t.is(A[2], -10 * T, "atomicSub_system")
t.is(A[3], T - 1, "atomicMax_system")
t.is(A[4], 0, "atomicMin_system")
t.is(A[5], want_and, "atomicAnd_system")
t.is(A[6], -1, "atomicOr_system set every bit")
t.is(A[7], want_xor, "atomicXor_system")
t.ok(A[8] >= 1 and A[8] <= T, "atomicCAS_system: one thread's value won (" .. A[8] .. ")")
t.is(A[9], 1, "atomicCAS_system: exactly one thread saw 0")
local bad = 0
for i = 1, 64 do
  local want = base + T // 64 + ((i - 1) < T % 64 and 1 or 0)
  if U[i] ~= want then bad = bad + 1 end
end
t.is(bad, 0, "64 unsigned counters each got their threads' increments")
