-- Streams and events: options, record/wait, timing, closed handles, bad input.
local t = require "tap"
local cuda = t.need_gpu()
local dev = cuda.Device(0)
dev:set_current()

local s = dev:create_stream()
t.like(tostring(s), "^cuda%.Stream%(.*non%-blocking", "default stream is non-blocking")
t.is(s.non_blocking, true, "non_blocking field")
t.ok(rawequal(s.device, dev), "stream.device")
t.ok(math.type(s.handle) == "integer" and s.handle ~= 0, "stream.handle")
local blocking = dev:create_stream{non_blocking = false}
t.is(blocking.non_blocking, false, "non_blocking = false")
local hi = dev:create_stream{priority = -1000}
local lo = dev:create_stream{priority = 1000}
t.ok(hi.priority <= lo.priority, "priorities are clamped to the device's range")
t.ok(hi.priority >= -1000 and lo.priority <= 1000, "clamped inside the asked range")

t.raises(function() dev:create_stream{priority = "high"} end, "field 'priority' must be an integer, got string", "priority = 'high'")
t.raises(function() dev:create_stream{non_blockin = true} end, "unknown option 'non_blockin'", "misspelled option")
t.raises(function() dev:create_stream(5) end, "table expected", "options must be a table")
t.raises(function() s.sync(dev) end, "cuda%.Stream expected, got cuda%.Device", "wrong self")

-- events and timing
local e1, e2 = dev:create_event{timing = true}, dev:create_event{timing = true}
t.is(e1.timing, true, "timing event")
t.raises(function() return e2 - e1 end, "never recorded", "unrecorded events cannot be subtracted")
s:record(e1)
local mr = cuda.PinnedMemoryResource()
local big = dev.memory_resource:allocate(64 * 2^20, s)
big:fill(1, s)
t.is(s:record(e2), e2, "record returns the event")
e2:sync()
t.is(e2.is_done, true, "is_done after sync")
local ms = e2 - e1
t.ok(type(ms) == "number" and ms > 0 and ms < 1000, "elapsed ms is positive: " .. ms)
local ev = s:record()
t.is(ev.timing, true, "record() creates a timing event")
local plain = dev:create_event()
s:record(plain)
t.raises(function() return plain - e1 end, "timing = false", "non-timing event cannot be subtracted")

-- wait: on an event and on a stream
local s2 = dev:create_stream()
s2:wait(e2)
s2:wait(s)
s2:sync()
t.ok(s2.is_done, "stream is done after sync")
t.raises(function() s2:wait(5) end, "cuda%.Event or cuda%.Stream expected", "wait on a number")

-- closed handles
local dead = dev:create_stream()
dead:close()
dead:close()
t.like(tostring(dead), "closed", "closed stream prints as closed")
t.raises(function() dead:sync() end, "cuda%.Stream is closed", "method of a closed stream")
t.raises(function() dead:record(e1) end, "cuda%.Stream is closed", "record on a closed stream")
t.raises(function() s:wait(dead) end, "cuda%.Stream is closed", "wait on a closed stream")
local deadev = dev:create_event{timing = true}
deadev:close()
t.raises(function() deadev:sync() end, "cuda%.Event is closed", "method of a closed event")
t.raises(function() return e2 - deadev end, "cuda%.Event is closed", "subtracting a closed event")
do
  local scoped <close> = dev:create_stream()
  scoped:sync()
end
big:close(s)
s:sync()

-- record with options makes the event as create_event would (cuda.core's record(options=))
local untimed = s:record{timing = false}
t.is(untimed.timing, false, "record{timing = false} makes an event without timing")
local timed = s:record(nil, {timing = true, blocking_sync = true})
t.is(timed.timing, true, "record(nil, {timing = true, ...}) makes a timing event")
t.is(s:record{}.timing, false, "record{} takes create_event's defaults")
timed:sync()
t.is(timed.is_done, true, "a blocking_sync event completes")
t.raises(function() s:record{timng = true} end, "unknown option 'timng'", "record: unknown option")
t.raises(function() s:record{timing = 1} end, "field 'timing' must be a boolean", "record: timing = 1")
t.raises(function() s:record(5) end, "cuda%.Event or an option table expected", "record(5)")
t.raises(function() s:record(deadev) end, "cuda%.Event is closed", "record a closed event")
local closing = dev:create_stream()
local sneaky = setmetatable({}, {__index = function() closing:close() end})
t.raises(function() closing:record(sneaky) end, "cuda%.Stream is closed",
         "an option table that closes the stream")

-- is_done on an event that is still pending, priority, wait on a stream
local spin = cuda.Program([[
extern "C" __global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
}]], "c++", {arch = "sm_" .. dev.arch}):compile("cubin"):get_kernel("spin")
local one = cuda.LaunchConfig{grid = 1, block = 1}
local slow, follower = dev:create_stream(), dev:create_stream()
cuda.launch(slow, one, spin, cuda.i64(dev.properties.clock_rate * 200))   -- about 200 ms
local pending = slow:record()
t.is(pending.is_done, false, "event.is_done is false while the kernel runs")
follower:wait(slow)
local after = follower:record()
t.is(after.is_done, false, "a stream that waits on a busy stream is not done")
after:sync()
t.is(pending.is_done, true, "the waited-on stream's work completed first")
t.ok(after - pending >= 0, "the follower's event comes after the waited-on work")
t.is(math.type(follower.priority), "integer", "stream.priority")

-- the hot paths allocate nothing: s:record(ev), record(s, ev) with the method in a local, s:wait(ev)
do
  local stream, marker, record = s, dev:create_event{timing = false}, s.record
  stream:record(marker); record(stream, marker); stream:wait(marker)
  collectgarbage()
  collectgarbage("stop")
  local before = collectgarbage("count")
  for _ = 1, 100 do stream:record(marker); record(stream, marker); stream:wait(marker) end
  local grew = collectgarbage("count") - before
  collectgarbage("restart")
  t.is(grew, 0, "300 records and waits allocate no Lua memory")
end
-- record returns its event alone, whatever follows it; its self is checked whatever the event
local extra = {}
for i = 1, math.random(1, 6) do extra[i] = math.random(2) == 1 and i or dev end
local got = table.pack(s:record(e1, table.unpack(extra)))
t.ok(got.n == 1 and rawequal(got[1], e1), ("record(ev, ...) with %d more arguments returns the event alone"):format(#extra))
t.raises(function() s.record(e1, e1) end, "cuda%.Stream expected, got cuda%.Event", "record: self an event")
t.raises(function() s.record(nil, e1) end, "cuda%.Stream expected, got nil", "record: self nil")
t.raises(function() s.record() end, "cuda%.Stream expected, got no value", "record: no self")
t.raises(function() dead:record(e1, 1, 2) end, "cuda%.Stream is closed", "record on a closed stream, more arguments")
t.done()
