-- Every public name is documented: the cuda module's functions and fields,
-- every registered type's methods and attributes, the helper modules'
-- exports, the error fields, the bundled scripts and the environment
-- variables the code reads. The names come from the code itself (the
-- loaded module, the registry, the C sources' fields functions, the Lua
-- sources), so a name added without documentation fails here. Each API
-- name has its entry (an item head) in exactly one of the API's pages,
-- cudalua-api(3) and the pages it lists; the other pages may mention it.
-- Then the pages' form (the sections, a NAME line that man -k finds), their
-- examples (each runs under the fake driver) and their rendering (groff
-- and man -l, without a warning). Needs no GPU.
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

-- The roff of one section of a page (up to the next .SH), or nil.
local function section_roff(roff, title)
  local body = roff:match("\n%.SH " .. escape_pattern(title) .. "\n(.-)\n%.SH ")
  return body or roff:match("\n%.SH " .. escape_pattern(title) .. "\n(.*)$")
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

-- The heads of a page's items, as text: the tag line of each .TP or .TQ
-- item (with its continuation lines), which man sets at the margin above
-- the item's paragraph. A name's entry is a head that names it, in the
-- section its check asks for if any; the paragraphs only mention names.
local function item_heads(roff)
  local lines = {}
  for line in ((roff or "") .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  local heads, k = {}, 1
  while k < #lines do
    if lines[k]:match("^%.T[PQ]%s*[%d.]*%a*$") then
      k = k + 1
      local head = lines[k]
      while head:sub(-1) == "\\" and k < #lines do k = k + 1; head = head:sub(1, -2) .. lines[k] end
      heads[#heads + 1] = head
    end
    k = k + 1
  end
  return plain("\n" .. table.concat(heads, "\n"))
end

local function names_it(c, text)
  for _, words in ipairs(c.ways) do
    local all_found = true
    for _, word in ipairs(words) do all_found = all_found and has_word(text, word) end
    if all_found then return true end
  end
  return false
end

-- The names without an entry, and those with entries in more than one
-- page: a list of lines. pages: {name = roff}.
local function entry_problems(list, pages)
  local heads, names = {}, {}
  for name in pairs(pages) do names[#names + 1] = name end
  table.sort(names)
  local function heads_of(name, where)
    local key = name .. "\0" .. (where or "")
    heads[key] = heads[key] or item_heads(where and section_roff(pages[name], where) or pages[name])
    return heads[key]
  end
  local out = {}
  for _, c in ipairs(list) do
    local found = {}
    for _, name in ipairs(names) do
      if names_it(c, heads_of(name, c.where)) then found[#found + 1] = name end
    end
    local what = ("%s: %s%s"):format(c.kind, c.name, c.where and (" (in " .. c.where .. ")") or "")
    if #found == 0 then out[#out + 1] = "no entry for " .. what
    elseif #found > 1 then out[#out + 1] = ("entries for %s in %s"):format(what, table.concat(found, ", ")) end
  end
  table.sort(out)
  return out
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

-- The API's pages: cudalua-api(3), their index, and one a part of the module.
local api_pages = {}
for _, name in ipairs(t.ls(srcdir .. "/man")) do
  local page = name:match("^(cudalua%-[%w_]+%.3)%.in$")
  if page then api_pages[#api_pages + 1] = page end
end
t.ok(#api_pages > 10, ("found the API's pages (%d)"):format(#api_pages))
-- Each page's roff: api_text the API's pages, page_text those and cudalua(1).
local cli_page = read("man/cudalua.1.in")
local all_pages = {"cudalua.1", table.unpack(api_pages)}
local api_text, page_text = {}, {["cudalua.1"] = cli_page}
for _, page in ipairs(api_pages) do
  api_text[page] = read("man/" .. page .. ".in")
  page_text[page] = api_text[page]
end
local bad_entries = entry_problems(api_checks, api_text)
t.ok(#bad_entries == 0, ("each of the %d names has its entry in one page"):format(#api_checks))
for _, line in ipairs(bad_entries) do t.diag(line) end
report(cli_checks, cli_page, "cudalua(1)")

-- The checks can fail: a page without one name's mentions misses it, and
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

-- The entry problems that changing the API's pages makes, and only those.
local function new_entry_problems(change)
  local before, pages = {}, {}
  for _, line in ipairs(entry_problems(api_checks, api_text)) do before[line] = true end
  for page, roff in pairs(api_text) do pages[page] = change(page, roff) end
  local new = {}
  for _, line in ipairs(entry_problems(api_checks, pages)) do
    if not before[line] then new[#new + 1] = line end
  end
  return table.concat(new, "\n")
end
local function without(word)
  return function(_, roff) return (roff:gsub("%f[%w_]" .. escape_pattern(word) .. "%f[^%w_]", "REMOVED")) end
end
t.is(new_entry_problems(without("cuda.real_path")), "no entry for module: cuda.real_path",
     "pages without cuda.real_path are reported")
t.is(new_entry_problems(without("dev.uuid")), "no entry for field: dev.uuid",
     "pages without dev.uuid are reported")
t.is(new_entry_problems(without("context_lost")), "no entry for error field: context_lost (in ERRORS)",
     "pages without context_lost are reported")
t.is(new_entry_problems(function(_, roff) return (roff:gsub("%.TP\n(%.BI cuda%.real_path%()", ".PP\n%1")) end),
     "no entry for module: cuda.real_path", "a mere mention of cuda.real_path is no entry")
t.is(new_entry_problems(function(page, roff)
       return page == "cudalua-device.3" and roff .. ".TP\n.B cuda.real_path\nAgain.\n" or roff
     end), "entries for module: cuda.real_path in cudalua-api.3, cudalua-device.3",
     "a second entry for cuda.real_path in another page is reported")
t.is(item_heads(".TP\n.BR a.b ,\\\nc.d\nbody e.f\n.TQ\n.B g.h\n.PP\ni.j\n"), "\na.b ,c.d\ng.h",
     "item heads are the tag lines of .TP and .TQ, with their continuations")
t.is(newly_missing(cli_checks, cli_page, "COLUMNS"), "environment: COLUMNS (in ENVIRONMENT)",
     "a page without COLUMNS is reported")
t.is(newly_missing(cli_checks, cli_page, "launch_cost"),
     "script: launch_cost (in BUNDLED SCRIPTS/launch_cost)", "a page without launch_cost is reported")
t.ok(has_word(plain("\\fBcuda.launch\\fR(s)"), "cuda.launch")
     and not has_word(plain(".B cuda.launcher"), "cuda.launch")
     and has_word(plain(".BR buf:copy_to ( dst )"), "buf:copy_to")
     and not has_word("xbuf:copy_to", "buf:copy_to"), "names match as words")

-- --- the pages' form -----------------------------------------------------------------

local REQUIRED_SECTIONS = {"NAME", "SYNOPSIS", "DESCRIPTION", "ERRORS", "EXAMPLES", "SEE ALSO"}

-- What is wrong with a page's form: its sections, its NAME line (whatis
-- form: "cudalua\-device \- what it covers", which mandb indexes for
-- apropos and man -k), and its SEE ALSO naming the index.
local function form_problems(page, roff)
  local bad, at = {}, 0
  for _, title in ipairs(REQUIRED_SECTIONS) do
    local pos = roff:find("\n%.SH " .. escape_pattern(title) .. "\n")
    if not pos then bad[#bad + 1] = "no " .. title .. " section"
    elseif pos < at then bad[#bad + 1] = title .. " out of order" end
    at = pos or at
  end
  local base = page:match("^(.*)%.%d$")
  local name_line = (section_roff(roff, "NAME") or ""):match("^[^\n]*")
  local name = name_line:match("^(.-) \\%- %S")
  if not name or name:gsub("\\%-", "-") ~= base then
    bad[#bad + 1] = "NAME is not '" .. base:gsub("%-", "\\-") .. " \\- ...': " .. name_line
  end
  local th = roff:match("^%.TH (%S+) (%d)")
  if th ~= base:upper() then bad[#bad + 1] = ".TH names " .. tostring(th) end
  if base ~= "cudalua-api" and not has_word(plain(section_roff(roff, "SEE ALSO") or ""), "cudalua-api") then
    bad[#bad + 1] = "SEE ALSO does not name cudalua-api(3)"
  end
  return bad
end

local index_pages = plain(section_roff(read("man/cudalua-api.3.in"), "PAGES") or "")
local makefile = read("Makefile.am")
local installed = makefile:match("\nman_MANS = (.-[^\\])\n"):gsub("\\\n", " ")
for _, page in ipairs(api_pages) do
  local bad = form_problems(page, api_text[page])
  t.ok(#bad == 0, page .. ": NAME (whatis form), SYNOPSIS, DESCRIPTION, ERRORS, EXAMPLES, SEE ALSO")
  for _, why in ipairs(bad) do t.diag(why) end
  t.ok(has_word(installed, "man/" .. page), page .. " is in Makefile.am's man_MANS")
  if page ~= "cudalua-api.3" then
    t.ok(index_pages:find(page:match("^(.*)%.3$") .. " (3)", 1, true), "cudalua-api(3)'s PAGES names " .. page)
  end
end
t.is(table.concat(form_problems("cudalua-x.3", table.concat({".TH CUDALUA-X 3", ".SH NAME", "cudalua\\-x is a page",
  ".SH SYNOPSIS", ".SH DESCRIPTION", ".SH EXAMPLES", ".SH ERRORS", ".SH SEE ALSO", ".BR cudalua\\-api (3)"}, "\n")), "; "),
  "EXAMPLES out of order; NAME is not 'cudalua\\-x \\- ...': cudalua\\-x is a page",
  "a page out of order, without a whatis NAME line, is reported")

-- man-db's man, not a stand-in (a minimized system's /usr/bin/man only
-- says that it was removed).
local have_man = t.run("command -v lexgrog >/dev/null && command -v mandb >/dev/null"
  .. " && man --version 2>/dev/null | grep -q '^man '") == 0

-- lexgrog reads a page's NAME as mandb does; mandb over the built pages
-- then lets man -k (apropos) find every one.
if not have_man then
  t.skip("man-db (lexgrog, mandb, man) is not installed", 2)
else
  local seen = {}
  for _, page in ipairs(all_pages) do
    local _, out = t.run(("lexgrog '%s/man/%s'"):format(builddir, page))
    local name = out:match(': "(%S+) %- ')
    if name == page:match("^(.*)%.%d$") then seen[#seen + 1] = name end
  end
  t.is(#seen, #all_pages, "lexgrog reads every page's whatis line")
  local dir = t.tmpdir()
  os.execute(("mkdir -p '%s/man1' '%s/man3' && cp '%s'/man/*.1 '%s/man1' && cp '%s'/man/*.3 '%s/man3'")
    :format(dir, dir, builddir, dir, builddir, dir))
  local _, listed = t.run(("mandb -q -c '%s' >/dev/null && man -M '%s' -k cudalua"):format(dir, dir))
  local missing_pages = {}
  for _, page in ipairs(all_pages) do
    local base, sec = page:match("^(.*)%.(%d)$")
    if not listed:find("\n" .. escape_pattern(base) .. " %(" .. sec .. "%)") and
       not listed:find("^" .. escape_pattern(base) .. " %(" .. sec .. "%)") then
      missing_pages[#missing_pages + 1] = page
    end
  end
  os.execute(("rm -rf '%s'"):format(dir))
  t.is(table.concat(missing_pages, " "), "", "man -k cudalua lists every page")
end

-- --- the examples -------------------------------------------------------------------

-- The code of an EXAMPLES block, its roff escapes undone; nil and the
-- escape for one this does not know (it would run as something else).
local CODE_ESCAPES = {["\\e"] = "\\", ["\\-"] = "-", ["\\&"] = "", ["\\(dq"] = '"', ["\\(aq"] = "'",
                      ["\\(ti"] = "~", ["\\(ha"] = "^", ["\\(rs"] = "\\"}
local function unescape_code(roff)
  local unknown
  local code = roff:gsub("\\%(%a%a", function(e) return CODE_ESCAPES[e] end)
  code = code:gsub("\\.", function(e)
    if CODE_ESCAPES[e] then return CODE_ESCAPES[e] end
    unknown = unknown or e
  end)
  if unknown then return nil, unknown end
  return code
end

-- Every .EX block of a page's EXAMPLES section.
local function example_blocks(roff)
  local blocks = {}
  for block in (section_roff(roff, "EXAMPLES") or ""):gmatch("\n%.EX\n(.-)\n%.EE") do
    blocks[#blocks + 1] = block
  end
  return blocks
end

-- Command lines for a shell, not a Lua program (cudalua(1)'s examples of
-- its options: the scripts they run have tests of their own).
local function is_shell(code)
  for line in code:gmatch("[^\n]+") do
    if not (line:match("^cudalua%s") or line:match("^[%u_]+=%S*%s+cudalua%s")) then return false end
  end
  return true
end

local fake = require "fake"
local function exists(path) return path ~= nil and t.read_file(path) ~= nil end
local have_fake = exists(os.getenv("CUDALUA_FAKE_LIBCUDA"))
local have_mpi = exists(builddir .. "/src/.libs/mpi_core.so")

-- Open MPI's plugins stay loaded and its frames unwind in full, as in
-- t/mpi.t, so that the sanitizer build's leak reports name them (t/lsan.supp).
local MPI_ENV = "OMPI_MCA_mca_base_component_disable_dlclose=1"
  .. " LSAN_OPTIONS=\"${LSAN_OPTIONS:+$LSAN_OPTIONS:}fast_unwind_on_malloc=0\" "

-- Runs one example under the fake driver in a folder of its own. A first
-- line "-- NAME.lua: COMMAND" says how the reader runs it (cudalua bench
-- NAME.lua ...); "mpirun -n N" runs here as a job of one rank. Returns
-- the exit code and the output (a run line that runs no cudalua on its
-- file fails), or nil and why it was not run.
local function run_example(code)
  local file, command = code:match("^%-%- ([%w_]+%.lua): ([^\n]+)")
  command = command or "cudalua example.lua"
  file = file or "example.lua"
  command = command:gsub("^mpirun %-n %d+ ", "")
  local uses_mpi = code:find('require "cuda.mpi"', 1, true) ~= nil
  if uses_mpi and not have_mpi then return nil, "cudalua was built without MPI" end
  local env = fake.env(uses_mpi and MPI_ENV or nil)
  local rest = command:match("^cudalua(%s.*)$")
  if not rest or not has_word(rest, file) then return 1, "not a cudalua command on " .. file .. ": " .. command end
  local dir = t.tmpdir()
  t.write_file(dir .. "/" .. file, code)
  local rc, out, err = t.run(("cd '%s' && %s timeout %d %s%s"):format(dir, env, t.time_limit(60),
    t.cudalua(), rest))
  os.execute(("rm -rf '%s'"):format(dir))
  return rc, out .. err
end

local examples, shell_blocks = 0, 0
for _, page in ipairs(all_pages) do
  local blocks = example_blocks(page_text[page])
  t.ok(#blocks > 0, page .. " has examples")
  for i, block in ipairs(blocks) do
    local code, unknown = unescape_code(block)
    local what = ("%s, example %d"):format(page, i)
    if not code then
      t.ok(false, what .. ": its roff escapes are code's")
      t.diag("unknown escape " .. unknown)
    elseif is_shell(code) then
      shell_blocks = shell_blocks + 1
    elseif not have_fake then
      t.skip("no fake driver (CUDALUA_FAKE_LIBCUDA: run by make check)")
    else
      local rc, out = run_example(code)
      if rc == nil then
        t.skip(what .. ": " .. out)
      else
        examples = examples + 1
        t.is(rc, 0, what .. " runs under the fake driver")
        if rc ~= 0 then t.diag(out) end
      end
    end
  end
end
t.ok(examples > #api_pages, ("ran the pages' examples (%d; %d blocks of shell commands not run)")
  :format(examples, shell_blocks))
t.is(select(2, unescape_code("a \\- b \\(dq\\e\\(aq\\&")), nil, "code escapes undone")
t.is(unescape_code("a \\- b \\(dq\\e\\(aq\\&"), "a - b \"\\'", "code escapes give the code")
t.is(select(2, unescape_code("x \\fBbold\\fR")), "\\f", "an escape that is not code's is reported")
if have_fake then
  t.isnt(run_example("local cuda = require \"cuda\"\nerror('an example that fails')"), 0,
         "an example that fails is reported")
  t.isnt(run_example("-- a.lua: lua a.lua\nprint(1)"), 0, "an example run other than by cudalua is reported")
end

-- --- rendering ---------------------------------------------------------------------

-- groff's warnings (-ww) on a page, when groff is installed.
local function groff_warnings(file)
  local code, out, err = t.run(("groff -man -Tutf8 -ww -z '%s'"):format(file))
  return code == 0 and err == "" and out == "", err
end

-- What man -l, as a reader runs it (man-db's preprocessors, then groff
-- with every warning on), says on standard error about a page.
local function man_warnings(file)
  local code, _, err = t.run(("MANWIDTH=80 man --warnings=w -l '%s' >/dev/null"):format(file))
  return code == 0 and err == "", err
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
  local names_module = read("man/" .. page .. ".in"):find("@luacmoddir@", 1, true)
  return written and clean and text:find(long_prefix, 1, true) == nil
    and (not names_module or text:find(module, 1, true) ~= nil), err
end

-- The pages that name an installation folder (@bindir@, @luacmoddir@...).
local function names_folders(page) return read("man/" .. page .. ".in"):find("@%l+dir@") ~= nil end

local with_folders = {}
for _, page in ipairs(all_pages) do
  if names_folders(page) then with_folders[#with_folders + 1] = page end
end
t.ok(#with_folders >= 2, "cudalua(1) and cudalua-api(3) name the installation's folders")
if t.run("command -v groff >/dev/null") ~= 0 then
  t.skip("groff is not installed", #all_pages + #with_folders)
else
  for _, page in ipairs(all_pages) do
    local clean, err = groff_warnings(builddir .. "/man/" .. page)
    t.ok(clean, page .. " renders without warnings")
    if not clean then t.diag(err) end
  end
  for _, page in ipairs(with_folders) do
    local clean, err = long_prefix_warnings(page)
    t.ok(clean, page .. " renders without warnings for a " .. #long_prefix .. "-character prefix")
    if not clean then t.diag(err) end
  end
end

-- A page with a mistake (a macro that does not exist, a character groff
-- cannot find, an item without a body at the end) fails both checks.
local broken = os.tmpname()
t.write_file(broken, table.concat({t.read_file(builddir .. "/man/cudalua-stream.3"),
  ".XX not a macro", "a \\[nosuchchar] character", ".TP", ""}, "\n"))
if t.run("command -v groff >/dev/null") ~= 0 then
  t.skip("groff is not installed")
else
  local clean, err = groff_warnings(broken)
  t.ok(not clean and err:find("macro 'XX' not defined", 1, true), "groff reports a broken page")
end
if not have_man or t.run("command -v groff >/dev/null") ~= 0 then
  t.skip("man or groff is not installed", #all_pages + 1)
else
  for _, page in ipairs(all_pages) do
    local clean, err = man_warnings(builddir .. "/man/" .. page)
    t.ok(clean, "man -l " .. page .. " renders without warnings")
    if not clean then t.diag(err) end
  end
  local clean, err = man_warnings(broken)
  t.ok(not clean and err:find("macro 'XX' not defined", 1, true) and err:find("nosuchchar", 1, true),
       "man -l reports a broken page")
end
os.remove(broken)

t.done()
