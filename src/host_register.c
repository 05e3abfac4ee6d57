/* SPDX-License-Identifier: MIT */
/* host_register.c: cuda.register_host, page-locking memory cudalua did not
 * allocate (cuMemHostRegister).
 *
 *   local reg <close> = cuda.register_host(host_buf, nil, {mapped = true})
 *   host_buf:copy_to(dbuf, s)              -- DMA, as from pinned memory
 *   cuda.launch(s, cfg, k, reg.device_ptr) -- the kernel reads it in place
 *
 * What can be registered: a pageable buffer (a HostMemoryResource's) or a
 * contiguous view of one, a Lua string (read-only: Lua strings are
 * immutable), or a raw address and size (trusted: cudalua cannot know what
 * it points to). The registration keeps what it registers alive (user value
 * 1), and counts in a buffer as a texture does, so closing the buffer first
 * keeps its memory until the registration is closed: memory is never freed
 * while the driver has it locked. Copies need nothing more: they go through
 * cuMemcpyAsync, and the driver sees a registered range as pinned.
 *
 * The driver refuses a range that overlaps a registered one with a bare
 * CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED; a process-wide set of live
 * ranges lets cudalua say which registration is in the way, before the
 * driver is called. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

#define CL_HOST_REGISTRATION "cuda.HostRegistration"

typedef struct Registration {
  int closed;
  uintptr_t ptr;
  size_t size;
  unsigned flags;               /* CU_MEMHOSTREGISTER_* */
  CUdeviceptr device_ptr;       /* mapped ones: cuMemHostGetDevicePointer's; else 0 */
  CUcontext ctx;                /* the context current at registration */
  cl_Buffer *owner;             /* the buffer it counts in (graph_refs), or NULL */
} Registration;

/* --- the live ranges: a small sorted-free array, searched linearly ---------- */

typedef struct Range {
  uintptr_t lo, hi;             /* [lo, hi) */
  int pending;                  /* closed, its unregistration waiting (below) */
} Range;

static pthread_mutex_t ranges_lock = PTHREAD_MUTEX_INITIALIZER;
static Range *ranges;
static size_t nranges, ranges_cap;

/* The live range [lo, hi) overlaps, in *hit; 0 when none does. Room for one
 * more is made here, so that adding after the driver call cannot fail:
 * returns -1 when there is none (out of memory). */
static int find_overlap_and_reserve(uintptr_t lo, uintptr_t hi, Range *hit)
{
  int found = 0;
  pthread_mutex_lock(&ranges_lock);
  for (size_t k = 0; k < nranges && !found; k++)
    if (ranges[k].lo < hi && lo < ranges[k].hi) {
      *hit = ranges[k];
      found = 1;
    }
  if (!found && nranges == ranges_cap) {
    size_t cap = ranges_cap ? 2 * ranges_cap : 16;
    Range *r = realloc(ranges, cap * sizeof *r);
    if (r == NULL)
      found = -1;
    else
      ranges = r, ranges_cap = cap;
  }
  pthread_mutex_unlock(&ranges_lock);
  return found;
}

static void add_range(uintptr_t lo, uintptr_t hi)
{
  pthread_mutex_lock(&ranges_lock);
  ranges[nranges++] = (Range){lo, hi, 0};
  pthread_mutex_unlock(&ranges_lock);
}

static void mark_pending(uintptr_t lo)
{
  pthread_mutex_lock(&ranges_lock);
  for (size_t k = 0; k < nranges; k++)
    if (ranges[k].lo == lo)
      ranges[k].pending = 1;
  pthread_mutex_unlock(&ranges_lock);
}

static void remove_range(uintptr_t lo)
{
  pthread_mutex_lock(&ranges_lock);
  for (size_t k = 0; k < nranges; k++)
    if (ranges[k].lo == lo) {
      ranges[k] = ranges[--nranges];
      break;
    }
  pthread_mutex_unlock(&ranges_lock);
}

/* --- what is registered ------------------------------------------------------ */

typedef struct Target {
  uintptr_t ptr;
  size_t avail;                 /* bytes from ptr the target holds; SIZE_MAX for a raw address */
  cl_Buffer *owner;
  int is_string;
} Target;

static void check_host_kind(lua_State *L, const cl_MemoryResource *mr)
{
  if (mr->kind == CL_MR_PINNED)
    luaL_argerror(L, 1, "pinned memory is page-locked already");
  if (mr->kind != CL_MR_HOST)
    luaL_argerror(L, 1, lua_pushfstring(L, "%s memory cannot be host-registered; register "
                                        "pageable host memory (a HostMemoryResource's)",
                                        cl_mr_kind_names[mr->kind]));
}

