-- Port of NVBench's python/examples/auto_throughput.py (cuda-bench 0.3.0) to cudalua's cuda.bench
-- SPDX-License-Identifier: MIT
local bench = require "cuda.bench"
local cuda = require "cuda"

-- numba's kernel: its closure's items_per_thread a template parameter, its ints int64 as numba types them
local SOURCE = [[
template <int items_per_thread>
__global__ void kernel(long long stride, long long elements, const int *in_arr, int *out_arr)
{
  const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = stride * tid; i < stride * elements; i += stride * step)
    for (int j = 0; j < items_per_thread; j++) {
      const long long read_id = (items_per_thread * i + j) % elements;
      const long long write_id = tid + j * elements;
      out_arr[write_id] = in_arr[read_id];
    }
}
]]

local function make_throughput_kernel(items_per_thread)
  local name = ("kernel<%d>"):format(items_per_thread)
  return cuda.Program(SOURCE, "c++"):compile("cubin", {name_expressions = {name}}):get_kernel(name)
end

local function throughput_bench(state)
  local stride = state:get_int64("Stride")
  local ipt = state:get_int64("ItemsPerThread")

  local nbytes = 128 * 1024 * 1024
  local elements = nbytes // 4   -- np.dtype(np.int32).itemsize

  local alloc_stream = state:get_stream()
  local mr = cuda.Device(state:get_device()).memory_resource
  local inp_arr <close> = mr:allocate(elements * 4, alloc_stream)
  local out_arr <close> = mr:allocate(elements * ipt * 4, alloc_stream)

  state:add_element_count(elements, "Elements")
  state:collect_cupti_metrics()

  local threads_per_block = 256
  local blocks_in_grid = (elements + threads_per_block - 1) // threads_per_block

  local krn = make_throughput_kernel(ipt)
  local config = cuda.LaunchConfig{grid = blocks_in_grid, block = threads_per_block, shmem = 0}

  state:exec(function(launch)
    local exec_stream = launch:get_stream()
    cuda.launch(exec_stream, config, krn, stride, elements, inp_arr, out_arr)
  end)
end

bench.register(throughput_bench)
  :add_int64_axis("Stride", {1, 2, 4})
  :add_int64_axis("ItemsPerThread", {1, 2, 3, 4})

bench.run_all_benchmarks(arg)
