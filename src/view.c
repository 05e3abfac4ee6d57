/* SPDX-License-Identifier: MIT */
/* view.c: cuda.View, typed and shaped views over buffers of any memory.
 *
 * A view is (buffer, address, element type, shape, strides in elements),
 * cuda.core's StridedMemoryView. It owns nothing: the buffer, held in the
 * view's user value, owns the memory. Because a buffer can be closed while
 * views of it live on, every access checks that the buffer is still open
 * (one load and compare), so a view of a closed buffer raises "cuda.Buffer
 * is closed" instead of touching freed memory.
 *
 * Views of memory the host cannot read (device memory) carry their
 * metadata, pass their pointer to kernels and take part in copies; reading
 * or writing their elements from Lua is an error. Elements are 1-based:
 * v[i] is element i in C (row-major) order of the shape; for a strided
 * view it walks the strides. v[i] on a contiguous host view is the hot
 * path: one flag test (slow) decides, then one multiply. The bulk
 * arithmetic of host views is view_math.c. */
#include <string.h>

#include "view.h"

void view_host_error(lua_State *L, const View *v)
{
  if (!v->host)
    luaL_error(L, "this %s is of device memory, which the host cannot read: copy it to a "
                  "pinned or managed buffer first", CL_VIEW);
  luaL_error(L, "this %s is not contiguous: the bulk operations need a view whose elements "
                "are one run of memory", CL_VIEW);
}

/* The 0-based offset of the integer index at stack slot i. */
static size_t check_index(lua_State *L, const View *v, int i)
{
  int isint = 0;
  lua_Integer k = lua_tointegerx(L, i, &isint);
  if (!isint)
    luaL_error(L, "%s index must be an integer, got %s", CL_VIEW,
               lua_type(L, i) == LUA_TNUMBER ? luaL_tolstring(L, i, NULL) : luaL_typename(L, i));
  if (k < 1 || (lua_Unsigned)k > v->len)
    luaL_error(L, "%s index %I out of range (length %I)", CL_VIEW, k, (lua_Integer)v->len);
  return (size_t)(k - 1);
}

/* Element k (0-based, C order) of a host view that may be strided. */
static void *strided_element(const View *v, size_t k)
{
  size_t off = 0;
  for (int d = v->ndim - 1; d >= 0; d--) {
    off += (k % v->shape[d]) * v->strides[d];
    k /= v->shape[d];
  }
  return view_element(v, off);
}

/* The address of element k of the open view v, for the host to touch. */
static void *host_element(lua_State *L, const View *v, size_t k)
{
  if (!v->host)
    view_host_error(L, v);
  return strided_element(v, k);
}

/* first, last (1-based, inclusive) at slots i, i + 1, defaulting to the
 * whole view; an empty range (last = first - 1) is allowed. */
static void check_range(lua_State *L, int i, const View *v, size_t *first, size_t *count)
{
  lua_Integer len = (lua_Integer)v->len;
  lua_Integer a = luaL_optinteger(L, i, 1);
  lua_Integer b = luaL_optinteger(L, i + 1, len);
  if (a < 1 || a > len + 1)
    luaL_argerror(L, i, lua_pushfstring(L, "first index %I out of range (length %I)", a, len));
  if (b < a - 1 || b > len)
    luaL_argerror(L, i + 1, lua_pushfstring(L, "last index %I out of range (first %I, length %I)",
                                            b, a, len));
  *first = (size_t)(a - 1);
  *count = (size_t)(b - a + 1);
}

/* --- creation ------------------------------------------------------------------ */

/* A shape or strides argument at i: an integer (one dimension) or a list of
 * 1 to VIEW_MAX_DIMS integers >= 0, read raw. Returns the number of
 * dimensions. */
static int read_dims(lua_State *L, int i, const char *what, size_t out[VIEW_MAX_DIMS])
{
  if (lua_type(L, i) == LUA_TNUMBER) {
    out[0] = (size_t)cl_check_integer_range(L, i, 0, LUA_MAXINTEGER, what);
    return 1;
  }
  if (!lua_istable(L, i))
    luaL_typeerror(L, i, "integer or table of integers");
  lua_Unsigned n = lua_rawlen(L, i);
  if (n < 1 || n > VIEW_MAX_DIMS)
    luaL_argerror(L, i, lua_pushfstring(L, "%s must have 1 to %d dimensions, got %I", what,
                                        VIEW_MAX_DIMS, (lua_Integer)n));
  for (int d = 0; d < (int)n; d++) {
    lua_rawgeti(L, i, d + 1);
    const char *name = lua_pushfstring(L, "%s[%d]", what, d + 1);
    out[d] = (size_t)cl_to_integer_range(L, -2, 0, LUA_MAXINTEGER, name);
    lua_pop(L, 2);
  }
  return (int)n;
}

