/* SPDX-License-Identifier: MIT */
/* copy.c: buf:copy_to(dst, s) and buf:copy_from(src, s), methods of
 * buffers and of views alike.
 *
 * Both ends of a copy are spans: an open buffer or slice, or the elements
 * of a contiguous view (cl_check_span). The copies are on the hot path of
 * every streaming pipeline: they check their arguments and issue one
 * cuMemcpyAsync, allocating nothing. */
#include <string.h>

#include "device.h"
#include "stream.h"

/* cl_check_span, with the metatables read (cl_types). */
static void check_span(lua_State *L, const cl_Types *t, int i, cl_Span *out)
{
  cl_Buffer *b = cl_fast_test_in(L, t, i, CL_UV_BUFFER);
  if (b == NULL) {
    const void *v = cl_fast_test_in(L, t, i, CL_UV_VIEW);
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

void cl_check_span(lua_State *L, int i, cl_Span *out)
{
  check_span(L, cl_types(L), i, out);
}

/* An open stream first: the usual case needs no type check of its own. */
static cl_Stream *fast_opt_stream(lua_State *L, const cl_Types *t, int i)
{
  cl_Stream *s = cl_fast_test_in(L, t, i, CL_UV_STREAM);
  if (s && !s->closed)
    return s;
  return lua_isnoneornil(L, i) ? NULL : cl_fast_check_in(L, t, i, CL_UV_STREAM, CL_STREAM);
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
  const cl_Types *t = cl_types(L);
  cl_Span src, dst;
  check_span(L, t, 1, &src);
  cl_Stream *s = fast_opt_stream(L, t, 3);
  if (lua_isnil(L, 2)) {
    push_like(L, 1, src.size, s ? 3 : 0);
    lua_replace(L, 2);
    lua_settop(L, 3);
    /* allocate ran Lua code (its lookup, finalizers): check all again */
    check_span(L, t, 1, &src);
    s = fast_opt_stream(L, t, 3);
  }
  check_span(L, t, 2, &dst);
  if (s && cl_copy_wait_first(L, s, dst.mr, src.mr)) {
    check_span(L, t, 1, &src);
    s = fast_opt_stream(L, t, 3);
    check_span(L, t, 2, &dst);
  }
  copy(L, &dst, &src, s);
  lua_pushvalue(L, 2);          /* cheaper than lua_settop, which looks for values to close */
  return 1;
}

/* dst:copy_from(src, stream) -> dst */
static int buffer_copy_from(lua_State *L)
{
  const cl_Types *t = cl_types(L);
  cl_Span src, dst;
  check_span(L, t, 1, &dst);
  check_span(L, t, 2, &src);
  cl_Stream *s = fast_opt_stream(L, t, 3);
  if (s && cl_copy_wait_first(L, s, dst.mr, src.mr)) {
    check_span(L, t, 1, &dst);
    check_span(L, t, 2, &src);
    s = fast_opt_stream(L, t, 3);
  }
  copy(L, &dst, &src, s);
  lua_pushvalue(L, 1);
  return 1;
}

void cl_open_copy(lua_State *L)
{
  static const luaL_Reg methods[] = {
    {"copy_to", buffer_copy_to}, {"copy_from", buffer_copy_from}, {NULL, NULL}
  };
  cl_add_methods(L, CL_BUFFER, methods);
  cl_add_methods(L, CL_VIEW, methods);
}
