-- No state is lost to a stall behind cuda.bench's blocking kernel (issue 37).
-- Under the fake driver, whose blocking kernel holds its stream until the
-- flag is written and counts every wait made meanwhile as a stall
-- (t/fake/hold.c): benchmarks whose earlier states leave modules and
-- buffers to the collector, run with a collection at every allocation
-- (t/gcstress.lua), make no stall; a function that waits inside the timed
-- region is measured without the blocker, and the log names the call; a
-- blocking kernel that times out is retried without it.
local t = require "tap"
local so = os.getenv("CUDALUA_FAKE_LIBCUDA")
if not so or not io.open(so) then t.skip_all("no fake driver (CUDALUA_FAKE_LIBCUDA: run by make check)") end
local fake = require "fake"
local cudalua = t.cudalua()
local src = os.getenv("CUDALUA_SRCDIR") or "."
local dir = t.tmpdir()
t.seed()

-- Each state compiles its own module and allocates pinned, plain device
-- and pool memory, all left to the collector: their frees and the unload
-- come from finalizers of later states. The measured function allocates
-- (a LaunchConfig a call), so with gcstress each call runs a whole cycle
-- inside the blocking kernel's window. The last benchmark prints the
-- fake's stall count.
local states = math.random(6, 10)
t.write_file(dir .. "/garbage.lua", ([[
local cuda = require "cuda"
local bench = require "cuda.bench"
local SRC = 'extern "C" __global__ void touch%%d(float *x, unsigned long long n) {}'
-- LATE_GC: the collector has not run since the earlier states (stopped),
-- and the first sample's call collects, inside the blocking kernel's window
local late = os.getenv("LATE_GC")
if late then collectgarbage("stop") end
bench.register(function(state)
  local dev, n = state.device, state:get_int64("N")
  local name = ("touch%%d"):format(n)
  local kernel = cuda.Program(SRC:format(n), "c++", {arch = "sm_" .. dev.arch}):compile("cubin"):get_kernel(name)
  local pinned = cuda.PinnedMemoryResource():allocate(4096 * n)
  local plain = cuda.DeviceMemoryResource(dev, {pool = false}):allocate(4096)
  local pooled = dev.memory_resource:allocate(4096, state.stream)
  local calls = 0
  state:exec(function(launch)
    calls = calls + 1
    if late and calls == 2 then collectgarbage() end   -- 1: the warm-up, 2: the first sample
    cuda.launch(launch.stream, cuda.LaunchConfig{grid = 1, block = 1}, kernel, pooled, cuda.u64(n))
  end)
end):set_name("garbage"):add_int64_axis("N", {%s})
bench.register(function(state)
  local frees = require("fakecuda").calls("cuMemFreeHost")
  collectgarbage()
  local stalls, last = require("fakecuda").stalls()
  print(("stalls %%d %%s frees %%d"):format(stalls, tostring(last), frees))
  state:skip("reported")
end):set_name("report")
]]):format(table.concat((function() local l = {} for i = 1, states do l[i] = i end return l end)(), ", ")))

local env = fake.env("CUDALUA_BENCH_L2_BYTES=65536")
local function bench(file, opts, extra_env)
  return t.run(("cd '%s' && %s %s %s bench '%s' --timeout 0.05 --stopping-criterion sample_count --md stderr %s"):format(
    dir, env, extra_env or "", cudalua, file, opts or ""))
end
local gcstress = ("LUA_INIT_5_4='@%s/t/gcstress.lua'"):format(src)

for _, case in ipairs{{"a collection at every allocation", gcstress},
                      {"a late collection inside the timed region", "LATE_GC=1"}} do
  local code, out, err = bench(dir .. "/garbage.lua", "", case[2])
  t.is(code, 0, ("%d states of garbage, %s: exit 0"):format(states, case[1]) .. err)
  t.like(out, "stalls 0 nil", case[1] .. ": no wait reached the driver while the blocking kernel held the stream")
  local frees = tonumber(out:match("frees (%d+)"))
  t.ok(frees and frees >= states - 1, ("%s: the earlier states' memory was freed during the run (%s)"):format(case[1], frees))
  t.ok(not err:find("blocking kernel timed out", 1, true), case[1] .. ": no blocking kernel timed out")
  t.ok(not err:find("without the blocking kernel", 1, true) and not err:find("without it", 1, true),
    case[1] .. ": every state measured behind the blocking kernel")
  t.is(select(2, err:gsub("Pass: Cold:", "")), states, case[1] .. ": every state passed")
end
local code, out, err

-- a function that waits inside the window: the hold is broken before the
-- wait (no stall), the state is measured without the blocker, and the log
-- names the call
t.write_file(dir .. "/waits.lua", [[
local cuda = require "cuda"
local bench = require "cuda.bench"
local host = cuda.HostMemoryResource():allocate(64)
bench.register(function(state)
  state:exec(function(launch) launch.stream:sync() end)
end):set_name("syncs")
bench.register(function(state)
  local dev = state.device
  local d = dev.memory_resource:allocate(64, state.stream)
  state:exec(function(launch) d:copy_to(host, launch.stream) end)
end):set_name("pageable")
bench.register(function(state)
  local dev = state.device
  state:exec(function(launch)
    cuda.Program('extern "C" __global__ void k() {}', "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
      :get_kernel("k")
  end)
end):set_name("loads")
bench.register(function(state)
  local stalls, last = require("fakecuda").stalls()
  print(("stalls %d %s"):format(stalls, tostring(last)))
  state:skip("reported")
end):set_name("report")
]])
code, out, err = bench(dir .. "/waits.lua")
t.is(code, 0, "functions that wait inside the timed region still pass" .. err)
t.like(out, "stalls 0 nil", "and make no stall: the hold was let go before each wait")
t.like(err, "Run:  %[1/4%] syncs[^\n]*\nWarn: cuStreamSynchronize would wait for the stream the blocking kernel held",
  "stream:sync() is named")
t.like(err, "Run:  %[2/4%] pageable[^\n]*\nWarn: cuMemcpyAsync %(pageable memory%) would wait", "a copy into pageable memory is named")
t.like(err, "Run:  %[3/4%] loads[^\n]*\nWarn: cuLibraryLoadData would wait", "a module load is named")
t.like(err, "measured without the blocking kernel", "and the states measured without it")

-- the blocking kernel times out (injected): the state is measured again
-- without it, and passes
t.write_file(dir .. "/timeout.lua", [[
local bench = require "cuda.bench"
local cuda = require "cuda"
local measure = require "cuda.bench.measure"
local launch = cuda.launch
cuda.launch = function(s, c, k, ...)
  local r = launch(s, c, k, ...)
  if k == measure.helpers(s.device).block then measure.helpers(s.device).timed_out_view[1] = 1 end
  return r
end
bench.register(function(state) state:exec(function() end) end):set_name("held")
]])
code, out, err = bench(dir .. "/timeout.lua")
t.is(code, 0, "a blocking kernel that timed out: the state still passes" .. err)
t.like(err, "Warn: the blocking kernel timed out after 30 s with no cudalua call waiting", "the timeout is reported")
-- (NVBench's timeout warnings, when the fake is slow, come before the Pass line)
t.like(err, "measured again without it\n[^R]-Pass: Cold:", "the state is measured again, without the blocker")
t.like(out, "## held", "and its row is written")
t.done()