/* Check the shape and strides of v (ndim, shape, strides; given_strides
 * says whether strides were given) against the buffer's nbytes from
 * offset `misalign`, and fill in len, contiguous and, when not given, the
 * C-order strides. Raises for a view that does not fit, overflow included. */
void view_check_layout(lua_State *L, View *v, int given_strides, size_t nbytes)
{
  size_t itemsize = cl_dtype_sizes[v->type], len = 1, extent = 1, expect = 1;
  int contiguous = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    if (!given_strides)
      v->strides[d] = expect;
    if (v->shape[d] != 1 && v->strides[d] != expect)
      contiguous = 0;
    size_t reach;
    if (__builtin_mul_overflow(len, v->shape[d], &len) ||
        __builtin_mul_overflow(expect, v->shape[d], &expect) ||
        (v->shape[d] > 0 && (__builtin_mul_overflow(v->shape[d] - 1, v->strides[d], &reach) ||
                             __builtin_add_overflow(extent, reach, &extent))))
      luaL_error(L, "%s: shape and strides overflow the address space", CL_VIEW);
  }
  if (len == 0)
    extent = 0;
  size_t need = 0;
  if (len > (size_t)LUA_MAXINTEGER || __builtin_mul_overflow(extent, itemsize, &need))
    luaL_error(L, "%s: shape and strides overflow the address space", CL_VIEW);
  if (need > nbytes)
    luaL_error(L, "%s: this shape and these strides reach %I bytes, past the buffer's %I",
               CL_VIEW, (lua_Integer)need, (lua_Integer)nbytes);
  v->len = len;
  v->contiguous = contiguous || len == 0;
}

/* buf:view(dtype [, shape [, strides]]) and cuda.View(buf, dtype, ...). */
static int buffer_view(lua_State *L)
{
  lua_settop(L, 4);
  cl_DType t = cl_check_dtype(L, 2);
  View tmp;
  memset(&tmp, 0, sizeof tmp);
  tmp.type = t;
  int has_shape = !lua_isnil(L, 3), has_strides = !lua_isnil(L, 4);
  if (has_shape)
    tmp.ndim = read_dims(L, 3, "shape", tmp.shape);
  if (has_strides) {
    if (!has_shape)
      luaL_argerror(L, 4, "strides need a shape");
    if (read_dims(L, 4, "strides", tmp.strides) != tmp.ndim)
      luaL_argerror(L, 4, "strides must have as many dimensions as the shape");
  }
  View *v = lua_newuserdatauv(L, sizeof *v, 1);   /* allocated before the checks (HACKING.md) */
  cl_Buffer *b = cl_check_buffer(L, 1);
  size_t size = cl_dtype_sizes[t];
  if (!has_shape) {
    if (b->size % size != 0)
      return luaL_error(L, "cannot view a buffer of %I bytes as %s: not a multiple of %d bytes",
                        (lua_Integer)b->size, cl_dtype_names[t], (int)size);
    tmp.ndim = 1;
    tmp.shape[0] = b->size / size;
  }
  if (b->ptr % size != 0)
    return luaL_error(L, "cannot view this buffer as %s: its address is not a multiple of %d "
                      "(slice it at an offset that is)", cl_dtype_names[t], (int)size);
  view_check_layout(L, &tmp, has_strides, b->size);
  tmp.buf = b;
  tmp.moves = b->moves;
  tmp.base = (unsigned char *)(uintptr_t)b->ptr;
  tmp.host = cl_mr_host_accessible(b->mr);
  tmp.slow = !tmp.host || !tmp.contiguous;
  *v = tmp;
  luaL_setmetatable(L, CL_VIEW);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  return 1;
}

static int cuda_view(lua_State *L)
{
  return buffer_view(L);
}

/* cuda.is_view(x) */
static int cuda_is_view(lua_State *L)
{
  lua_pushboolean(L, cl_fast_test(L, 1, CL_UV_VIEW) != NULL);
  return 1;
}

void cl_view_memory(const void *view, cl_ViewMemory *m)
{
  const View *v = view;
  m->buf = v->buf;
  m->ptr = (CUdeviceptr)(uintptr_t)v->base;
  m->nbytes = v->len * cl_dtype_sizes[v->type];
  m->contiguous = v->contiguous;
  m->moved = v->moves != v->buf->moves;
}

