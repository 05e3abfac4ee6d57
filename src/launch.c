/* SPDX-License-Identifier: MIT */
/* launch.c: cuda.LaunchConfig and cuda.launch.
 *
 * cuda.launch is the hottest path in cudalua: it checks every argument
 * against the kernel's parameters (their sizes, which the driver reports,
 * and their types where known) before anything is launched, packs them
 * into stack storage and makes one driver call. It allocates nothing and
 * formats strings only to report an error. */
#include <math.h>
#include <string.h>

#include "device.h"

/* --- cuda.LaunchConfig{grid, block, shmem, cluster, cooperative} ----------------- */

typedef struct LaunchConfig {
  unsigned grid[3], block[3], cluster[3];   /* grid in blocks: what the driver takes */
  unsigned shmem;
  int has_cluster, cooperative;
} LaunchConfig;

/* Limits every CUDA GPU of compute capability 5.0 or newer shares; shared
 * memory and clusters are checked against the launching device. */
static const lua_Integer block_limit[3] = {1024, 1024, 64};
static const lua_Integer grid_limit[3] = {2147483647, 65535, 65535};
/* a cluster has at most 8 blocks (check_cluster), so no axis exceeds 8 */
static const lua_Integer cluster_limit[3] = {8, 8, 8};
static const char *const axis[3] = {"x", "y", "z"};

/* A dimension: a number or {x [, y [, z]]}; absent axes are 1. Every axis
 * is checked against its limit before the cast to unsigned. */
static void read_dim3(lua_State *L, const char *field, unsigned out[3], const lua_Integer limit[3],
                      const char *limit_name)
{
  lua_getfield(L, 1, field);
  int n = 1;
  if (lua_istable(L, -1)) {
    lua_Integer len = (lua_Integer)lua_rawlen(L, -1);
    if (len < 1 || len > 3)
      luaL_error(L, "LaunchConfig: %s must have 1 to 3 dimensions, got %I", field, len);
    n = (int)len;
  } else if (lua_type(L, -1) != LUA_TNUMBER)
    luaL_error(L, "LaunchConfig: %s must be a number or {x, y, z}, got %s", field,
               luaL_typename(L, -1));
  for (int k = 0; k < 3; k++) {
    lua_Integer v = 1;
    if (k < n) {
      if (lua_istable(L, -1))
        lua_rawgeti(L, -1, k + 1);
      else
        lua_pushvalue(L, -1);
      const char *what = lua_pushfstring(L, "LaunchConfig: %s.%s", field, axis[k]);
      v = cl_to_integer_range(L, -2, 1, UINT32_MAX, what);
      lua_pop(L, 2);
    }
    if (v > limit[k])
      luaL_error(L, "LaunchConfig: %s.%s = %I exceeds the limit (%s[%d] = %I)", field, axis[k],
                 v, limit_name, k + 1, limit[k]);
    out[k] = (unsigned)v;
  }
  lua_pop(L, 1);
}

static int has_field(lua_State *L, const char *field)
{
  int present = lua_getfield(L, 1, field) != LUA_TNIL;
  lua_pop(L, 1);
  return present;
}

/* cuda.core's rule: with a cluster, grid counts clusters, so the driver's
 * grid is grid * cluster blocks on each axis, which must stay in range. */
static void apply_cluster(lua_State *L, LaunchConfig *c)
{
  unsigned size = c->cluster[0] * c->cluster[1] * c->cluster[2];
  if (size > 8)
    luaL_error(L, "LaunchConfig: a cluster of %d blocks exceeds the portable limit of 8", (int)size);
  for (int k = 0; k < 3; k++) {
    lua_Integer blocks = (lua_Integer)c->grid[k] * c->cluster[k];
    if (blocks > grid_limit[k])
      luaL_error(L, "LaunchConfig: grid.%s = %I clusters of cluster.%s = %I blocks is %I blocks, "
                    "over the limit (max_grid_dim[%d] = %I)", axis[k], (lua_Integer)c->grid[k],
                 axis[k], (lua_Integer)c->cluster[k], blocks, k + 1, grid_limit[k]);
  }
  for (int k = 0; k < 3; k++)
    c->grid[k] *= c->cluster[k];
}

