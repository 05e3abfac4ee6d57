/* SPDX-License-Identifier: MIT */
/* tensormap.c: cuda.TensorMap, the TMA descriptors of compute capability 9.0.
 *
 *   local tm = cuda.TensorMap.tiled(dbuf, {dtype = "float32", shape = {w, h},
 *                                          strides = {pitch}, box = {32, 8}})
 *   cuda.launch(s, cfg, k, tm, ...)  -- its 128 bytes, for a
 *                                    -- const __grid_constant__ CUtensorMap parameter
 *   tm:replace_address(other)        -- the same layout over other memory
 *
 * Shapes, boxes and element strides list dimensions innermost first, as the
 * driver does; strides are the bytes between consecutive items of
 * dimensions 2..rank. Every argument is checked against what the driver
 * requires (its documentation in cuda.h) before it is called, so an error
 * names the rule instead of CUDA_ERROR_INVALID_VALUE.
 *
 * A TensorMap is plain data: no driver object to destroy. It keeps what it
 * encodes (a buffer or a view) alive as user value 1; close() lets it go.
 * Closing that buffer while the map lives is allowed: cuda.launch then
 * refuses the map, as it refuses a closed buffer for a pointer parameter. */
#include <string.h>

#include "device.h"

#define MAX_RANK 5

typedef struct TensorMap {
  int closed;                   /* closed: no buffer, launch refuses it */
  int im2col;
  int dtype;                    /* an index into dtypes (== CUtensorMapDataType) */
  unsigned rank;
  unsigned align;               /* the address' alignment the driver requires */
  size_t extent;                /* bytes from the first element to past the last */
  cl_Buffer *buf;               /* the buffer of user value 1, NULL when closed */
  unsigned moves;               /* buf->moves when encoded: a move (buf:grow) leaves address */
  CUdeviceptr address;
  unsigned char raw[sizeof(CUtensorMap) + 63];   /* the descriptor, 64-byte aligned inside */
} TensorMap;

/* Lua aligns userdata to 16 bytes at most; the driver wants 64. */
static CUtensorMap *desc_of(TensorMap *tm)
{
  return (CUtensorMap *)(((uintptr_t)tm->raw + 63) & ~(uintptr_t)63);
}

/* In CUtensorMapDataType's order: the index is the enum's value. */
static const char *const dtypes[] = {
  "uint8", "uint16", "uint32", "int32", "uint64", "int64", "float16", "float32", "float64",
  "bfloat16", "float32_ftz", "tfloat32", "tfloat32_ftz", NULL
};
static const unsigned char dtype_sizes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
static const char *const interleaves[] = {"none", "16B", "32B", NULL};
static const char *const swizzles[] = {"none", "32B", "64B", "128B", NULL};
static const char *const promotions[] = {"none", "64B", "128B", "256B", NULL};
static const char *const fills[] = {"zero", "nan", NULL};

/* Everything an encode takes but the address, read from the options. */
typedef struct Spec {
  int im2col;
  int dtype;
  unsigned rank;
  cuuint64_t dims[MAX_RANK], strides[MAX_RANK - 1];
  cuuint32_t box[MAX_RANK], estrides[MAX_RANK];
  int lower[3], upper[3];
  cuuint32_t channels, pixels;
  int interleave, swizzle, l2, oob;
  size_t extent;
} Spec;

/* --- reading the options (gather: they may run metamethods) -------------------- */

static int opt_choice(lua_State *L, int idx, const char *field, const char *def,
                      const char *const names[])
{
  const char *s = cl_opt_string(L, idx, field, def);
  if (s == NULL)
    luaL_argerror(L, idx, lua_pushfstring(L, "field '%s' is required", field));
  int k = 0;
  while (names[k] && strcmp(names[k], s) != 0)
    k++;
  if (!names[k])
    luaL_argerror(L, idx, lua_pushfstring(L, "field '%s': unknown value '%s' (known: %s)",
                                          field, s, cl_push_names(L, names)));
  lua_pop(L, 1);
  return k;
}

/* The list field (a plain table of exactly n integers in [lo, hi]) into
 * out; absent: every item def, or an error when def < 0. */
