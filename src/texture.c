/* SPDX-License-Identifier: MIT */
/* texture.c: cuda.TextureObject and cuda.SurfaceObject.
 *
 *   local tex <close> = cuda.TextureObject(arr, {filter_mode = "linear"})
 *   local surf <close> = cuda.SurfaceObject(arr)     -- arr made with surface = true
 *   cuda.launch(s, cfg, k, tex, surf, ...)           -- each its 8-byte handle
 *
 * A texture reads a cuda.Array or a buffer's memory (linear, or 2-D with a
 * pitch); a surface reads and writes an array. Each keeps what it reads
 * alive (user value 1) and counts in it, so that closing the array or the
 * buffer first closes it for Lua while its memory lives on until the last
 * texture or surface over it is closed: a kernel never samples freed memory
 * through a handle Lua still holds. */
#include <string.h>

#include "device.h"

typedef struct Object {
  int closed;
  int surface;                  /* a cuda.SurfaceObject, else a cuda.TextureObject */
  unsigned long long handle;    /* CUtexObject or CUsurfObject */
  void *source;                 /* the cl_Array or cl_Buffer (owner) it counts in */
  cl_Device *dev;               /* whose context made it: its handle means nothing elsewhere */
  int source_is_array;
  int users;                    /* live graphs whose kernels use it: close defers the destroy */
} Object;

static const char *const type_names[] = {"cuda.TextureObject", "cuda.SurfaceObject"};

/* --- options ------------------------------------------------------------------ */

static const char *const address_modes[] = {"wrap", "clamp", "mirror", "border", NULL};
static const char *const filter_modes[] = {"point", "linear", NULL};
static const char *const read_modes[] = {"element_type", "normalized_float", NULL};

/* The string option field as an index into names (def when absent). */
static int opt_choice(lua_State *L, int idx, const char *field, const char *def,
                      const char *const names[], const char *list)
{
  const char *s = cl_opt_string(L, idx, field, def);
  int k = 0;
  while (names[k] && strcmp(names[k], s) != 0)
    k++;
  if (!names[k])
    luaL_argerror(L, idx, lua_pushfstring(L, "field '%s': unknown value '%s' (known: %s)",
                                          field, s, list));
  lua_pop(L, 1);
  return k;
}

static CUaddress_mode address_mode_at(lua_State *L, int idx, int vi)
{
  const char *s = lua_type(L, vi) == LUA_TSTRING ? lua_tostring(L, vi) : NULL;
  for (int k = 0; s && address_modes[k]; k++)
    if (strcmp(address_modes[k], s) == 0)
      return (CUaddress_mode)k;   /* CU_TR_ADDRESS_MODE_WRAP = 0 ... BORDER = 3 */
  luaL_argerror(L, idx, "field 'address_mode' must be \"wrap\", \"clamp\", \"mirror\" or "
                        "\"border\", or a list of 1 to 3 of them (x, y, z)");
  return CU_TR_ADDRESS_MODE_CLAMP;
}

/* address_mode = "clamp" (every axis) or {x [, y [, z]]} (the rest clamp) */
static void read_address_mode(lua_State *L, int idx, CUDA_TEXTURE_DESC *t)
{
  for (int k = 0; k < 3; k++)
    t->addressMode[k] = CU_TR_ADDRESS_MODE_CLAMP;
  if (lua_getfield(L, idx, "address_mode") == LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  int vi = lua_gettop(L);
  if (lua_type(L, vi) == LUA_TTABLE) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, vi);
    luaL_argcheck(L, n >= 1 && n <= 3, idx, "field 'address_mode' must list 1 to 3 modes");
    for (int k = 0; k < n; k++) {
      lua_rawgeti(L, vi, k + 1);
      t->addressMode[k] = address_mode_at(L, idx, lua_gettop(L));
      lua_pop(L, 1);
    }
  } else {
    CUaddress_mode m = address_mode_at(L, idx, vi);
    for (int k = 0; k < 3; k++)
      t->addressMode[k] = m;
  }
  lua_pop(L, 1);
}

