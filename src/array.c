/* SPDX-License-Identifier: MIT */
/* array.c: cuda.Array, the CUDA arrays textures and surfaces read from.
 *
 *   local arr <close> = cuda.Array{format = "float32", channels = 1,
 *                                  width = w, height = h}
 *   arr:copy_from(buf, s);  arr:copy_to(buf, s)   -- cuMemcpy3DAsync
 *   local cube = cuda.Array{width = n, height = n, cubemap = true}   -- 6 faces
 *   cube:copy_from(face_buf, s, {face = 2})       -- one face (and layer)
 *
 * An array's layout is the driver's (opaque, tiled): the only way in or out
 * is a copy, between the whole array and a buffer of exactly arr.size bytes
 * whose rows are packed (width * channels * element size bytes a row).
 *
 * Textures and surfaces over an array (texture.c) count in its `users`:
 * closing the array while one lives closes it for Lua at once and destroys
 * it with the last of them, so no texture ever reads a destroyed array. */
#include <string.h>

#include "device.h"
#include "stream.h"

static const char *const format_names[] = {
  "uint8", "uint16", "uint32", "int8", "int16", "int32", "float16", "float32", NULL
};
static const CUarray_format formats[] = {
  CU_AD_FORMAT_UNSIGNED_INT8, CU_AD_FORMAT_UNSIGNED_INT16, CU_AD_FORMAT_UNSIGNED_INT32,
  CU_AD_FORMAT_SIGNED_INT8, CU_AD_FORMAT_SIGNED_INT16, CU_AD_FORMAT_SIGNED_INT32,
  CU_AD_FORMAT_HALF, CU_AD_FORMAT_FLOAT
};
static const unsigned char format_sizes[] = {1, 2, 4, 1, 2, 4, 2, 4};

int cl_check_array_format(lua_State *L, int idx, const char *field, unsigned *size)
{
  const char *name = cl_opt_string(L, idx, field, "float32");
  int k = 0;
  while (format_names[k] && strcmp(format_names[k], name) != 0)
    k++;
  if (!format_names[k])
    luaL_argerror(L, idx, lua_pushfstring(L, "field '%s': unknown format '%s' (known: uint8, "
                                          "uint16, uint32, int8, int16, int32, float16, float32)",
                                          field, name));
  lua_pop(L, 1);
  *size = format_sizes[k];
  return (int)formats[k];
}

static const char *format_name(CUarray_format f)
{
  for (int k = 0; format_names[k]; k++)
    if (formats[k] == f)
      return format_names[k];
  return "?";
}

cl_Array *cl_check_array(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_ARRAY);
}

/* The bytes of the whole array, packed: every extent is at most 2^30 (far
 * above any device's limit), so the products are checked for size_t. */
static int packed_size(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned elem, size_t *out)
{
  size_t row = d->Width * d->NumChannels * elem;
  size_t rows = (d->Height ? d->Height : 1), slices = (d->Depth ? d->Depth : 1);
  if (rows > SIZE_MAX / row || slices > SIZE_MAX / (row * rows))
    return 0;
  *out = row * rows * slices;
  return 1;
}

/* A cubemap's rules, which the driver checks only with a generic error:
 * six square faces (depth 6, its default), or with layered = true six
 * faces a layer (depth a multiple of 6). */
static void check_cubemap(lua_State *L, CUDA_ARRAY3D_DESCRIPTOR *d, int layered)
{
  luaL_argcheck(L, d->Height == d->Width, 1,
                "a cubemap's faces are square: height must equal width");
  if (!layered && d->Depth == 0)
    d->Depth = 6;
  luaL_argcheck(L, layered || d->Depth == 6, 1, "a cubemap has depth 6 (its faces)");
  luaL_argcheck(L, !layered || (d->Depth >= 6 && d->Depth % 6 == 0), 1,
                "a layered cubemap's depth must be a multiple of 6 (6 faces a layer)");
}

