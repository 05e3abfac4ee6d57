-- Graph memory on a GPU (issue 27): an allocation a graph leaves to the
-- program is its buffer's, one launch at a time. The driver's count of
-- graph memory in use (dev.graph_mem_used), once the graphs are closed and
-- the device's graph memory trimmed, shows that no launch leaks: an
-- allocation never freed keeps its memory in use. The fake's checks are in
-- t/graph_memory.t.
local t = require "tap"
local cuda = t.need_gpu()
local dev = cuda.Device(0)
dev:set_current()
t.plan(9)
local s = dev:create_stream()
local N = 1 << 20
local gm = cuda.GraphMemoryResource(dev)
local pinned = cuda.PinnedMemoryResource()
local out = pinned:allocate(N)
local used0 = dev.graph_mem_used
local function used()   -- after the graphs' close: only allocations not freed keep memory
  s:sync()
  collectgarbage(); collectgarbage()
  dev:trim_graph_memory()
  return dev.graph_mem_used
end

local function capture(opts, free_in_graph)
  s:begin_capture()
  local b = gm:allocate(N, s)
  b:fill(cuda.u8(7), s)
  b:copy_to(out, s)
  if free_in_graph then b:close(s) end
  return s:end_capture(opts), b
end

local g, b = capture(nil, false)
out:fill(0)
g:launch(s)
s:sync()
t.is(out:view("uint8")[N], 7, "the graph ran: its memory was filled and copied out")
t.raises(function() g:launch(s) end, "still allocated by its last launch: free it first", "a relaunch before the free is refused")
b:close(s)
t.raises(function() g:launch(s) end, "its buffer is closed", "a relaunch after the free is refused")
g:close()
t.is(used(), used0, "buf:close(s) freed the one launch's memory, and the refused relaunch allocated none")

local ga, ba = capture({auto_free_on_launch = true}, false)
ga:launch(s); ga:launch(s)
ba:close()                                        -- no stream: freed on the launch's stream
t.raises(function() ga:launch(s) end, "its buffer is closed", "auto_free_on_launch: relaunched before the free, not after")
ga:close()
t.is(used(), used0, "close() without a stream after a launch freed it; auto_free_on_launch freed the first")

local gf = capture(nil, true)
for _ = 1, 3 do gf:launch(s) end
s:sync()
t.is(out:view("uint8")[N], 7, "freed in the graph: it runs again and again")
gf:close()
t.is(used(), used0, "and leaves nothing in use")
local g5 = capture(nil, false)
g5:launch(s)
g5:close(); g5 = nil
t.is(used(), used0, "collected with its graph: a launched allocation is freed")
t.done()
