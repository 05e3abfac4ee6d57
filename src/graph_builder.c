/* SPDX-License-Identifier: MIT */
/* graph_builder.c: explicit graphs, as cuda.core's GraphBuilder.
 *
 *   local b = cuda.Graph([dev])
 *   local a = b:memcpy(nil, d_x, h_x)
 *   local k = b:kernel({a}, cfg, kernel, d_x, cuda.f32(2))
 *   local g = b:instantiate{use_node_priority = true}   -- a cuda.Graph
 *   g:launch(s); g:update_kernel(k, cfg, kernel, d_y, cuda.f32(3))
 *
 * Each node method takes its dependencies first: nil, a node, or a list of
 * nodes of the same builder. A node keeps what it uses alive (its user
 * value 2: buffers, kernel, event, child graph), the builder keeps its
 * nodes, an executable keeps its builder, so nothing a live graph uses is
 * collected. What the nodes use also goes into the builder's cuda.GraphRefs
 * (its user value 4): a buffer or ObjectCode closed while the builder lives
 * (an executable keeps it) is freed or unloaded only once it is collected.
 *
 * Conditional nodes: b:if_cond(deps, h) and b:while_loop(deps, h) return
 * the node and a builder for its body, a graph the node owns; h comes from
 * b:create_conditional_handle() and is passed to the kernel that calls
 * cudaGraphSetConditional(h, value) on the device. A body builder keeps
 * its parent alive and is usable only while the parent is open.
 *
 * cuda.h's restrictions, refused here rather than left to the driver: a
 * graph with conditional nodes (in it or in its bodies) is never a child
 * graph and has one executable at a time; a body holds no event nodes,
 * nor a child graph with some; a conditional node takes only a handle that
 * create_conditional_handle made for its own graph.
 *
 * HACKING.md's rule: every method first reads its arguments and allocates
 * what it returns (a node, closed until made; a body builder; a graph),
 * then checks the builder and the handles it uses, then calls the driver
 * and fills the results with raw table operations, which run no Lua: a
 * finalizer that closes the builder, a buffer or an event can only run
 * before the checks. */
#include <limits.h>
#include <string.h>

#include "device.h"

#define CL_GRAPHBUILDER "cuda.GraphBuilder"
#define CL_GRAPHNODE    "cuda.GraphNode"
#define MAX_DEPS 64

typedef struct Builder {
  int closed;
  CUgraph graph;
  cl_Device *dev;
  struct Builder *parent;       /* a conditional body's graph owner, else NULL */
  int execs;                    /* executables instantiated and not yet closed */
  int has_conditional;          /* a conditional node in it or in its bodies */
  int has_events;               /* an event node in it or in its child graphs */
} Builder;                      /* user values: 1 the device, 2 its nodes, 3 the parent,
                                 * 4 what its nodes use (a cuda.GraphRefs),
                                 * 5 the conditional handles it made {[handle] = true} */

typedef struct Node {
  int closed;                   /* until made; then never: it lives as long as it is referenced */
  CUgraphNode node;
} Node;                         /* user values: 1 the builder, 2 what it uses */

static Builder *check_builder(lua_State *L, int i)
{
  Builder *b = cl_check_open(L, i, CL_GRAPHBUILDER);
  for (Builder *p = b->parent; p; p = p->parent)
    if (p->closed)
      luaL_error(L, "the cuda.GraphBuilder that owns this conditional body is closed");
  return b;
}

/* The node at i, which must belong to the builder at b (an open one). */
static Node *check_node(lua_State *L, int i, int b)
{
  Node *n = luaL_checkudata(L, i, CL_GRAPHNODE);
  lua_getiuservalue(L, i, 1);
  int same = lua_rawequal(L, -1, b);
  lua_pop(L, 1);
  if (!same)
    luaL_argerror(L, i, "the node belongs to another graph");
  check_builder(L, b);
  return n;
}

