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
    {"context_usable", context_usable},
    {NULL, NULL}
  };
  luaL_newlib(L, functions);
  return 1;
}
