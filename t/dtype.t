-- Element types: names, sizes and checked conversions (shared by views
-- and typed scalars).
local t = require "tap"
local cuda = require "cuda"

local sizes = {float32 = 4, float64 = 8, int8 = 1, int16 = 2, int32 = 4, int64 = 8,
               uint8 = 1, uint16 = 2, uint32 = 4, uint64 = 8}
for name, size in pairs(sizes) do
  t.is(cuda.dtype_sizes[name], size, name .. " is " .. size .. " bytes")
end

-- bounds of every integer type, through typed scalars
local bounds = {
  {"i8", -128, 127}, {"i16", -32768, 32767}, {"i32", -2^31 // 1, 2^31 // 1 - 1},
  {"u8", 0, 255}, {"u16", 0, 65535}, {"u32", 0, 2^32 // 1 - 1},
}
for _, b in ipairs(bounds) do
  local f, lo, hi = cuda[b[1]], b[2], b[3]
  t.is(f(lo).value, lo, b[1] .. " holds its minimum")
  t.is(f(hi).value, hi, b[1] .. " holds its maximum")
  t.raises(function() f(lo - 1) end, "out of range", b[1] .. " rejects minimum - 1")
  t.raises(function() f(hi + 1) end, "out of range", b[1] .. " rejects maximum + 1")
end
t.is(cuda.i64(math.maxinteger).value, math.maxinteger, "i64 maximum")
t.is(cuda.u64(0).value, 0, "u64 zero")
t.raises(function() cuda.u64(2^64) end, "out of range", "u64 rejects 2^64")
t.raises(function() cuda.u64(1.5) end, "uint64 expects an integer, got 1.5", "u64 rejects 1.5, as not an integer")
t.is(cuda.i32(7.0).value, 7, "a float with an integer value is accepted")
t.raises(function() cuda.i32(0/0) end, "expects an integer", "NaN is not an integer")
t.is(cuda.f64(1/3).value, 1/3, "f64 keeps a double exactly")
local x = 16777217
t.is(cuda.f32(x).value, 16777216.0, "f32 rounds to float32")
t.raises(function() cuda.f32(1e39) end, "out of range for float32", "f32 rejects finite values beyond float32")
t.ok(cuda.f32(math.huge).value == math.huge, "f32 keeps inf")
t.ok(cuda.f32(0/0).value ~= cuda.f32(0/0).value, "f32 keeps NaN")
t.raises(function() cuda.f32({}) end, "float32 expects a number, got table", "f32 of a table")

-- Scalars and views share one float32 range: FLT_MAX fits, the next double
-- past it does not.
local flt_max = (2 - 2^-23) * 2^127
local past_flt_max = flt_max + 2^(127 - 52)
t.is(cuda.f32(flt_max).value, flt_max, "f32 holds FLT_MAX")
t.raises(function() cuda.f32(past_flt_max) end, "out of range for float32", "f32 rejects the double after FLT_MAX")
t.raises(function() cuda.f32(-past_flt_max) end, "out of range for float32", "f32 rejects minus it")
local v = cuda.HostMemoryResource():allocate(8):view("float32")
v:fill(flt_max)
t.is(v[2], flt_max, "a float32 view holds FLT_MAX")
t.raises(function() v:fill(past_flt_max) end, "out of range for float32", "a float32 view rejects the double after FLT_MAX")
t.raises(function() v:iota(0, past_flt_max) end, "leaves the range of float32", "float32 iota stops at FLT_MAX too")
t.is(v[2], flt_max, "a rejected fill writes nothing")
t.done()
