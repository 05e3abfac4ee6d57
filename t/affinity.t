-- cuda.set_affinity and cuda.get_affinity: pinning the calling thread.
local t = require "tap"
local cuda = require "cuda"

local allowed = cuda.get_affinity()
t.ok(type(allowed) == "table" and #allowed >= 1, "get_affinity lists at least one CPU")
local ascending = true
for i = 2, #allowed do ascending = ascending and allowed[i] > allowed[i - 1] end
t.ok(ascending and math.type(allowed[1]) == "integer", "as ascending integers")

local last = allowed[#allowed]
cuda.set_affinity(last)
local now = cuda.get_affinity()
t.ok(#now == 1 and now[1] == last, "set_affinity(cpu) pins the thread to that CPU")
cuda.set_affinity(allowed)
t.is(#cuda.get_affinity(), #allowed, "set_affinity{...} gives every CPU back")

t.raises(function() cuda.set_affinity(-1) end, "out of range", "a negative CPU is rejected")
t.raises(function() cuda.set_affinity(1 << 20) end, "out of range", "a CPU past CPU_SETSIZE is rejected")
t.raises(function() cuda.set_affinity("zero") end, "CPU number", "a word is rejected")
t.raises(function() cuda.set_affinity({}) end, "empty", "an empty list is rejected")
t.raises(function() cuda.set_affinity({0, "x"}) end, "CPU number", "a list with a word is rejected")
t.raises(function() cuda.set_affinity(last, 2) end, "unexpected argument", "extra arguments are rejected")
-- A CPU this process may not use (past the highest allowed, when there is one).
if last + 1 < 1024 and #allowed == last + 1 then
  t.raises(function() cuda.set_affinity(last + 1) end, "set_affinity: Invalid argument",
    "a CPU the system does not have fails with the system's reason")
else
  t.skip("CPUs are missing from the allowed set", 1)
end
t.is(#cuda.get_affinity(), #allowed, "failed calls leave the affinity as it was")
t.done()