/* Dependencies at i: nil, a node, or a list of nodes. */
static size_t check_deps(lua_State *L, int i, CUgraphNode deps[MAX_DEPS])
{
  if (lua_isnoneornil(L, i))
    return 0;
  if (lua_isuserdata(L, i)) {
    deps[0] = check_node(L, i, 1)->node;
    return 1;
  }
  luaL_argexpected(L, lua_istable(L, i), i, "nil, a cuda.GraphNode or a list of them");
  size_t n = lua_rawlen(L, i);
  luaL_argcheck(L, n <= MAX_DEPS, i, "at most 64 dependencies");
  for (size_t k = 0; k < n; k++) {
    lua_rawgeti(L, i, (lua_Integer)k + 1);
    if (!luaL_testudata(L, -1, CL_GRAPHNODE))
      luaL_argerror(L, i, lua_pushfstring(L, "dependency %d is not a cuda.GraphNode", (int)k + 1));
    deps[k] = check_node(L, lua_gettop(L), 1)->node;
    lua_pop(L, 1);
  }
  return n;
}

/* Step 1 of every node method that takes nargs arguments: push the node
 * it returns above them, closed until finish_node, with room for the
 * nuses values it will keep; returns its index. The builder at 1 is only
 * type-checked here. */
static int new_node(lua_State *L, int nargs, int nuses)
{
  lua_settop(L, nargs);         /* an absent argument is nil, not the node */
  luaL_checkudata(L, 1, CL_GRAPHBUILDER);
  Node *n = lua_newuserdatauv(L, sizeof *n, 2);
  n->closed = 1;
  n->node = NULL;
  luaL_setmetatable(L, CL_GRAPHNODE);
  lua_createtable(L, nuses > 0 ? nuses : 0, 0);
  lua_setiuservalue(L, -2, 2);
  return lua_gettop(L);
}

/* Step 2: the builder at 1, the dependencies at 2. */
static size_t begin_node(lua_State *L, Builder **b, CUgraphNode deps[MAX_DEPS])
{
  *b = check_builder(L, 1);
  return check_deps(L, 2, deps);
}

/* Step 3, after the driver made the node: the node at ni gets its handle
 * and keeps values first..last alive (they go into the builder's
 * GraphRefs too); the builder keeps the node. Raw operations only. */
static void finish_node(lua_State *L, int ni, CUgraphNode handle, int first, int last)
{
  Node *n = lua_touserdata(L, ni);
  n->node = handle;
  n->closed = 0;
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, ni, 1);
  lua_getiuservalue(L, ni, 2);
  lua_getiuservalue(L, 1, 4);
  for (int k = first; k <= last; k++) {
    lua_pushvalue(L, k);
    lua_rawseti(L, -3, k - first + 1);
    cl_graph_refs_add(L, -1, k);
  }
  lua_pop(L, 2);
  lua_getiuservalue(L, 1, 2);   /* the builder's nodes */
  lua_pushvalue(L, ni);
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
  lua_pop(L, 1);
}

/* Push a builder, closed until its graph exists, of the device on the top
 * of the stack. A conditional body (parenti, its parent's index, not 0)
 * fills its parent's GraphRefs: the parent's executables run the body,
 * so what the body's nodes use goes with them, not with the body's
 * builder. */
static Builder *push_builder(lua_State *L, int parenti)
{
  cl_Device *d = cl_check_device(L, -1);
  Builder *b = lua_newuserdatauv(L, sizeof *b, 5);
  memset(b, 0, sizeof *b);
  b->closed = 1;
  b->dev = d;
  luaL_setmetatable(L, CL_GRAPHBUILDER);
  lua_pushvalue(L, -2);
  lua_setiuservalue(L, -2, 1);
  lua_newtable(L);
  lua_setiuservalue(L, -2, 2);
  if (parenti)
    lua_getiuservalue(L, parenti, 4);
  else
    cl_push_graph_refs(L);
  lua_setiuservalue(L, -2, 4);
  return b;
}

