/* SPDX-License-Identifier: MIT */
/* lifetimes.c: who keeps what alive, one layer that every noun calls down
 * into and that calls no noun.
 *
 * A graph keeps what it uses: while a stream captures, every buffer,
 * kernel and graph its operations use goes into the capture's
 * cuda.GraphRefs (only then: the hot paths test one pointer), which the
 * graph holds; a cuda.Graph() builder and a cuda.GraphDefinition hold one
 * too. Streams that join a capture (waiting on an event recorded in it,
 * or on the capturing stream) record into it. When the holder lets go,
 * each kept object is handed back to its own noun through the function
 * the noun registered when cuda opened (cl_lifetimes_*): the buffer frees
 * its memory, the ObjectCode unloads its library, the event is destroyed,
 * once the last graph that kept them is gone.
 *
 * Releases that may wait for the GPU are made here too, now or deferred
 * behind the host functions outstanding. */
#include <pthread.h>
#include <stdlib.h>

#include "cl.h"

/* How each noun gives back what a graph kept of it. Every Lua state that
 * opens cuda registers the same functions; atomic, since states may open
 * on several threads. */
static void (*_Atomic buffer_release)(cl_Buffer *b);
static void (*_Atomic event_release)(cl_Event *ev);
static void (*_Atomic objectcode_release)(cl_ObjectCode *o);
static int (*_Atomic graph_user)(lua_State *L, int i, int delta);
static void (*_Atomic vmm_free)(CUdeviceptr p);
static void (*_Atomic pool_destroyed)(CUmemoryPool pool);

void cl_lifetimes_buffer(void (*graph_release)(cl_Buffer *b))
{
  buffer_release = graph_release;
}

void cl_lifetimes_event(void (*graph_release)(cl_Event *ev))
{
  event_release = graph_release;
}

void cl_lifetimes_objectcode(void (*graph_release)(cl_ObjectCode *o))
{
  objectcode_release = graph_release;
}

void cl_lifetimes_graph_user(int (*user)(lua_State *L, int i, int delta))
{
  graph_user = user;
}

void cl_lifetimes_vmm_free(void (*free_virtual)(CUdeviceptr p))
{
  vmm_free = free_virtual;
}

void cl_lifetimes_pool_destroyed(void (*destroyed)(CUmemoryPool pool))
{
  pool_destroyed = destroyed;
}

/* --- what graphs use -------------------------------------------------------- */

/* A graph keeps buffers, kernels (their ObjectCode) and events: each
 * counts in its graph_refs, and its close defers the free, the unload or
 * the destroy while that is not 0. These functions run no Lua (raw table
 * operations only): node methods call them after their checks. */

void cl_push_graph_refs(lua_State *L)
{
  cl_GraphRefs *r = lua_newuserdatauv(L, sizeof *r, 1);
  r->released = r->capturing = r->counted = 0;
  r->origin = NULL;
  lua_newtable(L);
  lua_setiuservalue(L, -2, 1);
  luaL_setmetatable(L, CL_GRAPHREFS);
}

/* The GraphRefs of the graph at gi pushed: a captured graph's own, a built
 * graph's builder's (its user value 4); nil for none. */
static void push_graph_refs_of(lua_State *L, int gi)
{
  lua_getiuservalue(L, gi, 2);
  if (lua_type(L, -1) == LUA_TUSERDATA && !luaL_testudata(L, -1, CL_GRAPHREFS)) {
    lua_getiuservalue(L, -1, 4);   /* a cuda.GraphBuilder */
    lua_remove(L, -2);
  }
}

static void merge_refs(lua_State *L, int hi, int from)
{
  lua_getiuservalue(L, from, 1);
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pop(L, 1);
    cl_graph_refs_add(L, hi, lua_gettop(L));
  }
  lua_pop(L, 1);
}

/* The count of what the value at vi keeps (a buffer's owner, a kernel's
 * ObjectCode, an event), or NULL when it is already gone (closed, and no
 * graph kept it): counting it then could only free it twice. */