static void opt_list(lua_State *L, int idx, const char *field, unsigned n, lua_Integer lo,
                     lua_Integer hi, lua_Integer def, int64_t *out)
{
  int t = lua_getfield(L, idx, field);
  if (t == LUA_TNIL && def >= 0) {
    for (unsigned k = 0; k < n; k++)
      out[k] = def;
    lua_pop(L, 1);
    return;
  }
  if (t != LUA_TTABLE || lua_rawlen(L, -1) != n)
    luaL_argerror(L, idx, lua_pushfstring(L, "field '%s' must be a list of %d integers",
                                          field, (int)n));
  for (unsigned k = 0; k < n; k++) {
    lua_rawgeti(L, -1, (lua_Integer)k + 1);
    const char *what = lua_pushfstring(L, "field '%s'[%d]", field, (int)k + 1);
    out[k] = cl_to_integer_range(L, -2, lo, hi, what);
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
}

static void read_shape(lua_State *L, int idx, Spec *s)
{
  if (lua_getfield(L, idx, "shape") != LUA_TTABLE)
    luaL_argerror(L, idx, "field 'shape' must be a list of 1 to 5 sizes, innermost first");
  lua_Integer rank = (lua_Integer)lua_rawlen(L, -1);
  lua_pop(L, 1);
  lua_Integer lo = s->im2col ? 3 : 1;
  if (rank < lo || rank > MAX_RANK)
    luaL_argerror(L, idx, lua_pushfstring(L, "rank (#shape) must be %I to 5 for %s, got %I", lo,
                                          s->im2col ? "im2col" : "tiled", rank));
  s->rank = (unsigned)rank;
  int64_t v[MAX_RANK];
  /* the driver: each size non-zero and at most 2^32 */
  opt_list(L, idx, "shape", s->rank, 1, (lua_Integer)1 << 32, -1, v);
  for (unsigned k = 0; k < s->rank; k++)
    s->dims[k] = (cuuint64_t)v[k];
}

/* strides: bytes, of dimensions 2..rank; packed rows when absent. */
static void read_strides(lua_State *L, int idx, Spec *s)
{
  int64_t v[MAX_RANK];
  if (lua_getfield(L, idx, "strides") == LUA_TNIL) {
    lua_pop(L, 1);
    uint64_t st = dtype_sizes[s->dtype];
    for (unsigned k = 0; k + 1 < s->rank; k++) {
      /* too large (2^40 or more) is refused by check_spec */
      if (__builtin_mul_overflow(st, s->dims[k], &st) || st > (uint64_t)1 << 40)
        st = (uint64_t)1 << 40;
      s->strides[k] = st;
    }
    return;
  }
  lua_pop(L, 1);
  opt_list(L, idx, "strides", s->rank - 1, 0, (lua_Integer)1 << 40, -1, v);
  for (unsigned k = 0; k + 1 < s->rank; k++)
    s->strides[k] = (cuuint64_t)v[k];
}

static void read_spec(lua_State *L, int idx, Spec *s)
{
  int64_t v[MAX_RANK];
  s->dtype = opt_choice(L, idx, "dtype", NULL, dtypes);
  read_shape(L, idx, s);
  read_strides(L, idx, s);
  opt_list(L, idx, "element_strides", s->rank, 1, 8, 1, v);
  for (unsigned k = 0; k < s->rank; k++)
    s->estrides[k] = (cuuint32_t)v[k];
  if (s->im2col) {
    /* the corners' range narrows with the rank (cuda.h) */
    static const lua_Integer corner_limit[] = {1 << 15, 1 << 7, 1 << 4};
    lua_Integer lim = corner_limit[s->rank - 3];
    opt_list(L, idx, "lower_corner", s->rank - 2, -lim, lim - 1, -1, v);
    for (unsigned k = 0; k + 2 < s->rank; k++)
      s->lower[k] = (int)v[k];
    opt_list(L, idx, "upper_corner", s->rank - 2, -lim, lim - 1, -1, v);
    for (unsigned k = 0; k + 2 < s->rank; k++)
      s->upper[k] = (int)v[k];
    lua_Integer c = cl_opt_integer_range(L, idx, "channels_per_pixel", 0, 1, 256);
    lua_Integer p = cl_opt_integer_range(L, idx, "pixels_per_column", 0, 1, 1024);
    if (c == 0 || p == 0)
      luaL_argerror(L, idx, "fields 'channels_per_pixel' and 'pixels_per_column' are required");
    s->channels = (cuuint32_t)c;
    s->pixels = (cuuint32_t)p;
  } else {
    opt_list(L, idx, "box", s->rank, 1, 256, -1, v);
    for (unsigned k = 0; k < s->rank; k++)
      s->box[k] = (cuuint32_t)v[k];
  }
  s->interleave = opt_choice(L, idx, "interleave", "none", interleaves);
  s->swizzle = opt_choice(L, idx, "swizzle", "none", swizzles);
  s->l2 = opt_choice(L, idx, "l2_promotion", "none", promotions);
  s->oob = opt_choice(L, idx, "oob_fill", "zero", fills);
}

/* --- the driver's rules (they need no buffer) ---------------------------------- */

static int is_float(int dtype)
{
  return dtype >= CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

/* The byte of one past the last element, from the first; 0 on overflow. */
static size_t extent_of(const Spec *s)
{
  uint64_t end = dtype_sizes[s->dtype], step;
  for (unsigned k = 0; k < s->rank; k++) {
    uint64_t st = k == 0 ? dtype_sizes[s->dtype] : s->strides[k - 1];
    if (__builtin_mul_overflow(s->dims[k] - 1, st, &step) ||
        __builtin_add_overflow(end, step, &end))
      return 0;
  }
  return end > SIZE_MAX ? 0 : (size_t)end;
}

static void check_spec(lua_State *L, int idx, Spec *s)
{
  unsigned esize = dtype_sizes[s->dtype];
  uint64_t smul = s->interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
  if (!s->im2col && s->interleave != CU_TENSOR_MAP_INTERLEAVE_NONE && s->rank < 3)
    luaL_argerror(L, idx, "an interleaved layout needs rank (#shape) 3 to 5");
  for (unsigned k = 0; k + 1 < s->rank; k++) {
    if (s->strides[k] % smul || s->strides[k] >= (uint64_t)1 << 40)
      luaL_argerror(L, idx, lua_pushfstring(L, "strides[%d] = %I must be a multiple of %d "
                    "bytes and less than 2^40", (int)k + 1, (lua_Integer)s->strides[k], (int)smul));
    /* each dimension's stride spans the one below it (cuda.h's rule) */
    uint64_t below;
    if (__builtin_mul_overflow(k == 0 ? esize : s->strides[k - 1], s->dims[k], &below))
      luaL_argerror(L, idx, lua_pushfstring(L, "strides[%d]: the dimension below it spans "
                                            "2^64 bytes or more", (int)k + 1));
    if (s->interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && s->strides[k] < below)
      luaL_argerror(L, idx, lua_pushfstring(L, "strides[%d] = %I is less than the %I bytes of "
                    "the dimension below it", (int)k + 1, (lua_Integer)s->strides[k],
                    (lua_Integer)below));
  }
  unsigned inner = s->im2col ? s->channels : s->box[0];
  const char *inner_name = s->im2col ? "channels_per_pixel" : "box[1]";
  if (s->interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && inner * esize % 16)
    luaL_argerror(L, idx, lua_pushfstring(L, "%s * the element's %d bytes must be a multiple "
                  "of 16 bytes, got %d", inner_name, (int)esize, (int)(inner * esize)));
  if (s->interleave == CU_TENSOR_MAP_INTERLEAVE_32B && s->swizzle != CU_TENSOR_MAP_SWIZZLE_32B)
    luaL_argerror(L, idx, "interleave = \"32B\" needs swizzle = \"32B\"");
  unsigned span = 16u << s->swizzle;   /* 32, 64, 128 bytes */
  if (s->interleave == CU_TENSOR_MAP_INTERLEAVE_NONE && s->swizzle != CU_TENSOR_MAP_SWIZZLE_NONE &&
      inner * esize > span)
    luaL_argerror(L, idx, lua_pushfstring(L, "%s * the element's %d bytes (%d) exceeds the "
                  "swizzle span of %d bytes", inner_name, (int)esize, (int)(inner * esize),
                  (int)span));
  if (s->oob && !is_float(s->dtype))
    luaL_argerror(L, idx, "oob_fill = \"nan\" needs a floating-point dtype");
  s->extent = extent_of(s);
  if (s->extent == 0)
    luaL_argerror(L, idx, "shape and strides overflow the address space");
}

/* --- the memory (check: after the last allocation) ----------------------------- */

/* The open buffer behind the buffer or view at i, the address in *ptr. */
static cl_Buffer *memory_at(lua_State *L, int i, CUdeviceptr *ptr)
{
  cl_Buffer *b = cl_view_pointer(L, i, ptr);
  if (b == NULL) {
    b = cl_check_buffer(L, i);
    *ptr = b->ptr;
  } else if (!cl_buffer_is_open(b))
    luaL_argerror(L, i, lua_pushfstring(L, "the view's %s", cl_buffer_closed_why(b)));
  return b;
}

/* The rules on the address and the memory behind it. */
static cl_Buffer *check_memory(lua_State *L, int i, size_t extent, unsigned align,
                               CUdeviceptr *ptr)
{
  cl_Buffer *b = memory_at(L, i, ptr);
  if (b->mr->kind == CL_MR_HOST)
    luaL_argerror(L, i, "pageable host memory cannot back a tensor map");
  if (*ptr % align)
    luaL_argerror(L, i, lua_pushfstring(L, "the address must be aligned to %d bytes",
                                        (int)align));
  size_t room = (size_t)(b->ptr + b->size - *ptr);
  if (extent > room)
    luaL_argerror(L, i, lua_pushfstring(L, "the tensor spans %I bytes, the memory holds %I",
                                        (lua_Integer)extent, (lua_Integer)room));
  return b;
}

/* --- making one ------------------------------------------------------------------ */

static void check_source_type(lua_State *L)
{
  if (!luaL_testudata(L, 1, CL_VIEW))
    luaL_checkudata(L, 1, CL_BUFFER);
}

static CUresult encode(TensorMap *tm, const Spec *s)
{
  void *addr = (void *)(uintptr_t)tm->address;
  if (s->im2col)
    return CL_CALL(cuTensorMapEncodeIm2col,
                   (desc_of(tm), (CUtensorMapDataType)s->dtype, s->rank, addr, s->dims,
                    s->strides, s->lower, s->upper, s->channels, s->pixels, s->estrides,
                    (CUtensorMapInterleave)s->interleave, (CUtensorMapSwizzle)s->swizzle,
                    (CUtensorMapL2promotion)s->l2, (CUtensorMapFloatOOBfill)s->oob));
  return CL_CALL(cuTensorMapEncodeTiled,
                 (desc_of(tm), (CUtensorMapDataType)s->dtype, s->rank, addr, s->dims, s->strides,
                  s->box, s->estrides, (CUtensorMapInterleave)s->interleave,
                  (CUtensorMapSwizzle)s->swizzle, (CUtensorMapL2promotion)s->l2,
                  (CUtensorMapFloatOOBfill)s->oob));
}

static int make(lua_State *L, int im2col)
{
  static const char *const tiled_options[] = {
    "dtype", "shape", "strides", "box", "element_strides", "interleave", "swizzle",
    "l2_promotion", "oob_fill", NULL
  };
  static const char *const im2col_options[] = {
    "dtype", "shape", "strides", "lower_corner", "upper_corner", "channels_per_pixel",
    "pixels_per_column", "element_strides", "interleave", "swizzle", "l2_promotion",
    "oob_fill", NULL
  };
  /* gather */
  cl_check_nargs(L, 2);
  check_source_type(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  cl_check_options(L, 2, im2col ? im2col_options : tiled_options);
  Spec s;
  memset(&s, 0, sizeof s);
  s.im2col = im2col;
  read_spec(L, 2, &s);
  check_spec(L, 2, &s);
  lua_settop(L, 2);
  cl_push_current_device(L);    /* for host-mapped memory: the current device (3) */
  TensorMap *tm = lua_newuserdatauv(L, sizeof *tm, 1);
  memset(tm, 0, sizeof *tm);
  tm->closed = 1;               /* until encoded */
  luaL_setmetatable(L, CL_TENSORMAP);
  /* check */
  unsigned align = s.interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
  CUdeviceptr ptr;
  cl_Buffer *b = check_memory(L, 1, s.extent, align, &ptr);
  cl_Device *d = b->mr->dev ? b->mr->dev : cl_check_device(L, 3);
  /* use */
  cl_device_activate(L, d);
  tm->address = ptr;
  tm->im2col = im2col;
  tm->dtype = s.dtype;
  tm->rank = s.rank;
  tm->align = align;
  tm->extent = s.extent;
  cl_check(L, encode(tm, &s), im2col ? "cuTensorMapEncodeIm2col" : "cuTensorMapEncodeTiled");
  tm->buf = b;
  tm->moves = b->moves;
  tm->closed = 0;
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  return 1;
}

/* cuda.TensorMap.tiled(buf_or_view, {dtype, shape, box, ...}) */
static int tensormap_tiled(lua_State *L) { return make(L, 0); }
/* cuda.TensorMap.im2col(buf_or_view, {dtype, shape, lower_corner, ...}) */
static int tensormap_im2col(lua_State *L) { return make(L, 1); }

static TensorMap *check_tensormap(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_TENSORMAP);
}

/* tm:replace_address(buf_or_view): the same layout over other memory,
 * which must hold the tensor and be aligned as the first was. */
static int tensormap_replace_address(lua_State *L)
{
  cl_check_nargs(L, 2);
  check_tensormap(L, 1);
  if (!luaL_testudata(L, 2, CL_VIEW))
    luaL_checkudata(L, 2, CL_BUFFER);
  TensorMap *tm = check_tensormap(L, 1);
  CUdeviceptr ptr;
  cl_Buffer *b = check_memory(L, 2, tm->extent, tm->align, &ptr);
  CL_TRY(L, cuTensorMapReplaceAddress, (desc_of(tm), (void *)(uintptr_t)ptr));
  tm->address = ptr;
  tm->buf = b;
  tm->moves = b->moves;
  lua_settop(L, 2);
  lua_setiuservalue(L, 1, 1);   /* keeps the new memory, lets the old go */
  return 0;
}

/* tm:close(): lets go of the memory; a closed map cannot be launched. */
static int tensormap_close(lua_State *L)
{
  TensorMap *tm = luaL_checkudata(L, 1, CL_TENSORMAP);
  if (tm->closed)
    return 0;
  tm->closed = 1;
  tm->buf = NULL;
  lua_pushnil(L);
  lua_setiuservalue(L, 1, 1);
  return 0;
}

static int tensormap_gc(lua_State *L)
{
  lua_settop(L, 1);
  return tensormap_close(L);
}

static int tensormap_fields(lua_State *L)
{
  TensorMap *tm = luaL_checkudata(L, 1, CL_TENSORMAP);
  const char *key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (strcmp(key, "is_closed") == 0)
    lua_pushboolean(L, tm->closed);
  else if (tm->closed)
    lua_pushnil(L);
  else if (strcmp(key, "kind") == 0)
    lua_pushstring(L, tm->im2col ? "im2col" : "tiled");
  else if (strcmp(key, "dtype") == 0)
    lua_pushstring(L, dtypes[tm->dtype]);
  else if (strcmp(key, "rank") == 0)
    lua_pushinteger(L, (lua_Integer)tm->rank);
  else if (strcmp(key, "address") == 0)
    lua_pushinteger(L, (lua_Integer)tm->address);
  else if (strcmp(key, "source") == 0)
    lua_getiuservalue(L, 1, 1);
  else if (strcmp(key, "bytes") == 0)
    lua_pushlstring(L, (const char *)desc_of(tm), sizeof(CUtensorMap));
  else
    lua_pushnil(L);
  return 1;
}

static int tensormap_tostring(lua_State *L)
{
  TensorMap *tm = luaL_checkudata(L, 1, CL_TENSORMAP);
  if (tm->closed)
    return cl_push_closed_name(L, CL_TENSORMAP);
  lua_pushfstring(L, "%s(%s %s, rank %d, %p)", CL_TENSORMAP, tm->im2col ? "im2col" : "tiled",
                  dtypes[tm->dtype], (int)tm->rank, (void *)(uintptr_t)tm->address);
  return 1;
}

/* cuda.launch's hook (launch.c). The registry is a plain table and the
 * name is interned: no Lua runs, nothing is allocated. */
const void *cl_tensormap_arg(lua_State *L, const void *mt, void *ud, cl_Buffer **buf)
{
  lua_getfield(L, LUA_REGISTRYINDEX, CL_TENSORMAP);
  int same = lua_topointer(L, -1) == mt;
  lua_pop(L, 1);
  if (!same)
    return NULL;
  TensorMap *tm = ud;
  *buf = tm->closed ? NULL : tm->buf;
  if (*buf && tm->moves != tm->buf->moves)   /* formats nothing: the message is a constant */
    luaL_error(L, "%s: " CL_BUFFER_MOVED ": make the map again (tm:replace_address)", CL_TENSORMAP);
  return desc_of(tm);
}

void cl_open_tensormap(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", tensormap_gc}, {"__close", tensormap_gc}, {"__tostring", tensormap_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"replace_address", tensormap_replace_address}, {"close", tensormap_close}, {NULL, NULL}
  };
  cl_new_type(L, CL_TENSORMAP, meta, methods, tensormap_fields);
  static const luaL_Reg functions[] = {
    {"tiled", tensormap_tiled}, {"im2col", tensormap_im2col}, {NULL, NULL}
  };
  lua_newtable(L);              /* cuda.TensorMap: a table of constructors */
  cl_setfuncs(L, functions);
  lua_setfield(L, -2, "TensorMap");
}
