-- Port of NVBench's python/examples/exec_tag_timer.py (cuda-bench 0.3.0) to cudalua's cuda.bench
-- SPDX-License-Identifier: MIT
local bench = require "cuda.bench"
local cuda = require "cuda"

-- cuda.Program searches CCCL's headers (<cuda/std/...>) itself: no include_path is needed.
local function compile(src, instance_name)
  local prog = cuda.Program(src, "c++")
  local mod = prog:compile("cubin", {name_expressions = {instance_name}})
  return mod:get_kernel(instance_name)
end

local function make_copy_kernel()
  local src = [[
#include <cuda/std/cstddef>
#include <cuda/std/cstdint>

template <typename T>
__global__ void copy_kernel(const T *in, T *out, cuda::std::size_t n)
{
  const auto init = blockIdx.x * blockDim.x + threadIdx.x;
  const auto step = blockDim.x * gridDim.x;

  for (auto i = init; i < n; i += step)
  {
    out[i] = in[i];
  }
}
]]
  return compile(src, "copy_kernel<cuda::std::int32_t>")
end

local function make_sequence_kernel()
  local src = [[
#include <cuda/std/cstddef>
#include <cuda/std/cstdint>

template <typename T>
__global__ void sequence_kernel(T *buf, cuda::std::size_t n)
{
  const auto init = blockIdx.x * blockDim.x + threadIdx.x;
  const auto step = blockDim.x * gridDim.x;

  for (auto i = init; i < n; i += step)
  {
    buf[i] = static_cast<T>(i);
  }
}
]]
  return compile(src, "sequence_kernel<cuda::std::int32_t>")
end

local function make_mod2_inplace_kernel()
  local src = [[
#include <cuda/std/cstddef>
#include <cuda/std/cstdint>

__global__ void mod2_inplace_kernel(cuda::std::int32_t *data,
                                    cuda::std::size_t n)
{
  const auto init = blockIdx.x * blockDim.x + threadIdx.x;
  const auto step = blockDim.x * gridDim.x;

  for (auto i = init; i < n; i += step)
  {
    data[i] = data[i] % 2;
  }
}
]]
  return compile(src, "mod2_inplace_kernel")
end

-- @bench.register()
local function mod2_inplace(state)
  local num_values = 64 * 1024 * 1024 // 4   -- ctypes.sizeof(ctypes.c_int32(0))
  local nbytes = num_values * 4

  local alloc_stream = state:get_stream()
  local mem = cuda.Device(state:get_device()).memory_resource
  local input_buf <close> = mem:allocate(nbytes, alloc_stream)
  local data_buf <close> = mem:allocate(nbytes, alloc_stream)

  state:add_element_count(num_values)
  state:add_global_memory_reads(nbytes)
  state:add_global_memory_writes(nbytes)

  local sequence_kernel = make_sequence_kernel()
  local copy_kernel = make_copy_kernel()
  local mod2_kernel = make_mod2_inplace_kernel()

  local threads_per_block = 256
  local blocks_in_grid = (num_values + threads_per_block - 1) // threads_per_block
  local launch_config = cuda.LaunchConfig{grid = blocks_in_grid, block = threads_per_block, shmem = 0}

  cuda.launch(alloc_stream, launch_config, sequence_kernel, input_buf, num_values)

  local function launcher(launch, timer)
    local stream = launch:get_stream()

    -- Reset working data before timing the in-place operation.
    cuda.launch(stream, launch_config, copy_kernel, input_buf, data_buf, num_values)

    timer:start()
    cuda.launch(stream, launch_config, mod2_kernel, data_buf, num_values)
    timer:stop()
  end

  state:exec(launcher, {timer = true})
end
bench.register(mod2_inplace)

bench.run_all_benchmarks(arg)
