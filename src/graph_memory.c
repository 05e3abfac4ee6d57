/* SPDX-License-Identifier: MIT */
/* graph_memory.c: graph memory, as cuda.core's GraphMemoryResource.
 *
 *   local gm = cuda.GraphMemoryResource(dev)
 *   s:begin_capture()
 *   local tmp = gm:allocate(n, s)    -- an allocation node of the graph
 *   ... work on s using tmp ...
 *   tmp:close(s)                     -- a free node: freed in the graph
 *   local g = s:end_capture()
 *
 * The memory exists from a launch of the graph to its free, which is a
 * node of the graph (close(s) while s is captured) or, for an allocation
 * the graph leaves to the program, a stream-ordered free after a launch
 * (close(s) on a stream that is not captured).
 *
 * Such an allocation is the buffer's, one launch at a time (its state is
 * in cl_Buffer.graph_alloc, and the graph keeps the buffer): the graph's launch
 * makes it LIVE, and the program frees it. The driver refuses a launch
 * while it is live; cudalua refuses it first, saying to close the buffer
 * on a stream. Once the buffer is closed, the graph cannot be launched
 * again: no buffer would own what the launch allocates, so nothing could
 * free it. A launch is refused then too, saying to free the memory in the
 * graph or capture the work again. close() without a stream and the
 * collection of the buffer free a live allocation on the stream of its
 * launch; before a launch they close the buffer for Lua only (a free
 * outside the graph before its launch would be refused).
 *
 * Buffers are ordinary cuda.Buffers of a resource of kind "device" marked
 * graph_memory: their close comes here (buffer.c), and graphs that use
 * them never defer their free (the graph owns the memory, not the buffer). */
#include <stdint.h>
#include <string.h>

#include "cl.h"

#define CL_GRAPHMR "cuda.GraphMemoryResource"

/* A graph-memory buffer's allocation (cl_Buffer.graph_alloc). */
enum {
  GA_CAPTURED,                  /* an allocation node its graph has not run yet */
  GA_LIVE,                      /* a launch allocated it: the program frees it */
  GA_FREED,                     /* the program freed it: no launch may allocate it again */
  GA_IN_GRAPH                   /* a free node of a graph frees it */
};

/* buf:close(s) of a graph-memory buffer (its cl_MROps): on s, a free node
 * while s is captured, else a free after the graph's launch; with no
 * stream, for Lua only. Raises only when given a stream. */
static int graph_memory_close(lua_State *L, cl_Buffer *b, cl_Stream *s);
static const cl_MROps graph_memory_ops = {NULL, NULL, graph_memory_close};

/* cuda.GraphMemoryResource([device]) */
static int cuda_graph_mr(lua_State *L)
{
  if (lua_isnoneornil(L, 1))
    cl_push_current_device(L);
  else
    lua_pushvalue(L, 1);
  cl_MemoryResource *mr = lua_newuserdatauv(L, sizeof *mr, 1);
  memset(mr, 0, sizeof *mr);
  mr->closed = 1;               /* until its device is checked */
  luaL_setmetatable(L, CL_GRAPHMR);
  cl_Device *d = cl_check_device(L, -2);
  lua_pushvalue(L, -2);
  lua_setiuservalue(L, -2, 1);
  mr->kind = CL_MR_DEVICE;
  mr->dev = d;
  mr->graph_memory = 1;
  mr->ops = &graph_memory_ops;
  mr->closed = 0;
  return 1;
}

static cl_MemoryResource *check_graph_mr(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_GRAPHMR);
}

