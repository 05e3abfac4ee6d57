-- Every public name is documented: the cuda module's functions and fields,
-- every registered type's methods and attributes, the helper modules'
-- exports, the error fields, the bundled scripts and the environment
-- variables the code reads. The names come from the code itself (the
-- loaded module, the registry, the C sources' fields functions, the Lua
-- sources), so a name added without documentation fails here. Needs no GPU.
local t = require "tap"
local cuda = require "cuda"

local srcdir = os.getenv("CUDALUA_SRCDIR") or "."
local builddir = os.getenv("CUDALUA_BUILDDIR") or "."

local function read(path)
  return assert(t.read_file(srcdir .. "/" .. path), "cannot read " .. path)
end

local function source_files(dir, ext)
  local list = {}
  for _, name in ipairs(t.ls(srcdir .. "/" .. dir)) do
    if name:sub(-#ext) == ext then list[#list + 1] = dir .. "/" .. name end
  end
  return list
end

-- --- the man page as plain text ---------------------------------------------------

-- roff's escapes for the characters a name or its neighbours may use.
local ESCAPES = {["-"] = "-", ["~"] = " ", [" "] = " ", ["&"] = "", ["e"] = "\\", ["|"] = "", ["^"] = ""}

-- The text a reader sees, near enough to search names in: escapes
-- resolved, font changes dropped, request names removed.
local function plain(roff)
  local text = roff:gsub("\\%(dq", '"'):gsub("\\%(aq", "'"):gsub("\\%(%a%a", " ")
                   :gsub("\\f[BIRPC]W?", ""):gsub("\\f%(%a%a", "")
                   :gsub("\\(.)", function(c) return ESCAPES[c] or c end)
  return (text:gsub("\n%.%a+ ?", "\n"))
end

-- The sections of a page as plain text: each .SH's under its title (with
-- its subsections), each .SS's under "SH title/SS title" too.
local function sections(roff)
  local lines, sh, ss = {}, "", nil
  local function add(key, line)
    lines[key] = lines[key] or {}
    table.insert(lines[key], line)
  end
  for line in roff:gmatch("[^\n]*") do
    local request, title = line:match("^%.(S[HS])%s+(.*)$")
    if request == "SH" then
      sh, ss = title:gsub('"', ""), nil
    elseif request == "SS" then
      ss = sh .. "/" .. title:gsub('"', "")
    end
    add(sh, line)
    if ss then add(ss, line) end
  end
  local list = {}
  for key, text in pairs(lines) do list[key] = plain(table.concat(text, "\n")) end
  return list
end

