-- Cut a crashing fuzzer run down to the calls the crash needs (delta debugging)
-- SPDX-License-Identifier: MIT
--
--   cudalua bench/fuzz_reduce.lua SEED CALLS [JOBS] -- COMMAND...
--
-- COMMAND runs the fuzzer (for example `env FUZZ_REAL=1 cudalua t/fuzz.t` on
-- a GPU); each try runs it with FUZZ_SEED=SEED,
-- FUZZ_CALLS=CALLS and FUZZ_ONLY set to the calls tried. t/fuzz.t seeds
-- each call's draws by (seed, call), so a call left out changes nothing
-- the others draw, only what they find alive. A try reproduces the crash
-- when it dies by the same signal as the whole run. JOBS tries run at once
-- (default 8). It prints the calls the crash needs, then their trace
-- (FUZZ_TRACE=2: each call's action and what it picked).
local function integer(s) local n = tonumber(s or "") return n and math.tointeger(n) end
local seed, calls_n, jobs = integer(arg[1]), integer(arg[2]), 8
local first = 3
if arg[3] ~= "--" then jobs, first = integer(arg[3]), 4 end
if not (seed and calls_n and calls_n >= 1 and jobs and jobs >= 1 and arg[first] == "--" and arg[first + 1]) then
  io.stderr:write("usage: cudalua bench/fuzz_reduce.lua SEED CALLS [JOBS] -- COMMAND...\n")
  os.exit(2)
end
local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
local words = {}
for i = first + 1, #arg do words[#words + 1] = quote(arg[i]) end
local command = table.concat(words, " ")

-- The shell line of one try; its output is the exit status.
local function try_line(calls, trace)
  return ("FUZZ_SEED=%d FUZZ_CALLS=%d FUZZ_ONLY=%s %s %s %s; echo $?"):format(
    seed, calls_n, quote(table.concat(calls, " ")), trace and "FUZZ_TRACE=2" or "", command,
    trace and "2>&1 >/dev/null" or ">/dev/null 2>&1")
end

-- The exit status of every candidate, JOBS at a time.
local function statuses(candidates)
  local out = {}
  for from = 1, #candidates, jobs do
    local running = {}
    for i = from, math.min(from + jobs - 1, #candidates) do
      running[i] = io.popen(try_line(candidates[i]))
    end
    for i, p in pairs(running) do
      out[i] = tonumber(p:read("a"):match("(%d+)%s*$"))
      p:close()
    end
  end
  return out
end

-- calls cut into n runs of about equal length
local function split(calls, n)
  local chunks, size = {}, #calls / n
  for i = 1, n do
    chunks[i] = table.move(calls, math.floor((i - 1) * size) + 1, math.floor(i * size), 1, {})
  end
  return chunks
end

local function complement(chunks, skip)
  local rest = {}
  for i, c in ipairs(chunks) do
    if i ~= skip then table.move(c, 1, #c, #rest + 1, rest) end
  end
  return rest
end

-- ddmin (Zeller): try each of n chunks alone, then each complement; keep the
-- first that still crashes, else cut finer. Ends 1-minimal: leaving out any
-- one call of the result loses the crash.
local function reduce(calls, crash)
  local n = 2
  while #calls >= 2 do
    local chunks = split(calls, n)
    local candidates = {}
    for i = 1, n do candidates[i], candidates[n + i] = chunks[i], complement(chunks, i) end
    local rc, kept = statuses(candidates), nil
    for i = 1, 2 * n do
      if rc[i] == crash then kept = i break end
    end
    if kept then
      calls, n = candidates[kept], kept <= n and 2 or math.max(n - 1, 2)
      io.stderr:write(("fuzz_reduce: %d calls still crash\n"):format(#calls))
    elseif n >= #calls then
      break
    else
      n = math.min(#calls, 2 * n)
    end
  end
  return calls
end

local all = {}
for i = 1, calls_n do all[i] = i end
local crash = statuses({all})[1]
if not crash or crash <= 128 or crash == 124 then
  print(("fuzz_reduce: the whole run (seed %d, %d calls) exits %s, not by a signal: nothing to reduce")
        :format(seed, calls_n, tostring(crash)))
  os.exit(1)
end
io.stderr:write(("fuzz_reduce: the whole run dies with status %d (signal %d)\n"):format(crash, crash - 128))
local needed = reduce(all, crash)
print(("fuzz_reduce: seed %d: status %d needs calls %s"):format(seed, crash, table.concat(needed, " ")))
print(("FUZZ_SEED=%d FUZZ_CALLS=%d FUZZ_ONLY='%s' replays it; their trace:"):format(seed, calls_n,
      table.concat(needed, " ")))
local p = io.popen(try_line(needed, true))
local trace, status = p:read("a"):match("^(.-)(%d+)%s*$")
p:close()
io.write(trace, ("(exit status %s)\n"):format(status))
