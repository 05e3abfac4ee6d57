-- Typed host views: every dtype x every operation, checked against values
-- computed independently in Lua on fresh random inputs. Each view under test
-- sits between two guard elements of a poisoned buffer, so missed writes and
-- stray writes both show. Then bad input, closed buffers, allclose, and the
-- random generator reproduced from its documented definition.
local t = require "tap"
local cuda = require "cuda"
t.seed()

local host = cuda.HostMemoryResource()

local function f32(x) return (string.unpack("f", string.pack("f", x))) end
local function same(a, b) return a == b or (a ~= a and b ~= b) end
local function pick(list) return list[math.random(#list)] end

-- --- element types, described independently of the code under test -------

local NAMES = {"float32", "float64", "int8", "int16", "int32", "int64",
               "uint8", "uint16", "uint32", "uint64"}
local FORMAT = {float32 = "=f", float64 = "=d", int8 = "=i1", int16 = "=i2", int32 = "=i4",
                int64 = "=i8", uint8 = "=I1", uint16 = "=I2", uint32 = "=I4", uint64 = "=I8"}
local TYPES = {}
for _, name in ipairs(NAMES) do
  local T = {name = name, size = string.packsize(FORMAT[name])}
  T.float = name:find("^float") ~= nil
  T.int = not T.float
  T.signed = name:find("^int") ~= nil
  T.bits = 8 * T.size
  if T.int and T.bits < 64 then
    T.lo = T.signed and -(1 << (T.bits - 1)) or 0
    T.hi = T.signed and (1 << (T.bits - 1)) - 1 or (1 << T.bits) - 1
  elseif T.int then
    T.lo = T.signed and math.mininteger or 0
    T.hi = math.maxinteger          -- the largest a Lua integer can ask for
  end
  TYPES[name] = T
end

-- The value x becomes once stored in T. Integers are Lua integers that wrap
-- modulo 2^64; uint64 values are kept as their bit patterns.
local function wrap(T, x)
  if T.float then return T.name == "float32" and f32(x) or x + 0.0 end
  if T.bits == 64 then return x end
  local m = x & ((1 << T.bits) - 1)
  if T.signed and m >= 1 << (T.bits - 1) then m = m - (1 << T.bits) end
  return m
end

-- Unsigned 64-bit division and remainder on bit patterns (Hacker's Delight).
local function udivmod(a, b)
  if b < 0 then
    if math.ult(a, b) then return 0, a end
    return 1, a - b
  end
  local q = ((a >> 1) // b) << 1
  local r = a - q * b
  if not math.ult(r, b) then q, r = q + 1, r - b end
  return q, r
end

-- C division: truncates toward zero; INT_MIN / -1 wraps.
local function cdiv(T, a, b)
  if T.float then return wrap(T, a / b) end
  if T.name == "uint64" then return (udivmod(a, b)) end
  if b == -1 then return wrap(T, -a) end
  local q = a // b
  if q < 0 and q * b ~= a then q = q + 1 end
  return q
end

local function isqrt(x)   -- floor(sqrt(x)) for an unsigned 64-bit pattern
  local lo, hi = 0, 1 << 32
  while hi - lo > 1 do
    local mid = (lo + hi) // 2
    local sq = mid * mid
    if math.ult(sq, x) or sq == x then lo = mid else hi = mid end
  end
  return lo
end

-- Random values: "any" may be any bit pattern of the type (uint64 patterns
-- past 2^63 read back as floats, so those are checked through an int64
-- alias); "plain" ones read back as themselves (uint64 below 2^63).
local function any_value(T)
  if T.name == "float32" then return f32((math.random() * 2 - 1) * 10.0 ^ math.random(-3, 4)) end
  if T.name == "float64" then return (math.random() * 2 - 1) * 10.0 ^ math.random(-3, 4) end
  if T.name == "uint64" then return math.random(0) end
  return math.random(T.lo, T.hi)
end
local function plain_value(T)
  if T.name == "uint64" then return math.random(0, math.maxinteger) end
  return any_value(T)
end
local function small_value(T)   -- sums of a few thousand fit in int64 and double
  if T.int and T.bits == 64 then return math.random(T.signed and -2^52 or 0, 2^52) end
  return plain_value(T)
end
local function values(T, n, gen, nonzero)
  local a = {}
  for i = 1, n do
    local x = gen(T)
    if nonzero and x == 0 then x = wrap(T, 1) end
    a[i] = x
  end
  return a
end

-- A view of n elements of T between two guard elements, everything
-- poisoned with a random byte first. x.raw reads and writes exact values
-- (uint64 through an int64 alias).
local function make(T, n)
  local buf = host:allocate((n + 2) * T.size)
  local bytes = buf:view("uint8")
  local poison = math.random(0, 255)
  for i = 1, #bytes do bytes[i] = poison end
  local x = {n = n, buf = buf, bytes = bytes, T = T}
  x.v = buf:view(T.name):range(2, n + 1)
  x.raw = T.name == "uint64" and buf:view("int64"):range(2, n + 1) or x.v
  function x.guards_ok()
    for i = 1, T.size do
      if bytes[i] ~= poison or bytes[#bytes - T.size + i] ~= poison then return false end
    end
    return true
  end
  return x
end

local function load(T, vals)
  local x = make(T, #vals)
  for i = 1, #vals do x.raw[i] = vals[i] end
  return x
end

-- One test: every element equals want(i) (integers as integers) and the
-- guards are intact.
local function check(x, name, want)
  local T = x.T
  for i = 1, x.n do
    local got, w = x.raw[i], want(i)
    if not same(got, w) or (T.int and math.type(got) ~= "integer") then
      t.ok(false, name)
      t.diag(("element %d of %d: got %s, want %s"):format(i, x.n, tostring(got), tostring(w)))
      return
    end
  end
  if not t.ok(x.guards_ok(), name) then t.diag("a guard element was overwritten") end
end

-- --- the documented generator, reimplemented --------------------------------

local function splitmix64(state)
  state = state + 0x9e3779b97f4a7c15
  local z = state
  z = (z ~ (z >> 30)) * 0xbf58476d1ce4e5b9
  z = (z ~ (z >> 27)) * 0x94d049bb133111eb
  return state, z ~ (z >> 31)
end
local function rotl(x, k) return (x << k) | (x >> (64 - k)) end
local function xoshiro(s)
  return function()
    local result = rotl(s[2] * 5, 7) * 9
    local tt = s[2] << 17
    s[3] = s[3] ~ s[1]; s[4] = s[4] ~ s[2]; s[2] = s[2] ~ s[3]; s[1] = s[1] ~ s[4]
    s[3] = s[3] ~ tt; s[4] = rotl(s[4], 45)
    return result
  end
end
local function generator(seed)
  local s, st = {}, seed
  for k = 1, 4 do st, s[k] = splitmix64(st) end
  return xoshiro(s)
end
local function expected_random(T, n, lo, hi, seed)
  local nxt, out = generator(seed), {}
  if T.float then
    if T.name == "float32" then lo, hi = f32(lo), f32(hi) end
    for i = 1, n do
      local x
      repeat x = wrap(T, lo + (hi - lo) * ((nxt() >> 11) * 2.0 ^ -53)) until x < hi
      out[i] = x
    end
  else
    local r = hi - lo
    local _, threshold = udivmod(-r, r)
    for i = 1, n do
      local d
      repeat d = nxt() until not math.ult(d, threshold)
      local _, m = udivmod(d, r)
      out[i] = lo + m
    end
  end
  return out
end

-- The reimplementation itself against the published reference outputs.
do
  local st, a = splitmix64(0)
  local _, b = splitmix64(st)
  t.ok(a == 0xe220a8397b1dcdaf and b == 0x6e789e6aa1b965f4, "reference splitmix64 vectors")
  local nxt = xoshiro({1, 2, 3, 4})
  local got = {nxt(), nxt(), nxt(), nxt()}
  t.ok(got[1] == 11520 and got[2] == 0 and got[3] == 1509978240 and got[4] == 1215971899390074240,
       "reference xoshiro256** vectors")
end

-- Neumaier's compensated sum, as the reference for float sums.
local function neumaier(a)
  local s, c = 0.0, 0.0
  for i = 1, #a do
    local x = a[i] + 0.0
    local tt = s + x
    if math.abs(s) >= math.abs(x) then c = c + ((s - tt) + x) else c = c + ((x - tt) + s) end
    s = tt
  end
  return s + c
end

-- --- every dtype x every operation ------------------------------------------

local ARITH = {
  add = function(T, a, b) return wrap(T, a + b) end,
  sub = function(T, a, b) return wrap(T, a - b) end,
  mul = function(T, a, b) return wrap(T, a * b) end,
  div = function(T, a, b) return cdiv(T, a, b) end,
}
local OPS = {"add", "sub", "mul", "div"}

for _, name in ipairs(NAMES) do
  local T = TYPES[name]
  local n = math.random(100, 700)
  local function scalar()
    local s = T.float and (math.random() * 2 - 1) * 10.0 ^ math.random(-2, 3) or plain_value(T)
    return s ~= 0 and s or 1   -- also a divisor
  end

  -- storage: v[i] = x reads back, with the bytes string.pack gives
  local a = values(T, n, plain_value)
  local x = make(T, n)
  for i = 1, n do x.v[i] = a[i] end
  local layout_ok = true
  for i = 1, n do
    local want = string.pack(FORMAT[name], a[i])
    local base = i * T.size
    for k = 1, T.size do
      if x.bytes[base + k] ~= want:byte(k) then layout_ok = false end
    end
  end
  check(x, name .. " v[i] = x reads back", function(i) return a[i] end)
  t.ok(layout_ok, name .. " elements are stored as string.pack stores them")
  t.is(#x.v, n, name .. " #v")
  t.is(x.v.dtype, name, name .. " v.dtype")
  t.is(tostring(x.v), ("cuda.View(%s[%d])"):format(name, n), name .. " tostring")

  -- fill, iota
  local s = scalar()
  x = make(T, n)
  t.is(x.v:fill(s), x.v, name .. " fill returns the view")
  check(x, name .. " fill", function() return wrap(T, s) end)

  -- iota: integer ends chosen inside the type, from a length that leaves room
  local start, step
  local m = T.bits <= 16 and math.random(5, 60) or n
  if T.float then
    start, step = (math.random() - 0.5) * 100, (math.random() - 0.5) * 3
  else
    local maxstep = T.bits == 64 and 1 << 40 or (T.hi - T.lo) // (m - 1)
    step = math.random(-maxstep, maxstep)
    local travel = step * (m - 1)
    start = travel >= 0 and math.random(T.lo, T.hi - travel) or math.random(T.lo - travel, T.hi)
  end
  x = make(T, m)
  x.v:iota(start, step)
  check(x, ("%s iota(%s, %s) over %d"):format(name, start, step, m),
        function(i) return wrap(T, start + (i - 1) * step) end)

  -- arithmetic with a scalar and with a view, in the element type
  for _, op in ipairs(OPS) do
    local s1 = scalar()
    a = values(T, n, any_value)
    x = load(T, a)
    t.is(x.v[op](x.v, s1), x.v, name .. " " .. op .. " returns the view")
    local sw = wrap(T, s1)
    check(x, name .. " " .. op .. "(scalar)", function(i) return ARITH[op](T, a[i], sw) end)

    local b = values(T, n, any_value, op == "div")
    x = load(T, a)
    local y = load(T, b)
    x.v[op](x.v, y.v)
    check(x, name .. " " .. op .. "(view)", function(i) return ARITH[op](T, a[i], b[i]) end)
    check(y, name .. " " .. op .. " leaves its operand alone", function(i) return b[i] end)
  end
  local s2 = scalar()
  a = values(T, n, any_value)
  x = load(T, a)
  x.v:scale(s2)
  check(x, name .. " scale", function(i) return ARITH.mul(T, a[i], wrap(T, s2)) end)

  a = values(T, n, any_value)
  x = load(T, a)
  x.v:mul(x.v)
  check(x, name .. " mul(self)", function(i) return ARITH.mul(T, a[i], a[i]) end)

  -- a range of a view shares its memory; the operand overlaps the target
  a = values(T, n, any_value)
  x = load(T, a)
  x.v:range(2, n):add(x.v:range(1, n - 1))
  check(x, name .. " add of overlapping ranges runs in element order", function(i)
    local want = a[1]
    for k = 2, i do want = wrap(T, a[k] + want) end
    return want
  end)

  -- sqrt, abs
  if T.float then
    a = values(T, n, any_value)    -- negatives give NaN
  else
    a = values(T, n, function() local v = any_value(T); return T.signed and (v < 0 and -(v + 1) or v) or v end)
  end
  x = load(T, a)
  x.v:sqrt()
  check(x, name .. " sqrt", function(i)
    if T.float then return wrap(T, math.sqrt(a[i])) end
    return isqrt(a[i])
  end)

  a = values(T, n, any_value)
  if T.signed then a[math.random(n)] = T.lo end
  x = load(T, a)
  x.v:abs()
  check(x, name .. " abs", function(i)
    if T.float then return math.abs(a[i]) end
    return T.signed and a[i] < 0 and wrap(T, -a[i]) or a[i]
  end)

  -- reductions
  a = values(T, n, small_value)
  x = load(T, a)
  local got = x.v:sum()
  if T.float then
    local ref, mag = neumaier(a), 0
    for i = 1, n do mag = mag + math.abs(a[i]) end
    t.ok(math.type(got) == "float" and math.abs(got - ref) <= 2^-51 * math.abs(ref) + 2^-80 * mag,
         name .. " sum: " .. tostring(got) .. " vs " .. tostring(ref))
  else
    local ref = 0
    for i = 1, n do ref = ref + a[i] end
    t.ok(math.type(got) == "integer" and got == ref, name .. " sum: " .. tostring(got) .. " vs " .. ref)
  end
  local mn, mx = a[1], a[1]
  for i = 2, n do mn, mx = math.min(mn, a[i]), math.max(mx, a[i]) end
  t.ok(x.v:min() == mn and math.type(x.v:min()) == math.type(mn), name .. " min")
  t.ok(x.v:max() == mx and math.type(x.v:max()) == math.type(mx), name .. " max")

  -- copy: same dtype, and through float64 and float32
  a = values(T, n, any_value)
  local src = load(T, a)
  x = make(T, n)
  t.is(x.v:copy(src.v), x.v, name .. " copy returns the view")
  check(x, name .. " copy", function(i) return a[i] end)

  a = values(T, n, plain_value)
  src = load(T, a)
  local d = make(TYPES.float64, n)
  d.v:copy(src.v)
  check(d, name .. " copy into float64", function(i) return a[i] + 0.0 end)
  d = make(TYPES.float32, n)
  d.v:copy(src.v)
  check(d, name .. " copy into float32", function(i) return f32(a[i] + 0.0) end)

  local fa = {}
  for i = 1, n do
    fa[i] = T.float and any_value(TYPES.float64)
            or T.bits == 64 and math.random(T.signed and -2^53 or 0, 2^53) + 0.0
            or math.random(T.lo, T.hi) + 0.0
  end
  src = load(TYPES.float64, fa)
  x = make(T, n)
  x.v:copy(src.v)
  check(x, name .. " copy from float64", function(i) return T.float and wrap(T, fa[i]) or math.tointeger(fa[i]) end)

  -- random: the documented generator, inside [lo, hi), deterministic
  local lo, hi
  if T.float then
    lo = (math.random() - 0.5) * 2000
    hi = lo + (0.5 + math.random()) * 10.0 ^ math.random(-2, 3)
  elseif T.bits == 64 then
    lo = T.signed and math.random(math.mininteger, -1) or math.random(0, 2^62)
    hi = math.random(lo + 1, math.maxinteger)
  else
    lo = math.random(T.lo, T.hi)
    hi = math.random(lo, T.hi) + 1
  end
  local seed = math.random(0)
  local want = expected_random(T, n, lo, hi, seed)
  x = make(T, n)
  t.is(x.v:random(lo, hi, seed), x.v, name .. " random returns the view")
  check(x, ("%s random(%s, %s, %d) is the documented generator"):format(name, lo, hi, seed),
        function(i) return want[i] end)
  local inside = true
  local flo, fhi = lo, hi
  if name == "float32" then flo, fhi = f32(lo), f32(hi) end
  for i = 1, n do
    local v = x.raw[i]
    if not (v >= flo and v < fhi) then inside = false end
  end
  t.ok(inside, name .. " random values lie in [lo, hi)")
  local again = make(T, n)
  again.v:random(lo, hi, seed)
  check(again, name .. " same seed, same values", function(i) return x.raw[i] end)
  local other = make(T, n)
  other.v:random(0, T.float and 1 or 2, seed ~ 1)
  local other2 = make(T, n)
  other2.v:random(0, T.float and 1 or 2, seed)
  local differ = false
  for i = 1, n do if other.raw[i] ~= other2.raw[i] then differ = true end end
  t.ok(differ, name .. " different seeds, different values")

  -- range and to_table
  a = values(T, n, plain_value)
  x = load(T, a)
  local first = math.random(1, n)
  local last = math.random(first - 1, n)
  local sub = x.v:range(first, last)
  t.is(#sub, last - first + 1, name .. " #range")
  local tab = x.v:to_table(first, last)
  local tab_ok = #tab == last - first + 1
  for k = 1, #tab do
    if not same(tab[k], a[first + k - 1]) or not same(sub[k], a[first + k - 1]) then tab_ok = false end
  end
  t.ok(tab_ok, name .. " range and to_table see the same elements")
  sub:fill(0)
  check(x, name .. " fill of a range stays inside it", function(i)
    return (i >= first and i <= last) and wrap(T, 0) or a[i]
  end)
  t.is(#x.v:to_table(), n, name .. " to_table() takes the whole view")
end

-- --- integer and float corner cases -----------------------------------------

for _, name in ipairs{"int8", "int16", "int32", "int64"} do
  local T = TYPES[name]
  local x = load(T, {T.lo, T.lo, 7})
  x.v:div(-1)
  check(x, name .. " INT_MIN / -1 wraps to INT_MIN", function(i) return ({T.lo, T.lo, -7})[i] end)
  local y = load(T, {-1, 2, -2})
  x = load(T, {T.lo, -7, 7})
  x.v:div(y.v)
  check(x, name .. " division truncates toward zero", function(i) return ({T.lo, -3, -3})[i] end)
  x = load(T, {4, -1, 9})
  t.raises(function() x.v:sqrt() end, "sqrt of a negative integer: element 2", name .. " sqrt of a negative")
  check(x, name .. " a failed sqrt writes nothing", function(i) return ({4, -1, 9})[i] end)
end

-- integer sqrt next to perfect squares, where a double square root rounds
for _, name in ipairs{"int32", "int64", "uint32", "uint64"} do
  local T = TYPES[name]
  local top = name == "int32" and 46340 or name == "uint32" and 65535
              or name == "int64" and 3037000499 or 4294967295
  local a = {0, 1, 2, 3, 4}
  for _, k in ipairs{top, top - 1, top - 2, math.random(top // 2, top), math.random(2, top)} do
    a[#a + 1] = k * k
    a[#a + 1] = k * k - 1
    if k < top then a[#a + 1] = k * k + 2 * k end   -- (k + 1)^2 - 1
  end
  if name == "uint64" then a[#a + 1] = -1 end         -- 2^64 - 1
  if name == "int64" then a[#a + 1] = math.maxinteger end
  local x = load(T, a)
  x.v:sqrt()
  check(x, name .. " sqrt next to perfect squares", function(i) return isqrt(a[i]) end)
end

-- integer sums over more than 2^20 elements (blocked accumulation)
for _, name in ipairs{"int16", "uint32"} do
  local T = TYPES[name]
  local n = (1 << 21) + math.random(1, 1000)
  local v = host:allocate(n * T.size):view(name):random(T.lo, T.hi + 1, math.random(0))
  local ref = 0
  for i = 1, n do ref = ref + v[i] end
  t.is(v:sum(), ref, ("%s sum of %d elements"):format(name, n))
end

for _, name in ipairs{"int32", "uint8", "uint64"} do
  local T = TYPES[name]
  local x = load(T, {5, 6, 7})
  t.raises(function() x.v:div(0) end, "division by zero", name .. " div(0)")
  local y = load(T, {1, 1, 0})
  t.raises(function() x.v:div(y.v) end, "division by zero: divisor element 3", name .. " div by a view with a 0")
  check(x, name .. " a failed division writes nothing", function(i) return ({5, 6, 7})[i] end)
end

do
  local x = load(TYPES.uint64, {-1, 2, 3})     -- 2^64 - 1 as a pattern
  t.is(x.v[1], 2.0^64, "uint64 past 2^63 reads as a float")
  t.is(x.v:sum(), 2.0^64 + 4, "uint64 sum past int64 is a float")
  x = load(TYPES.int64, {math.maxinteger, math.maxinteger, math.maxinteger})
  local s = x.v:sum()
  t.ok(math.type(s) == "float" and s == 3 * 2.0^63, "int64 sum that overflows int64 is exact, as a float")
  x = load(TYPES.int64, {math.maxinteger, 1, -1})
  t.ok(math.type(x.v:sum()) == "integer" and x.v:sum() == math.maxinteger,
       "int64 sum stays exact through an intermediate overflow")
  x = load(TYPES.uint8, {250, 10})
  x.v:add(10)
  check(x, "uint8 add wraps", function(i) return ({4, 20})[i] end)

  x = load(TYPES.float64, {1e16, 1.0, -1e16})
  t.is(x.v:sum(), 1.0, "float sums are compensated")
  local ones = {2.0^24}
  for i = 2, 1001 do ones[i] = 1.0 end
  x = load(TYPES.float32, ones)
  t.is(x.v:sum(), 2.0^24 + 1000, "float32 sums accumulate in double")

  x = load(TYPES.float32, {1, 2, 3})
  x.v:add(0.1)
  check(x, "float32 add(0.1) adds the float32 nearest 0.1, in float32",
        function(i) return f32(i + f32(0.1)) end)
  x = load(TYPES.float64, {1, -1, 0})
  x.v:div(0)
  t.ok(x.v[1] == math.huge and x.v[2] == -math.huge and x.v[3] ~= x.v[3], "float division by zero is IEEE")

  for _, name in ipairs{"float32", "float64"} do
    local a = values(TYPES[name], 50, any_value)
    local k = math.random(50)
    a[k] = 0 / 0
    x = load(TYPES[name], a)
    local mn, mx, sm = x.v:min(), x.v:max(), x.v:sum()
    t.ok(mn ~= mn and mx ~= mx and sm ~= sm, name .. " min, max and sum of a view with a NaN are NaN")
    x = load(TYPES[name], {1, math.huge, 2})
    t.is(x.v:sum(), math.huge, name .. " sum with an infinity is infinite")
  end
  x = load(TYPES.float64, {1, 2})
  local e = x.v:range(1, 0)
  t.is(#e, 0, "an empty range")
  t.ok(e:sum() == 0 and e:fill(3) == e, "sum and fill of an empty view")
  t.raises(function() e:min() end, "min of an empty cuda%.View", "min of an empty view")
  t.raises(function() e:max() end, "max of an empty cuda%.View", "max of an empty view")
end

-- copy conversions and overlap
do
  local a = {1.0, 2.5, 3.0}
  local src = load(TYPES.float64, a)
  local x = make(TYPES.int32, 3)
  t.raises(function() x.v:copy(src.v) end, "copy: element 2: .*int32", "copy of 2.5 into int32")
  src = load(TYPES.int16, {1, 2, 300, -4})
  x = make(TYPES.uint8, 4)
  t.raises(function() x.v:copy(src.v) end, "copy: element 3: 300 out of range for uint8", "copy of 300 into uint8")
  src = load(TYPES.int16, {1, -2, 3})
  x = make(TYPES.int64, 3)
  x.v:copy(src.v)
  check(x, "copy int16 into int64", function(i) return ({1, -2, 3})[i] end)
  src = load(TYPES.float64, {1, -1e300, 1e300})
  x = make(TYPES.float32, 3)
  t.raises(function() x.v:copy(src.v) end, "copy: element 2: .* out of range for float32",
           "copy of -1e300 into float32")
  src = load(TYPES.float64, {1, math.huge, -math.huge, 0 / 0})
  x = make(TYPES.float32, 4)
  x.v:copy(src.v)
  t.ok(x.v[2] == math.huge and x.v[3] == -math.huge and x.v[4] ~= x.v[4], "copy keeps infinities and NaN")
  local f = host:allocate(16):view("float32")
  t.raises(function() f:fill(1e300) end, "out of range for float32", "float32 fill(1e300)")
  t.raises(function() f:iota(0, 2e38) end, "leaves the range of float32", "float32 iota past FLT_MAX")
  t.raises(function() f:random(0, 1e300) end, "leaves the range of float32", "float32 random past FLT_MAX")
  local buf = host:allocate(64)
  t.raises(function() buf:view("float32"):copy(buf:view("int32")) end, "overlap",
           "copy between overlapping views of different dtypes")
  local v = buf:view("int32")
  v:iota(1, 1)
  v:range(2, 16):copy(v:range(1, 15))
  local shifted = true
  for i = 1, 16 do if v[i] ~= math.max(1, i - 1) then shifted = false end end
  t.ok(shifted, "copy between overlapping views of one dtype is a memmove")
end

-- integer division by an operand that overlaps the target from below: the
-- divisors are read as the loop reaches them, so a zero the loop writes is
-- an error there (never a signal), and results run in element order
for _, name in ipairs{"int8", "int32", "int64", "uint8", "uint16", "uint64"} do
  local v = host:allocate(64):view(name)
  local function set(vals) for i, x in ipairs(vals) do v[i] = x end end
  set{5, 1, 1, 1}
  local ok, err = pcall(v:range(2, 4).div, v:range(2, 4), v:range(1, 3))
  t.ok(not ok and err:match("divisor element 2 is 0 %(written by this division"),
       name .. " div finds the zero it wrote: " .. tostring(err))
  t.ok(v[1] == 5 and v[2] == 0 and v[3] == 1, name .. " elements before it were written")
  set{2, 8, 64, 100}
  v:range(2, 4):div(v:range(1, 3))
  t.ok(v[2] == 4 and v[3] == 16 and v[4] == 6, name .. " overlapping div runs in element order")
  set{2, 8, 64, 0}
  t.raises(function() v:range(1, 3):div(v:range(2, 4)) end, "divisor element 3 is 0$",
           name .. " a divisor above the target is checked before anything is written")
  t.is(v[1], 2, name .. " and nothing was written")
end

-- --- allclose ---------------------------------------------------------------

-- numpy's rule, in double: |a - b| <= atol + rtol * |b| or a == b; NaN never.
local function ref_allclose(a, b, rtol, atol)
  local first, maxerr, nan = nil, 0.0, false
  for i = 1, #a do
    local err = a[i] == b[i] and 0.0 or math.abs(a[i] - b[i])
    if err ~= err then nan = true elseif err > maxerr then maxerr = err end
    if not (a[i] == b[i] or err <= atol + rtol * math.abs(b[i])) and not first then first = i end
  end
  return first == nil, nan and 0 / 0 or maxerr, first
end

local function allclose_is(a, b, ta, tb, rtol, atol, name)
  local x, y = load(TYPES[ta], a), load(TYPES[tb], b)
  local aa, bb = {}, {}
  for i = 1, #a do aa[i], bb[i] = x.raw[i] + 0.0, y.raw[i] + 0.0 end
  local ok, err, first = x.v:allclose(y.v, rtol, atol)
  local rok, rerr, rfirst = ref_allclose(aa, bb, rtol or 1e-5, atol or 1e-8)
  local pass = ok == rok and same(err, rerr) and first == rfirst
  t.ok(pass, name)
  if not pass then
    t.diag(("got %s %s %s, want %s %s %s"):format(tostring(ok), tostring(err), tostring(first),
      tostring(rok), tostring(rerr), tostring(rfirst)))
  end
  return ok, err, first
end

do
  local n = 1500   -- crosses internal block boundaries
  local a = values(TYPES.float64, n, any_value)
  local b = {}
  for i = 1, n do b[i] = a[i] * (1 + (math.random() - 0.5) * 2e-6) end
  local ok = allclose_is(a, b, "float64", "float64", nil, nil, "allclose: close within default tolerances")
  t.ok(ok, "allclose: ok")
  local k1 = math.random(2, n)
  local k2 = math.random(1, k1 - 1)
  b[k1] = a[k1] + 1
  local _, _, first = allclose_is(a, b, "float64", "float64", nil, nil, "allclose: one bad element")
  t.is(first, k1, "allclose: first_bad_index")
  b[k2] = a[k2] - 1
  _, _, first = allclose_is(a, b, "float64", "float64", nil, nil, "allclose: two bad elements")
  t.is(first, k2, "allclose: first_bad_index is the first")

  for trial = 1, 20 do
    local ta, tb = pick(NAMES), pick(NAMES)
    local m = math.random(1, 1200)
    local xa, xb = {}, {}
    for i = 1, m do
      xa[i] = plain_value(TYPES[ta])
      xb[i] = TYPES[tb].int and plain_value(TYPES[tb]) or wrap(TYPES[tb], xa[i] + (math.random() - 0.5) * 1e-3 * xa[i])
    end
    if math.random() < 0.5 then xb[math.random(m)] = wrap(TYPES[tb], TYPES[tb].float and 0.5 or 1) end
    allclose_is(xa, xb, ta, tb, 10.0 ^ math.random(-8, -2), 10.0 ^ math.random(-9, 0),
                ("allclose %s vs %s, trial %d"):format(ta, tb, trial))
  end

  local nan = 0 / 0
  local k = math.random(1, 40)
  a = values(TYPES.float32, 40, any_value)
  b = {table.unpack(a)}
  a[k], b[k] = nan, nan
  local ok2, err, first2 = allclose_is(a, b, "float32", "float32", nil, nil, "allclose: NaN vs NaN")
  t.ok(not ok2 and err ~= err and first2 == k, "allclose: NaN never passes, max_abs_err is NaN")
  b[k] = 1
  ok2, _, first2 = allclose_is(a, b, "float32", "float32", 1, 1e30, "allclose: NaN vs a number")
  t.ok(not ok2 and first2 == k, "allclose: NaN fails even with huge tolerances")

  local inf = math.huge
  ok2, err = allclose_is({inf, -inf, 1}, {inf, -inf, 1}, "float64", "float64", 0, 0, "allclose: equal infinities")
  t.ok(ok2 and err == 0, "allclose: equal infinities are close")
  ok2, err, first2 = allclose_is({1, inf}, {1, 1}, "float64", "float64", nil, nil, "allclose: inf vs 1")
  t.ok(not ok2 and err == inf and first2 == 2, "allclose: inf vs a number fails")
  ok2 = allclose_is({1}, {1.1}, "float64", "float64", 0.095, 0, "allclose: rtol scales |b|")
  t.ok(ok2, "allclose: |a - b| <= rtol * |b| passes")
  ok2 = allclose_is({1.1}, {1}, "float64", "float64", 0.095, 0, "allclose: asymmetric")
  t.ok(not ok2, "allclose: b is the reference (not symmetric)")
  t.ok(allclose_is({0}, {0.5}, "float64", "float64", 0, 0.5, "allclose: err == atol"), "allclose: <= is inclusive")
  t.ok(not allclose_is({0}, {0.5}, "float64", "float64", 0, 0.25, "allclose: err > atol"), "allclose: atol")
  t.ok(allclose_is({0}, {1e-9}, "float64", "float64", nil, nil, "allclose: default atol"), "allclose: default atol 1e-8")
  t.ok(not allclose_is({0}, {1e-7}, "float64", "float64", nil, nil, "allclose: past default atol"), "allclose: default atol")
  t.ok(not allclose_is({1}, {1 + 2e-5}, "float64", "float64", nil, 0, "allclose: past default rtol"), "allclose: default rtol 1e-5")
  t.ok(allclose_is({1}, {1 + 5e-6}, "float64", "float64", nil, 0, "allclose: within default rtol"), "allclose: default rtol")
  local x, y = load(TYPES.float64, {1, 2}), load(TYPES.float64, {1, 2, 3})
  t.raises(function() x.v:allclose(y.v) end, "length mismatch.*2.*3", "allclose: lengths differ")
  t.raises(function() x.v:allclose(x.v, -1) end, "tolerance must be a number >= 0", "allclose: negative rtol")
  t.raises(function() x.v:allclose(x.v, 0, 0 / 0) end, "tolerance", "allclose: NaN atol")
  t.raises(function() x.v:allclose({1, 2}) end, "cuda%.View expected", "allclose: a table is not a view")
end

-- --- random: more ----------------------------------------------------------

do
  local T = TYPES.int64
  local lo, hi = -3 * (1 << 61), 3 * (1 << 61)   -- 2^64 mod (3 * 2^62): a quarter rejected
  local want = expected_random(T, 200, lo, hi, 42)
  local x = make(T, 200)
  x.v:random(lo, hi, 42)
  check(x, "int64 random over a range that needs rejection", function(i) return want[i] end)
  x = make(TYPES.float32, 500)
  x.v:random(0, 100, 7)
  want = expected_random(TYPES.float32, 500, 0, 100, 7)
  check(x, "float32 random(0, 100, 7)", function(i) return want[i] end)
  x = make(TYPES.float32, 500)
  x.v:random(1, 2)
  want = expected_random(TYPES.float32, 500, 1, 2, 0)
  check(x, "random seed defaults to 0", function(i) return want[i] end)
  local v = host:allocate(8):view("uint8")
  t.raises(function() v:random(5, 5) end, "lo < hi", "random: empty range")
  t.raises(function() v:random(0, 257) end, "inside uint8", "random: range past the type")
  t.raises(function() v:random(-1, 3) end, "inside uint8", "random: negative lo for unsigned")
  t.raises(function() v:random(0.5, 3) end, "number has no integer representation", "random: fractional bounds for integers")
  local f = host:allocate(8):view("float32")
  t.raises(function() f:random(0, math.huge) end, "finite lo < hi", "random: infinite range")
  t.raises(function() f:random(2, 1) end, "finite lo < hi", "random: lo > hi")
  t.raises(function() v:iota(100, 30) end, "iota%(100, 30%).*range of uint8", "iota past the type")
  t.raises(function() v:iota(-1, 1) end, "range of uint8", "iota below the type")
end

-- --- bad input ------------------------------------------------------------

do
  local buf = host:allocate(40)
  local v = buf:view("float32")
  t.is(#v, 10, "40 bytes are 10 float32s")
  t.ok(rawequal(v.buffer, buf), "v.buffer")
  t.is(v.nonexistent, nil, "unknown fields are nil")
  t.raises(function() buf:view("float16") end, "invalid option 'float16'", "unknown dtype")
  t.raises(function() buf:view() end, "bad argument #1 to 'view'", "dtype missing")
  t.raises(function() host:allocate(10):view("float32") end, "10 bytes as float32: not a multiple of 4",
           "size not a multiple of the element size")
  t.raises(function() buf:slice(2, 8):view("float32") end, "not a multiple of 4", "misaligned slice")
  t.ok(pcall(function() return buf:slice(4, 8):view("float32") end), "aligned slice")
  local view = buf.view
  t.raises(function() view(5, "float32") end, "cuda%.Buffer expected, got number", "view of a non-buffer")
  local mt = getmetatable(v)
  t.raises(function() return mt.__index(buf, 1) end, "cuda%.View expected, got cuda%.Buffer", "__index checks its self")
  t.raises(function() mt.__newindex({}, 1, 1) end, "cuda%.View expected, got table", "__newindex checks its self")
  t.raises(function() v.fill(buf, 1) end, "cuda%.View expected, got cuda%.Buffer", "methods check their self")
  t.raises(function() return mt.__len(buf) end, "cuda%.View expected, got cuda%.Buffer", "__len checks its self")
  t.raises(function() return mt.__tostring({}) end, "cuda%.View expected, got table", "__tostring checks its self")
  t.raises(function() v:add(buf) end, "number or cuda%.View expected, got cuda%.Buffer", "add a buffer")

  t.raises(function() return v[0] end, "index 0 out of range %(length 10%)", "v[0]")
  t.raises(function() return v[11] end, "index 11 out of range %(length 10%)", "v[#v + 1]")
  t.raises(function() return v[-1] end, "index %-1 out of range", "v[-1]")
  t.raises(function() v[0] = 1 end, "index 0 out of range %(length 10%)", "v[0] = x")
  t.raises(function() v[11] = 1 end, "index 11 out of range %(length 10%)", "v[#v + 1] = x")
  t.raises(function() return v[1.5] end, "index must be an integer, got 1%.5", "v[1.5]")
  t.raises(function() v[1.5] = 1 end, "index must be an integer", "v[1.5] = x")
  t.raises(function() v.foo = 1 end, "cannot assign to field 'foo'", "v.foo = x")
  t.raises(function() v[1] = "1" end, "float32 expects a number, got string", "v[1] = '1'")
  t.raises(function() v[1] = nil end, "expects a number, got nil", "v[1] = nil")
  t.raises(function() v[1] = {} end, "expects a number, got table", "v[1] = {}")
  v[1.0] = 3
  t.is(v[1], 3.0, "v[1.0] is v[1]")

  local u8 = host:allocate(4):view("uint8")
  t.raises(function() u8[1] = 300 end, "300 out of range for uint8", "uint8 300")
  t.raises(function() u8[1] = -1 end, "out of range for uint8", "uint8 -1")
  local i8 = host:allocate(4):view("int8")
  t.raises(function() i8[1] = -129 end, "out of range for int8", "int8 -129")
  local i32 = host:allocate(8):view("int32")
  t.raises(function() i32[1] = 2^31 end, "out of range for int32", "int32 2^31")
  t.raises(function() i32[1] = 2.5 end, "int32 expects an integer", "int32 2.5")
  t.raises(function() u8:add(256) end, "out of range for uint8", "scalar operands are range-checked")
  t.raises(function() i32:mul(0.5) end, "expects an integer", "integer views take integer scalars")
  t.raises(function() u8:fill("x") end, "expects a number", "fill with a string")
  t.raises(function() v:add("1") end, "number or cuda%.View expected, got string", "add a string")
  t.raises(function() v:add() end, "number or cuda%.View expected, got no value", "add nothing")
  t.raises(function() v:scale(v) end, "number expected", "scale takes only a number")

  local a, b = host:allocate(16):view("float32"), host:allocate(20):view("float32")
  for _, op in ipairs{"add", "sub", "mul", "div", "copy"} do
    t.raises(function() a[op](a, b) end, "length mismatch: cuda%.View of 4 elements and operand of 5", op .. ": lengths differ")
  end
  local c = host:allocate(16):view("int32")
  t.raises(function() a:add(c) end, "dtype mismatch: cuda%.View of float32 and operand of int32", "add: dtypes differ")

  t.raises(function() v:range(0, 3) end, "first index 0 out of range", "range(0, 3)")
  t.raises(function() v:range(2, 11) end, "last index 11 out of range", "range(2, #v + 1)")
  t.raises(function() v:range(4, 2) end, "last index 2 out of range", "range(4, 2)")
  t.raises(function() v:to_table(1, 12) end, "last index 12", "to_table past the end")
  t.is(#v:range(3), 8, "range(first) runs to the end")
  t.is(v:range(2, 5):range(2, 3).dtype, "float32", "a range of a range")
  local r = v:range(4, 6)
  r[1] = 42
  t.is(v[4], 42.0, "writes through a range reach the buffer")
  t.raises(function() return r[4] end, "index 4 out of range %(length 3%)", "a range is bounds-checked on its own length")
end

-- --- closed buffers ---------------------------------------------------------

do
  local buf = host:allocate(64)
  local v = buf:view("float64")
  local r = v:range(2, 4)
  local s = buf:slice(8, 16):view("int32")
  local other = host:allocate(64):view("float64")
  buf:close()
  local closed = "cuda%.Buffer is closed"
  t.raises(function() return v[1] end, closed, "closed: v[i]")
  t.raises(function() v[1] = 1 end, closed, "closed: v[i] = x")
  t.raises(function() return #v end, closed, "closed: #v")
  t.raises(function() return v.dtype end, closed, "closed: v.dtype")
  t.is(tostring(v), "cuda.View (closed)", "closed: tostring")
  for _, m in ipairs{"fill", "iota", "random", "scale", "add", "sub", "mul", "div", "sqrt", "abs",
                     "sum", "min", "max", "to_table", "range"} do
    t.raises(function() v[m](v, 1, 2) end, closed, "closed: " .. m)
  end
  t.raises(function() v:copy(other) end, closed, "closed: copy into")
  t.raises(function() other:copy(v) end, closed, "closed: copy from")
  t.raises(function() other:add(v) end, closed, "closed: as an operand")
  t.raises(function() other:allclose(v) end, closed, "closed: allclose")
  t.raises(function() return r[1] end, closed, "closed: a range of the view")
  t.raises(function() return s[1] end, closed, "closed: a view of a slice of the buffer")
  t.raises(function() buf:view("float32") end, closed, "closed: buf:view")
end

-- --- lifetimes, allocation, devices -----------------------------------------

do
  local v = host:allocate(4096):view("float32"):fill(1.5)
  collectgarbage()
  collectgarbage()
  t.is(v:sum(), 1.5 * 1024, "a view keeps its buffer alive")

  local x = host:allocate(4096):view("float32")
  local y = host:allocate(4096):view("float32"):fill(2)
  collectgarbage()
  collectgarbage("stop")
  local before = collectgarbage("count")
  for i = 1, 20000 do
    local k = i % 1024 + 1
    x[k] = i
    y[k] = x[k] + y[k]
  end
  x:fill(1):add(2):mul(y):sub(1):div(3):scale(0.5):add(x):sqrt():abs()
  local _ = x:sum() + x:min() + x:max() + #x
  local ok = x:allclose(x)
  local after = collectgarbage("count")
  collectgarbage("restart")
  t.ok(ok and after == before, ("v[i] and the bulk ops allocate nothing (%s KB -> %s KB)"):format(before, after))

  local avail = cuda.is_available()
  if avail then
    local dev = cuda.Device(0)
    dev:set_current()
    local s = dev:create_stream()
    local d = dev.memory_resource:allocate(64, s)
    t.raises(function() return d:view("float32")[1] end, "pinned", "a device-only buffer's elements cannot be read")
  else
    t.skip("no CUDA device: device-only buffers", 1)
  end
end

t.done()