/* cuda.Array{format, channels, width, height, depth, layered, surface, cubemap} */
static int cuda_array(lua_State *L)
{
  static const char *const options[] = {
    "format", "channels", "width", "height", "depth", "layered", "surface", "cubemap", NULL
  };
  const lua_Integer extent = (lua_Integer)1 << 30;
  luaL_checktype(L, 1, LUA_TTABLE);
  cl_check_nargs(L, 1);
  cl_check_options(L, 1, options);
  CUDA_ARRAY3D_DESCRIPTOR d;
  memset(&d, 0, sizeof d);
  unsigned elem;
  d.Format = (CUarray_format)cl_check_array_format(L, 1, "format", &elem);
  lua_Integer channels = cl_opt_integer_range(L, 1, "channels", 1, 1, 4);
  luaL_argcheck(L, channels != 3, 1, "field 'channels' must be 1, 2 or 4");
  d.NumChannels = (unsigned)channels;
  d.Width = (size_t)cl_opt_integer_range(L, 1, "width", 0, 1, extent);
  luaL_argcheck(L, d.Width > 0, 1, "cuda.Array needs width (>= 1)");
  d.Height = (size_t)cl_opt_integer_range(L, 1, "height", 0, 0, extent);
  d.Depth = (size_t)cl_opt_integer_range(L, 1, "depth", 0, 0, extent);
  int layered = cl_opt_boolean(L, 1, "layered", 0);
  int surface = cl_opt_boolean(L, 1, "surface", 0);
  int cubemap = cl_opt_boolean(L, 1, "cubemap", 0);
  d.Flags = (layered ? CUDA_ARRAY3D_LAYERED : 0) | (surface ? CUDA_ARRAY3D_SURFACE_LDST : 0) |
            (cubemap ? CUDA_ARRAY3D_CUBEMAP : 0);
  if (cubemap)
    check_cubemap(L, &d, layered);
  luaL_argcheck(L, !layered || d.Depth > 0, 1, "a layered array needs depth (its layer count) >= 1");
  luaL_argcheck(L, layered || d.Depth == 0 || d.Height > 0, 1,
                "a 3-D array needs height >= 1 (or layered = true for 1-D layers)");
  size_t size = 0;
  luaL_argcheck(L, packed_size(&d, elem, &size), 1, "the array's size overflows");
  cl_push_current_device(L);
  int devi = lua_gettop(L);
  cl_Array *a = lua_newuserdatauv(L, sizeof *a, 1);
  memset(a, 0, sizeof *a);
  a->closed = 1;                /* until the handle exists */
  luaL_setmetatable(L, CL_ARRAY);
  cl_Device *dev = cl_check_device(L, devi);
  cl_device_activate(L, dev);   /* after allocating: a finalizer may switch contexts */
  CL_TRY(L, cuArray3DCreate, (&a->handle, &d));
  a->closed = 0;
  a->dev = dev;
  a->desc = d;
  a->elem_size = elem;
  a->size = size;
  lua_pushvalue(L, devi);
  lua_setiuservalue(L, -2, 1);
  return 1;
}

/* Deferred while a host function is pending, as memory is (lifetimes.c). */
static void destroy(cl_Array *a)
{
  cl_array_release(a->dev ? a->dev->ctx : NULL, a->handle);
  a->handle = NULL;
}

/* arr:close(): destroyed now, or with the last texture or surface over it. */
static int array_close(lua_State *L)
{
  cl_Array *a = luaL_checkudata(L, 1, CL_ARRAY);
  if (a->closed)
    return 0;
  a->closed = 1;
  if (a->users == 0 && a->handle)
    destroy(a);
  return 0;
}

void cl_array_user_gone(cl_Array *a)
{
  if (--a->users == 0 && a->closed && a->handle)
    destroy(a);
}

static int array_gc(lua_State *L)
{
  lua_settop(L, 1);
  return array_close(L);
}

/* --- copies ---------------------------------------------------------------- */

