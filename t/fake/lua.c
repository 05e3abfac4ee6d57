/* SPDX-License-Identifier: MIT */
/* lua.c: require "fakecuda", the test suite's handle on the fake driver.
 *
 * The fake's .so is also this Lua C module: loaded from the same path as
 * CUDALUA_LIBCUDA, dlopen returns the same handle, so Lua sees the state the
 * driver calls change. Nothing here is ever called from a driver call. */
#include <lauxlib.h>
#include <lua.h>

#include "fake.h"

int luaopen_fakecuda(lua_State *L);

static void check_name(lua_State *L, int i, const char *name)
{
  if (fake_calls(name) < 0)
    luaL_argerror(L, i, lua_pushfstring(L, "the fake driver has no entry point '%s'", name));
}

/* fakecuda.fail(name [, nth = 1 [, code = CUDA_ERROR_OUT_OF_MEMORY]]) */
static int fail(lua_State *L)
{
  const char *name = luaL_checkstring(L, 1);
  lua_Integer nth = luaL_optinteger(L, 2, 1);
  lua_Integer code = luaL_optinteger(L, 3, CUDA_ERROR_OUT_OF_MEMORY);
  check_name(L, 1, name);
  luaL_argcheck(L, nth > 0, 2, "nth must be > 0");
  luaL_argcheck(L, code != CUDA_SUCCESS, 3, "a failure needs an error code");
  fake_fail(name, (long)nth, (CUresult)code);
  return 0;
}

static int reset(lua_State *L)
{
  (void)L;
  fake_reset();
  return 0;
}

static int calls(lua_State *L)
{
  const char *name = luaL_checkstring(L, 1);
  check_name(L, 1, name);
  lua_pushinteger(L, fake_calls(name));
  return 1;
}

/* {allocations = n, streams = n, ..., bytes = n}, and their total */
static int live(lua_State *L)
{
  long total = 0;
  lua_createtable(L, 0, FAKE_NKINDS + 1);
  for (int k = 0; k < FAKE_NKINDS; k++) {
    lua_pushinteger(L, fake_live[k]);
    lua_setfield(L, -2, fake_kind_names[k]);
    total += fake_live[k];
  }
  lua_pushinteger(L, (lua_Integer)fake_allocated_bytes());
  lua_setfield(L, -2, "bytes");
  lua_pushinteger(L, total);
  return 2;
}

/* fakecuda.context_usable(): whether the current context is not a
 * destroyed one (a green context destroyed while current). */
static int context_usable(lua_State *L)
{
  lua_pushboolean(L, fake_ctx_usable() == CUDA_SUCCESS);
  return 1;
}

/* fakecuda.host_registered(address): the flags, base and size of the
 * registration (cuMemHostRegister) holding it, or nothing */
static int host_registered(lua_State *L)
{
  unsigned flags;
  uintptr_t base;
  size_t size;
  if (!fake_host_registered((uintptr_t)luaL_checkinteger(L, 1), &flags, &base, &size))
    return 0;
  lua_pushinteger(L, flags);
  lua_pushinteger(L, (lua_Integer)base);
  lua_pushinteger(L, (lua_Integer)size);
  return 3;
}

/* fakecuda.texture(handle): {filter_mode, address_mode = {x, y, z},
 * flags, max_anisotropy, border_color = {r, g, b, a}, resource = "array" |
 * "linear" | "pitch2d", width, height, pitch, size, format, channels,
 * array_flags and depth of an array's}, or
 * nil for a handle that is no live texture */
static int texture(lua_State *L)
{
  CUDA_RESOURCE_DESC r;
  CUDA_TEXTURE_DESC t;
  if (!fake_texture_desc((unsigned long long)luaL_checkinteger(L, 1), &r, &t))
    return 0;
  lua_newtable(L);
  lua_pushinteger(L, t.filterMode);
  lua_setfield(L, -2, "filter_mode");
  lua_pushinteger(L, t.flags);
  lua_setfield(L, -2, "flags");
  lua_pushinteger(L, t.maxAnisotropy);
  lua_setfield(L, -2, "max_anisotropy");
  lua_createtable(L, 3, 0);
  for (int k = 0; k < 3; k++) {
    lua_pushinteger(L, t.addressMode[k]);
    lua_rawseti(L, -2, k + 1);
  }
  lua_setfield(L, -2, "address_mode");
  lua_createtable(L, 4, 0);
  for (int k = 0; k < 4; k++) {
    lua_pushnumber(L, t.borderColor[k]);
    lua_rawseti(L, -2, k + 1);
  }
  lua_setfield(L, -2, "border_color");
  static const char *const types[] = {"array", "mipmap", "linear", "pitch2d"};
  lua_pushstring(L, types[r.resType & 3]);
  lua_setfield(L, -2, "resource");
  CUDA_ARRAY3D_DESCRIPTOR ad;
  if (r.resType == CU_RESOURCE_TYPE_ARRAY && fake_array_desc(r.res.array.hArray, &ad)) {
    lua_pushinteger(L, ad.Flags);     /* the array's: CUDA_ARRAY3D_CUBEMAP, ... */
    lua_setfield(L, -2, "array_flags");
    lua_pushinteger(L, (lua_Integer)ad.Depth);
    lua_setfield(L, -2, "depth");
  }
  if (r.resType == CU_RESOURCE_TYPE_LINEAR) {
    lua_pushinteger(L, (lua_Integer)r.res.linear.sizeInBytes);
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, r.res.linear.format);
    lua_setfield(L, -2, "format");
    lua_pushinteger(L, r.res.linear.numChannels);
    lua_setfield(L, -2, "channels");
  } else if (r.resType == CU_RESOURCE_TYPE_PITCH2D) {
    lua_pushinteger(L, (lua_Integer)r.res.pitch2D.width);
    lua_setfield(L, -2, "width");
    lua_pushinteger(L, (lua_Integer)r.res.pitch2D.height);
    lua_setfield(L, -2, "height");
    lua_pushinteger(L, (lua_Integer)r.res.pitch2D.pitchInBytes);
    lua_setfield(L, -2, "pitch");
    lua_pushinteger(L, r.res.pitch2D.format);
    lua_setfield(L, -2, "format");
    lua_pushinteger(L, r.res.pitch2D.numChannels);
    lua_setfield(L, -2, "channels");
  }
  return 1;
}

/* The entry points, in cuGetProcAddress's table order. */
static int names(lua_State *L)
{
  lua_newtable(L);
  for (size_t i = 0; fake_entry_name(i); i++) {
    lua_pushstring(L, fake_entry_name(i));
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

int luaopen_fakecuda(lua_State *L)
{
  static const luaL_Reg functions[] = {
    {"fail", fail}, {"reset", reset}, {"calls", calls}, {"live", live}, {"names", names},
    {"context_usable", context_usable}, {"texture", texture},
    {"host_registered", host_registered},
    {NULL, NULL}
  };
  luaL_newlib(L, functions);
  return 1;
}
