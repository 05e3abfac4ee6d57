-- fake.lua: run a test file under the fake CUDA driver (t/fake/fake.h).
--
-- cudalua opens the driver once per process, at its first use, from
-- CUDALUA_LIBCUDA. So a test that wants the fake re-executes itself with
-- CUDALUA_LIBCUDA set to the fake's .so (make check names it in
-- CUDALUA_FAKE_LIBCUDA) and LUA_CPATH finding the same .so as the Lua module
-- "fakecuda": dlopen of one path gives one handle, so the module sees and
-- steers the very driver cudalua calls. The parent only passes its child's
-- output (TAP) and exit status through; real-GPU tests never see the fake.
local t = require "tap"
local M = {}

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Environment assignments that put a command under the fake driver (and
-- the fake NVML in the same .so, t/fake/nvml.c).
function M.env(extra)
  local so = os.getenv("CUDALUA_FAKE_LIBCUDA")
  return ("CUDALUA_LIBCUDA=%s CUDALUA_LIBNVML=%s LUA_CPATH=%s %s"):format(quote(so), quote(so),
    quote(so:gsub("[^/]*$", "?.so") .. ";;"), extra or "")
end

-- In the parent: run this file again under the fake and exit as it does.
-- In the child: return the cuda and fakecuda modules. extra: more
-- environment assignments for the child ("FAKECUDA_DEVICES=2 ").
function M.start(extra)
  local so = os.getenv("CUDALUA_FAKE_LIBCUDA")
  if not so or not io.open(so) then t.skip_all("no fake driver (CUDALUA_FAKE_LIBCUDA: run by make check)") end
  if os.getenv("CUDALUA_LIBCUDA") ~= so then
    local _, _, code = os.execute(M.env(extra) .. t.cudalua() .. " " .. quote(arg[0]))
    os.exit(code)
  end
  return require "cuda", require "fakecuda"
end

-- The sum of fakecuda.live()'s counts after a full collection.
function M.live(fakecuda)
  collectgarbage()
  collectgarbage()
  return select(2, fakecuda.live())
end

return M
