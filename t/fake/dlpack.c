/* SPDX-License-Identifier: MIT */
/* dlpack.c: the test suite's C library that hands DLPack tensors to
 * cudalua and takes them back (t/dlpack.t), with its own copy of the
 * structs' layout: cudalua's reader and writer are checked against it.
 *
 *   fakecuda.dlpack_make{versioned =, data =, device_type =, device_id =,
 *     code =, bits =, lanes =, shape = {}, strides = {} | nil, ndim =,
 *     byte_offset =, flags =, major =, minor =, deleter = true}
 *                                     -> light userdata (a tensor it owns)
 *   fakecuda.dlpack_deleted()         -> how many of its deleters ran
 *   fakecuda.dlpack_delete(addr, versioned)   call a tensor's deleter, as a C consumer
 *   fakecuda.dlpack_read(addr, versioned)     -> a table of the tensor's fields
 *   fakecuda.dlpack_api_push(addr, versioned) -> a view, or nil and the message
 *   fakecuda.dlpack_api_to(view, versioned)   -> a tensor, or nil and the message
 * The last two go through cudalua's C API (src/cudalua_dlpack.h), as a C
 * library embedding Lua would. */
#include <stdint.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>

#include "../../src/cudalua_dlpack.h"

void fake_open_dlpack(lua_State *L);

typedef struct { uint32_t major, minor; } Version;
typedef struct { int32_t type, id; } Device;
typedef struct { uint8_t code, bits; uint16_t lanes; } DType;
typedef struct {
  void *data;
  Device device;
  int32_t ndim;
  DType dtype;
  int64_t *shape, *strides;
  uint64_t byte_offset;
} Tensor;
typedef struct DLManagedTensor {
  Tensor t;
  void *ctx;
  void (*deleter)(struct DLManagedTensor *);
} Legacy;
typedef struct DLManagedTensorVersioned {
  Version version;
  void *ctx;
  void (*deleter)(struct DLManagedTensorVersioned *);
  uint64_t flags;
  Tensor t;
} Versioned;

typedef struct Made {
  union { Legacy l; Versioned v; } m;
  int64_t shape[16], strides[16];
  struct Made *next;            /* on the list below when it has no deleter */
} Made;

static long deleted;
static Made *no_deleter;        /* tensors nobody can delete: kept reachable, not leaked */

static void delete_legacy(Legacy *self) { deleted++; free(self->ctx); }
static void delete_versioned(Versioned *self) { deleted++; free(self->ctx); }

static lua_Integer field(lua_State *L, const char *name, lua_Integer def)
{
  lua_getfield(L, 1, name);
  lua_Integer v = luaL_optinteger(L, -1, def);
  lua_pop(L, 1);
  return v;
}

static int list(lua_State *L, const char *name, int64_t *out)
{
  if (lua_getfield(L, 1, name) != LUA_TTABLE) {
    lua_pop(L, 1);
    return -1;
  }
  int n = (int)luaL_len(L, -1);
  luaL_argcheck(L, n <= 16, 1, "at most 16 dimensions");
  for (int i = 0; i < n; i++) {
    lua_geti(L, -1, i + 1);
    out[i] = (int64_t)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return n;
}

static int make(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  Made *m = calloc(1, sizeof *m);
  if (m == NULL)
    return luaL_error(L, "out of memory");
  lua_getfield(L, 1, "versioned");
  int versioned = lua_toboolean(L, -1);
  lua_getfield(L, 1, "deleter");
  int with_deleter = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_getfield(L, 1, "null_shape");
  int null_shape = lua_toboolean(L, -1);
  lua_pop(L, 3);
  Tensor *t = versioned ? &m->m.v.t : &m->m.l.t;
  t->data = (void *)(uintptr_t)field(L, "data", 0);
  t->device.type = (int32_t)field(L, "device_type", 1);
  t->device.id = (int32_t)field(L, "device_id", 0);
  t->dtype.code = (uint8_t)field(L, "code", 2);
  t->dtype.bits = (uint8_t)field(L, "bits", 32);
  t->dtype.lanes = (uint16_t)field(L, "lanes", 1);
  int n = list(L, "shape", m->shape);
  t->ndim = (int32_t)field(L, "ndim", n < 0 ? 0 : n);
  t->shape = null_shape ? NULL : m->shape;
  t->strides = list(L, "strides", m->strides) < 0 ? NULL : m->strides;
  t->byte_offset = (uint64_t)field(L, "byte_offset", 0);
  if (versioned) {
    m->m.v.version.major = (uint32_t)field(L, "major", 1);
    m->m.v.version.minor = (uint32_t)field(L, "minor", 0);
    m->m.v.flags = (uint64_t)field(L, "flags", 0);
    m->m.v.ctx = m;
    m->m.v.deleter = with_deleter ? delete_versioned : NULL;
  } else {
    m->m.l.ctx = m;
    m->m.l.deleter = with_deleter ? delete_legacy : NULL;
  }
  if (!with_deleter) {
    m->next = no_deleter;
    no_deleter = m;
  }
  lua_pushlightuserdata(L, m);
  return 1;
}

static int count(lua_State *L)
{
  lua_pushinteger(L, deleted);
  return 1;
}

static int delete_tensor(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TLIGHTUSERDATA);
  void *p = lua_touserdata(L, 1);
  if (lua_toboolean(L, 2)) {
    Versioned *v = p;
    if (v->deleter)
      v->deleter(v);
  } else {
    Legacy *l = p;
    if (l->deleter)
      l->deleter(l);
  }
  return 0;
}