static int cuda_launch_config(lua_State *L)
{
  static const char *const options[] = {"grid", "block", "shmem", "cluster", "cooperative", NULL};
  luaL_checktype(L, 1, LUA_TTABLE);
  cl_check_options(L, 1, options);
  if (!has_field(L, "grid") || !has_field(L, "block"))
    return luaL_error(L, "LaunchConfig needs grid and block, e.g. cuda.LaunchConfig{grid = 64, block = 256}");
  LaunchConfig *c = lua_newuserdatauv(L, sizeof *c, 0);
  memset(c, 0, sizeof *c);
  read_dim3(L, "grid", c->grid, grid_limit, "max_grid_dim");
  read_dim3(L, "block", c->block, block_limit, "max_block_dim");
  lua_Integer threads = (lua_Integer)c->block[0] * c->block[1] * c->block[2];
  if (threads > 1024)
    return luaL_error(L, "LaunchConfig: a block of %I threads exceeds the limit "
                         "(max_threads_per_block = 1024)", threads);
  lua_Integer shmem = cl_opt_integer(L, 1, "shmem", 0);
  luaL_argcheck(L, shmem >= 0 && shmem <= INT32_MAX, 1,
                "shmem must be >= 0 and <= 2147483647 bytes");
  c->shmem = (unsigned)shmem;
  c->cooperative = cl_opt_boolean(L, 1, "cooperative", 0);
  if (has_field(L, "cluster")) {
    read_dim3(L, "cluster", c->cluster, cluster_limit, "portable cluster size");
    c->has_cluster = 1;
    apply_cluster(L, c);
  }
  luaL_setmetatable(L, CL_LAUNCHCONFIG);
  return 1;
}

static void push_dim3(lua_State *L, const unsigned d[3])
{
  lua_createtable(L, 3, 0);
  for (int k = 0; k < 3; k++) {
    lua_pushinteger(L, d[k]);
    lua_rawseti(L, -2, k + 1);
  }
}

/* The grid as the program gave it: in clusters where there is a cluster. */
static const unsigned *grid_as_given(const LaunchConfig *c, unsigned out[3])
{
  for (int k = 0; k < 3; k++)
    out[k] = c->has_cluster ? c->grid[k] / c->cluster[k] : c->grid[k];
  return out;
}

static int config_fields(lua_State *L)
{
  LaunchConfig *c = luaL_checkudata(L, 1, CL_LAUNCHCONFIG);
  unsigned given[3];
  const char *key = luaL_checkstring(L, 2);
  if (strcmp(key, "grid") == 0)
    push_dim3(L, grid_as_given(c, given));
  else if (strcmp(key, "blocks") == 0)
    push_dim3(L, c->grid);
  else if (strcmp(key, "block") == 0)
    push_dim3(L, c->block);
  else if (strcmp(key, "cluster") == 0 && c->has_cluster)
    push_dim3(L, c->cluster);
  else if (strcmp(key, "shmem") == 0)
    lua_pushinteger(L, c->shmem);
  else if (strcmp(key, "cooperative") == 0)
    lua_pushboolean(L, c->cooperative);
  else
    lua_pushnil(L);
  return 1;
}

static int config_tostring(lua_State *L)
{
  LaunchConfig *c = luaL_checkudata(L, 1, CL_LAUNCHCONFIG);
  unsigned g[3];
  grid_as_given(c, g);
  const char *clusters = c->has_cluster ? lua_pushfstring(L, " clusters of {%d, %d, %d}", (int)c->cluster[0],
                                                          (int)c->cluster[1], (int)c->cluster[2]) : "";
  lua_pushfstring(L, "cuda.LaunchConfig(grid {%d, %d, %d}%s, block {%d, %d, %d}, shmem %d)",
                  (int)g[0], (int)g[1], (int)g[2], clusters, (int)c->block[0], (int)c->block[1],
                  (int)c->block[2], (int)c->shmem);
  return 1;
}

