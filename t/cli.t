-- The interpreter: options, the arg table, bundled scripts, exit codes.
local t = require "tap"
local cudalua = t.cudalua()

t.plan(42)

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

code, out = t.run("LUA_INIT='x_from_init = 5' " .. cudalua .. " -e 'print(x_from_init)'")
t.is(out, "5\n", "LUA_INIT honoured")

t.done()
