-- Example benchmarks for `cudalua bench`: a template copy, a sleep kernel, a CPU-only case
-- SPDX-License-Identifier: MIT
--
--   cudalua bench_example [options]      (the bundled copy of this file, run directly)
--   cudalua bench bench_example.lua -b copy -a 'Bytes[pow2]=[16:28:4]' --json out.json
--
-- The same kernels as bench/nvbench_ref.py, NVBench's Python port, so that
-- the two harnesses can be compared line for line.
local bench = require "cuda.bench"
local cuda = require "cuda"

local SOURCE = [[
typedef unsigned char uint8_t;   // NVRTC has no <cstdint> without the CUDA include path
typedef unsigned int uint32_t;
template <typename T>
__global__ void copy(const T *__restrict__ in, T *__restrict__ out, unsigned long long n)
{
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = in[i];
}
extern "C" __global__ void sleep_kernel(unsigned long long ns)
{
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
]]

local SIZES = {uint8_t = 1, uint32_t = 4, double = 8}

-- copy<T>: Bytes of T read and written once.
local function copy(state)
  local T, bytes = state:get_string("T"), state:get_int64("Bytes")
  local n = bytes // SIZES[T]
  local dev, stream = state.device, state.stream
  local kernel = state:get_kernel(SOURCE, "copy<T>", {std = "c++17"})
  local input = dev.memory_resource:allocate(bytes, stream)
  local output = dev.memory_resource:allocate(bytes, stream)
  input:fill(1, stream)
  local block = 256
  local grid = math.min((n + block - 1) // block, dev.properties.multiprocessor_count * 8)
  local config = cuda.LaunchConfig{grid = grid, block = block}
  local count = cuda.u64(n)
  state:add_element_count(n)
  state:add_global_memory_reads(bytes)
  state:add_global_memory_writes(bytes)
  -- the batch replays a graph of these launches: at 2^16 bytes a launch takes longer than the copy
  state:exec(function(launch)
    cuda.launch(launch.stream, config, kernel, input, output, count)
  end, {batched = "graph"})
  input:close(stream)
  output:close(stream)
end

bench.register(copy)
  :set_name("copy")
  :add_type_axis("T", {"uint8_t", "uint32_t", "double"})
  :add_int64_power_of_two_axis("Bytes", {16, 20, 24, 28})

-- sleep: a kernel that waits Duration microseconds (__nanosleep).
local function sleep(state)
  local us = state:get_int64("Duration_us")
  local kernel = state:get_kernel(SOURCE, "sleep_kernel")
  local config = cuda.LaunchConfig{grid = 1, block = 1}
  local ns = cuda.u64(us * 1000)
  state:exec(function(launch) cuda.launch(launch.stream, config, kernel, ns) end)
end

bench.register(sleep)
  :set_name("sleep")
  :add_int64_axis("Duration_us", {10, 100, 1000})

-- cpu: a host-only loop, timed by the CPU clock alone.
local function cpu(state)
  local n = state:get_int64("Iterations")
  state:exec(function()
    local x = 0
    for i = 1, n do x = x + i % 7 end
    return x
  end)
end

bench.register(cpu)
  :set_name("cpu")
  :set_is_cpu_only(true)
  :add_int64_axis("Iterations", {1000, 100000})

-- Run directly (cudalua bench_example [options]), the file runs its own
-- benchmarks with cudalua bench's options; under cudalua bench it only registers them.
if not require("cuda.bench.harness").loading then
  require("cuda.bench.cli").main(arg, "bench_example", require("cuda.results").description(), bench.registered())
end
