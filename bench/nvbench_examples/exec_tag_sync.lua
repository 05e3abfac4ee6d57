-- Port of NVBench's python/examples/exec_tag_sync.py (cuda-bench 0.3.0) to cudalua's cuda.bench
-- SPDX-License-Identifier: MIT
local bench = require "cuda.bench"
local cuda = require "cuda"

-- cuda.Program searches CCCL's headers (<cuda/std/...>) itself: no include_path is needed.
local function make_fill_kernel(data_type)
  local src = [[
#include <cuda/std/cstdint>
#include <cuda/std/cstddef>
/*!
 * Naive setting of values in buffer
 */
template <typename T>
__global__ void fill_kernel(T *buf, T v, ::cuda::std::size_t n)
{
  const auto init = blockIdx.x * blockDim.x + threadIdx.x;
  const auto step = blockDim.x * gridDim.x;

  for (auto i = init; i < n; i += step)
  {
    buf[i] = v;
  }
}
]]
  local prog = cuda.Program(src, "c++")
  data_type = data_type or "::cuda::std::int32_t"
  local instance_name = ("fill_kernel<%s>"):format(data_type)
  local mod = prog:compile("cubin", {name_expressions = {instance_name}})
  return mod:get_kernel(instance_name)
end

local function synchronizing_bench(state)
  local n_values = 64 * 1024 * 1024
  local n_bytes = n_values * 4   -- ctypes.sizeof(ctypes.c_int32(0))

  local alloc_s = state:get_stream()
  local buffer <close> = cuda.Device(state:get_device()).memory_resource:allocate(n_bytes, alloc_s)

  state:add_element_count(n_values, "Items")
  state:add_global_memory_writes(n_bytes, "Size")

  local krn = make_fill_kernel()
  local launch_config = cuda.LaunchConfig{grid = 256, block = 256, shmem = 0}

  local function launcher(launch)
    local s = launch:get_stream()
    cuda.launch(s, launch_config, krn, buffer, 0, n_values)
    s:sync()
  end

  -- since launcher contains synchronization point,
  -- setting sync = true is required to avoid a deadlock
  state:exec(launcher, {sync = true})
end

bench.register(synchronizing_bench)
bench.run_all_benchmarks(arg)