/* One side of a copy: the buffer's memory, its rows packed. */
static void set_linear(CUDA_MEMCPY3D *c, int dst, const cl_Buffer *b, const cl_Array *a)
{
  int host = b->mr->kind == CL_MR_HOST || b->mr->kind == CL_MR_PINNED;
  size_t pitch = a->desc.Width * a->desc.NumChannels * a->elem_size;
  size_t height = a->desc.Height ? a->desc.Height : 1;
  if (dst) {
    c->dstMemoryType = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c->dstHost = host ? (void *)(uintptr_t)b->ptr : NULL;
    c->dstDevice = host ? 0 : b->ptr;
    c->dstPitch = pitch;
    c->dstHeight = height;
  } else {
    c->srcMemoryType = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    c->srcHost = host ? (const void *)(uintptr_t)b->ptr : NULL;
    c->srcDevice = host ? 0 : b->ptr;
    c->srcPitch = pitch;
    c->srcHeight = height;
  }
}

/* The slices (depth indices) a copy's options pick: {layer = l} of a
 * layered array (its 6 faces in a layered cubemap), {face = f} of a
 * cubemap ({face = f, layer = l} in a layered one); all of them without
 * options. face and layer were read as 0 when absent. */
static void pick_slices(lua_State *L, const cl_Array *a, lua_Integer face, lua_Integer layer,
                        size_t *first, size_t *count)
{
  const int cubemap = (a->desc.Flags & CUDA_ARRAY3D_CUBEMAP) != 0;
  const int layered = (a->desc.Flags & CUDA_ARRAY3D_LAYERED) != 0;
  const size_t per_layer = cubemap && layered ? 6 : 1;
  const size_t depth = a->desc.Depth ? a->desc.Depth : 1;
  *first = 0;
  *count = depth;
  if (face == 0 && layer == 0)
    return;
  if (face && !cubemap)
    luaL_argerror(L, 4, "field 'face' is for a cubemap array");
  if (layer && !layered)
    luaL_argerror(L, 4, "field 'layer' is for a layered array");
  if (face && layered && !layer)
    luaL_argerror(L, 4, "a face of a layered cubemap needs its layer too");
  if (layer && (size_t)layer > depth / per_layer)
    luaL_argerror(L, 4, lua_pushfstring(L, "field 'layer' must be <= %I (the array's layers)",
                                        (lua_Integer)(depth / per_layer)));
  *first = (layer ? (size_t)layer - 1 : 0) * per_layer + (face ? (size_t)face - 1 : 0);
  *count = face ? 1 : per_layer;
}

/* arr:copy_from(buf, s [, {face, layer}]) and arr:copy_to(...): the whole
 * array, or the faces or layers the options pick, ordered on s (a stream
 * of the array's device). Nothing here runs Lua between the checks and
 * the driver call (a copy into pageable memory first waits for host
 * functions pending on s, then checks again). */
static int array_copy(lua_State *L, int to_buffer)
{
  static const char *const options[] = {"face", "layer", NULL};
  cl_check_nargs(L, 4);
  luaL_checkudata(L, 1, CL_ARRAY);
  cl_check_options(L, 4, options);
  lua_Integer face = cl_opt_integer_range(L, 4, "face", 0, 1, 6);
  lua_Integer layer = cl_opt_integer_range(L, 4, "layer", 0, 1, (lua_Integer)1 << 30);
  lua_settop(L, 4);
  cl_Array *a = cl_check_array(L, 1);
  cl_Buffer *b = cl_check_buffer(L, 2);
  cl_Stream *s = cl_check_stream(L, 3);
  if (to_buffer && cl_copy_wait_first(L, s, b->mr, NULL)) {
    a = cl_check_array(L, 1);   /* the wait ran host functions: check again */
    b = cl_check_buffer(L, 2);
    s = cl_check_stream(L, 3);
  }
  size_t first, count;
  pick_slices(L, a, face, layer, &first, &count);
  const size_t depth = a->desc.Depth ? a->desc.Depth : 1, bytes = a->size / depth * count;
  if (b->size != bytes)
    return luaL_error(L, "cannot copy between %s of %I bytes and a buffer of %I bytes: "
                      "sizes must match", count == depth ? "a cuda.Array" : "the array's slices",
                      (lua_Integer)bytes, (lua_Integer)b->size);
  if (a->dev != s->dev)
    return luaL_error(L, "the array is on device %d, the stream on device %d", a->dev->ordinal,
                      s->dev->ordinal);
  if (!cl_mr_accessible_from(b->mr, s->dev) && b->mr->kind == CL_MR_DEVICE)
    return luaL_error(L, "cannot copy device %d memory on a stream of device %d",
                      b->mr->dev->ordinal, s->dev->ordinal);
  CUDA_MEMCPY3D c;
  memset(&c, 0, sizeof c);
  set_linear(&c, to_buffer, b, a);
  if (to_buffer) {
    c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
    c.srcArray = a->handle;
    c.srcZ = first;
  } else {
    c.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    c.dstArray = a->handle;
    c.dstZ = first;
  }
  c.WidthInBytes = a->desc.Width * a->desc.NumChannels * a->elem_size;
  c.Height = a->desc.Height ? a->desc.Height : 1;
  c.Depth = count;
  cl_device_activate(L, s->dev);
  CL_TRY(L, cuMemcpy3DAsync, (&c, s->handle));
  if (s->capture)
    cl_capture_keep(L, s, 3, 1, 2);   /* the graph keeps the array and the buffer */
  lua_settop(L, 1);
  return 1;
}