/* cuda.Graph([device]) */
static int cuda_graph(lua_State *L)
{
  if (lua_isnoneornil(L, 1))
    cl_push_current_device(L);
  else
    lua_pushvalue(L, 1);
  Builder *b = push_builder(L, 0);
  cl_device_activate(L, b->dev);
  CL_TRY(L, cuGraphCreate, (&b->graph, 0));
  b->closed = 0;
  return 1;
}

/* Kernel node parameters from cfg at i, the kernel at i + 1, its nargs
 * arguments after: checks (the buffers must be open), so step 2. */
static void check_kernel_node(lua_State *L, int i, int nargs, cl_Device *d,
                              CUDA_KERNEL_NODE_PARAMS *p, uint64_t storage[CL_MAX_PARAMS],
                              void *params[CL_MAX_PARAMS])
{
  memset(p, 0, sizeof *p);
  cl_check_node_config(L, i, p);
  cl_Kernel *k = cl_check_kernel(L, i + 1);
  cl_pack_kernel_args(L, k, i + 2, nargs, d, storage, params);
  cl_device_activate(L, d);
  p->func = cl_kernel_function(L, k, d);
  p->kernelParams = params;
}

/* b:kernel(deps, cfg, kernel, args...) */
static int builder_kernel(lua_State *L)
{
  int last = lua_gettop(L) < 4 ? 4 : lua_gettop(L);   /* the kernel's arguments end here */
  int ni = new_node(L, last, last - 2);
  Builder *b;
  CUgraphNode deps[MAX_DEPS], node;
  size_t n = begin_node(L, &b, deps);
  CUDA_KERNEL_NODE_PARAMS p;
  uint64_t storage[CL_MAX_PARAMS];
  void *params[CL_MAX_PARAMS];
  check_kernel_node(L, 3, last - 4, b->dev, &p, storage, params);
  CL_TRY(L, cuGraphAddKernelNode, (&node, b->graph, deps, n, &p));
  finish_node(L, ni, node, 3, last);
  lua_pushvalue(L, ni);
  return 1;
}

/* A buffer a graph may use: open, and not pageable host memory. */
static cl_Buffer *check_graph_buffer(lua_State *L, int i)
{
  cl_Buffer *buf = cl_check_buffer(L, i);
  if (buf->mr->kind == CL_MR_HOST)
    luaL_argerror(L, i, "pageable host memory cannot be used in a graph; use pinned memory");
  return buf;
}

/* b:memcpy(deps, dst, src): sizes must match */
static int builder_memcpy(lua_State *L)
{
  int ni = new_node(L, 4, 2);
  Builder *b;
  CUgraphNode deps[MAX_DEPS], node;
  size_t n = begin_node(L, &b, deps);
  cl_Buffer *dst = check_graph_buffer(L, 3), *src = check_graph_buffer(L, 4);
  if (dst->size != src->size)
    return luaL_error(L, "memcpy: the sizes differ (%I bytes to %I bytes)", (lua_Integer)src->size,
                      (lua_Integer)dst->size);
  CUDA_MEMCPY3D c;
  memset(&c, 0, sizeof c);
  c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
  c.srcDevice = src->ptr;
  c.dstDevice = dst->ptr;
  c.WidthInBytes = src->size;
  c.Height = c.Depth = 1;
  cl_device_activate(L, b->dev);
  CL_TRY(L, cuGraphAddMemcpyNode, (&node, b->graph, deps, n, &c, b->dev->ctx));
  finish_node(L, ni, node, 3, 4);
  lua_pushvalue(L, ni);
  return 1;
}

