-- The interactive mode, driven through a pseudo-terminal as a person uses
-- it: script(1) runs `cudalua -i` on a pty and types what we pipe into it.
-- Expected values are computed by the chunks, so the terminal's echo of
-- what was typed cannot match them.
local t = require "tap"
local cudalua = t.cudalua()

if t.run("command -v script >/dev/null && command -v timeout >/dev/null") ~= 0 then
  t.skip_all("script(1) or timeout(1) is not installed")
end

t.plan(17)

-- What the terminal showed, without carriage returns and escape sequences,
-- and without the prompts that start a line. Without readline the terminal
-- echoes typed-ahead lines at once, so the prompts ("> ", ">> ") pile up in
-- front of the output that follows them ("> >> >> row 11").
local function screen(text)
  text = text:gsub("\r", ""):gsub("\27%[[%d;?]*%a", "")
  return text, (("\n" .. text):gsub("\n[> ]*> ", "\n"))
end

local has_readline = t.run("ldd " .. cudalua .. " 2>/dev/null | grep -q libreadline") == 0

-- Types `steps` (each some lines of input) into `cudalua -i` on a pty.
-- Before each step after the first it waits until the earlier ones have run
-- and the reader is idle again: text typed while a chunk runs meets the
-- terminal's cooked-mode line buffer, which holds 4095 bytes. The last line
-- of each step writes the terminal's name to a marker file; readline waits
-- for input with the terminal out of canonical mode, so the next step is
-- typed only once stty says so (a fixed pause lost that race on a busy
-- machine). Returns the exit code and the screen.
local function wait_idle(marker)
  if not has_readline then return "sleep 0.3" end
  return ("i=0; while ! stty -F \"$(cat '%s')\" -a 2>/dev/null | grep -q -- -icanon && [ $i -lt 600 ]; do "
    .. "sleep 0.05; i=$((i + 1)); done"):format(marker)
end
local function session(steps)
  local dir = t.tmpdir()
  local commands = {}
  for i, text in ipairs(steps) do
    local marker = ("%s/ran%d"):format(dir, i)
    t.write_file(("%s/step%d"):format(dir, i), text ..
      ("local f = io.open(%q, 'w') f:write(io.popen('tty'):read('l')) f:close()\n"):format(marker))
    commands[#commands + 1] = ("cat '%s/step%d'; while [ ! -s '%s' ]; do sleep 0.05; done; %s")
      :format(dir, i, marker, wait_idle(marker))
  end
  t.write_file(dir .. "/run.sh", ("{ %s; } | script -qec \"%s -i\" /dev/null\n")
    :format(table.concat(commands, "; "), cudalua))
  local code, out = t.run(("timeout 120 sh '%s/run.sh'"):format(dir))
  os.execute(("rm -rf '%s'"):format(dir))
  return code, screen(out)   -- the screen, and the screen without prompts
end

-- The position just after the first match of pattern in text from `from`.
local function after(text, pattern, from)
  local _, last = text:find(pattern, from or 1)
  return last
end

local long_line = '=#"' .. ("x"):rep(9995) .. '"'      -- 10,000 bytes
local code, raw, out = session{
  'for i = 1, 3 do\n  print(("row %d"):format(i * 11))\nend\n' ..
  '=6 * 7\n' ..
  '"ab" .. "cd", 2 ^ 10\n' ..
  '=type(cuda), cuda == require("cuda")\n' ..
  'error("bo" .. "om")\n' ..
  '="still " .. "here"\n' ..
  'x = = 1\n' ..
  'function twice(n)\n  return\n    2 * n\nend\n' ..
  '=twice(21.5)\n',
  long_line .. "\n",
}
t.is(code, 0, "pty: the session ends at the end of input with status 0")
t.like(out, "\nrow 11\nrow 22\nrow 33\n", "pty: a for loop typed over three lines runs once, complete")
t.like(raw, ">> ", "pty: a continuation prompt while the chunk is incomplete")
t.like(out, "\n42\n", "pty: =expr prints its value")
t.like(out, "\nabcd\t1024%.0\n", "pty: a bare expression list prints its values")
t.like(out, "\ntable\ttrue\n", "pty: cuda is a global in interactive sessions")
local boom = after(out, "\ncudalua: stdin:1: boom\n")
t.ok(boom, "pty: a runtime error is reported")
t.ok(boom and after(out, "\nstill here\n", boom), "pty: the session goes on after a runtime error")
local syntax = after(out, "cudalua: stdin:1: unexpected symbol near '='")
t.ok(syntax, "pty: a syntax error is reported")
t.ok(syntax and after(out, "\n43%.0\n", syntax), "pty: the session goes on after a syntax error")
if has_readline then
  t.like(out, "\n9995\n", "pty: a 10,000-byte line is read whole (readline)")
else
  t.skip("built without readline: a terminal's cooked mode holds 4095 bytes a line")
end

-- Through a pipe: the plain reader, which has no line-length limit either.
local function piped(input)
  local dir = t.tmpdir()
  t.write_file(dir .. "/input", input)
  local c, o, e = t.run(("%s -i < '%s/input'"):format(cudalua, dir))
  os.execute(("rm -rf '%s'"):format(dir))
  return c, o, e
end

code, out = piped(long_line .. "\n" .. '=#"' .. ("y"):rep(99990) .. '"\n')
t.like(out, "> 9995\n", "pipe: a 10,000-byte line is read whole")
t.like(out, "> 99990\n", "pipe: a 100,000-byte line is read whole")

code, out = piped("if true then\nprint('yes')\nend\nlocal s = 'a'\nprint(s)\n")
t.like(out, ">> >> yes\n", "pipe: a multi-line chunk runs once complete")
t.like(out, "> nil\n", "pipe: locals end with their chunk, like lua(1)")

local err
code, out, err = piped("for i = 1, 2 do\n")
t.like(err, "stdin:1: 'end' expected near <eof>", "pipe: a chunk left incomplete at the end of input is reported")
t.is(code, 0, "pipe: the session still ends with status 0")

t.done()
