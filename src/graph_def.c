/* SPDX-License-Identifier: MIT */
/* graph_def.c: a captured graph before instantiation, as cuda.core's
 * GraphDefinition.
 *
 *   s:begin_capture() ... work on s and the streams it forks to ...
 *   local def = s:end_capture{instantiate = false}   -- a cuda.GraphDefinition
 *   local copy = def:clone()
 *   local g1, g2 = def:instantiate(), copy:instantiate{use_node_priority = true}
 *   builder:child(deps, def)                -- the driver copies it
 *   def:debug_dot_print("g.dot"); print(def:debug_dot_str(), def.node_count)
 *   def.node_types                          -- {memset = 2, kernel = 1, ...}
 *
 * Lifetimes, as a builder's: the definition owns its CUgraph and holds what
 * the capture kept (its user value 4, a cuda.GraphRefs); a clone holds the
 * same again, counted apart. Each executable keeps its definition alive,
 * and the definition's GraphRefs lives until the definition is closed and
 * its last executable too: def:close() destroys the CUgraph at once (the
 * driver allows it after instantiation), what the nodes use goes with the
 * last executable. A builder that takes it as a child counts what it uses
 * in its own GraphRefs.
 *
 * HACKING.md's rule: each function reads its arguments and allocates what
 * it returns (a definition or an executable, closed until made) first,
 * then checks the definition, then calls the driver and fills the results
 * with raw operations. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"

typedef struct GraphDef {
  int closed;
  CUgraph graph;
  cl_Device *dev;
  void *green;                  /* captured on a green context's stream: that context */
  int execs;                    /* executables instantiated from it and not yet closed */
} GraphDef;                     /* user values: 1 the device, 3 the green context,
                                 * 4 what its nodes use (a cuda.GraphRefs), as a
                                 * builder's; 2 is unused */

static GraphDef *check_def(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_GRAPHDEF);
}

/* push_graphdef pushes a definition closed until graphdef_fill (raw
 * operations only) gives it graph, the device at devi, what its nodes use
 * (the GraphRefs at refs) and, for a capture on a green context's stream,
 * that context (green, its handle at ctxi; NULL and 0 otherwise). */
static void push_graphdef(lua_State *L)
{
  GraphDef *d = lua_newuserdatauv(L, sizeof *d, 4);
  memset(d, 0, sizeof *d);
  d->closed = 1;                /* until it has its graph */
  luaL_setmetatable(L, CL_GRAPHDEF);
}

static void graphdef_fill(lua_State *L, int di, CUgraph graph, int devi, int refs, void *green,
                          int ctxi)
{
  GraphDef *d = lua_touserdata(L, di);
  d->graph = graph;
  d->dev = lua_touserdata(L, devi);
  d->green = green;
  lua_pushvalue(L, devi);
  lua_setiuservalue(L, di, 1);
  if (green) {
    lua_pushvalue(L, ctxi);
    lua_setiuservalue(L, di, 3);
  }
  lua_pushvalue(L, refs);
  lua_setiuservalue(L, di, 4);
  d->closed = 0;
}

CUgraph cl_graphdef_graph(lua_State *L, int i, cl_Device **dev, void **green)
{
  GraphDef *d = check_def(L, i);
  *dev = d->dev;
  *green = d->green;
  return d->graph;
}

/* its cl_GraphSource's */
static CUgraph source_graph(lua_State *L, int i, cl_Device **dev)
{
  void *green;
  return cl_graphdef_graph(L, i, dev, &green);
}

/* The context the definition's graph was captured in made current. */
static void activate(lua_State *L, const GraphDef *d)
{
  if (d->green)
    cl_green_activate(L, d->green);
  else
    cl_device_activate(L, d->dev);
}

/* Once the definition is closed and none of its executables is left,
 * nothing on the GPU uses what its nodes hold. */
