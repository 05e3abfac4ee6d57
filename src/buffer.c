/* SPDX-License-Identifier: MIT */
/* buffer.c: cuda.Buffer — allocation (mr:allocate), fill, slices,
 * prefetch/advise, close; its copies are copy.c's.
 *
 * A slice is a Buffer that does not own its memory; it keeps its owner
 * alive and becomes unusable once the owner is closed. */
#include <string.h>

#include "device.h"

const char *cl_buffer_closed_why(const cl_Buffer *b)
{
  if (b->closed)
    return "cuda.Buffer is closed";
  if (b->owner && b->owner->closed)
    return "cuda.Buffer is closed (its owner was closed)";
  return "cuda.Buffer is a slice of a buffer that moved when it grew: make the slice again";
}

cl_Buffer *cl_check_buffer(lua_State *L, int i)
{
  cl_Buffer *b = luaL_checkudata(L, i, CL_BUFFER);
  if (!cl_buffer_is_open(b))
    luaL_error(L, "%s", cl_buffer_closed_why(b));
  return b;
}

void *cl_buffer_host(lua_State *L, int i, cl_Buffer *b)
{
  (void)i;
  if (!cl_mr_host_accessible(b->mr))
    luaL_error(L, "this cuda.Buffer is device memory, which the host cannot read: "
                  "copy it to a pinned or managed buffer first");
  return (void *)(uintptr_t)b->ptr;
}

cl_Buffer *cl_push_buffer(lua_State *L, CUdeviceptr ptr, size_t size, int mri,
                          cl_Stream *s, int si)
{
  mri = lua_absindex(L, mri);
  si = si ? lua_absindex(L, si) : 0;
  cl_Buffer *b = lua_newuserdatauv(L, sizeof *b, 2);
  memset(b, 0, sizeof *b);
  b->ptr = ptr;
  b->size = size;
  b->mr = lua_touserdata(L, mri);
  b->stream = s;
  luaL_setmetatable(L, CL_BUFFER);
  lua_pushvalue(L, mri);
  lua_setiuservalue(L, -2, 1);
  if (si) {
    lua_pushvalue(L, si);
    lua_setiuservalue(L, -2, 2);
  }
  return b;
}

/* --- close ------------------------------------------------------------------ */

static void release(cl_Buffer *b, cl_Stream *s)
{
  int known = 1;
  CUstream h = NULL;
  if (s)
    h = s->handle;
  else if (b->stream && !b->stream->closed)
    h = b->stream->handle;  /* the stream it was allocated on */
  else
    known = 0;
  cl_mr_release(b->mr, b->ptr, b->size, h, known);
}

/* buf:close([stream]): an owning buffer's memory goes back to its resource,
 * ordered on stream (or on the stream it was allocated on). While a live
 * graph uses it, it is closed for Lua and freed with the last such graph. */
static int buffer_close(lua_State *L)
{
  cl_Buffer *b = luaL_checkudata(L, 1, CL_BUFFER);
  cl_Stream *s = cl_opt_stream(L, 2);
  if (b->closed)
    return 0;
  if (!b->owner && b->mr->ops && b->mr->ops->close_buffer)   /* graph memory (graph_memory.c) */
    return b->mr->ops->close_buffer(L, b, s);
  b->closed = 1;
  if (!b->owner && b->graph_refs == 0)
    release(b, s);
  else if (!b->owner)
    cl_mr_hold_for_graph(b->mr);
  return 0;
}

void cl_buffer_graph_release(cl_Buffer *b)
{
  cl_Buffer *owner = b->owner ? b->owner : b;
  if (--owner->graph_refs == 0 && owner->closed && !owner->mr->graph_memory)
    cl_mr_release_graph_held(owner->mr, owner->ptr, owner->size);
}

void cl_buffer_hold(cl_Buffer *b)
{
  (b->owner ? b->owner : b)->graph_refs++;
}

static int buffer_gc(lua_State *L)
{
  lua_settop(L, 1);
  return buffer_close(L);
}

/* --- fill ----------------------------------------------------------------------- */

