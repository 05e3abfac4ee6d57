-- mpi_buffers.lua DIR SEED: cudalua buffers and views through cuda.mpi, on
-- every rank, in host memory (no GPU needed).
local cuda = require "cuda"
local mpi = require "cuda.mpi"
local check = require "mpi_check"
local dir, seed = arg[1], math.tointeger(arg[2])
local c = check.open(dir, "buffers", mpi.rank)
local me, n = mpi.rank, mpi.size
local host = cuda.HostMemoryResource()
local N = 1000

-- The values rank r sends with a given tag, as a new buffer: the receiver
-- makes the same one to compare with.
local function filled(r, tag, dtype)
  local buf = host:allocate(N * 8)
  buf:view(dtype or "float64"):random(-100, 100, seed * 1000 + r * 10 + (tag or 0))
  return buf
end
local function poisoned()
  local buf = host:allocate(N * 8)
  buf:view("float64"):fill(0 / 0)
  return buf
end
local function same_bytes(a, b)
  return a:view("uint8"):allclose(b:view("uint8"), 0, 0)
end

-- Blocking ring: even ranks send first, odd ranks receive first.
local right, left = (me + 1) % n, (me - 1) % n
local inbox = poisoned()
local function ring_recv()
  local bytes, from, tag = mpi.recv(inbox, left, 7)
  c.ok(bytes == N * 8 and from == left and tag == 7, "recv returns bytes, source, tag",
       ("%s %s %s"):format(bytes, from, tag))
end
if me % 2 == 0 then mpi.send(filled(me, 7), right, 7); ring_recv()
else ring_recv(); mpi.send(filled(me, 7), right, 7) end
c.ok(same_bytes(inbox, filled(left, 7)), "send/recv: the left neighbour's buffer arrived")

-- A view sends its buffer; ANY_SOURCE and a shorter message.
if me == 0 then
  for r = 1, n - 1 do mpi.send(filled(0, r):slice(0, 16 * r):view("int32"), r, r) end
else
  local into = poisoned()
  local bytes, from, tag = mpi.recv(into:view("int32"), mpi.ANY_SOURCE, mpi.ANY_TAG)
  c.ok(bytes == 16 * me and from == 0 and tag == me, "recv of a shorter message from any source",
       ("%s %s %s"):format(bytes, from, tag))
  c.ok(same_bytes(into:slice(0, 16 * me), filled(0, me):slice(0, 16 * me)), "the short message's bytes arrived")
end

mpi.barrier()   -- no later message may match the receive from any source

-- Non-blocking all-to-all. The send buffers are referenced by nothing but
-- their requests: the requests must keep them alive through a collection.
local recvs, sends, boxes = {}, {}, {}
for r = 0, n - 1 do
  if r ~= me then
    boxes[r] = poisoned()
    recvs[r] = mpi.irecv(boxes[r], r, 100 + r)
    sends[#sends + 1] = mpi.isend(filled(me, 100 + me), r, 100 + me)
  end
end
collectgarbage("collect")
collectgarbage("collect")
for r, req in pairs(recvs) do
  local bytes, from, tag = req:wait()
  c.ok(bytes == N * 8 and from == r and tag == 100 + r, "irecv:wait returns bytes, source, tag")
  c.ok(same_bytes(boxes[r], filled(r, 100 + r)), "isend/irecv from rank " .. r .. " arrived")
  local done, again = req:test()
  c.ok(done == true and again == N * 8, "test on a finished request is true, with the status")
  c.ok(tostring(req):find("done"), "a finished request says so")
end
for _, req in ipairs(sends) do
  local done
  repeat done = req:test() until done
  c.ok(done, "isend completes (test)")
end

-- allreduce: float64 sums (to rounding), int32 min and max (exactly),
-- computed here from every rank's inputs.
local function reference(dtype, combine)
  local want = filled(0, 200, dtype):view(dtype)
  for r = 1, n - 1 do combine(want, filled(r, 200, dtype):view(dtype)) end
  return want
end
local sum = filled(me, 200):view("float64")
mpi.allreduce(sum, "sum")
local ok = sum:allclose(reference("float64", function(a, b) a:add(b) end), 1e-12, 1e-9)
c.ok(ok, "allreduce sum of float64 views")
for _, op in ipairs{"min", "max"} do
  local buf = filled(me, 200, "int32")
  mpi.allreduce(buf, op, "int32")
  local want = reference("int32", function(a, b)
    for i = 1, #a do a[i] = math[op](a[i], b[i]) end
  end)
  c.ok(buf:view("int32"):allclose(want, 0, 0), "allreduce " .. op .. " of an int32 buffer")
end
local counts = host:allocate(8)
counts:view("int64")[1] = math.maxinteger // n - me
mpi.allreduce(counts, "sum", "int64")
c.is(counts:view("int64")[1], (math.maxinteger // n) * n - (n - 1) * n // 2, "allreduce sum of int64, exactly")

-- Bad input: argument errors before any MPI call, on every rank.
local closed = host:allocate(64)
local closed_view = closed:view("float32")
closed:close()
local buf = host:allocate(64)
c.raises(function() mpi.send("text", 0) end, "bad argument #1 to 'send' %(cuda.Buffer or cuda.View expected",
         "send: not a buffer")
c.raises(function() mpi.send(closed, 0) end, "cuda.Buffer is closed", "send: a closed buffer")
c.raises(function() mpi.isend(closed_view, 0) end, "closed", "isend: a view of a closed buffer")
c.raises(function() mpi.irecv(closed, 0) end, "cuda.Buffer is closed", "irecv: a closed buffer")
c.raises(function() mpi.recv(buf, n) end, "rank " .. n .. " out of range", "recv: source out of range")
c.raises(function() mpi.send(buf, -1) end, "bad argument #2 to 'send' %(rank %-1 out of range", "send: negative rank")
c.raises(function() mpi.send(buf, 0, -5) end, "bad argument #3 to 'send' %(tag %-5 out of range", "send: negative tag")
c.raises(function() mpi.send(buf, 0, 1.5) end, "number has no integer representation", "send: fractional tag")
c.raises(function() mpi.allreduce(buf, "prod", "float32") end, "invalid option 'prod'", "allreduce: unknown op")
c.raises(function() mpi.allreduce(buf, "sum") end, "dtype expected", "allreduce: a buffer needs a dtype")
c.raises(function() mpi.allreduce(buf, "sum", "complex64") end, "invalid option 'complex64'", "allreduce: unknown dtype")
c.raises(function() mpi.allreduce(buf:view("float64"), "sum", "int32") end, "the view's dtype is float64",
         "allreduce: a dtype that contradicts the view")
c.raises(function() mpi.allreduce(host:allocate(6), "sum", "float32") end, "size 6 is not a multiple of float32's 4 bytes",
         "allreduce: a size that is not whole elements")
c.raises(function() mpi.allreduce({}, "sum", "float32") end, "cuda.Buffer or cuda.View expected", "allreduce: a table")

-- An MPI failure is a Lua error with MPI's message: a message longer than
-- the receive buffer.
if me == 0 then mpi.send(filled(0, 300), 1, 300)
elseif me == 1 then
  c.raises(function() mpi.recv(host:allocate(8), 0, 300) end, "MPI_Recv: .*truncat", "recv: truncation is a Lua error")
end
mpi.barrier()
c.done()