/* --- cuda.launch(stream, config, kernel, ...) -------------------------------------
 *
 * Each argument is packed by its parameter's kind (cl_Kernel.param_kind,
 * resolved once when the kernel was obtained; see signature.c):
 * - a number, for an integer or floating type, converts as string.pack
 *   converts to that type: 1.0 to a double, 3 to a float, 2.0 to an int;
 *   a float with a fraction, or out of the type's range, is an error; a
 *   typed scalar must be of the type's size and kind, and in its range;
 * - bool takes a boolean;
 * - a pointer takes a cuda.Buffer, a view (its first element's address),
 *   or a raw address as cuda.ptr(n);
 * - a type known by name only (a struct, an enum), or not known at all,
 *   takes a string of exactly its size (a struct by value), and numbers,
 *   buffers and typed scalars by the size rule of pack_number. */

static int arg_error(lua_State *L, cl_Kernel *k, int n, const char *fmt, const char *detail,
                     int size)
{
  return luaL_error(L, "cuda.launch: kernel '%s' argument %d: %s", k->name, n,
                    lua_pushfstring(L, fmt, detail, size));
}

/* The C spelling of a kind of the given size, with its article, for errors. */
static const char *kind_name(int kind, int size)
{
  static const char *const ints[3][4] = {
    {"a char", "a short", "an int", "a long long"},
    {"a signed char", "a short", "an int", "a long long"},
    {"an unsigned char", "an unsigned short", "an unsigned int", "an unsigned long long"}};
  int w = size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : 3;
  switch (kind) {
  case CL_ARG_BOOL: return "a bool";
  case CL_ARG_INT: return ints[0][w];
  case CL_ARG_SINT: return ints[1][w];
  case CL_ARG_UINT: return ints[2][w];
  case CL_ARG_FLOAT: return size == 4 ? "a float" : "a double";
  case CL_ARG_PTR: return "a pointer";
  default: return "a struct";
  }
}

/* An error about argument n for a parameter of a known type: fmt's
 * arguments are the value (as tostring, which may run a metamethod: the
 * kernel is read first) and the type's name. */
static int typed_error(lua_State *L, cl_Kernel *k, int i, int n, const char *fmt)
{
  char name[sizeof k->name];
  const char *type = kind_name(k->param_kind[n - 1], k->param_size[n - 1]);
  memcpy(name, k->name, sizeof name);
  const char *value = lua_type(L, i) == LUA_TSTRING ? "a string" : luaL_tolstring(L, i, NULL);
  return luaL_error(L, "cuda.launch: kernel '%s' argument %d: %s", name, n,
                    lua_pushfstring(L, fmt, value, type));
}

/* Device memory and pool-backed pinned memory are mapped for their own
 * device, and a device pool for the devices it granted access to. */
static void inaccessible_error(lua_State *L, cl_Kernel *k, int n, const cl_MemoryResource *mr,
                               const cl_Device *d)
{
  const char *hint = mr->kind == CL_MR_DEVICE
    ? lua_pushfstring(L, "grant it with mr.peer_accessible_by = {%d}", d->ordinal)
    : "use memory of the stream's device";
  arg_error(L, k, n, "%s", lua_pushfstring(L, "the buffer of device %d is not accessible from "
                                           "device %d: %s", mr->dev->ordinal, d->ordinal, hint), 0);
}

/* A buffer's memory (or a view's, or a tensor map's) must be open and
 * usable on device d. Pageable host memory is, where the device reaches
 * the process's page tables (pageable_memory_access: HMM or ATS), as
 * CUDA's systemWideAtomics sample uses it; elsewhere a kernel would fault. */
static void check_memory(lua_State *L, cl_Kernel *k, int n, cl_Buffer *b, cl_Device *d)
{
  if (!cl_buffer_is_open(b))
    arg_error(L, k, n, "the %s", cl_buffer_closed_why(b), 0);   /* closed, or a moved slice */
  if (b->mr->kind == CL_MR_HOST && !d->pageable_memory_access)
    arg_error(L, k, n, "%s", lua_pushfstring(L, "pageable host memory cannot be passed to a "
              "kernel on device %d, which cannot reach it (pageable_memory_access = 0: no HMM "
              "or ATS); use pinned, managed or device memory, or register it mapped "
              "(cuda.register_host)", d->ordinal), 0);
  if (!cl_mr_accessible_from(b->mr, d))
    inaccessible_error(L, k, n, b->mr, d);
}

