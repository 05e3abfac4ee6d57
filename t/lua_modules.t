-- The pure-Lua helpers: cuda.cli, cuda.json, cuda.bench, cuda.timeline.
-- Everything but the last section runs without a GPU: recording is driven
-- through a mock device whose events carry fake timestamps.
local t = require "tap"
local cli = require "cuda.cli"
local json = require "cuda.json"
local bench = require "cuda.bench"
local timeline = require "cuda.timeline"

local cudalua = t.cudalua()
t.seed()

-- --- helpers ------------------------------------------------------------------

local write_file, read_file, temp_dir = t.write_file, t.read_file, t.tmpdir

local list_dir = t.ls

-- Writes a Lua script to a temp file and runs it with the built cudalua.
local function run_script(source, args)
  local path = os.tmpname()
  write_file(path, source)
  local code, out, err = t.run(cudalua .. " " .. path .. " " .. (args or ""))
  os.remove(path)
  return code, out, err
end

local function count(text, plain)
  local n, pos = 0, 1
  while true do
    local s, e = text:find(plain, pos, true)
    if not s then return n end
    n, pos = n + 1, e + 1
  end
end

-- --- cuda.cli: parse exit codes, in child processes ----------------------------

local demo = [[
local cli = require "cuda.cli"
local p = cli.parser("demo", "A demo script for the tests.")
p:option("--size", "Number of elements."):convert(cli.positive_integer):default("16")
p:option("--streams", "Stream counts."):convert(cli.integer_list)
p:option("--mode", "Mode."):convert(cli.choice{"fast", "slow"})
local args = cli.parse(p)
print("size", args.size, math.type(args.size))
print("streams", args.streams and table.concat(args.streams, " ") or "none")
print("mode", args.mode or "none")
]]

local code, out, err = run_script(demo, "--size 16_000_000 --streams 2,4,8 --mode slow")
t.is(code, 0, "cli.parse: valid options exit 0")
t.like(out, "size\t16000000\tinteger", "cli.parse: --size converted to an integer")
t.like(out, "streams\t2 4 8\n", "cli.parse: --streams converted to a list")
t.like(out, "mode\tslow\n", "cli.parse: --mode choice accepted")

code, out, err = run_script(demo, "--bogus")
t.is(code, 2, "cli.parse: unknown option exits 2")
t.like(err, "unknown option '%-%-bogus'", "cli.parse: unknown option is named")
t.like(err, "^Usage: cudalua demo %[options%]", "cli.parse: usage printed on stderr")
t.is(out, "", "cli.parse: nothing on stdout after a usage error")

code, out, err = run_script(demo, "--size 0")
t.is(code, 2, "cli.parse: --size 0 exits 2")
t.like(err, "Error: bad value for %-%-size: '0' is not a positive integer", "cli.parse: converter message names the option")

code, out, err = run_script(demo, "--streams 2,,4")
t.is(code, 2, "cli.parse: bad list exits 2")
t.like(err, "%-%-streams: '2,,4' has an empty item", "cli.parse: bad list is quoted")

code, out, err = run_script(demo, "--mode medium")
t.is(code, 2, "cli.parse: bad choice exits 2")
t.like(err, "%-%-mode: 'medium' is not one of: fast, slow", "cli.parse: choices listed")

-- a converter given positionally to option() is named too
code, out, err = run_script([[
local cli = require "cuda.cli"
local p = cli.parser("demo2", "Positional converter.")
p:option("-n --count", "Count.", "1", cli.positive_integer)
print(cli.parse(p).count)
]], "-n 2.5")
t.is(code, 2, "cli.parse: positional converter error exits 2")
t.like(err, "bad value for %-n: '2%.5' is not a positive integer", "cli.parse: positional converter names the option")

code, out, err = run_script(demo, "--help")
t.is(code, 0, "cli.parse: --help exits 0")
t.like(out, "^Usage: cudalua demo %[options%]", "--help: usage line")
t.like(out, "A demo script for the tests%.", "--help: description")
t.like(out, "%-%-size", "--help: options listed")
t.is(err, "", "--help: nothing on stderr")

-- --- cuda.cli: converters -------------------------------------------------------

-- Random positive integers in three spellings, parsed back exactly.
local function with_underscores(digits)
  local groups = {}
  local head = #digits % 3
  if head > 0 then groups[1] = digits:sub(1, head) end
  for i = head + 1, #digits, 3 do groups[#groups + 1] = digits:sub(i, i + 2) end
  return table.concat(groups, "_")
end

