-- cuda.copy_batch: random batches of copies between every kind of memory
-- (device, pinned, managed, pageable), of buffers, slices and views,
-- verified against the same copies made on the host; every pair checked
-- before anything is queued; options. On the GPU when there is one, else
-- under the fake driver.
local t = require "tap"
-- This file runs itself twice: as a batch (the default) and with
-- CUDALUA_COPY_BATCH=pairs (one cuMemcpyAsync a pair).
local mode = os.getenv("CUDALUA_COPY_BATCH")
if not os.getenv("COPY_BATCH_CHILD") then
  for _, m in ipairs{"", "pairs"} do
    local env = m == "" and "env -u CUDALUA_COPY_BATCH" or "CUDALUA_COPY_BATCH=" .. m
    local code, out = t.run(env .. " COPY_BATCH_CHILD=1 " .. t.cudalua() .. " '" .. arg[0] .. "'")
    t.ok(code == 0 and not out:find("\nnot ok") and out:find("\nok"),
         (m == "" and "one batch" or "CUDALUA_COPY_BATCH=" .. m) .. ": the batch tests pass")
    if code ~= 0 or out:find("\nnot ok") then t.diag(out) end
  end
  t.done()
end
local cuda = require "cuda"
local fakecuda
if not cuda.is_available() then cuda, fakecuda = require("fake").start() end
t.seed()

local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local kinds = {
  device = dev.memory_resource, pinned = cuda.PinnedMemoryResource(),
  managed = cuda.ManagedMemoryResource(), pageable = cuda.HostMemoryResource(),
}
local names = {"device", "pinned", "managed", "pageable"}
local SIZE = 4096

