-- xxh64.lua: XXH64 (seed 0), written from the specification, independently
-- of the xxHash library that cache.c checksums its entries with; for the
-- tests that read or plant cache entries. Lua's integers wrap like u64.
local P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
local P4, P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5
local function rotl(x, r) return (x << r) | (x >> (64 - r)) end
local function round(acc, input) return rotl(acc + input * P2, 31) * P1 end
local function merge(acc, v) return (acc ~ round(0, v)) * P1 + P4 end
local function xxh64(s)
  local len, i, h = #s, 1, P5
  if len >= 32 then
    local v = {P1 + P2, P2, 0, -P1}
    for at = 1, len - 31, 32 do
      local a, b, c, d = string.unpack("<i8i8i8i8", s, at)
      v[1], v[2], v[3], v[4] = round(v[1], a), round(v[2], b), round(v[3], c), round(v[4], d)
      i = at + 32
    end
    h = rotl(v[1], 1) + rotl(v[2], 7) + rotl(v[3], 12) + rotl(v[4], 18)
    for k = 1, 4 do h = merge(h, v[k]) end
  end
  h = h + len
  while i + 7 <= len do
    h = rotl(h ~ round(0, (string.unpack("<i8", s, i))), 27) * P1 + P4
    i = i + 8
  end
  if i + 3 <= len then
    h = rotl(h ~ (string.unpack("<I4", s, i)) * P1, 23) * P2 + P3
    i = i + 4
  end
  for j = i, len do h = rotl(h ~ s:byte(j) * P5, 11) * P1 end
  h = (h ~ (h >> 33)) * P2
  h = (h ~ (h >> 29)) * P3
  return h ~ (h >> 32)
end

return xxh64
