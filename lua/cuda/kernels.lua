-- cuda.kernels: load a kernel from a CUDA source file found by cuda.find_kernel.
local cuda = require "cuda"

local M = {}

-- Compile file (searched like cuda.find_kernel) for dev and return the
-- kernel called name. options go to cuda.Program; arch defaults to dev's.
function M.load(dev, file, name, options)
  local path = cuda.find_kernel(file)
  local f <close> = assert(io.open(path, "r"))
  local opts = {arch = "sm_" .. dev.arch, name = file}
  for k, v in pairs(options or {}) do opts[k] = v end
  return cuda.Program(f:read("a"), "c++", opts):compile("cubin"):get_kernel(name)
end

return M
