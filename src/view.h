/* SPDX-License-Identifier: MIT */
/* view.h: what view.c (the cuda.View type) and view_math.c (the host
 * views' bulk arithmetic and reductions) share. */
#ifndef CUDALUA_VIEW_H
#define CUDALUA_VIEW_H

#include "cl.h"

#define VIEW_MAX_DIMS 8

typedef struct View {
  cl_Buffer *buf;               /* checked open on every access */
  unsigned char *base;          /* address of element 1 (a device address for device views) */
  size_t len;                   /* elements: the product of shape */
  cl_DType type;
  /* set when v[i] cannot take the fast path: memory the host cannot read,
   * or elements that are not contiguous (v[i] then walks the strides) */
  int slow;
  int host;                     /* the host can read and write the elements */
  int contiguous;               /* C order, no gaps: strides follow from shape */
  int ndim;
  size_t shape[VIEW_MAX_DIMS];
  size_t strides[VIEW_MAX_DIMS];        /* in elements */
  unsigned moves;               /* buf->moves when made: base is stale once they differ (vmm.c) */
} View;                         /* user value 1: the buffer */

static inline void view_check_open(lua_State *L, const View *v)
{
  if (!cl_buffer_is_open(v->buf))
    luaL_error(L, "%s", cl_buffer_closed_why(v->buf));
  if (v->moves != v->buf->moves)
    luaL_error(L, "%s: " CL_BUFFER_MOVED ": make the view again", CL_VIEW);
}

/* The view at i, open or not; every function of the type has the
 * metatables as upvalues (cl.h), so v[i] costs no lookup by name. */
static inline View *view_to(lua_State *L, int i)
{
  View *v = cl_fast_test(L, i, CL_UV_VIEW);
  return v ? v : luaL_checkudata(L, i, CL_VIEW);
}

/* The open view at i, of any memory. */
static inline View *view_check(lua_State *L, int i)
{
  View *v = view_to(L, i);
  view_check_open(L, v);
  return v;
}

/* Why the host cannot touch v's elements as one run of memory, raised. */
void view_host_error(lua_State *L, const View *v);

/* The open view at i whose elements the host reads as one contiguous run:
 * what the bulk operations need. */
static inline View *view_check_host(lua_State *L, int i)
{
  View *v = view_check(L, i);
  if (v->slow)
    view_host_error(L, v);
  return v;
}

/* Element k (0-based) of a contiguous view. */
static inline void *view_element(const View *v, size_t k)
{
  return v->base + k * cl_dtype_sizes[v->type];
}

/* Check v's shape and strides (in elements; given_strides: else C order
 * is filled in) against nbytes of memory, overflow included, and set len
 * and contiguous (view.c). */
void view_check_layout(lua_State *L, View *v, int given_strides, size_t nbytes);

/* A view of memory another library owns (view_foreign.c): where it is,
 * its layout (type, ndim, shape, strides in elements), its kind and
 * device (an ordinal; -1 for host memory), whether it is read-only. */
typedef struct ViewForeign {
  uintptr_t ptr;
  View layout;
  cl_MRKind kind;
  int device;
  int readonly;
} ViewForeign;
/* Check f and push a view over it that keeps the value at owneri (0 for
 * none) alive; returns a zeroed struct of fsize bytes (a cl_Foreign
 * first) that the caller fills at once, without running Lua: from then
 * on its release is called, once, when the view's buffer is released.
 * Raises with nothing taken over. */
cl_Foreign *view_push_foreign(lua_State *L, const ViewForeign *f, int owneri, size_t fsize);
/* The address at i (a light userdata or an integer >= 0), or an error
 * naming what. */
uintptr_t view_check_address(lua_State *L, int i, const char *what);


#endif
