/* SPDX-License-Identifier: MIT */
/* buffer.c: cuda.Buffer — copies, fill, slices, prefetch/advise, close.
 *
 * copy_to and copy_from are on the hot path of every streaming pipeline:
 * they check their arguments and issue one cuMemcpyAsync, allocating
 * nothing. A slice is a Buffer that does not own its memory; it keeps its
 * owner alive and becomes unusable once the owner is closed. */
#include <string.h>

#include "cl.h"

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
  if (!b->owner && b->mr->graph_memory)   /* the graph's memory: graphs using it never defer */
    return cl_graph_memory_close(L, b, s);
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

/* --- copies ------------------------------------------------------------------
 * Both ends of a copy are spans: an open buffer or slice, or the elements
 * of a contiguous view (cl_check_span), so copy_to and copy_from serve
 * views too, as their methods. */

void cl_check_span(lua_State *L, int i, cl_Span *out)
{
  cl_Buffer *b = cl_fast_test(L, i, CL_UV_BUFFER);
  if (b == NULL) {
    const void *v = cl_fast_test(L, i, CL_UV_VIEW);
    if (v == NULL)
      luaL_typeerror(L, i, "cuda.Buffer or cuda.View");
    cl_ViewMemory m;
    cl_view_memory(v, &m);
    if (!cl_buffer_is_open(m.buf))
      luaL_error(L, "%s (the view's buffer)", cl_buffer_closed_why(m.buf));
    if (m.moved)                /* copy_batch passes pairs at negative indexes */
      i > 0 ? luaL_argerror(L, i, "cuda.View: " CL_BUFFER_MOVED ": make the view again")
            : luaL_error(L, "cuda.View: " CL_BUFFER_MOVED ": make the view again");
    if (!m.contiguous)
      luaL_argerror(L, i, "a strided cuda.View is not one run of bytes to copy");
    out->ptr = m.ptr;
    out->size = m.nbytes;
    out->mr = m.buf->mr;
    return;
  }
  if (!cl_buffer_is_open(b))
    cl_check_buffer(L, i);
  out->ptr = b->ptr;
  out->size = b->size;
  out->mr = b->mr;
}

/* An open stream first: the usual case needs no type check of its own. */
static cl_Stream *fast_opt_stream(lua_State *L, int i)
{
  cl_Stream *s = cl_fast_test(L, i, CL_UV_STREAM);
  if (s && !s->closed)
    return s;
  return lua_isnoneornil(L, i) ? NULL : cl_fast_check(L, i, CL_UV_STREAM, CL_STREAM);
}

/* With unified addressing cuMemcpyAsync copies between any two devices'
 * memory (peer to peer where the devices can, else staged by the driver),
 * ordered on the stream; the stream must belong to one of the two. */
static void check_copy_devices(lua_State *L, const cl_Span *dst, const cl_Span *src,
                               const cl_Stream *s)
{
  if (dst->mr->kind != CL_MR_DEVICE && src->mr->kind != CL_MR_DEVICE)
    return;   /* host-mapped memory: any device's stream copies it */
  const cl_Span *foreign = dst->mr->kind == CL_MR_DEVICE ? dst : src;
  luaL_error(L, "cannot copy device %d memory on a stream of device %d: use a stream of "
                "the source's or the destination's device", foreign->mr->dev->ordinal,
             s->dev->ordinal);
}

static void copy(lua_State *L, const cl_Span *dst, const cl_Span *src, cl_Stream *s)
{
  if (src->size != dst->size)
    luaL_error(L, "cannot copy %I bytes into a buffer of %I bytes: sizes must match",
               (lua_Integer)src->size, (lua_Integer)dst->size);
  if (s) {
    if (dst->mr->dev != s->dev && src->mr->dev != s->dev)
      check_copy_devices(L, dst, src, s);
    cl_device_activate(L, s->dev);
    CL_TRY(L, cuMemcpyAsync, (dst->ptr, src->ptr, src->size, s->handle));
    if (s->capture)
      cl_capture_keep(L, s, 3, 1, 2);   /* both callers: spans at 1 and 2, the stream at 3 */
  } else if (src->mr->kind != CL_MR_DEVICE && dst->mr->kind != CL_MR_DEVICE) {
    memmove((void *)(uintptr_t)dst->ptr, (const void *)(uintptr_t)src->ptr, src->size);
  } else
    luaL_error(L, "copying device memory needs a stream: buf:copy_to(dst, stream)");
}

