-- The interpreter: options, the arg table, bundled scripts, exit codes.
local t = require "tap"
local cudalua = t.cudalua()

t.plan(50)

local code, out, err = t.run(cudalua .. " -e 'print(1 + 1)'")
t.is(code, 0, "-e runs a statement")
t.is(out, "2\n", "-e output")

code, out = t.run(cudalua .. " -e 'print(require(\"cuda\").version)'")
t.like(out, "^%d+%.%d+%.%d+\n$", "cuda is preloaded and has a version")

code, out = t.run(cudalua .. " -l string -e 'print(type(string.format))'")
t.is(out, "function\n", "-l loads a library")

code, out = t.run(cudalua .. " -l s=string -e 'print(s == string)'")
t.is(out, "true\n", "-l g=mod binds a global")

code, out = t.run(cudalua .. " -v")
t.is(code, 0, "-v exits 0")
t.like(out, "^cudalua %d+%.%d+%.%d+ %(Lua 5%.4", "-v names cudalua and Lua")

code, out = t.run(cudalua .. " --version")
t.like(out, "^cudalua ", "--version")

code, out = t.run(cudalua .. " --help")
t.is(code, 0, "--help exits 0")
t.like(out, "usage: cudalua", "--help shows usage")
t.like(out, "%-%-list", "--help mentions --list")

code, out, err = t.run(cudalua .. " --bogus")
t.is(code, 2, "unknown option: exit 2")
t.like(err, "unrecognized option '%-%-bogus'", "unknown option is named")

code, out, err = t.run(cudalua .. " -e")
t.is(code, 2, "-e without argument: exit 2")

code, out, err = t.run(cudalua .. " -e 'error(\"boom\")'")
t.is(code, 1, "script error: exit 1")
t.like(err, "boom", "error message printed")
t.like(err, "stack traceback", "with a traceback")

