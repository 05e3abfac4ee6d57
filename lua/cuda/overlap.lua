-- cuda.overlap: the copy/compute overlap schedule model and its search.
-- SPDX-License-Identifier: MIT
--
-- An array of n elements goes from pinned host memory to the device,
-- through an element-wise kernel, and back. A schedule splits the array
-- into chunks and says how their copies and kernels go onto streams:
--   "sequential" one stream, the whole array copied in, computed, copied out;
--   "streams"    chunk i on stream i (mod the stream count), issued chunk by
--                chunk (depth first) as cuda.core's overlap sample does;
--   "breadth"    the same streams, issued stage by stage: every copy in,
--                then every kernel, then every copy out;
--   "engines"    one stream per engine (copy in, compute, copy out) chained
--                by events per chunk, so each engine works back to back;
--   "pairs"      the same with two streams for each copy direction, taking
--                chunks in turn, so one copy's setup overlaps the other's
--                transfer (each copy costs a few microseconds on top);
--   "direct"     copy engine in, then the kernel writes its results straight
--                into the pinned output (mapped into the GPU's address
--                space), so there is no copy out to set up;
--   "zerocopy"   no copies at all: the kernel reads the pinned input and
--                writes the pinned output over PCIe;
--   "copies"     a schedule's copies alone: in on one stream, out on
--                another, no kernel and no waits.
-- A ramp makes the first and last chunks small (1/2, 1/4, ... of a body
-- chunk), so the pipeline fills and drains quickly.
--
-- The model (weights, split, schedule, copies, describe, candidates) is
-- plain values and needs no GPU. A pipeline holds the buffers, streams and
-- events, made once; it binds schedules to them, issues them between a
-- fork and a join on its main stream (so two events on the main stream
-- time everything without the host synchronizing in between), captures
-- them as graphs, times them, and measures the machine's limits.
local cuda = require "cuda"
local bench = require "cuda.bench"

local M = {}

M.ALIGN = 64          -- chunk boundaries fall on multiples of this many elements
M.SEARCH_RUNS = 5     -- timed runs per candidate in the search
M.FINALISTS = 3       -- candidates re-measured with the full run count

-- --- the model: plain values -----------------------------------------------------