/* A buffer's device pointer (or one into it, a view's). */
static void pack_address(lua_State *L, cl_Kernel *k, int n, int size, cl_Buffer *b,
                         CUdeviceptr ptr, cl_Device *d, uint64_t *slot)
{
  check_memory(L, k, n, b, d);
  if (size != 8)
    arg_error(L, k, n, "%s (the parameter is %d bytes)", "a buffer passes an 8-byte pointer", size);
  *slot = (uint64_t)ptr;
}

static void pack_buffer(lua_State *L, cl_Kernel *k, int n, int size, cl_Buffer *b,
                        cl_Device *d, uint64_t *slot)
{
  pack_address(L, k, n, size, b, b->ptr, d, slot);
}

/* A view at i: the address of its first element; 0 when i is no view. */
static int pack_view(lua_State *L, cl_Kernel *k, int i, int n, int size, cl_Device *d,
                     uint64_t *slot)
{
  CUdeviceptr ptr;
  cl_Buffer *b = cl_view_pointer(L, i, &ptr);
  if (b)
    pack_address(L, k, n, size, b, ptr, d, slot);
  return b != NULL;
}

/* A plain number for a parameter of unknown type, by its size alone:
 * - a Lua integer fills a 1-, 2-, 4- or 8-byte integer parameter, and must
 *   fit it as a signed or an unsigned integer of that width;
 * - a Lua float with a fractional part (or inf or NaN) fills a 4-byte
 *   parameter as float32 and an 8-byte one as float64;
 * - a Lua float with an integer value (2^20, n / 2, 2.0) is refused: it is
 *   as often an integer computed with / or ^ as a float, and packing it the
 *   wrong way gives a size or pointer the kernel would fault on. Typed
 *   scalars (cuda.f32(2), cuda.u64(n)) say which, and so does a declared
 *   signature (k:signature). */
static void pack_number(lua_State *L, cl_Kernel *k, int i, int n, int size, uint64_t *slot)
{
  *slot = 0;
  if (lua_isinteger(L, i)) {
    lua_Integer v = lua_tointeger(L, i);
    lua_Integer lo = size >= 8 ? LUA_MININTEGER : -((lua_Integer)1 << (size * 8 - 1));
    lua_Integer hi = size >= 8 ? LUA_MAXINTEGER : ((lua_Integer)1 << (size * 8)) - 1;
    if (size != 1 && size != 2 && size != 4 && size != 8)
      arg_error(L, k, n, "%s (the parameter is %d bytes; a struct takes a string of its size)",
                "a number cannot fill this parameter", size);
    if (v < lo || v > hi)
      arg_error(L, k, n, "%s does not fit a %d-byte parameter", lua_pushfstring(L, "%I", v), size);
    memcpy(slot, &v, (size_t)size);   /* little-endian: the low bytes */
    return;
  }
  double x = lua_tonumber(L, i);
  if (isfinite(x) && floor(x) == x)
    arg_error(L, k, n, "%s is a float with an integer value, which could mean an integer or a "
              "float, and the parameter's type is not known: declare the kernel's signature "
              "(obj:get_kernel(name, \"float*, double, int\") or k:signature(...)), or pass an "
              "integer (math.tointeger(x)) or a typed scalar such as cuda.f64(x) (the parameter "
              "is %d bytes)", lua_pushfstring(L, "%f", x), size);
  if (size == 4) {
    float f = (float)x;   /* fractional, so |x| < 2^53: within float32's range */
    memcpy(slot, &f, 4);
  } else if (size == 8)
    memcpy(slot, &x, 8);
  else
    arg_error(L, k, n, "%s (the parameter is %d bytes); use a typed scalar or a string",
              "a float is 4 or 8 bytes", size);
}

/* A value converted for a typed parameter: an integer (signed or, past
 * INT64_MAX, unsigned) or a float. */
typedef struct Num {
  enum { NUM_INT, NUM_UINT, NUM_FLOAT } tag;
  int64_t i;
  uint64_t u;
  double f;
} Num;