-- reporting errors: any error object gives a clean message and exit 1
code, out, err = t.run(cudalua .. [[ -e 'local e; e = setmetatable({}, {__index = function(_, k)
  if k == "unavailable" then return true end error(e) end}); error(e)']])
t.is(code, 1, "error object whose __index raises: exit 1")
t.ok(not err:find("PANIC"), "error object whose __index raises: no Lua panic")
t.like(err, "^cudalua: %(error object is a table value%)", "error object whose __index raises: named by type")

code, out, err = t.run(cudalua .. " -e 'error({unavailable = true})'")
t.is(code, 1, "a table claiming unavailable = true is a script error, not 'no GPU'")
t.ok(not err:find("(null)", 1, true), "no '(null)' in the message")
t.like(err, "error object is a table value", "the table is named by type")

code, out, err = t.run(cudalua .. [[ -e 'error(setmetatable({}, {__tostring = function() error("inner") end}))']])
t.is(code, 1, "error object whose __tostring raises: exit 1")
t.like(err, "^cudalua: %(error object is a table value, which could not be converted to a string%)",
  "error object whose __tostring raises: named by type")

code, out, err = t.run(cudalua .. [[ -e 'error(setmetatable({}, {__tostring = function() return "custom text" end}))']])
t.like(err, "^cudalua: custom text\n", "error object with __tostring: its text")

code, out, err = t.run(cudalua .. " -e 'error()'")
t.like(err, "^cudalua: %(error object is a nil value%)", "error(nil): named by type")

code, out, err = t.run(cudalua .. " -e '' -e 'print(\"after empty\")'")
t.is(code, 0, "-e '' is accepted, like lua(1)")
t.is(out, "after empty\n", "-e '' runs nothing, and what follows runs")

-- the arg table and script arguments
local script = os.tmpname()
local f = assert(io.open(script, "w"))
f:write("print(arg[0] == ... or arg[0], select('#', ...), arg[1], arg[2], arg[-1] ~= nil)\n")
f:close()
code, out = t.run(cudalua .. " " .. script .. " a b")
t.is(code, 0, "script runs")
t.like(out, "\t2\ta\tb\ttrue\n$", "script arguments in ... and arg")

code, out = t.run(cudalua .. " -- " .. script .. " x")
t.like(out, "\t1\tx\tnil\ttrue\n$", "-- ends options")

code, out = t.run("echo 'print(40 + 2)' | " .. cudalua .. " -")
t.is(out, "42\n", "- runs standard input")
os.remove(script)

code, out = t.run(cudalua .. " -i < /dev/null")
t.is(code, 0, "-i with empty input exits 0")

code, out = t.run("printf 'x = 6\\nx * 7\\n' | " .. cudalua .. " -i")
t.like(out, "42", "interactive mode evaluates expressions")

-- bundled scripts
code, out = t.run(cudalua .. " --list")
t.is(code, 0, "--list exits 0")
t.like(out, "device_query", "--list shows device_query")
t.like(out, "streaming_overlap", "--list shows streaming_overlap")

code, out, err = t.run(cudalua .. " no_such_script_here")
t.is(code, 2, "unknown bundled script: exit 2")
t.like(err, "no bundled script of that name", "unknown script explained")

code, out = t.run("LUA_PATH='/nonexistent/?.lua' " .. cudalua .. " -e 'print(package.path)'")
t.like(out, "/nonexistent/%?%.lua", "LUA_PATH honoured")

-- (env -u: make check-gcstress sets LUA_INIT_5_4, which wins over LUA_INIT)
code, out = t.run("env -u LUA_INIT_5_4 LUA_INIT='x_from_init = 5' " .. cudalua .. " -e 'print(x_from_init)'")
t.is(out, "5\n", "LUA_INIT honoured")

-- Ctrl-C, like lua(1): "interrupted!" and a traceback at the next Lua
-- instruction, exit 1, the chunk unwound (its <close> handlers ran) and the
-- state closed. The chunk creates the file "ready" once it runs; SIGINT is
-- sent only then. `timeout --foreground` forwards the signal once, and ends
-- a run that ignores it.
local LOOP = [[io.open("ready", "w"):close() while true do end]]
local WAIT_READY = "i=0; while [ ! -e ready ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done"
local TIMED = "timeout --foreground 60 " .. cudalua

-- Runs shell in a fresh folder, then waits for its $pid: "exit N", the
-- files out and err, and the seconds it all took.
local function run_in_folder(shell)
  local dir = t.tmpdir()
  local started = os.time()
  local _, status = t.run(("cd '%s' || exit 1\n%s\nwait $pid; echo \"exit $?\""):format(dir, shell))
  local elapsed = os.time() - started
  local out, err = t.read_file(dir .. "/out"), t.read_file(dir .. "/err")
  os.execute(("rm -rf '%s'"):format(dir))
  return status, out, err, elapsed
end

local status, elapsed
status, out, err, elapsed = run_in_folder(("%s -e '%s' >out 2>err & pid=$!\n%s; kill -INT $pid"):format(TIMED,
  [[local guard <close> = setmetatable({}, {__close = function() print("close handler ran") end}) ]] .. LOOP,
  WAIT_READY))
t.is(status, "exit 1\n", "Ctrl-C during a script: exit 1, like lua(1)")
t.like(err, "^cudalua: [^\n]*interrupted!\nstack traceback:", "Ctrl-C: 'interrupted!' with a traceback")
t.is(out, "close handler ran\n", "Ctrl-C: the chunk unwinds, its <close> handlers run")
t.ok(elapsed <= 10, "Ctrl-C: the loop stops at once (" .. elapsed .. " s)")

-- interactive: Ctrl-C ends the running chunk, and the session goes on
status, out, err, elapsed = run_in_folder(([[
mkfifo in; %s -i <in >out 2>err & pid=$!
exec 3>in; echo '%s' >&3; %s; kill -INT $pid
echo 'print("still " .. "here")' >&3; exec 3>&-]]):format(TIMED, LOOP, WAIT_READY))
t.is(status, "exit 0\n", "Ctrl-C in interactive mode: the session ends normally at the end of input")
t.like(err, "interrupted!\nstack traceback:", "Ctrl-C in interactive mode: the chunk is interrupted")
t.like(out, "still here", "Ctrl-C in interactive mode: the next chunk runs")
t.ok(elapsed <= 10, "Ctrl-C in interactive mode: at once (" .. elapsed .. " s)")

t.done()
