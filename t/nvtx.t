-- cuda.nvtx: ranges and marks for profilers. Without one (no
-- NVTX_INJECTION64_PATH) every call is a no-op for NVTX, but the depth of
-- open ranges is still counted, so nesting and errors are checked here.
local t = require "tap"
local cuda = require "cuda"
local nvtx = cuda.nvtx

for _, name in ipairs{"range_push", "range_pop", "mark", "range", "depth"} do
  t.is(type(nvtx[name]), "function", "cuda.nvtx." .. name .. " exists")
end

t.is(nvtx.depth(), 0, "no range is open at the start")
nvtx.range_push("outer")
nvtx.range_push("inner")
t.is(nvtx.depth(), 2, "range_push nests")
nvtx.mark("a mark")
nvtx.range_pop()
t.is(nvtx.depth(), 1, "range_pop closes the innermost")
nvtx.range_pop()
t.is(nvtx.depth(), 0, "and the outer one")
t.raises(function() nvtx.range_pop() end, "no range is open", "range_pop without a push is an error")

do
  local outer <close> = nvtx.range("outer")
  t.is(nvtx.depth(), 1, "range opens a range")
  do
    local inner <close> = nvtx.range("inner")
    t.is(nvtx.depth(), 2, "ranges nest")
  end
  t.is(nvtx.depth(), 1, "leaving the block closes the inner range")
end
t.is(nvtx.depth(), 0, "and the outer one")

local ok, err = pcall(function()
  local r1 <close> = nvtx.range("failing")
  local r2 <close> = nvtx.range("failing inside")
  error("boom")
end)
t.ok(not ok and tostring(err):match("boom"), "an error goes through the ranges")
t.is(nvtx.depth(), 0, "and closes every range it left")

t.like(tostring(nvtx.range("named")), "^cuda.nvtx.range", "the range value names itself")
nvtx.range_pop()
nvtx.range_push(42)
t.is(nvtx.depth(), 1, "a number is a name, as Lua strings go")
nvtx.range_pop()

t.raises(function() nvtx.range_push() end, "string expected", "range_push needs a name")
t.raises(function() nvtx.range_push({}) end, "string expected", "range_push rejects a table")
t.raises(function() nvtx.mark(nil) end, "string expected", "mark needs a name")
t.raises(function() nvtx.range(true) end, "string expected", "range rejects a boolean")
t.is(nvtx.depth(), 0, "rejected names open no range")
t.done()
