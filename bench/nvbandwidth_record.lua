-- nvbandwidth_record.lua: NVIDIA's nvbandwidth beside `cudalua bandwidth`, as a recording
-- SPDX-License-Identifier: MIT
--
--   cudalua bench/nvbandwidth_record.lua CUDALUA.json MIB:LOOPS:NVBANDWIDTH.json... [--out RECORDING.json]
--
-- CUDALUA.json: `cudalua bandwidth --sizes ... --engines copy,sm --json FILE`. Each MIB:LOOPS:FILE:
-- `nvbandwidth -b MIB --loopCount LOOPS -j` (its JSON on stdout, saved). Prints the side-by-side
-- table: every nvbandwidth testcase that has a counterpart in the cudalua sweep at the same buffer
-- size, GB/s both, and cudalua / nvbandwidth; with --out, writes it as a recording: what one run
-- measured, with the date, the driver and the GPU. A recording is a record of a measurement,
-- not a test fixture: no test reads it, and nothing here says what a run ought to give.
--
-- nvbandwidth times LOOPS copies back to back between two events, after a spin kernel has held
-- the stream until every copy is queued; cudalua bandwidth times one copy between two events
-- behind a memset head start. With LOOPS = 1 both time one copy; with the default 16 each copy's
-- fixed cost is hidden behind the one before (what `cudalua bandwidth`'s fit calls the rate).
-- nvbandwidth's bidirectional testcases report the one direction named while the other runs;
-- cudalua's "both" reports the pair's bytes each way over the pair's time.
local json = require "cuda.json"

-- nvbandwidth testcase -> the cudalua series (path, engine) it measures.
local PAIRS = {
  {"host_to_device_memcpy_ce", "h2d", "copy"},
  {"device_to_host_memcpy_ce", "d2h", "copy"},
  {"host_to_device_bidirectional_memcpy_ce", "both", "copy"},
  {"device_to_host_bidirectional_memcpy_ce", "both", "copy"},
  {"device_local_copy", "d2d", "copy"},
  {"host_to_device_memcpy_sm", "h2d", "sm"},
  {"device_to_host_memcpy_sm", "d2h", "sm"},
  {"host_to_device_bidirectional_memcpy_sm", "both", "sm"},
  {"device_to_host_bidirectional_memcpy_sm", "both", "sm"},
}
local TOLERANCE = 0.02   -- issue 23's target: within 2% at 64 MiB and above

local function fail(message)
  io.stderr:write("nvbandwidth_record: ", message, "\n")
  os.exit(1)
end

local function read_json(path)
  local f, why = io.open(path, "rb")
  if not f then fail(why) end
  local text = f:read("a")
  f:close()
  local ok, doc = pcall(json.decode, text)
  if not ok then fail(("%s: %s"):format(path, tostring(doc))) end
  return doc
end

-- The cudalua point of path/engine at bytes (pinned host memory, or device for d2d).
local function cudalua_point(report, path, engine, bytes)
  for _, s in ipairs(report.details and report.details.series or {}) do
    if s.path == path and s.engine == engine and (s.resource == "pinned" or s.resource == "device") then
      for _, p in ipairs(s.points or {}) do
        if p.bytes == bytes then return p, s end
      end
    end
  end
end

-- GPU 0's figure of a testcase (a 1 x N matrix of strings), or nil and its status.
local function nvbandwidth_value(doc, name)
  for _, tc in ipairs(doc.nvbandwidth and doc.nvbandwidth.testcases or {}) do
    if tc.name == name then
      local row = tc.bandwidth_matrix and tc.bandwidth_matrix[1]
      local value = row and tonumber(row[1])
      return value, tc.status
    end
  end
  return nil, "not run"
end

local function main(argv)
  local cudalua_path, runs, out = nil, {}, nil
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--out" then out, i = argv[i + 1], i + 1
    elseif not cudalua_path then cudalua_path = a
    else
      local mib, loops, path = a:match("^(%d+):(%d+):(.+)$")
      if not mib then fail(("'%s' is not MIB:LOOPS:FILE"):format(a)) end
      runs[#runs + 1] = {mib = tonumber(mib), loops = tonumber(loops), path = path}
    end
    i = i + 1
  end
  if not cudalua_path or #runs == 0 then
    fail("usage: nvbandwidth_record.lua CUDALUA.json MIB:LOOPS:NVBANDWIDTH.json... [--out FILE]")
  end
  local report = read_json(cudalua_path)
  local env = report.environment or {}
  local device = type(env.device) == "table" and env.device or {}
  local rows, nvb_info = {}, nil
  print(("%-40s %5s %5s %12s %12s %8s"):format("nvbandwidth testcase", "MiB", "loops", "nvbandwidth", "cudalua", "ratio"))
  for _, run in ipairs(runs) do
    local doc = read_json(run.path)
    local info = doc.nvbandwidth or {}
    nvb_info = nvb_info or {version = info.version, git_version = info.git_version, driver = info["Driver Version"],
                            cuda = info["CUDA Runtime Version"], devices = info["GPU Device list"]}
    for _, pair in ipairs(PAIRS) do
      local theirs, status = nvbandwidth_value(doc, pair[1])
      local point, series = cudalua_point(report, pair[2], pair[3], run.mib << 20)
      local row = {testcase = pair[1], mib = run.mib, loop_count = run.loops, path = pair[2], engine = pair[3],
                   nvbandwidth_gbps = theirs, nvbandwidth_status = status, cudalua_gbps = point and point.gbps,
                   cudalua_fit_gbps = series and series.fit and series.fit.gbps}
      if theirs and point then
        row.ratio = point.gbps / theirs
        row.within_2_percent = math.abs(row.ratio - 1) <= TOLERANCE
      end
      rows[#rows + 1] = row
      print(("%-40s %5d %5d %12s %12s %8s%s"):format(pair[1], run.mib, run.loops,
        theirs and ("%.2f"):format(theirs) or tostring(status), point and ("%.2f"):format(point.gbps) or "-",
        row.ratio and ("%.3f"):format(row.ratio) or "-", row.ratio and not row.within_2_percent and " *" or ""))
    end
  end
  print("(GB/s = 1e9 bytes/s; ratio = cudalua / nvbandwidth; * more than 2% apart. Bidirectional: nvbandwidth's")
  print(" named direction while the other runs, cudalua's pair each way. loops 1: both time one copy.)")
  if out then
    local recording = {
      recording = "What one run measured on real hardware, kept as a record: not a test fixture, read by no test.",
      date = env.time_utc or os.date("!%Y-%m-%dT%H:%M:%SZ"), gpu = device.name, gpu_uuid = device.uuid,
      pci_bus_id = device.pci_bus_id, pcie_link = {gen = device.pcie_link_gen, width = device.pcie_link_width},
      driver = env.driver_version, hostname = env.hostname,
      cudalua = {version = report.tool and report.tool.version, command_line = env.command_line}, nvbandwidth = nvb_info,
      method = "nvbandwidth v0.8 built from its source; cudalua bandwidth in the same job; see bench/README.md",
      rows = json.array(rows),
    }
    json.write_file(out, recording, {indent = 2})
    print("Recording written to " .. out)
  end
end

main(arg)