cl_Buffer *cl_view_pointer(lua_State *L, int i, CUdeviceptr *ptr)
{
  const View *v = cl_fast_test(L, i, CL_UV_VIEW);
  if (!v)
    return NULL;
  if (v->moves != v->buf->moves)
    luaL_argerror(L, i, "cuda.View: " CL_BUFFER_MOVED ": make the view again");
  *ptr = (CUdeviceptr)(uintptr_t)v->base;   /* a device address for device views */
  return v->buf;
}

/* --- fields ---------------------------------------------------------------------- */

static void push_dims(lua_State *L, const size_t *dims, int n)
{
  lua_createtable(L, n, 0);
  for (int d = 0; d < n; d++) {
    lua_pushinteger(L, (lua_Integer)dims[d]);
    lua_rawseti(L, -2, d + 1);
  }
}

/* v.owner: the object that keeps memory another library owns alive
 * (view_foreign.c's resources keep it as user value 2), else nil */
static void push_owner(lua_State *L, int vi)
{
  vi = lua_absindex(L, vi);
  lua_getiuservalue(L, vi, 1);  /* the buffer */
  const cl_Buffer *b = lua_touserdata(L, -1);
  if (b && b->owner)
    lua_getiuservalue(L, -1, 1);        /* a slice's owner */
  const cl_Buffer *root = lua_touserdata(L, -1);
  if (root == NULL || root->mr->foreign == NULL) {
    lua_settop(L, vi);
    lua_pushnil(L);
    return;
  }
  lua_getiuservalue(L, -1, 1);  /* its resource */
  lua_getiuservalue(L, -1, 2);  /* the owner */
  lua_copy(L, -1, vi + 1);
  lua_settop(L, vi + 1);
}

static int view_fields(lua_State *L)
{
  const char *key = lua_tostring(L, 2);   /* before the check: a number key is converted */
  View *v = view_check(L, 1);
  if (key == NULL) {
    lua_pushnil(L);
    return 1;
  }
  /* copied before anything allocates: a finalizer may close the buffer */
  View c = *v;
  const cl_MemoryResource *mr = c.buf->mr;
  int dev = mr->dev ? mr->dev->ordinal : -1;
  size_t itemsize = cl_dtype_sizes[c.type];
  if (strcmp(key, "dtype") == 0)
    lua_pushstring(L, cl_dtype_names[c.type]);
  else if (strcmp(key, "buffer") == 0)
    lua_getiuservalue(L, 1, 1);
  else if (strcmp(key, "shape") == 0)
    push_dims(L, c.shape, c.ndim);
  else if (strcmp(key, "strides") == 0)
    push_dims(L, c.strides, c.ndim);
  else if (strcmp(key, "ndim") == 0)
    lua_pushinteger(L, c.ndim);
  else if (strcmp(key, "size") == 0)
    lua_pushinteger(L, (lua_Integer)c.len);
  else if (strcmp(key, "itemsize") == 0)
    lua_pushinteger(L, (lua_Integer)itemsize);
  else if (strcmp(key, "nbytes") == 0)
    lua_pushinteger(L, (lua_Integer)(c.len * itemsize));
  else if (strcmp(key, "ptr") == 0)
    lua_pushinteger(L, (lua_Integer)(uintptr_t)c.base);
  else if (strcmp(key, "device_id") == 0)
    dev >= 0 ? lua_pushinteger(L, dev) : lua_pushnil(L);
  else if (strcmp(key, "device") == 0)
    dev >= 0 ? (void)cl_push_device(L, dev) : lua_pushnil(L);
  else if (strcmp(key, "is_device") == 0)
    lua_pushboolean(L, !c.host);
  else if (strcmp(key, "is_host_accessible") == 0)
    lua_pushboolean(L, c.host);
  else if (strcmp(key, "is_device_accessible") == 0)
    lua_pushboolean(L, cl_mr_device_accessible(mr));
  else if (strcmp(key, "is_contiguous") == 0)
    lua_pushboolean(L, c.contiguous);
  else if (strcmp(key, "readonly") == 0)       /* memory another library owns (view_foreign.c) */
    lua_pushboolean(L, mr->foreign && mr->foreign->readonly);
  else if (strcmp(key, "owner") == 0 || strcmp(key, "exporting_obj") == 0)
    push_owner(L, 1);
  else
    lua_pushnil(L);
  return 1;
}

/* --- elements -------------------------------------------------------------------- */

/* __index: v[i] first (the hot path), then methods, then fields.
 * A closure from cl_push_closure over the methods table. */
