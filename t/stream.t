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
t.done()
