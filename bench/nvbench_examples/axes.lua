-- Port of NVBench's python/examples/axes.py (cuda-bench 0.3.0) to cudalua's cuda.bench
-- SPDX-License-Identifier: MIT
local bench = require "cuda.bench"
local cuda = require "cuda"

-- cuda.Program searches the toolkit's include folders, CCCL's (<cuda/std/...>) among them:
-- no include_path from cuda.cccl.headers is needed.
local function make_sleep_kernel()
  -- JITs sleep_kernel(seconds)
  local src = [[
#include <cuda/std/cstdint>
#include <cuda/std/chrono>

// Each launched thread just sleeps for `seconds`.
__global__ void sleep_kernel(double seconds) {
  namespace chrono = ::cuda::std::chrono;
  using hr_clock = chrono::high_resolution_clock;

  auto duration = static_cast<cuda::std::int64_t>(seconds * 1e9);
  const auto ns = chrono::nanoseconds(duration);

  const auto start = hr_clock::now();
  const auto finish = start + ns;

  auto now = hr_clock::now();
  while (now < finish)
  {
    now = hr_clock::now();
  }
}
]]
  local prog = cuda.Program(src, "c++")
  local mod = prog:compile("cubin", {name_expressions = {"sleep_kernel"}})
  return mod:get_kernel("sleep_kernel")
end

local function simple(state)
  state:set_min_samples(1000)
  local sleep_dur = 1e-3
  local krn = make_sleep_kernel()
  local launch_config = cuda.LaunchConfig{grid = 1, block = 1, shmem = 0}

  state:exec(function(launch)
    cuda.launch(launch:get_stream(), launch_config, krn, sleep_dur)
  end)
end

local function single_float64_axis(state)
  -- get axis value, or default
  local default_sleep_dur = 3.14e-4
  local sleep_dur = state:get_float64_or_default("Duration", default_sleep_dur)
  local krn = make_sleep_kernel()
  local launch_config = cuda.LaunchConfig{grid = 1, block = 1, shmem = 0}

  state:exec(function(launch)
    cuda.launch(launch:get_stream(), launch_config, krn, sleep_dur)
  end)
end

local function default_value(state)
  single_float64_axis(state)
end

local function make_copy_kernel(in_type, out_type)
  local src = [[
#include <cuda/std/cstdint>
#include <cuda/std/cstddef>
/*!
 * Naive copy of `n` values from `in` -> `out`.
 */
template <typename T, typename U>
__global__ void copy_kernel(const T *in, U *out, ::cuda::std::size_t n)
{
  const auto init = blockIdx.x * blockDim.x + threadIdx.x;
  const auto step = blockDim.x * gridDim.x;

  for (auto i = init; i < n; i += step)
  {
    out[i] = static_cast<U>(in[i]);
  }
}
]]
  local prog = cuda.Program(src, "c++")
  in_type = in_type or "::cuda::std::int32_t"
  out_type = out_type or "::cuda::std::int32_t"
  local instance_name = ("copy_kernel<%s, %s>"):format(in_type, out_type)
  local mod = prog:compile("cubin", {name_expressions = {instance_name}})
  return mod:get_kernel(instance_name)
end

local function copy_sweep_grid_shape(state)
  local block_size = state:get_int64("BlockSize")
  local num_blocks = state:get_int64("NumBlocks")

  -- Number of int32 elements in 256MiB
  local nbytes = 256 * 1024 * 1024
  local num_values = nbytes // 4   -- ctypes.sizeof(ctypes.c_int32(0))

  state:add_element_count(num_values)
  state:add_global_memory_reads(nbytes)
  state:add_global_memory_writes(nbytes)

  -- the device's pool, which cuda.core's DeviceMemoryResource(dev_id) is
  local dev = cuda.Device(state:get_device())
  local alloc_s = state:get_stream()
  local input_buf <close> = dev.memory_resource:allocate(nbytes, alloc_s)
  local output_buf <close> = dev.memory_resource:allocate(nbytes, alloc_s)

  local krn = make_copy_kernel()
  local launch_config = cuda.LaunchConfig{grid = num_blocks, block = block_size, shmem = 0}

  state:exec(function(launch)
    cuda.launch(launch:get_stream(), launch_config, krn, input_buf, output_buf, num_values)
  end)
end

local function copy_type_sweep(state)
  local type_id = state:get_int64("TypeID")

  -- the ctypes of the original, as their sizes
  local types_map = {
    [0] = {1, "cuda::std::uint8_t"},
    [1] = {2, "cuda::std::uint16_t"},
    [2] = {4, "cuda::std::uint32_t"},
    [3] = {8, "cuda::std::uint64_t"},
    [4] = {4, "float"},
    [5] = {8, "double"},
  }

  local value_size, value_cuda_t = table.unpack(types_map[type_id])
  state:add_summary("Type", value_cuda_t)

  -- Number of elements in 256MiB
  local nbytes = 256 * 1024 * 1024
  local num_values = nbytes // value_size

  state:add_element_count(num_values)
  state:add_global_memory_reads(nbytes)
  state:add_global_memory_writes(nbytes)

  local dev = cuda.Device(state:get_device())
  local alloc_s = state:get_stream()
  local input_buf <close> = dev.memory_resource:allocate(nbytes, alloc_s)
  local output_buf <close> = dev.memory_resource:allocate(nbytes, alloc_s)

  local krn = make_copy_kernel(value_cuda_t, value_cuda_t)
  local launch_config = cuda.LaunchConfig{grid = 256, block = 256, shmem = 0}

  state:exec(function(launch)
    cuda.launch(launch:get_stream(), launch_config, krn, input_buf, output_buf, num_values)
  end)
end

-- Benchmark without axes
bench.register(simple)

-- benchmark with no axes, that uses default value
bench.register(default_value)
-- specify axis
bench.register(single_float64_axis):add_float64_axis("Duration (s)", {7e-5, 1e-4, 5e-4})

local copy1_bench = bench.register(copy_sweep_grid_shape)
copy1_bench:add_int64_axis("BlockSize", {1 << 6, 1 << 8})   -- [2**x for x in range(6, 10, 2)]
copy1_bench:add_int64_axis("NumBlocks", {1 << 6, 1 << 8})

local copy2_bench = bench.register(copy_type_sweep)
copy2_bench:add_int64_axis("TypeID", {0, 1, 2, 3, 4, 5})   -- range(0, 6)

bench.run_all_benchmarks(arg)
