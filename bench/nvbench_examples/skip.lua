-- Port of NVBench's python/examples/skip.py (cuda-bench 0.3.0) to cudalua's cuda.bench
-- SPDX-License-Identifier: MIT
local bench = require "cuda.bench"
local cuda = require "cuda"

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

local function runtime_skip(state)
  local duration = state:get_float64("Duration")
  local kramble = state:get_string("Kramble")

  -- Skip Baz benchmarks with 0.8 ms duration
  if kramble == "Baz" and duration < 0.8e-3 then
    state:skip("Short 'Baz' benchmarks are skipped")
    return
  end

  -- Skip Foo benchmark with > 0.3 ms duration
  if kramble == "Foo" and duration > 0.3e-3 then
    state:skip("Long 'Foo' benchmarks are skipped")
    return
  end

  local krn = make_sleep_kernel()
  local launch_cfg = cuda.LaunchConfig{grid = 1, block = 1, shmem = 0}

  state:exec(function(launch)
    cuda.launch(launch:get_stream(), launch_cfg, krn, duration)
  end)
end

local durations = {}
for k = 0, 4 do durations[#durations + 1] = 1e-4 + k * 0.25e-3 end
local b = bench.register(runtime_skip)
b:add_float64_axis("Duration", durations)
b:add_string_axis("Kramble", {"Foo", "Bar", "Baz"})

bench.run_all_benchmarks(arg)