static Num scalar_num(const cl_Scalar *sc)
{
  Num v = {NUM_INT, 0, 0, 0};
  switch (sc->type) {
  case CL_F32: v.tag = NUM_FLOAT; v.f = sc->v.f32; break;
  case CL_F64: v.tag = NUM_FLOAT; v.f = sc->v.f64; break;
  case CL_I8: v.i = sc->v.i8; break;
  case CL_I16: v.i = sc->v.i16; break;
  case CL_I32: v.i = sc->v.i32; break;
  case CL_I64: v.i = sc->v.i64; break;
  case CL_U8: v.i = sc->v.u8; break;
  case CL_U16: v.i = sc->v.u16; break;
  case CL_U32: v.i = sc->v.u32; break;
  default:
    if (sc->v.u64 > (uint64_t)INT64_MAX)
      v.tag = NUM_UINT, v.u = sc->v.u64;
    else
      v.i = (int64_t)sc->v.u64;
  }
  return v;
}

/* v into an integer type (kind, size): exact, in range, low bytes. */
static void store_integer(lua_State *L, cl_Kernel *k, int i, int n, Num v, uint64_t *slot)
{
  int kind = k->param_kind[n - 1], size = k->param_size[n - 1];
  if (v.tag == NUM_FLOAT) {
    if (!isfinite(v.f) || floor(v.f) != v.f)
      typed_error(L, k, i, n, "%s is not an integer (the parameter is %s)");
    if (v.f >= -9223372036854775808.0 && v.f < 9223372036854775808.0)
      v.tag = NUM_INT, v.i = (int64_t)v.f;
    else if (v.f >= 0 && v.f < 18446744073709551616.0)
      v.tag = NUM_UINT, v.u = (uint64_t)v.f;
    else
      typed_error(L, k, i, n, "%s is out of range for %s");
  }
  int bits = size * 8;
  int64_t lo = kind == CL_ARG_UINT ? 0 : bits >= 64 ? INT64_MIN : -((int64_t)1 << (bits - 1));
  uint64_t hi = kind == CL_ARG_SINT ? (bits >= 64 ? (uint64_t)INT64_MAX : ((uint64_t)1 << (bits - 1)) - 1)
                                    : (bits >= 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1);
  uint64_t bitsv = v.tag == NUM_UINT ? v.u : (uint64_t)v.i;
  if (v.tag == NUM_UINT ? v.u > hi : (v.i < lo || (v.i >= 0 && (uint64_t)v.i > hi)))
    typed_error(L, k, i, n, "%s is out of range for %s");
  memcpy(slot, &bitsv, (size_t)size);       /* little-endian: the low bytes */
}

static void store_float(lua_State *L, cl_Kernel *k, int i, int n, Num v, uint64_t *slot)
{
  double x = v.tag == NUM_FLOAT ? v.f : v.tag == NUM_UINT ? (double)v.u : (double)v.i;
  if (k->param_size[n - 1] == 8) {
    memcpy(slot, &x, 8);
    return;
  }
  if (!cl_fits_float32(x))
    typed_error(L, k, i, n, "%s is out of range for %s");
  float f = (float)x;
  memcpy(slot, &f, 4);
}

/* A texture or surface object (obj from cl_object_arg): open, passed as
 * its 8-byte handle, and made on the launch's device d: a handle is an
 * index into the tables of the context that made it, so on another device
 * it names another texture or none. */
static void check_object(lua_State *L, cl_Kernel *k, int n, int size, int obj, const char *tname,
                         const cl_Device *made, const cl_Device *d)
{
  if (obj < 0)
    arg_error(L, k, n, "the %s is closed", tname, 0);
  if (size != 8)
    arg_error(L, k, n, "a %s passes 8 bytes (the parameter is %d bytes)", tname, size);
  if (made != d)
    arg_error(L, k, n, "%s", lua_pushfstring(L, "the %s was made on device %d, the launch runs on "
                                             "device %d: make it there", tname, made->ordinal,
                                             d->ordinal), 0);
}