-- Relative chunk sizes: ramp halving chunks, nchunks body chunks of weight
-- 1, then the ramp mirrored.
function M.weights(nchunks, ramp)
  local w = {}
  for r = ramp or 0, 1, -1 do w[#w + 1] = 0.5 ^ r end
  for _ = 1, nchunks do w[#w + 1] = 1 end
  for r = 1, ramp or 0 do w[#w + 1] = 0.5 ^ r end
  return w
end

-- Chunks {offset, count} covering [0, n) in proportion to weights, their
-- boundaries on multiples of align (default M.ALIGN); chunks that would be
-- empty are left out.
function M.split(n, weights, align)
  align = align or M.ALIGN
  local total = 0
  for _, w in ipairs(weights) do total = total + w end
  local chunks, offset, acc = {}, 0, 0
  for i, w in ipairs(weights) do
    acc = acc + w
    local stop = i == #weights and n or math.min(n, math.floor(n * acc / total / align + 0.5) * align)
    if stop > offset then
      chunks[#chunks + 1] = {offset = offset, count = stop - offset}
      offset = stop
    end
  end
  return chunks
end

-- Per kind: the stream count when it is fixed, the timeline rows when they
-- are not "stream i", whether the copy engines move the data, and whether
-- it chains its streams with events per chunk.
local KINDS = {
  sequential = {streams = 1, copy_engines = true},
  streams = {copy_engines = true},
  breadth = {copy_engines = true},
  engines = {streams = 3, copy_engines = true, chunk_events = true, rows = {"H2D engine", "compute", "D2H engine"}},
  pairs = {streams = 5, copy_engines = true, chunk_events = true, rows = {"H2D 1", "H2D 2", "compute", "D2H 1", "D2H 2"}},
  direct = {streams = 2, chunk_events = true, rows = {"H2D engine", "compute + D2H"}},
  zerocopy = {streams = 1},
  copies = {streams = 2, first_stream = 2, copy_engines = true, rows = {"H2D", "D2H"}},
}

function M.uses_copy_engines(sched)
  return KINDS[sched.kind].copy_engines == true
end

-- A one-line description, as the overlap benchmark prints it.
function M.describe(sched)
  local kind, nchunks = sched.kind, #sched.chunks
  local ramp = sched.ramp > 0 and (", ramp %d"):format(sched.ramp) or ""
  if kind == "sequential" then
    return "sequential"
  elseif kind == "engines" then
    return ("3 engine streams, %d chunks%s"):format(nchunks, ramp)
  elseif kind == "pairs" then
    return ("2+1+2 copy/compute/copy streams, %d chunks%s"):format(nchunks, ramp)
  elseif kind == "direct" then
    return ("copy in, kernel writes to pinned host memory, %d chunks%s"):format(nchunks, ramp)
  elseif kind == "zerocopy" then
    return "zero-copy: one kernel reads and writes pinned host memory"
  elseif kind == "copies" then
    return ("copies alone, %d each way"):format(nchunks)
  end
  local order = kind == "breadth" and ", breadth-first" or ""
  return ("%d streams%s%s"):format(sched.nstreams, order, ramp)
end

-- A schedule of kind over the given chunks. stream_ids are the pipeline's
-- streams it runs on (1 is the main stream).
local function make(kind, chunks, ramp, nstreams, first_stream)
  local sched = {kind = kind, chunks = chunks, ramp = ramp, nstreams = nstreams, stream_ids = {}, rows = {}}
  for i = 1, nstreams do
    sched.stream_ids[i] = first_stream + i - 1
    sched.rows[i] = KINDS[kind].rows and KINDS[kind].rows[i] or "stream " .. sched.stream_ids[i]
  end
  sched.name = M.describe(sched)
  return sched
end

-- The schedule spec describes for an array of n elements. spec: kind,
-- chunks (body chunk count, default 1), ramp (default 0), streams (for
-- "streams" and "breadth"; default: one per chunk), first_stream (default 1,
-- 2 for "copies"). Returns {kind, name, chunks, ramp, nstreams, stream_ids, rows}.
function M.schedule(n, spec)
  local kind = KINDS[spec.kind]
  if not kind then error(("overlap.schedule: unknown kind '%s'"):format(tostring(spec.kind)), 2) end
  local nchunks = spec.kind == "sequential" and 1 or spec.chunks or 1
  local ramp = spec.kind == "sequential" and 0 or spec.ramp or 0
  return make(spec.kind, M.split(n, M.weights(nchunks, ramp)), ramp, kind.streams or spec.streams or nchunks,
              spec.first_stream or kind.first_stream or 1)
end

-- sched's copies alone, on the pipeline's streams 2 and 3 (or from
-- first_stream): the copies cost this much when split this finely.
function M.copies(sched, first_stream)
  local chunks = {}
  for i, c in ipairs(sched.chunks) do chunks[i] = {offset = c.offset, count = c.count} end
  return make("copies", chunks, 0, 2, first_stream or KINDS.copies.first_stream)
end

-- The search's candidates, as specs for M.schedule. Each copy has a fixed
-- cost, so fewer, larger chunks waste less; small chunks at the ends (the
-- ramp) shorten the fill and the drain. The list covers both, per layout.
function M.candidates()
  local list = {}
  local function add(kind, chunks, ramp, streams)
    list[#list + 1] = {kind = kind, chunks = chunks, ramp = ramp, streams = streams}
  end
  for _, n in ipairs{3, 4, 5, 6, 8, 10, 12, 16, 20, 24} do
    for ramp = 0, 6 do add("engines", n, ramp) end
  end
  for _, n in ipairs{8, 12, 16, 20, 24, 32, 40, 48} do
    for ramp = 0, 2 do add("pairs", n, ramp) end
  end
  for _, n in ipairs{4, 8, 12, 16, 20, 24, 32} do
    for _, ramp in ipairs{0, 2} do add("direct", n, ramp) end
  end
  add("zerocopy", 1, 0)
  for _, k in ipairs{4, 8, 16} do
    for _, ramp in ipairs{0, 3} do
      add("streams", k, ramp, k)
      add("breadth", k, ramp, k)
    end
  end
  return list
end

-- --- issuing a bound schedule ----------------------------------------------------------
--
-- Each issue function runs on the pipeline's main stream: the other
-- streams first wait for main (the fork) and main waits for each of them at
-- the end (the join). tl, a cuda.timeline recorder when given, brackets
-- each operation with timeline events.

-- Spans carry the chunk's index and bytes, so a trace links one chunk's
-- H2D, kernel and D2H with flow arrows.
local function span(tl, stream, row, label, op, p, c, s)
  if not tl then return op(p, c, s) end
  local id = tl:begin(stream, row, label, nil, c.trace)
  op(p, c, s)
  tl:finish(stream, id)
end

local function copy_in(p, c, s) c.d_in:copy_from(c.h_in, s) end
local function copy_out(p, c, s) c.h_out:copy_from(c.d_out, s) end
local function launcher(args)
  return function(p, c, s) cuda.launch(s, c.config, p.kernel, table.unpack(c[args])) end
end
local compute = launcher("device_args")          -- device input to device output
local compute_direct = launcher("direct_args")   -- device input to pinned output
local compute_host = launcher("host_args")       -- pinned input to pinned output

local STAGES = {{"H2D", copy_in}, {"kernel", compute}, {"D2H", copy_out}}

local function fork(p, streams)
  p.main:record(p.fork_event)
  for i = 1, #streams do
    if streams[i] ~= p.main then streams[i]:wait(p.fork_event) end
  end
end

local function join(p, streams)
  for i = 1, #streams do
    if streams[i] ~= p.main then
      streams[i]:record(p.join_events[i])
      p.main:wait(p.join_events[i])
    end
  end
end

local function forked(issue)
  return function(p, sched, tl)
    fork(p, sched.streams)
    issue(p, sched, tl)
    join(p, sched.streams)
  end
end

local function stage(p, sched, tl, i, c, st)
  local j = (i - 1) % #sched.streams + 1
  local s = sched.streams[j]
  span(tl, s, sched.rows[j], st[1], st[2], p, c, s)
end

local function issue_depth_first(p, sched, tl)
  for i, c in ipairs(sched.chunks) do
    for _, st in ipairs(STAGES) do stage(p, sched, tl, i, c, st) end
  end
end

local function issue_breadth_first(p, sched, tl)
  for _, st in ipairs(STAGES) do
    for i, c in ipairs(sched.chunks) do stage(p, sched, tl, i, c, st) end
  end
end

-- Copy streams per direction (1 for "engines", 2 for "pairs") around one
-- compute stream; chunk i takes the copy streams in turn. Per chunk, the
-- kernel waits for its copy in and the copy out waits for its kernel.
-- Stream and row layout: copy-in streams, compute, copy-out streams.
local function issue_engines(p, sched, tl)
  local st, rows, k = sched.streams, sched.rows, (#sched.streams - 1) // 2
  local comp = st[k + 1]
  for i, c in ipairs(sched.chunks) do
    local j = (i - 1) % k + 1
    local h2d, d2h = st[j], st[k + 1 + j]
    span(tl, h2d, rows[j], "H2D", copy_in, p, c, h2d)
    h2d:record(p.copied_events[i])
    comp:wait(p.copied_events[i])
    span(tl, comp, rows[k + 1], "kernel", compute, p, c, comp)
    comp:record(p.computed_events[i])
    d2h:wait(p.computed_events[i])
    span(tl, d2h, rows[k + 1 + j], "D2H", copy_out, p, c, d2h)
  end
end

local function issue_direct(p, sched, tl)
  local h2d, comp = sched.streams[1], sched.streams[2]
  for i, c in ipairs(sched.chunks) do
    span(tl, h2d, sched.rows[1], "H2D", copy_in, p, c, h2d)
    h2d:record(p.copied_events[i])
    comp:wait(p.copied_events[i])
    span(tl, comp, sched.rows[2], "kernel", compute_direct, p, c, comp)
  end
end

local function issue_zerocopy(p, sched, tl)
  local s = sched.streams[1]
  for _, c in ipairs(sched.chunks) do span(tl, s, sched.rows[1], "kernel", compute_host, p, c, s) end
end

local function issue_copies(p, sched, tl)
  local h2d, d2h = sched.streams[1], sched.streams[2]
  for _, c in ipairs(sched.chunks) do span(tl, h2d, sched.rows[1], "H2D", copy_in, p, c, h2d) end
  for _, c in ipairs(sched.chunks) do span(tl, d2h, sched.rows[2], "D2H", copy_out, p, c, d2h) end
end

local ISSUE = {
  sequential = issue_depth_first, streams = forked(issue_depth_first), breadth = forked(issue_breadth_first),
  engines = forked(issue_engines), pairs = forked(issue_engines), direct = forked(issue_direct),
  zerocopy = issue_zerocopy, copies = forked(issue_copies),
}

-- --- the pipeline ----------------------------------------------------------------

local Pipeline = {}
Pipeline.__index = Pipeline

-- A kernel's arguments: input, output, the pipeline's extra arguments, count.
local function kernel_args(p, input, output, count)
  local list = table.move(p.args, 1, #p.args, 3, {input, output})
  list[#list + 1] = count
  return list
end

-- Everything one chunk needs, made before any timing: slices of the four
-- buffers, its launch configuration and each route's kernel arguments.
local function bind_chunk(p, c, index)
  local off, size = c.offset * p.element_size, c.count * p.element_size
  local b = {offset = c.offset, count = c.count, trace = {chunk = index, bytes = size},
             h_in = p.buffers.h_in:slice(off, size), h_out = p.buffers.h_out:slice(off, size),
             d_in = p.buffers.d_in:slice(off, size), d_out = p.buffers.d_out:slice(off, size),
             config = cuda.LaunchConfig{grid = (c.count + p.block - 1) // p.block, block = p.block}}
  local count = cuda.u64(c.count)
  b.device_args = kernel_args(p, b.d_in, b.d_out, count)
  b.direct_args = kernel_args(p, b.d_in, b.h_out, count)
  b.host_args = kernel_args(p, b.h_in, b.h_out, count)
  return b
end

local function bind_chunks(p, chunks)
  local bound = {}
  for i, c in ipairs(chunks) do bound[i] = bind_chunk(p, c, i) end
  return bound
end

local function make_events(dev, count)
  local events = {}
  for i = 1, count do events[i] = dev:create_event() end
  return events
end

-- A pipeline on dev for arrays of opts.n elements of opts.element_size
-- bytes (4). The kernel (opts.kernel) maps input[i] to output[i] for i < n
-- and takes (input, output, opts.args..., n as u64); it is launched with
-- opts.block threads a block (256). The host buffers come from
-- opts.host_resource (default: cuda.PinnedMemoryResource()), the device
-- buffers from the device's pool. opts.streams streams (3 at least; the
-- first is the main stream) and opts.events events per chunk (64, the most
-- chunks a schedule may have) are made once. p:time runs opts.warmup (3)
-- untimed and opts.runs (10) timed; opts.timing, more options for
-- bench.time (bench.timing_options: the adaptive mode, opts.runs the least),
-- applies where no run count is given. A warning bench.time gives is kept in
-- p.warnings, "<what>: <warning>".
function M.pipeline(dev, opts)
  local main = dev:create_stream()
  local element_size = opts.element_size or 4
  local bytes = opts.n * element_size
  local host = opts.host_resource or cuda.PinnedMemoryResource()
  local buffers = {h_in = host:allocate(bytes, main), h_out = host:allocate(bytes, main),
                   d_in = dev.memory_resource:allocate(bytes, main), d_out = dev.memory_resource:allocate(bytes, main)}
  -- Every byte of device memory the limits read is written first: D2H
  -- alone copies d_out before any kernel has written it (compute-sanitizer's
  -- initcheck).
  for _, b in ipairs{buffers.d_in, buffers.d_out} do
    if not b.is_host_accessible then b:fill(0xFF, main) end
  end
  main:sync()
  local streams = {main}
  for i = 2, math.max(3, opts.streams or 3) do streams[i] = dev:create_stream() end
  local p = {dev = dev, main = main, n = opts.n, bytes = bytes, element_size = element_size, buffers = buffers,
             kernel = opts.kernel, args = opts.args or {}, block = opts.block or 256,
             warmup = opts.warmup or 3, runs = opts.runs or 10, streams = streams,
             timing = opts.timing or {}, warnings = {},
             join_events = make_events(dev, #streams), fork_event = dev:create_event(),
             start_event = dev:create_event{timing = true}, stop_event = dev:create_event{timing = true},
             copied_events = make_events(dev, opts.events or 64), computed_events = make_events(dev, opts.events or 64)}
  p.whole = bind_chunk(p, {offset = 0, count = opts.n})
  return setmetatable(p, Pipeline)
end

-- sched (from overlap.schedule or overlap.copies) on this pipeline's
-- buffers and streams: a new table; sched's own fields read through.
function Pipeline:bind(sched)
  local streams = {}
  if KINDS[sched.kind].chunk_events and #sched.chunks > #self.copied_events then
    error(("overlap: '%s' has %d chunks, the pipeline events for %d")
      :format(sched.name, #sched.chunks, #self.copied_events), 2)
  end
  for i, id in ipairs(sched.stream_ids) do
    streams[i] = self.streams[id] or error(("overlap: '%s' needs stream %d, the pipeline has %d")
      :format(sched.name, id, #self.streams), 2)
  end
  return setmetatable({chunks = bind_chunks(self, sched.chunks), streams = streams}, {__index = sched})
end

-- Issues one run of a bound schedule on the main stream.
function Pipeline:issue(sched, tl)
  ISSUE[sched.kind](self, sched, tl)
end

-- One run of sched captured from the main stream as a graph.
function Pipeline:capture(sched)
  self.main:begin_capture()
  self:issue(sched)
  return self.main:end_capture()
end

-- The function to time: fn(stream) issues sched, or with graph true
-- replays a graph captured once; returns fn and the graph (the caller
-- closes it).
function Pipeline:runner(sched, graph)
  if not graph then return function() self:issue(sched) end end
  local g = self:capture(sched)
  return function(s) g:launch(s) end, g
end

-- bench.time of fn on the main stream between the pipeline's two timing
-- events, with its warm-up and runs; runs given (the search) is a fixed
-- count, else the pipeline's timing options apply. what names fn in a
-- warning.
function Pipeline:time(fn, runs, what)
  local opts = {warmup = self.warmup, runs = runs or self.runs, events = {self.start_event, self.stop_event}}
  if not runs then
    for k, v in pairs(self.timing) do opts[k] = v end
  end
  local stats = bench.time(self.main, fn, opts)
  if stats.warning then self.warnings[#self.warnings + 1] = ("%s: %s"):format(what or "?", stats.warning) end
  return stats
end

-- Times a bound schedule; opts.graph replays a graph, opts.runs overrides
-- the run count. Returns the stats, the function timed and its graph.
function Pipeline:measure(sched, opts)
  opts = opts or {}
  local range <close> = cuda.nvtx.range(sched.name)
  local fn, graph = self:runner(sched, opts.graph)
  return self:time(fn, opts.runs, sched.name), fn, graph
end

-- Poisons the host output, runs fn(main) once more, and compares every
-- element with expected (a host view, whose dtype the output is read as):
-- {passed, max_abs_err, first_bad_index}, as view:allclose gives them.
function Pipeline:verify(fn, expected, rtol, atol)
  local range <close> = cuda.nvtx.range("verify")
  self.buffers.h_out:fill(0xFF)   -- NaN in every float32 and float64
  fn(self.main)
  self.main:sync()
  local ok, max_err, first_bad = self.buffers.h_out:view(expected.dtype):allclose(expected, rtol, atol)
  return {passed = ok, max_abs_err = max_err, first_bad_index = first_bad}
end

-- What no schedule can beat: the whole array's copy in (h2d), copy out
-- (d2h), kernel, both copies at once, and the copy in as 32 copies
-- (h2d_pieces). Each is {key, what, issue(p)}.
local PIECES = 32
local LIMIT_OPS = {
  {"h2d", "H2D alone", function(p) copy_in(p, p.whole, p.main) end},
  {"d2h", "D2H alone", function(p) copy_out(p, p.whole, p.main) end},
  {"kernel", "kernel alone", function(p) compute(p, p.whole, p.main) end},
  {"both", "H2D + D2H together", function(p)
    p.both = p.both or p:bind(M.copies({chunks = {p.whole}}, 1))
    p:issue(p.both)
  end},
  {"h2d_pieces", "H2D as 32 copies", function(p)
    p.pieces = p.pieces or bind_chunks(p, M.split(p.n, M.weights(PIECES, 0)))
    for i = 1, #p.pieces do copy_in(p, p.pieces[i], p.main) end
  end},
  {"both_pieces", "H2D + D2H as 32 copies each", function(p)
    p.both_pieces = p.both_pieces or p:bind(M.copies({chunks = M.split(p.n, M.weights(PIECES, 0))}, 1))
    p:issue(p.both_pieces)
  end},
}

-- The limits from each op's bench.stats (by key): copy_cost_us, what each
-- copy in costs on top, and copy_cost_both_us, what each pair costs with
-- both directions busy (a copy each way: the pipeline's steady state);
-- limit = max(h2d, d2h, kernel) medians; h2d_gbps, d2h_gbps.
local function derive_limits(bytes, l)
  l.copy_cost_us = (l.h2d_pieces.median - l.h2d.median) / (PIECES - 1) * 1000
  l.copy_cost_both_us = (l.both_pieces.median - l.both.median) / (PIECES - 1) * 1000
  l.limit = math.max(l.h2d.median, l.d2h.median, l.kernel.median)
  l.h2d_gbps, l.d2h_gbps = bytes / l.h2d.median / 1e6, bytes / l.d2h.median / 1e6
  return l
end

-- What no schedule can beat, measured (LIMIT_OPS): bench.stats of each,
-- and the figures derive_limits gives.
function Pipeline:limits()
  local range <close> = cuda.nvtx.range("limits")
  local l = {}
  for _, op in ipairs(LIMIT_OPS) do l[op[1]] = self:time(function() op[3](self) end, nil, op[2]) end
  return derive_limits(self.bytes, l)
end

-- The best the copies' cost per operation allows this problem: cuda.bandwidth's
-- pipeline model (pipeline_ms) with the measured limits: the rates of the
-- whole copies (h2d, d2h, both at once), the kernel's time, and
-- copy_cost_both_us a chunk in the steady state. {chunks, ms, continuous}
-- (bandwidth.best_chunks), the costs used beside it (costs).
function M.bound(limits, bytes, max_chunks)
  local bandwidth = require "cuda.bandwidth"
  local function fit(stats) return {fixed_us = 0, gbps = bytes / stats.median / 1e6} end
  local costs = {bytes = bytes, kernel_ms = limits.kernel.median, h2d = fit(limits.h2d), d2h = fit(limits.d2h),
                 both = fit(limits.both), queued_us = limits.copy_cost_both_us}
  local best = bandwidth.best_chunks(costs, max_chunks)
  best.costs = costs
  return best
end

-- --- several GPUs at once ------------------------------------------------------------
--
-- One Lua state drives pipelines on several GPUs through their streams:
-- run_together issues one run on every pipeline before it waits for any,
-- and times each with its own events. Without a gate the first GPU would
-- start while the host still issues the others' work, and the runs would
-- overlap only partly: so every main stream first waits for a gate, an
-- event recorded on the first GPU behind a memset long enough to cover the
-- issuing (GATE_FILLS_PER_GPU fills of GATE_BYTES a GPU). A gate that
-- opened before the last pipeline was issued is counted (late), so a
-- figure "together" that was not quite together says so.

M.GATE_BYTES = 64 << 20
M.GATE_FILLS_PER_GPU = 8

-- A gate on dev: {stream, buffer, event}.
function M.gate(dev)
  local stream = dev:create_stream()
  local gate = {stream = stream, buffer = dev.memory_resource:allocate(M.GATE_BYTES, stream), event = dev:create_event()}
  stream:sync()
  return gate
end

-- One run of fn(p) on every pipeline of list at once, each between its own
-- timing events; returns each pipeline's milliseconds and whether the gate
-- (opts.gate, made when absent) opened before all of them were issued.
function M.run_together(list, fn, opts)
  local gate = opts and opts.gate or M.gate(list[1].dev)
  for _ = 1, M.GATE_FILLS_PER_GPU * #list do gate.buffer:fill(0, gate.stream) end
  gate.stream:record(gate.event)
  for _, p in ipairs(list) do
    p.main:wait(gate.event)
    p.main:record(p.start_event)
    fn(p)
    p.main:record(p.stop_event)
  end
  local late = gate.event.is_done
  local ms = {}
  for i, p in ipairs(list) do
    p.stop_event:sync()
    ms[i] = p.stop_event - p.start_event
  end
  return ms, late
end

-- bench.stats of each pipeline's times over its warm-up and runs (the
-- first pipeline's counts) of run_together(list, fn); the count of late
-- gates is in the first stats' field late.
function M.time_together(list, fn, what)
  local gate, samples, late = M.gate(list[1].dev), {}, 0
  local p1 = list[1]
  for i = 1, #list do samples[i] = {} end
  for run = 1, p1.warmup + p1.runs do
    local ms, opened = M.run_together(list, fn, {gate = gate})
    if run > p1.warmup then
      for i, t in ipairs(ms) do table.insert(samples[i], t) end
      if opened then late = late + 1 end
    end
  end
  gate.buffer:close(gate.stream)
  gate.stream:sync()
  local stats = {}
  for i = 1, #list do stats[i] = bench.stats(samples[i]) end
  if late > 0 then
    p1.warnings[#p1.warnings + 1] = ("%s: the gate opened before all GPUs were issued in %d of %d runs"):format(
      what or "together", late, p1.runs)
  end
  return stats
end

-- The limits of every pipeline of list measured together: each op of
-- LIMIT_OPS on every GPU at once. Returns one limits table a pipeline.
function M.limits_together(list)
  local range <close> = cuda.nvtx.range("limits together")
  local limits = {}
  for i = 1, #list do limits[i] = {} end
  for _, op in ipairs(LIMIT_OPS) do
    for i, stats in ipairs(M.time_together(list, op[3], op[2] .. ", all GPUs")) do limits[i][op[1]] = stats end
  end
  for i, p in ipairs(list) do derive_limits(p.bytes, limits[i]) end
  return limits
end

-- --- the search --------------------------------------------------------------------

local function close_graph(found)
  if found and found.graph then found.graph:close() end
end

-- The fastest of scored ({sched, median} each), chosen after re-measuring
-- the first M.FINALISTS with the full run count: {sched, stats, fn, graph, tried}.
local function pick_best(p, scored, graph, tried)
  table.sort(scored, function(a, b) return a.median < b.median end)
  local best
  for i = 1, math.min(M.FINALISTS, #scored) do
    local stats, fn, g = p:measure(scored[i].sched, {graph = graph})
    local this = {sched = scored[i].sched, stats = stats, fn = fn, graph = g, tried = tried}
    if not best or stats.median < best.stats.median then
      close_graph(best)
      best = this
    else
      close_graph(this)
    end
  end
  return best
end

-- Measures every candidate (opts.candidates, default overlap.candidates())
-- M.SEARCH_RUNS times, graphs replayed when opts.graph; opts.progress, a
-- cli.progress, steps once a candidate. Returns {copy_engines, best,
-- measured}: the best schedule that moves data with the copy engines
-- (tried = how many such candidates), the best of all (tried = all; the
-- same table when nothing else did better), and {name, kind, median_ms}
-- for every candidate.
function M.search(p, opts)
  opts = opts or {}
  local list = opts.candidates or M.candidates()
  local engines, others, measured = {}, {}, {}
  for _, spec in ipairs(list) do
    local sched = p:bind(M.schedule(p.n, spec))
    local stats, _, graph <close> = p:measure(sched, {graph = opts.graph, runs = M.SEARCH_RUNS})
    table.insert(M.uses_copy_engines(sched) and engines or others, {sched = sched, median = stats.median})
    measured[#measured + 1] = {name = sched.name, kind = sched.kind, median_ms = stats.median}
    if opts.progress then opts.progress:step(1) end
  end
  if opts.progress then opts.progress:done() end
  local best_engines = pick_best(p, engines, opts.graph, #engines)
  local best_other = #others > 0 and pick_best(p, others, opts.graph, #list) or nil
  if best_other and best_other.stats.median < best_engines.stats.median then
    return {copy_engines = best_engines, best = best_other, measured = measured}
  end
  close_graph(best_other)
  return {copy_engines = best_engines, best = best_engines, measured = measured}
end

return M