/* Push a new buffer of size bytes from the resource of the buffer (or a
 * view's buffer) at srci, for copy_to(nil, s): whatever allocate returned,
 * which the caller checks. */
static void push_like(lua_State *L, int srci, size_t size, int si)
{
  if (cl_fast_test(L, srci, CL_UV_VIEW)) {
    lua_getiuservalue(L, srci, 1);
    srci = lua_gettop(L);
  }
  const cl_Buffer *src = lua_touserdata(L, srci);
  lua_getiuservalue(L, srci, 1);
  if (src->owner) {   /* a slice: user value 1 is its owner; take the owner's resource */
    lua_getiuservalue(L, -1, 1);
    lua_remove(L, -2);
  }
  lua_getfield(L, -1, "allocate");
  lua_insert(L, -2);
  lua_pushinteger(L, (lua_Integer)size);
  if (si)
    lua_pushvalue(L, si);
  else
    lua_pushnil(L);
  lua_call(L, 3, 1);
}

/* src:copy_to(dst, stream) -> dst; a nil dst allocates one like src. */
static int buffer_copy_to(lua_State *L)
{
  cl_Span src, dst;
  cl_check_span(L, 1, &src);
  cl_Stream *s = fast_opt_stream(L, 3);
  if (lua_isnil(L, 2)) {
    push_like(L, 1, src.size, s ? 3 : 0);
    lua_replace(L, 2);
    lua_settop(L, 3);
    /* allocate ran Lua code (its lookup, finalizers): check all again */
    cl_check_span(L, 1, &src);
    s = fast_opt_stream(L, 3);
  }
  cl_check_span(L, 2, &dst);
  if (s && cl_copy_wait_first(L, s, dst.mr->kind, src.mr->kind)) {
    cl_check_span(L, 1, &src);
    s = fast_opt_stream(L, 3);
    cl_check_span(L, 2, &dst);
  }
  copy(L, &dst, &src, s);
  lua_pushvalue(L, 2);          /* cheaper than lua_settop, which looks for values to close */
  return 1;
}

/* dst:copy_from(src, stream) -> dst */
static int buffer_copy_from(lua_State *L)
{
  cl_Span src, dst;
  cl_check_span(L, 1, &dst);
  cl_check_span(L, 2, &src);
  cl_Stream *s = fast_opt_stream(L, 3);
  if (s && cl_copy_wait_first(L, s, dst.mr->kind, src.mr->kind)) {
    cl_check_span(L, 1, &dst);
    cl_check_span(L, 2, &src);
    s = fast_opt_stream(L, 3);
  }
  copy(L, &dst, &src, s);
  lua_pushvalue(L, 1);
  return 1;
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

void cl_open_buffer(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", buffer_gc}, {"__close", buffer_gc}, {"__tostring", buffer_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"copy_to", buffer_copy_to}, {"copy_from", buffer_copy_from}, {"fill", buffer_fill},
    {"slice", buffer_slice}, {"close", buffer_close}, {"prefetch", buffer_prefetch},
    {"advise", buffer_advise}, {"set_deallocation_stream", buffer_set_deallocation_stream},
    {NULL, NULL}
  };
  cl_new_type(L, CL_BUFFER, meta, methods, buffer_fields);
  cl_lifetimes_buffer(cl_buffer_graph_release);
  static const cl_BufferAPI api = {cl_buffer_hold, cl_buffer_graph_release};
  lua_pushlightuserdata(L, (void *)&api);
  lua_setfield(L, LUA_REGISTRYINDEX, CL_BUFFER_API);
}