/* A number or a typed scalar for an integer or floating parameter. */
static void pack_typed_number(lua_State *L, const cl_Types *t, cl_Kernel *k, int i, int n,
                              cl_Device *d, const void *mt, uint64_t *slot)
{
  Num v = {NUM_INT, 0, 0, 0};
  const char *tname;
  cl_Device *made;
  int obj;
  if (lua_isinteger(L, i))
    v.i = lua_tointeger(L, i);
  else if (lua_type(L, i) == LUA_TNUMBER)
    v.tag = NUM_FLOAT, v.f = lua_tonumber(L, i);
  else if (cl_is_type(t, mt, CL_UV_SCALAR) && !((cl_Scalar *)lua_touserdata(L, i))->pointer) {
    const cl_Scalar *sc = lua_touserdata(L, i);
    if (cl_dtype_sizes[sc->type] != k->param_size[n - 1] ||
        cl_dtype_is_float(sc->type) != (k->param_kind[n - 1] == CL_ARG_FLOAT))
      typed_error(L, k, i, n, "%s for %s parameter: a typed scalar must be of the parameter's "
                  "size and kind (integer or floating)");
    v = scalar_num(sc);
  } else if (k->param_size[n - 1] == 8 && k->param_kind[n - 1] != CL_ARG_FLOAT && mt != NULL &&
             (obj = cl_object_arg(L, mt, lua_touserdata(L, i), slot, &tname, &made)) != 0) {
    check_object(L, k, n, 8, obj, tname, made, d);
    return;                     /* a texture or surface object: its handle (cudaTextureObject_t) */
  } else
    typed_error(L, k, i, n, "%s for %s parameter, which takes a number or a typed scalar");
  *slot = 0;
  if (k->param_kind[n - 1] == CL_ARG_FLOAT)
    store_float(L, k, i, n, v, slot);
  else
    store_integer(L, k, i, n, v, slot);
}

/* A buffer's address, or a raw one given as cuda.ptr(n). */
static void pack_pointer(lua_State *L, const cl_Types *t, cl_Kernel *k, int i, int n,
                         cl_Device *d, const void *mt, uint64_t *slot)
{
  cl_Scalar *sc;
  if (cl_is_type(t, mt, CL_UV_BUFFER))
    pack_buffer(L, k, n, 8, lua_touserdata(L, i), d, slot);
  else if (cl_is_type(t, mt, CL_UV_SCALAR) && (sc = lua_touserdata(L, i))->pointer)
    *slot = sc->v.u64;
  else if (lua_isnil(L, i))
    typed_error(L, k, i, n, "%s for %s parameter, which takes a cuda.Buffer, a view or "
                "cuda.ptr(address) (a null pointer is cuda.ptr(0))");
  else if (!pack_view(L, k, i, n, 8, d, slot))
    typed_error(L, k, i, n, "%s for %s parameter, which takes a cuda.Buffer, a view or "
                "cuda.ptr(address)");
}

/* Bytes of exactly the parameter's size, passed by value: a struct. */
static const void *pack_bytes(lua_State *L, cl_Kernel *k, int n, const char *bytes, size_t len)
{
  int size = k->param_size[n - 1];
  if (len != (size_t)size)
    luaL_error(L, "cuda.launch: kernel '%s' argument %d: a string of %d bytes for a parameter "
               "of %d bytes (a struct by value takes a string of exactly its size)", k->name, n,
               (int)len, size);
  return bytes;
}

/* A cuda.TensorMap: its 128 bytes, in place in its userdata (which stays
 * on the stack), for a CUtensorMap parameter. A closed map, or one whose
 * buffer was closed, is refused as a closed buffer is. */
static const void *pack_tensormap(lua_State *L, cl_Kernel *k, int n, int size, const void *desc,
                                  cl_Buffer *b, cl_Device *d)
{
  if (b == NULL)
    arg_error(L, k, n, "%s", "the cuda.TensorMap is closed", 0);
  if (size != (int)sizeof(CUtensorMap))
    arg_error(L, k, n, "%s (the parameter is %d bytes)", "a cuda.TensorMap passes 128 bytes", size);
  check_memory(L, k, n, b, d);
  return desc;
}

