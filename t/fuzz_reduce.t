-- bench/fuzz_reduce.lua: delta debugging of a crashing fuzzer run, against
-- a stand-in fuzzer that dies by SIGSEGV when FUZZ_ONLY holds three calls
-- drawn here; and its refusals (no crash, bad arguments).
local t = require "tap"
local cudalua = t.cudalua()
local reduce = os.getenv("CUDALUA_SRCDIR") .. "/bench/fuzz_reduce.lua"

t.plan(8)
t.seed()

local dir = t.tmpdir()
local calls, needed = math.random(60, 200), {}
while #needed < 3 do
  local c = math.random(calls)
  if not table.concat(needed, " "):find("%f[%d]" .. c .. "%f[%D]") then needed[#needed + 1] = c end
end
table.sort(needed, function(a, b) return a < b end)
local standin = dir .. "/standin.sh"
t.write_file(standin, ([[
for c in %s; do case " $FUZZ_ONLY " in *" $c "*) ;; *) exit 0;; esac; done
echo "stand-in: seed $FUZZ_SEED of $FUZZ_CALLS calls, trace $FUZZ_TRACE" >&2
kill -SEGV $$
]]):format(table.concat(needed, " ")))

local seed = math.random(1, 1 << 30)
local code, out, err = t.run(("%s '%s' %d %d 3 -- sh '%s'"):format(cudalua, reduce, seed, calls, standin))
t.is(code, 0, "a crashing run is reduced")
if code ~= 0 then t.diag(err) end
t.like(out, ("seed %d: status 139 needs calls %s\n"):format(seed, table.concat(needed, " ")),
       "to exactly the calls the crash needs, " .. table.concat(needed, " ") .. " of " .. calls)
t.like(out, ("FUZZ_SEED=%d FUZZ_CALLS=%d FUZZ_ONLY='%s' replays it"):format(seed, calls, table.concat(needed, " ")),
       "with the line that replays it")
t.like(out, "stand%-in: seed " .. seed .. " of " .. calls .. " calls, trace 2\n", "then the trace of the reduced run")
t.like(err, "dies with status 139 %(signal 11%)", "progress on stderr")

t.write_file(dir .. "/fine.sh", "exit 0\n")
code, out = t.run(("%s '%s' 1 10 -- sh '%s/fine.sh'"):format(cudalua, reduce, dir))
t.ok(code == 1 and out:find("exits 0, not by a signal: nothing to reduce"), "a run that does not crash: exit 1, said so")
code, out, err = t.run(("%s '%s' 1 x -- sh"):format(cudalua, reduce))
t.ok(code == 2 and err:find("^usage: "), "a bad call count: the usage, exit 2")
code, out, err = t.run(("%s '%s' 1 10 sh"):format(cudalua, reduce))
t.ok(code == 2 and err:find("^usage: "), "no -- before the command: the usage, exit 2")
os.execute("rm -rf '" .. dir .. "'")
t.done()