static int array_copy_from(lua_State *L) { return array_copy(L, 0); }
static int array_copy_to(lua_State *L) { return array_copy(L, 1); }

/* --- fields ------------------------------------------------------------------ */

static int array_fields(lua_State *L)
{
  cl_Array *a = luaL_checkudata(L, 1, CL_ARRAY);
  const char *key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (strcmp(key, "is_closed") == 0)
    lua_pushboolean(L, a->closed);
  else if (a->closed)
    lua_pushnil(L);
  else if (strcmp(key, "width") == 0)
    lua_pushinteger(L, (lua_Integer)a->desc.Width);
  else if (strcmp(key, "height") == 0)
    lua_pushinteger(L, (lua_Integer)a->desc.Height);
  else if (strcmp(key, "depth") == 0)
    lua_pushinteger(L, (lua_Integer)a->desc.Depth);
  else if (strcmp(key, "channels") == 0)
    lua_pushinteger(L, a->desc.NumChannels);
  else if (strcmp(key, "format") == 0)
    lua_pushstring(L, format_name(a->desc.Format));
  else if (strcmp(key, "element_size") == 0)
    lua_pushinteger(L, (lua_Integer)(a->elem_size * a->desc.NumChannels));
  else if (strcmp(key, "size") == 0)
    lua_pushinteger(L, (lua_Integer)a->size);
  else if (strcmp(key, "layered") == 0)
    lua_pushboolean(L, (a->desc.Flags & CUDA_ARRAY3D_LAYERED) != 0);
  else if (strcmp(key, "surface") == 0)
    lua_pushboolean(L, (a->desc.Flags & CUDA_ARRAY3D_SURFACE_LDST) != 0);
  else if (strcmp(key, "cubemap") == 0)
    lua_pushboolean(L, (a->desc.Flags & CUDA_ARRAY3D_CUBEMAP) != 0);
  else if (strcmp(key, "device") == 0)
    lua_getiuservalue(L, 1, 1);
  else
    lua_pushnil(L);
  return 1;
}

static int array_tostring(lua_State *L)
{
  cl_Array *a = luaL_checkudata(L, 1, CL_ARRAY);
  if (a->closed)
    return cl_push_closed_name(L, CL_ARRAY);
  lua_pushfstring(L, "cuda.Array(%s x%d, %I x %I x %I)", format_name(a->desc.Format),
                  (int)a->desc.NumChannels, (lua_Integer)a->desc.Width,
                  (lua_Integer)a->desc.Height, (lua_Integer)a->desc.Depth);
  return 1;
}

void cl_open_array(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", array_gc}, {"__close", array_gc}, {"__tostring", array_tostring}, {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"copy_from", array_copy_from}, {"copy_to", array_copy_to}, {"close", array_close},
    {NULL, NULL}
  };
  cl_new_type(L, CL_ARRAY, meta, methods, array_fields);
  static const luaL_Reg functions[] = {{"Array", cuda_array}, {NULL, NULL}};
  cl_setfuncs(L, functions);
}
