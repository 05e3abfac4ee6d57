/* SPDX-License-Identifier: MIT */
/* mpi.c: cuda.mpi_core — the C part of cuda.mpi (lua/cuda/mpi.lua).
 *
 * Lua values travel through a small serializer of our own; cudalua Buffers
 * and Views go straight to MPI. Device buffers reach this file only when the
 * MPI library is CUDA-aware: otherwise lua/cuda/mpi.lua stages them through
 * pinned buffers with the cuda module's own API, so a script is the same
 * either way.
 *
 * This module does not link the core (src/libcudacore.la): the core is
 * linked into cudalua and cuda.so already, and a second copy here would
 * have its own static state — a second driver table, never opened. So it
 * calls no core function: it recognizes buffers by their metatable
 * (luaL_testudata with cl.h's type names) and reads cl_Buffer's plain
 * fields; a View's buffer and dtype come through its public fields.
 *
 * MPI starts on first use (MPI_Init_thread, FUNNELED). It ends when the
 * process exits, not when the Lua state closes: the interpreter closes the
 * state after a script error too, and MPI_Finalize there would wait forever
 * for the other ranks, which wait in their collectives for this one. At
 * exit the status is known: 0 finalizes, anything else MPI_Abort()s the job,
 * after the interpreter has printed the error. The library is pinned in
 * memory (RTLD_NODELETE) so that the exit handler outlives lua_close's
 * dlclose. Every MPI failure is a Lua error with MPI's own message: the
 * communicators return errors instead of aborting. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#ifdef HAVE_MPI_EXT_H
#include <mpi-ext.h>
#endif

#include "cl.h"
#include "mpi_fds.h"

#define REQUEST "cuda.mpi.Request"
#define MAX_DEPTH 64            /* nesting of tables sent as values */

static struct {
  int started;                  /* MPI_Init_thread called by us */
  MPI_Comm comm;                /* our duplicate of MPI_COMM_WORLD */
  MPI_Comm wire, coll;          /* cuda.mpi's own: payloads, and collectives' headers */
  int rank, size, local_rank;
  int tag_ub;
  int *node;                    /* node[r]: the lowest world rank on rank r's node */
} world = {0, MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL, 0, 0, 0, 0, NULL};

static int fail(lua_State *L, const char *fn, int rc)
{
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
    len = snprintf(msg, sizeof msg, "MPI error %d", rc);
  return luaL_error(L, "%s: %s", fn, msg);
}

#define MPI_TRY(L, fn, args) do { \
    int rc_ = fn args; \
    if (rc_ != MPI_SUCCESS) fail(L, #fn, rc_); \
  } while (0)

/* --- start and end ------------------------------------------------------- */

static void at_exit(int status, void *unused)
{
  (void)unused;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return;
  if (status != 0)
    MPI_Abort(MPI_COMM_WORLD, status);
  MPI_Comm_free(&world.coll);
  MPI_Comm_free(&world.wire);
  MPI_Comm_free(&world.comm);
  MPI_Finalize();
}

