-- LUA_INIT for `make check-gcstress`: every allocation completes a garbage
-- collection cycle, so any finalizer runs at (nearly) any allocation, as
-- Lua's own test suite does with HARDMEMTESTS.
-- SPDX-License-Identifier: MIT
--
-- The system Lua's collector is tuned rather than a Lua built with ltests:
-- a pause of 0 makes every cycle end with a zero debt, so the next
-- allocation's GC check runs a step, and a step size of 2^40 bytes makes
-- that one step a whole cycle (marking, sweeping, calling the finalizers).
-- A finalizer that re-arms itself counts the cycles, and where each ran:
-- inside a C function of the cuda module (the case HACKING.md's rule is
-- about), inside another C function, or in Lua code. At exit the counts
-- are appended to $CUDALUA_GC_STRESS_LOG, one line a process.
collectgarbage("incremental", 0, 1000, 40)
collectgarbage("setpause", 0)       -- "incremental" reads a pause of 0 as "unchanged"

local counts = {}                   -- function running when a cycle ended -> cycles
local cycles = 0

local function arm()
  setmetatable({}, {__gc = function()
    cycles = cycles + 1
    local info = debug.getinfo(2, "f")
    local f = info and info.func or "none"
    counts[f] = (counts[f] or 0) + 1
    arm()
  end})
end
arm()

-- Every C function reachable from the cuda modules and the cuda.* metatables
-- (through tables and upvalues): the functions whose middle HACKING.md means.
local function cuda_functions()
  local seen, found = {}, {}
  local function walk(v)
    if seen[v] then return end
    local kind = type(v)
    if kind ~= "table" and kind ~= "function" then return end
    seen[v] = true
    if kind == "table" then
      for k, x in next, v do walk(k); walk(x) end
      walk(debug.getmetatable(v))
    else
      if debug.getinfo(v, "S").what == "C" then found[v] = true end
      for i = 1, 255 do
        local name, x = debug.getupvalue(v, i)
        if name == nil then break end
        walk(x)
      end
    end
  end
  for name, m in pairs(package.loaded) do
    if type(name) == "string" and name:match("^cuda") then walk(m) end
  end
  for name, mt in pairs(debug.getregistry()) do
    if type(name) == "string" and name:match("^cuda%.") then walk(mt) end
  end
  return found
end

local reported = false
local function report()
  local path = os.getenv("CUDALUA_GC_STRESS_LOG")
  if not path or reported then return end
  reported = true
  collectgarbage("stop")
  local in_cuda, in_c = 0, 0
  local ours = cuda_functions()
  for f, n in pairs(counts) do
    if ours[f] then in_cuda = in_cuda + n
    elseif type(f) == "function" and debug.getinfo(f, "S").what == "C" then in_c = in_c + n end
  end
  local out = io.open(path, "a")
  if out then
    out:write(("%s cycles=%d in_cuda_c=%d in_other_c=%d\n"):format(arg and arg[0] or "?", cycles,
                                                                  in_cuda, in_c))
    out:close()
  end
end

-- Report at os.exit too (it need not close the state) and at a normal end,
-- when the state closes and this anchor is finalized.
local exit = os.exit
os.exit = function(...) report(); return exit(...) end
package.loaded["cuda.gcstress"] = setmetatable({}, {__gc = report})
