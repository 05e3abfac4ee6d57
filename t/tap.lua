-- tap.lua: a small TAP producer for the cudalua test suite.
local M = {}

local planned, count, failed = nil, 0, 0

local function out(...) io.stdout:write(...) io.stdout:write("\n") end

local function diag(msg)
  for line in tostring(msg):gmatch("[^\n]+") do out("# ", line) end
end
M.diag = diag

function M.plan(n) planned = n; out("1..", n) end

function M.skip_all(reason)
  out("1..0 # SKIP ", reason)
  os.exit(0)
end

function M.ok(cond, name)
  count = count + 1
  if not cond then failed = failed + 1 end
  out(cond and "ok " or "not ok ", count, " - ", name or "")
  if not cond then diag(debug.traceback("  failed here", 2)) end
  return cond
end

function M.is(got, want, name)
  local pass = got == want
  M.ok(pass, name)
  if not pass then diag(("  got:  %s\n  want: %s"):format(tostring(got), tostring(want))) end
  return pass
end

function M.isnt(got, unwanted, name)
  local pass = got ~= unwanted
  M.ok(pass, name)
  if not pass then diag(("  got unwanted: %s"):format(tostring(got))) end
  return pass
end

function M.like(got, pattern, name)
  local pass = type(got) == "string" and got:find(pattern) ~= nil
  M.ok(pass, name)
  if not pass then diag(("  got:     %s\n  pattern: %s"):format(tostring(got), pattern)) end
  return pass
end

-- Close to within a relative or absolute tolerance.
function M.near(got, want, tol, name)
  local pass = type(got) == "number" and math.abs(got - want) <= tol * math.max(1, math.abs(want))
  M.ok(pass, name)
  if not pass then diag(("  got: %s  want: %s  tol: %s"):format(tostring(got), tostring(want), tol)) end
  return pass
end

-- f must raise an error whose text matches pattern; returns the error.
function M.raises(f, pattern, name)
  local ok, err = pcall(f)
  local text = not ok and tostring(err) or "(no error)"
  M.ok(not ok and text:find(pattern) ~= nil, name)
  if ok or not text:find(pattern) then diag(("  error:   %s\n  pattern: %s"):format(text, pattern)) end
  return err
end

-- A failing check whose cause is known and not yet fixed: TAP's TODO, which
-- does not fail the file (emit it only when the check fails: a passing TODO
-- is an unexpected pass, which automake counts as a failure).
function M.todo(name, reason)
  count = count + 1
  out("not ok ", count, " - ", name or "", " # TODO ", reason)
end

function M.skip(reason, n)
  for _ = 1, n or 1 do
    count = count + 1
    out("ok ", count, " # SKIP ", reason)
  end
end

function M.done()
  if not planned then out("1..", count) end
  if planned and planned ~= count then diag(("planned %d tests but ran %d"):format(planned, count)) end
  os.exit(failed == 0 and (not planned or planned == count), true)
end

-- Skip the whole file unless a CUDA device is usable.
function M.need_gpu()
  local cuda = require "cuda"
  local ok, why = cuda.is_available()
  if not ok then M.skip_all("no CUDA device (" .. tostring(why) .. ")") end
  return cuda
end

-- Run a shell command; returns its exit code, stdout and stderr.
function M.run(cmd)
  local errf = os.tmpname()
  local p = io.popen(cmd .. " 2>" .. errf, "r")
  local stdout = p:read("a")
  local _, _, code = p:close()
  local f = io.open(errf, "r")
  local stderr = f and f:read("a") or ""
  if f then f:close() end
  os.remove(errf)
  return code, stdout, stderr
end

-- Files for tests: a fresh temporary folder, whole-file reads (nil for a
-- missing file) and writes, and a folder's sorted entries.
-- A time limit in seconds for a child command, scaled by
-- CUDALUA_TEST_TIME_SCALE (make check-gcstress makes everything slower).
function M.time_limit(seconds)
  return math.ceil(seconds * (tonumber(os.getenv("CUDALUA_TEST_TIME_SCALE")) or 1))
end

function M.tmpdir()
  local p = assert(io.popen("mktemp -d"))
  local dir = p:read("l")
  p:close()
  return assert(dir, "mktemp -d failed")
end

function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read("a")
  f:close()
  return data
end

function M.write_file(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

function M.ls(dir)
  local names = {}
  local p = io.popen("ls -A '" .. dir .. "' 2>/dev/null")
  for name in p:lines() do names[#names + 1] = name end
  p:close()
  table.sort(names)
  return names
end

-- The built interpreter, quoted for the shell.
function M.cudalua()
  return ("'%s/src/cudalua'"):format(os.getenv("CUDALUA_BUILDDIR") or ".")
end

-- A fresh seed for random test data, printed so a failure can be replayed.
function M.seed()
  local s = tonumber(os.getenv("CUDALUA_TEST_SEED")) or (os.time() ~ math.floor(os.clock() * 1e6))
  diag("seed " .. s .. " (set CUDALUA_TEST_SEED to replay)")
  math.randomseed(s)
  return s
end

return M
