-- bench/pageable_copy.lua: why does a pageable -> device copy read slower
-- through cudalua than through bench/copy_ref? Both issue one cuMemcpyAsync
-- from malloc'd memory; what differs is how the source was made. This times
-- each difference alone (events, median of 15 after 2 warm-ups, behind the
-- same poison and head start as copy_ref), in rounds that alternate with
-- copy_ref itself, so drift shows as drift and not as a difference:
--   aligned/copied   page-aligned, first touched by a copy from pinned memory (memory_resources)
--   aligned/cpu      page-aligned, first touched by the CPU (a host view)
--   offset16/cpu     16 bytes past a page, as malloc returns large blocks (copy_ref)
--   offset16/copied  the same, first touched by a copy
--   reused           aligned/cpu's buffer again, after its copies
--   d2h aligned, d2h offset16: device -> pageable into either kind of destination
--
--   cudalua bench/pageable_copy.lua [copy_ref] [bytes] [rounds]
local cuda = require "cuda"
local bench = require "cuda.bench"
local ref_path = arg[1] or "bench/copy_ref"
local N = math.tointeger(tonumber(arg[2] or 64000000))
local ROUNDS = math.tointeger(tonumber(arg[3] or 3))
local dev = cuda.Device(0)
dev:set_current()
local s = dev:create_stream()
local host, pinned = cuda.HostMemoryResource(), cuda.PinnedMemoryResource()
local pattern = pinned:allocate(N)
pattern:view("uint8"):random(0, 255, 7)
local dst = dev.memory_resource:allocate(N, s)
local head = dev.memory_resource:allocate(256 << 20, s)
local check = pinned:allocate(N)

local function source(offset, touch)
  local whole = host:allocate(N + 4096)
  local src = whole:slice(offset, N)
  if touch == "cpu" then src:view("uint8"):copy(pattern:view("uint8"))
  else src:copy_from(pattern, s) s:sync() end
  return src, whole
end

local function time_copy(src, to)
  to = to or dst
  local st = bench.time(s, function() src:copy_to(to, s) end, {warmup = 2, runs = 15,
    prepare = function() to:fill(0xA5, s) head:fill(0, s) end})
  check:copy_from(to, s) s:sync()
  assert(check:view("uint8"):allclose(pattern:view("uint8"), 0, 0), "copy did not arrive")
  return N / st.median / 1e6
end

-- device -> pageable, into a page-aligned destination or one 16 bytes past a page
local function time_d2h(offset)
  local whole = host:allocate(N + 4096)
  dst:copy_from(pattern, s)
  local rate = time_copy(dst, whole:slice(offset, N))
  whole:close()
  return rate
end

local rows, order = {}, {"copy_ref h2d_pageable", "aligned/copied", "aligned/cpu", "offset16/cpu",
  "offset16/copied", "reused", "copy_ref d2h_pageable", "d2h aligned", "d2h offset16"}
for _, k in ipairs(order) do rows[k] = {} end
for round = 1, ROUNDS do
  local ref, why = bench.reference(ref_path, {"--bytes", N, "--runs", 15, "--only", "h2d_pageable,d2h_pageable"},
                                   bench.REFERENCE_COLUMNS, bench.REFERENCE_SPREAD)
  table.insert(rows["copy_ref h2d_pageable"], ref and ref.h2d_pageable.median or 0/0)
  table.insert(rows["copy_ref d2h_pageable"], ref and ref.d2h_pageable.median or 0/0)
  if not ref then io.stderr:write(why, "\n") end
  local keep = {}
  for _, v in ipairs{{"aligned/copied", 0, "copy"}, {"aligned/cpu", 0, "cpu"}, {"offset16/cpu", 16, "cpu"},
                     {"offset16/copied", 16, "copy"}} do
    local src, whole = source(v[2], v[3])
    table.insert(rows[v[1]], time_copy(src))
    keep[v[1]] = whole
  end
  table.insert(rows.reused, time_copy(keep["aligned/cpu"]:slice(0, N)))
  table.insert(rows["d2h aligned"], time_d2h(0))
  table.insert(rows["d2h offset16"], time_d2h(16))
  for _, b in pairs(keep) do b:close() end
  print(("round %d done"):format(round))
end
print(("pageable copies, %d bytes, GB/s per round (median of 15 copies each):"):format(N))
for _, k in ipairs(order) do
  local t = {}
  for i, v in ipairs(rows[k]) do t[i] = ("%7.2f"):format(v) end
  print(("  %-24s %s"):format(k, table.concat(t, " ")))
end