/* b:memset(deps, buf, byte) */
static int builder_memset(lua_State *L)
{
  lua_Integer v = luaL_checkinteger(L, 4);
  luaL_argcheck(L, v >= 0 && v <= 255, 4, "a byte is 0 to 255");
  int ni = new_node(L, 4, 1);
  Builder *b;
  CUgraphNode deps[MAX_DEPS], node;
  size_t n = begin_node(L, &b, deps);
  cl_Buffer *buf = check_graph_buffer(L, 3);
  CUDA_MEMSET_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.dst = buf->ptr;
  p.value = (unsigned)v;
  p.elementSize = 1;
  p.width = buf->size;
  p.height = 1;
  cl_device_activate(L, b->dev);
  CL_TRY(L, cuGraphAddMemsetNode, (&node, b->graph, deps, n, &p, b->dev->ctx));
  finish_node(L, ni, node, 3, 3);
  lua_pushvalue(L, ni);
  return 1;
}

/* b:empty(deps): a join point */
static int builder_empty(lua_State *L)
{
  int ni = new_node(L, 2, 0);
  Builder *b;
  CUgraphNode deps[MAX_DEPS], node;
  size_t n = begin_node(L, &b, deps);
  cl_device_activate(L, b->dev);
  CL_TRY(L, cuGraphAddEmptyNode, (&node, b->graph, deps, n));
  finish_node(L, ni, node, 2, 1);
  lua_pushvalue(L, ni);
  return 1;
}

/* b:record(deps, event) and b:wait(deps, event) */
static int builder_event_node(lua_State *L, int wait)
{
  int ni = new_node(L, 3, 1);
  Builder *b;
  CUgraphNode deps[MAX_DEPS], node;
  size_t n = begin_node(L, &b, deps);
  cl_Event *ev = cl_check_event(L, 3);
  if (b->parent)
    return luaL_error(L, "a conditional body cannot hold event record or wait nodes (cuda.h: "
                         "kernel, empty, memcpy, memset, child graph and conditional nodes only)");
  cl_device_activate(L, b->dev);
  if (wait)
    CL_TRY(L, cuGraphAddEventWaitNode, (&node, b->graph, deps, n, ev->handle));
  else {
    CL_TRY(L, cuGraphAddEventRecordNode, (&node, b->graph, deps, n, ev->handle));
    ev->recorded = 1;           /* for ev2 - ev1 after the graph ran */
  }
  b->has_events = 1;
  finish_node(L, ni, node, 3, 3);
  lua_pushvalue(L, ni);
  return 1;
}

static int builder_record(lua_State *L) { return builder_event_node(L, 0); }
static int builder_wait(lua_State *L) { return builder_event_node(L, 1); }

/* b:child(deps, def): the graph of a cuda.GraphDefinition (a capture's) */
static int builder_child_def(lua_State *L, int ni)
{
  Builder *b;
  CUgraphNode deps[MAX_DEPS], node;
  size_t n = begin_node(L, &b, deps);
  cl_Device *dev;
  void *green;
  CUgraph child = cl_graphdef_graph(L, 3, &dev, &green);
  if (dev != b->dev)
    luaL_argerror(L, 3, "the graph belongs to another device");
  if (green)
    luaL_argerror(L, 3, "a graph captured in a green context runs only on that context's "
                        "streams: it cannot be a child graph");
  unsigned has = cl_graphdef_restrictions(L, 3);   /* as builder_child's checks */
  luaL_argcheck(L, !(has & CL_DEF_CONDITIONAL), 3,
                "a graph with conditional nodes cannot be a child graph (cuda.h)");
  if (b->parent && (has & CL_DEF_EVENTS))
    return luaL_error(L, "a conditional body cannot hold event record or wait nodes, nor a "
                         "child graph with some (cuda.h)");
  cl_device_activate(L, b->dev);
  CL_TRY(L, cuGraphAddChildGraphNode, (&node, b->graph, deps, n, child));
  b->has_events |= (has & CL_DEF_EVENTS) != 0;
  finish_node(L, ni, node, 3, 3);   /* the definition's GraphRefs merge into the builder's */
  lua_pushvalue(L, ni);
  return 1;
}