/* The value at 1, checked (open) after every allocation of the call. */
static void check_target(lua_State *L, Target *t)
{
  memset(t, 0, sizeof *t);
  cl_Buffer *b = luaL_testudata(L, 1, CL_BUFFER);
  const void *view = b ? NULL : luaL_testudata(L, 1, CL_VIEW);
  cl_Scalar *sc = b || view ? NULL : cl_test_scalar(L, 1);
  if (lua_type(L, 1) == LUA_TSTRING) {
    t->ptr = (uintptr_t)lua_tolstring(L, 1, &t->avail);
    t->is_string = 1;
  } else if (b) {
    b = cl_check_buffer(L, 1);
    check_host_kind(L, b->mr);
    t->ptr = (uintptr_t)b->ptr;
    t->avail = b->size;
    t->owner = b->owner ? b->owner : b;
  } else if (view) {
    cl_ViewMemory m;
    cl_view_memory(view, &m);
    if (!cl_buffer_is_open(m.buf))
      luaL_argerror(L, 1, "cuda.Buffer is closed (the view's buffer)");
    if (!m.contiguous)
      luaL_argerror(L, 1, "a strided cuda.View is not one range of memory");
    check_host_kind(L, m.buf->mr);
    t->ptr = (uintptr_t)m.ptr;
    t->avail = m.nbytes;
    t->owner = m.buf->owner ? m.buf->owner : m.buf;
  } else if ((sc && sc->pointer) || lua_isinteger(L, 1)) {
    t->ptr = sc ? (uintptr_t)sc->v.u64 : (uintptr_t)lua_tointeger(L, 1);
    t->avail = SIZE_MAX;
    if (t->ptr == 0)
      luaL_argerror(L, 1, "a null address");
  } else
    luaL_typeerror(L, 1, "cuda.Buffer, cuda.View, string or address (cuda.ptr(n))");
}

/* --- cuda.register_host(target [, size] [, options]) ---------------------------- */

static unsigned read_flags(lua_State *L, int *read_only)
{
  static const char *const options[] = {
    "portable", "mapped", "device_map", "read_only", "io_memory", NULL
  };
  cl_check_options(L, 3, options);
  if (lua_isnoneornil(L, 3)) {
    *read_only = -1;
    return 0;
  }
  *read_only = cl_opt_boolean(L, 3, "read_only", -1);
  return (cl_opt_boolean(L, 3, "portable", 0) ? CU_MEMHOSTREGISTER_PORTABLE : 0) |
         (cl_opt_boolean(L, 3, "mapped", 0) || cl_opt_boolean(L, 3, "device_map", 0)
            ? CU_MEMHOSTREGISTER_DEVICEMAP : 0) |
         (cl_opt_boolean(L, 3, "io_memory", 0) ? CU_MEMHOSTREGISTER_IOMEMORY : 0) |
         (*read_only == 1 ? CU_MEMHOSTREGISTER_READ_ONLY : 0);
}

/* The size to register: the whole target by default (a raw address has no
 * default), at most what it holds. */
static size_t check_size(lua_State *L, const Target *t, lua_Integer asked)
{
  if (asked == 0 && t->avail == SIZE_MAX)
    luaL_argerror(L, 2, "a raw address needs its size");
  size_t size = asked ? (size_t)asked : t->avail;
  if (size == 0)
    luaL_argerror(L, 1, "nothing to register (0 bytes)");
  if (size > t->avail)
    luaL_argerror(L, 2, lua_pushfstring(L, "size %I is more than the %I bytes it has",
                                        asked, (lua_Integer)t->avail));
  if (t->ptr + size < t->ptr)
    luaL_argerror(L, 2, "the range wraps past the end of the address space");
  return size;
}

static void flush_unregistrations(lua_State *L);   /* below, with closing */
static void close_registration(lua_State *L, int i, Registration *r);