/* border_color = x (every channel) or {r, g, b, a} */
static void read_border_color(lua_State *L, int idx, CUDA_TEXTURE_DESC *t)
{
  if (lua_getfield(L, idx, "border_color") == LUA_TNIL) {
    lua_pop(L, 1);
    return;
  }
  int vi = lua_gettop(L);
  if (lua_type(L, vi) == LUA_TNUMBER) {
    luaL_argcheck(L, cl_fits_float32(lua_tonumber(L, vi)), idx,
                  "field 'border_color' must fit a float32");
    for (int k = 0; k < 4; k++)
      t->borderColor[k] = (float)lua_tonumber(L, vi);
  } else {
    luaL_argcheck(L, lua_type(L, vi) == LUA_TTABLE && lua_rawlen(L, vi) == 4, idx,
                  "field 'border_color' must be a number or {r, g, b, a}");
    for (int k = 0; k < 4; k++) {
      lua_rawgeti(L, vi, k + 1);
      int isnum;
      double x = lua_tonumberx(L, -1, &isnum);
      luaL_argcheck(L, isnum && cl_fits_float32(x), idx,
                    "field 'border_color' must hold 4 numbers that fit a float32");
      t->borderColor[k] = (float)x;
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
}

static void read_texture_options(lua_State *L, int idx, CUDA_TEXTURE_DESC *t)
{
  memset(t, 0, sizeof *t);
  if (lua_isnoneornil(L, idx)) {
    for (int k = 0; k < 3; k++)
      t->addressMode[k] = CU_TR_ADDRESS_MODE_CLAMP;
    t->flags = CU_TRSF_READ_AS_INTEGER;
    return;
  }
  read_address_mode(L, idx, t);
  t->filterMode = (CUfilter_mode)opt_choice(L, idx, "filter_mode", "point", filter_modes,
                                            "point, linear");
  int read = opt_choice(L, idx, "read_mode", "element_type", read_modes,
                        "element_type, normalized_float");
  t->flags = (read == 0 ? CU_TRSF_READ_AS_INTEGER : 0) |
             (cl_opt_boolean(L, idx, "normalized_coords", 0) ? CU_TRSF_NORMALIZED_COORDINATES : 0) |
             (cl_opt_boolean(L, idx, "srgb", 0) ? CU_TRSF_SRGB : 0);
  t->maxAnisotropy = (unsigned)cl_opt_integer_range(L, idx, "max_anisotropy", 0, 0, 16);
  read_border_color(L, idx, t);
}

/* A buffer's resource: format and channels are options; width and height
 * (with pitch, default packed rows) make it 2-D. */
static void read_linear_options(lua_State *L, int idx, CUDA_RESOURCE_DESC *r, size_t *pitch,
                                size_t *elem)
{
  unsigned size;
  r->res.linear.format = (CUarray_format)cl_check_array_format(L, idx, "format", &size);
  lua_Integer channels = cl_opt_integer_range(L, idx, "channels", 1, 1, 4);
  luaL_argcheck(L, channels != 3, idx, "field 'channels' must be 1, 2 or 4");
  r->res.linear.numChannels = (unsigned)channels;
  *elem = size * (size_t)channels;
  lua_Integer width = cl_opt_integer_range(L, idx, "width", 0, 0, (lua_Integer)1 << 30);
  lua_Integer height = cl_opt_integer_range(L, idx, "height", 0, 0, (lua_Integer)1 << 30);
  luaL_argcheck(L, (width == 0) == (height == 0), idx,
                "a 2-D texture over a buffer needs both width and height");
  *pitch = (size_t)cl_opt_integer_range(L, idx, "pitch", width * (lua_Integer)*elem, 0,
                                        (lua_Integer)1 << 40);
  if (width) {
    r->resType = CU_RESOURCE_TYPE_PITCH2D;
    r->res.pitch2D.width = (size_t)width;
    r->res.pitch2D.height = (size_t)height;
    r->res.pitch2D.pitchInBytes = *pitch;
    luaL_argcheck(L, *pitch >= (size_t)width * *elem, idx,
                  "field 'pitch' must be at least width * the element's size");
  } else
    r->resType = CU_RESOURCE_TYPE_LINEAR;
}

/* --- making them ------------------------------------------------------------ */

/* The source at 1, checked open (after every allocation), described in r;
 * its device is returned. A buffer must be device-accessible and hold the
 * 2-D extent it is given. */
static cl_Device *check_source(lua_State *L, CUDA_RESOURCE_DESC *r, size_t pitch, size_t elem,
                               Object *o)
{
  cl_Array *a = luaL_testudata(L, 1, CL_ARRAY);
  if (a) {
    cl_check_array(L, 1);
    r->resType = CU_RESOURCE_TYPE_ARRAY;
    r->res.array.hArray = a->handle;
    o->source = a;
    o->source_is_array = 1;
    return a->dev;
  }
  cl_Buffer *b = cl_check_buffer(L, 1);
  if (!cl_mr_device_accessible(b->mr))
    luaL_argerror(L, 1, "pageable host memory cannot back a texture");
  if (r->resType == CU_RESOURCE_TYPE_PITCH2D) {
    /* pitch * (height - 1) + the last row must fit: pitch (< 2^40) times
     * height (< 2^30) can pass 2^64, so it is compared by division */
    const size_t h = r->res.pitch2D.height, row = r->res.pitch2D.width * elem;
    if (row > b->size || h - 1 > (b->size - row) / pitch)
      luaL_argerror(L, 1, "the buffer is smaller than the texture's pitch * height");
    r->res.pitch2D.devPtr = b->ptr;
  } else {
    r->res.linear.devPtr = b->ptr;
    r->res.linear.sizeInBytes = b->size;
  }
  o->source = b->owner ? b->owner : b;
  o->source_is_array = 0;
  return b->mr->dev ? b->mr->dev : NULL;
}

/* Count the object in its source, which it keeps (user value 1). */
static void hold_source(lua_State *L, Object *o)
{
  if (o->source_is_array)
    ((cl_Array *)o->source)->users++;
  else
    ((cl_Buffer *)o->source)->graph_refs++;   /* defers the buffer's free, as a graph does */
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
}

static Object *push_object(lua_State *L, const char *tname, int surface)
{
  Object *o = lua_newuserdatauv(L, sizeof *o, 1);
  memset(o, 0, sizeof *o);
  o->closed = 1;                /* until the handle exists */
  o->surface = surface;
  luaL_setmetatable(L, tname);
  return o;
}

/* cuda.TextureObject(array_or_buffer [, options]) */
static int cuda_texture_object(lua_State *L)
{
  /* an array has its own format and extent: the last five are for buffers */
  static const char *const buffer_options[] = {
    "address_mode", "filter_mode", "read_mode", "normalized_coords", "srgb",
    "max_anisotropy", "border_color", "format", "channels", "width", "height", "pitch", NULL
  };
  static const char *const options[] = {
    "address_mode", "filter_mode", "read_mode", "normalized_coords", "srgb",
    "max_anisotropy", "border_color", NULL
  };
  cl_check_nargs(L, 2);
  int is_array = luaL_testudata(L, 1, CL_ARRAY) != NULL;
  if (!is_array)
    luaL_checkudata(L, 1, CL_BUFFER);
  cl_check_options(L, 2, is_array ? options : buffer_options);
  CUDA_TEXTURE_DESC t;
  CUDA_RESOURCE_DESC r;
  memset(&r, 0, sizeof r);
  size_t pitch = 0, elem = 0;
  read_texture_options(L, 2, &t);
  if (!is_array)
    read_linear_options(L, 2, &r, &pitch, &elem);
  lua_settop(L, 2);
  cl_push_current_device(L);    /* a buffer of host-mapped memory: the current device */
  Object *o = push_object(L, type_names[0], 0);
  cl_Device *d = check_source(L, &r, pitch, elem, o);
  if (d == NULL)
    d = cl_check_device(L, 3);
  cl_device_activate(L, d);
  CL_TRY(L, cuTexObjectCreate, ((CUtexObject *)&o->handle, &r, &t, NULL));
  o->closed = 0;
  o->dev = d;
  hold_source(L, o);
  return 1;
}

/* cuda.SurfaceObject(array): the array was made with surface = true */
static int cuda_surface_object(lua_State *L)
{
  cl_check_nargs(L, 1);
  cl_check_array(L, 1);
  Object *o = push_object(L, type_names[1], 1);
  cl_Array *a = cl_check_array(L, 1);
  if (!(a->desc.Flags & CUDA_ARRAY3D_SURFACE_LDST))
    luaL_argerror(L, 1, "the array was not made with surface = true");
  CUDA_RESOURCE_DESC r;
  memset(&r, 0, sizeof r);
  r.resType = CU_RESOURCE_TYPE_ARRAY;
  r.res.array.hArray = a->handle;
  cl_device_activate(L, a->dev);
  CL_TRY(L, cuSurfObjectCreate, ((CUsurfObject *)&o->handle, &r));
  o->closed = 0;
  o->dev = a->dev;
  o->source = a;
  o->source_is_array = 1;
  hold_source(L, o);
  return 1;
}

/* --- close, fields -------------------------------------------------------- */

/* Destroy the object and let go of its source: at close, or with the
 * last graph that uses it. */
static void destroy(Object *o)
{
  if (o->surface)
    CL_CALL(cuSurfObjectDestroy, ((CUsurfObject)o->handle));
  else
    CL_CALL(cuTexObjectDestroy, ((CUtexObject)o->handle));
  if (o->source_is_array)
    cl_array_user_gone(o->source);
  else
    cl_buffer_graph_release(o->source);
  o->source = NULL;
}

static int object_close(lua_State *L, int surface)
{
  Object *o = luaL_checkudata(L, 1, type_names[surface]);
  if (o->closed)
    return 0;
  o->closed = 1;
  if (o->users == 0 && o->source)
    destroy(o);
  return 0;
}

int cl_graph_user(lua_State *L, int i, int delta)
{
  cl_Array *a = luaL_testudata(L, i, CL_ARRAY);
  if (a) {
    if (delta > 0)
      a->users++;
    else if (delta < 0)
      cl_array_user_gone(a);
    return 1;
  }
  Object *o = luaL_testudata(L, i, type_names[0]);
  if (!o)
    o = luaL_testudata(L, i, type_names[1]);
  if (!o)
    return 0;
  o->users += delta;
  if (delta < 0 && o->users == 0 && o->closed && o->source)
    destroy(o);
  return 1;
}

static int object_fields(lua_State *L, int surface)
{
  Object *o = luaL_checkudata(L, 1, type_names[surface]);
  const char *key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
  if (strcmp(key, "is_closed") == 0)
    lua_pushboolean(L, o->closed);
  else if (o->closed)
    lua_pushnil(L);
  else if (strcmp(key, "handle") == 0)
    lua_pushinteger(L, (lua_Integer)o->handle);
  else if (strcmp(key, "source") == 0)
    lua_getiuservalue(L, 1, 1);
  else
    lua_pushnil(L);
  return 1;
}

static int object_tostring(lua_State *L, int surface)
{
  Object *o = luaL_checkudata(L, 1, type_names[surface]);
  if (o->closed)
    return cl_push_closed_name(L, type_names[surface]);
  lua_pushfstring(L, "%s(handle %I, device %d)", type_names[surface], (lua_Integer)o->handle,
                  o->dev->ordinal);
  return 1;
}

static int texture_close(lua_State *L) { return object_close(L, 0); }
static int texture_gc(lua_State *L) { lua_settop(L, 1); return object_close(L, 0); }
static int texture_fields(lua_State *L) { return object_fields(L, 0); }
static int texture_tostring(lua_State *L) { return object_tostring(L, 0); }
static int surface_close(lua_State *L) { return object_close(L, 1); }
static int surface_gc(lua_State *L) { lua_settop(L, 1); return object_close(L, 1); }
static int surface_fields(lua_State *L) { return object_fields(L, 1); }
static int surface_tostring(lua_State *L) { return object_tostring(L, 1); }

/* cuda.launch's hook (launch.c): 1 and the handle in *slot (the device
 * that made it in *dev) for an open texture or surface, -1 for a closed
 * one, 0 for any other value. The registry is a plain table and the names
 * are interned: no Lua runs. */
int cl_object_arg(lua_State *L, const void *mt, const void *ud, uint64_t *slot,
                  const char **tname, cl_Device **dev)
{
  for (int k = 0; k < 2; k++) {
    lua_getfield(L, LUA_REGISTRYINDEX, type_names[k]);
    int same = lua_topointer(L, -1) == mt;
    lua_pop(L, 1);
    if (same) {
      const Object *o = ud;
      *tname = type_names[k];
      *slot = o->handle;
      *dev = o->dev;
      return o->closed ? -1 : 1;
    }
  }
  return 0;
}

void cl_open_texture(lua_State *L)
{
  static const luaL_Reg texture_meta[] = {
    {"__gc", texture_gc}, {"__close", texture_gc}, {"__tostring", texture_tostring}, {NULL, NULL}
  };
  static const luaL_Reg texture_methods[] = {{"close", texture_close}, {NULL, NULL}};
  static const luaL_Reg surface_meta[] = {
    {"__gc", surface_gc}, {"__close", surface_gc}, {"__tostring", surface_tostring}, {NULL, NULL}
  };
  static const luaL_Reg surface_methods[] = {{"close", surface_close}, {NULL, NULL}};
  cl_new_type(L, type_names[0], texture_meta, texture_methods, texture_fields);
  cl_new_type(L, type_names[1], surface_meta, surface_methods, surface_fields);
  static const luaL_Reg functions[] = {
    {"TextureObject", cuda_texture_object}, {"SurfaceObject", cuda_surface_object}, {NULL, NULL}
  };
  cl_setfuncs(L, functions);
  cl_lifetimes_graph_user(cl_graph_user);
}
