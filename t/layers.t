-- The C core is layered: no file of src/ calls into a file that calls back
-- into it, directly or round a circle (HACKING.md, "Which file may call
-- which"). Read from the built objects: what each defines and what it
-- leaves undefined (nm), so an inline helper of a header counts against
-- the file that includes it. Needs no GPU.
local t = require "tap"

local builddir = os.getenv("CUDALUA_BUILDDIR") or "."

-- The strongly connected groups of more than one file of graph (file ->
-- set of files), each sorted, in a sorted list (Tarjan).
local function circles(graph)
  local index, low, on_stack, stack, found, next_index = {}, {}, {}, {}, {}, 0
  local function visit(v)
    index[v], low[v], next_index = next_index, next_index, next_index + 1
    stack[#stack + 1], on_stack[v] = v, true
    for w in pairs(graph[v] or {}) do
      if index[w] == nil then
        visit(w)
        low[v] = math.min(low[v], low[w])
      elseif on_stack[w] then
        low[v] = math.min(low[v], index[w])
      end
    end
    if low[v] == index[v] then
      local group = {}
      repeat
        local w = table.remove(stack)
        on_stack[w] = nil
        group[#group + 1] = w
      until w == v
      if #group > 1 then
        table.sort(group)
        found[#found + 1] = group
      end
    end
  end
  local files = {}
  for v in pairs(graph) do files[#files + 1] = v end
  table.sort(files)
  for _, v in ipairs(files) do
    if index[v] == nil then visit(v) end
  end
  table.sort(found, function(a, b) return a[1] < b[1] end)
  return found
end

-- The finder finds what it must, so a clean result below means something.
local planted = circles({a = {b = true}, b = {c = true}, c = {a = true, d = true}, d = {}})
t.is(#planted == 1 and table.concat(planted[1], " "), "a b c", "a planted circle a -> b -> c -> a is found")
t.is(#circles({a = {b = true}, b = {c = true}, c = {}}), 0, "a chain is no circle")

local function lines_of(command)
  local pipe = io.popen(command .. " 2>/dev/null")
  local out = pipe:read("a")
  pipe:close()
  return out
end

local objects = {}
for path in lines_of(("ls %s/src/.libs/*.o %s/src/*.o"):format(builddir, builddir)):gmatch("[^\n]+") do
  local file = path:match("([%w_]+)%.o$"):gsub("^libcudaview_la%-", "")
  objects[file] = path
end
if next(objects) == nil or lines_of("command -v nm") == "" then
  t.skip_all("no built objects under " .. builddir .. "/src, or no nm")
end

local owner = {}                -- symbol -> the file that defines it
for file, path in pairs(objects) do
  for symbol in lines_of("nm -g --defined-only " .. path):gmatch("%S+ %a (%S+)") do
    owner[symbol] = owner[symbol] or file
  end
end
local graph, why, arrows = {}, {}, 0
for file, path in pairs(objects) do
  graph[file] = graph[file] or {}
  for symbol in lines_of("nm -u " .. path):gmatch("U (%S+)") do
    local to = owner[symbol]
    if to and to ~= file then
      if not graph[file][to] then arrows = arrows + 1 end
      graph[file][to] = true
      why[file .. " -> " .. to] = symbol
    end
  end
end
t.ok(arrows > 100, ("the objects' calls between files were read (%d arrows)"):format(arrows))

local found = circles(graph)
t.is(#found, 0, "no circle of files calls round in src/")
for _, group in ipairs(found) do
  t.diag("circle: " .. table.concat(group, ", "))
  local members = {}
  for _, f in ipairs(group) do members[f] = true end
  for arrow, symbol in pairs(why) do
    local from, to = arrow:match("(%S+) %-> (%S+)")
    if members[from] and members[to] then t.diag(("  %s (%s)"):format(arrow, symbol)) end
  end
end
t.done()