static int cuda_register_host(lua_State *L)
{
  cl_check_nargs(L, 3);
  int read_only;
  unsigned flags = read_flags(L, &read_only);
  lua_Integer asked = lua_isnoneornil(L, 2) ? 0
                    : cl_check_integer_range(L, 2, 1, LUA_MAXINTEGER, "size");
  lua_settop(L, 3);
  cl_push_current_device(L);                                      /* 4 */
  Registration *r = lua_newuserdatauv(L, sizeof *r, 1);           /* 5 */
  memset(r, 0, sizeof *r);
  r->closed = 1;                /* until the driver registered it */
  luaL_setmetatable(L, CL_HOST_REGISTRATION);
  Target t;
  check_target(L, &t);
  if (t.is_string && read_only == 0)
    luaL_argerror(L, 3, "a Lua string is immutable: it registers read_only");
  if (t.is_string)
    flags |= CU_MEMHOSTREGISTER_READ_ONLY;
  r->size = check_size(L, &t, asked);
  r->ptr = t.ptr;
  r->flags = flags;
  flush_unregistrations(L);     /* a closed registration in the way goes now if it can */
  Range hit;
  int overlap = find_overlap_and_reserve(r->ptr, r->ptr + r->size, &hit);
  if (overlap < 0)
    return luaL_error(L, "cuda.register_host: out of memory");
  if (overlap)
    return luaL_error(L, "cuda.register_host: %p + %I bytes overlaps a live registration "
                      "(%p + %I bytes): %s", (void *)r->ptr,
                      (lua_Integer)r->size, (void *)hit.lo, (lua_Integer)(hit.hi - hit.lo),
                      hit.pending ? "it is closed, and unregistered at the next wait with no host "
                                    "function pending and no capture in flight (s:sync(), cuda.poll())"
                                  : "close that one first");
  cl_Device *d = cl_check_device(L, 4);
  cl_device_activate(L, d);
  CL_TRY(L, cuMemHostRegister, ((void *)r->ptr, r->size, r->flags));
  add_range(r->ptr, r->ptr + r->size);
  r->ctx = d->ctx;
  r->owner = t.owner;
  if (r->owner)
    r->owner->graph_refs++;     /* keeps its memory past its close, as a texture does */
  r->closed = 0;
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, 5, 1);
  if (r->flags & CU_MEMHOSTREGISTER_DEVICEMAP) {
    CUresult e = CL_CALL(cuMemHostGetDevicePointer, (&r->device_ptr, (void *)r->ptr, 0));
    if (e != CUDA_SUCCESS) {    /* undone as a close is: with a host function pending, later */
      close_registration(L, 5, r);
      cl_raise(L, e, "cuMemHostGetDevicePointer");
    }
  }
  return 1;
}

/* --- close, fields --------------------------------------------------------- */

/* Unregister in the context that registered it, restoring the current one:
 * a finalizer must not leave another context current. Never raises. */
static void unregister(Registration *r)
{
  CUcontext was = cl_current_ctx;
  int switched = r->ctx && r->ctx != was && CL_CALL(cuCtxSetCurrent, (r->ctx)) == CUDA_SUCCESS;
  CL_CALL(cuMemHostUnregister, ((void *)r->ptr));
  if (switched)
    CL_CALL(cuCtxSetCurrent, (was));
  remove_range(r->ptr);
  if (r->owner)
    cl_buffer_graph_release(r->owner);
  r->owner = NULL;
}

/* --- unregistering: now, or at the next wait --------------------------------
 *
 * Unpinning may wait for the device, as a free may (HIP's hipHostUnregister
 * synchronizes; cudalua's real-GPU fuzzer hung on the H200 once
 * registrations were among its actions). A host function pending on a
 * stream runs only at this thread's next wait, so an unregistration made
 * while one is outstanding would wait for ever; and during a stream
 * capture the driver counts it unsafe. Then the registration is kept in a
 * registry table (a collected one is resurrected there), with what it
 * registers, so that memory is never freed while the driver has it
 * locked; and it is unregistered at the next wait or cuda.poll() with no
 * host function outstanding and no capture in flight (flush_unregistrations,
 * which hostfunc.c runs through cl_run_quiet_work), or when the state closes
 * with none outstanding. */
#define PENDING "cuda.HostRegistration.pending"

static int must_defer(void)
{
  return cl_hostfunc_outstanding > 0 || cl_captures_in_flight > 0;
}

/* Unregister every registration of the table at the top, leaving it there. */
static void unregister_all(lua_State *L)
{
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pop(L, 1);
    unregister(lua_touserdata(L, -1));
    lua_pushvalue(L, -1);
    lua_pushnil(L);
    lua_rawset(L, -4);          /* clearing a field during lua_next is allowed */
  }
  cl_quiet_work_pending = 0;
}

static void flush_unregistrations(lua_State *L)
{
  if (cl_quiet_work_pending == 0 || must_defer())
    return;
  lua_getfield(L, LUA_REGISTRYINDEX, PENDING);
  unregister_all(L);
  lua_pop(L, 1);
}