static int *graph_count(lua_State *L, int vi)
{
  cl_Buffer *b = luaL_testudata(L, vi, CL_BUFFER);
  if (b) {
    cl_Buffer *owner = b->owner ? b->owner : b;
    return owner->closed && owner->graph_refs == 0 ? NULL : &owner->graph_refs;
  }
  cl_Event *ev = luaL_testudata(L, vi, CL_EVENT);
  if (ev)
    return ev->closed && ev->graph_refs == 0 ? NULL : &ev->graph_refs;
  lua_getiuservalue(L, vi, 1);  /* a kernel's ObjectCode */
  cl_ObjectCode *o = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return o->closed && o->graph_refs == 0 ? NULL : &o->graph_refs;
}

void cl_graph_refs_add(lua_State *L, int hi, int vi)
{
  hi = lua_absindex(L, hi);
  vi = lua_absindex(L, vi);
  if (((cl_GraphRefs *)lua_touserdata(L, hi))->released)
    return;                     /* no graph uses this set any more */
  if (luaL_testudata(L, vi, CL_GRAPHREFS)) {
    merge_refs(L, hi, vi);
    return;
  }
  if (luaL_testudata(L, vi, CL_GRAPH)) {
    push_graph_refs_of(L, vi);
    if (luaL_testudata(L, -1, CL_GRAPHREFS))
      merge_refs(L, hi, lua_gettop(L));
    if (lua_getiuservalue(L, vi, 4) == LUA_TUSERDATA)   /* what updates brought in */
      merge_refs(L, hi, lua_gettop(L));
    lua_pop(L, 2);
    return;
  }
  if (luaL_testudata(L, vi, CL_GRAPHDEF)) {   /* a definition adds what it holds */
    if (lua_getiuservalue(L, vi, 4) == LUA_TUSERDATA)
      merge_refs(L, hi, lua_gettop(L));
    lua_pop(L, 1);
    return;
  }
  if (luaL_testudata(L, vi, CL_VIEW) ||       /* a view counts as its buffer, */
      luaL_testudata(L, vi, CL_TENSORMAP)) {   /* a tensor map as what it encodes */
    lua_getiuservalue(L, vi, 1);
    cl_graph_refs_add(L, hi, lua_gettop(L));
    lua_pop(L, 1);
    return;
  }
  if (!luaL_testudata(L, vi, CL_BUFFER) && !luaL_testudata(L, vi, CL_KERNEL) &&
      !luaL_testudata(L, vi, CL_EVENT) && !graph_user(L, vi, 0))
    return;
  lua_getiuservalue(L, hi, 1);
  lua_pushvalue(L, vi);
  int *count;
  if (lua_rawget(L, -2) != LUA_TNIL)
    ;                           /* counted already */
  else if (graph_user(L, vi, 0)) {   /* an array, a texture or a surface: its own count */
    lua_pushvalue(L, vi);
    lua_pushboolean(L, 1);
    lua_rawset(L, -4);
    graph_user(L, vi, 1);
  } else if ((count = graph_count(L, vi)) != NULL) {
    lua_pushvalue(L, vi);
    lua_pushboolean(L, 1);
    lua_rawset(L, -4);
    ++*count;
  }
  lua_pop(L, 2);
}

