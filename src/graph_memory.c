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
 * The memory is the graph's: it exists from a launch of the graph to its
 * free, which is a node of the graph (close(s) while s is captured) or a
 * stream-ordered free after a launch (close(s) on a stream that is not
 * captured). A graph whose allocation is not freed cannot be launched
 * again (the driver refuses the launch). close() without a stream and the
 * collection of the buffer close it for Lua only: no free is issued (one
 * outside the graph before its launch would be refused, and a finalizer
 * cannot tell), so the memory stays with the graph.
 *
 * Buffers are ordinary cuda.Buffers of a resource of kind "device" marked
 * graph_memory: their close comes here (buffer.c), and graphs that use
 * them never defer their free (the graph owns the memory, not the buffer). */
#include <stdint.h>
#include <string.h>

#include "cl.h"

#define CL_GRAPHMR "cuda.GraphMemoryResource"

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

static void activate(lua_State *L, const cl_Stream *s)
{
  if (s->green)
    cl_green_activate(L, s->green);
  else
    cl_device_activate(L, s->dev);
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
  cl_MemoryResource *mr = check_graph_mr(L, 1);
  cl_Stream *s = cl_check_stream(L, 3);
  luaL_argcheck(L, n > 0 && (lua_Unsigned)n <= SIZE_MAX, 2, "the size must be at least 1 byte");
  if (s->dev != mr->dev)
    luaL_argerror(L, 3, "the stream belongs to another device than the resource");
  if (!capturing(L, s))
    luaL_argerror(L, 3, "the stream is not capturing: graph memory is allocated between "
                        "s:begin_capture() and s:end_capture()");
  activate(L, s);
  CUdeviceptr p = 0;
  CL_TRY(L, cuMemAllocAsync, (&p, (size_t)n, s->handle));
  b->ptr = p;
  b->size = (size_t)n;
  b->stream = s;
  b->closed = 0;
  mr->live_bytes += b->size;
  mr->live_buffers++;
  return 1;
}

static void count_out(cl_Buffer *b)
{
  b->closed = 1;
  b->mr->live_bytes -= b->size;
  b->mr->live_buffers--;
}

int cl_graph_memory_close(lua_State *L, cl_Buffer *b, cl_Stream *s)
{
  if (s == NULL) {              /* for Lua only: the memory stays with the graph */
    count_out(b);
    return 0;
  }
  int in_graph = capturing(L, s);
  activate(L, s);
  CUresult r = CL_CALL(cuMemFreeAsync, (b->ptr, s->handle));
  if (r != CUDA_SUCCESS && !in_graph)
    return cl_raise_detail(L, r, "cuMemFreeAsync", "graph memory is freed outside its graph only "
                           "once, after a launch of the graph that allocated it");
  if (r != CUDA_SUCCESS)
    return cl_raise(L, r, "cuMemFreeAsync");
  count_out(b);
  return 0;
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