static int view_index(lua_State *L)
{
  View *v = view_to(L, 1);
  if (lua_type(L, 2) == LUA_TNUMBER) {
    view_check_open(L, v);
    size_t k = check_index(L, v, 2);
    cl_dtype_push(L, v->type, v->slow ? host_element(L, v, k) : view_element(v, k));
    return 1;
  }
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(CL_UV_METHODS)) != LUA_TNIL)
    return 1;
  lua_pop(L, 1);
  return view_fields(L);
}

/* __newindex: v[i] = x. */
static int view_newindex(lua_State *L)
{
  View *v = view_check(L, 1);
  if (lua_type(L, 2) != LUA_TNUMBER)
    return luaL_error(L, "cannot assign to field '%s' of %s: index with integers",
                      luaL_tolstring(L, 2, NULL), CL_VIEW);
  size_t k = check_index(L, v, 2);
  cl_dtype_store(L, 3, v->type, v->slow ? host_element(L, v, k) : view_element(v, k));
  return 0;
}

static int view_len(lua_State *L)
{
  lua_pushinteger(L, (lua_Integer)view_check(L, 1)->len);
  return 1;
}

static int view_tostring(lua_State *L)
{
  View *v = view_to(L, 1);
  if (!cl_buffer_is_open(v->buf))
    return cl_push_closed_name(L, CL_VIEW);
  View c = *v;                  /* the pushes below may run a finalizer */
  luaL_Buffer sb;
  luaL_buffinit(L, &sb);
  luaL_addstring(&sb, CL_VIEW "(");
  luaL_addstring(&sb, cl_dtype_names[c.type]);
  for (int d = 0; d < c.ndim; d++) {
    lua_pushfstring(L, "%c%I", d == 0 ? '[' : 'x', (lua_Integer)c.shape[d]);
    luaL_addvalue(&sb);
  }
  luaL_addchar(&sb, ']');
  if (!c.contiguous)
    luaL_addstring(&sb, ", strided");
  if (!c.host)
    luaL_addstring(&sb, ", device");
  luaL_addchar(&sb, ')');
  luaL_pushresult(&sb);
  return 1;
}

/* v:range(first, last): the elements first..last of a contiguous view, as
 * a one-dimensional view sharing v's memory. */
static int view_range(lua_State *L)
{
  lua_settop(L, 3);
  View *sub = lua_newuserdatauv(L, sizeof *sub, 1);   /* allocated before the checks */
  View *v = view_check(L, 1);
  if (!v->contiguous)
    view_host_error(L, v);
  size_t first, count;
  check_range(L, 2, v, &first, &count);
  *sub = *v;
  sub->base = view_element(v, first);
  sub->len = count;
  sub->ndim = 1;
  sub->shape[0] = count;
  sub->strides[0] = 1;
  luaL_setmetatable(L, CL_VIEW);
  lua_getiuservalue(L, 1, 1);
  lua_setiuservalue(L, -2, 1);
  return 1;
}

/* v:to_table([first, last]) */
static int view_to_table(lua_State *L)
{
  View *v = view_check(L, 1);
  size_t first, count;
  check_range(L, 2, v, &first, &count);
  if (!v->host)
    view_host_error(L, v);
  if (count > INT32_MAX)
    return luaL_error(L, "to_table: %I elements are too many for a table", (lua_Integer)count);
  cl_gc_hold(L);                /* the table is sized by the checked range */
  lua_createtable(L, (int)count, 0);
  for (size_t k = 0; k < count; k++) {
    cl_dtype_push(L, v->type, strided_element(v, first + k));
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  return 1;
}

void cl_open_view(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__len", view_len}, {"__tostring", view_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"range", view_range}, {"to_table", view_to_table}, {NULL, NULL}
  };
  static const luaL_Reg buffer_methods[] = {{"view", buffer_view}, {NULL, NULL}};
  static const luaL_Reg functions[] = {
    {"View", cuda_view}, {"is_view", cuda_is_view}, {NULL, NULL}
  };
  cl_new_type(L, CL_VIEW, meta, methods, NULL);
  /* Replace the plain methods-table __index with one that serves v[i]
   * first; the methods table becomes its upvalue CL_UV_METHODS, where
   * cl_add_methods looks. */
  luaL_getmetatable(L, CL_VIEW);
  lua_getfield(L, -1, "__index");
  cl_push_closure(L, view_index, 1);
  lua_setfield(L, -2, "__index");
  cl_push_closure(L, view_newindex, 0);
  lua_setfield(L, -2, "__newindex");
  lua_pop(L, 1);
  cl_add_methods(L, CL_BUFFER, buffer_methods);
  cl_setfuncs(L, functions);
}
