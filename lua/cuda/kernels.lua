-- cuda.kernels: find CUDA source files of kernels (cuda.find_kernel) and
-- SPDX-License-Identifier: MIT
-- load kernels from them.
local cuda = require "cuda"

local M = {}

-- The folder of the running script (arg[0]), as the shell would name it.
local function script_dir()
  local script = type(arg) == "table" and arg[0]
  if type(script) ~= "string" then return nil end
  return script:match("^(.+)/") or (script:sub(1, 1) == "/" and "/") or "."
end

-- Where name may be, in search order: each folder of CUDALUA_KERNEL_PATH,
-- the script's folder and its ../kernels, the installed kernels/. An
-- absolute name is only checked.
local function places(name)
  if name:sub(1, 1) == "/" then return {name} end
  local list = {}
  local function add(dir) list[#list + 1] = dir .. "/" .. name end
  for dir in (os.getenv("CUDALUA_KERNEL_PATH") or ""):gmatch("[^:]+") do add(dir) end
  local dir = script_dir()
  if dir then
    add(dir)
    add(dir .. "/../kernels")
  end
  add(cuda.datadir .. "/kernels")
  return list
end

-- The path of the first readable file among the places name may be.
function M.find(name)
  if type(name) ~= "string" then
    error(("bad argument #1 to 'find_kernel' (string expected, got %s)")
          :format(name == nil and "no value" or type(name)), 2)
  end
  if name == "" then error("bad argument #1 to 'find_kernel' (kernel file name is empty)", 2) end
  local list = places(name)
  -- The places are whole paths, so the name searchpath puts in for "?" is
  -- "?" itself; sep "" keeps it from turning dots into slashes.
  local path = package.searchpath("?", table.concat(list, ";"), "")
  if path then return path end
  error(("kernel file '%s' not found; looked for:\n  %s"):format(name, table.concat(list, "\n  ")), 0)
end

-- Compile file (searched like cuda.find_kernel) for dev and return the
-- kernel called name. options go to cuda.Program; arch defaults to dev's.
function M.load(dev, file, name, options)
  local path = M.find(file)
  local f <close> = assert(io.open(path, "r"))
  local opts = {arch = "sm_" .. dev.arch, name = file}
  for k, v in pairs(options or {}) do opts[k] = v end
  return cuda.Program(f:read("a"), "c++", opts):compile("cubin"):get_kernel(name)
end

return M
