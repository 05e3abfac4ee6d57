/* SPDX-License-Identifier: MIT */
/* graph.c: stream capture and graph replay.
 *
 *   s:begin_capture([mode]) ... work on s (and streams that join it) ...
 *   local g = s:end_capture()     -- instantiated, ready to launch
 *   g:launch(s)
 *
 * Replaying a captured pipeline costs one driver call instead of one per
 * operation.
 *
 * A graph keeps what it uses: while a stream captures, every buffer,
 * kernel and graph its operations use goes into the capture's
 * cuda.GraphRefs (lifetimes.c), which the graph holds. A buffer or
 * ObjectCode closed while a live graph uses it is closed for Lua at once;
 * its memory (or library) goes when the last such graph is closed or
 * collected. */
#include <stdio.h>
#include <string.h>

#include "device.h"

typedef struct Graph {
  int closed;
  CUgraph graph;
  CUgraphExec exec;
  cl_Device *dev;
  int owns_graph;               /* captured: destroyed with the executable */
  void *green;                  /* captured on a green context's stream: that context */
  int program_frees;            /* it allocates graph memory that the program frees: 1, or
                                 * 2 where each launch frees the last one's (auto_free_on_launch) */
} Graph;                        /* user values: 1 the device, 2 what its nodes use,
                                 * 3 the green context, 4 what the graphs it was
                                 * updated from use (a cuda.GraphRefs) */

/* instantiate's options, as cuda.core's GraphCompleteOptions */
static const char *const instantiate_options[] = {
  "auto_free_on_launch", "device_launch", "use_node_priority", NULL
};
static const unsigned long long instantiate_flags[] = {
  CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH,
  CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY
};

unsigned long long cl_instantiate_flags(lua_State *L, int idx)
{
  unsigned long long flags = 0;
  for (int k = 0; instantiate_options[k]; k++)
    if (cl_opt_boolean(L, idx, instantiate_options[k], 0))
      flags |= instantiate_flags[k];
  return flags;
}

unsigned long long cl_check_instantiate_options(lua_State *L, int idx)
{
  cl_check_options(L, idx, instantiate_options);
  return cl_instantiate_flags(L, idx);
}

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
  lua_settop(L, 2);
  luaL_checkudata(L, 1, CL_STREAM);
  int mode = luaL_checkoption(L, 2, "thread_local", modes);
  cl_push_graph_refs(L);        /* what the capture will use */
  cl_Stream *s = cl_check_stream(L, 1);
  cl_device_activate(L, s->dev);
  CL_TRY(L, cuStreamBeginCapture, (s->handle, values[mode]));
  cl_GraphRefs *r = lua_touserdata(L, -1);
  cl_capture_begun(r);          /* releases wait until it ends */
  r->capturing = 1;
  r->origin = s;
  cl_capture_set(L, s, 1, lua_gettop(L));
  return 0;
}

void cl_push_graph(lua_State *L)
{
  Graph *g = lua_newuserdatauv(L, sizeof *g, 4);
  memset(g, 0, sizeof *g);
  g->closed = 1;  /* until the executable exists */
  luaL_setmetatable(L, CL_GRAPH);
}

void cl_graph_instantiate(lua_State *L, int gi, CUgraph graph, int owns_graph, int devi, int refs,
                          unsigned long long flags)
{
  cl_Device *d = cl_check_device(L, devi);
  Graph *g = lua_touserdata(L, gi);
  CUresult r = CL_CALL(cuGraphInstantiateWithFlags, (&g->exec, graph, flags));
  if (r != CUDA_SUCCESS) {
    if (owns_graph) {           /* a capture's graph: nothing will use what it captured */
      cl_graph_release(graph);
      if (refs)
        cl_graph_refs_release(L, refs);
    }
    cl_raise(L, r, "cuGraphInstantiateWithFlags");
  }
  g->closed = 0;
  g->graph = graph;
  g->owns_graph = owns_graph;
  g->dev = d;
  lua_pushvalue(L, devi);
  lua_setiuservalue(L, gi, 1);
  if (refs) {
    lua_pushvalue(L, refs);
    lua_setiuservalue(L, gi, 2);
    if (owns_graph && cl_graph_memory_left(L, refs))   /* a capture's (a builder makes no graph memory) */
      g->program_frees = flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH ? 2 : 1;
  }
}

void cl_graph_set_green(lua_State *L, int gi, void *green, int ctxi)
{
  Graph *g = lua_touserdata(L, gi);
  g->green = green;
  cl_green_graph_opened(green);
  lua_pushvalue(L, ctxi);       /* the context: alive while the graph is */
  lua_setiuservalue(L, gi, 3);
}

/* g:upload(stream): load the graph on the device ahead of its first launch */
/* The context a graph runs in must be its stream's: a graph captured on a
 * green context's stream runs on that context's streams, any other on the
 * device's own (the driver crashes on a mix). */
