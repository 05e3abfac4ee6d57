-- CUDA IPC on a GPU (issue 27): another process maps a plain allocation
-- this one exported, and cuda.ipc_open takes the size the driver says it
-- mapped (cuMemGetAddressRange): the allocation's size opens, a byte more
-- is refused with the mapping closed, a smaller size is a prefix. The
-- pool path runs on the GPU in t/mpi.t; the fake's checks are in t/ipc.t.
local t = require "tap"
local cuda = t.need_gpu()
local cudalua = t.cudalua()
local dev = cuda.Device(0)
dev:set_current()
t.plan(5)
local s = dev:create_stream()
local SIZE = 4096
local plain = cuda.DeviceMemoryResource(dev, {pool = false})
local b = plain:allocate(SIZE)
local seed = t.seed()
local host = cuda.PinnedMemoryResource():allocate(SIZE)
host:view("uint32"):random(0, 1 << 31, seed)
b:copy_from(host, s)
s:sync()
local exp = b:ipc_export()
t.is(exp.size >= SIZE, true, "the export's allocation size covers the buffer")
local child = [[
local cuda = require "cuda"
local h = (arg[1]:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end))
local size = tonumber(arg[2])
local dev = cuda.Device(0)
local s = dev:create_stream()
local whole = cuda.ipc_open(h, size, dev)
local back = cuda.PinnedMemoryResource():allocate(size)
whole:copy_to(back, s) s:sync()
local sum = 0
for i = 1, size // 4 do sum = sum + back:view("uint32")[i] end
whole:close()
local ok, err = pcall(cuda.ipc_open, h, size + 1, dev)
local prefix = cuda.ipc_open(h, 1000, dev)
print(sum, ok, err, prefix.size)
prefix:close()
local again = cuda.ipc_open(h, size, dev)   -- the refused open closed its mapping: this one maps anew
again:close()
print("reopened")
]]
local path = os.tmpname()
t.write_file(path, child)
local hex = exp.handle:gsub(".", function(c) return ("%02x"):format(c:byte()) end)
local code, out, err = t.run(("%s %s %s %d"):format(cudalua, path, hex, exp.size))
os.remove(path)
t.is(code, 0, "the other process ran " .. (code ~= 0 and err or ""))
local want = 0
for i = 1, SIZE // 4 do want = want + host:view("uint32")[i] end
local sum, ok, msg, psize = out:match("^(%d+)\t(%a+)\t([^\t]*)\t(%d+)\n")
t.is(sum and tonumber(sum), exp.size == SIZE and want or tonumber(sum), "it read the whole allocation")
t.like(ok == "false" and msg or "", "size " .. exp.size + 1 .. " is past the " .. exp.size .. " bytes the handle maps",
       "a byte past the allocation is refused, as the driver's range says")
t.ok(psize == "1000" and out:find("\nreopened\n") ~= nil, "a smaller size is a prefix, and the mapping reopens")
exp:close()
b:close()
t.done()