static void fill_host(void *p, size_t n, const cl_Scalar *v, size_t width)
{
  if (width == 1) {
    memset(p, v->v.u8, n);
    return;
  }
  for (size_t off = 0; off < n; off += width)
    memcpy((char *)p + off, v->v.bytes, width);
}

/* buf:fill(value, stream): a byte from a number, or a 16/32-bit pattern
 * from a typed scalar (cuda.u16(...), cuda.u32(...), cuda.f32(...)). */
static int buffer_fill(lua_State *L)
{
  cl_Buffer *b = cl_check_buffer(L, 1);
  cl_Stream *s = cl_opt_stream(L, 3);
  cl_Scalar byte, *v = cl_test_scalar(L, 2);
  if (!v) {
    lua_Integer x = luaL_checkinteger(L, 2);
    luaL_argcheck(L, x >= 0 && x <= 255, 2,
                  "a fill value must be a byte (0..255), or a typed scalar such as cuda.u32(x)");
    byte.type = CL_U8;
    byte.v.u8 = (uint8_t)x;
    v = &byte;
  }
  size_t width = cl_dtype_sizes[v->type];
  luaL_argcheck(L, width <= 4, 2, "fill patterns are 8, 16 or 32 bits wide");
  if (b->size % width != 0)
    luaL_error(L, "cannot fill %I bytes with a %d-byte pattern", (lua_Integer)b->size, (int)width);
  if (b->mr->kind == CL_MR_HOST || (!s && cl_mr_host_accessible(b->mr))) {
    if (s) {
      cl_stream_sync(L, s);
      b = cl_check_buffer(L, 1);   /* the wait ran host functions, which may have closed b */
    }
    fill_host((void *)(uintptr_t)b->ptr, b->size, v, width);
  } else if (!s)
    luaL_error(L, "filling device memory needs a stream: buf:fill(value, stream)");
  else {
    size_t n = b->size / width;
    cl_device_activate(L, s->dev);
    if (width == 1)
      CL_TRY(L, cuMemsetD8Async, (b->ptr, v->v.u8, n, s->handle));
    else if (width == 2)
      CL_TRY(L, cuMemsetD16Async, (b->ptr, v->v.u16, n, s->handle));
    else
      CL_TRY(L, cuMemsetD32Async, (b->ptr, v->v.u32, n, s->handle));
    if (s->capture)
      cl_capture_keep(L, s, 3, 1, 1);
  }
  lua_settop(L, 1);
  return 1;
}

/* --- slices ------------------------------------------------------------------------ */

/* buf:slice(offset, size): bytes [offset, offset + size) of buf, 0-based
 * like pointers; size defaults to the rest. */
static int buffer_slice(lua_State *L)
{
  cl_Buffer *b = cl_check_buffer(L, 1);
  lua_Integer off = luaL_checkinteger(L, 2);
  if (off < 0 || (size_t)off >= b->size)
    luaL_argerror(L, 2, lua_pushfstring(L, "offset %I is outside the buffer (0 to %I)", off,
                                        (lua_Integer)b->size - 1));
  lua_Integer size = luaL_optinteger(L, 3, (lua_Integer)(b->size - (size_t)off));
  if (size <= 0 || (size_t)size > b->size - (size_t)off)
    luaL_argerror(L, 3, lua_pushfstring(L, "size %I does not fit: %I bytes remain after offset %I",
                                        size, (lua_Integer)(b->size - (size_t)off), off));
  cl_Buffer *owner = b->owner ? b->owner : b;
  if (b->owner)
    lua_getiuservalue(L, 1, 1);   /* slices of slices keep the owner itself */
  else
    lua_pushvalue(L, 1);
  int owneri = lua_gettop(L);
  lua_getiuservalue(L, owneri, 2);
  cl_Buffer *sl = cl_push_buffer(L, b->ptr + (CUdeviceptr)off, (size_t)size, owneri,
                                 owner->stream, lua_isnil(L, -1) ? 0 : -1);
  sl->owner = owner;
  sl->mr = owner->mr;
  sl->moves = owner->moves;     /* a later move leaves this address: is_open then fails */
  cl_check_buffer(L, 1);   /* creating the slice can run a finalizer that closed buf */
  return 1;
}

