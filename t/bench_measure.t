-- cuda.bench's measurements against NVBench's semantics, under the fake
-- driver (its events record host time; fakecuda.calls counts the driver
-- calls): the cold sample's order (flush, wait, time), exec{timer}'s
-- flush and waits at timer:start()/stop(), the ci criterion's grouped
-- samples (a flush and an event pair each, one blocker and one wait a
-- group, no stall), sync and run_once and the throttle watch, the batch's
-- min_samples, cpu-only's one warm-up, skip_time and timer, a state whose
-- every sample was throttled, absurd L2 flush sizes, and the interval's
-- summaries.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()
local bench = require "cuda.bench"
local run = require "cuda.bench.run"
local measure = require "cuda.bench.measure"
local output = require "cuda.bench.output"

t.seed()
local dev = cuda.Device(0)

-- Runs one benchmark's states; returns the results' first benchmark, the
-- states' harness objects and the log text.
local function run_one(b, opts)
  local lines = {}
  opts = opts or {}
  opts.log = function(text) lines[#lines + 1] = text end
  opts.l2_bytes = opts.l2_bytes or 4096
  if opts.clock_source == nil then opts.clock_source = false end
  opts.sleep = opts.sleep or function() end
  local results = run.run(run.plan({b}, {}, {dev}), opts)
  return results[1], table.concat(lines)
end
local function calls(name) return fakecuda.calls(name) end
local function by_tag(st)
  local tags = {}
  for _, s in ipairs(st.summaries or {}) do tags[s.tag] = s end
  return tags
end

-- --- the cold sample: the flush is waited for before the CPU clock starts ------------------
do
  local seen, last_memset, last_sync = {}, nil, nil
  local b = bench.register(function(state)
    state:exec(function()
      -- between one sample's stop and the next's start: one flush and one stream wait
      local m, s = calls("cuMemsetD8Async"), calls("cuStreamSynchronize")
      if last_memset then seen[#seen + 1] = {m - last_memset, s - last_sync} end
      last_memset, last_sync = m, s
    end, {batched = false})
  end):set_name("order"):set_stopping_criterion("sample_count", {["sample-count"] = 12})
  local r = run_one(b)
  local ok = #seen >= 11
  for _, d in ipairs(seen) do ok = ok and d[1] == 1 and d[2] == 1 end
  t.ok(ok, ("cold: before each sample one flush and one wait for the stream (%d samples)"):format(#seen))
  t.is(by_tag(r.states[1])["nv/cold/sample_size"].value, 12, "cold: sample_count 12 keeps 12")
end

-- --- exec{timer = true}: the flush and the waits are the timer's ---------------------------------
do
  local now, checks = 0, {}
  local b = bench.register(function(state)
    state:exec(function(_, timer)
      local m0, s0 = calls("cuMemsetD8Async"), calls("cuStreamSynchronize")
      now = now + 1                -- untimed setup
      timer:start()
      local m1, s1 = calls("cuMemsetD8Async"), calls("cuStreamSynchronize")
      now = now + 2                -- the timed region: 2 "seconds" of CPU time
      timer:stop()
      local s2 = calls("cuStreamSynchronize")
      now = now + 1000             -- untimed cleanup, after stop
      checks[#checks + 1] = {m1 - m0, s1 - s0, s2 - s1}
    end, {timer = true})
  end):set_name("timer"):set_stopping_criterion("sample_count", {["sample-count"] = 3}):set_timeout(1e9)
  local r = run_one(b, {clock = function() return now end})
  local ok = #checks >= 3
  for _, c in ipairs(checks) do ok = ok and c[1] == 1 and c[2] == 1 and c[3] == 1 end
  t.ok(ok, "timer: start() flushes and waits (not before fn), stop() waits")
  local st = r.states[1].state
  local cpu_ok = st.cold.n == 10   -- min_samples
  for i = 1, st.cold.n do cpu_ok = cpu_ok and st.cold.cpu[i] == 2 end
  t.ok(cpu_ok, "timer: CPU time runs from timer:start() to timer:stop() (the setup and the cleanup are not in it)")
  t.raises(function()
    local bad = bench.register(function(state) state:exec(function(_, timer) timer:start() end, {timer = true}) end)
      :set_name("half")
    local res = run_one(bad)
    error(res.states[1].error or "no error")
  end, "must call timer:start%(%) and timer:stop%(%)", "timer: a function that does not stop fails its state")
end

-- --- ci: grouped samples ----------------------------------------------------------------
do
  local fn_calls = 0
  local b = bench.register(function(state)
    state:exec(function() fn_calls = fn_calls + 1 end, {batched = false})
  end):set_name("grouped"):set_stopping_criterion("ci", {["max-width"] = 0.5}):set_timeout(5)
  local m0, r0, w0, l0 = calls("cuMemsetD8Async"), calls("cuEventRecord"), calls("cuEventSynchronize"),
    calls("cuLaunchKernel")
  local stalls0 = fakecuda.stalls()
  local r, log = run_one(b)
  local st = r.states[1].state
  local n, group = st.cold.n, st.cold.group
  local timed = fn_calls - 1                       -- the warm-up's call is the first
  local memsets, records = calls("cuMemsetD8Async") - m0, calls("cuEventRecord") - r0
  local waits, launches = calls("cuEventSynchronize") - w0, calls("cuLaunchKernel") - l0
  t.is(group, measure.CI_GROUP, "ci: cold samples come in groups of " .. measure.CI_GROUP)
  t.ok(timed % group == 0 and n <= timed and n > timed - group, ("ci: %d samples kept of %d taken"):format(n, timed))
  t.is(memsets, fn_calls, "ci: an L2 flush before every sample (and the warm-up)")
  t.is(records, 2 * fn_calls, "ci: a pair of events around every sample")
  -- one wait and one blocking kernel per group; the warm-up adds one of each (it loads the blocker, then waits)
  t.is(waits, timed // group + 1, "ci: one wait per group")
  t.is(launches, timed // group + 1, "ci: one blocking kernel per group")
  t.is(fakecuda.stalls() - stalls0, 0, "ci: no stall behind the held stream")
  t.like(log, "Pass: Cold: ", "ci: a Pass line")
  local tags = by_tag(r.states[1])
  local lo, hi = tags["cudalua/cold/time/gpu/mean/ci_lo"], tags["cudalua/cold/time/gpu/mean/ci_hi"]
  local mean, rel = tags["nv/cold/time/gpu/mean"], tags["cudalua/cold/time/gpu/mean/ci_relative"]
  t.ok(lo and hi and lo.value <= mean.value and mean.value <= hi.value, "ci: the interval holds the mean")
  t.ok(rel and rel.hide == nil and rel.name == "CI" and rel.hint == "percentage"
    and math.abs(rel.value - (hi.value - lo.value) / 2 / mean.value) < 1e-9 and rel.value <= 0.5,
    "ci: the CI column: the relative half-width, visible")
  t.ok(lo.hide and hi.hide and tags["cudalua/cold/time/gpu/mean/ci_batches"].value >= 32
    and tags["cudalua/cold/time/gpu/mean/ci_confidence"].value == 0.95, "ci: its ends, batches and confidence, hidden")
  t.ok(tags["cudalua/cold/time/gpu/median/value"] and tags["cudalua/cold/time/gpu/median/ci_lo"],
    "ci: the median and its interval")
  local md = output.results_markdown({r}, {[0] = dev})
  t.like(md, "|%s+CI%s+|", "ci: the markdown has a CI column")
  local doc = require("cuda.json").decode(output.json({r}, {dev}, {"test"}))
  local found
  for _, s in ipairs(doc.benchmarks[1].states[1].summaries) do
    if s.tag == "cudalua/cold/time/gpu/mean/ci_lo" then found = s end
  end
  t.ok(found and found.hide == "Hidden by default." and tonumber(found.data[1].value) == lo.value,
    "ci: the JSON carries the interval's summaries")
  -- under another criterion: the interval made from the samples, hidden; no median
  local criteria = require "cuda.bench.criteria"
  local level = 1e-6 * (1 + math.random())
  local samples = {}
  for i = 1, 500 do samples[i] = level end
  local list = measure.summaries({n = 500, gpu = samples, criterion = criteria.new("stdrel")}, {}, "cold")
  local ptags = {}
  for _, s in ipairs(list) do ptags[s.tag] = s end
  local prel = ptags["cudalua/cold/time/gpu/mean/ci_relative"]
  t.ok(prel and prel.hide and prel.value < 1e-12
    and math.abs(ptags["cudalua/cold/time/gpu/mean/ci_lo"].value - level) < 1e-12 * level
    and not ptags["cudalua/cold/time/gpu/median/value"], "stdrel and others: the interval hidden, no median")
  local ci = criteria.new("ci")
  for i = 1, 500 do ci:add(samples[i]) end
  local cpu_list = measure.summaries({n = 500, cpu = samples, criterion = ci}, {}, "cpu_only")
  t.ok(#cpu_list == 8 and cpu_list[1].tag == "cudalua/cpu_only/time/cpu/mean/ci_lo" and cpu_list[3].hide == nil,
    "cpu-only under ci: the CPU time's interval, visible, and the median")
  t.is(#measure.summaries({n = 100, gpu = samples, criterion = criteria.new("stdrel")}, {}, "cold"), 0,
    "under 128 samples: no interval, no summaries")
  local plain = bench.register(function(state) state:exec(function() end, {batched = false}) end)
    :set_name("plain"):set_stopping_criterion("sample_count", {["sample-count"] = 20})
  local pr = run_one(plain)
  t.ok(not output.results_markdown({pr}, {[0] = dev}):find("|%s+CI%s+|"), "stdrel and others: no CI column")
  t.is(pr.states[1].state.cold.group, 1, "sample_count: NVBench's single samples")
end

-- --- sync, run_once and the throttle watch -------------------------------------------------
local function low_clock()
  local reads = 0
  return {name = "test", max = 2000, read = function() reads = reads + 1; return 1000 end}, function() return reads end
end
do
  local source, reads = low_clock()
  local b = bench.register(function(state) state:exec(function() end, {sync = true}) end)
    :set_name("synced"):set_stopping_criterion("sample_count", {["sample-count"] = 12})
  local r, log = run_one(b, {clock_source = function() return source end})
  local st = r.states[1].state
  t.ok(st.cold.n == 12 and st.cold.discarded == 0 and reads() >= 12,
    ("sync: the clock is read (%d times) but no sample is discarded"):format(reads()))
  t.ok(st.cold.mean_clock == 1000 and not log:find("throttled"), "sync: the mean clock kept, no throttle warning")
  local source2, reads2 = low_clock()
  local once = bench.register(function(state) state:exec(function() end) end):set_name("once"):set_run_once(true)
  local r2 = run_one(once, {clock_source = function() return source2 end})
  t.ok(r2.states[1].state.cold.n == 1 and reads2() == 0, "run_once: one sample, no throttle watch")
end

-- --- every sample throttled: no measurement ------------------------------------------------
do
  local source = low_clock()
  local b = bench.register(function(state) state:exec(function() end) end)
    :set_name("hot"):set_timeout(0.05):set_throttle_recovery_delay(0)
  local r, log = run_one(b, {clock_source = function() return source end})
  local rec = r.states[1]
  local tags = by_tag(rec)
  t.ok(rec.state.cold.no_samples and not rec.is_skipped and not rec.error, "all throttled: not a measurement, not a failure")
  t.like(log, "Warn: Cold: no accepted samples recorded in %d+%.%d%ds walltime%.", "all throttled: NVBench's warning")
  t.ok(not log:find("Pass: Cold"), "all throttled: no Pass line for the cold measurement")
  t.ok((not tags["nv/cold/sample_size"] or tags["nv/cold/sample_size"].value == 0) and not tags["nv/cold/time/gpu/mean"]
    and not tags["cudalua/cold/time/gpu/mean/ci_lo"], "all throttled: no cold time summaries (0 samples)")
  t.like(log, "Warn: GPU throttled below threshold %(1000%.00 MHz / 2000%.00 MHz%) %(50%% < 75%%%) on sample 0%.",
    "all throttled: a Warn line per discard")
  t.ok(tags["nv/batch/sample_size"], "all throttled: the batch still runs")
  local md = output.results_markdown({r}, {[0] = dev})
  t.ok(not md:find("nan"), "all throttled: no nan in the markdown")
end

-- --- the batch takes at least the cold sample count -----------------------------------------
do
  local b = bench.register(function(state) state:exec(function() end) end)
    :set_name("hotmin"):set_stopping_criterion("sample_count", {["sample-count"] = 60}):set_batch_target_time(1e-9)
  local r = run_one(b)
  local st = r.states[1].state
  t.ok(st.cold.n == 60 and st.batch.n >= 60, ("batch: min_samples raised to the cold count (%d launches)"):format(st.batch.n))
end

-- --- cpu-only: one warm-up, skip_time, timer ---------------------------------------------------
do
  local n_calls = 0
  local b = bench.register(function(state) state:exec(function() n_calls = n_calls + 1 end) end)
    :set_name("cpu"):set_is_cpu_only(true):set_cold_warmup_runs(5)
    :set_stopping_criterion("sample_count", {["sample-count"] = 9})
  local r = run_one(b)
  t.is(n_calls, 1 + r.states[1].state.cpu_only.n, "cpu-only: one warm-up call (whatever cold_warmup_runs)")
  local slow = bench.register(function(state) state:exec(function() end) end)
    :set_name("cpuskip"):set_is_cpu_only(true):set_skip_time(1e6)
  local rs = run_one(slow)
  t.ok(rs.states[1].is_skipped, "cpu-only: a warm-up under skip_time skips the state")
  t.like(rs.states[1].skip_reason or "", "^Warmup time did not meet skip_time limit: %d+%.%d%d%dus < 1000000000000%.000us%.$",
    "cpu-only: NVBench's reason")
  local now = 0
  local timed = bench.register(function(state)
    state:exec(function(_, timer)
      now = now + 5
      timer:start(); now = now + 3; timer:stop()
      now = now + 7
    end, {timer = true})
  end):set_name("cputimer"):set_is_cpu_only(true):set_stopping_criterion("sample_count", {["sample-count"] = 14})
    :set_timeout(1e9)
  local rt = run_one(timed, {clock = function() return now end})
  local c = rt.states[1].state and rt.states[1].state.cpu_only
  local ok = c and c.n == 14
  for i = 1, c and c.n or 0 do ok = ok and c.cpu[i] == 3 end
  t.ok(ok, "cpu-only: exec{timer = true} gives fn a CPU timer; the samples are its brackets"
    .. tostring(rt.states[1].error or ""))
  local gskip = bench.register(function(state) state:exec(function() end) end):set_name("gskip"):set_skip_time(1e6)
  local rg = run_one(gskip)
  t.like(rg.states[1].skip_reason or "", "^Warmup time did not meet skip_time limit: ", "cold: NVBench's skip reason")
end

-- --- absurd L2 flush sizes ----------------------------------------------------------------------
for _, case in ipairs{{1e30, nil}, {4096, 1e300}, {2 ^ 53, 1}, {1 / 0, 1}} do
  local ok, err = pcall(measure.l2_flush_bytes, case[1], case[2], 1024)
  t.ok(not ok and tostring(err):find("too large to allocate") and not tostring(err):find("integer representation"),
    ("l2 flush: %g x %g bytes is refused by name (%s)"):format(case[2] or 2, case[1], tostring(err)))
end
for _, case in ipairs{{0 / 0, 1}, {-5, 1}, {4096, 0}, {0, 2}} do
  t.is(measure.l2_flush_bytes(case[1], case[2], 1024), nil, ("l2 flush: %g x %g bytes is no flush"):format(case[2], case[1]))
end
t.is(measure.l2_flush_bytes(nil, nil, 1000), 2000, "l2 flush: twice the device's L2 by default")
t.is(math.type(measure.l2_flush_bytes(1000.5, 1.5, 0)), "integer", "l2 flush: a whole number of bytes")
do
  local b = bench.register(function(state) state:exec(function() end) end):set_name("hugeflush")
  local r = run_one(b, {l2_bytes = 1e30})
  t.like(r.states[1].error or "", "L2 flush buffer .* too large to allocate", "l2 flush: the state fails naming the setting")
end

-- --- the ci criterion from the command line --------------------------------------------------
do
  local dir = t.tmpdir()
  t.write_file(dir .. "/b.lua", [[
local bench = require "cuda.bench"
bench.register(function(state) state:exec(function() end, {batched = false}) end):set_name("e")
]])
  local cmd = ("cd '%s' && %s %s bench b.lua -q --timeout 5 "):format(dir, fake.env("CUDALUA_BENCH_L2_BYTES=4096"),
    t.cudalua())
  local code, _, err = t.run(cmd .. "--stopping-criterion ci --max-width 50 --confidence 90 --json out.json")
  local doc = require("cuda.json").decode(t.read_file(dir .. "/out.json") or "{}")
  local conf
  for _, s in ipairs(doc.benchmarks and doc.benchmarks[1].states[1].summaries or {}) do
    if s.tag == "cudalua/cold/time/gpu/mean/ci_confidence" then conf = tonumber(s.data[1].value) end
  end
  t.ok(code == 0 and conf and math.abs(conf - 0.9) < 1e-12, "cli: --confidence 90 is the interval's 0.9" .. err)
  for _, bad in ipairs{{"--stopping-criterion ci --confidence 100", "%-%-confidence 100: '100' is not a percentage"},
                       {"--stopping-criterion ci --max-width 0", "%-%-max%-width 0: '0' is not a percentage > 0"},
                       {"--max-width 1", "not valid for the active stopping criterion 'stdrel'"}} do
    code, _, err = t.run(cmd .. bad[1])
    t.ok(code == 2 and err:find(bad[2]), ("cli: %s is refused before anything runs: %s"):format(bad[1], err))
  end
end

t.done()
