-- CUDA IPC (src/ipc.c) under the fake driver: plain device allocations,
-- exports that hold their memory, and a second process mapping it.
local t = require "tap"
local fake = require "fake"
local cuda, fakecuda = fake.start()
local cudalua = t.cudalua()

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local host = cuda.HostMemoryResource()
local plain = cuda.DeviceMemoryResource(dev, {pool = false})
t.is(plain.kind, "device", "{pool = false}: a device resource")
t.is(plain.is_pool, false, "{pool = false}: not a pool")
t.raises(function() cuda.DeviceMemoryResource(dev, {pool = 1}) end, "pool", "pool must be a boolean")

-- Plain allocations: cuMemAlloc, freed by cuMemFree.
local before = fakecuda.calls("cuMemAlloc")
local b = plain:allocate(4096)
t.is(fakecuda.calls("cuMemAlloc") - before, 1, "allocate: cuMemAlloc")
t.is(plain.used, 4096, "the resource counts the buffer")
local seed = math.random(1, 1 << 30)
local src = host:allocate(4096)
src:view("uint32"):random(0, 1 << 31, seed)
b:copy_from(src, s)
s:sync()

-- Exports: pool memory is refused, saying why; plain memory gives a handle.
local pooled = dev.memory_resource:allocate(64, s)
local err = t.raises(function() pooled:ipc_export() end, "pool", "pool memory cannot be exported")
t.is(type(err) == "table" and err.name, "CUDA_ERROR_NOT_SUPPORTED", "as a cuda.Error, not supported")
t.raises(function() host:allocate(8):ipc_export() end, "only device memory", "host memory cannot be exported")
local part = b:slice(1024, 1024)
local exp = part:ipc_export()
t.is(#exp.handle, 64, "a 64-byte handle")
t.is(exp.offset, 1024, "the slice's offset in its allocation")
t.is(exp.size, 4096, "the allocation's size")
t.is(exp.buffer_closed, false, "its buffer is open")
t.like(tostring(exp), "cuda.IpcExport%(4096 bytes at offset 1024%)", "tostring")
t.is(exp.pool, false, "plain memory exports as such")

-- A process cannot open its own handle.
t.raises(function() cuda.ipc_open(exp.handle, exp.size) end, "CUDA_ERROR_INVALID_CONTEXT", "own handle refused")
t.raises(function() cuda.ipc_open("short", 8) end, "not a CUDA IPC handle", "a string that is no handle")
t.raises(function() cuda.ipc_open(exp.handle, 0) end, "size", "size 0")
t.raises(function() cuda.ipc_open(exp.handle, -1) end, "size", "negative size")
t.raises(function() cuda.ipc_open(exp.handle, 8, "x") end, "cuda.Device expected", "not a device")

-- Another process maps it and reads what this one wrote: the sum of the
-- slice's words, computed there, against the same sum here.
local function hex(str) return (str:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end
local child = [[
local cuda = require "cuda"
local h = (arg[1]:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end))
local dev = cuda.Device(0)
local s = dev:create_stream()
local mapped = cuda.ipc_open(h, tonumber(arg[2]), dev)
local into = cuda.HostMemoryResource():allocate(1024)
mapped:slice(tonumber(arg[3]), 1024):copy_to(into, s)
s:sync()
local sum = 0
for i = 1, 256 do sum = sum + into:view("uint32")[i] end
mapped:fill(7, s) s:sync()
local mr = mapped.memory_resource
print(sum, mr.used)
mapped:close()
print(mr.used)
local ok, e = pcall(mr.allocate, mr, 8)
print(ok, e)
-- more than the allocation is refused, its mapping closed; less is a prefix
local fakecuda = require "fakecuda"
local allocs = fakecuda.live().allocations
local big_ok, big_err = pcall(cuda.ipc_open, h, tonumber(arg[2]) * 256, dev)
print(big_ok, big_err, fakecuda.live().allocations - allocs)
local prefix = cuda.ipc_open(h, 1000, dev)
print(prefix.size, prefix.memory_resource.used)
prefix:close()
print(fakecuda.live().allocations - allocs)
]]
local path = os.tmpname()
local f = assert(io.open(path, "w"))
f:write(child)
f:close()
local code, out, stderr = t.run(("%s%s %s %s %d %d"):format(fake.env(), cudalua, path, hex(exp.handle), exp.size, exp.offset))
os.remove(path)
t.is(code, 0, "the other process ran " .. (code ~= 0 and stderr or ""))
local want = 0
for i = 257, 512 do want = want + src:view("uint32")[i] end
local lines = {}
for line in out:gmatch("[^\n]+") do lines[#lines + 1] = line end
t.is(lines[1], want .. "\t4096", "it read the exported slice, through a mapping of the whole allocation")
t.is(lines[2], "0", "closing the mapping gives it back")
t.like(lines[3] or "", "^false\t.*allocates nothing", "a mapped resource allocates nothing")
t.like(lines[4] or "", "^false\t.*size 1048576 is past the 4096 bytes the handle maps%)\t0$",
       "a size past the allocation is refused, its mapping closed (issue 27)")
t.is(lines[5], "1000\t1000", "a smaller size is a buffer over the allocation's first bytes")
t.is(lines[6], "0", "closing that prefix unmaps it")
local back = host:allocate(4096)
b:copy_to(back, s)
s:sync()
t.is(back:view("uint8")[1], 7, "its writes landed in this process's memory")

-- The export holds the memory: closing the buffer defers the free to the
-- export's close.
local frees = fakecuda.calls("cuMemFree")
b:close()
t.is(exp.buffer_closed, true, "the export sees its buffer closed")
t.is(fakecuda.calls("cuMemFree") - frees, 0, "closing an exported buffer keeps its memory")
exp:close()
t.is(fakecuda.calls("cuMemFree") - frees, 1, "closing the export frees it")
t.raises(function() return exp.handle end, "closed", "a closed export")
exp:close()
t.like(tostring(exp), "closed", "closing twice is harmless")

-- An export collected while its buffer is open changes nothing.
local c = plain:allocate(64)
local _ = c:ipc_export()
_ = nil
collectgarbage()
collectgarbage()
c:fill(1, s)
s:sync()
c:close()
pooled:close()
t.is(plain.used, 0, "every plain buffer released")

-- Pools made to be shared: exported pointers and the pool's descriptor.
-- (Their import by another process is t/mpi.t's, through cuda.mpi, which
-- carries the descriptor over a Unix socket.)
local shared = cuda.DeviceMemoryResource(dev, {ipc = true})
t.is(shared.ipc, true, "{ipc = true}: a pool made to be shared")
t.is(dev.memory_resource.ipc, false, "the default pool is not")
t.is(shared.is_pool, true, "it is a pool")
local sb = shared:allocate(8192, s)
local sexp = sb:slice(4096, 100):ipc_export()
t.is(sexp.pool, true, "its buffers export as pool memory")
t.is(#sexp.handle, 64, "export data of 64 bytes")
t.is(sexp.offset, 4096, "the slice's offset in its allocation")
t.is(sexp.size, 8192, "the allocation's size")
t.like(tostring(sexp), "cuda.IpcExport%(pool, 8192 bytes at offset 4096%)", "tostring names pool memory")
local h = shared:ipc_pool_handle()
t.is(math.type(h.fd), "integer", "the pool's handle is a file descriptor")
t.like(tostring(h), "cuda.IpcPoolHandle%(fd %d+%)", "tostring of the handle")
local fd = h.fd
h:close()
h:close()
t.like(tostring(h), "closed", "a handle closes, twice harmlessly")
t.raises(function() cuda.ipc_pool_open(fd) end, "invalid argument", "its descriptor is closed with it")
local h2 <close> = shared:ipc_pool_handle()
t.raises(function() cuda.ipc_pool_open(h2.fd) end, "a pool of this process", "this process's own pool is refused")
-- closed during a capture, its destroy waits for the capture's end: the
-- pool is still this process's until then (the fake hands it back itself)
do
  local closing = cuda.DeviceMemoryResource(dev, {ipc = true})
  local ch <close> = closing:ipc_pool_handle()
  local cs = dev:create_stream()
  cs:begin_capture()
  closing:close()
  t.raises(function() cuda.ipc_pool_open(ch.fd) end, "a pool of this process",
           "a shared pool closed during a capture: still refused (its destroy waits)")
  cs:end_capture():close()
  cs:close()
end

-- Another process imports the pool (its descriptor as the child's fd 3,
-- through /proc: the fake's pool handles are files) and a pointer of it:
-- a size past the allocation is refused and the import freed (issue 27).
local pool_child = [[
local cuda, fakecuda = require "cuda", require "fakecuda"
local h = (arg[1]:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end))
local pool = cuda.ipc_pool_open(3, cuda.Device(0))
local allocs = fakecuda.live().allocations
local ok, err = pcall(cuda.ipc_open, h, tonumber(arg[2]) + 1, pool)
print(ok, err, fakecuda.live().allocations - allocs, pool.live_buffers)
local b = cuda.ipc_open(h, 4096, pool)
print(b.size, pool.live_buffers)
b:close()
print(fakecuda.live().allocations - allocs, pool.live_buffers)
pool:close()
]]
local pid = assert(io.open("/proc/self/stat")):read("n")
local ppath = os.tmpname()
local pf = assert(io.open(ppath, "w"))
pf:write(pool_child)
pf:close()
local pcode, pout, perr = t.run(("%s%s %s %s %d 3</proc/%d/fd/%d"):format(fake.env(), cudalua, ppath,
  hex(sexp.handle), sexp.size, pid, h2.fd))
os.remove(ppath)
t.is(pcode, 0, "the importing process ran " .. (pcode ~= 0 and perr or ""))
local plines = {}
for line in pout:gmatch("[^\n]+") do plines[#plines + 1] = line end
t.like(plines[1] or "", "^false\t.*size 8193 is past the 8192 bytes the imported pointer maps%)\t0\t0$",
       "a size past an imported pointer's allocation is refused, the import freed")
t.is(plines[2], "4096\t1", "a smaller size imports a prefix")
t.is(plines[3], "0\t0", "closing it frees the import")
local frees = fakecuda.calls("cuMemFreeAsync") + fakecuda.calls("cuMemFree")
sb:close(s)
t.is(fakecuda.calls("cuMemFreeAsync") + fakecuda.calls("cuMemFree") - frees, 0, "an exported pool buffer keeps its memory")
sexp:close()
t.is(fakecuda.calls("cuMemFreeAsync") + fakecuda.calls("cuMemFree") - frees, 1, "and frees it with its export")
s:sync()
t.is(shared.used, 0, "every shared-pool buffer released")
shared:close()
t.done()
