-- mpi_check.lua: what every rank of a t/mpi_*.lua script reports. Each rank
-- writes its results to DIR/SCRIPT.RANK (one "ok|not ok <TAB> name <TAB>
-- detail" line a check, then "done"); t/mpi.t turns them into TAP.
local M = {}

function M.open(dir, script, rank)
  local f = assert(io.open(("%s/%s.%d"):format(dir, script, rank), "w"))
  f:setvbuf("line")
  local c = {}
  function c.ok(cond, name, detail)
    f:write(cond and "ok" or "not ok", "\t", name, "\t", cond and "" or tostring(detail or ""):gsub("[\t\n]", " "), "\n")
    return cond
  end
  function c.is(got, want, name)
    return c.ok(got == want, name, ("got %s, want %s"):format(tostring(got), tostring(want)))
  end
  function c.same(got, want, name)
    return c.ok(M.same(got, want), name, ("got %s, want %s"):format(M.show(got), M.show(want)))
  end
  function c.raises(f_, pattern, name)
    local ok, err = pcall(f_)
    local text = ok and "(no error)" or tostring(err)
    return c.ok(not ok and text:find(pattern) ~= nil, name, "error: " .. text)
  end
  function c.done() f:write("done\n"); f:close() end
  return c
end

-- Deep equality that keeps integers and floats apart (NaN equals NaN).
function M.same(a, b)
  if type(a) ~= type(b) or math.type(a) ~= math.type(b) then return false end
  if type(a) == "number" and a ~= a then return b ~= b end
  if type(a) ~= "table" then return a == b end
  for k, v in pairs(a) do if not M.same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

function M.show(v)
  if type(v) ~= "table" then return ("%s(%s)"):format(math.type(v) or type(v), tostring(v)) end
  local parts = {}
  for k, x in pairs(v) do parts[#parts + 1] = ("[%s]=%s"):format(M.show(k), M.show(x)) end
  table.sort(parts)
  return "{" .. table.concat(parts, ", ") .. "}"
end

return M