/* buf:set_deallocation_stream(s): the stream close() and the collector
 * order the release on when close is given none (cuda.core's
 * Buffer deallocation stream); s is kept alive with the buffer. */
static int buffer_set_deallocation_stream(lua_State *L)
{
  cl_Buffer *b = cl_check_buffer(L, 1);
  cl_Stream *s = cl_check_stream(L, 2);
  if (b->owner)
    return luaL_error(L, "set_deallocation_stream: a slice frees nothing; set it on its owner");
  b->stream = s;
  lua_settop(L, 2);
  lua_setiuservalue(L, 1, 2);
  return 1;
}

/* --- managed memory ---------------------------------------------------------------- */

static CUmemLocation location_arg(lua_State *L, int i)
{
  CUmemLocation loc;
  memset(&loc, 0, sizeof loc);
  if (lua_type(L, i) == LUA_TSTRING && strcmp(lua_tostring(L, i), "host") == 0)
    loc.type = CU_MEM_LOCATION_TYPE_HOST;
  else if (luaL_testudata(L, i, CL_DEVICE)) {
    loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = ((cl_Device *)lua_touserdata(L, i))->ordinal;
  } else
    luaL_typeerror(L, i, "cuda.Device or \"host\"");
  return loc;
}

static void check_managed(lua_State *L, cl_Buffer *b, const char *what)
{
  if (b->mr->kind != CL_MR_MANAGED)
    luaL_error(L, "%s works on managed memory only (this buffer is %s memory)", what,
               cl_mr_kind_names[b->mr->kind]);
}

/* buf:prefetch(dev | "host", stream) */
static int buffer_prefetch(lua_State *L)
{
  cl_Buffer *b = cl_check_buffer(L, 1);
  CUmemLocation loc = location_arg(L, 2);
  cl_Stream *s = cl_check_stream(L, 3);
  check_managed(L, b, "prefetch");
  cl_device_activate(L, s->dev);
  CL_TRY(L, cuMemPrefetchAsync, (b->ptr, b->size, loc, 0, s->handle));
  if (s->capture)
    cl_capture_keep(L, s, 3, 1, 1);
  lua_settop(L, 1);
  return 1;
}

/* buf:advise(advice, dev | "host") */
static int buffer_advise(lua_State *L)
{
  static const char *const names[] = {
    "read_mostly", "unset_read_mostly", "preferred_location", "unset_preferred_location",
    "accessed_by", "unset_accessed_by", NULL
  };
  static const CUmem_advise values[] = {
    CU_MEM_ADVISE_SET_READ_MOSTLY, CU_MEM_ADVISE_UNSET_READ_MOSTLY,
    CU_MEM_ADVISE_SET_PREFERRED_LOCATION, CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
    CU_MEM_ADVISE_SET_ACCESSED_BY, CU_MEM_ADVISE_UNSET_ACCESSED_BY
  };
  int advice = luaL_checkoption(L, 2, NULL, names);   /* before the check: it may convert */
  CUmemLocation loc = location_arg(L, 3);
  cl_Buffer *b = cl_check_buffer(L, 1);
  check_managed(L, b, "advise");
  cl_device_activate(L, b->mr->dev);
  CL_TRY(L, cuMemAdvise, (b->ptr, b->size, values[advice], loc));
  lua_settop(L, 1);
  return 1;
}

/* --- attributes ---------------------------------------------------------------------- */

static int buffer_tostring(lua_State *L)
{
  cl_Buffer *b = luaL_checkudata(L, 1, CL_BUFFER);
  if (!cl_buffer_is_open(b))
    return cl_push_closed_name(L, CL_BUFFER);
  if (b->owner)
    lua_pushfstring(L, "cuda.Buffer(%I bytes, %s, slice at +%I)", (lua_Integer)b->size,
                    cl_mr_kind_names[b->mr->kind], (lua_Integer)(b->ptr - b->owner->ptr));
  else
    lua_pushfstring(L, "cuda.Buffer(%I bytes, %s)", (lua_Integer)b->size,
                    cl_mr_kind_names[b->mr->kind]);
  return 1;
}