/* Any parameter whose type is known by name or size only. */
static const void *pack_any(lua_State *L, const cl_Types *t, cl_Kernel *k, int i, int n,
                            cl_Device *d, const void *mt, uint64_t *slot)
{
  int size = k->param_size[n - 1];
  int type = lua_type(L, i);
  const char *tname;
  const void *desc;
  cl_Buffer *tb;
  cl_Device *made;
  int obj;
  if (type == LUA_TNUMBER)
    pack_number(L, k, i, n, size, slot);
  else if (type == LUA_TSTRING) {
    size_t len;
    const char *bytes = lua_tolstring(L, i, &len);
    return pack_bytes(L, k, n, bytes, len);   /* the string stays on the stack */
  } else if (cl_is_type(t, mt, CL_UV_BUFFER))
    pack_buffer(L, k, n, size, lua_touserdata(L, i), d, slot);
  else if (cl_is_type(t, mt, CL_UV_SCALAR)) {
    cl_Scalar *sc = lua_touserdata(L, i);
    if (cl_dtype_sizes[sc->type] != size)
      arg_error(L, k, n, "%s does not match the parameter's %d bytes",
                lua_pushfstring(L, "a %d-byte %s", (int)cl_dtype_sizes[sc->type],
                                sc->pointer ? "cuda.ptr" : cl_dtype_names[sc->type]), size);
    memcpy(slot, sc->v.bytes, 8);
  } else if (pack_view(L, k, i, n, size, d, slot))
    ;                           /* before the types found by registry lookups: views are common */
  else if ((obj = mt ? cl_object_arg(L, mt, lua_touserdata(L, i), slot, &tname, &made) : 0) != 0)
    check_object(L, k, n, size, obj, tname, made, d);
  else if (mt && (desc = cl_tensormap_arg(L, mt, lua_touserdata(L, i), &tb)) != NULL)
    return pack_tensormap(L, k, n, size, desc, tb, d);
  else
    arg_error(L, k, n, "got %s; expected a cuda.Buffer, a typed scalar, a number or "
              "a string of the parameter's %d bytes", luaL_typename(L, i), size);
  return slot;
}

/* Argument n (at stack index i): checked, converted into *slot, or left
 * where it is (a string); returns where its bytes are. */
static const void *pack_argument(lua_State *L, const cl_Types *t, cl_Kernel *k, int i, int n,
                                 cl_Device *d, uint64_t *slot)
{
  const void *mt = lua_type(L, i) == LUA_TUSERDATA ? cl_metatable_of(L, i) : NULL;
  switch (k->param_kind[n - 1]) {
  case CL_ARG_NAMED:
    return pack_any(L, t, k, i, n, d, mt, slot);
  case CL_ARG_PTR:
    pack_pointer(L, t, k, i, n, d, mt, slot);
    return slot;
  case CL_ARG_BOOL:
    if (lua_type(L, i) != LUA_TBOOLEAN)
      typed_error(L, k, i, n, "%s for %s parameter, which takes true or false");
    *slot = (uint64_t)lua_toboolean(L, i);
    return slot;
  default:
    pack_typed_number(L, t, k, i, n, d, mt, slot);
    return slot;
  }
}

/* cl_pack_kernel_args, with the metatables read (cl_types). */
static void pack_args(lua_State *L, const cl_Types *t, cl_Kernel *k, int first, int nargs,
                      cl_Device *d, uint64_t storage[CL_MAX_PARAMS], void *params[CL_MAX_PARAMS])
{
  if (k->nparams < 0)
    luaL_error(L, "cuda.launch: the driver did not report the parameters of kernel '%s': "
               "declare its signature (obj:get_kernel(name, \"float*, int\"))", k->name);
  if (nargs != k->nparams)
    luaL_error(L, "cuda.launch: kernel '%s' takes %d argument%s, got %d", k->name, k->nparams,
               k->nparams == 1 ? "" : "s", nargs);
  for (int n = 1; n <= nargs; n++)
    params[n - 1] = (void *)pack_argument(L, t, k, first + n - 1, n, d, &storage[n - 1]);
}

void cl_pack_kernel_args(lua_State *L, cl_Kernel *k, int first, int nargs, cl_Device *d,
                         uint64_t storage[CL_MAX_PARAMS], void *params[CL_MAX_PARAMS])
{
  pack_args(L, cl_types(L), k, first, nargs, d, storage, params);
}

void cl_check_node_config(lua_State *L, int i, CUDA_KERNEL_NODE_PARAMS *p)
{
  const LaunchConfig *c = luaL_checkudata(L, i, CL_LAUNCHCONFIG);
  if (c->has_cluster || c->cooperative || c->shmem > 48 * 1024)
    luaL_argerror(L, i, "a graph kernel node takes no cluster, cooperative or over 48 KiB shmem");
  p->gridDimX = c->grid[0]; p->gridDimY = c->grid[1]; p->gridDimZ = c->grid[2];
  p->blockDimX = c->block[0]; p->blockDimY = c->block[1]; p->blockDimZ = c->block[2];
  p->sharedMemBytes = c->shmem;
}

