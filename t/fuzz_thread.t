-- The fuzzer once more with the fake's host functions on a driver thread
-- (CUDALUA_FAKE_HOST_THREAD=1), as a GPU runs them: the thread blocks in a
-- host function until Lua runs it at its next wait, and the fake's module
-- loads and green contexts wait for pending host functions as the H200's
-- driver does. A call that reaches one of those without running the
-- pending host functions first hangs here: the real-GPU fuzzer hung so at
-- three actions before cudalua drained them (cl_hostfunc_drain), and this
-- file hangs within seconds without the drain. FUZZ_SEED passes through;
-- FUZZ_THREAD_CALLS sets each seed's length.
local t = require "tap"
t.plan(2)
local seeds = os.getenv("FUZZ_SEED") or "1 2 3"
local calls = tonumber(os.getenv("FUZZ_THREAD_CALLS")) or 5000
local limit = t.time_limit(300)
local code, out, err = t.run(("CUDALUA_FAKE_HOST_THREAD=1 FUZZ_SEED='%s' FUZZ_CALLS=%d timeout %d %s '%s/t/fuzz.t'")
  :format(seeds, calls, limit, t.cudalua(), os.getenv("CUDALUA_SRCDIR")))
t.ok(code ~= 124, ("no hang: %s calls of each seed %s within %d s"):format(calls, seeds, limit))
t.ok(code == 0 and out:find("\nok") and not out:find("\nnot ok"),
     "the fuzzer passes with host functions on a driver thread" .. (code ~= 0 and " (exit " .. tostring(code) .. ")" or ""))
if code ~= 0 or out:find("\nnot ok") then t.diag(out:sub(-2000) .. err:sub(-2000)) end
