-- Port of NVBench's python/examples/cpu_activity.py (cuda-bench 0.3.0) to cudalua's cuda.bench
-- SPDX-License-Identifier: MIT
local bench = require "cuda.bench"
local cuda = require "cuda"

local host_sleep_duration = 0.1

-- time.sleep: cudalua has no host sleep, so a busy wait on the monotonic clock
local function sleep(seconds)
  local t0 = cuda.clock()
  repeat until cuda.clock() - t0 >= seconds
end

local function cpu_only_sleep_bench(state)
  state:exec(function(launch) sleep(host_sleep_duration) end)
end

-- cuda.Program searches CCCL's headers (<cuda/std/...>) itself: no include_path is needed.
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

local function mixed_sleep_bench(state)
  local sync = state:get_string("Sync")
  local sync_flag = sync == "Do sync"

  local gpu_sleep_dur = 225e-3
  local krn = make_sleep_kernel()
  local launch_config = cuda.LaunchConfig{grid = 1, block = 1, shmem = 0}

  local function launcher(launch)
    -- host overhead
    sleep(host_sleep_duration)
    -- GPU computation
    cuda.launch(launch:get_stream(), launch_config, krn, gpu_sleep_dur)
  end

  state:exec(launcher, {sync = sync_flag})
end

-- time function only doing work (sleeping) on the host
-- using CPU timer only
local b = bench.register(cpu_only_sleep_bench)
b:set_is_cpu_only(true)

-- time the function that does work on both GPU and CPU
local b2 = bench.register(mixed_sleep_bench)
b2:add_string_axis("Sync", {"Do not sync", "Do sync"})

bench.run_all_benchmarks(arg)