-- Two buffers of each kind (sources "name" and destinations "name'", since
-- a batch's copies run in no order), with host mirrors (Lua strings).
local bufs, mirror = {}, {}
local stage = kinds.pinned:allocate(SIZE)
local function upload(name)
  local b = bufs[name]
  local v = stage:view("uint8")
  v:random(0, 256, math.random(1 << 40))
  mirror[name] = string.char(table.unpack(v:to_table(1, SIZE // 2))) ..
                 string.char(table.unpack(v:to_table(SIZE // 2 + 1, SIZE)))
  b:copy_from(stage, s)
  s:sync()   -- the next upload redraws stage: this copy must have read it
end
local function download(name)
  bufs[name]:copy_to(stage, s)
  s:sync()
  local v = stage:view("uint8")
  return string.char(table.unpack(v:to_table(1, SIZE // 2))) ..
         string.char(table.unpack(v:to_table(SIZE // 2 + 1, SIZE)))
end
for _, name in ipairs(names) do
  bufs[name] = kinds[name]:allocate(SIZE, s)
  bufs[name .. "'"] = kinds[name]:allocate(SIZE, s)
end

local function span(name, off, len)
  local b = bufs[name]
  local r = math.random(3)
  if r == 1 and off == 0 and len == SIZE then return b end
  if r == 2 and off % 4 == 0 and len % 4 == 0 then
    return b:slice(off, len):view("float32")
  end
  return b:slice(off, len)
end

for round = 1, 5 do
  for _, name in ipairs(names) do upload(name); upload(name .. "'") end
  s:sync()
  -- non-overlapping destination ranges: each destination is cut into pieces
  local pairs_, expect = {}, {}
  for _, name in ipairs(names) do expect[name] = {} end
  for _, dname in ipairs(names) do
    local off = 0
    while off < SIZE do
      local len = math.min(SIZE - off, 4 * math.random(1, 64))
      local sname = names[math.random(#names)]
      local soff = 4 * math.random(0, (SIZE - len) // 4)
      local explicit = math.random(2) == 1
      local src = span(sname, soff, len)
      local dst = span(dname .. "'", off, len)
      pairs_[#pairs_ + 1] = explicit and {dst, src, len} or {dst, src}
      expect[dname][#expect[dname] + 1] = {off, mirror[sname]:sub(soff + 1, soff + len)}
      off = off + len
    end
  end
  cuda.copy_batch(s, pairs_, {src_access_order = ({"stream", "any", "during_api_call"})[math.random(3)]})
  s:sync()
  local all = true
  for _, dname in ipairs(names) do
    local want = {}
    for _, piece in ipairs(expect[dname]) do want[#want + 1] = piece[2] end
    if download(dname .. "'") ~= table.concat(want) then all = false; t.diag("round " .. round .. ": " .. dname .. " differs") end
  end
  t.ok(all, ("round %d: a batch of %d copies between every kind of memory"):format(round, #pairs_))
end

-- a size shorter than both ends copies a prefix
upload("pinned"); upload("device"); s:sync()
local before = mirror.device
cuda.copy_batch(s, {{bufs.device, bufs.pinned, 100}})
s:sync()
t.is(download("device"), mirror.pinned:sub(1, 100) .. before:sub(101), "size copies a prefix")
-- an empty batch does nothing
t.is(select("#", cuda.copy_batch(s, {})), 0, "an empty batch")

-- every pair is checked before anything is queued
upload("device"); s:sync()
local snapshot = mirror.device
local closed = kinds.pinned:allocate(SIZE); closed:close()
local function refuses(list, pattern, what, opts)
  t.raises(function() cuda.copy_batch(s, list, opts) end, pattern, what)
end
local good = {bufs.device, bufs.pinned}
refuses({good, {bufs.device, kinds.pinned:allocate(8)}}, "copy 2: cannot copy 8 bytes into 4096", "sizes must match")
refuses({good, {bufs.device, closed}}, "closed", "a closed source")
refuses({good, {closed, bufs.device}}, "closed", "a closed destination")
refuses({good, {bufs.device, bufs.pinned, SIZE + 1}}, "copy 2: 4097 bytes do not fit", "size past the end")
refuses({good, {bufs.device, bufs.pinned, 0}}, "size must be an integer >= 1", "size 0")
refuses({good, {bufs.device, bufs.pinned, 1.5}}, "size must be an integer >= 1", "fractional size")
refuses({good, {bufs.device, bufs.pinned, "8"}}, "size must be an integer >= 1", "a string size")
refuses({good, 5}, "copy 2 must be a table", "a number pair")
refuses({good, {5, bufs.pinned}}, "copy 2: dst must be a cuda.Buffer or cuda.View", "a number dst")
refuses({good, {bufs.device}}, "copy 2: src must be", "a missing src")
refuses({good, {bufs.device, bufs.pinned:view("float32", {4, 4}, {8, 1})}}, "strided", "a strided view")
refuses({good}, "unknown option 'order'", "unknown option", {order = "any"})
refuses({good}, "invalid option 'sometimes'", "bad access order", {src_access_order = "sometimes"})
refuses({good}, "src_location_hint must be a cuda.Device or \"host\"", "bad hint", {src_location_hint = 5})
t.raises(function() cuda.copy_batch(s, 5) end, "table expected", "a number list")
t.raises(function() cuda.copy_batch(5, {good}) end, "cuda%.Stream expected", "a number stream")
local cs = dev:create_stream(); cs:close()
t.raises(function() cuda.copy_batch(cs, {good}) end, "cuda%.Stream is closed", "a closed stream")
t.is(download("device"), snapshot, "refused batches queued nothing")

-- copies that depend on each other are refused, naming the two: random
-- batches of slices of one buffer, judged by a brute-force O(n^2) check
local D = bufs.device
local function overlap(a0, a1, b0, b1) return a0 < b1 and b0 < a1 end
local function conflict(list, i, j)   -- copy i against copy j (i ~= j)
  local di, si, ni = list[i][1], list[i][2], list[i][3]
  local dj = list[j][1]
  return overlap(di, di + ni, dj, dj + list[j][3]) or overlap(si, si + ni, dj, dj + list[j][3])
end
local accepted, refused, right_pair = 0, 0, 0
for _ = 1, 200 do
  local n, list = math.random(1, 12), {}
  for k = 1, n do
    local len = math.random(1, 64)
    list[k] = {math.random(0, SIZE - len), math.random(0, SIZE - len), len}
  end
  local any = false
  for i = 1, n do for j = 1, n do if i ~= j and conflict(list, i, j) then any = true end end end
  local batch = {}
  for k, c in ipairs(list) do batch[k] = {D:slice(c[1], c[3]), D:slice(c[2], c[3])} end
  local ok, err = pcall(cuda.copy_batch, s, batch)
  if ok and not any then accepted = accepted + 1
  elseif not ok and any then
    refused = refused + 1
    local a, b = tostring(err):match("copies (%d+) and (%d+) write overlapping")
    if not a then b, a = tostring(err):match("copy (%d+) reads bytes that copy (%d+) writes") end
    a, b = tonumber(a), tonumber(b)
    if a and b and a ~= b and conflict(list, b, a) then right_pair = right_pair + 1
    else t.diag("a wrong pair named: " .. tostring(err)) end
  else t.diag(("verdict %s, expected %s: %s"):format(ok, not any, tostring(err))) end
end
s:sync()
t.ok(accepted + refused == 200 and accepted > 0 and refused > 0,
     ("200 random batches judged as a brute force does (%d accepted, %d refused)"):format(accepted, refused))
t.is(right_pair, refused, "every refusal names two copies that conflict")
upload("device"); s:sync()
snapshot = mirror.device
refuses({{D:slice(0, 64), bufs.pinned:slice(0, 64)}, {bufs.pinned:slice(64, 64), bufs.managed:slice(0, 64)},
         {D:slice(63, 2), bufs.pinned:slice(0, 2)}}, "copies 1 and 3 write overlapping bytes", "one byte of overlap")
refuses({{bufs.pinned:slice(0, 64), bufs.managed:slice(0, 64)}, {D:slice(0, 8), bufs.pinned:slice(60, 8)}},
        "copy 2 reads bytes that copy 1 writes", "a source that another copy writes")
refuses({{D:view("uint8"):range(1, 16), bufs.pinned:slice(0, 16)}, {bufs.managed:slice(0, 16), D:slice(15, 16)}},
        "copy 2 reads bytes that copy 1 writes", "a view's range and a slice")
t.is(download("device"), snapshot, "refused dependent batches queued nothing")
-- adjacent ranges touch without overlapping; a copy may read its own destination
cuda.copy_batch(s, {{D:slice(0, 64), bufs.pinned:slice(64, 64)}, {D:slice(64, 64), D:slice(128, 64)},
                    {bufs.pinned:slice(0, 64), D:slice(192, 64)}})
cuda.copy_batch(s, {{D, D}})
s:sync()
local want = snapshot:sub(1, 0) .. mirror.pinned:sub(65, 128) .. snapshot:sub(129, 192) .. snapshot:sub(129, SIZE)
t.is(download("device"), want, "adjacent ranges are independent; a copy onto itself is allowed")

-- per-copy options (cuda.core's options=[CopyOptions, ...]): a list of
-- sets, one a copy; equal neighbours share one driver attribute entry
local batched = fakecuda and mode ~= "pairs"
local function same(a, b)
  return a.src_access_order == b.src_access_order and a.prefer_overlap == b.prefer_overlap and
         a.src_location_hint == b.src_location_hint and a.dst_location_hint == b.dst_location_hint
end
local all_match, data_ok = true, true
for _ = 1, 20 do
  upload("pinned"); upload("managed"); s:sync()
  local n, list, opts, want_runs = math.random(1, 24), {}, {}, 0
  local piece = SIZE // 32
  for k = 1, n do
    local src = k % 2 == 0 and "pinned" or "managed"
    list[k] = {D:slice((k - 1) * piece, piece), bufs[src]:slice((k - 1) * piece, piece)}
    local o = (k > 1 and math.random(3) == 1) and opts[k - 1] or
      {src_access_order = ({"stream", "any", "during_api_call", nil})[math.random(4)],
       prefer_overlap = ({true, false, nil})[math.random(3)],
       src_location_hint = ({dev, "host", nil})[math.random(3)],
       dst_location_hint = ({dev, "host", nil})[math.random(3)]}
    opts[k] = o
    if k == 1 or not same(o, opts[k - 1]) then want_runs = want_runs + 1 end
  end
  cuda.copy_batch(s, list, opts)
  s:sync()
  local got = download("device")
  for k = 1, n do
    local src = k % 2 == 0 and "pinned" or "managed"
    local a = (k - 1) * piece
    if got:sub(a + 1, a + piece) ~= mirror[src]:sub(a + 1, a + piece) then data_ok = false end
  end
  if batched then
    local nattrs, rec = fakecuda.last_batch()
    if nattrs ~= want_runs then all_match = false; t.diag(("%d runs, the driver got %d"):format(want_runs, nattrs)) end
    for k = 1, n do
      local o, r = opts[k], rec[k]
      local hint = function(h) return h == "host" and "host" or h and h.id or nil end
      if r.order ~= (o.src_access_order or "stream") or r.flags ~= (o.prefer_overlap and 1 or 0) or
         r.src_hint ~= hint(o.src_location_hint) or r.dst_hint ~= hint(o.dst_location_hint) then
        all_match = false; t.diag(("copy %d: the driver got %s %d"):format(k, r.order, r.flags))
      end
    end
  end
end
t.ok(data_ok, "per-copy options: 20 random batches copy what they should")
if batched then
  t.ok(all_match, "each copy's attributes reach the driver, equal neighbours merged into one entry")
  cuda.copy_batch(s, {{D:slice(0, 8), bufs.pinned:slice(0, 8)}, {D:slice(8, 8), bufs.pinned:slice(8, 8)}},
                  {src_access_order = "any"})
  local nattrs, rec = fakecuda.last_batch()
  t.ok(nattrs == 1 and rec[1].order == "any" and rec[2].order == "any", "one set for all: one entry")
else
  t.skip("the driver's attributes are read back under the fake driver, in batch mode", 2)
end
local two = {{D:slice(0, 8), bufs.pinned:slice(0, 8)}, {D:slice(8, 8), bufs.pinned:slice(8, 8)}}
refuses(two, "a list of 1 option sets for 2 copies", "a list shorter than the batch", {{}})
refuses(two, "a list of 3 option sets for 2 copies", "a list longer than the batch", {{}, {}, {}})
refuses(two, "options%[2%]: a table of options expected, got number", "a set that is a number", {{}, 5})
refuses(two, "options%[2%]: unknown option 'order'", "an unknown option in copy 2's set", {{}, {order = 1}})
refuses(two, "options%[1%]: src_access_order: invalid option 'never'", "a bad order in copy 1's set",
        {{src_access_order = "never"}, {}})
refuses(two, "options%[2%]: dst_location_hint must be", "a bad hint in copy 2's set", {{}, {dst_location_hint = 0}})
refuses(two, "options%[1%]: field 'prefer_overlap' must be a boolean", "a bad flag", {{prefer_overlap = 1}, {}})
refuses(two, "has no field 'src_access_order'", "a list with a field of one set",
        {{}, {}, src_access_order = "any"})

-- hints and overlap are accepted
cuda.copy_batch(s, {good}, {src_location_hint = dev, dst_location_hint = "host", prefer_overlap = true})
s:sync()

-- a captured batch keeps its buffers for the graph
local tmp = kinds.device:allocate(SIZE, s)
s:begin_capture()
cuda.copy_batch(s, {{tmp, bufs.pinned}})   -- two batches: the second reads what the first writes
cuda.copy_batch(s, {{bufs.device, tmp:view("uint8")}})
local g = s:end_capture()
tmp:close(s)
upload("pinned"); s:sync()
g:launch(s); s:sync()
t.is(download("device"), mirror.pinned, "a captured batch runs in its graph after its buffers are closed")
g:close()

local api = mode == "pairs" and "cuMemcpyAsync" or "cuMemcpyBatchAsync"
if fakecuda then
  fakecuda.fail(api, 1, 1)
  local ok, e = pcall(cuda.copy_batch, s, {good})
  t.ok(not ok and tostring(e):find(api), "a driver failure raises a cuda.Error naming " .. api)
end
t.done()
