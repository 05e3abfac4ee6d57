/* SPDX-License-Identifier: MIT */
/* view_foreign.c: views of memory cudalua did not allocate.
 *
 *   v = cuda.StridedMemoryView{ptr = p, dtype = "float32", shape = {r, c},
 *         strides = {...}, device = dev, memory = "device", owner = obj,
 *         readonly = false}
 *
 * cuda.core's StridedMemoryView over another library's array: an address
 * with an element type, a shape and strides (in elements), and the object
 * that keeps the memory alive. The result is a cuda.View like buf:view()'s,
 * so it goes to cuda.launch, to copies and, where the host can reach the
 * memory, to v[i] and the bulk operations.
 *
 * cudalua cannot check a foreign address: that memory of this size is
 * there, of the kind it is said to be, alive while the owner is. It
 * checks everything else (every integer in its C type, the extent without
 * overflow, the alignment of the element type) and trusts the pointer.
 *
 * The view's buffer belongs to a memory resource of its own (memory.c's
 * foreign resource), which allocates nothing and keeps the owner alive
 * (its user value 2); releasing the buffer (closing it, or collecting it)
 * frees nothing but calls the struct's release once: dlpack.c's calls a
 * DLPack deleter there. The buffer is made after the owner, so when both
 * become garbage together the buffer is finalized (closed) first. */
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "view.h"

/* The bytes from f's first element to the end of its last: the buffer's
 * size. view_check_layout has ruled out overflow. */
static size_t extent_bytes(const View *v)
{
  if (v->len == 0)
    return 0;
  size_t last = 0;
  for (int d = 0; d < v->ndim; d++)
    last += (v->shape[d] - 1) * v->strides[d];
  return (last + 1) * cl_dtype_sizes[v->type];
}

/* The checks that need no object: layout, address, alignment. */
static size_t check_foreign(lua_State *L, ViewForeign *f)
{
  view_check_layout(L, &f->layout, 1, SIZE_MAX);
  size_t need = extent_bytes(&f->layout), itemsize = cl_dtype_sizes[f->layout.type];
  /* every address of it an integer: v.ptr and buf.ptr are Lua integers */
  if (need > (size_t)LUA_MAXINTEGER || f->ptr > (uintptr_t)LUA_MAXINTEGER - need)
    luaL_error(L, "%s: %I bytes from address %p pass the end of the address space (2^63)", CL_VIEW,
               (lua_Integer)need, (void *)f->ptr);
  if (f->ptr == 0 && need > 0)
    luaL_error(L, "%s: a null pointer with %I elements", CL_VIEW, (lua_Integer)f->layout.len);
  if (f->ptr % itemsize != 0)
    luaL_error(L, "%s: address %p is not a multiple of %d, the size of %s", CL_VIEW,
               (void *)f->ptr, (int)itemsize, cl_dtype_names[f->layout.type]);
  return need;
}

cl_Foreign *view_push_foreign(lua_State *L, const ViewForeign *src, int owneri, size_t fsize)
{
  ViewForeign f = *src;
  owneri = owneri ? lua_absindex(L, owneri) : 0;
  size_t need = check_foreign(L, &f);
  int top = lua_gettop(L), devi = 0;
  if (f.kind != CL_MR_HOST) {
    cl_Device *d = cl_push_device(L, f.device);
    devi = lua_gettop(L);
    cl_device_activate(L, d);   /* its context: for kernels, and the wait before release */
  }
  cl_MemoryResource *mr = cl_push_foreign_mr(L, f.kind, devi);
  int mri = lua_gettop(L);
  if (owneri) {
    lua_pushvalue(L, owneri);
    lua_setiuservalue(L, mri, 2);
  }
  cl_Buffer *b = cl_push_buffer(L, (CUdeviceptr)f.ptr, need, mri, NULL, 0);
  b->closed = 1;                /* until the resource's release is set: nothing to release */
  int bufi = lua_gettop(L);
  View *v = lua_newuserdatauv(L, sizeof *v, 1);
  luaL_setmetatable(L, CL_VIEW);
  lua_pushvalue(L, bufi);
  lua_setiuservalue(L, -2, 1);
  cl_Foreign *rel = calloc(1, fsize);   /* last: from here on nothing raises */
  if (rel == NULL)
    luaL_error(L, "%s: out of memory", CL_VIEW);
  rel->readonly = f.readonly;
  rel->wait = f.kind != CL_MR_HOST;
  mr->foreign = rel;
  mr->live_bytes = need;
  mr->live_buffers = 1;
  b->closed = 0;
  *v = f.layout;
  v->buf = b;
  v->base = (unsigned char *)f.ptr;
  v->host = cl_mr_host_accessible(mr);
  v->slow = !v->host || !v->contiguous;
  lua_replace(L, top + 1);      /* the view where the device or resource was */
  lua_settop(L, top + 1);
  return rel;
}

/* --- cuda.StridedMemoryView{...} -------------------------------------------- */

