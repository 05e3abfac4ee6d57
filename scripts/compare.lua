-- Compare two results files (--json of any bundled script): every common figure, B / A, and what moved
-- SPDX-License-Identifier: MIT
--
-- Figures are matched by name and unit. A figure is flagged ("*") when the
-- two runs' middle ranges do not overlap: the p10-p90 range of one run's
-- raw samples lies wholly above or below the other's. One noisy sample
-- cannot flag a figure, and a difference inside the runs' own spread is not
-- one. A run without samples for a figure contributes its median alone.
local cli = require "cuda.cli"
local bench = require "cuda.bench"
local results = require "cuda.results"

local parser = cli.parser("compare", results.description())
  :usage("Usage: cudalua compare [options] A.json B.json")
parser:argument("a", "The first results file (the baseline).")
parser:argument("b", "The second results file.")
-- nvbench_compare.py's options, for two NVBench JSON files
parser:option("-b --benchmark", "NVBench JSON: compare only this benchmark (repeatable)."):count("*"):argname("NAME")
parser:option("-a --axis", "NVBench JSON: only states with this axis value: NAME=VALUE, NAME=[V1,V2], " ..
  "NAME[pow2]=E (repeatable)."):count("*"):argname("SPEC")
parser:option("--threshold-diff", "NVBench JSON: show only states whose difference is at least this fraction " ..
  "(all are counted)."):convert(tonumber):argname("FRACTION")
parser:flag("--ignore-devices", "NVBench JSON: accepted; cudalua compare never stops on different device sections.")
parser:flag("--no-color", "Accepted: cudalua compare writes no colour.")
parser:flag("--plot", "nvbench_compare.py's plots: refused (use nvbench_compare.py).")
parser:option("--plot-along", "nvbench_compare.py's plots: refused (use nvbench_compare.py)."):argname("AXIS")
local args = cli.parse(parser, arg)
if args.plot or args.plot_along then
  io.stderr:write("compare: --plot and --plot-along draw with matplotlib: use cuda-bench's nvbench_compare.py for plots\n")
  os.exit(2)
end
if args.threshold_diff and not (args.threshold_diff >= 0 and args.threshold_diff < math.huge) then
  io.stderr:write("compare: --threshold-diff must be a fraction >= 0\n")
  os.exit(2)
end

local function load(path)
  local doc, why = results.read(path)
  if doc then return doc end
  io.stderr:write("compare: ", why, "\n")
  os.exit(1)
end

-- The p10-p90 range of a figure's samples, or its median when it has none.
local function middle_range(r)
  if type(r.samples) ~= "table" or #r.samples == 0 then return r.median, r.median end
  local sorted = table.move(r.samples, 1, #r.samples, 1, {})
  table.sort(sorted)
  return bench.percentile(sorted, 10), bench.percentile(sorted, 90)
end

local function differs(ra, rb)
  local a_lo, a_hi = middle_range(ra)
  local b_lo, b_hi = middle_range(rb)
  return b_lo > a_hi or b_hi < a_lo
end

local function key(r) return r.name .. "\0" .. tostring(r.unit) end

local function describe(label, path, doc)
  local env, tool = doc.environment or {}, doc.tool or {}
  local device = type(env.device) == "table" and env.device.name or "no device"
  print(("%s: %s (%s %s, %s, %s)"):format(label, path, tostring(tool.script), tostring(tool.version),
    tostring(device), tostring(env.time_utc)))
end

-- Each file as JSON, or an error naming it and why (missing, unreadable,
-- empty, truncated or not JSON).
local function decode(path)
  local f, why = io.open(path)
  if not f then
    io.stderr:write("compare: ", why or (path .. ": cannot be read"), "\n")
    os.exit(1)
  end
  local text = f:read("a") or ""
  f:close()
  if text:match("^%s*$") then
    io.stderr:write(("compare: %s: the file is empty\n"):format(path))
    os.exit(1)
  end
  local ok, doc = pcall(require("cuda.json").decode, text)
  if not ok then
    io.stderr:write(("compare: %s: not JSON (%s)\n"):format(path, (tostring(doc):gsub("^.-:%d+: ", ""))))
    os.exit(1)
  end
  return doc
end

-- NVBench JSON (cudalua bench --json, or NVBench's own): state by state, with verdicts.
do
  local nvcompare = require "cuda.bench.compare"
  local da, db = decode(args.a), decode(args.b)
  if nvcompare.is_nvbench(da) or nvcompare.is_nvbench(db) then
    for _, f in ipairs{{args.a, da}, {args.b, db}} do
      if not nvcompare.is_nvbench(f[2]) then
        io.stderr:write(("compare: %s is not NVBench JSON (no \"benchmarks\" list) while %s is: compare like with like\n")
          :format(f[1], f[1] == args.a and args.b or args.a))
        os.exit(1)
      end
      local ok, why = nvcompare.check(f[2])
      if not ok then
        io.stderr:write(("compare: %s: not NVBench JSON as it should be: %s\n"):format(f[1], why))
        os.exit(1)
      end
    end
    local opts = {threshold = args.threshold_diff, axes = {}}
    if #args.benchmark > 0 then
      opts.benchmarks = {}
      for _, name in ipairs(args.benchmark) do opts.benchmarks[name] = true end
    end
    for _, spec in ipairs(args.axis) do
      local filter, why = nvcompare.axis_filter(spec)
      if not filter then io.stderr:write("compare: -a: ", why, "\n"); os.exit(2) end
      opts.axes[#opts.axes + 1] = filter
    end
    print(("Ref: %s\nCmp: %s"):format(args.a, args.b))
    local text = nvcompare.markdown(nvcompare.compare(da, db, opts))
    print(text)
    os.exit(0)
  end
end

if #args.benchmark > 0 or #args.axis > 0 or args.threshold_diff then
  io.stderr:write("compare: -b, -a and --threshold-diff apply to NVBench JSON files (cudalua bench --json)\n")
  os.exit(2)
end
local a, b = load(args.a), load(args.b)
describe("A", args.a, a)
describe("B", args.b, b)
print()
local in_b = {}
for _, r in ipairs(b.results) do in_b[key(r)] = r end
local fmt = "%-44s %-6s %12s %12s %8s  %s"
print((fmt:format("figure", "unit", "A median", "B median", "B / A", ""):gsub("%s+$", "")))
local common, flagged, only_a = 0, 0, {}
for _, ra in ipairs(a.results) do
  local rb = in_b[key(ra)]
  if rb then
    local flag = differs(ra, rb)
    common, flagged = common + 1, flagged + (flag and 1 or 0)
    local ratio = ra.median ~= 0 and ("%.3f"):format(rb.median / ra.median) or "-"
    print((fmt:format(ra.name, tostring(ra.unit or ""), results.format_number(ra.median),
      results.format_number(rb.median), ratio, flag and "*" or ""):gsub("%s+$", "")))
    in_b[key(ra)] = nil
  else
    only_a[#only_a + 1] = ra.name
  end
end
local only_b = {}
for _, rb in ipairs(b.results) do if in_b[key(rb)] then only_b[#only_b + 1] = rb.name end end
print()
print(("%d common figures, %d flagged (*: the p10-p90 ranges of the two runs' samples do not overlap)")
  :format(common, flagged))
if #only_a > 0 then print("Only in A: " .. table.concat(only_a, ", ")) end
if #only_b > 0 then print("Only in B: " .. table.concat(only_b, ", ")) end
if a.passed == false or b.passed == false then
  print(("Note: a run whose verification failed: A %s, B %s"):format(tostring(a.passed), tostring(b.passed)))
end
