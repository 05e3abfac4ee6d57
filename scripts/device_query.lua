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

-- NVML's view (cuda.system): clocks and why they are low, the memory bus and
-- its peak, the PCIe link, temperature, power, modes. A field NVML cannot
-- give reads "n/a" and why.
local function nvml_value(nd, field, format)
  local value, why = nd:get(field)
  if value == nil then return "n/a (" .. tostring(why) .. ")" end
  return format and format(value) or tostring(value)
end

local function gbps(bytes_per_s) return ("%.1f GB/s"):format(bytes_per_s / 1e9) end
local function on_off(v) return v and "on" or "off" end

local function clocks(nd, kind)
  local now, why = nd:clock(kind)
  if now == nil then return "n/a (" .. why .. ")" end
  local max, app = nd:max_clock(kind), nd:application_clock(kind)
  return ("%d MHz (max %s, application %s)"):format(now, max or "n/a", app or "n/a")
end

local function link(gen, width, rate)
  if not gen or not width then return "n/a" end
  return ("gen %d x%d%s"):format(gen, width, rate and (" (" .. gbps(rate) .. " per direction)") or "")
end

-- Print one device's NVML readings; return them for the JSON details.
local function print_nvml_device(dev)
  local ok, nd = pcall(cuda.system.Device, dev)
  if not ok then
    print(("  NVML: %s"):format(type(nd) == "table" and nd.message or tostring(nd)))
    return {error = type(nd) == "table" and nd.message or tostring(nd)}
  end
  local row = function(label, text) print(("  %-34s %s"):format(label, text)) end
  print(("NVML device for CUDA device %d: %s (%s)"):format(dev.id, nvml_value(nd, "name"), nvml_value(nd, "pci_bus_id")))
  row("SM clock", clocks(nd, "sm"))
  row("Memory clock", clocks(nd, "memory"))
  local reasons = nd:clock_event_reasons()
  row("Clock-event reasons", reasons and (#reasons == 0 and "none" or table.concat(reasons, ", ")) or "n/a")
  row("Memory bus", nvml_value(nd, "memory_bus_width", function(b) return b .. " bits" end))
  local peak = nd.peak_memory_bandwidth
  local props = dev.properties
  local cuda_peak = 2 * props.memory_clock_rate_khz * 1000 * (props.memory_bus_width // 8)
  row("Peak DRAM bandwidth", nvml_value(nd, "peak_memory_bandwidth", function(b)
    return gbps(b) .. (b ~= cuda_peak and (" (CUDA's attributes give " .. gbps(cuda_peak) .. ")") or "") end))
  local pcie = nd.pcie or {}
  row("PCIe link", nd.pcie and (link(pcie.generation, pcie.width, pcie.rate) .. ", max "
      .. link(pcie.max_generation, pcie.max_width, pcie.max_rate)) or nvml_value(nd, "pcie"))
  row("Temperature", nvml_value(nd, "temperature", function(c) return c .. " C" end))
  row("Power", nvml_value(nd, "power_usage", function(w) return ("%.1f W"):format(w) end)
      .. " of " .. nvml_value(nd, "power_limit", function(w) return ("%.1f W"):format(w) end))
  row("Utilization", nvml_value(nd, "utilization", function(u) return ("GPU %d %%, memory %d %%"):format(u.gpu, u.memory) end))
  row("ECC", nvml_value(nd, "ecc", on_off))
  row("Persistence mode", nvml_value(nd, "persistence_mode", on_off))
  row("Compute mode", nvml_value(nd, "compute_mode"))
  row("MIG mode", nvml_value(nd, "mig_mode", on_off))
  row("NVLink", nvml_value(nd, "nvlink", function(links)
    local up = 0
    for _, active in ipairs(links) do if active then up = up + 1 end end
    return ("%d of %d links active"):format(up, #links) end))
  local fields = {}
  for _, key in ipairs{"name", "uuid", "pci_bus_id", "memory_bus_width", "peak_memory_bandwidth", "pcie",
                       "temperature", "power_usage", "power_limit", "utilization", "ecc", "persistence_mode",
                       "compute_mode", "mig_mode", "nvlink"} do
    fields[key] = nd[key]
  end
  fields.clock_event_reasons = reasons
  fields.clocks = {sm = nd:clock("sm"), memory = nd:clock("memory"), max_sm = nd:max_clock("sm"),
                   max_memory = nd:max_clock("memory")}
  return fields
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
print()
local nvml_ok, nvml_why = cuda.system.is_available()
if nvml_ok then
  print(("NVML: driver %s, NVML %s, devices: %d"):format(cuda.system.driver_version or "n/a",
    cuda.system.nvml_version or "n/a", cuda.system.device_count()))
  for i, entry in ipairs(devices) do entry.nvml = print_nvml_device(cuda.Device(i - 1)) end
else
  print("NVML: not available: " .. nvml_why)
end
-- No figures: every device's properties are the details; the environment names device 0.
results.new("device_query", {device = cuda.Device(0), argv = arg}):finish(args, true, {devices = devices})