/* b:child(deps, other_builder or def): the driver copies the child graph */
static int builder_child(lua_State *L)
{
  int ni = new_node(L, 3, 1);
  if (luaL_testudata(L, 3, CL_GRAPHDEF))
    return builder_child_def(L, ni);
  Builder *b;
  CUgraphNode deps[MAX_DEPS], node;
  size_t n = begin_node(L, &b, deps);
  Builder *child = check_builder(L, 3);
  luaL_argcheck(L, child != b, 3, "a graph cannot be its own child");
  luaL_argcheck(L, !child->has_conditional, 3,
                "a graph with conditional nodes cannot be a child graph (cuda.h)");
  if (b->parent && child->has_events)
    return luaL_error(L, "a conditional body cannot hold event record or wait nodes, nor a "
                         "child graph with some (cuda.h)");
  cl_device_activate(L, b->dev);
  CL_TRY(L, cuGraphAddChildGraphNode, (&node, b->graph, deps, n, child->graph));
  b->has_events |= child->has_events;
  lua_getiuservalue(L, 1, 4);   /* the copy uses what the child's nodes use now */
  lua_getiuservalue(L, 3, 4);
  cl_graph_refs_add(L, -2, -1);
  lua_pop(L, 2);
  finish_node(L, ni, node, 3, 3);
  lua_pushvalue(L, ni);
  return 1;
}

/* b:create_conditional_handle([default]) -> cuda.u64: the condition, set
 * to default at the start of every launch when given */
static int builder_create_conditional_handle(lua_State *L)
{
  lua_Integer def = luaL_optinteger(L, 2, 0);
  luaL_argcheck(L, def >= 0 && def <= UINT_MAX, 2, "a condition is 0 to 4294967295");
  unsigned flags = lua_isnoneornil(L, 2) ? 0 : CU_GRAPH_COND_ASSIGN_DEFAULT;
  lua_settop(L, 2);
  luaL_checkudata(L, 1, CL_GRAPHBUILDER);
  cl_Scalar *sc = lua_newuserdatauv(L, sizeof *sc, 0);
  memset(sc, 0, sizeof *sc);
  sc->type = CL_U64;
  sc->v.u64 = 0;
  luaL_setmetatable(L, CL_SCALAR);
  if (lua_getiuservalue(L, 1, 5) != LUA_TTABLE) {   /* the handles it made */
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, 1, 5);
  }
  Builder *b = check_builder(L, 1);
  CUgraphConditionalHandle h;
  cl_device_activate(L, b->dev);
  CL_TRY(L, cuGraphConditionalHandleCreate, (&h, b->graph, b->dev->ctx, (unsigned)def, flags));
  sc->v.u64 = h;
  lua_pushvalue(L, 3);
  lua_pushboolean(L, 1);
  lua_rawset(L, 4);
  lua_settop(L, 3);
  return 1;
}

/* Whether create_conditional_handle of the builder at bi made the handle
 * at hi: cuGraphConditionalHandleCreate takes the graph that will contain
 * the node, and the H200's driver refuses a node in a body that uses a
 * handle of the graph containing the body (CUDA_ERROR_INVALID_VALUE). */
