-- Port of NVBench's python/examples/cpu_only.py (cuda-bench 0.3.0) to cudalua's cuda.bench
-- SPDX-License-Identifier: MIT
local bench = require "cuda.bench"
local cuda = require "cuda"

-- time.sleep: cudalua has no host sleep, so a busy wait on the monotonic clock
local function sleep(seconds)
  local t0 = cuda.clock()
  repeat until cuda.clock() - t0 >= seconds
end

local function throughput_bench(state)
  state:exec(function(launch) sleep(1) end)
end

bench.register(throughput_bench):set_is_cpu_only(true)

bench.run_all_benchmarks(arg)