/* An address: a light userdata, or an integer from 0 to the largest. */
uintptr_t view_check_address(lua_State *L, int i, const char *what)
{
  if (lua_islightuserdata(L, i))
    return (uintptr_t)lua_touserdata(L, i);
  if (lua_type(L, i) != LUA_TNUMBER)
    luaL_error(L, "%s must be an address (an integer or a light userdata), got %s", what,
               luaL_typename(L, i));
  return (uintptr_t)cl_to_integer_range(L, i, 0, LUA_MAXINTEGER, what);
}

/* The list option field at opts into out, each >= 0; its length. */
static int read_dim_field(lua_State *L, int opts, const char *field, size_t out[VIEW_MAX_DIMS])
{
  lua_getfield(L, opts, field);
  int i = lua_gettop(L);
  if (lua_type(L, i) == LUA_TNUMBER) {
    out[0] = (size_t)cl_to_integer_range(L, i, 0, LUA_MAXINTEGER, field);
    lua_pop(L, 1);
    return 1;
  }
  if (!lua_istable(L, i))
    luaL_error(L, "%s must be an integer or a list of integers, got %s", field,
               luaL_typename(L, i));
  lua_Unsigned n = lua_rawlen(L, i);
  if (n < 1 || n > VIEW_MAX_DIMS)
    luaL_error(L, "%s must have 1 to %d dimensions, got %I", field, VIEW_MAX_DIMS, (lua_Integer)n);
  for (int d = 0; d < (int)n; d++) {
    lua_rawgeti(L, i, d + 1);
    const char *name = lua_pushfstring(L, "%s[%d]", field, d + 1);
    out[d] = (size_t)cl_to_integer_range(L, -2, 0, LUA_MAXINTEGER, name);
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  return (int)n;
}

/* The memory and device options: the kind, and the device pushed at the
 * top (nil for host memory). */
static cl_MRKind read_memory(lua_State *L, int opts)
{
  static const char *const kinds[] = {"device", "pinned", "managed", "host", NULL};
  lua_getfield(L, opts, "device");
  int devi = lua_gettop(L);
  lua_getfield(L, opts, "memory");
  cl_MRKind kind = lua_isnil(L, -1) ? (lua_isnil(L, devi) ? CL_MR_HOST : CL_MR_DEVICE)
                                    : (cl_MRKind)luaL_checkoption(L, -1, NULL, kinds);
  lua_pop(L, 1);
  if (kind == CL_MR_HOST) {
    if (!lua_isnil(L, devi))
      luaL_error(L, "%s: host memory has no device (give memory = \"pinned\" or \"managed\" "
                    "for host memory a device maps)", CL_VIEW);
    return kind;
  }
  cl_push_device_arg(L, devi);  /* nil: the current device */
  lua_replace(L, devi);
  return kind;
}

/* Nothing to tell the owner: the view only kept it alive. */
static void release_plain(cl_Foreign *f)
{
  free(f);
}

/* cuda.StridedMemoryView{ptr =, dtype =, shape =, strides =, device =,
 * memory =, owner =, readonly =} */
static int cuda_strided_memory_view(lua_State *L)
{
  static const char *const known[] = {"ptr", "dtype", "shape", "strides", "device", "memory",
                                      "owner", "readonly", NULL};
  luaL_checktype(L, 1, LUA_TTABLE);
  cl_check_options(L, 1, known);
  cl_check_nargs(L, 1);
  lua_settop(L, 1);
  ViewForeign f;
  memset(&f, 0, sizeof f);
  lua_getfield(L, 1, "ptr");
  f.ptr = view_check_address(L, 2, "ptr");
  lua_getfield(L, 1, "dtype");
  if (lua_isnil(L, 3))
    luaL_error(L, "%s: dtype is missing", CL_VIEW);
  f.layout.type = (cl_DType)luaL_checkoption(L, 3, NULL, cl_dtype_names);
  lua_getfield(L, 1, "shape");
  if (lua_isnil(L, 4))
    luaL_error(L, "%s: shape is missing", CL_VIEW);
  f.layout.ndim = read_dim_field(L, 1, "shape", f.layout.shape);
  lua_getfield(L, 1, "strides");
  int given = !lua_isnil(L, 5);
  if (given && read_dim_field(L, 1, "strides", f.layout.strides) != f.layout.ndim)
    luaL_error(L, "%s: strides must have as many dimensions as the shape", CL_VIEW);
  f.readonly = cl_opt_boolean(L, 1, "readonly", 0);
  lua_getfield(L, 1, "owner");
  int owneri = lua_isnil(L, -1) ? 0 : lua_gettop(L);
  f.kind = read_memory(L, 1);
  f.device = f.kind == CL_MR_HOST ? -1 : ((cl_Device *)lua_touserdata(L, -1))->ordinal;
  if (!given)
    view_check_layout(L, &f.layout, 0, SIZE_MAX);   /* fills the C-order strides */
  view_push_foreign(L, &f, owneri, sizeof(cl_Foreign))->release = release_plain;
  return 1;
}

void cl_open_foreign(lua_State *L)
{
  static const luaL_Reg functions[] = {
    {"StridedMemoryView", cuda_strided_memory_view}, {NULL, NULL}
  };
  cl_setfuncs(L, functions);
}