/* The state closing: what is still pending is unregistered, unless a host
 * function is outstanding (then the driver keeps it until the process ends). */
static int pending_gc(lua_State *L)
{
  lua_getfield(L, LUA_REGISTRYINDEX, PENDING);
  int own = lua_istable(L, 1) && lua_rawequal(L, 1, -1);   /* a script may call it on anything */
  if (own && cl_hostfunc_outstanding == 0) {
    lua_settop(L, 1);
    unregister_all(L);
  }
  return 0;
}

/* Close the open registration r, at index i: unregistered now, or at the
 * next wait when now could wait for ever (above). */
static void close_registration(lua_State *L, int i, Registration *r)
{
  r->closed = 1;
  if (!must_defer()) {
    unregister(r);
    return;
  }
  lua_getfield(L, LUA_REGISTRYINDEX, PENDING);
  lua_pushvalue(L, i);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);            /* may raise (memory): then it stays registered */
  lua_pop(L, 1);
  cl_quiet_work_pending++;
  mark_pending(r->ptr);
}

static int registration_close(lua_State *L)
{
  Registration *r = luaL_checkudata(L, 1, CL_HOST_REGISTRATION);
  if (!r->closed)
    close_registration(L, 1, r);
  return 0;
}

static int registration_gc(lua_State *L)
{
  lua_settop(L, 1);
  return registration_close(L);
}

static void push_pointer(lua_State *L, CUdeviceptr p)
{
  cl_Scalar *sc = lua_newuserdatauv(L, sizeof *sc, 0);
  memset(sc, 0, sizeof *sc);
  sc->type = CL_U64;
  sc->pointer = 1;
  sc->v.u64 = (uint64_t)p;
  luaL_setmetatable(L, CL_SCALAR);
}

static int registration_fields(lua_State *L)
{
  Registration *r = luaL_checkudata(L, 1, CL_HOST_REGISTRATION);
  const char *key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (strcmp(key, "is_closed") == 0)
    lua_pushboolean(L, r->closed);
  else if (r->closed)
    lua_pushnil(L);
  else if (strcmp(key, "ptr") == 0)
    lua_pushinteger(L, (lua_Integer)r->ptr);
  else if (strcmp(key, "size") == 0)
    lua_pushinteger(L, (lua_Integer)r->size);
  else if (strcmp(key, "device_ptr") == 0 && (r->flags & CU_MEMHOSTREGISTER_DEVICEMAP))
    push_pointer(L, r->device_ptr);
  else if (strcmp(key, "mapped") == 0)
    lua_pushboolean(L, (r->flags & CU_MEMHOSTREGISTER_DEVICEMAP) != 0);
  else if (strcmp(key, "portable") == 0)
    lua_pushboolean(L, (r->flags & CU_MEMHOSTREGISTER_PORTABLE) != 0);
  else if (strcmp(key, "read_only") == 0)
    lua_pushboolean(L, (r->flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0);
  else if (strcmp(key, "io_memory") == 0)
    lua_pushboolean(L, (r->flags & CU_MEMHOSTREGISTER_IOMEMORY) != 0);
  else if (strcmp(key, "source") == 0)
    lua_getiuservalue(L, 1, 1);
  else
    lua_pushnil(L);
  return 1;
}

static int registration_tostring(lua_State *L)
{
  Registration *r = luaL_checkudata(L, 1, CL_HOST_REGISTRATION);
  if (r->closed)
    return cl_push_closed_name(L, CL_HOST_REGISTRATION);
  lua_pushfstring(L, "%s(%p, %I bytes%s%s)", CL_HOST_REGISTRATION, (void *)r->ptr,
                  (lua_Integer)r->size,
                  (r->flags & CU_MEMHOSTREGISTER_DEVICEMAP) ? ", mapped" : "",
                  (r->flags & CU_MEMHOSTREGISTER_READ_ONLY) ? ", read-only" : "");
  return 1;
}

void cl_open_host_register(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", registration_gc}, {"__close", registration_gc},
    {"__tostring", registration_tostring}, {NULL, NULL}
  };
  static const luaL_Reg methods[] = {{"close", registration_close}, {NULL, NULL}};
  cl_new_type(L, CL_HOST_REGISTRATION, meta, methods, registration_fields);
  lua_newtable(L);
  lua_newtable(L);
  lua_pushcfunction(L, pending_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, PENDING);
  cl_lifetimes_quiet_work(flush_unregistrations);
  static const luaL_Reg functions[] = {{"register_host", cuda_register_host}, {NULL, NULL}};
  cl_setfuncs(L, functions);
}