static int buffer_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);   /* before the check: a number key is converted */
  cl_Buffer *b = cl_check_buffer(L, 1);
  if (strcmp(key, "size") == 0)
    lua_pushinteger(L, (lua_Integer)b->size);
  else if (strcmp(key, "ptr") == 0)
    lua_pushinteger(L, (lua_Integer)b->ptr);
  else if (strcmp(key, "memory_resource") == 0) {
    lua_getiuservalue(L, 1, 1);
    if (b->owner)
      lua_getiuservalue(L, -1, 1);
  } else if (strcmp(key, "device_id") == 0)
    b->mr->dev ? lua_pushinteger(L, b->mr->dev->ordinal) : lua_pushnil(L);
  else if (strcmp(key, "is_device_accessible") == 0)
    lua_pushboolean(L, cl_mr_device_accessible(b->mr));
  else if (strcmp(key, "is_host_accessible") == 0)
    lua_pushboolean(L, cl_mr_host_accessible(b->mr));
  else if (strcmp(key, "is_slice") == 0)
    lua_pushboolean(L, b->owner != NULL);
  else if (strcmp(key, "deallocation_stream") == 0) {
    lua_getiuservalue(L, 1, b->owner ? 1 : 2);
    if (b->owner)
      lua_getiuservalue(L, -1, 2);
  } else if (strcmp(key, "owner") == 0)
    b->owner ? (void)lua_getiuservalue(L, 1, 1) : lua_pushnil(L);
  else
    lua_pushnil(L);
  return 1;
}

/* mr:allocate(nbytes [, stream]) -> Buffer (a method of MemoryResource, from here) */
static int mr_allocate(lua_State *L)
{
  lua_settop(L, 3);
  cl_check_mr(L, 1);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_argcheck(L, n > 0, 2, "size must be > 0");
  cl_opt_stream(L, 3);
  /* The buffer object first, closed: creating it can run finalizers that
   * close the resource or the stream, so both are checked after it. */
  cl_Buffer *b = cl_push_buffer(L, 0, (size_t)n, 1, NULL, lua_isnoneornil(L, 3) ? 0 : 3);
  b->closed = 1;
  cl_MemoryResource *mr = cl_check_mr(L, 1);
  cl_Stream *s = cl_opt_stream(L, 3);
  if (mr->ipc_opened)
    luaL_argerror(L, 1, "memory opened from another process: this resource allocates nothing");
  if (mr->foreign)
    luaL_argerror(L, 1, "memory another library owns: this resource allocates nothing");
  if (s && mr->dev && s->dev != mr->dev)
    luaL_argerror(L, 3, "the stream belongs to another device");
  b->ptr = cl_mr_allocate(L, mr, (size_t)n, s);
  b->stream = s;
  b->closed = 0;
  return 1;
}

void cl_open_buffer(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", buffer_gc}, {"__close", buffer_gc}, {"__tostring", buffer_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"fill", buffer_fill},
    {"slice", buffer_slice}, {"close", buffer_close}, {"prefetch", buffer_prefetch},
    {"advise", buffer_advise}, {"set_deallocation_stream", buffer_set_deallocation_stream},
    {NULL, NULL}
  };
  static const luaL_Reg mr_methods[] = {{"allocate", mr_allocate}, {NULL, NULL}};
  cl_new_type(L, CL_BUFFER, meta, methods, buffer_fields);
  cl_add_methods(L, CL_MR, mr_methods);
  cl_lifetimes_buffer(cl_buffer_graph_release);
  static const cl_BufferAPI api = {cl_buffer_hold, cl_buffer_graph_release};
  lua_pushlightuserdata(L, (void *)&api);
  lua_setfield(L, LUA_REGISTRYINDEX, CL_BUFFER_API);
}