static void activate_for(lua_State *L, const Graph *g, cl_Stream *s)
{
  if (s->dev != g->dev)
    luaL_argerror(L, 2, "the stream belongs to another device than the graph");
  if (s->green != g->green)
    luaL_argerror(L, 2, g->green ? "the graph was captured in a green context: launch it on that "
                                   "context's streams"
                                 : "a stream of a green context runs only graphs captured on it");
  cl_stream_activate(L, s);     /* the graph's context: s's, as just checked */
}

static int graph_upload(lua_State *L)
{
  Graph *g = check_graph(L, 1);
  cl_Stream *s = cl_check_stream(L, 2);
  activate_for(L, g, s);
  CL_TRY(L, cuGraphUpload, (g->exec, s->handle));
  return 0;
}

CUgraphExec cl_graph_exec(lua_State *L, int i)
{
  return check_graph(L, i)->exec;
}

/* g:launch(stream) */
static int graph_launch(lua_State *L)
{
  Graph *g = cl_fast_check(L, 1, CL_UV_GRAPH, CL_GRAPH);
  cl_Stream *s = cl_fast_check(L, 2, CL_UV_STREAM, CL_STREAM);
  activate_for(L, g, s);
  if (g->program_frees) {       /* graph memory: each launch's is the program's to free */
    lua_settop(L, 2);
    lua_getiuservalue(L, 1, 2);
    cl_graph_memory_launch(L, 3, 2, g->program_frees);
  }
  CUresult r = CL_CALL(cuGraphLaunch, (g->exec, s->handle));
  if (r == CUDA_ERROR_INVALID_VALUE)   /* the driver's answer to an unfreed graph allocation */
    cl_raise_detail(L, r, "cuGraphLaunch", "a graph that allocates memory (cuda.GraphMemoryResource) "
                    "runs again only once that memory is freed: buf:close(stream) after the "
                    "launch, or in the graph");
  cl_check(L, r, "cuGraphLaunch");
  if (g->program_frees)
    cl_graph_memory_launch(L, 3, 2, 0);
  if (s->capture)
    cl_capture_keep(L, s, 2, 1, 1);
  return 0;
}

/* --- whole-graph update --------------------------------------------------- */

/* cuGraphExecUpdate's reasons, in words, indexed by CUgraphExecUpdateResult */
static const char *const update_reasons[] = {
  "success", "the driver gave no specific reason", "the topology changed",
  "a node's type changed", "a kernel node's function changed in a way the driver cannot update",
  "a node's parameters changed in a way the driver cannot update",
  "the graph holds a node the driver cannot update",
  "a kernel node's function changed to one of a kind the driver cannot update",
  "a node's attributes changed in a way the driver cannot update"
};

/* The 1-based position of node among graph's nodes (the order they were
 * added), 0 when it is not among the first 256 or the driver does not say. */
static size_t node_position(CUgraph graph, CUgraphNode node)
{
  CUgraphNode nodes[256];
  size_t n = sizeof nodes / sizeof nodes[0];
  if (node == NULL || CL_CALL(cuGraphGetNodes, (graph, nodes, &n)) != CUDA_SUCCESS)
    return 0;
  for (size_t k = 0; k < n && k < sizeof nodes / sizeof nodes[0]; k++)
    if (nodes[k] == node)
      return k + 1;
  return 0;
}

/* Raise the refusal of cuGraphExecUpdate: its reason and, where the driver
 * names one, the node of the new graph where it failed. */
static int update_refused(lua_State *L, CUresult r, const CUgraphExecUpdateResultInfo *info,
                          CUgraph graph)
{
  if (r != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE)
    return cl_raise(L, r, "cuGraphExecUpdate");
  unsigned reason = (unsigned)info->result;
  size_t at = node_position(graph, info->errorNode);
  char where[64] = "";
  if (at > 0)
    snprintf(where, sizeof where, " (at node %zu of the new graph)", at);
  return luaL_error(L, "update: the driver refused to update the graph: %s%s",
                    reason < sizeof update_reasons / sizeof update_reasons[0]
                      ? update_reasons[reason] : "an unknown reason", where);
}

/* The key of a type's cl_GraphSource in its metatable */
#define GRAPH_SOURCE_KEY "__cl_graph_source"

void cl_graph_source_register(lua_State *L, const char *tname, const cl_GraphSource *source)
{
  luaL_getmetatable(L, tname);
  lua_pushlightuserdata(L, (void *)source);
  lua_setfield(L, -2, GRAPH_SOURCE_KEY);
  lua_pop(L, 1);
}

/* The cl_GraphSource of the value at i, or NULL */
static const cl_GraphSource *graph_source(lua_State *L, int i)
{
  if (luaL_getmetafield(L, i, GRAPH_SOURCE_KEY) == LUA_TNIL)
    return NULL;
  const cl_GraphSource *source = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return source;
}

/* The graph of the update source at 2 and its device; the value whose
 * uses the executable must keep is pushed (a builder's or a capture's). */
