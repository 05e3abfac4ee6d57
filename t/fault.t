-- Kernel faults: a kernel that writes out of bounds loses the context for
-- good (cuda.h: "any further CUDA work will return the same error"). That
-- gives one clear error that says so, exit status 1 and no hang; later calls
-- raise instead of crashing; closing and finalizing afterwards neither
-- crashes nor hangs. Each case runs in a child cudalua, since a fault ruins
-- its process, bounded by `timeout 60` (exit 124 if it hangs).
local t = require "tap"
t.need_gpu()
local cudalua = t.cudalua()

t.plan(17)

-- Every child starts with this. oob writes at address 16: the index is
-- (16 - ptr) / 4. A write just far past the end of the buffer could land in
-- other memory (with HMM, even in the host's); the lowest page is mapped
-- nowhere. trap stops the kernel with a trap instruction.
local PRELUDE = [[
local cuda = require "cuda"
local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local SOURCE = 'extern "C" __global__ void oob(int *p, long long i) { p[i] = 1; }\n'
  .. 'extern "C" __global__ void trap(int *p) { p[0] = 1; __trap(); }\n'
local obj = cuda.Program(SOURCE, "c++", {arch = "sm_" .. dev.arch}):compile("cubin")
local one = cuda.LaunchConfig{grid = 1, block = 1}
local buf <close> = dev.memory_resource:allocate(256, s)
local host <close> = cuda.PinnedMemoryResource():allocate(256)
local function oob()
  cuda.launch(s, one, obj:get_kernel("oob"), buf, cuda.i64((16 - buf.ptr) // 4))
  s:sync()
end
local function trap()
  cuda.launch(s, one, obj:get_kernel("trap"), buf)
  s:sync()
end
]]

local function shell_quote(text)
  return "'" .. text:gsub("'", [['\'']]) .. "'"
end

-- Runs PRELUDE .. body in a child: exit status, stdout, stderr, seconds.
local function child(body)
  local started = os.time()
  local code, out, err = t.run("timeout 60 " .. cudalua .. " -e " .. shell_quote(PRELUDE .. body))
  return code, out, err, os.time() - started
end

local function count(text, plain)
  return select(2, text:gsub(plain:gsub("%p", "%%%0"), ""))
end

local LOST = "the context is lost: restart the process"

-- uncaught: one error, exit 1, no hang; the <close> buffers are released
-- during the unwinding, the stream and context by the finalizers at exit
local code, out, err, seconds = child("oob()")
t.is(code, 1, "out-of-bounds write: exit 1 (not a crash, not a hang)")
t.like(err, "^cudalua: cu%w+: CUDA_ERROR_ILLEGAL_ADDRESS %(", "the error names CUDA_ERROR_ILLEGAL_ADDRESS")
t.ok(err:find(LOST, 1, true), "the error says the context is lost and to restart")
t.is(count(err, "CUDA_ERROR_"), 1, "one error, reported once")
t.ok(not err:find("Segmentation") and not err:find("Aborted"), "no crash while closing")
t.ok(seconds < 60, "done in " .. seconds .. " s")

-- caught: later calls raise the same error (never crash, never hang), and
-- closing explicitly and at exit is quiet
code, out, err = child([[
local ok, e = pcall(oob)
print("fault", ok, e.name, e.context_lost)
local later = {
  sync = function() s:sync() end,
  device_sync = function() dev:sync() end,
  launch = function() oob() end,
  fill = function() buf:fill(0, s); s:sync() end,
  copy = function() buf:copy_to(host, s); s:sync() end,
}
for _, name in ipairs{"sync", "device_sync", "launch", "fill", "copy"} do
  local ok, e = pcall(later[name])
  print(name, ok, type(e) == "table" and e.name, type(e) == "table" and e.context_lost,
        tostring(e):find("]] .. LOST .. [[", 1, true) ~= nil)
end
buf:close()
host:close()
s:close()
print("closed")
]])
t.is(code, 0, "after a caught fault: the script ends normally, exit 0")
t.like(out, "^fault\tfalse\tCUDA_ERROR_ILLEGAL_ADDRESS\ttrue\n", "the caught error: name and context_lost")
for _, name in ipairs{"sync", "device_sync", "launch", "fill", "copy"} do
  t.like(out, "\n" .. name .. "\tfalse\tCUDA_ERROR_ILLEGAL_ADDRESS\ttrue\ttrue\n",
    "later " .. name .. " raises the same error, saying the context is lost")
end
t.like(out, "\nclosed\n$", "closing buffers and streams after the fault raises nothing")
t.is(err, "", "and nothing on stderr, at exit either")

-- a trap: another error of the same kind (the launch failed, for good)
code, out, err = child("trap()")
t.is(code, 1, "a trapping kernel: exit 1")
t.like(err, "^cudalua: cu%w+: CUDA_ERROR_[%u_]+ %([^\n]*" .. LOST:gsub("%p", "%%%0") .. "%)",
  "a trap loses the context too, and says so")
t.done()