/* Keep this library (and libmpi) mapped until exit: at_exit runs then. */
static void pin_library(void)
{
  Dl_info info;
  if (dladdr((void *)at_exit, &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

static void start(lua_State *L)
{
  int initialized = 0, provided = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    MPI_TRY(L, MPI_Init_thread, (NULL, NULL, MPI_THREAD_FUNNELED, &provided));
    world.started = 1;
    pin_library();
    on_exit(at_exit, NULL);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_TRY(L, MPI_Comm_dup, (MPI_COMM_WORLD, &world.comm));
  MPI_Comm_set_errhandler(world.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(world.comm, &world.rank);
  MPI_Comm_size(world.comm, &world.size);
  MPI_TRY(L, MPI_Comm_dup, (world.comm, &world.wire));
  MPI_TRY(L, MPI_Comm_dup, (world.comm, &world.coll));
  MPI_Comm node;
  MPI_TRY(L, MPI_Comm_split_type, (world.comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  MPI_Comm_rank(node, &world.local_rank);
  int leader = world.rank;
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  world.node = calloc((size_t)world.size, sizeof *world.node);
  if (world.node == NULL)
    luaL_error(L, "cuda.mpi: out of memory");
  MPI_TRY(L, MPI_Allgather, (&leader, 1, MPI_INT, world.node, 1, MPI_INT, world.comm));
  MPI_TRY(L, mpi_fds_start, (world.comm, world.rank, world.size));
  int *ub = NULL, found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  world.tag_ub = found && ub ? *ub : 32767;
}

static void ensure_started(lua_State *L)
{
  if (world.comm == MPI_COMM_NULL)
    start(L);
}

/* Whether MPI takes device pointers, asked at run time where the library
 * can say; CUDALUA_MPI_STAGING=pinned forces staging (to test that path on
 * a CUDA-aware MPI). */
static int cuda_aware(void)
{
  const char *force = getenv("CUDALUA_MPI_STAGING");
  if (force && strcmp(force, "pinned") == 0)
    return 0;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return 0;
#endif
}

/* mpi_core.info() -> {rank, size, local_rank, hostname, cuda_aware} */
static int mpi_info(lua_State *L)
{
  ensure_started(L);
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_TRY(L, MPI_Get_processor_name, (host, &len));
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, world.rank);
  lua_setfield(L, -2, "rank");
  lua_pushinteger(L, world.size);
  lua_setfield(L, -2, "size");
  lua_pushinteger(L, world.local_rank);
  lua_setfield(L, -2, "local_rank");
  lua_pushlstring(L, host, (size_t)len);
  lua_setfield(L, -2, "hostname");
  lua_pushboolean(L, cuda_aware());
  lua_setfield(L, -2, "cuda_aware");
  lua_createtable(L, world.size, 0);
  for (int r = 0; r < world.size; r++) {
    lua_pushinteger(L, world.node[r]);
    lua_rawseti(L, -2, r + 1);
  }
  lua_setfield(L, -2, "node");
  lua_pushinteger(L, world.tag_ub);
  lua_setfield(L, -2, "tag_ub");
  return 1;
}

static int mpi_barrier(lua_State *L)
{
  ensure_started(L);
  MPI_TRY(L, MPI_Barrier, (world.comm));
  return 0;
}

/* --- argument checks ------------------------------------------------------- */

static int check_rank(lua_State *L, int i, int any_ok)
{
  lua_Integer r = luaL_checkinteger(L, i);
  if (any_ok && r == MPI_ANY_SOURCE)
    return MPI_ANY_SOURCE;
  if (r < 0 || r >= world.size)
    luaL_argerror(L, i, lua_pushfstring(L, "rank %I out of range 0..%d", r, world.size - 1));
  return (int)r;
}

static int check_tag(lua_State *L, int i, int any_ok)
{
  lua_Integer t = luaL_optinteger(L, i, 0);
  if (any_ok && t == MPI_ANY_TAG)
    return MPI_ANY_TAG;
  if (t < 0 || t > world.tag_ub)
    luaL_argerror(L, i, lua_pushfstring(L, "tag %I out of range 0..%d", t, world.tag_ub));
  return (int)t;
}

static int check_count(lua_State *L, int i, size_t n)
{
  if (n > INT_MAX)
    luaL_argerror(L, i, "larger than MPI's count (2^31 - 1 elements)");
  return (int)n;
}

/* --- buffers and views ------------------------------------------------------ */

static const char *const dtype_names[] = {
  "float32", "float64", "int8", "int16", "int32", "int64",
  "uint8", "uint16", "uint32", "uint64", NULL
};

static MPI_Datatype mpi_dtype(int k)
{
  static MPI_Datatype types[10];
  if (types[0] == NULL) {
    MPI_Datatype t[] = {MPI_FLOAT, MPI_DOUBLE, MPI_INT8_T, MPI_INT16_T, MPI_INT32_T,
                        MPI_INT64_T, MPI_UINT8_T, MPI_UINT16_T, MPI_UINT32_T, MPI_UINT64_T};
    memcpy(types, t, sizeof types);
  }
  return types[k];
}

typedef struct Region {
  void *addr;
  size_t size;                  /* bytes */
  int dtype;                    /* index into dtype_names; -1 for a bare buffer */
  cl_Buffer *buf;
} Region;

/* The Buffer at i, or a View's buffer (then the View's dtype too); raises
 * argument errors for anything else, closed buffers, and device memory
 * when MPI cannot take it. */
static Region check_region_of(lua_State *L, int i, cl_Buffer **out)
{
  Region r = {NULL, 0, -1, NULL};
  cl_Buffer *b = luaL_testudata(L, i, CL_BUFFER);
  if (b == NULL && luaL_testudata(L, i, CL_VIEW)) {
    lua_getfield(L, i, "dtype");
    r.dtype = luaL_checkoption(L, -1, NULL, dtype_names);
    lua_getfield(L, i, "buffer");
    b = luaL_testudata(L, -1, CL_BUFFER);
    lua_pop(L, 2);              /* the view keeps the buffer alive */
  }
  if (b == NULL)
    luaL_typeerror(L, i, "cuda.Buffer or cuda.View");
  if (!cl_buffer_is_open(b))
    luaL_argerror(L, i, "cuda.Buffer is closed");
  if (out == NULL && b->mr->kind == CL_MR_DEVICE && !cuda_aware())
    luaL_argerror(L, i, "device memory, and this MPI is not CUDA-aware (stage it through pinned memory)");
  r.addr = (void *)(uintptr_t)b->ptr;
  r.size = b->size;
  r.buf = b;
  if (out)
    *out = b;
  return r;
}

static Region check_region(lua_State *L, int i)
{
  return check_region_of(L, i, NULL);
}

/* mpi_core.is_device(x): whether x is an open device-memory Buffer. */
static int mpi_is_device(lua_State *L)
{
  cl_Buffer *b = luaL_testudata(L, 1, CL_BUFFER);
  lua_pushboolean(L, b && !b->closed && b->mr->kind == CL_MR_DEVICE);
  return 1;
}

/* mpi_core.is_buffer(x): whether x is a cuda.Buffer or a cuda.View. */
static int mpi_is_buffer(lua_State *L)
{
  lua_pushboolean(L, luaL_testudata(L, 1, CL_BUFFER) || luaL_testudata(L, 1, CL_VIEW));
  return 1;
}

/* The MPI type and count of region r for op: the view's dtype, the one
 * named at argument dti, or bytes. */
static MPI_Datatype region_type(lua_State *L, Region *r, int dti, int *count)
{
  if (!lua_isnoneornil(L, dti)) {
    int named = luaL_checkoption(L, dti, NULL, dtype_names);
    if (r->dtype >= 0 && r->dtype != named)
      luaL_argerror(L, dti, lua_pushfstring(L, "the view's dtype is %s", dtype_names[r->dtype]));
    r->dtype = named;
  }
  if (r->dtype < 0)
    luaL_argerror(L, dti, "dtype expected for a cuda.Buffer (float32, int32, ...)");
  int width = 0;
  MPI_Type_size(mpi_dtype(r->dtype), &width);
  if (r->size % (size_t)width != 0)
    luaL_argerror(L, 1, lua_pushfstring(L, "size %I is not a multiple of %s's %d bytes",
                                        (lua_Integer)r->size, dtype_names[r->dtype], width));
  *count = check_count(L, 1, r->size / (size_t)width);
  return mpi_dtype(r->dtype);
}

/* A point-to-point message: send(buf, dest [, tag]), or, receiving,
 * recv(buf [, src [, tag]]) with any source and any tag by default. */
typedef struct Message {
  void *addr;
  int count, peer, tag;
  cl_Buffer *buf;
} Message;

static Message check_message(lua_State *L, int receiving)
{
  ensure_started(L);
  Region r = check_region(L, 1);
  Message m = {r.addr, check_count(L, 1, r.size), MPI_ANY_SOURCE, MPI_ANY_TAG, r.buf};
  if (!receiving || !lua_isnoneornil(L, 2))
    m.peer = check_rank(L, 2, receiving);
  if (!receiving || !lua_isnoneornil(L, 3))
    m.tag = check_tag(L, 3, receiving);
  return m;
}

/* check_message(x, peer, tag, receiving) -> buffer, bytes, device id or
 * nil: the argument checks of send (receiving false) or recv, for any
 * memory; x a Buffer or a View (then its buffer). cuda.mpi calls it under
 * the name of its own function, which argument errors then name. */
static int mpi_check_message(lua_State *L)
{
  int receiving = lua_toboolean(L, 4);
  lua_settop(L, 3);
  ensure_started(L);
  cl_Buffer *b = NULL;
  Region r = check_region_of(L, 1, &b);
  int dev = b->mr->kind == CL_MR_DEVICE ? b->mr->dev->ordinal : -1;
  check_count(L, 1, r.size);
  if (!receiving || !lua_isnil(L, 2))
    check_rank(L, 2, receiving);
  if (!receiving || !lua_isnil(L, 3))
    check_tag(L, 3, receiving);
  if (luaL_testudata(L, 1, CL_BUFFER))
    lua_pushvalue(L, 1);
  else
    lua_getfield(L, 1, "buffer");
  lua_pushinteger(L, (lua_Integer)r.size);
  if (dev >= 0)
    lua_pushinteger(L, dev);
  else
    lua_pushnil(L);
  return 3;
}

static int mpi_send(lua_State *L)
{
  Message m = check_message(L, 0);
  MPI_TRY(L, MPI_Send, (m.addr, m.count, MPI_BYTE, m.peer, m.tag, world.comm));
  return 0;
}

/* Push what a receive returns: bytes received, source, tag. */
static int push_status(lua_State *L, MPI_Status *st)
{
  int bytes = 0;
  MPI_Get_count(st, MPI_BYTE, &bytes);
  lua_pushinteger(L, bytes);
  lua_pushinteger(L, st->MPI_SOURCE);
  lua_pushinteger(L, st->MPI_TAG);
  return 3;
}

/* recv(...) -> bytes, source, tag */
static int mpi_recv(lua_State *L)
{
  Message m = check_message(L, 1);
  MPI_Status st;
  MPI_TRY(L, MPI_Recv, (m.addr, m.count, MPI_BYTE, m.peer, m.tag, world.comm, &st));
  return push_status(L, &st);
}

/* allreduce(buf, op [, dtype]): in place. */
static int mpi_allreduce(lua_State *L)
{
  static const char *const op_names[] = {"sum", "min", "max", NULL};
  const MPI_Op ops[] = {MPI_SUM, MPI_MIN, MPI_MAX};
  ensure_started(L);
  Region r = check_region(L, 1);
  MPI_Op op = ops[luaL_checkoption(L, 2, NULL, op_names)];
  int count = 0;
  MPI_Datatype t = region_type(L, &r, 3, &count);
  MPI_TRY(L, MPI_Allreduce, (MPI_IN_PLACE, r.addr, count, t, op, world.comm));
  return 0;
}

/* --- requests ---------------------------------------------------------------- */

/* User values: 1 the buffer (kept alive while MPI uses it), 2 a function
 * called once when the request completes (lua/cuda/mpi.lua copies staged
 * data back with it). */
typedef struct Request {
  MPI_Request req;
  int done;
  MPI_Status st;
  cl_Buffer *held;              /* the buffer MPI reads or writes, its memory held until done */
} Request;

/* While MPI may touch a buffer's memory, closing the buffer (buf:close()
 * or a finalizer) only closes it for Lua: the memory goes back when the
 * request is done, as with graphs (graph_refs counts both). */
static const cl_BufferAPI *buffer_api;   /* the core's, from the registry (luaopen) */

static void hold_buffer(Request *q, cl_Buffer *b)
{
  buffer_api->hold(b);
  q->held = b;
}

static void release_buffer(Request *q)
{
  if (q->held)
    buffer_api->release(q->held);
  q->held = NULL;
}

/* Start a request on MPI with b held; an MPI failure lets b go again. */
#define REQUEST_START(L, q, b, fn, args) do { \
    hold_buffer(q, b); \
    int rc_ = fn args; \
    if (rc_ != MPI_SUCCESS) { release_buffer(q); fail(L, #fn, rc_); } \
    q->done = 0; \
  } while (0)

static Request *check_request(lua_State *L)
{
  return luaL_checkudata(L, 1, REQUEST);
}

static int finish(lua_State *L, Request *q)
{
  q->done = 1;
  release_buffer(q);
  if (lua_getiuservalue(L, 1, 2) == LUA_TFUNCTION)
    lua_call(L, 0, 0);
  else
    lua_pop(L, 1);
  lua_pushnil(L);
  lua_setiuservalue(L, 1, 2);
  return push_status(L, &q->st);
}

/* req:wait() -> bytes, source, tag */
static int request_wait(lua_State *L)
{
  Request *q = check_request(L);
  if (!q->done)
    MPI_TRY(L, MPI_Wait, (&q->req, &q->st));
  return finish(L, q);
}

/* req:test() -> true, bytes, source, tag | false */
static int request_test(lua_State *L)
{
  Request *q = check_request(L);
  int flag = q->done;
  if (!flag)
    MPI_TRY(L, MPI_Test, (&q->req, &flag, &q->st));
  lua_pushboolean(L, flag);
  return flag ? 1 + finish(L, q) : 1;
}

/* A request collected while pending is cancelled, then waited for, so
 * that MPI never touches its buffer once the buffer is gone. */
static int request_gc(lua_State *L)
{
  Request *q = check_request(L);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!q->done && !finalized && q->req != MPI_REQUEST_NULL) {
    MPI_Cancel(&q->req);
    MPI_Wait(&q->req, MPI_STATUS_IGNORE);
  }
  q->done = 1;
  if (!finalized)
    release_buffer(q);
  return 0;
}

static int request_tostring(lua_State *L)
{
  lua_pushstring(L, check_request(L)->done ? "cuda.mpi.Request (done)" : "cuda.mpi.Request (pending)");
  return 1;
}

static Request *push_request(lua_State *L, int bufi, int on_done)
{
  Request *q = lua_newuserdatauv(L, sizeof *q, 2);
  q->req = MPI_REQUEST_NULL;
  q->done = 1;                  /* until MPI has the request */
  q->held = NULL;
  luaL_setmetatable(L, REQUEST);
  lua_pushvalue(L, bufi);
  lua_setiuservalue(L, -2, 1);
  if (on_done) {
    luaL_checktype(L, on_done, LUA_TFUNCTION);
    lua_pushvalue(L, on_done);
    lua_setiuservalue(L, -2, 2);
  }
  return q;
}

/* isend(buf, dest [, tag]) -> request */
static int mpi_isend(lua_State *L)
{
  lua_settop(L, 3);
  Request *q = push_request(L, 1, 0);             /* 4: made before the checks */
  Message m = check_message(L, 0);
  REQUEST_START(L, q, m.buf, MPI_Isend, (m.addr, m.count, MPI_BYTE, m.peer, m.tag, world.comm, &q->req));
  return 1;
}

/* irecv(buf [, src [, tag [, on_done]]]) -> request */
static int mpi_irecv(lua_State *L)
{
  lua_settop(L, 4);
  Request *q = push_request(L, 1, lua_isnil(L, 4) ? 0 : 4);   /* 5: made before the checks */
  Message m = check_message(L, 1);
  REQUEST_START(L, q, m.buf, MPI_Irecv, (m.addr, m.count, MPI_BYTE, m.peer, m.tag, world.comm, &q->req));
  return 1;
}

/* --- cuda.mpi's protocol (lua/cuda/mpi.lua) ------------------------------------
 * Bytes [offset, offset + length) of a host-accessible buffer, on one of
 * three communicators: 0 the users' (headers of point-to-point messages),
 * 1 payloads, 2 headers of collectives. */

static MPI_Comm wire_comm(lua_State *L, int i)
{
  lua_Integer c = luaL_checkinteger(L, i);
  if (c < 0 || c > 2)
    luaL_argerror(L, i, "communicator 0, 1 or 2 expected");
  return c == 0 ? world.comm : c == 1 ? world.wire : world.coll;
}

/* The address of bytes [off, off + len) of the host-accessible buffer at
 * i (the offset was argument i + 1, the length i + 2). */
static void *wire_bytes(lua_State *L, int i, lua_Integer off, lua_Integer len)
{
  cl_Buffer *b = luaL_testudata(L, i, CL_BUFFER);
  if (b == NULL)
    luaL_typeerror(L, i, "cuda.Buffer");
  /* closed for Lua but held by the operation (core.hold): still its memory */
  if (!cl_buffer_is_open(b) && (b->owner ? b->owner : b)->graph_refs == 0)
    luaL_argerror(L, i, "cuda.Buffer is closed");
  if (b->mr->kind == CL_MR_DEVICE)
    luaL_argerror(L, i, "device memory");
  if (off < 0 || (lua_Unsigned)off > b->size)
    luaL_argerror(L, i + 1, "offset out of range");
  if (len < 0 || (lua_Unsigned)len > b->size - (size_t)off || len > INT_MAX)
    luaL_argerror(L, i + 2, "length out of range");
  return (char *)(uintptr_t)b->ptr + off;
}

static Request *push_request(lua_State *L, int bufi, int on_done);

/* wire_isend(buf, offset, length, dest, tag, comm) and
 * wire_irecv(buf, offset, length, src, tag, comm) -> request */
static int wire_start(lua_State *L, int receiving)
{
  ensure_started(L);
  int peer = check_rank(L, 4, receiving), tag = check_tag(L, 5, receiving);
  lua_Integer off = luaL_checkinteger(L, 2), len = luaL_checkinteger(L, 3);
  MPI_Comm comm = wire_comm(L, 6);
  Request *q = push_request(L, 1, 0);
  void *p = wire_bytes(L, 1, off, len);
  if (receiving)
    REQUEST_START(L, q, lua_touserdata(L, 1), MPI_Irecv, (p, (int)len, MPI_BYTE, peer, tag, comm, &q->req));
  else
    REQUEST_START(L, q, lua_touserdata(L, 1), MPI_Isend, (p, (int)len, MPI_BYTE, peer, tag, comm, &q->req));
  return 1;
}

static int mpi_wire_isend(lua_State *L) { return wire_start(L, 0); }
static int mpi_wire_irecv(lua_State *L) { return wire_start(L, 1); }

/* hold(buf) -> a to-be-closed value: while it is open, closing buf (or
 * its owner) closes it for Lua only, and the operation that took the hold
 * may still use its memory (wire_isend, wire_irecv): the memory goes back
 * when the hold closes. cuda.mpi holds every message's buffer. */
#define HOLD "cuda.mpi.Hold"
typedef struct Hold {
  cl_Buffer *buf;               /* NULL once released */
} Hold;

static int mpi_hold(lua_State *L)
{
  lua_settop(L, 1);
  Hold *h = lua_newuserdatauv(L, sizeof *h, 1);  /* 2: made before the check */
  h->buf = NULL;
  luaL_setmetatable(L, HOLD);
  cl_Buffer *b = luaL_checkudata(L, 1, CL_BUFFER);
  if (!cl_buffer_is_open(b))
    luaL_argerror(L, 1, "cuda.Buffer is closed");
  buffer_api->hold(b);
  h->buf = b;
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, 2, 1);
  return 1;
}

static int hold_release(lua_State *L)
{
  Hold *h = luaL_checkudata(L, 1, HOLD);
  if (h->buf)
    buffer_api->release(h->buf);
  h->buf = NULL;
  return 0;
}

/* is_open(buf): whether buf and its owner are open. */
static int mpi_is_open(lua_State *L)
{
  cl_Buffer *b = luaL_checkudata(L, 1, CL_BUFFER);
  lua_pushboolean(L, cl_buffer_is_open(b));
  return 1;
}

/* poke(buf, offset, string): the string's bytes into the buffer. */
static int mpi_poke(lua_State *L)
{
  size_t n = 0;
  lua_Integer off = luaL_checkinteger(L, 2);
  const char *s = luaL_checklstring(L, 3, &n);
  void *p = wire_bytes(L, 1, off, (lua_Integer)n);
  memcpy(p, s, n);
  return 0;
}

/* peek(buf, offset, length) -> string */
static int mpi_peek(lua_State *L)
{
  lua_settop(L, 3);
  luaL_Buffer out;
  lua_Integer off = luaL_checkinteger(L, 2), want = luaL_checkinteger(L, 3);
  luaL_argcheck(L, want >= 0 && want <= INT_MAX, 3, "length out of range");
  char *dst = luaL_buffinitsize(L, &out, (size_t)want);
  void *p = wire_bytes(L, 1, off, want);
  memcpy(dst, p, (size_t)want);
  luaL_pushresultsize(&out, (size_t)want);
  return 1;
}

/* --- Lua values: the serializer ----------------------------------------------
 * A value is a tag byte, then its payload: 'n' nil, 'f' false, 't' true,
 * 'i' an integer (8 bytes), 'd' a float (8 bytes), 's' a string (8 bytes of
 * length, then the bytes), '{' a table: key, value, ... then '}'. Native
 * byte order: every rank of a job runs on the same architecture. */

typedef struct Writer {
  lua_State *L;
  int argi;                     /* the argument being sent, for errors */
  int slot;                     /* stack slot of the userdata holding the bytes */
  unsigned char *p;
  size_t n, cap;
  int depth;
  int keys[MAX_DEPTH];          /* stack index of the key at each level */
} Writer;

static void put(Writer *w, const void *data, size_t len)
{
  if (w->cap - w->n < len) {
    size_t cap = w->cap * 2 + len;
    unsigned char *p = lua_newuserdatauv(w->L, cap, 0);
    memcpy(p, w->p, w->n);
    lua_replace(w->L, w->slot);
    w->p = p;
    w->cap = cap;
  }
  memcpy(w->p + w->n, data, len);
  w->n += len;
}

static void put_tag(Writer *w, char tag)
{
  put(w, &tag, 1);
}

/* "value.a[2]": where in the argument the bad value is. */
static const char *key_path(Writer *w)
{
  lua_State *L = w->L;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addstring(&b, "value");
  for (int d = 0; d < w->depth; d++) {
    int k = w->keys[d];
    if (lua_type(L, k) == LUA_TSTRING) {
      luaL_addchar(&b, '.');
      luaL_addstring(&b, lua_tostring(L, k));
    } else {
      luaL_addchar(&b, '[');
      luaL_addstring(&b, luaL_tolstring(L, k, NULL));
      lua_pop(L, 1);
      luaL_addchar(&b, ']');
    }
  }
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

static void bad_value(Writer *w, const char *what)
{
  const char *path = key_path(w);
  luaL_argerror(w->L, w->argi, lua_pushfstring(w->L, "cannot send %s (at %s)", what, path));
}

static void encode(Writer *w, int i);

static void encode_table(Writer *w, int i)
{
  lua_State *L = w->L;
  if (w->depth == MAX_DEPTH)
    bad_value(w, "tables nested this deep (or a cycle)");
  luaL_checkstack(L, 4, "table to send");
  put_tag(w, '{');
  lua_pushnil(L);
  while (lua_next(L, i)) {
    w->keys[w->depth++] = lua_absindex(L, -2);
    if (lua_type(L, -2) == LUA_TTABLE || lua_type(L, -2) == LUA_TUSERDATA)
      bad_value(w, lua_pushfstring(L, "a %s as a key", luaL_typename(L, -2)));
    encode(w, lua_absindex(L, -2));
    encode(w, lua_absindex(L, -1));
    w->depth--;
    lua_pop(L, 1);
  }
  put_tag(w, '}');
}

static void encode(Writer *w, int i)
{
  lua_State *L = w->L;
  switch (lua_type(L, i)) {
  case LUA_TNIL: put_tag(w, 'n'); break;
  case LUA_TBOOLEAN: put_tag(w, lua_toboolean(L, i) ? 't' : 'f'); break;
  case LUA_TNUMBER:
    if (lua_isinteger(L, i)) {
      lua_Integer v = lua_tointeger(L, i);
      put_tag(w, 'i');
      put(w, &v, sizeof v);
    } else {
      lua_Number v = lua_tonumber(L, i);
      put_tag(w, 'd');
      put(w, &v, sizeof v);
    }
    break;
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(L, i, &len);
    uint64_t n = len;
    put_tag(w, 's');
    put(w, &n, sizeof n);
    put(w, s, len);
    break;
  }
  case LUA_TTABLE: encode_table(w, i); break;
  default: bad_value(w, lua_pushfstring(L, "a %s", luaL_typename(L, i)));
  }
}

/* Serialize the value at argi; the bytes live in a userdata pushed on the
 * stack (freed by the collector, also when an error interrupts). */
static const unsigned char *serialize(lua_State *L, int argi, size_t *len)
{
  Writer w = {L, argi, 0, NULL, 0, 64, 0, {0}};
  w.p = lua_newuserdatauv(L, w.cap, 0);
  w.slot = lua_gettop(L);
  encode(&w, argi);
  *len = w.n;
  return w.p;
}

typedef struct Reader {
  lua_State *L;
  const unsigned char *p, *end;
} Reader;

static const unsigned char *take(Reader *r, size_t len)
{
  if ((size_t)(r->end - r->p) < len)
    luaL_error(r->L, "cuda.mpi: a received value is truncated");
  const unsigned char *at = r->p;
  r->p += len;
  return at;
}

static void decode(Reader *r, int depth)
{
  lua_State *L = r->L;
  char tag = (char)*take(r, 1);
  lua_Integer iv;
  lua_Number fv;
  uint64_t len;
  luaL_checkstack(L, 3, "received value");
  switch (tag) {
  case 'n': lua_pushnil(L); break;
  case 'f': lua_pushboolean(L, 0); break;
  case 't': lua_pushboolean(L, 1); break;
  case 'i': memcpy(&iv, take(r, sizeof iv), sizeof iv); lua_pushinteger(L, iv); break;
  case 'd': memcpy(&fv, take(r, sizeof fv), sizeof fv); lua_pushnumber(L, fv); break;
  case 's':
    memcpy(&len, take(r, sizeof len), sizeof len);
    lua_pushlstring(L, (const char *)take(r, (size_t)len), (size_t)len);
    break;
  case '{':
    if (depth == MAX_DEPTH)
      luaL_error(L, "cuda.mpi: a received value is nested too deeply");
    lua_newtable(L);
    while (r->p < r->end && *r->p != '}') {
      decode(r, depth + 1);
      decode(r, depth + 1);
      lua_rawset(L, -3);
    }
    take(r, 1);
    break;
  default: luaL_error(L, "cuda.mpi: a received value is corrupt (tag %d)", tag);
  }
}

static void deserialize(lua_State *L, const unsigned char *p, size_t len)
{
  Reader r = {L, p, p + len};
  decode(&r, 0);
  if (r.p != r.end)
    luaL_error(L, "cuda.mpi: a received value has trailing bytes");
}

/* --- collectives of Lua values ------------------------------------------ */

/* bcast(value, root) -> root's value */
static int mpi_bcast(lua_State *L)
{
  ensure_started(L);
  lua_settop(L, 2);
  int root = check_rank(L, 2, 0);
  size_t len = 0;
  const unsigned char *bytes = world.rank == root ? serialize(L, 1, &len) : NULL;
  int64_t n = (int64_t)len;
  check_count(L, 1, len);
  MPI_TRY(L, MPI_Bcast, (&n, 1, MPI_INT64_T, root, world.comm));
  if (world.rank == root) {
    MPI_TRY(L, MPI_Bcast, ((void *)bytes, (int)n, MPI_BYTE, root, world.comm));
    lua_settop(L, 1);
    return 1;
  }
  unsigned char *in = lua_newuserdatauv(L, (size_t)n, 0);
  MPI_TRY(L, MPI_Bcast, (in, (int)n, MPI_BYTE, root, world.comm));
  deserialize(L, in, (size_t)n);
  return 1;
}

/* Decode the gathered values of every rank into a table t[rank + 1]. */
static void push_gathered(lua_State *L, const unsigned char *all, const int *lens, const int *offs)
{
  lua_createtable(L, world.size, 0);
  for (int r = 0; r < world.size; r++) {
    deserialize(L, all + offs[r], (size_t)lens[r]);
    lua_rawseti(L, -2, r + 1);
  }
}

/* gather(value, root) -> {value of rank 0, ...} on root, nil elsewhere;
 * allgather(value) -> the table on every rank (root < 0). */
static int gather(lua_State *L, int root)
{
  size_t len, total = 0;
  const unsigned char *bytes = serialize(L, 1, &len);
  int n = check_count(L, 1, len), receives = root < 0 || world.rank == root;
  int *lens = lua_newuserdatauv(L, 2 * sizeof(int) * (size_t)world.size, 0);
  int *offs = lens + world.size;
  if (root < 0)
    MPI_TRY(L, MPI_Allgather, (&n, 1, MPI_INT, lens, 1, MPI_INT, world.comm));
  else
    MPI_TRY(L, MPI_Gather, (&n, 1, MPI_INT, lens, 1, MPI_INT, root, world.comm));
  for (int r = 0; receives && r < world.size; r++) {
    offs[r] = (int)total;
    total += (size_t)lens[r];
    check_count(L, 1, total);
  }
  unsigned char *all = lua_newuserdatauv(L, total, 0);
  if (root < 0)
    MPI_TRY(L, MPI_Allgatherv, (bytes, n, MPI_BYTE, all, lens, offs, MPI_BYTE, world.comm));
  else
    MPI_TRY(L, MPI_Gatherv, (bytes, n, MPI_BYTE, all, lens, offs, MPI_BYTE, root, world.comm));
  if (!receives)
    return 0;
  push_gathered(L, all, lens, offs);
  return 1;
}

static int mpi_gather(lua_State *L)
{
  ensure_started(L);
  lua_settop(L, 2);
  return gather(L, check_rank(L, 2, 0));
}

static int mpi_allgather(lua_State *L)
{
  ensure_started(L);
  lua_settop(L, 1);
  return gather(L, -1);
}

/* --- the module -------------------------------------------------------------- */

int luaopen_cuda_mpi_core(lua_State *L);

int luaopen_cuda_mpi_core(lua_State *L)
{
  if (lua_getfield(L, LUA_REGISTRYINDEX, CL_BUFFER_API) != LUA_TLIGHTUSERDATA) {
    lua_getglobal(L, "require");                  /* the core registers it */
    lua_pushliteral(L, "cuda");
    lua_call(L, 1, 0);
    lua_getfield(L, LUA_REGISTRYINDEX, CL_BUFFER_API);
  }
  buffer_api = lua_touserdata(L, -1);
  if (buffer_api == NULL)
    return luaL_error(L, "cuda.mpi_core: the cuda module did not register its buffers");
  lua_settop(L, 0);
  static const luaL_Reg request_methods[] = {
    {"wait", request_wait}, {"test", request_test}, {NULL, NULL}
  };
  static const luaL_Reg request_meta[] = {
    {"__gc", request_gc}, {"__tostring", request_tostring}, {NULL, NULL}
  };
  static const luaL_Reg fns[] = {
    {"info", mpi_info}, {"barrier", mpi_barrier}, {"bcast", mpi_bcast},
    {"gather", mpi_gather}, {"allgather", mpi_allgather}, {"send", mpi_send},
    {"recv", mpi_recv}, {"isend", mpi_isend}, {"irecv", mpi_irecv},
    {"allreduce", mpi_allreduce}, {"is_device", mpi_is_device},
    {"wire_isend", mpi_wire_isend}, {"wire_irecv", mpi_wire_irecv}, {"poke", mpi_poke},
    {"hold", mpi_hold}, {"is_open", mpi_is_open},
    {"peek", mpi_peek}, {"check_message", mpi_check_message},
    {"is_buffer", mpi_is_buffer}, {"send_fd", mpi_fds_send}, {"receive_fd", mpi_fds_receive},
    {"close_fd", mpi_fds_close}, {NULL, NULL}
  };
  if (luaL_newmetatable(L, REQUEST)) {
    luaL_setfuncs(L, request_meta, 0);
    luaL_newlib(L, request_methods);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, HOLD)) {
    lua_pushcfunction(L, hold_release);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, hold_release);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  luaL_newlib(L, fns);
  lua_pushinteger(L, MPI_ANY_SOURCE);
  lua_setfield(L, -2, "ANY_SOURCE");
  lua_pushinteger(L, MPI_ANY_TAG);
  lua_setfield(L, -2, "ANY_TAG");
  return 1;
}