static void check_device_limits(lua_State *L, const LaunchConfig *c, cl_Device *d)
{
  if ((int)c->shmem > d->max_shmem_optin)
    luaL_error(L, "cuda.launch: shmem = %d bytes exceeds the device's limit "
                  "(max_shared_memory_per_block_optin = %d)", (int)c->shmem, d->max_shmem_optin);
  if (c->has_cluster && !d->cluster_launch)
    luaL_error(L, "cuda.launch: device %d does not support thread block clusters "
                  "(cluster_launch = 0; needs compute capability 9.0)", d->ordinal);
  if (c->cooperative && !d->cooperative_launch)
    luaL_error(L, "cuda.launch: device %d does not support cooperative launches", d->ordinal);
}

/* Dynamic shared memory over 48 KiB must be enabled per function. */
static void enable_shmem(lua_State *L, cl_Kernel *k, CUfunction f, unsigned shmem)
{
  CL_TRY(L, cuFuncSetAttribute, (f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shmem));
  k->shmem_optin = (int)shmem;
}

static void launch_ex(lua_State *L, const LaunchConfig *c, CUfunction f, CUstream s, void **params)
{
  CUlaunchAttribute attrs[2];
  CUlaunchConfig lc;
  memset(attrs, 0, sizeof attrs);
  memset(&lc, 0, sizeof lc);
  unsigned n = 0;
  if (c->has_cluster) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = c->cluster[0];
    attrs[n].value.clusterDim.y = c->cluster[1];
    attrs[n].value.clusterDim.z = c->cluster[2];
    n++;
  }
  if (c->cooperative) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[n].value.cooperative = 1;
    n++;
  }
  lc.gridDimX = c->grid[0]; lc.gridDimY = c->grid[1]; lc.gridDimZ = c->grid[2];
  lc.blockDimX = c->block[0]; lc.blockDimY = c->block[1]; lc.blockDimZ = c->block[2];
  lc.sharedMemBytes = c->shmem;
  lc.hStream = s;
  lc.attrs = attrs;
  lc.numAttrs = n;
  CL_TRY(L, cuLaunchKernelEx, (&lc, f, params, NULL));
}

static int cuda_launch(lua_State *L)
{
  const cl_Types *t = cl_types(L);
  cl_Stream *s = cl_fast_check_in(L, t, 1, CL_UV_STREAM, CL_STREAM);
  const LaunchConfig *c = cl_fast_test_in(L, t, 2, CL_UV_CONFIG);
  cl_Kernel *k = cl_fast_check_in(L, t, 3, CL_UV_KERNEL, CL_KERNEL);
  if (c == NULL)
    c = luaL_checkudata(L, 2, CL_LAUNCHCONFIG);
  uint64_t storage[CL_MAX_PARAMS];
  void *params[CL_MAX_PARAMS];
  pack_args(L, t, k, 4, lua_gettop(L) - 3, s->dev, storage, params);
  if (c->shmem > 48 * 1024 || c->has_cluster || c->cooperative)
    check_device_limits(L, c, s->dev);
  cl_device_activate(L, s->dev);
  CUfunction f = cl_kernel_function(L, k, s->dev);
  if (c->shmem > 48 * 1024 && (int)c->shmem > k->shmem_optin)
    enable_shmem(L, k, f, c->shmem);
  if (c->has_cluster || c->cooperative)
    launch_ex(L, c, f, s->handle, params);
  else
    CL_TRY(L, cuLaunchKernel, (f, c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1],
                               c->block[2], c->shmem, s->handle, params, NULL));
  if (s->capture)
    cl_capture_keep(L, s, 1, 3, lua_gettop(L));
  return 0;
}

void cl_open_launch(lua_State *L)
{
  static const luaL_Reg config_meta[] = {{"__tostring", config_tostring}, {NULL, NULL}};
  cl_new_type(L, CL_LAUNCHCONFIG, config_meta, NULL, config_fields);
  static const luaL_Reg functions[] = {
    {"launch", cuda_launch}, {"LaunchConfig", cuda_launch_config}, {NULL, NULL}
  };
  cl_setfuncs(L, functions);
}