/* Give the counts back; the set goes with the holder. */
void cl_graph_refs_release(lua_State *L, int hi)
{
  cl_GraphRefs *r = lua_touserdata(L, hi);
  if (r->released)
    return;
  r->released = 1;
  lua_getiuservalue(L, hi, 1);
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pop(L, 1);
    cl_Buffer *b = luaL_testudata(L, -1, CL_BUFFER);
    cl_Event *ev = b ? NULL : luaL_testudata(L, -1, CL_EVENT);
    if (b)
      buffer_release(b);
    else if (ev)
      event_release(ev);
    else if (!graph_user(L, -1, -1)) {
      lua_getiuservalue(L, -1, 1);
      objectcode_release(lua_touserdata(L, -1));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
}

static int refs_gc(lua_State *L)
{
  cl_capture_ended(luaL_checkudata(L, 1, CL_GRAPHREFS));   /* a capture nothing can end any more */
  cl_graph_refs_release(L, 1);
  return 0;
}

/* s at si records into the capture whose GraphRefs is at hi (0: none). */
void cl_capture_set(lua_State *L, cl_Stream *s, int si, int hi)
{
  s->capture = hi ? lua_touserdata(L, hi) : NULL;
  if (hi)
    lua_pushvalue(L, hi);
  else
    lua_pushnil(L);
  lua_setiuservalue(L, si, 3);
}

void cl_capture_keep(lua_State *L, cl_Stream *s, int si, int first, int last)
{
  si = lua_absindex(L, si);
  if (!s->capture->capturing) {   /* joined a capture that has ended */
    cl_capture_set(L, s, si, 0);
    return;
  }
  lua_getiuservalue(L, si, 3);
  int hi = lua_gettop(L);
  for (int k = first; k <= last; k++)
    cl_graph_refs_add(L, hi, k);
  lua_pop(L, 1);
}

void cl_capture_record(lua_State *L, cl_Event *ev, int evi, int si)
{
  evi = lua_absindex(L, evi);
  cl_Stream *s = lua_touserdata(L, si);
  ev->capture = s->capture;
  lua_getiuservalue(L, si, 3);
  /* The captured graph may record the event at each launch (a driver
   * may make a record node of it; the fake driver does): it keeps it. */
  if (s->capture && s->capture->capturing)
    cl_graph_refs_add(L, -1, evi);
  lua_setiuservalue(L, evi, 2);
}

void cl_capture_join(lua_State *L, int si, int wi)
{
  si = lua_absindex(L, si);
  cl_Event *ev = luaL_testudata(L, wi, CL_EVENT);
  lua_getiuservalue(L, wi, ev ? 2 : 3);
  cl_GraphRefs *r = lua_touserdata(L, -1);
  cl_Stream *s = lua_touserdata(L, si);
  /* never away from a capture of its own (the driver refuses that merge):
   * its GraphRefs, and the count of captures, would be lost */
  if (r && r->capturing && !(s->capture && s->capture->capturing && s->capture != r))
    cl_capture_set(L, s, si, lua_gettop(L));
  else if (ev)
    ev->capture = NULL;   /* its capture has ended */
  lua_pop(L, 1);
}

/* s (at si) is being closed: a capture it began can never end, so nothing
 * will use what it captured. */
cl_GraphRefs *cl_capture_stream_closed(lua_State *L, cl_Stream *s, int si)
{
  cl_GraphRefs *ended = NULL;
  if (s->capture && s->capture->origin == s && lua_getiuservalue(L, si, 3) == LUA_TUSERDATA) {
    ended = s->capture;
    s->capture->capturing = 0;
    cl_graph_refs_release(L, lua_gettop(L));
  }
  lua_settop(L, si);
  s->capture = NULL;
  return ended;
}

/* Host functions issued and not yet run or released (hostfunc.c counts
 * them): while there are any, a release that may wait is deferred. */
_Atomic int cl_hostfunc_outstanding;

/* --- releases: now, or deferred behind host functions ----------------------
 *
 * Some releases wait for the GPU: pool memory with no stream to order it
 * after waits for all work (cuCtxSynchronize), and cuMemFree,
 * cuMemFreeHost and graph destroys may synchronize. A host function
 * pending on a stream only runs at this thread's next wait, so such a
 * release made while one is outstanding (from a finalizer, at any
 * allocation) would wait forever. It is deferred instead: listed here,
 * in malloc'd memory that needs no Lua object, and made at the next wait
 * or cuda.poll() with none outstanding, or when the state closes
 * (device.c's sentinel). Every release makes the deferred ones first, so
 * their order is kept.
 *
 * Every release is deferred too while a stream capture is in flight in
 * this process: the driver calls frees, destroys and synchronizes
 * "potentially unsafe" during a capture begun in global (or this
 * thread's thread-local) mode, and invalidates the capture (its
 * cuStreamEndCapture fails). A finalizer may run at any allocation, so
 * inside any capture; its releases wait here until the last capture
 * ends (cl_capture_ended, in end_capture's C function or a capturing
 * stream's close), and cl_release_deferred makes none before. Each
 * makes its device's primary context current and restores the one that
 * was: a finalizer must not leave another context current under the C
 * function whose allocation ran it. */

typedef struct Deferred {
  struct Deferred *next;
  cl_ReleaseOp op;
  CUcontext ctx;                /* the device's primary context, or NULL */
  CUdeviceptr ptr;
  CUmemoryPool pool;
} Deferred;

static pthread_mutex_t deferred_lock = PTHREAD_MUTEX_INITIALIZER;
static Deferred *deferred_head, **deferred_tail = &deferred_head;
_Atomic int cl_releases_deferred;

static void release_now(cl_ReleaseOp op, CUcontext ctx, CUdeviceptr p, CUmemoryPool pool)
{
  CUcontext was = cl_current_ctx;
  if (ctx && ctx != was) {
    if (CL_CALL(cuCtxSetCurrent, (ctx)) != CUDA_SUCCESS) {
      if (op == CL_RELEASE_FOREIGN)     /* nothing to wait for: its owner still hears */
        ((cl_Foreign *)(void *)pool)->release((cl_Foreign *)(void *)pool);
      return;                   /* no live context: the memory leaks, nothing crashes */
    }
    cl_current_ctx = ctx;
  }
  switch (op) {
  case CL_FREE_SYNCED:          /* no stream to order it after: all work first */
    CL_CALL(cuCtxSynchronize, ());
    CL_CALL(cuMemFree, (p));
    break;
  case CL_FREE_MANAGED:
  case CL_FREE_PLAIN:           /* cuMemAlloc's (DeviceMemoryResource{pool = false}) */
    CL_CALL(cuMemFree, (p));
    break;
  case CL_CLOSE_IPC:            /* a mapping of another process's memory (ipc.c) */
    CL_CALL(cuIpcCloseMemHandle, (p));
    break;
  case CL_FREE_PINNED:
    CL_CALL(cuMemFreeHost, ((void *)(uintptr_t)p));
    break;
  case CL_DESTROY_POOL:         /* memory.c hears when the driver's pool is gone */
    if (CL_CALL(cuMemPoolDestroy, (pool)) == CUDA_SUCCESS && pool_destroyed)
      pool_destroyed(pool);
    break;
  case CL_UNLOAD_LIBRARY:       /* the H200's driver waits for pending host functions here */
    CL_CALL(cuLibraryUnload, ((CUlibrary)pool));
    break;
  case CL_DESTROY_ARRAY:        /* like cuMemFree, it may wait for the device */
    CL_CALL(cuArrayDestroy, ((CUarray)pool));
    break;
  case CL_RELEASE_FOREIGN:      /* another library's memory (view_foreign.c): after all work */
    CL_CALL(cuCtxSynchronize, ());
    ((cl_Foreign *)(void *)pool)->release((cl_Foreign *)(void *)pool);
    break;
  case CL_FREE_VIRTUAL:         /* unmapping memory in use is not ordered: all work first */
    CL_CALL(cuCtxSynchronize, ());
    vmm_free(p);
    break;
  case CL_DESTROY_GRAPH_EXEC:
    CL_CALL(cuGraphExecDestroy, ((CUgraphExec)(void *)pool));
    break;
  case CL_DESTROY_GRAPH:
    CL_CALL(cuGraphDestroy, ((CUgraph)(void *)pool));
    break;
  case CL_FREE_GRAPH_MEMORY:    /* a launch's graph memory, deferred past a capture: its
                                 * launch stream may be gone, so after all work */
    CL_CALL(cuCtxSynchronize, ());
    CL_CALL(cuMemFreeAsync, (p, CU_STREAM_LEGACY));
    break;
  }
  if (ctx && ctx != was && CL_CALL(cuCtxSetCurrent, (was)) == CUDA_SUCCESS)
    cl_current_ctx = was;
}

_Atomic int cl_captures_in_flight;

/* Work that waits for a wait with no host function outstanding and needs
 * the Lua state, registered by the noun that owns it (host_register.c):
 * called from below, so that no file here depends on that noun. */
_Atomic int cl_quiet_work_pending;
static void (*quiet_work)(lua_State *L);

void cl_lifetimes_quiet_work(void (*work)(lua_State *L))
{
  quiet_work = work;
}

void cl_run_quiet_work(lua_State *L)
{
  if (cl_quiet_work_pending && quiet_work)
    quiet_work(L);
}

void cl_release_deferred(void)
{
  if (cl_releases_deferred == 0 || cl_captures_in_flight > 0 || cl_holding)
    return;
  pthread_mutex_lock(&deferred_lock);
  Deferred *list = deferred_head;
  deferred_head = NULL;
  deferred_tail = &deferred_head;
  cl_releases_deferred = 0;
  pthread_mutex_unlock(&deferred_lock);
  while (list) {
    Deferred *next = list->next;
    release_now(list->op, list->ctx, list->ptr, list->pool);
    free(list);
    list = next;
  }
}

/* Whether the release may wait for the GPU (so for host functions). A
 * graph's destroy is counted in: the real-GPU fuzzer hung at a call whose
 * host function closes a graph (H100, driver 580.159.04; the fake's replay
 * of its draws names the graph), and deferring a destroy costs only its
 * memory until the next wait. */
static int may_wait(cl_ReleaseOp op)
{
  return op != CL_DESTROY_POOL;
}

/* Release now, or defer: while a capture is in flight, while a stream is
 * held by a blocking kernel (driver.h: a release would let it go, or wait
 * for it), and while a host function is outstanding (for a release that
 * may wait, or any while others wait in the list). */
void cl_release(cl_ReleaseOp op, CUcontext ctx, CUdeviceptr p, CUmemoryPool pool)
{
  if (cl_captures_in_flight > 0 || cl_holding ||
      (cl_hostfunc_outstanding > 0 && (may_wait(op) || cl_releases_deferred > 0))) {
    Deferred *d = malloc(sizeof *d);
    if (d) {
      *d = (Deferred){NULL, op, ctx, p, pool};
      pthread_mutex_lock(&deferred_lock);
      *deferred_tail = d;
      deferred_tail = &d->next;
      cl_releases_deferred++;
      pthread_mutex_unlock(&deferred_lock);
      return;
    }
  }                             /* out of memory: now, whatever it costs */
  cl_release_deferred();
  release_now(op, ctx, p, pool);
}

void cl_library_release(CUlibrary lib)
{
  cl_release(CL_UNLOAD_LIBRARY, NULL, 0, (CUmemoryPool)(void *)lib);
}

void cl_array_release(CUcontext ctx, CUarray array)
{
  cl_release(CL_DESTROY_ARRAY, ctx, 0, (CUmemoryPool)(void *)array);
}

void cl_graph_exec_release(CUgraphExec exec)
{
  cl_release(CL_DESTROY_GRAPH_EXEC, NULL, 0, (CUmemoryPool)(void *)exec);
}

void cl_graph_release(CUgraph graph)
{
  cl_release(CL_DESTROY_GRAPH, NULL, 0, (CUmemoryPool)(void *)graph);
}

void cl_capture_begun(cl_GraphRefs *r)
{
  r->counted = 1;
  cl_captures_in_flight++;
}

void cl_capture_ended(cl_GraphRefs *r)
{
  if (!r || !r->counted)
    return;
  r->counted = 0;
  if (--cl_captures_in_flight == 0 && cl_hostfunc_outstanding == 0)
    cl_release_deferred();      /* else at the next wait with none outstanding */
}

void cl_open_lifetimes(lua_State *L)
{
  static const luaL_Reg refs_meta[] = {{"__gc", refs_gc}, {NULL, NULL}};
  cl_new_type(L, CL_GRAPHREFS, refs_meta, NULL, NULL);
}
