-- Output files (the scripts' --json and --trace, cuda.json.write_file):
-- checked while the options are parsed, so a path that cannot be written
-- fails before any work; written so that what is there stays what it is:
-- /dev/null a device, a FIFO a FIFO, a symlink a link, /dev/stdout the
-- process's own output; a regular file replaced atomically. No GPU needed.
local t = require "tap"
t.plan(44)
local cuda, json, cli = require "cuda", require "cuda.json", require "cuda.cli"
local cudalua = t.cudalua()

local function quote(path) return "'" .. path .. "'" end
local function sh(command) return os.execute(command) == true end
local function inode(path)
  local p = io.popen("stat -L -c %i " .. quote(path))
  local number = p:read("l")
  p:close()
  return number
end

local dir = t.tmpdir()
local VALUE = {a = 1, list = {1.5, 2}}
local TEXT = json.encode(VALUE, {indent = 2}) .. "\n"

-- Runs `cudalua -e code` in dir through sh; Lua code may not hold ' .
local function child(code, redirect)
  return t.run(("cd %s && %s -e '%s' %s"):format(quote(dir), cudalua, code, redirect or ""))
end

-- --- cuda.file_kind and cuda.real_path --------------------------------------------
local kind, writable = cuda.file_kind(dir)
t.ok(kind == "directory" and writable == true, "file_kind: a writable folder")
t.write_file(dir .. "/plain", "x")
t.is(cuda.file_kind(dir .. "/plain"), "file", "file_kind: a regular file")
t.is(cuda.file_kind("/dev/null"), "character device", "file_kind: /dev/null")
sh("mkfifo " .. quote(dir .. "/fifo"))
t.is(cuda.file_kind(dir .. "/fifo"), "fifo", "file_kind: a FIFO")
sh("ln -s plain " .. quote(dir .. "/link"))
t.is(cuda.file_kind(dir .. "/link"), "file", "file_kind: follows a symlink")
kind, writable = cuda.file_kind(dir .. "/nothing")
t.ok(kind == "absent" and writable == false, "file_kind: 'absent', false where nothing is")
local none, message, errno = cuda.file_kind(dir .. "/plain/x")
t.ok(none == nil and message == dir .. "/plain/x: Not a directory" and math.type(errno) == "integer",
  "file_kind: nil, message, errno where nothing can be")
t.raises(function() cuda.file_kind() end, "bad argument #1 to '[%w.]*file_kind'", "file_kind: needs a path")
t.is(cuda.real_path(dir .. "/link"), cuda.real_path(dir) .. "/plain", "real_path: resolves symlinks")
none, message = cuda.real_path(dir .. "/nothing")
t.ok(none == nil and message:find("No such file", 1, true), "real_path: nil, message for nothing")

-- --- json.can_write: checked without writing ----------------------------------
t.ok(json.can_write(dir .. "/new.json"), "can_write: a new file in a writable folder")
t.ok(json.can_write(dir .. "/plain"), "can_write: an existing file")
t.ok(json.can_write(dir .. "/fifo"), "can_write: a FIFO, without opening it (that would block)")
t.ok(json.can_write("/dev/stdout"), "can_write: /dev/stdout")
local ok, why = json.can_write("/nonexistent/folder/x.json")
t.ok(ok == false and why == "cannot write /nonexistent/folder/x.json: the folder /nonexistent/folder does not exist",
  "can_write: a missing folder, named")
ok, why = json.can_write(dir)
t.ok(not ok and why:find("it is a folder$"), "can_write: a folder is not a file")
ok, why = json.can_write(dir .. "/plain/x.json")
t.ok(not ok and why:find("Not a directory$"), "can_write: a file in the way of a folder")
t.ok(not json.can_write(""), "can_write: an empty path")
if io.popen("id -u"):read("l") ~= "0" then   -- root writes everywhere
  sh("mkdir " .. quote(dir .. "/ro") .. " && chmod 555 " .. quote(dir .. "/ro"))
  ok, why = json.can_write(dir .. "/ro/x.json")
  t.ok(not ok and why:find("the folder " .. dir .. "/ro is not writable", 1, true), "can_write: a read-only folder")
  sh("chmod 755 " .. quote(dir .. "/ro"))
else
  t.skip("root may write in a read-only folder")
end

-- --- writing special files in place --------------------------------------------
-- A private node of /dev/null's device (1, 3) where mknod is allowed, so a
-- broken write_file cannot replace the system's /dev/null; else /dev/null.
local null = dir .. "/null"
if not sh("mknod " .. quote(null) .. " c 1 3 2>/dev/null") then null = "/dev/null" end
json.write_file(null, VALUE)
t.is(cuda.file_kind(null), "character device", "write_file: " .. null .. " stays a character device")

local code, out = t.run(("cd %s && { %s -e 'require(\"cuda.json\").write_file(\"fifo\", {a = 1, list = {1.5, 2}})' & cat fifo; wait; }")
  :format(quote(dir), cudalua))
t.is(out, TEXT, "write_file: a FIFO's reader gets the JSON")
t.is(cuda.file_kind(dir .. "/fifo"), "fifo", "write_file: the FIFO stays a FIFO")

local WRITE_BETWEEN = [[print("before") require("cuda.json").write_file("%s", {a = 1, list = {1.5, 2}}) print("after")]]
code, out = child(WRITE_BETWEEN:format("/dev/stdout"))
t.is(code, 0, "write_file(\"/dev/stdout\"): exit 0")
t.is(out, "before\n" .. TEXT .. "after\n", "write_file(\"/dev/stdout\"): the JSON, in order with print")
t.write_file(dir .. "/stdout.txt", "")
local before = inode(dir .. "/stdout.txt")
child(WRITE_BETWEEN:format("/dev/stdout"), "> stdout.txt")
t.is(t.read_file(dir .. "/stdout.txt"), "before\n" .. TEXT .. "after\n",
  "write_file(\"/dev/stdout\") redirected to a file: everything, in order")
t.is(inode(dir .. "/stdout.txt"), before, "write_file(\"/dev/stdout\") redirected to a file: the same file")
local err
code, out, err = child(WRITE_BETWEEN:format("/dev/stderr"))
t.ok(out == "before\nafter\n" and err == TEXT, "write_file(\"/dev/stderr\"): the JSON on stderr")

-- --- regular files: replaced atomically, through symlinks -----------------------
t.write_file(dir .. "/result.json", "{}")
before = inode(dir .. "/result.json")
json.write_file(dir .. "/result.json", VALUE)
t.is(t.read_file(dir .. "/result.json"), TEXT, "write_file: a regular file gets the JSON")
t.isnt(inode(dir .. "/result.json"), before, "write_file: a regular file is replaced by rename, not rewritten")

sh(("mkdir %s %s"):format(quote(dir .. "/a"), quote(dir .. "/b")))
t.write_file(dir .. "/b/target.json", "{}")
sh("ln -s ../b/target.json " .. quote(dir .. "/a/link.json"))
json.write_file(dir .. "/a/link.json", VALUE)
t.ok(sh("test -L " .. quote(dir .. "/a/link.json")), "write_file through a symlink: the link stays a link")
t.is(t.read_file(dir .. "/b/target.json"), TEXT, "write_file through a symlink: its target gets the JSON")
t.is(table.concat(t.ls(dir .. "/a"), " ") .. " | " .. table.concat(t.ls(dir .. "/b"), " "),
  "link.json | target.json", "write_file through a symlink: no temporary file left in either folder")

t.raises(function() json.write_file(dir .. "/missing/x.json", VALUE) end,
  "cannot write .*/missing/x%.json: the folder .*/missing does not exist", "write_file: says why it cannot")

-- --- the scripts: an unwritable output stops them before any work -------------
t.is(cli.output_file(dir .. "/ok.json"), dir .. "/ok.json", "cli.output_file: a writable path is kept")
none, message = cli.output_file("/nonexistent/x.json")
t.ok(none == nil and message:find("cannot write /nonexistent/x.json", 1, true), "cli.output_file: nil, why")
local parser = cli.parser("test", "A test.")
parser:option("-j --json")
parser:option("--other")
local args = cli.parse(parser, {"--json", dir .. "/ok.json", "--other", "/nonexistent/x"})
t.ok(args.json == dir .. "/ok.json" and args.other == "/nonexistent/x",
  "cli.parse: --json checked and kept, other options untouched")
ok, why = parser:pparse{"-j", "/nonexistent/x.json"}   -- the parser cli.parse prepared
t.ok(not ok and why:find("bad value for -j: cannot write /nonexistent/x.json", 1, true),
  "cli.parse: an output option is checked by any of its names")

code, out, err = t.run(cudalua .. " memory_resources --json /nonexistent/folder/x.json")
t.is(code, 2, "memory_resources --json in a missing folder: exit 2, a usage error")
t.like(err, "Error: bad value for %-%-json: cannot write /nonexistent/folder/x%.json: the folder /nonexistent/folder does not exist\n",
  "memory_resources --json in a missing folder: says why")
t.ok(out == "" and not err:find("NVIDIA") and not err:find("device"), "memory_resources: stopped before any work")
code, out, err = t.run(cudalua .. " streaming_overlap --trace " .. quote(dir))
t.is(code, 2, "streaming_overlap --trace FOLDER: exit 2")
t.like(err, "Error: bad value for %-%-trace: cannot write [^\n]*: it is a folder\n",
  "streaming_overlap --trace FOLDER: says why")
code, out, err = t.run(cudalua .. " launch_cost --json /dev/null/x.json")
t.ok(code == 2 and err:find("bad value for --json: cannot write /dev/null/x.json", 1, true),
  "launch_cost --json under a file: exit 2, says why")
t.ok(cuda.file_kind("/dev/null") == "character device", "and /dev/null is still a character device")

os.execute("rm -rf " .. quote(dir))
t.done()