static int made_handle(lua_State *L, int hi, int bi)
{
  int found = 0;
  if (lua_getiuservalue(L, bi, 5) == LUA_TTABLE) {
    lua_pushvalue(L, hi);
    found = lua_rawget(L, -2) != LUA_TNIL;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return found;
}

/* b:if_cond(deps, handle) and b:while_loop(deps, handle) -> node, body builder */
static int builder_conditional(lua_State *L, CUgraphConditionalNodeType type)
{
  cl_Scalar *h = cl_test_scalar(L, 3);
  luaL_argexpected(L, h != NULL && h->type == CL_U64, 3,
                   "a conditional handle (from create_conditional_handle)");
  int ni = new_node(L, 3, 1);
  lua_getiuservalue(L, 1, 1);
  Builder *body = push_builder(L, 1);   /* closed until the node exists */
  int bodyi = lua_gettop(L);
  Builder *b;
  CUgraphNode deps[MAX_DEPS], node;
  size_t n = begin_node(L, &b, deps);
  luaL_argcheck(L, made_handle(L, 3, 1), 3, "the handle is not one that create_conditional_handle "
                "made for this graph");
  CUgraphNodeParams p;
  memset(&p, 0, sizeof p);
  p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
  p.conditional.handle = h->v.u64;
  p.conditional.type = type;
  p.conditional.size = 1;
  cl_device_activate(L, b->dev);
  p.conditional.ctx = b->dev->ctx;
  CL_TRY(L, cuGraphAddNode, (&node, b->graph, deps, NULL, n, &p));
  body->graph = p.conditional.phGraph_out[0];
  body->parent = b;
  body->closed = 0;
  for (Builder *a = b; a; a = a->parent)   /* each graph that contains the node */
    a->has_conditional = 1;
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, bodyi, 3);
  finish_node(L, ni, node, bodyi, bodyi);   /* the node keeps its body */
  lua_pushvalue(L, ni);
  lua_pushvalue(L, bodyi);
  return 2;
}

static int builder_if_cond(lua_State *L) { return builder_conditional(L, CU_GRAPH_COND_TYPE_IF); }
static int builder_while_loop(lua_State *L) { return builder_conditional(L, CU_GRAPH_COND_TYPE_WHILE); }

/* b:instantiate([options]) -> cuda.Graph */
static int builder_instantiate(lua_State *L)
{
  lua_settop(L, 2);
  luaL_checkudata(L, 1, CL_GRAPHBUILDER);
  unsigned long long flags = cl_check_instantiate_options(L, 2);
  lua_getiuservalue(L, 1, 1);
  int devi = lua_gettop(L);
  cl_push_graph(L);             /* closed until instantiated */
  Builder *b = check_builder(L, 1);
  if (b->parent)
    return luaL_error(L, "a conditional body is instantiated with the graph that owns it");
  if (b->has_conditional && b->execs > 0)
    return luaL_error(L, "a graph with conditional nodes has one executable at a time (cuda.h): "
                         "close the cuda.Graph instantiated from it first");
  cl_device_activate(L, b->dev);
  cl_graph_instantiate(L, lua_gettop(L), b->graph, 0, devi, 1, flags);
  b->execs++;
  return 1;
}

/* g:update_kernel(node, cfg, kernel, args...): new arguments (and grid)
 * for a kernel node of an instantiated graph, without instantiating again */
static int graph_update_kernel(lua_State *L)
{
  int last = lua_gettop(L);
  CUgraphExec exec = cl_graph_exec(L, 1);
  lua_getiuservalue(L, 1, 2);
  if (!luaL_testudata(L, -1, CL_GRAPHBUILDER))
    return luaL_error(L, "update_kernel: the graph was captured, not built with cuda.Graph()");
  int bi = lua_gettop(L);       /* check_node's builder */
  Builder *b = check_builder(L, bi);
  Node *n = check_node(L, 2, bi);
  CUDA_KERNEL_NODE_PARAMS p;
  uint64_t storage[CL_MAX_PARAMS];
  void *params[CL_MAX_PARAMS];
  check_kernel_node(L, 3, last - 4, b->dev, &p, storage, params);
  CL_TRY(L, cuGraphExecKernelNodeSetParams, (exec, n->node, &p));
  lua_getiuservalue(L, 2, 2);   /* the node keeps the new arguments too */
  lua_getiuservalue(L, bi, 4);
  for (int k = 3; k <= last; k++) {
    lua_pushvalue(L, k);
    lua_rawseti(L, -3, (lua_Integer)lua_rawlen(L, -3) + 1);
    cl_graph_refs_add(L, -1, k);
  }
  return 0;
}

