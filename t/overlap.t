-- cuda.overlap: the schedule model on plain values; a pipeline's issue,
-- capture, timing, limits and search driven through fake streams, events
-- and buffers that record every call (so the order of operations and the
-- dependencies between streams are checked without a GPU); on a GPU, every
-- kind of schedule run and verified.
local t = require "tap"
local cuda = require "cuda"
local overlap = require "cuda.overlap"

local seed = t.seed()

-- --- the model: weights and splits ------------------------------------------------------

t.is(table.concat(overlap.weights(3, 0), " "), "1 1 1", "weights: body chunks weigh 1")
t.is(table.concat(overlap.weights(2, 2), " "), "0.25 0.5 1 1 0.5 0.25", "weights: a ramp halves towards both ends")
t.is(#overlap.weights(4), 4, "weights: no ramp by default")

-- nil when chunks cover [0, n) exactly once in order, boundaries but the
-- last on multiples of align; else what is wrong.
local function cover_error(n, chunks, align)
  local offset = 0
  for i, c in ipairs(chunks) do
    if c.offset ~= offset then return ("chunk %d starts at %d, not %d"):format(i, c.offset, offset) end
    if c.count <= 0 then return ("chunk %d is empty"):format(i) end
    offset = offset + c.count
    if i < #chunks and offset % align ~= 0 then return ("chunk %d ends at %d"):format(i, offset) end
  end
  if offset ~= n then return ("the chunks end at %d, not %d"):format(offset, n) end
end

local function counts(chunks)
  local list = {}
  for i, c in ipairs(chunks) do list[i] = c.count end
  return table.concat(list, " ")
end

t.is(counts(overlap.split(6400, overlap.weights(4, 0))), "1600 1600 1600 1600", "split: equal chunks")
t.is(counts(overlap.split(1000, overlap.weights(4, 0))), "256 256 256 232", "split: boundaries rounded to 64 elements")
t.is(counts(overlap.split(1000, {1, 1}, 100)), "500 500", "split: another alignment")
t.is(counts(overlap.split(71, {1, 1}, 1)), "36 35", "split: a boundary half way rounds up")
t.is(counts(overlap.split(10, overlap.weights(8, 0))), "10", "split: fewer elements than one boundary: one chunk")
t.is(counts(overlap.split(0, overlap.weights(3, 0))), "", "split: nothing to split")

local failures = {}
for _ = 1, 300 do
  local n, nchunks, ramp = math.random(1, 1 << 22), math.random(1, 48), math.random(0, 6)
  local align = ({1, 16, 64, 256})[math.random(4)]
  local why = cover_error(n, overlap.split(n, overlap.weights(nchunks, ramp), align), align)
  if why then failures[#failures + 1] = ("n=%d chunks=%d ramp=%d align=%d: %s"):format(n, nchunks, ramp, align, why) end
end
t.is(#failures, 0, "split: 300 random splits cover every element exactly once, aligned")
if #failures > 0 then t.diag(table.concat(failures, "\n", 1, math.min(5, #failures))) end

local ramped = overlap.split(64000, overlap.weights(4, 2))
t.is(#ramped, 8, "split: a ramp of 2 adds two chunks at each end")
t.near(ramped[1].count / ramped[3].count, 0.25, 0.02, "split: the first chunk is a quarter of a body chunk")
t.near(ramped[2].count / ramped[3].count, 0.5, 0.02, "split: the second is half")
t.ok(math.abs(ramped[8].count - ramped[1].count) <= 64, "split: the ramp down mirrors the ramp up")

-- --- the model: schedules and descriptions --------------------------------------------------

local N = 1 << 20
local function schedule(spec) return overlap.schedule(N, spec) end

local seq = schedule{kind = "sequential", chunks = 9, ramp = 3}
t.ok(#seq.chunks == 1 and seq.chunks[1].offset == 0 and seq.chunks[1].count == N, "sequential: the whole array, one chunk")
t.is(seq.name, "sequential", "sequential: its name")
t.is(table.concat(seq.stream_ids, ","), "1", "sequential: on the main stream")

local names = {
  {{kind = "streams", chunks = 4}, "4 streams"},
  {{kind = "streams", chunks = 8, ramp = 3, streams = 8}, "8 streams, ramp 3"},
  {{kind = "breadth", chunks = 8, ramp = 3, streams = 8}, "8 streams, breadth-first, ramp 3"},
  {{kind = "engines", chunks = 10, ramp = 2}, "3 engine streams, 14 chunks, ramp 2"},
  {{kind = "pairs", chunks = 16}, "2+1+2 copy/compute/copy streams, 16 chunks"},
  {{kind = "direct", chunks = 8, ramp = 2}, "copy in, kernel writes to pinned host memory, 12 chunks, ramp 2"},
  {{kind = "zerocopy", chunks = 1}, "zero-copy: one kernel reads and writes pinned host memory"},
}
for _, case in ipairs(names) do
  t.is(schedule(case[1]).name, case[2], "describe: " .. case[2])
end
t.is(overlap.describe{kind = "streams", chunks = {{}, {}}, ramp = 0, nstreams = 2}, "2 streams",
     "describe takes any table with kind, chunks, ramp and nstreams")

local streams4 = schedule{kind = "streams", chunks = 8, streams = 4}
t.is(table.concat(streams4.stream_ids, ","), "1,2,3,4", "streams: on the first streams, main first")
t.is(table.concat(streams4.rows, ","), "stream 1,stream 2,stream 3,stream 4", "streams: a row per stream")
local engines = schedule{kind = "engines", chunks = 10, ramp = 2}
t.is(table.concat(engines.rows, ","), "H2D engine,compute,D2H engine", "engines: a row per engine")
t.is(schedule{kind = "pairs", chunks = 8}.nstreams, 5, "pairs: five streams")
t.is(table.concat(schedule{kind = "direct", chunks = 4}.rows, ","), "H2D engine,compute + D2H", "direct: its rows")

local copies = overlap.copies(engines)
t.is(copies.name, "copies alone, 14 each way", "copies: its name")
t.is(table.concat(copies.stream_ids, ","), "2,3", "copies: on streams 2 and 3, off the main stream")
t.is(counts(copies.chunks), counts(engines.chunks), "copies: the schedule's chunks")
t.ok(copies.chunks[1] ~= engines.chunks[1], "copies: new chunk tables, the schedule untouched")
t.is(table.concat(overlap.copies(engines, 1).stream_ids, ","), "1,2", "copies: from another first stream")
t.raises(function() schedule{kind = "bogus"} end, "unknown kind 'bogus'", "schedule: an unknown kind is an error")
t.ok(overlap.uses_copy_engines(engines) and not overlap.uses_copy_engines(schedule{kind = "direct", chunks = 2})
     and not overlap.uses_copy_engines(schedule{kind = "zerocopy"}), "uses_copy_engines: engines yes, direct and zero-copy no")

-- plain values only: no userdata anywhere in a schedule
local function plain(v)
  if type(v) == "table" then
    for k, x in pairs(v) do if not plain(k) or not plain(x) then return false end end
    return true
  end
  return type(v) ~= "userdata" and type(v) ~= "function"
end
t.ok(plain(engines) and plain(copies) and plain(seq), "schedules are plain values")

-- --- the model: the candidates ------------------------------------------------------

local candidates = overlap.candidates()
t.is(#candidates, 121, "candidates: 121")
local by_kind, seen, most_chunks, most_streams, dup = {}, {}, 0, 0, nil
for _, spec in ipairs(candidates) do
  by_kind[spec.kind] = (by_kind[spec.kind] or 0) + 1
  local s = overlap.schedule(16000000, spec)
  if seen[s.name] then dup = s.name end
  seen[s.name] = true
  most_chunks, most_streams = math.max(most_chunks, #s.chunks), math.max(most_streams, s.nstreams)
end
t.ok(by_kind.engines == 70 and by_kind.pairs == 24 and by_kind.direct == 14 and by_kind.zerocopy == 1
     and by_kind.streams == 6 and by_kind.breadth == 6, "candidates: 70 engines, 24 pairs, 14 direct, 1 zero-copy, 6 + 6 streams")
t.is(dup, nil, "candidates: every one described differently")
t.ok(most_chunks <= 64 and most_streams == 16, "candidates: at most 64 chunks (the events), 16 streams")
t.isnt(overlap.candidates(), candidates, "candidates: a fresh list each call")

-- --- fakes: streams, events, buffers and a launch that record every call ----------------

local log
local function note(entry) log[#log + 1] = entry end

local Event = {}
Event.__index = Event
Event.__sub = function(stop, start) return stop.stamp - start.stamp - 1 end   -- operations in between
function Event:sync() end

local graphs = {captured = 0, closed = 0}
local Graph = {}
Graph.__index = Graph
function Graph:launch(s)   -- as long as the run it captured
  for _ = 1, self.ops do note{s = s.name, what = "graph"} end
end
function Graph:close() if not self.closed then self.closed = true; graphs.closed = graphs.closed + 1 end end
Graph.__close = Graph.close

local Stream = {}
Stream.__index = Stream
function Stream:record(ev) note{s = self.name, what = "record", ev = ev}; ev.stamp = #log end
function Stream:wait(ev) note{s = self.name, what = "wait", ev = ev} end
function Stream:sync() end
function Stream:begin_capture() note{s = self.name, what = "begin_capture"}; self.capture_from = #log end
function Stream:end_capture()
  note{s = self.name, what = "end_capture"}
  graphs.captured = graphs.captured + 1
  return setmetatable({ops = #log - self.capture_from - 1}, Graph)
end

local Buffer = {}
Buffer.__index = Buffer
function Buffer:slice(off, size) return setmetatable({name = self.name, off = self.off + off, size = size}, Buffer) end
function Buffer:fill(byte) self.filled = byte end
function Buffer:copy_from(src, s)
  note{s = s.name, what = "copy", src = src, dst = self, ok = src.size == self.size and src.off == self.off}
end

local function fake_resource(names)
  local made = 0
  return {allocate = function(_, bytes)
    made = made + 1
    return setmetatable({name = names[made], off = 0, size = bytes}, Buffer)
  end}
end

local function fake_device()
  local nstreams = 0
  return {
    name = "fake", memory_resource = fake_resource{"d_in", "d_out"},
    create_stream = function() nstreams = nstreams + 1; return setmetatable({name = "s" .. nstreams}, Stream) end,
    create_event = function() return setmetatable({name = "event"}, Event) end,
  }
end

local real_launch = cuda.launch
local function fake_launch(s, config, kernel, input, output, scale, n)
  note{s = s.name, what = "launch", src = input, dst = output, kernel = kernel, scale = scale,
       config = tostring(config), n = tostring(n)}
end

-- A pipeline on the fakes, its events named for the logs.
local function fake_pipeline(n, opts)
  opts = opts or {}
  local p = overlap.pipeline(fake_device(), {n = n, kernel = "K", args = {"SCALE"}, streams = opts.streams or 5,
                                             warmup = 1, runs = 3, host_resource = fake_resource{"h_in", "h_out"}})
  p.fork_event.name, p.start_event.name, p.stop_event.name = "fork", "start", "stop"
  for i, e in ipairs(p.join_events) do e.name = "join" .. i end
  for i, e in ipairs(p.copied_events) do e.name = "copied" .. i end
  for i, e in ipairs(p.computed_events) do e.name = "computed" .. i end
  return p
end

-- "s2 H2D 256": stream, operation, first element of the chunk.
local ROUTES = {["h_in>d_in"] = "H2D", ["d_out>h_out"] = "D2H", ["d_in>d_out"] = "kernel",
                ["d_in>h_out"] = "kernel>h_out", ["h_in>h_out"] = "kernel(h_in>h_out)"}
local function text(e)
  if e.what == "record" or e.what == "wait" then return ("%s %s %s"):format(e.s, e.what, e.ev.name) end
  if e.what == "copy" or e.what == "launch" then
    return ("%s %s %d"):format(e.s, ROUTES[e.src.name .. ">" .. e.dst.name] or "?", e.src.off // 4)
  end
  return e.s .. " " .. e.what
end
local function texts(entries)
  local list = {}
  for i, e in ipairs(entries) do list[i] = text(e) end
  return table.concat(list, "; ")
end

local function issue(p, sched, tl)
  log = {}
  p:issue(p:bind(sched), tl)
  return texts(log)
end

cuda.launch = fake_launch

-- --- issuing: the order of operations --------------------------------------------------------

local fp = fake_pipeline(1024)
t.is(#fp.streams, 5, "pipeline: the streams asked for, the main one first")
t.is(fp.streams[1], fp.main, "pipeline: stream 1 is the main stream")
t.is(fake_pipeline(1024, {streams = 1}).streams[3] ~= nil, true, "pipeline: three streams at least")
t.ok(fp.whole.offset == 0 and fp.whole.count == 1024 and fp.whole.d_in.size == 4096, "pipeline: the whole array bound")
t.ok(fp.buffers.d_in.filled and fp.buffers.d_out.filled,
     "pipeline: the device buffers are written before any limit copies them out")

t.is(issue(fp, overlap.schedule(1024, {kind = "sequential"})), "s1 H2D 0; s1 kernel 0; s1 D2H 0",
     "sequential: copy in, kernel, copy out on the main stream, no fork")
t.is(issue(fp, overlap.schedule(1024, {kind = "streams", chunks = 4, streams = 2})),
     "s1 record fork; s2 wait fork; " ..
     "s1 H2D 0; s1 kernel 0; s1 D2H 0; s2 H2D 256; s2 kernel 256; s2 D2H 256; " ..
     "s1 H2D 512; s1 kernel 512; s1 D2H 512; s2 H2D 768; s2 kernel 768; s2 D2H 768; " ..
     "s2 record join2; s1 wait join2", "streams: fork, chunk by chunk on the streams in turn, join")
t.is(issue(fp, overlap.schedule(1024, {kind = "breadth", chunks = 4, streams = 2})),
     "s1 record fork; s2 wait fork; " ..
     "s1 H2D 0; s2 H2D 256; s1 H2D 512; s2 H2D 768; s1 kernel 0; s2 kernel 256; s1 kernel 512; s2 kernel 768; " ..
     "s1 D2H 0; s2 D2H 256; s1 D2H 512; s2 D2H 768; " ..
     "s2 record join2; s1 wait join2", "breadth: every copy in, then every kernel, then every copy out")
t.is(issue(fp, overlap.schedule(1024, {kind = "engines", chunks = 2})),
     "s1 record fork; s2 wait fork; s3 wait fork; " ..
     "s1 H2D 0; s1 record copied1; s2 wait copied1; s2 kernel 0; s2 record computed1; s3 wait computed1; s3 D2H 0; " ..
     "s1 H2D 512; s1 record copied2; s2 wait copied2; s2 kernel 512; s2 record computed2; s3 wait computed2; s3 D2H 512; " ..
     "s2 record join2; s1 wait join2; s3 record join3; s1 wait join3", "engines: chained by events per chunk")
t.is(issue(fp, overlap.schedule(1024, {kind = "direct", chunks = 2})),
     "s1 record fork; s2 wait fork; " ..
     "s1 H2D 0; s1 record copied1; s2 wait copied1; s2 kernel>h_out 0; " ..
     "s1 H2D 512; s1 record copied2; s2 wait copied2; s2 kernel>h_out 512; " ..
     "s2 record join2; s1 wait join2", "direct: the kernel writes to the pinned output, no copy out")
t.is(issue(fp, overlap.schedule(1024, {kind = "zerocopy"})), "s1 kernel(h_in>h_out) 0",
     "zerocopy: one kernel from pinned input to pinned output")
t.is(issue(fp, overlap.copies(overlap.schedule(1024, {kind = "engines", chunks = 2}))),
     "s1 record fork; s2 wait fork; s3 wait fork; s2 H2D 0; s2 H2D 512; s3 D2H 0; s3 D2H 512; " ..
     "s2 record join1; s1 wait join1; s3 record join2; s1 wait join2", "copies: in on one stream, out on another, joined")
local pairs_log = issue(fp, overlap.schedule(1024, {kind = "pairs", chunks = 4}))
t.like(pairs_log, "^s1 record fork; s2 wait fork; s3 wait fork; s4 wait fork; s5 wait fork; " ..
       "s1 H2D 0; .-s3 kernel 0; .-s4 D2H 0; s2 H2D 256; .-s5 D2H 256; s1 H2D 512; .-s4 D2H 512; s2 H2D 768",
       "pairs: chunks take the two copy streams each way in turn")

-- The kernel's arguments: the chunk's slices, the extra arguments, the count.
log = {}
fp:issue(fp:bind(overlap.schedule(1000, {kind = "streams", chunks = 2})))
local launches = {}
for _, e in ipairs(log) do if e.what == "launch" then launches[#launches + 1] = e end end
t.ok(#launches == 2 and launches[1].kernel == "K" and launches[1].scale == "SCALE", "launch: the kernel, the extra arguments")
t.ok(launches[2].n == "cuda.u64(488)" and launches[2].src.size == 488 * 4 and launches[2].dst.off == 512 * 4,
     "launch: the chunk's slices and count")
t.like(launches[2].config, "grid {2, 1, 1}, block {256, 1, 1}", "launch: enough 256-thread blocks for the chunk")

-- Spans for a timeline: each operation bracketed on its own stream and row.
local spans = {}
local fake_tl = {
  begin = function(_, s, row, label) spans[#spans + 1] = {s = s, text = s.name .. " " .. row .. " " .. label}; return #spans end,
  finish = function(_, s, id) spans[id].text = spans[id].text .. (s == spans[id].s and "" or " (finished elsewhere)") end,
}
local issued = issue(fp, overlap.schedule(1024, {kind = "engines", chunks = 1}), fake_tl)
for i, span in ipairs(spans) do spans[i] = span.text end
t.is(table.concat(spans, "; "), "s1 H2D engine H2D; s2 compute kernel; s3 D2H engine D2H", "timeline: spans on the engine rows")
t.like(issued, "s1 H2D 0; s1 record copied1", "timeline: the same operations issued")

-- --- issuing: dependencies, for every candidate -------------------------------------------
--
-- CUDA's rules on the log: a stream runs its operations in order, a record
-- marks what its stream has issued so far, a wait adds that to its stream.
-- Each operation gets the set of operations that finish before it starts.

local function union(a, b)
  local u = {}
  for k in pairs(a) do u[k] = true end
  for k in pairs(b or {}) do u[k] = true end
  return u
end

local function happens_before(entries)
  local done, marks, problems = {}, {}, {}
  for i, e in ipairs(entries) do
    local cur = done[e.s] or {}
    if e.what == "record" then
      marks[e.ev] = cur
    elseif e.what == "wait" then
      if not marks[e.ev] then problems[#problems + 1] = "waits for an unrecorded " .. e.ev.name end
      cur = union(cur, marks[e.ev])
    end
    e.before = cur
    done[e.s] = union(cur, {[i] = true})
  end
  return done, problems
end

-- nil when the run of sched on p is right; else what is wrong.
local function dependency_error(p, sched)
  local bound = p:bind(sched)
  log = {}
  p.main:record(p.start_event)
  p:issue(bound)
  p.main:record(p.stop_event)
  local _, problems = happens_before(log)
  if #problems > 0 then return problems[1] end
  local stop = log[#log].before
  local per_chunk = {}
  for i, e in ipairs(log) do
    if e.what == "copy" or e.what == "launch" then
      if not e.before[1] then return text(e) .. " does not wait for the start" end
      if not stop[i] then return text(e) .. " is not joined before the stop" end
      if e.what == "copy" and not e.ok then return text(e) .. " copies between different slices" end
      local route = ROUTES[e.src.name .. ">" .. e.dst.name]
      local ops = per_chunk[e.src.off] or {}
      if ops[route] then return text(e) .. " twice" end
      ops[route] = i
      per_chunk[e.src.off] = ops
    end
  end
  local chain = ({direct = {"H2D", "kernel>h_out"}, zerocopy = {"kernel(h_in>h_out)"}})[sched.kind]
                or {"H2D", "kernel", "D2H"}
  for _, c in ipairs(sched.chunks) do
    local ops = per_chunk[c.offset * 4] or {}
    for k, route in ipairs(chain) do
      if not ops[route] then return ("chunk at %d: no %s"):format(c.offset, route) end
      if k > 1 and not log[ops[route]].before[ops[chain[k - 1]]] then
        return ("chunk at %d: %s may start before its %s"):format(c.offset, route, chain[k - 1])
      end
    end
  end
  local count = 0
  for _ in pairs(per_chunk) do count = count + 1 end
  if count ~= #sched.chunks then return ("%d chunks touched, not %d"):format(count, #sched.chunks) end
end

local big = fake_pipeline(100003, {streams = 16})
local wrong = {}
for _, spec in ipairs(candidates) do
  local sched = overlap.schedule(big.n, spec)
  local why = dependency_error(big, sched)
  if why then wrong[#wrong + 1] = sched.name .. ": " .. why end
end
t.is(#wrong, 0, "every candidate: each chunk's copy in, kernel and copy out once, in order, between start and stop")
if #wrong > 0 then t.diag(table.concat(wrong, "\n", 1, math.min(5, #wrong))) end
local extra = {overlap.schedule(big.n, {kind = "sequential"}), overlap.copies(overlap.schedule(big.n, candidates[1]))}
t.is(dependency_error(big, extra[1]), nil, "sequential: in order between start and stop")
t.like(dependency_error(big, extra[2]) or "", "no kernel", "the checker notices a missing kernel (copies alone)")

-- the checker itself: an engines run forked and joined but without its
-- events per chunk is caught
local unchained = setmetatable({issue = function(self, sched)
  local st = sched.streams
  self.main:record(self.fork_event)
  for i = 2, 3 do st[i]:wait(self.fork_event) end
  for _, c in ipairs(sched.chunks) do
    c.d_in:copy_from(c.h_in, sched.streams[1])
    cuda.launch(sched.streams[2], c.config, self.kernel, table.unpack(c.device_args))
    c.h_out:copy_from(c.d_out, sched.streams[3])
  end
  for i = 2, 3 do st[i]:record(self.join_events[i]); self.main:wait(self.join_events[i]) end
end}, {__index = big})
t.like(dependency_error(unchained, overlap.schedule(big.n, {kind = "engines", chunks = 3})) or "",
       "kernel may start before its H2D", "the checker notices a kernel that does not wait for its copy")

-- --- binding: what a pipeline can run ------------------------------------------------

t.raises(function() fp:bind(overlap.schedule(1 << 20, {kind = "engines", chunks = 65})) end, "has 65 chunks",
         "bind: more chunks than events is an error")
t.raises(function() fp:bind(overlap.schedule(fp.n, {kind = "streams", chunks = 8})) end, "needs stream 6",
         "bind: more streams than the pipeline has is an error")
t.is(#fp:bind(overlap.schedule(1 << 20, {kind = "streams", chunks = 100, streams = 2})).chunks, 100,
     "bind: streams without events take any number of chunks")
local bound = fp:bind(engines)
t.ok(bound.name == engines.name and bound.chunks ~= engines.chunks and engines.chunks[1].d_in == nil,
     "bind: a new table reading the schedule through, the schedule untouched")

-- --- timing, graphs, limits and the search on the fakes ------------------------------------

local three = function(s) note{s = s.name, what = "a"}; note{s = s.name, what = "b"}; note{s = s.name, what = "c"} end
log = {}
local stats = fp:time(three)
t.ok(stats.n == 3 and stats.median == 3, "time: the pipeline's runs, between its timing events")
t.is(#log, 1 * 3 + 3 * 5, "time: the warm-up untimed, then each run between two records")
t.is(fp:time(three, 7).n, 7, "time: runs overridden")

local eng2 = fp:bind(overlap.schedule(1024, {kind = "engines", chunks = 2}))
log = {}
local fn, graph = fp:runner(eng2, true)
t.ok(graph and log[1].what == "begin_capture" and log[#log].what == "end_capture"
     and texts(log):find("s3 D2H 512", 1, true), "runner: with graph, captures one run from the main stream")
log = {}
fn(fp.main)
t.ok(#log == 21 and texts(log):gsub("s1 graph", "") == ("; "):rep(20), "runner: replays the graph on the stream given")
local _, g2 = fp:runner(eng2, false)
t.is(g2, nil, "runner: no graph unless asked")
local st, _, g3 = fp:measure(eng2, {graph = true, runs = 4})
t.ok(st.n == 4 and st.median == 21 and g3, "measure: a graph replayed, the graph returned")

local limits = fake_pipeline(1 << 16):limits()
t.ok(limits.h2d.median == 1 and limits.d2h.median == 1 and limits.kernel.median == 1 and limits.limit == 1,
     "limits: copy in, copy out, kernel alone: one operation each")
t.is(limits.both.median, 6, "limits: both copies at once: fork, two copies, join")
t.is(limits.h2d_pieces.median, 32, "limits: the copy in as 32 copies")
t.near(limits.copy_cost_us, 1000, 1e-9, "limits: each copy's cost on top, in microseconds")
t.near(limits.h2d_gbps, (1 << 18) / 1e6, 1e-9, "limits: bandwidth from the bytes and the time")
t.ok(limits.both_pieces.median > limits.both.median, "limits: both copies as 32 copies each take more operations")
t.near(limits.copy_cost_both_us, (limits.both_pieces.median - limits.both.median) / 31 * 1000, 1e-9,
  "limits: each pair's cost on top, in microseconds")

-- the bound the cost per operation implies, against the pipeline formula written out here
do
  local bytes = 64e6
  local lim = {h2d = {median = 1.2}, d2h = {median = 1.1}, both = {median = 1.3}, kernel = {median = 0.3},
               copy_cost_both_us = 6}
  local best_n, best_ms
  for n = 1, 64 do
    local h, d, k, c = 1.2 / n, 1.1 / n, 0.3 / n, 0.006 + 1.3 / n
    local ms = h + k + d + (n - 1) * math.max(c, k)
    if not best_ms or ms < best_ms then best_n, best_ms = n, ms end
  end
  local bound = overlap.bound(lim, bytes)
  t.ok(bound.chunks == best_n and math.abs(bound.ms - best_ms) < 1e-12,
    ("bound: the pipeline model's best, %d chunks, %.3f ms"):format(best_n, best_ms))
  t.is(bound.costs.queued_us, 6, "bound: a chunk costs the measured pair's cost")
end

local steps, done = 0, 0
local found = overlap.search(big, {progress = {step = function(_, n) steps = steps + n end, done = function() done = done + 1 end}})
t.ok(steps == 121 and done == 1, "search: a progress step per candidate, then done")
t.is(#found.measured, 121, "search: every candidate measured")
local fewest = math.huge
for i, m in ipairs(found.measured) do
  if m.name ~= overlap.schedule(big.n, candidates[i]).name then fewest = -1; break end
  if m.kind ~= "direct" and m.kind ~= "zerocopy" then fewest = math.min(fewest, m.median_ms) end
end
t.ok(fewest == 22 and found.copy_engines.stats.median == 22 and found.copy_engines.tried == 106,
     "search: the best copy-engine schedule (fewest operations: 4 streams), 106 tried")
t.ok(found.best.sched.kind == "zerocopy" and found.best.tried == 121 and found.best.stats.median == 1,
     "search: the best of all, 121 tried")
t.ok(found.copy_engines.fn and found.copy_engines.graph == nil, "search: without graphs, the function that issues it")

local before = graphs.captured - graphs.closed
local with_graphs = overlap.search(big, {graph = true, candidates = {candidates[1], candidates[2], candidates[71], candidates[109]}})
t.is(graphs.captured - graphs.closed - before, 2, "search with graphs: all closed but the two winners'")
t.ok(with_graphs.copy_engines.graph and with_graphs.best.graph and not with_graphs.best.graph.closed,
     "search with graphs: the winners' graphs open")
local only_engines = overlap.search(big, {candidates = {candidates[1], candidates[2]}})
t.is(only_engines.best, only_engines.copy_engines, "search: with no other kind, the best is the copy-engine one")

-- --- verifying, on host memory ------------------------------------------------------------

local host = cuda.HostMemoryResource()
local wrap = {allocate = function(_, bytes) return host:allocate(bytes) end}
local dev = fake_device()
dev.memory_resource = wrap
local hp = overlap.pipeline(dev, {n = 100, kernel = "K", host_resource = wrap})
local expected = host:allocate(400):view("float32"):random(-1, 1, seed)
local function writes(bad_at)
  return function()
    local out = hp.buffers.h_out:view("float32"):copy(expected)
    if bad_at then out[bad_at] = out[bad_at] + 1 end
  end
end
local v = hp:verify(writes(), expected, 1e-6, 1e-6)
t.ok(v.passed and v.max_abs_err == 0 and v.first_bad_index == nil, "verify: a right output passes")
v = hp:verify(writes(7), expected, 1e-6, 1e-6)
t.ok(not v.passed and v.first_bad_index == 7 and math.abs(v.max_abs_err - 1) < 1e-6, "verify: a wrong element is found")
v = hp:verify(function() end, expected, 1e-6, 1e-6)
t.ok(not v.passed and v.first_bad_index == 1, "verify: poisons the output first")

cuda.launch = real_launch

-- --- on a GPU -----------------------------------------------------------------------------

local GPU_TESTS = 14
local available, reason = cuda.is_available()
if not available then
  t.skip("no CUDA device (" .. tostring(reason) .. ")", GPU_TESTS)
  t.done()
end

local gpu = cuda.Device(0)
gpu:set_current()
local kernel = require("cuda.kernels").load(gpu, "vector_scale.cu", "vector_scale")
local n = 100003
local p = overlap.pipeline(gpu, {n = n, kernel = kernel, args = {cuda.f32(2.5)}, streams = 8, warmup = 1, runs = 3})
local h_in = p.buffers.h_in:view("float32"):random(0, 100, seed)
local want = host:allocate(p.bytes):view("float32"):copy(h_in):scale(2.5)
for _ = 1, 50 do want:mul(want):add(1):sqrt() end

local kinds = {
  {kind = "sequential"}, {kind = "streams", chunks = 3}, {kind = "breadth", chunks = 4, ramp = 1},
  {kind = "engines", chunks = 5, ramp = 2}, {kind = "pairs", chunks = 8, ramp = 1},
  {kind = "direct", chunks = 4, ramp = 2}, {kind = "zerocopy"},
}
for _, spec in ipairs(kinds) do
  local sched = p:bind(overlap.schedule(n, spec))
  local stats, run = p:measure(sched)
  local check = p:verify(run, want, 1e-4, 1e-4)
  t.ok(check.passed and stats.median > 0 and stats.n == 3, ("gpu %s: verified, %.3f ms"):format(sched.name, stats.median))
end

local eng = p:bind(overlap.schedule(n, {kind = "engines", chunks = 6}))
local gstats, replay, g <close> = p:measure(eng, {graph = true})
t.ok(g and gstats.median > 0 and p:verify(replay, want, 1e-4, 1e-4).passed, "gpu: a captured graph replays, verified")
t.ok(p:verify(function(s) p:issue(p:bind(overlap.copies(eng)), nil) end, want, 1e-4, 1e-4).passed,
     "gpu: the copies alone bring the last results back")
t.ok(not p:verify(function() end, want, 1e-4, 1e-4).passed, "gpu: verify fails when nothing runs")

local lim = p:limits()
t.ok(lim.limit == math.max(lim.h2d.median, lim.d2h.median, lim.kernel.median) and lim.h2d_pieces.median > 0
     and lim.both.median > 0 and lim.h2d_gbps > 0, "gpu limits: measured, the limit the slowest alone")

local small = {candidates[1], candidates[71], candidates[95], candidates[111]}
local result = overlap.search(p, {candidates = small})
t.ok(#result.measured == 4 and result.copy_engines.tried == 3 and result.best.stats.median <= result.copy_engines.stats.median,
     "gpu search: four candidates measured, the best no slower than the best copy-engine one")
t.ok(p:verify(result.best.fn, want, 1e-4, 1e-4).passed, "gpu search: the best schedule verified")

local timeline = require "cuda.timeline"
local tl <close> = timeline.new(gpu, {capacity = 8 * #eng.chunks + 16})
tl:origin(p.main)
p:issue(eng, tl)
local spans_on_gpu = tl:collect()
local rows_ok = #spans_on_gpu == 3 * #eng.chunks
for _, s in ipairs(spans_on_gpu) do
  rows_ok = rows_ok and (s.row == "H2D engine" or s.row == "compute" or s.row == "D2H engine") and s.end_ms >= s.start_ms
end
t.ok(rows_ok, "gpu timeline: a span per operation, on the engine rows")
t.done()
