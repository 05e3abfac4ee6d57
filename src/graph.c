/* graph.c: stream capture and graph replay.
 *
 *   s:begin_capture([mode]) ... work on s (and streams that join it) ...
 *   local g = s:end_capture()     -- instantiated, ready to launch
 *   g:launch(s)
 *
 * Replaying a captured pipeline costs one driver call instead of one per
 * operation. */
#include <string.h>

#include "cl.h"

typedef struct Graph {
  int closed;
  CUgraph graph;
  CUgraphExec exec;
  cl_Device *dev;
} Graph;

static Graph *check_graph(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_GRAPH);
}

/* s:begin_capture(["global" | "thread_local" | "relaxed"]) */
static int stream_begin_capture(lua_State *L)
{
  static const char *const modes[] = {"global", "thread_local", "relaxed", NULL};
  static const CUstreamCaptureMode values[] = {
    CU_STREAM_CAPTURE_MODE_GLOBAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    CU_STREAM_CAPTURE_MODE_RELAXED
  };
  cl_Stream *s = cl_check_stream(L, 1);
  int mode = luaL_checkoption(L, 2, "thread_local", modes);
  cl_device_activate(L, s->dev);
  CL_TRY(L, cuStreamBeginCapture, (s->handle, values[mode]));
  return 0;
}

/* s:end_capture() -> cuda.Graph, instantiated */
static int stream_end_capture(lua_State *L)
{
  cl_Stream *s = cl_check_stream(L, 1);
  Graph *g = lua_newuserdatauv(L, sizeof *g, 1);
  memset(g, 0, sizeof *g);
  g->closed = 1;  /* until both handles exist */
  luaL_setmetatable(L, CL_GRAPH);
  cl_device_activate(L, s->dev);
  CL_TRY(L, cuStreamEndCapture, (s->handle, &g->graph));
  CUresult r = CL_CALL(cuGraphInstantiateWithFlags, (&g->exec, g->graph, 0));
  if (r != CUDA_SUCCESS) {
    CL_CALL(cuGraphDestroy, (g->graph));
    cl_raise(L, r, "cuGraphInstantiateWithFlags");
  }
  g->closed = 0;
  g->dev = s->dev;
  lua_getiuservalue(L, 1, 1);   /* the device */
  lua_setiuservalue(L, -2, 1);
  return 1;
}

/* g:launch(stream) */
static int graph_launch(lua_State *L)
{
  Graph *g = cl_fast_check(L, 1, CL_UV_GRAPH, CL_GRAPH);
  cl_Stream *s = cl_fast_check(L, 2, CL_UV_STREAM, CL_STREAM);
  if (s->dev != g->dev)
    return luaL_argerror(L, 2, "the stream belongs to another device than the graph");
  cl_device_activate(L, s->dev);
  CL_TRY(L, cuGraphLaunch, (g->exec, s->handle));
  return 0;
}

static int graph_close(lua_State *L)
{
  Graph *g = luaL_checkudata(L, 1, CL_GRAPH);
  if (!g->closed) {
    g->closed = 1;
    CL_CALL(cuGraphExecDestroy, (g->exec));
    CL_CALL(cuGraphDestroy, (g->graph));
  }
  return 0;
}

static size_t node_count(lua_State *L, Graph *g)
{
  size_t n = 0;
  CL_TRY(L, cuGraphGetNodes, (g->graph, NULL, &n));
  return n;
}

static int graph_tostring(lua_State *L)
{
  Graph *g = luaL_checkudata(L, 1, CL_GRAPH);
  if (g->closed)
    return cl_push_closed_name(L, CL_GRAPH);
  lua_pushfstring(L, "cuda.Graph(%I nodes, device %d)", (lua_Integer)node_count(L, g),
                  g->dev->ordinal);
  return 1;
}

static int graph_fields(lua_State *L)
{
  Graph *g = check_graph(L, 1);
  const char *key = luaL_checkstring(L, 2);
  if (strcmp(key, "node_count") == 0)
    lua_pushinteger(L, (lua_Integer)node_count(L, g));
  else if (strcmp(key, "device") == 0)
    lua_getiuservalue(L, 1, 1);
  else
    lua_pushnil(L);
  return 1;
}

void cl_open_graph(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", graph_close}, {"__close", graph_close}, {"__tostring", graph_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"launch", graph_launch}, {"close", graph_close}, {NULL, NULL}
  };
  static const luaL_Reg stream_methods[] = {
    {"begin_capture", stream_begin_capture}, {"end_capture", stream_end_capture},
    {NULL, NULL}
  };
  cl_new_type(L, CL_GRAPH, meta, methods, graph_fields);
  cl_add_methods(L, CL_STREAM, stream_methods);
}