/* its cl_GraphSource's: a conditional body's graph is its owner's */
static CUgraph builder_graph(lua_State *L, int bi, cl_Device **dev)
{
  Builder *b = check_builder(L, bi);
  if (b->parent)
    luaL_error(L, "a conditional body is updated with the graph that owns it");
  *dev = b->dev;
  return b->graph;
}

/* Once the builder at bi is closed and none of its executables is left,
 * nothing on the GPU uses what its nodes hold: buffers closed meanwhile are
 * freed, object code unloaded, events destroyed, now rather than at
 * collection. A conditional body's are its outermost graph's. */
static void release_if_unused(lua_State *L, int bi, const Builder *b)
{
  if (!b->closed || b->execs > 0 || b->parent)
    return;
  if (lua_getiuservalue(L, bi, 4) == LUA_TUSERDATA)
    cl_graph_refs_release(L, lua_gettop(L));
  lua_pop(L, 1);
}

/* its cl_GraphSource's */
static void builder_exec_closed(lua_State *L, int bi)
{
  Builder *b = luaL_checkudata(L, bi, CL_GRAPHBUILDER);
  if (b->execs > 0)
    b->execs--;
  release_if_unused(L, bi, b);
}

static int builder_close(lua_State *L)
{
  Builder *b = luaL_checkudata(L, 1, CL_GRAPHBUILDER);
  if (!b->closed) {
    b->closed = 1;
    if (b->parent == NULL)      /* a conditional body is its node's */
      cl_graph_release(b->graph);   /* deferred while a capture is in flight */
    b->graph = NULL;
    release_if_unused(L, 1, b);
  }
  return 0;
}

static int builder_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);   /* a number key becomes a string: first */
  Builder *b = check_builder(L, 1);
  size_t n = 0;
  if (strcmp(key, "node_count") == 0) {
    CL_TRY(L, cuGraphGetNodes, (b->graph, NULL, &n));
    lua_pushinteger(L, (lua_Integer)n);
  } else if (strcmp(key, "device") == 0)
    lua_getiuservalue(L, 1, 1);
  else
    lua_pushnil(L);
  return 1;
}

static int builder_tostring(lua_State *L)
{
  Builder *b = luaL_checkudata(L, 1, CL_GRAPHBUILDER);
  if (b->closed)
    return cl_push_closed_name(L, CL_GRAPHBUILDER);
  lua_pushfstring(L, "cuda.GraphBuilder(device %d)", b->dev->ordinal);
  return 1;
}

void cl_open_graph_builder(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", builder_close}, {"__close", builder_close}, {"__tostring", builder_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"kernel", builder_kernel}, {"memcpy", builder_memcpy}, {"memset", builder_memset},
    {"empty", builder_empty}, {"record", builder_record}, {"wait", builder_wait},
    {"child", builder_child}, {"instantiate", builder_instantiate}, {"close", builder_close},
    {"create_conditional_handle", builder_create_conditional_handle},
    {"if_cond", builder_if_cond}, {"while_loop", builder_while_loop},
    {NULL, NULL}
  };
  static const luaL_Reg graph_methods[] = {{"update_kernel", graph_update_kernel}, {NULL, NULL}};
  static const luaL_Reg functions[] = {{"Graph", cuda_graph}, {NULL, NULL}};
  static const cl_GraphSource source = {builder_graph, builder_exec_closed};
  cl_new_type(L, CL_GRAPHBUILDER, meta, methods, builder_fields);
  cl_graph_source_register(L, CL_GRAPHBUILDER, &source);
  cl_new_type(L, CL_GRAPHNODE, NULL, NULL, NULL);
  cl_add_methods(L, CL_GRAPH, graph_methods);
  cl_setfuncs(L, functions);
}