static void set(lua_State *L, const char *name, lua_Integer v)
{
  lua_pushinteger(L, v);
  lua_setfield(L, -2, name);
}

static void set_list(lua_State *L, const char *name, const int64_t *p, int n)
{
  if (p == NULL)
    return;
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushinteger(L, (lua_Integer)p[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, name);
}

static int read_tensor(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TLIGHTUSERDATA);
  void *p = lua_touserdata(L, 1);
  int versioned = lua_toboolean(L, 2);
  const Tensor *t = versioned ? &((Versioned *)p)->t : &((Legacy *)p)->t;
  lua_newtable(L);
  set(L, "data", (lua_Integer)(uintptr_t)t->data);
  set(L, "device_type", t->device.type);
  set(L, "device_id", t->device.id);
  set(L, "ndim", t->ndim);
  set(L, "code", t->dtype.code);
  set(L, "bits", t->dtype.bits);
  set(L, "lanes", t->dtype.lanes);
  set(L, "byte_offset", (lua_Integer)t->byte_offset);
  set_list(L, "shape", t->shape, t->ndim);
  set_list(L, "strides", t->strides, t->ndim);
  if (versioned) {
    const Versioned *v = p;
    set(L, "major", v->version.major);
    set(L, "minor", v->version.minor);
    set(L, "flags", (lua_Integer)v->flags);
    lua_pushboolean(L, v->deleter != NULL && v->ctx != NULL);
  } else
    lua_pushboolean(L, ((Legacy *)p)->deleter != NULL && ((Legacy *)p)->ctx != NULL);
  lua_setfield(L, -2, "has_deleter");
  return 1;
}

static int api_push(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TLIGHTUSERDATA);
  void *t = lua_touserdata(L, 1);
  int r = lua_toboolean(L, 2) ? cudalua_push_dlpack(L, t) : cudalua_push_dlpack_legacy(L, t);
  if (r == LUA_OK)
    return 1;
  lua_pushnil(L);
  lua_insert(L, -2);
  return 2;
}

static int api_to(lua_State *L)
{
  void *t = lua_toboolean(L, 2) ? (void *)cudalua_to_dlpack(L, 1) : (void *)cudalua_to_dlpack_legacy(L, 1);
  if (t == NULL) {
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
  }
  lua_pushlightuserdata(L, t);
  return 1;
}

void fake_open_dlpack(lua_State *L)
{
  static const luaL_Reg functions[] = {
    {"dlpack_api_push", api_push}, {"dlpack_api_to", api_to},
    {"dlpack_make", make}, {"dlpack_deleted", count}, {"dlpack_delete", delete_tensor},
    {"dlpack_read", read_tensor}, {NULL, NULL}
  };
  luaL_setfuncs(L, functions, 0);
}