static void release_if_unused(lua_State *L, int di, const GraphDef *d)
{
  if (!d->closed || d->execs > 0)
    return;
  if (lua_getiuservalue(L, di, 4) == LUA_TUSERDATA)
    cl_graph_refs_release(L, lua_gettop(L));
  lua_pop(L, 1);
}

/* its cl_GraphSource's */
static void exec_closed(lua_State *L, int di)
{
  GraphDef *d = lua_touserdata(L, di);
  if (d->execs > 0)
    d->execs--;
  release_if_unused(L, di, d);
}

/* def:instantiate([options]) -> cuda.Graph; as many as wanted */
static int def_instantiate(lua_State *L)
{
  lua_settop(L, 2);
  luaL_checkudata(L, 1, CL_GRAPHDEF);
  unsigned long long flags = cl_check_instantiate_options(L, 2);
  lua_getiuservalue(L, 1, 1);   /* 3: the device */
  cl_push_graph(L);             /* 4: closed until instantiated */
  lua_getiuservalue(L, 1, 3);   /* 5: the green context, or nil */
  GraphDef *d = check_def(L, 1);
  activate(L, d);
  cl_graph_instantiate(L, 4, d->graph, 0, 3, 1, flags);   /* it keeps the definition */
  d->execs++;
  if (d->green)
    cl_graph_set_green(L, 4, d->green, 5);
  lua_settop(L, 4);
  return 1;
}

/* def:clone() -> cuda.GraphDefinition: a copy the driver makes
 * (cuGraphClone), independent of def from then on */
static int def_clone(lua_State *L)
{
  lua_settop(L, 1);
  luaL_checkudata(L, 1, CL_GRAPHDEF);
  push_graphdef(L);          /* 2 */
  cl_push_graph_refs(L);        /* 3: what the copy uses, counted again */
  lua_getiuservalue(L, 1, 1);   /* 4 */
  lua_getiuservalue(L, 1, 3);   /* 5 */
  lua_getiuservalue(L, 1, 4);   /* 6 */
  GraphDef *d = check_def(L, 1);
  CUgraph copy = NULL;
  activate(L, d);
  CL_TRY(L, cuGraphClone, (&copy, d->graph));
  cl_graph_refs_add(L, 3, 6);
  graphdef_fill(L, 2, copy, 4, 3, d->green, 5);
  lua_settop(L, 2);
  return 1;
}

/* cuGraphDebugDotPrint's flags, named as cuda.core's GraphDebugPrintOptions */
static const char *const dot_options[] = {
  "verbose", "runtime_types", "kernel_node_params", "memcpy_node_params", "memset_node_params",
  "host_node_params", "event_node_params", "ext_semas_signal_node_params",
  "ext_semas_wait_node_params", "kernel_node_attributes", "handles", "mem_alloc_node_params",
  "mem_free_node_params", "batch_mem_op_node_params", "extra_topo_info",
  "conditional_node_params", NULL
};

static unsigned check_dot_options(lua_State *L, int idx)
{
  unsigned flags = 0;
  cl_check_options(L, idx, dot_options);
  for (unsigned k = 0; dot_options[k]; k++)   /* CU_GRAPH_DEBUG_DOT_FLAGS_*: bit k */
    if (cl_opt_boolean(L, idx, dot_options[k], 0))
      flags |= 1u << k;
  return flags;
}

/* def:debug_dot_print(path[, options]): the graph in Graphviz's DOT, to a file */
static int def_debug_dot_print(lua_State *L)
{
  lua_settop(L, 3);
  luaL_checkudata(L, 1, CL_GRAPHDEF);
  const char *path = luaL_checkstring(L, 2);
  unsigned flags = check_dot_options(L, 3);
  GraphDef *d = check_def(L, 1);
  CL_TRY(L, cuGraphDebugDotPrint, (d->graph, path, flags));
  return 0;
}

/* A temporary file for debug_dot_str, removed when its holder closes
 * (a to-be-closed slot: also when reading it raises). */
