-- Port of NVBench's python/examples/stream.py (cuda-bench 0.3.0) to cudalua's cuda.bench
-- SPDX-License-Identifier: MIT
local bench = require "cuda.bench"
local cuda = require "cuda"

-- CuPy's randint (int64 in [low, high); a multiplicative hash of the index, not CuPy's generator) and square
local SOURCE = [[
#define EACH(i, n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
__global__ void randint(long long *x, long long low, long long high, long long n) {
  EACH(i, n) x[i] = low + (long long)((i * 0x9e3779b97f4a7c15ull >> 16) % (unsigned long long)(high - low)); }
__global__ void square(const long long *x, long long *y, long long n) { EACH(i, n) y[i] = x[i] * x[i]; }
]]

local function elementwise_square(state)
  -- Tell NVBench to time/synchronize the current stream (CuPy's: the device's default stream).
  local s = cuda.Device().default_stream
  state:set_stream(s)
  local size = state:get_int64("Elements")
  local kernels = cuda.Program(SOURCE, "c++"):compile("cubin", {name_expressions = {"randint", "square"}})
  local config = cuda.LaunchConfig{grid = (size + 127) // 128, block = 128}   -- CuPy's elementwise launch
  local x <close> = cuda.Device().memory_resource:allocate(size * 8, s)
  cuda.launch(s, config, kernels:get_kernel("randint"), x, -16000, 16000, size)
  local y <close> = cuda.Device().memory_resource:allocate(x.size, s)   -- cupy.empty_like(x)

  state:add_element_count(size)
  state:add_global_memory_reads(x.size)
  state:add_global_memory_writes(y.size)
  -- The launch uses the ambient stream s, not launch:get_stream(): set_stream told NVBench to time it.
  state:exec(function(launch) cuda.launch(s, config, kernels:get_kernel("square"), x, y, size) end, {batched = false})
end
bench.register(elementwise_square):add_int64_power_of_two_axis("Elements", {22, 24, 26})   -- the decorators
bench.run_all_benchmarks(arg)
