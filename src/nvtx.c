/* SPDX-License-Identifier: MIT */
/* nvtx.c: cuda.nvtx, named ranges and marks for profilers (Nsight Systems).
 *
 *   cuda.nvtx.range_push(name)    -- opens a range on this thread
 *   cuda.nvtx.range_pop()         -- closes the innermost one
 *   cuda.nvtx.mark(name)          -- an instant event
 *   cuda.nvtx.range(name)         -- range_push, and a value whose __close
 *                                    pops it: local r <close> = cuda.nvtx.range("x")
 *   cuda.nvtx.depth()             -- ranges open on this thread
 *
 * NVTX v3 is header-only: each call goes through a function pointer that is
 * a no-op until a profiler sets NVTX_INJECTION64_PATH, whose library the
 * first call then dlopens. Without a profiler a call costs an indirect
 * call. The depth is counted here, so that a pop without a push is an
 * error whether or not a profiler listens. */
#include <nvtx3/nvToolsExt.h>

#include "cl.h"

static __thread int depth;

static int nvtx_range_push(lua_State *L)
{
  const char *name = luaL_checkstring(L, 1);
  nvtxRangePushA(name);
  depth++;
  return 0;
}

static int nvtx_range_pop(lua_State *L)
{
  if (depth == 0)
    return luaL_error(L, "cuda.nvtx.range_pop: no range is open");
  nvtxRangePop();
  depth--;
  return 0;
}

static int nvtx_mark(lua_State *L)
{
  nvtxMarkA(luaL_checkstring(L, 1));
  return 0;
}

static int nvtx_depth(lua_State *L)
{
  lua_pushinteger(L, depth);
  return 1;
}

/* The range value's __close (upvalue 1: the value): the range ends. On
 * any other value (a script calling it through getmetatable) nothing. */
static int nvtx_range_close(lua_State *L)
{
  return lua_rawequal(L, 1, lua_upvalueindex(1)) ? nvtx_range_pop(L) : 0;
}

/* cuda.nvtx.range(name): upvalue 1 is the shared to-be-closed value; it
 * carries nothing, each close pops one level, an error's close too, so the
 * range ends where the block does. */
static int nvtx_range(lua_State *L)
{
  nvtx_range_push(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  return 1;
}

void cl_open_nvtx(lua_State *L)
{
  static const luaL_Reg functions[] = {
    {"range_push", nvtx_range_push},
    {"range_pop", nvtx_range_pop},
    {"mark", nvtx_mark},
    {"depth", nvtx_depth},
    {NULL, NULL}
  };
  lua_newtable(L);
  luaL_setfuncs(L, functions, 0);
  lua_newuserdatauv(L, 0, 0);            /* the range value */
  lua_newtable(L);
  lua_pushvalue(L, -2);
  lua_pushcclosure(L, nvtx_range_close, 1);
  lua_setfield(L, -2, "__close");
  lua_pushliteral(L, "cuda.nvtx.range");
  lua_setfield(L, -2, "__name");
  lua_setmetatable(L, -2);
  lua_pushcclosure(L, nvtx_range, 1);
  lua_setfield(L, -2, "range");
  lua_setfield(L, -2, "nvtx");
}