#define DOTFILE "cuda.GraphDefinition.dotfile"
typedef struct DotFile {
  int fd;
  char path[4096];
} DotFile;

static int dotfile_close(lua_State *L)
{
  DotFile *f = luaL_checkudata(L, 1, DOTFILE);
  if (f->fd >= 0) {
    close(f->fd);
    unlink(f->path);
    f->fd = -1;
  }
  return 0;
}

static DotFile *push_dotfile(lua_State *L)
{
  DotFile *f = lua_newuserdatauv(L, sizeof *f, 0);
  f->fd = -1;
  luaL_setmetatable(L, DOTFILE);
  lua_toclose(L, -1);
  const char *dir = getenv("TMPDIR");
  if (dir == NULL || *dir == '\0')
    dir = "/tmp";
  if (snprintf(f->path, sizeof f->path, "%s/cudalua-dot-XXXXXX", dir) >= (int)sizeof f->path)
    luaL_error(L, "debug_dot_str: TMPDIR is too long");
  f->fd = mkstemp(f->path);
  if (f->fd < 0)
    luaL_error(L, "debug_dot_str: cannot make a temporary file in %s: %s", dir, strerror(errno));
  return f;
}

/* def:debug_dot_str([options]) -> the DOT text, through a temporary file */
static int def_debug_dot_str(lua_State *L)
{
  lua_settop(L, 2);
  luaL_checkudata(L, 1, CL_GRAPHDEF);
  unsigned flags = check_dot_options(L, 2);
  DotFile *f = push_dotfile(L);
  GraphDef *d = check_def(L, 1);
  CL_TRY(L, cuGraphDebugDotPrint, (d->graph, f->path, flags));
  /* d is not used from here on: reading may allocate */
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (;;) {
    char *p = luaL_prepbuffer(&b);
    ssize_t n = read(f->fd, p, LUAL_BUFFERSIZE);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return luaL_error(L, "debug_dot_str: reading the temporary file: %s", strerror(errno));
    if (n == 0)
      break;
    luaL_addsize(&b, (size_t)n);
  }
  luaL_pushresult(&b);
  return 1;
}

static int def_close(lua_State *L)
{
  GraphDef *d = luaL_checkudata(L, 1, CL_GRAPHDEF);
  if (!d->closed) {
    d->closed = 1;
    cl_graph_release(d->graph);   /* its executables do not need it */
    d->graph = NULL;
    release_if_unused(L, 1, d);
  }
  return 0;
}

static size_t node_count(lua_State *L, const GraphDef *d)
{
  size_t n = 0;
  CL_TRY(L, cuGraphGetNodes, (d->graph, NULL, &n));
  return n;
}

/* CUgraphNodeType's names, as cuda.core's node classes (KernelNode, ...) */
static const char *const node_type_names[] = {
  "kernel", "memcpy", "memset", "host_callback", "child_graph", "empty", "event_wait",
  "event_record", "ext_semaphore_signal", "ext_semaphore_wait", "alloc", "free", "batch_mem_op",
  "conditional"
};
#define NTYPES (sizeof node_type_names / sizeof node_type_names[0])

/* What cuda.h forbids in some child graphs: event record and wait nodes
 * (in a conditional body's), conditional nodes (in any). */
enum { HAS_EVENTS = CL_DEF_EVENTS, HAS_CONDITIONAL = CL_DEF_CONDITIONAL };

/* Visit g's nodes: tally their types into counts (others: types this file
 * has no name for) and their restrictions into *mask, looking depth levels
 * down into child graphs; the driver's error and the call that gave it
 * (*api), or CUDA_ERROR_OUT_OF_MEMORY. Runs no Lua. */