local function escape_pattern(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end

-- Whether name appears in text as a word: not inside a longer name.
local function has_word(text, name)
  local pattern = "%f[%w_.:]" .. escape_pattern(name) .. "%f[^%w_]"
  if name:match("^[^%w_]") then pattern = escape_pattern(name) .. "%f[^%w_]" end
  return text:find(pattern) ~= nil
end

-- --- names from the code ---------------------------------------------------------

-- What a type's methods and attributes are called on in the page.
local RECEIVERS = {
  ["cuda.Device"] = "dev", ["cuda.Stream"] = "s", ["cuda.Event"] = "ev",
  ["cuda.MemoryResource"] = "mr", ["cuda.Buffer"] = "buf", ["cuda.View"] = "v",
  ["cuda.Program"] = "prog", ["cuda.ObjectCode"] = "obj", ["cuda.Kernel"] = "k",
  ["cuda.LaunchConfig"] = "cfg", ["cuda.Scalar"] = "scalar", ["cuda.Graph"] = "g",
  ["cuda.GraphBuilder"] = "b", ["cuda.ProgramCache"] = "pc", ["cuda.Linker"] = "linker",
  ["cuda.SMResource"] = "sm", ["cuda.Context"] = "ctx", ["cuda.mpi.Request"] = "req",
  ["cuda.IpcExport"] = "exp", ["cuda.IpcPoolHandle"] = "h", ["cuda.GraphMemoryResource"] = "gm",
  ["cuda.Array"] = "arr", ["cuda.TextureObject"] = "tex", ["cuda.SurfaceObject"] = "surf",
  ["cuda.TensorMap"] = "tm", ["cuda.system.Device"] = "nd", ["cuda.GraphDefinition"] = "def",
  ["cuda.HostRegistration"] = "reg",
}

-- The fields of a cuda.Error, set by src/driver.c and the compilers.
local ERROR_FIELDS = {"code", "name", "api", "message", "log", "unavailable", "context_lost"}

-- Names read lazily through __index, which pairs cannot see.
local LAZY_EXPORTS = {mpi = {"rank", "size", "local_rank", "hostname", "staging", "chunk_size"}}

-- The helper modules and their public classes (what their constructors
-- return) with the receiver the page writes; "" for methods shown bare.
local MODULES = {
  bench = {}, timeline = {Timeline = "tl"}, json = {}, cli = {Progress = ""},
  kernels = {}, overlap = {Pipeline = "p"}, results = {Run = "run"}, svg = {},
  bandwidth = {}, mpi = {},
}

-- Methods that only the class itself calls.
local PRIVATE_METHODS = {Timeline = {next_event = true}, Progress = {draw = true}}

-- Environment variables read through a name computed or kept in a table,
-- which the getenv scan cannot see, and the file that holds each name.
local INDIRECT_ENV = {
  CUDALUA_NVRTC = "src/toolkit.c", CUDALUA_NVJITLINK = "src/toolkit.c",
  LUA_INIT_5_4 = "src/cudalua.c", LUA_INIT = "src/cudalua.c",
}

-- Each name to check: {kind, name, where = a section or nil, ways = word
-- lists, any of which, each word found, documents it}.
local checks = {}
local counts = {}
local function need_any(kind, name, ways, where)
  checks[#checks + 1] = {kind = kind, name = name, ways = ways, where = where}
  counts[kind] = (counts[kind] or 0) + 1
end
local function need(kind, name, where) need_any(kind, name, {{name}}, where) end

local function public(key) return type(key) == "string" and not key:match("^__") end

local function has_functions(tbl)
  for k, v in pairs(tbl) do
    if public(k) and type(v) == "function" then return true end
  end
  return false
end

-- The module: cuda.X, and the members of its tables of functions
-- (cuda.nvtx.range, cuda.ObjectCode.from_ptx: the table's full name and the
-- member's name, which the page may list after it).
local function module_names()
  for k, v in pairs(cuda) do
    local name = "cuda." .. k
    need("module", name)
    if type(v) == "table" and not v.__name and has_functions(v) then
      for member in pairs(v) do
        if public(member) then
          need_any("module", name .. "." .. member, {{name .. "." .. member}, {name, member}})
        end
      end
    end
  end
end

-- A registered type's methods table: its __index, or the table among the
-- upvalues of the __index closure that is no metatable (handle.c keeps the
-- methods there, after the cl_Types userdata the fast checks use).
local function methods_of(mt)
  local index = rawget(mt, "__index")
  if type(index) == "table" then return index end
  if type(index) ~= "function" then return nil end
  for i = 1, math.huge do
    local name, value = debug.getupvalue(index, i)
    if not name then return nil end
    if type(value) == "table" and rawget(value, "__name") == nil then return value end
  end
end

-- The name a type's member is written with: receiver, separator, member.
local unnamed_types = {}
local function member(tname, sep, name)
  if not RECEIVERS[tname] then unnamed_types[#unnamed_types + 1] = tname end
  return (RECEIVERS[tname] or tname) .. sep .. name
end

local function type_methods(tname, mt)
  for method in pairs(methods_of(mt) or {}) do
    if public(method) then need("method", member(tname, ":", method)) end
  end
end

-- The attributes the C fields functions serve: strcmp(key, "name") in a
-- function named *_fields, tied to its type by cl_new_type; and those a file
-- above a type adds to it, named in the luaL_Reg array of cl_add_fields.
local FIELD_FUNCTIONS_ELSEWHERE = {view_fields = "cuda.View"}  -- view.c's own __index calls it

-- CL_X -> "cuda.X", from handle.h, cl.h and the C file that uses them.
local function type_names(code)
  local names = {}
  for macro, tname in (read("src/handle.h") .. read("src/cl.h") .. code):gmatch('#define%s+(CL_[%w_]+)%s+"(cuda%.[%w.]+)"') do
    names[macro] = tname
  end
  return names
end

local function field_names()
  local n = 0
  for _, path in ipairs(source_files("src", ".c")) do
    local code = read(path)
    local macros = type_names(code)
    local owner = {}
    for macro, fn in code:gmatch("cl_new_type%(L,%s*([%w_]+),[^;]-,%s*([%w_]+)%)%s*;") do
      owner[fn] = macros[macro] or macro
    end
    for fn, body in code:gmatch("\nstatic int ([%w_]+_fields)%(lua_State %*L%)\n(%b{})") do
      local tname = owner[fn] or FIELD_FUNCTIONS_ELSEWHERE[fn]
      t.ok(tname, ("%s: %s belongs to a known type"):format(path, fn))
      for field in body:gmatch('strcmp%(key, "([%w_]+)"%)') do
        need("field", member(tostring(tname), ".", field))
        n = n + 1
      end
    end
    for macro, array in code:gmatch("cl_add_fields%(L,%s*([%w_]+),%s*([%w_]+)%)") do
      local body = code:match("luaL_Reg " .. array .. "%[%] = (%b{})")
      t.ok(body and macros[macro], ("%s: the fields %s adds to %s are read"):format(path, array, macro))
      for field in (body or ""):gmatch('{"([%w_]+)",') do
        need("field", member(tostring(macros[macro]), ".", field))
        n = n + 1
      end
    end
  end
  t.ok(n > 50, ("found the fields functions' attributes (%d)"):format(n))
end

local function registered_types()
  local ntypes = 0
  for key, mt in pairs(debug.getregistry()) do
    if type(key) == "string" and key:match("^cuda%.") and type(mt) == "table" and mt.__name == key then
      ntypes = ntypes + 1
      type_methods(key, mt)
    end
  end
  t.ok(ntypes >= 15, ("found the registered types (%d)"):format(ntypes))
  t.is(table.concat(unnamed_types, ", "), "", "every type with methods has a receiver in RECEIVERS")
end

-- Public classes' methods, from the module's source: function Class:name(.
local function class_methods(name, classes)
  local code = t.read_file(srcdir .. "/lua/cuda/" .. name .. ".lua") or read("lua/cuda/" .. name .. "/init.lua")
  for class, recv in pairs(classes) do
    local found = 0
    for method in code:gmatch("\nfunction " .. class .. ":([%w_]+)%(") do
      found = found + 1
      if not (PRIVATE_METHODS[class] or {})[method] then need("helper", recv .. ":" .. method) end
    end
    t.ok(found > 0, ("cuda.%s has the class %s"):format(name, class))
  end
end

local function helper_names()
  for name, classes in pairs(MODULES) do
    local ok, mod = pcall(require, "cuda." .. name)
    if ok then
      for k in pairs(mod) do need("helper", name .. "." .. k) end
      for _, k in ipairs(LAZY_EXPORTS[name] or {}) do need("helper", name .. "." .. k) end
      class_methods(name, classes)
    else
      t.ok(name == "mpi" and tostring(mod):find("mpi_core", 1, true), "cuda." .. name .. " loads")
    end
  end
end

local function error_names()
  for _, field in ipairs(ERROR_FIELDS) do
    t.ok(read("src/driver.c"):find('"' .. field .. '"', 1, true)
         or read("src/program.c"):find('"' .. field .. '"', 1, true),
         "the error field " .. field .. " is set in the sources")
    need("error field", field, "ERRORS")
  end
end

-- --- the interpreter's page ------------------------------------------------------

local function environment_names()
  local seen = {}
  for _, dir in ipairs{"src", "lua/cuda", "lua/cuda/bench", "scripts"} do
    for _, path in ipairs(source_files(dir, dir == "src" and ".c" or ".lua")) do
      for var in read(path):gmatch('getenv%("([%w_]+)"%)') do seen[var] = true end
    end
  end
  for var, path in pairs(INDIRECT_ENV) do
    t.ok(read(path):find(var, 1, true), var .. " is named in " .. path)
    seen[var] = true
  end
  for var in pairs(seen) do need("environment", var, "ENVIRONMENT") end
end

local function script_names()
  for _, path in ipairs(source_files("scripts", ".lua")) do
    local name = path:match("([%w_]+)%.lua$")
    need("script", name, "BUNDLED SCRIPTS/" .. name)
  end
end

-- --- the check --------------------------------------------------------------------

-- The checks that fail against a page: a list of "kind: words".
local function missing(list, roff)
  local secs, all = sections(roff), plain(roff)
  local out = {}
  for _, c in ipairs(list) do
    local text = c.where and secs[c.where] or all
    local found = false
    for _, words in ipairs(c.ways) do
      local all_found = true
      for _, word in ipairs(words) do all_found = all_found and has_word(text, word) end
      found = found or all_found
    end
    if not found then
      out[#out + 1] = ("%s: %s%s"):format(c.kind, c.name, c.where and (" (in " .. c.where .. ")") or "")
    end
  end
  table.sort(out)
  return out
end

local function report(list, roff, page)
  local bad = missing(list, roff)
  t.ok(#bad == 0, ("%s documents the %d names checked against it"):format(page, #list))
  for _, line in ipairs(bad) do t.diag("undocumented " .. line) end
end

module_names()
registered_types()
field_names()
helper_names()
error_names()
local api_checks = checks
checks = {}
environment_names()
script_names()
local cli_checks = checks

local kinds = {}
for kind, n in pairs(counts) do kinds[#kinds + 1] = ("%d %s"):format(n, kind) end
table.sort(kinds)
t.diag("names checked: " .. table.concat(kinds, ", "))

local api_page = read("man/cudalua-api.3.in")
local cli_page = read("man/cudalua.1.in")
report(api_checks, api_page, "cudalua-api(3)")
report(cli_checks, cli_page, "cudalua(1)")

-- The check can fail: a page without one name's mentions misses it, and
-- only it.
local function newly_missing(list, roff, word)
  local before = {}
  for _, line in ipairs(missing(list, roff)) do before[line] = true end
  local cut = roff:gsub("%f[%w_]" .. escape_pattern(word) .. "%f[^%w_]", "REMOVED")
  local new = {}
  for _, line in ipairs(missing(list, cut)) do
    if not before[line] then new[#new + 1] = line end
  end
  return table.concat(new, "\n")
end
t.is(newly_missing(api_checks, api_page, "cuda.real_path"), "module: cuda.real_path",
     "a page without cuda.real_path is reported")
t.is(newly_missing(api_checks, api_page, "dev.uuid"), "field: dev.uuid",
     "a page without dev.uuid is reported")
t.is(newly_missing(api_checks, api_page, "context_lost"), "error field: context_lost (in ERRORS)",
     "a page without context_lost is reported")
t.is(newly_missing(cli_checks, cli_page, "COLUMNS"), "environment: COLUMNS (in ENVIRONMENT)",
     "a page without COLUMNS is reported")
t.is(newly_missing(cli_checks, cli_page, "launch_cost"),
     "script: launch_cost (in BUNDLED SCRIPTS/launch_cost)", "a page without launch_cost is reported")
t.ok(has_word(plain("\\fBcuda.launch\\fR(s)"), "cuda.launch")
     and not has_word(plain(".B cuda.launcher"), "cuda.launch")
     and has_word(plain(".BR buf:copy_to ( dst )"), "buf:copy_to")
     and not has_word("xbuf:copy_to", "buf:copy_to"), "names match as words")

-- --- rendering ---------------------------------------------------------------------

-- groff's warnings (-ww) on a page, when groff is installed.
local function groff_warnings(file)
  local code, out, err = t.run(("groff -man -Tutf8 -ww -z '%s'"):format(file))
  return code == 0 and err == "" and out == "", err
end

-- The pages name the installation's folders; a long prefix (distcheck's
-- is /.../cudalua-0.2.0/_inst) must render as cleanly as a short one. The
-- Makefile's own substitution writes them, for a prefix of 99 characters.
local long_prefix = "/" .. ("a-long-installation-prefix/"):rep(3) .. "that-does-not-fit"
local function long_prefix_warnings(page)
  local file = os.tmpname()
  local cmd = ("make -s --no-print-directory -C '%s' print-man-page PAGE=%s bindir=%s/bin"
    .. " pkgdatadir=%s/share/cudalua LUA_CMODDIR=%s/lib/lua/5.4 LUA_LMODDIR=%s/share/lua/5.4"
    .. " >'%s'"):format(builddir, page, long_prefix, long_prefix, long_prefix, long_prefix, file)
  local written = t.run(cmd) == 0
  local clean, err = groff_warnings(file)
  local text = io.open(file):read("a")
  os.remove(file)
  -- every path can break after each slash, so no line holds the raw prefix
  local module = (long_prefix .. "/lib/lua/5.4/cuda.so"):gsub("/", "/\\:")
  return written and clean and text:find(long_prefix, 1, true) == nil
    and text:find(module, 1, true) ~= nil, err
end

if t.run("command -v groff >/dev/null") ~= 0 then
  t.skip("groff is not installed", 4)
else
  for _, page in ipairs{"cudalua-api.3", "cudalua.1"} do
    local clean, err = groff_warnings(builddir .. "/man/" .. page)
    t.ok(clean, page .. " renders without warnings")
    if not clean then t.diag(err) end
    clean, err = long_prefix_warnings(page)
    t.ok(clean, page .. " renders without warnings for a " .. #long_prefix .. "-character prefix")
    if not clean then t.diag(err) end
  end
end

t.done()
