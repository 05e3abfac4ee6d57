-- The no-driver path: forced with CUDALUA_LIBCUDA=/nonexistent, so it runs
-- on every machine, GPU or not.
local t = require "tap"
local cudalua = t.cudalua()
local nodrv = "CUDALUA_LIBCUDA=/nonexistent " .. cudalua

t.plan(17)

local code, out, err = t.run(nodrv .. " -e 'print(require(\"cuda\").device_count())'")
t.is(code, 0, "device_count works without a driver")
t.is(out, "0\n", "device_count is 0 without a driver")

code, out = t.run(nodrv .. " -e 'print(require(\"cuda\").is_available())'")
t.like(out, "^false\tno NVIDIA driver found: /nonexistent", "is_available: false, reason")

code, out = t.run(nodrv .. " -e 'print(require(\"cuda\").driver_version())'")
t.like(out, "^nil\tno NVIDIA driver found", "driver_version: nil, reason")

code, out, err = t.run(nodrv .. " -e 'require(\"cuda\").Device(0)'")
t.is(code, 2, "needing a device without a driver: exit 2")
t.like(err, "^cudalua: no NVIDIA driver found: /nonexistent: cannot open shared object file",
       "one sentence naming the missing driver")
t.ok(not err:find("traceback"), "no traceback")
t.is(select(2, err:gsub("\n", "")), 1, "exactly one line")

code, out, err = t.run(nodrv .. " device_query")
t.is(code, 2, "device_query without a driver: exit 2")
t.like(err, "no NVIDIA driver found", "device_query names the missing driver")

code, out = t.run(nodrv .. " --version")
t.like(out, "no NVIDIA driver found", "--version says there is no driver")

-- the error object, seen from Lua
code, out = t.run(nodrv .. [[ -e '
  local cuda = require "cuda"
  local ok, e = pcall(cuda.Device, 0)
  print(getmetatable(e) == cuda.Error, e.unavailable, e.name, tostring(e) == e.message)']])
t.is(out, "true\ttrue\tCUDALUA_UNAVAILABLE\ttrue\n", "cuda.Error fields for the no-driver error")

-- argument errors come before any CUDA call
code, out = t.run(nodrv .. [[ -e '
  local cuda = require "cuda"
  print(select(2, pcall(cuda.Device, -1)))
  print(select(2, pcall(cuda.Device, "x")))
  print(select(2, pcall(cuda.Device, 1.5)))']])
local l1, l2, l3 = out:match("([^\n]*)\n([^\n]*)\n([^\n]*)")
t.like(l1, "bad argument #1 to '[%w.]*Device' %(device id must be >= 0%)", "Device(-1)")
t.like(l2, "bad argument #1 to '[%w.]*Device' %(number expected, got string%)", "Device('x')")
t.like(l3, "bad argument #1 to '[%w.]*Device' %(number has no integer representation%)", "Device(1.5)")

-- stock Lua loads the built module
local lua = os.getenv("LUA")
local so = (os.getenv("CUDALUA_BUILDDIR") or ".") .. "/src/.libs/?.so"
if lua and lua ~= "" and (os.getenv("CUDALUA_SANITIZERS") or "") == "" then
  code, out = t.run(("LUA_CPATH='%s' CUDALUA_LIBCUDA=/nonexistent %s -e 'local c = require \"cuda\"; print(c.version, c.device_count())'"):format(so, lua))
  t.is(code, 0, "stock lua5.4 requires the built cuda module")
  t.like(out, "^%d+%.%d+%.%d+\t0\n$", "and it works there")
else
  t.skip("no stock Lua interpreter, or a sanitizer build", 2)
end

t.done()