static CUresult scan(CUgraph g, size_t counts[NTYPES], size_t *others, unsigned *mask, int depth,
                     const char **api)
{
  size_t n = 0;
  *api = "cuGraphGetNodes";
  CUresult r = CL_CALL(cuGraphGetNodes, (g, NULL, &n));
  CUgraphNode *nodes = r == CUDA_SUCCESS && n > 0 ? malloc(n * sizeof *nodes) : NULL;
  if (r != CUDA_SUCCESS || n == 0)
    return r;
  if (nodes == NULL)
    return CUDA_ERROR_OUT_OF_MEMORY;
  size_t room = n;
  r = CL_CALL(cuGraphGetNodes, (g, nodes, &n));
  for (size_t k = 0; r == CUDA_SUCCESS && k < n && k < room; k++) {
    CUgraphNodeType type;
    *api = "cuGraphNodeGetType";
    if ((r = CL_CALL(cuGraphNodeGetType, (nodes[k], &type))) != CUDA_SUCCESS)
      break;
    if ((unsigned)type < NTYPES)
      counts[type]++;
    else
      ++*others;
    if (type == CU_GRAPH_NODE_TYPE_EVENT_RECORD || type == CU_GRAPH_NODE_TYPE_WAIT_EVENT)
      *mask |= HAS_EVENTS;
    else if (type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
      *mask |= HAS_CONDITIONAL;
    else if (type == CU_GRAPH_NODE_TYPE_GRAPH && depth > 0) {
      CUgraph child = NULL;
      size_t below[NTYPES] = {0}, below_others = 0;
      *api = "cuGraphChildGraphNodeGetGraph";
      r = CL_CALL(cuGraphChildGraphNodeGetGraph, (nodes[k], &child));
      if (r == CUDA_SUCCESS)
        r = scan(child, below, &below_others, mask, depth - 1, api);
    }
  }
  free(nodes);
  return r;
}

unsigned cl_graphdef_restrictions(lua_State *L, int i)
{
  GraphDef *d = check_def(L, i);
  size_t counts[NTYPES] = {0}, others = 0;
  unsigned mask = 0;
  const char *api;
  CUresult r = scan(d->graph, counts, &others, &mask, 32, &api);
  cl_check(L, r, api);
  return mask;
}

/* def.node_types: {kernel = 2, memcpy = 4, ...}, the types present only */
static int push_node_types(lua_State *L, const GraphDef *d)
{
  size_t counts[NTYPES] = {0}, others = 0;
  unsigned mask = 0;
  const char *api;
  CUresult r = scan(d->graph, counts, &others, &mask, 0, &api);
  cl_check(L, r, api);
  /* d is not used from here on: the table may allocate */
  lua_createtable(L, 0, 4);
  for (size_t k = 0; k < NTYPES; k++)
    if (counts[k] > 0) {
      lua_pushinteger(L, (lua_Integer)counts[k]);
      lua_setfield(L, -2, node_type_names[k]);
    }
  if (others > 0) {
    lua_pushinteger(L, (lua_Integer)others);
    lua_setfield(L, -2, "other");
  }
  return 1;
}

static int def_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);   /* a number key becomes a string: first */
  GraphDef *d = check_def(L, 1);
  if (strcmp(key, "node_count") == 0)
    lua_pushinteger(L, (lua_Integer)node_count(L, d));
  else if (strcmp(key, "node_types") == 0)
    push_node_types(L, d);
  else if (strcmp(key, "device") == 0)
    lua_getiuservalue(L, 1, 1);
  else
    lua_pushnil(L);
  return 1;
}

static int def_tostring(lua_State *L)
{
  GraphDef *d = luaL_checkudata(L, 1, CL_GRAPHDEF);
  if (d->closed)
    return cl_push_closed_name(L, CL_GRAPHDEF);
  size_t n = node_count(L, d);   /* before the string: it may run finalizers */
  lua_pushfstring(L, "cuda.GraphDefinition(%I nodes, device %d)", (lua_Integer)n,
                  d->dev->ordinal);
  return 1;
}

