-- cudalua compare A.json B.json on results files written here: the ratio
-- of every common figure, the flag where the runs' p10-p90 ranges part,
-- and a clear error, exit 1, for a file that is not a results file.
local t = require "tap"
local json = require "cuda.json"
local cudalua = t.cudalua()

t.plan(16)
t.seed()

local dir = t.tmpdir()

-- A results file with one figure per {name, unit, samples}.
local function write_results(name, figures, passed)
  local list = {}
  for i, f in ipairs(figures) do
    local sorted = table.move(f[3], 1, #f[3], 1, {})
    table.sort(sorted)
    list[i] = {name = f[1], unit = f[2], samples = f[3], median = sorted[(#sorted + 1) // 2], n = #sorted}
  end
  local path = dir .. "/" .. name
  t.write_file(path, json.encode{schema = "cudalua-results/1", tool = {name = "cudalua", script = "demo"},
                                 environment = {device = {name = "Test GPU"}}, results = list, passed = passed})
  return path
end

-- Ten samples around a centre, spread +-1%: one drawn from each tenth of
-- the range (in random order), so that two such runs' p10-p90 ranges always
-- overlap; ten plain uniform draws part now and then (a CI run drew one).
local function around(centre)
  local xs = {}
  for i = 1, 10 do xs[i] = centre * (0.99 + 0.002 * (i - 1 + math.random())) end
  for i = 10, 2, -1 do
    local j = math.random(i)
    xs[i], xs[j] = xs[j], xs[i]
  end
  return xs
end

local base = 1 + math.random() * 10
local a = write_results("a.json", {{"steady", "ms", around(base)}, {"slower", "ms", around(base)},
                                   {"gone", "us", around(3)}, {"shared name", "ms", around(base)}}, true)
local b = write_results("b.json", {{"steady", "ms", around(base)}, {"slower", "ms", around(base * 1.5)},
                                   {"new", "us", around(3)}, {"shared name", "GB/s", around(base)}}, true)
local code, out, err = t.run(cudalua .. " compare '" .. a .. "' '" .. b .. "'")
t.is(code, 0, "compare exits 0" .. err)
local function row(name) return out:match("\n(" .. name:gsub("%p", "%%%0") .. " [^\n]*)") or "" end
t.like(row("steady"), "^steady +ms +[%d.]+ +[%d.]+ +[01]%.%d%d%d$", "an unchanged figure: its ratio, no flag")
t.like(row("slower"), " 1%.[45]%d%d  %*$", "a figure 1.5x slower: ratio about 1.5, flagged")
local ra, rb = row("slower"):match("ms +([%d.]+) +([%d.]+)")
t.near(tonumber(row("slower"):match("([%d.]+)  %*$")), tonumber(rb) / tonumber(ra), 2e-3, "ratio is B / A")
t.like(out, "Only in A: gone, shared name", "figures only in A are named (a unit must match too)")
t.like(out, "Only in B: new, shared name", "and those only in B")
t.like(out, "2 common figures, 1 flagged", "the counts")
t.like(out, "A: [^\n]*a%.json %(demo", "A's file and script are named")

-- one stray sample does not flag: the p10-p90 ranges still overlap
local noisy = around(base)
noisy[1] = base * 3
local c = write_results("c.json", {{"steady", "ms", noisy}}, false)
code, out = t.run(cudalua .. " compare '" .. a .. "' '" .. c .. "'")
t.like(row("steady"), "[%d.]+$", "an outlier alone does not flag a figure")
t.like(out, "verification failed: A true, B false", "a failed run is pointed out")

-- bad files
code, out, err = t.run(cudalua .. " compare '" .. a .. "' '" .. dir .. "/missing.json'")
t.is(code, 1, "a missing file: exit 1")
t.like(err, "^compare: [^\n]*missing%.json", "and the error names it")
t.write_file(dir .. "/bad.json", "{not json")
code, out, err = t.run(cudalua .. " compare '" .. dir .. "/bad.json' '" .. a .. "'")
t.ok(code == 1 and err:find("not JSON"), "a file that is not JSON: exit 1, said so")
t.write_file(dir .. "/other.json", '{"results": []}')
code, out, err = t.run(cudalua .. " compare '" .. dir .. "/other.json' '" .. a .. "'")
t.ok(code == 1 and err:find("not a cudalua results file"), "JSON without the schema: exit 1, said so")
code, out, err = t.run(cudalua .. " compare '" .. a .. "'")
t.is(code, 2, "one file only: a usage error")
code, out = t.run(cudalua .. " compare --help")
t.like(out, "Usage: cudalua compare %[options%] A%.json B%.json", "--help shows the usage")
os.execute("rm -rf '" .. dir .. "'")
t.done()