local converter_failures = {}
for _ = 1, 200 do
  local n = math.random(1, 1 << math.random(1, 62))
  local mantissa, exponent = math.random(1, 999), math.random(0, 12)
  local cases = {
    {tostring(n), n},
    {with_underscores(tostring(n)), n},
    {mantissa .. "e" .. exponent, mantissa * 10 ^ exponent // 1},
  }
  for _, case in ipairs(cases) do
    local got = cli.positive_integer(case[1])
    if got ~= case[2] or math.type(got) ~= "integer" then
      converter_failures[#converter_failures + 1] = case[1] .. " -> " .. tostring(got)
    end
  end
end
t.is(#converter_failures, 0, "positive_integer: random decimal, 1_000 and 1e3 spellings")
if #converter_failures > 0 then t.diag(table.concat(converter_failures, "\n")) end
t.is(cli.positive_integer("16e6"), 16000000, "positive_integer: 16e6")
t.is(cli.positive_integer("1.5e3"), 1500, "positive_integer: 1.5e3 is integral")
t.is(cli.positive_integer(tostring(math.maxinteger)), math.maxinteger, "positive_integer: the largest integer")

for _, bad in ipairs{"0", "-5", "1.5", "junk", "", "1e-3", "1.25e1", "0x10", "1__0", "_1",
                     "12 ", "99999999999999999999", "1e30", "0e5"} do
  local value, message = cli.positive_integer(bad)
  t.ok(value == nil and type(message) == "string" and message:find(bad, 1, true),
    ("positive_integer rejects '%s' with a message naming it (%s)"):format(bad, tostring(message)))
end

local list_failures = 0
for _ = 1, 100 do
  local want = {}
  for i = 1, math.random(1, 8) do want[i] = math.random(1, 100000) end
  local got = cli.integer_list(table.concat(want, ","))
  if not got or #got ~= #want then
    list_failures = list_failures + 1
  else
    for i = 1, #want do if got[i] ~= want[i] then list_failures = list_failures + 1 end end
  end
end
t.is(list_failures, 0, "integer_list: random lists read back")

for _, bad in ipairs{"0", "", "2,,4", "-2,4", "2,", ",2", "2,x", "2;4"} do
  local value, message = cli.integer_list(bad)
  t.ok(value == nil and type(message) == "string" and (message:find(bad, 1, true) or bad == ""),
    ("integer_list rejects '%s' (%s)"):format(bad, tostring(message)))
end

local pick = cli.choice{"red", "green"}
t.is(pick("green"), "green", "choice: accepts a listed word")
local none, why = pick("blue")
t.ok(none == nil and why:find("blue", 1, true) and why:find("red, green", 1, true),
  "choice: rejects others, listing the choices")

-- --- cuda.cli: formatting ---------------------------------------------------------

t.is(cli.format_int(16000000), "16,000,000", "format_int: the sample's size")
t.is(cli.format_int(999), "999", "format_int: no separator below 1000")
t.is(cli.format_int(-1234), "-1,234", "format_int: negative")
local format_failures = 0
for _ = 1, 200 do
  local n = math.random(math.mininteger, math.maxinteger) >> math.random(0, 63)
  if math.random(2) == 1 then n = -n end
  local text = cli.format_int(n)
  local grouped = text:match("^%-?%d%d?%d?$") or text:match("^%-?%d%d?%d?,[%d,]*%d$")
  local groups_ok = grouped and not text:find("%d%d%d%d") and not text:find(",%d?%d?,")
    and not text:find(",%d?%d?$")
  if text:gsub(",", "") ~= tostring(n) or not groups_ok then
    format_failures = format_failures + 1
    t.diag(("format_int(%d) = %s"):format(n, text))
  end
end
t.is(format_failures, 0, "format_int: random integers grouped by threes")

t.is(cli.format_bytes(16e6 * 4), "61 MB", "format_bytes: 64e6 bytes as in the sample")
t.is(cli.format_bytes(512), "512 B", "format_bytes: bytes")
t.is(cli.format_bytes(1024), "1 KB", "format_bytes: 1 KiB")
t.is(cli.format_bytes(1536), "1.5 KB", "format_bytes: one decimal below 10")
t.is(cli.format_bytes(3 * 2^30), "3 GB", "format_bytes: GiB")
t.is(cli.format_bytes(2^20 - 1), "1 MB", "format_bytes: rounding up moves to the next unit")
local bytes_failures = 0
for _ = 1, 100 do
  local mib = math.random(10, 1000) + math.random()
  local text = cli.format_bytes(mib * 2^20)
  local shown = tonumber(text:match("^(%d+) MB$"))
  if not shown or math.abs(shown - mib) > 0.5 + 1e-9 then
    bytes_failures = bytes_failures + 1
    t.diag(("format_bytes(%.0f) = %s, want about %.2f MB"):format(mib * 2^20, text, mib))
  end
end
t.is(bytes_failures, 0, "format_bytes: random sizes in MB, rounded")

-- --- cuda.cli: progress -------------------------------------------------------------

code, out, err = run_script([[
local cli = require "cuda.cli"
local p = cli.progress(50, "working")
for _ = 1, 50 do p:step() ; local t0 = os.clock() while os.clock() - t0 < 0.005 do end end
p:done()
print("finished")
]])
t.is(out, "finished\n", "progress: script ran")
t.is(err, "", "progress: silent when stderr is not a terminal")

-- Forced on, with a fake clock: 1000 steps over 2 simulated seconds.
do
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  local now = 0
  local p = cli.progress(1000, "copying", {tty = true, file = f, clock = function() return now end})
  for _ = 1, 1000 do now = now + 0.002; p:step() end
  p:done()
  f:close()
  local drawn = read_file(path)
  os.remove(path)
  local redraws = count(drawn, "copying [")
  t.ok(redraws >= 2 and redraws <= 21, ("progress: throttled to ~10 redraws a second (%d in 2 s)"):format(redraws))
  t.like(drawn, "^\rcopying %[", "progress: draws from the start of the line")
  t.ok(drawn:sub(-4) == "\r\27[K", "progress: line cleared at the end")
  t.like(drawn, "%(%d+/1000%)", "progress: shows the count")
end

do
  local quiet = cli.progress(10, "x", {tty = false})
  local ok = pcall(function()
    local q <close> = quiet
    q:step(3)
  end)
  t.ok(ok, "progress: the no-op object takes step, done and <close>")
end

-- --- cuda.json ----------------------------------------------------------------------

local function random_string()
  local parts = {}
  for i = 1, math.random(0, 12) do
    local kind = math.random(6)
    if kind == 1 then parts[i] = string.char(math.random(0, 31))
    elseif kind == 2 then parts[i] = ({'"', "\\", "/", "\127"})[math.random(4)]
    elseif kind == 3 then parts[i] = string.char(math.random(32, 126))
    elseif kind == 4 then parts[i] = utf8.char(math.random(0x80, 0x7FF))
    elseif kind == 5 then parts[i] = utf8.char(math.random(0xE000, 0xFFFD))
    else parts[i] = utf8.char(math.random(0x10000, 0x10FFFF))
    end
  end
  return table.concat(parts)
end

local function random_float()
  local kind = math.random(3)
  if kind == 1 then return (math.random() - 0.5) * 10.0 ^ math.random(-300, 300) end
  if kind == 2 then return math.random(-1000000, 1000000) + 0.0 end   -- integral float
  return math.random() * 100
end

local random_value
local function random_table(depth)
  local result = {}
  if math.random(2) == 1 then
    for i = 1, math.random(0, 5) do result[i] = random_value(depth + 1) end
    if #result == 0 and math.random(2) == 1 then json.array(result) end
  else
    for _ = 1, math.random(0, 5) do result[random_string()] = random_value(depth + 1) end
  end
  return result
end

function random_value(depth)
  local kind = math.random(depth > 3 and 5 or 7)
  if kind == 1 then return math.random(0) end                  -- any 64-bit integer
  if kind == 2 then return random_float() end
  if kind == 3 then return random_string() end
  if kind == 4 then return math.random(2) == 1 end
  if kind == 5 then return math.random(3) == 1 and json.null or math.random(-100, 100) end
  return random_table(depth)
end

-- Same structure, same values, same number subtypes.
local function deep_equal(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) == "number" then return math.type(a) == math.type(b) and a == b end
  if type(a) ~= "table" or a == json.null or b == json.null then return a == b end
  for k, v in pairs(a) do if not deep_equal(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

local roundtrip_failures = 0
for i = 1, 300 do
  local value = random_value(0)
  local opts = i % 2 == 0 and {indent = 2} or nil
  local ok, text = pcall(json.encode, value, opts)
  local ok2, back = false, nil
  if ok then ok2, back = pcall(json.decode, text) end
  if not (ok2 and deep_equal(value, back) and json.encode(back, opts) == text) then
    roundtrip_failures = roundtrip_failures + 1
    if roundtrip_failures <= 3 then t.diag("round trip failed: " .. tostring(ok and text or text)) end
  end
end
t.is(roundtrip_failures, 0, "json: 300 random nested values round-trip (compact and indented)")

local float_failures = 0
for _ = 1, 1000 do
  local x = random_float()
  local back = tonumber(json.encode(x))
  if back ~= x or math.type(back) ~= "float" then float_failures = float_failures + 1 end
end
t.is(float_failures, 0, "json: random floats read back exactly, as floats")

t.is(json.encode("a\"b\\c\n\1/é"), [["a\"b\\c\n\u0001/é"]], "json: string escapes, UTF-8 passed through")
t.is(json.encode({b = 1, a = {true, false}, c = {}}), [[{"a":[true,false],"b":1,"c":{}}]],
  "json: keys sorted, arrays, empty table is an object")
t.is(json.encode(json.array({})), "[]", "json: json.array marks an empty array")
t.is(json.encode({3, 3.0, 0.1, -2}), "[3,3.0,0.1,-2]", "json: integers and floats distinguished")
t.is(json.encode({a = {1}}, {indent = 2}), '{\n  "a": [\n    1\n  ]\n}', "json: indentation")
t.is(json.decode('"\\ud83d\\ude00\\u00e9\\n"'), utf8.char(0x1F600, 0xE9) .. "\n",
  "json: \\u escapes and surrogate pairs decode to UTF-8")
t.is(json.decode(' [1, 2.5e1, -0, null] ')[2], 25.0, "json: exponent numbers")
t.ok(json.decode("[null]")[1] == json.null, "json: null decodes to json.null")
t.is(math.type(json.decode("12345")), "integer", "json: integers decode as integers")
t.is(math.type(json.decode("[1e2]")[1]), "float", "json: exponent numbers decode as floats")

t.raises(function() json.encode(0 / 0) end, "NaN", "json: NaN rejected")
t.raises(function() json.encode({x = math.huge}) end, "infinity", "json: inf rejected")
t.raises(function() json.encode({-math.huge}) end, "infinity", "json: -inf rejected")
t.raises(function() json.encode({print}) end, "type function", "json: functions rejected")
t.raises(function() local c = {}; c.c = c; json.encode(c) end, "cyclic", "json: cycles rejected")
t.raises(function() json.encode({1, nil, 3}) end, "sparse", "json: sparse arrays rejected")
for _, bad in ipairs{"", "[1,]", "{\"a\" 1}", "01", "1.", "\"abc", "[1] x", "tru", "\"\1\"",
                     "{1: 2}", "\"\\q\"", "\"\\ud800\""} do
  t.raises(function() json.decode(bad) end, "^json%.decode: .* at line %d+ column %d+",
    ("json: decode rejects %q"):format(bad))
end

-- json.write_file: atomic replace, nothing left behind.
do
  local dir = temp_dir()
  local path = dir .. "/result.json"
  local first = {run = 1, values = {1.5, 2.5}}
  json.write_file(path, first)
  t.ok(deep_equal(json.decode(read_file(path)), first), "write_file: content reads back")
  local second = {run = 2}
  json.write_file(path, second)
  t.ok(deep_equal(json.decode(read_file(path)), second), "write_file: replaces an existing file")
  t.is(table.concat(list_dir(dir), " "), "result.json", "write_file: no temporary file left")
  t.raises(function() json.write_file(path, {bad = 0 / 0}) end, "NaN", "write_file: encode errors raise")
  t.ok(deep_equal(json.decode(read_file(path)), second), "write_file: failed write keeps the old file")
  t.raises(function() json.write_file(dir .. "/missing/x.json", {}) end, "cannot write",
    "write_file: unwritable path raises")
  -- a folder in the way: refused before anything is written
  local blocker = dir .. "/blocker"
  os.execute("mkdir -p '" .. blocker .. "/inner'")
  t.raises(function() json.write_file(blocker, {}) end, "cannot write", "write_file: failed rename raises")
  os.remove(blocker .. "/inner")
  os.remove(blocker)
  t.is(table.concat(list_dir(dir), " "), "result.json", "write_file: still no temporary file after failures")
  -- a symlink is followed: the link stays, its target is replaced
  local target, link = dir .. "/target.json", dir .. "/link.json"
  write_file(target, "{}")
  os.execute("ln -s target.json '" .. link .. "'")
  json.write_file(link, {replaced = true})
  t.ok(json.decode(read_file(target)).replaced == true and os.execute("test -L '" .. link .. "'"),
    "write_file: through a symlink, replaces its target and keeps the link")
  os.remove(link)
  os.remove(target)
  os.remove(path)
  os.remove(dir)
end

-- --- cuda.bench: statistics ------------------------------------------------------------

-- Independent reference: sort and pick; mean, then a second pass for std.
local function reference_stats(xs)
  local sorted = {}
  for i, x in ipairs(xs) do sorted[i] = x end
  table.sort(sorted)
  local n, sum, lo, hi = #xs, 0, math.huge, -math.huge
  for _, x in ipairs(xs) do sum, lo, hi = sum + x, math.min(lo, x), math.max(hi, x) end
  local mean = sum / n
  local ss = 0
  for _, x in ipairs(xs) do ss = ss + (x - mean) * (x - mean) end
  local median
  if n % 2 == 1 then median = sorted[(n + 1) // 2]
  else median = (sorted[n // 2] + sorted[n // 2 + 1]) / 2 end
  return {n = n, mean = mean, median = median, min = lo, max = hi, std = n > 1 and math.sqrt(ss / (n - 1)) or 0}
end

local stats_failures = {}
for trial = 1, 100 do
  local xs = {}
  local scale = 10 ^ math.random(-3, 3)
  for i = 1, math.random(1, 40) do xs[i] = math.random() * scale + (trial % 7) end
  local original = table.concat(xs, ",")
  local got, want = bench.stats(xs), reference_stats(xs)
  for _, key in ipairs{"n", "mean", "median", "min", "max", "std"} do
    if math.abs(got[key] - want[key]) > 1e-9 * math.max(1, math.abs(want[key])) then
      stats_failures[#stats_failures + 1] = ("trial %d %s: got %s want %s"):format(trial, key, got[key], want[key])
    end
  end
  -- the median splits the samples in half, whatever way it was computed
  local below, above = 0, 0
  for _, x in ipairs(xs) do
    if x < got.median then below = below + 1 elseif x > got.median then above = above + 1 end
  end
  if below > #xs / 2 or above > #xs / 2 then stats_failures[#stats_failures + 1] = "median does not split" end
  if table.concat(xs, ",") ~= original then stats_failures[#stats_failures + 1] = "input modified" end
  for i = 2, #got.samples do
    if got.samples[i - 1] > got.samples[i] then stats_failures[#stats_failures + 1] = "samples not sorted" end
  end
  if #got.samples ~= #xs then stats_failures[#stats_failures + 1] = "samples count" end
end
t.is(#stats_failures, 0, "bench.stats: 100 random sample sets against an independent computation")
if #stats_failures > 0 then t.diag(table.concat(stats_failures, "\n", 1, math.min(5, #stats_failures))) end
t.is(bench.stats({4.0}).std, 0.0, "bench.stats: one sample has std 0")
t.raises(function() bench.stats({}) end, "at least one sample", "bench.stats: empty input rejected")
t.is(bench.format_ms({median = 1.234, std = 0.0412}), "1.23 ms (\u{b1}0.04)", "bench.format_ms")

-- --- cuda.bench.reference: running a raw C reference program ----------------------------

do
  local dir = temp_dir()
  local function program(name, body)
    local path = dir .. "/" .. name
    write_file(path, "#!/bin/sh\n" .. body)
    os.execute("chmod +x '" .. path .. "'")
    return path
  end
  local columns = {"median", "min", "max"}
  local good = program("good ref", [[
printf '%s\n' "$@" > "$(dirname "$0")/args"
echo "# good_ref: a header"
echo "h2d 1.25 1.0 2e0"
echo "streams_4 0.5 0.25 0.75"
]])
  local figures, header = bench.reference(good, {"--elements", 1000, "it's spaced"}, columns)
  t.ok(figures and figures.h2d.median == 1.25 and figures.h2d.min == 1.0 and figures.h2d.max == 2.0,
    "bench.reference: a figure's numbers by column name")
  t.ok(figures and figures.streams_4.max == 0.75, "bench.reference: every figure line")
  t.is(header and header[1], "# good_ref: a header", "bench.reference: '#' lines are the header")
  t.is(read_file(dir .. "/args"), "--elements\n1000\nit's spaced\n",
    "bench.reference: each argument reaches the program as one word, quotes and all")
  local stray = program("stray", 'echo "h2d 1.25 1.0"\necho "kernel 1 2 3"\n')
  local none, why = bench.reference(stray, {}, columns)
  t.ok(none == nil and why:find("not '<key> <median> <min> <max>'", 1, true) and why:find('"h2d 1.25 1.0"', 1, true),
    "bench.reference: a line with too few numbers is an error that quotes it")
  none, why = bench.reference(program("words", 'echo "h2d fast 1 2"\n'), {}, columns)
  t.ok(none == nil and why:find("fast", 1, true), "bench.reference: a word where a number belongs is an error")
  none, why = bench.reference(program("fails", "echo 'h2d 1 1 1'\nexit 3\n"), {}, columns)
  t.ok(none == nil and why:find("fails failed (exit 3)", 1, true),
    "bench.reference: a failing program is an error with its exit status")
  none, why = bench.reference(dir .. "/missing", {}, columns)
  t.ok(none == nil and why:find("missing failed", 1, true), "bench.reference: a missing program is an error")
  os.execute("rm -rf '" .. dir .. "'")
end

-- --- a mock GPU: events carry fake timestamps --------------------------------------------

local function mock_gpu()
  local gpu = {now = 0.0, created = 0, closed = 0, event_syncs = 0, stream_syncs = 0}
  local Event = {}
  Event.__index = Event
  Event.__sub = function(later, earlier)
    assert(later.t and earlier.t, "cannot time events: never recorded")
    return later.t - earlier.t
  end
  function Event:sync() gpu.event_syncs = gpu.event_syncs + 1 end
  function Event:close()
    if not self.closed then self.closed = true; gpu.closed = gpu.closed + 1 end
  end
  local device = {}
  function device.create_event(_, opts)
    assert(opts and opts.timing, "timing events expected")
    gpu.created = gpu.created + 1
    return setmetatable({}, Event)
  end
  function gpu.stream(name)
    local stream = {device = device, name = name}
    function stream.record(_, ev)
      assert(not ev.closed, "recording a closed event")
      ev.t = gpu.now
      return ev
    end
    function stream.sync() gpu.stream_syncs = gpu.stream_syncs + 1 end
    return stream
  end
  gpu.device = device
  return gpu
end

-- --- cuda.bench: time and host -----------------------------------------------------------

do
  local gpu = mock_gpu()
  local stream = gpu.stream("s")
  local durations, calls, wrong_stream, created_in_loop = {}, 0, false, false
  local stats = bench.time(stream, function(s)
    calls = calls + 1
    if s ~= stream then wrong_stream = true end
    if gpu.created ~= 2 then created_in_loop = true end
    local d = math.random() * 5
    durations[calls] = d
    gpu.now = gpu.now + d
  end, {warmup = 4, runs = 9})
  t.is(calls, 13, "bench.time: fn called warmup + runs times")
  t.ok(not wrong_stream, "bench.time: fn receives the stream")
  t.ok(not created_in_loop and gpu.created == 2, "bench.time: two events, created before the first call")
  t.is(gpu.closed, 2, "bench.time: its own events are closed afterwards")
  t.ok(gpu.stream_syncs >= 1 and gpu.event_syncs >= 9, "bench.time: waits for warm-up and each run")
  local timed = table.move(durations, 5, 13, 1, {})
  local want = reference_stats(timed)
  t.is(stats.n, 9, "bench.time: one sample per run")
  t.near(stats.median, want.median, 1e-12, "bench.time: median of the timed runs only")
  t.near(stats.std, want.std, 1e-12, "bench.time: std of the timed runs")

  local events = {gpu.device:create_event{timing = true}, gpu.device:create_event{timing = true}}
  local before = gpu.created
  bench.time(stream, function() gpu.now = gpu.now + 1 end, {events = events, warmup = 0, runs = 2})
  t.ok(gpu.created == before and not events[1].closed, "bench.time: caller's events used and left open")
  t.raises(function() bench.time(stream, function() end, {runs = 0}) end, "runs", "bench.time: runs >= 1")
end

do
  local now, costs = 0, {}
  local function fn()
    local c = math.random() * 1e-3
    costs[#costs + 1] = c
    now = now + c
  end
  local stats = bench.host(fn, {warmup = 2, runs = 5, inner = 7, clock = function() return now end})
  t.is(#costs, (2 + 5) * 7, "bench.host: warmup and runs batches of inner calls")
  local per_call = {}
  for run = 1, 5 do
    local sum = 0
    for i = 1, 7 do sum = sum + costs[(2 + run - 1) * 7 + i] end
    per_call[run] = sum / 7 * 1000
  end
  local want = reference_stats(per_call)
  t.near(stats.median, want.median, 1e-9, "bench.host: median per-call time in ms")
  t.near(stats.max, want.max, 1e-9, "bench.host: max per-call time in ms")
end

-- --- cuda.timeline: recording (mock) ----------------------------------------------------

do
  local gpu = mock_gpu()
  local s1, s2 = gpu.stream("s1"), gpu.stream("s2")
  local tl = timeline.new(gpu.device, {capacity = 4})
  local created = gpu.created
  t.is(created, 9, "timeline.new: events for 4 spans and an origin created up front")
  gpu.now = 100; tl:origin(s1)
  gpu.now = 103; local b = tl:begin(s2, "stream 2", "kernel")
  gpu.now = 101; local a = tl:begin(s1, "stream 1", "H2D")
  gpu.now = 102; tl:finish(s1, a)
  gpu.now = 107; tl:finish(s2, b)
  t.is(gpu.created, created, "timeline: recording creates no events")
  local spans = tl:collect()
  t.is(#spans, 2, "collect: both spans")
  t.ok(spans[1].label == "H2D" and spans[1].row == "stream 1" and spans[1].start_ms == 1 and spans[1].end_ms == 2,
    "collect: first span relative to the origin")
  t.ok(spans[2].label == "kernel" and spans[2].start_ms == 3 and spans[2].end_ms == 7,
    "collect: sorted by start, relative to the origin")

  tl:reset()
  gpu.now = 50; local x = tl:begin(s1, "r", "x")
  gpu.now = 45; local y = tl:begin(s2, "q", "y")
  gpu.now = 60; tl:finish(s1, x); tl:finish(s2, y)
  spans = tl:collect()
  t.ok(spans[1].label == "y" and spans[1].start_ms == 0 and spans[2].start_ms == 5,
    "collect: without an origin the earliest start is 0")

  tl:reset()
  local open = tl:begin(s1, "r", "open")
  t.raises(function() tl:collect() end, "never finished", "collect: unfinished span is an error")
  tl:finish(s1, open)
  t.raises(function() tl:finish(s1, open) end, "already finished", "finish: twice is an error")
  tl:reset()
  t.raises(function()
    for i = 1, 5 do tl:finish(s1, tl:begin(s1, "r", "span " .. i)) end
  end, "capacity", "timeline: capacity exhaustion is a clear error")
  tl:close()
  t.is(gpu.closed, gpu.created, "timeline:close closes every event")
end

-- --- cuda.timeline: Gantt chart -----------------------------------------------------------

-- The bar of a row: the text between the "|" borders of its (first) line.
local function bar_of(chart, row)
  for line in chart:gmatch("[^\n]+") do
    local name, bar = line:match("^(.-) |(.*)|$")
    if name and name:match("^%s*(.-)%s*$") == row then return bar end
  end
end

-- Expected cells, from the documented scaling: cell c covers
-- [c, c+1) * total / cells; a span covers the cells it touches, at least one.
local function expected_cells(s, total, cells)
  local first = math.floor(s.start_ms * cells / total)
  local last = math.ceil(s.end_ms * cells / total) - 1
  return first, math.max(first, math.min(last, cells - 1))
end

do
  -- rows "a" and "bb": name column 2 wide, so width 55 leaves 50 cells, 5 per ms
  local spans = {
    {row = "a", label = "H2D", start_ms = 0, end_ms = 2},
    {row = "a", label = "kernel", start_ms = 2, end_ms = 6},
    {row = "a", label = "D2H", start_ms = 6, end_ms = 7},
    {row = "bb", label = "H2D", start_ms = 2, end_ms = 4},
    {row = "bb", label = "kernel", start_ms = 6, end_ms = 10},
  }
  local chart = timeline.gantt(spans, {width = 55})
  local bar_a, bar_b = bar_of(chart, "a"), bar_of(chart, "bb")
  t.is(bar_a and #bar_a, 50, "gantt: bar fills the width")
  t.is(bar_a, (">"):rep(10) .. ("#"):rep(20) .. ("<"):rep(5) .. (" "):rep(15), "gantt: row a cells")
  t.is(bar_b, (" "):rep(10) .. (">"):rep(10) .. (" "):rep(10) .. ("#"):rep(20), "gantt: row b cells")
  t.like(chart, "> H2D", "gantt: legend H2D")
  t.like(chart, "# kernel", "gantt: legend kernel")
  t.like(chart, "< D2H", "gantt: legend D2H")
  t.like(chart, "\n    %+%-+%+%-+%+", "gantt: axis ruler under the bars")
  t.like(chart, "\n    0 ", "gantt: axis starts at 0")
  t.ok(chart:find("^a ") and chart:find("\nbb "), "gantt: rows in order of first span")
  local reordered = timeline.gantt(spans, {width = 55, rows = {"bb", "a"}})
  t.ok(reordered:find("^bb ") ~= nil, "gantt: opts.rows orders rows")
end

do
  -- random single spans, one row each, each with its own symbol
  local failures = 0
  for _ = 1, 50 do
    local width = math.random(30, 140)
    local spans, symbols = {}, {}
    local total = math.random(1, 1000) / 10
    for i = 1, math.random(1, 6) do
      local a, b = math.random() * total, math.random() * total
      if math.random(5) == 1 then b = a end                       -- zero-length
      local kind = "k" .. i
      symbols[kind] = string.char(64 + i)                         -- A, B, ...
      spans[i] = {row = "row" .. i, label = kind, start_ms = math.min(a, b), end_ms = math.max(a, b)}
    end
    local chart = timeline.gantt(spans, {width = width, total_ms = total, symbols = symbols})
    for i, s in ipairs(spans) do
      local bar = bar_of(chart, "row" .. i)
      local cells = bar and #bar or 0
      local first, last = expected_cells(s, total, cells)
      local sym = symbols[s.label]
      local got_first, got_last = bar and bar:find(sym, 1, true), bar and bar:match(".*()" .. sym)
      if got_first ~= first + 1 or got_last ~= last + 1 or cells ~= width - #("row" .. i) - 3 then
        failures = failures + 1
        t.diag(("width %d total %s span %s..%s: cells %s-%s, want %s-%s"):format(
          width, total, s.start_ms, s.end_ms, got_first, got_last, first + 1, last + 1))
      end
    end
    for line in chart:gmatch("[^\n]+") do
      if utf8.len(line) > width then failures = failures + 1; t.diag("too wide: " .. line) end
    end
  end
  t.is(failures, 0, "gantt: random spans start and end in the right cells; lines within width")
end

do
  local spans = {
    {row = "host", label = "iteration", start_ms = 0, end_ms = 10},
    {row = "host", label = "sync", start_ms = 2, end_ms = 8},
    {row = "host", label = "tick", start_ms = 5, end_ms = 5},
  }
  local symbols = {iteration = "=", sync = "s", tick = "!"}
  local chart = timeline.gantt(spans, {width = 40, symbols = symbols})
  local lanes = {}
  for line in chart:gmatch("[^\n]+") do
    if line:match("|$") then lanes[#lanes + 1] = line end
  end
  t.is(#lanes, 3, "gantt: overlapping spans in one row get separate lanes")
  t.ok(chart:find("=", 1, true) and chart:find("s", 1, true) and chart:find("!", 1, true),
    "gantt: no overlapping span hidden; zero-length span drawn")

  local narrow = timeline.gantt(spans, {width = 16, symbols = symbols})
  local too_wide = false
  for line in narrow:gmatch("[^\n]+") do if #line > 16 then too_wide = true end end
  t.ok(not too_wide, "gantt: narrow width respected")
  local narrow_bar = bar_of(narrow, "hos")
  t.is(narrow_bar and #narrow_bar, 10, "gantt: narrow width cuts the name, keeps 10 cells")
  t.is(timeline.gantt({}), "(no spans)\n", "gantt: empty span list")
end

-- --- cuda.timeline: Chrome trace -----------------------------------------------------------

do
  local spans = {}
  local rows = {"stream 1", "stream 2", "host"}
  for i = 1, 30 do
    local start = math.random() * 50
    spans[i] = {row = rows[math.random(#rows)], label = "op" .. i, start_ms = start,
                end_ms = start + math.random() * 5}
  end
  local trace = json.decode(json.encode(timeline.chrome_trace(spans, {process_name = "trace test"})))
  local thread_names, process_name, complete = {}, nil, {}
  for _, ev in ipairs(trace.traceEvents) do
    if ev.ph == "M" and ev.name == "thread_name" then thread_names[ev.tid] = ev.args.name end
    if ev.ph == "M" and ev.name == "process_name" then process_name = ev.args.name end
    if ev.ph == "X" then complete[ev.name] = ev end
  end
  t.is(process_name, "trace test", "chrome_trace: process name")
  local bad = 0
  for _, s in ipairs(spans) do
    local ev = complete[s.label]
    if not ev or thread_names[ev.tid] ~= s.row or math.abs(ev.ts - s.start_ms * 1000) > 1e-3
       or math.abs(ev.dur - (s.end_ms - s.start_ms) * 1000) > 2e-3 then
      bad = bad + 1
    end
  end
  t.is(bad, 0, "chrome_trace: every span present with its row, ts and dur in microseconds")
  local x_count = 0
  for _ in pairs(complete) do x_count = x_count + 1 end
  t.is(x_count, #spans, "chrome_trace: one complete event per span")

  local dir = temp_dir()
  local path = dir .. "/trace.json"
  timeline.write_chrome_trace(path, spans, {process_name = "file"})
  local back = json.decode(read_file(path) or "null")
  t.ok(type(back) == "table" and #back.traceEvents == #trace.traceEvents,
    "write_chrome_trace: file decodes to the same events")
  os.remove(path)
  os.remove(dir)
end

-- --- on a GPU -----------------------------------------------------------------------------

local GPU_TESTS = 8
local cuda = require "cuda"
local available, reason = cuda.is_available()
if not available then
  t.skip("no CUDA device (" .. tostring(reason) .. ")", GPU_TESTS)
else
  local dev = cuda.Device(0)
  dev:set_current()
  local s1 = dev:create_stream()
  local s2 = dev:create_stream()
  local nbytes = 64 << 20
  local buf1 = dev.memory_resource:allocate(nbytes, s1)
  local buf2 = dev.memory_resource:allocate(nbytes, s2)

  local stats = bench.time(s1, function(s) buf1:fill(1, s) end, {warmup = 2, runs = 5})
  t.is(stats.n, 5, "gpu bench.time: five samples")
  t.ok(stats.min > 0 and stats.max < 1e4, "gpu bench.time: positive, finite times: " .. bench.format_ms(stats))

  local tl <close> = timeline.new(dev, {capacity = 8})
  tl:origin(s1)
  s2:wait(s1)
  local a = tl:begin(s1, "s1", "fill A")
  buf1:fill(2, s1)
  tl:finish(s1, a)
  local b = tl:begin(s2, "s2", "fill B")
  buf2:fill(3, s2)
  tl:finish(s2, b)
  local c = tl:begin(s1, "s1", "fill A again")
  buf1:fill(4, s1)
  tl:finish(s1, c)
  local spans = tl:collect()
  t.is(#spans, 3, "gpu timeline: three spans")
  local ordered, sane = true, true
  for i, s in ipairs(spans) do
    if i > 1 and spans[i - 1].start_ms > s.start_ms then ordered = false end
    if not (s.start_ms >= 0 and s.end_ms >= s.start_ms) then sane = false end
  end
  t.ok(ordered, "gpu timeline: spans ordered by start")
  t.ok(sane, "gpu timeline: spans start after the origin and end after they start")
  local by_label = {}
  for _, s in ipairs(spans) do by_label[s.label] = s end
  local first, again = by_label["fill A"], by_label["fill A again"]
  t.ok(first and again and first.row == "s1" and first.end_ms <= again.start_ms + 1e-3,
    "gpu timeline: work on one stream is in stream order")
  local rows = {}
  for _, s in ipairs(spans) do rows[s.row] = true end
  t.ok(rows.s1 and rows.s2, "gpu timeline: both streams' rows")
  local chart = timeline.gantt(spans, {width = 60})
  t.ok(bar_of(chart, "s1") and bar_of(chart, "s2"), "gpu timeline: chart has both rows")
  t.diag(chart)
  buf1:close(s1)
  buf2:close(s2)
  s1:sync()
  s2:sync()
end

t.done()