/* Whether s's capture is going on. */
static int capturing(lua_State *L, const cl_Stream *s)
{
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  CL_TRY(L, cuStreamIsCapturing, (s->handle, &st));
  return st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

/* gm:allocate(size, stream) -> cuda.Buffer: an allocation node of the
 * graph that stream is capturing */
static int graph_mr_allocate(lua_State *L)
{
  lua_settop(L, 3);
  luaL_checkudata(L, 1, CL_GRAPHMR);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_checkudata(L, 3, CL_STREAM);
  cl_Buffer *b = cl_push_buffer(L, 0, 0, 1, NULL, 3);
  b->closed = 1;                /* until allocated */
  cl_gc_hold(L);                /* the capture keeps the buffer: a table insert after the checks */
  cl_MemoryResource *mr = check_graph_mr(L, 1);
  cl_Stream *s = cl_check_stream(L, 3);
  luaL_argcheck(L, n > 0 && (lua_Unsigned)n <= SIZE_MAX, 2, "the size must be at least 1 byte");
  if (s->dev != mr->dev)
    luaL_argerror(L, 3, "the stream belongs to another device than the resource");
  if (!capturing(L, s))
    luaL_argerror(L, 3, "the stream is not capturing: graph memory is allocated between "
                        "s:begin_capture() and s:end_capture()");
  cl_stream_activate(L, s);
  CUdeviceptr p = 0;
  CL_TRY(L, cuMemAllocAsync, (&p, (size_t)n, s->handle));
  b->ptr = p;
  b->size = (size_t)n;
  b->stream = s;
  b->graph_alloc = GA_CAPTURED;
  b->graph_capture = s->capture;
  b->closed = 0;
  mr->live_bytes += b->size;
  mr->live_buffers++;
  if (s->capture)               /* its graph keeps it: the buffer owns what the graph allocates */
    cl_capture_keep(L, s, 3, 4, 4);
  lua_pushvalue(L, 4);
  return 1;
}

static void count_out(cl_Buffer *b)
{
  b->closed = 1;
  b->mr->live_bytes -= b->size;
  b->mr->live_buffers--;
}

/* A live allocation whose buffer closes without a stream (or is
 * collected): freed on the stream of its launch, else the legacy
 * stream. Never raises: it runs in finalizers. While a capture is in
 * flight that stream may be the capturing one (the free would become a
 * node of an unrelated graph) and the legacy stream would invalidate
 * it: the free waits for the capture's end (lifetimes.c). */
static void free_live(cl_Buffer *b)
{
  CUcontext was = cl_current_ctx, ctx = b->mr->dev->ctx;
  if (cl_captures_in_flight > 0) {
    cl_release(CL_FREE_GRAPH_MEMORY, ctx, b->ptr, NULL);
    return;
  }
  if (ctx && ctx != was && CL_CALL(cuCtxSetCurrent, (ctx)) != CUDA_SUCCESS)
    return;                     /* no live context: nothing to free it in */
  CUstream on = b->stream && !b->stream->closed ? b->stream->handle : NULL;
  CL_CALL(cuMemFreeAsync, (b->ptr, on));
  if (ctx && ctx != was)
    CL_CALL(cuCtxSetCurrent, (was));
}

static int graph_memory_close(lua_State *L, cl_Buffer *b, cl_Stream *s)
{
  if (s == NULL) {              /* before a launch, for Lua only: the memory stays with the graph */
    if (b->graph_alloc == GA_LIVE) {
      free_live(b);
      b->graph_alloc = GA_FREED;
    }
    count_out(b);
    return 0;
  }
  int in_graph = capturing(L, s);
  cl_stream_activate(L, s);
  CUresult r = CL_CALL(cuMemFreeAsync, (b->ptr, s->handle));
  if (r != CUDA_SUCCESS && !in_graph)
    return cl_raise_detail(L, r, "cuMemFreeAsync", "graph memory is freed outside its graph only "
                           "once, after a launch of the graph that allocated it");
  if (r != CUDA_SUCCESS)
    return cl_raise(L, r, "cuMemFreeAsync");
  b->graph_alloc = in_graph ? GA_IN_GRAPH : GA_FREED;
  count_out(b);
  return 0;
}

int cl_graph_memory_left(lua_State *L, int hi)
{
  const void *capture = lua_touserdata(L, hi);
  int left = 0;
  if (lua_getiuservalue(L, hi, 1) != LUA_TTABLE) {   /* the set: raw reads only */
    lua_pop(L, 1);
    return 0;
  }
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pop(L, 1);
    cl_Buffer *b = luaL_testudata(L, -1, CL_BUFFER);
    if (b && b->mr->graph_memory && b->graph_capture == capture && b->graph_alloc != GA_IN_GRAPH)
      left = 1;
  }
  lua_pop(L, 1);
  return left;
}

/* Why the buffer b's allocation cannot be made again, or NULL; a launch
 * that frees the last one's memory itself (auto_free) may run while it is live. */
static const char *not_free_to_allocate(const cl_Buffer *b, int auto_free)
{
  if (b->graph_alloc == GA_LIVE && !auto_free)
    return "is still allocated by its last launch: free it first, buf:close(stream) "
           "after that launch";
  if (b->closed)
    return "was left to the program, and its buffer is closed: no buffer would own what "
           "a launch allocates. Free it in the graph (buf:close(stream) while capturing) "
           "to launch the graph again and again, or capture the work again";
  return NULL;
}

void cl_graph_memory_launch(lua_State *L, int hi, int si, int check)
{
  const void *capture = lua_touserdata(L, hi);
  cl_Stream *s = lua_touserdata(L, si);
  lua_getiuservalue(L, hi, 1);  /* the set: raw reads only */
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pop(L, 1);
    cl_Buffer *b = luaL_testudata(L, -1, CL_BUFFER);
    if (!b || !b->mr->graph_memory || b->graph_capture != capture || b->graph_alloc == GA_IN_GRAPH)
      continue;
    const char *why = check ? not_free_to_allocate(b, check == 2) : NULL;
    if (why)
      luaL_error(L, "launch: graph memory of %I bytes %s", (lua_Integer)b->size, why);
    if (!check) {               /* the buffer frees it on the stream of this launch */
      b->graph_alloc = GA_LIVE;
      b->stream = s;
      lua_pushvalue(L, si);
      lua_setiuservalue(L, -2, 2);
    }
  }
  lua_pop(L, 1);
}

static int graph_mr_close(lua_State *L)
{
  cl_MemoryResource *mr = luaL_checkudata(L, 1, CL_GRAPHMR);
  mr->closed = 1;               /* its buffers keep the struct: they hold the userdata */
  return 0;
}

static int graph_mr_tostring(lua_State *L)
{
  cl_MemoryResource *mr = luaL_checkudata(L, 1, CL_GRAPHMR);
  if (mr->closed)
    return cl_push_closed_name(L, CL_GRAPHMR);
  lua_pushfstring(L, "cuda.GraphMemoryResource(device %d)", mr->dev->ordinal);
  return 1;
}

static int graph_mr_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);   /* a number key becomes a string: first */
  check_graph_mr(L, 1);
  if (strcmp(key, "device") == 0)
    lua_getiuservalue(L, 1, 1);
  else if (strcmp(key, "is_device_accessible") == 0)
    lua_pushboolean(L, 1);
  else if (strcmp(key, "is_host_accessible") == 0)
    lua_pushboolean(L, 0);
  else
    lua_pushnil(L);
  return 1;
}

void cl_open_graph_memory(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__close", graph_mr_close}, {"__tostring", graph_mr_tostring}, {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"allocate", graph_mr_allocate}, {"close", graph_mr_close}, {NULL, NULL}
  };
  static const luaL_Reg functions[] = {{"GraphMemoryResource", cuda_graph_mr}, {NULL, NULL}};
  cl_new_type(L, CL_GRAPHMR, meta, methods, graph_mr_fields);
  cl_setfuncs(L, functions);
}