/* end_capture's options: instantiate's, and whether to instantiate */
static int check_end_options(lua_State *L, unsigned long long *flags)
{
  static const char *const known[] = {
    "instantiate", "auto_free_on_launch", "device_launch", "use_node_priority", NULL
  };
  cl_check_options(L, 2, known);
  int instantiate = cl_opt_boolean(L, 2, "instantiate", 1);
  *flags = cl_instantiate_flags(L, 2);
  if (!instantiate && *flags)
    luaL_argerror(L, 2, "instantiate = false takes no instantiate options: give them to "
                        "def:instantiate");
  return instantiate;
}

/* s:end_capture([options]) -> cuda.Graph, instantiated; with
 * {instantiate = false}, a cuda.GraphDefinition (a method of Stream, from
 * here; s:begin_capture is graph.c's) */
static int stream_end_capture(lua_State *L)
{
  lua_settop(L, 2);
  luaL_checkudata(L, 1, CL_STREAM);
  unsigned long long flags;
  int instantiate = check_end_options(L, &flags);
  if (instantiate)
    cl_push_graph(L);           /* closed until instantiated */
  else {
    push_graphdef(L);        /* closed until it has the graph */
    cl_push_graph_refs(L);      /* what it uses, should the stream hold no capture's */
  }
  int gi = instantiate ? lua_gettop(L) : lua_gettop(L) - 1;
  cl_Stream *s = cl_check_stream(L, 1);
  if (s->capture && s->capture->origin != s)   /* its uses are the origin's capture's */
    return luaL_error(L, "end_capture: the stream joined a capture that another stream began: "
                         "end it on that stream");
  CUgraph graph = NULL;
  lua_getiuservalue(L, 1, 1);   /* the device */
  int devi = lua_gettop(L);
  lua_getiuservalue(L, 1, 3);   /* what the capture used */
  int refs = s->capture ? lua_gettop(L) : instantiate ? 0 : gi + 1;
  cl_stream_activate(L, s);     /* instantiated in the context it was captured in */
  cl_GraphRefs *own = s->capture;   /* begun by s:begin_capture: counted */
  if (s->capture) {
    s->capture->capturing = 0;  /* streams that joined it leave it */
    cl_capture_set(L, s, 1, 0);
  }
  CUresult r = CL_CALL(cuStreamEndCapture, (s->handle, &graph));
  cl_capture_ended(own);        /* the releases deferred during it are made */
  if (r != CUDA_SUCCESS) {
    if (refs)
      cl_graph_refs_release(L, refs);   /* no graph will use what it captured */
    cl_raise(L, r, "cuStreamEndCapture");
  }
  lua_getiuservalue(L, 1, 2);   /* the green context, or nil */
  int ctxi = lua_gettop(L);
  if (!instantiate)
    graphdef_fill(L, gi, graph, devi, refs, s->green, ctxi);
  else {
    cl_graph_instantiate(L, gi, graph, 1, devi, refs, flags);
    if (s->green)
      cl_graph_set_green(L, gi, s->green, ctxi);
  }
  lua_settop(L, gi);
  return 1;
}

void cl_open_graph_def(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", def_close}, {"__close", def_close}, {"__tostring", def_tostring}, {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"instantiate", def_instantiate}, {"clone", def_clone},
    {"debug_dot_print", def_debug_dot_print}, {"debug_dot_str", def_debug_dot_str},
    {"close", def_close}, {NULL, NULL}
  };
  static const luaL_Reg stream_methods[] = {{"end_capture", stream_end_capture}, {NULL, NULL}};
  static const cl_GraphSource source = {source_graph, exec_closed};
  cl_new_type(L, CL_GRAPHDEF, meta, methods, def_fields);
  cl_graph_source_register(L, CL_GRAPHDEF, &source);
  cl_add_methods(L, CL_STREAM, stream_methods);
  luaL_newmetatable(L, DOTFILE);
  lua_pushcfunction(L, dotfile_close);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, dotfile_close);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
}