static CUgraph update_source(lua_State *L, cl_Device **dev)
{
  Graph *src = luaL_testudata(L, 2, CL_GRAPH);
  if (src == NULL)
    lua_pushvalue(L, 2);
  else {
    check_graph(L, 2);
    lua_getiuservalue(L, 2, 2); /* its builder or definition, or what its capture used */
    *dev = src->dev;
    if (src->owns_graph)
      return src->graph;
  }
  return graph_source(L, -1)->graph(L, lua_gettop(L), dev);
}

/* g:update(source): the executable runs the graph of source (a
 * cuda.GraphBuilder or cuda.GraphDefinition, or a cuda.Graph captured,
 * built or instantiated from a definition) from its next
 * launch, same topology with new parameters, without instantiating again.
 * What the new graph uses is kept alive; what the old one used is kept
 * too until g is closed: a launch of the old graph may still be running. */
static int graph_update(lua_State *L)
{
  lua_settop(L, 2);
  luaL_checkudata(L, 1, CL_GRAPH);
  luaL_argexpected(L, luaL_testudata(L, 2, CL_GRAPH) || graph_source(L, 2), 2,
                   "cuda.GraphDefinition, cuda.GraphBuilder or cuda.Graph");
  cl_push_graph_refs(L);        /* 3: what updates bring in, unless g has one already */
  Graph *g = check_graph(L, 1);
  cl_Device *dev = NULL;
  CUgraph graph = update_source(L, &dev);
  int usesi = lua_gettop(L);
  if (dev != g->dev)
    luaL_argerror(L, 2, "the graph belongs to another device");
  if (g->green)
    cl_green_activate(L, g->green);
  else
    cl_device_activate(L, g->dev);
  CUgraphExecUpdateResultInfo info;
  memset(&info, 0, sizeof info);
  CUresult r = CL_CALL(cuGraphExecUpdate, (g->exec, graph, &info));
  if (r != CUDA_SUCCESS)
    return update_refused(L, r, &info, graph);
  int hi = 3;
  if (lua_getiuservalue(L, 1, 4) == LUA_TUSERDATA)
    hi = lua_gettop(L);
  else {
    lua_pushvalue(L, 3);
    lua_setiuservalue(L, 1, 4);
  }
  if (luaL_testudata(L, usesi, CL_GRAPHREFS))
    cl_graph_refs_add(L, hi, usesi);   /* a capture's */
  else {
    lua_getiuservalue(L, usesi, 4);    /* a builder's or a definition's */
    cl_graph_refs_add(L, hi, lua_gettop(L));
  }
  return 0;
}

static int graph_close(lua_State *L)
{
  Graph *g = luaL_checkudata(L, 1, CL_GRAPH);
  if (!g->closed) {
    g->closed = 1;
    cl_graph_exec_release(g->exec);   /* deferred while a capture is in flight */
    if (g->owns_graph)
      cl_graph_release(g->graph);
    if (g->green)
      cl_green_graph_closed(g->green);
    if (lua_getiuservalue(L, 1, 2) == LUA_TUSERDATA) {
      if (luaL_testudata(L, -1, CL_GRAPHREFS))
        cl_graph_refs_release(L, lua_gettop(L));   /* what the capture used */
      else                      /* a built or defined graph's are its builder's or definition's */
        graph_source(L, -1)->exec_closed(L, lua_gettop(L));
    }
    lua_pushnil(L);             /* what its nodes used may go now */
    lua_setiuservalue(L, 1, 2);
    if (lua_getiuservalue(L, 1, 4) == LUA_TUSERDATA)
      cl_graph_refs_release(L, lua_gettop(L));   /* and what updates brought in */
    lua_pushnil(L);
    lua_setiuservalue(L, 1, 4);
  }
  return 0;
}

/* The node count of the graph at index 1; a built graph's nodes are its
 * builder's (or definition's), gone once that is closed. */
static size_t node_count(lua_State *L, Graph *g)
{
  size_t n = 0;
  if (!g->owns_graph) {
    lua_getiuservalue(L, 1, 2);
    const int *source_closed = lua_touserdata(L, -1);   /* handles start with `closed` */
    int def = luaL_testudata(L, -1, CL_GRAPHDEF) != NULL;
    lua_pop(L, 1);
    if (source_closed == NULL || *source_closed)
      luaL_error(L, def ? "the cuda.GraphDefinition of this graph is closed"
                        : "the cuda.GraphBuilder of this graph is closed");
  }
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
  const char *key = luaL_checkstring(L, 2);   /* a number key becomes a string: first */
  Graph *g = check_graph(L, 1);
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
    {"launch", graph_launch}, {"upload", graph_upload}, {"update", graph_update},
    {"close", graph_close}, {NULL, NULL}
  };
  static const luaL_Reg stream_methods[] = {
    {"begin_capture", stream_begin_capture},
    {NULL, NULL}
  };
  cl_new_type(L, CL_GRAPH, meta, methods, graph_fields);
  cl_add_methods(L, CL_STREAM, stream_methods);
}
