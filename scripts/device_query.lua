-- List every CUDA device with its key properties and the driver version
-- SPDX-License-Identifier: MIT
local cuda = require "cuda"
local cli = require "cuda.cli"
local results = require "cuda.results"

local parser = cli.parser("device_query", results.description())
parser:flag("--all", "Print every property the device reports.")
results.options(parser, {"json"})
local args = cli.parse(parser, arg)

local function gib(bytes) return ("%.1f GiB"):format(bytes / 2^30) end
local function mib(bytes) return ("%.0f MiB"):format(bytes / 2^20) end

-- The properties worth a glance, in reading order; --all adds the rest.
local KEY_PROPERTIES = {
  {"Multiprocessors", "multiprocessor_count"},
  {"Global memory", "total_memory", gib},
  {"L2 cache", "l2_cache_size", mib},
  {"SM clock", "clock_rate_khz", function(k) return ("%.0f MHz"):format(k / 1e3) end},
  {"Memory clock", "memory_clock_rate_khz", function(k) return ("%.0f MHz"):format(k / 1e3) end},
  {"Memory bus", "memory_bus_width", function(b) return b .. " bits" end},
  {"Copy engines", "async_engine_count"},
  {"Max threads per block", "max_threads_per_block"},
  {"Shared memory per block (opt-in)", "max_shared_memory_per_block_optin", function(b) return (b // 1024) .. " KiB" end},
  {"Concurrent managed access", "concurrent_managed_access", function(v) return v == 1 and "yes" or "no" end},
  {"Memory pools", "memory_pools_supported", function(v) return v == 1 and "yes" or "no" end},
  {"Cluster launch", "cluster_launch", function(v) return v == 1 and "yes" or "no" end},
  {"UUID", "uuid"},
}

local function describe(value)
  if type(value) == "table" then return "{" .. table.concat(value, ", ") .. "}" end
  return tostring(value)
end

local function print_device(dev)
  local props = dev.properties
  print(("Device %d: %s"):format(dev.id, dev.name))
  print(("  %-34s %s (sm_%s)"):format("Compute capability", tostring(dev.compute_capability), dev.arch))
  local shown = {}
  for _, p in ipairs(KEY_PROPERTIES) do
    local label, key, format = p[1], p[2], p[3] or tostring
    print(("  %-34s %s"):format(label, format(props[key])))
    shown[key] = true
  end
  print(("  %-34s %s"):format("PCI bus id", dev.pci_bus_id))
  if args.all then
    local rest = {}
    for key in pairs(props) do if not shown[key] then rest[#rest + 1] = key end end
    table.sort(rest)
    for _, key in ipairs(rest) do print(("  %-34s %s"):format(key, describe(props[key]))) end
  end
end

cuda.Device(0)   -- without a driver or GPU: one sentence, exit 2 (the interpreter's)
local major, minor = cuda.driver_version()
print(("CUDA driver version: %d.%d"):format(major, minor))
print(("Devices: %d"):format(cuda.device_count()))
local devices = {}
for id = 0, cuda.device_count() - 1 do
  print()
  print_device(cuda.Device(id))
  local dev, props = cuda.Device(id), {}
  for key, value in pairs(dev.properties) do props[key] = value end
  devices[#devices + 1] = {id = id, name = dev.name, arch = dev.arch, properties = props}
end
-- No figures: every device's properties are the details; the environment names device 0.
results.new("device_query", {device = cuda.Device(0), argv = arg}):finish(args, true, {devices = devices})
