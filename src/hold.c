/* SPDX-License-Identifier: MIT */
/* hold.c: cuda.hold_begin and cuda.hold_end, the Lua side of driver.h's hold.
 *
 * cuda.bench queues a kernel that spins until the host writes the first
 * int32 of a pinned buffer, then queues the work to time behind it. Between
 * the two, the user's function runs, and so may the collector:
 *
 *   cuda.hold_begin(flag)   -- the kernel spinning on flag is queued
 *   ...                     -- no release runs; a call that may wait lets it go
 *   local who = cuda.hold_end()   -- lets it go; who: the call that broke the hold, or nil
 *
 * The flag buffer is kept in the registry while the hold is on: the driver
 * layer writes it from any call that breaks the hold, unless it was closed
 * meanwhile (its closed word, in the userdata the registry keeps). */
#include "cl.h"

#define HOLD_FLAG "cuda.hold_flag"

/* cuda.hold_begin(flag_buffer) */
static int hold_begin(lua_State *L)
{
  cl_Buffer *b = cl_check_buffer(L, 1);
  volatile int *flag = cl_buffer_host(L, 1, b);
  if (b->owner)
    luaL_argerror(L, 1, "the flag must be a buffer of its own, not a slice");
  if (b->size < sizeof(int))
    luaL_argerror(L, 1, "the flag buffer must hold an int32");
  if (!cl_hold_begin(flag, &b->closed))
    luaL_error(L, "cuda.hold_begin: a stream is held already (one hold at a time in a process)");
  lua_pushvalue(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, HOLD_FLAG);
  return 0;
}

/* cuda.hold_end() -> the name of the driver call that broke the hold, or nil */
static int hold_end(lua_State *L)
{
  const char *breaker = cl_hold_end();
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, HOLD_FLAG);
  if (breaker)
    lua_pushstring(L, breaker);
  else
    lua_pushnil(L);
  return 1;
}

void cl_open_hold(lua_State *L)
{
  static const luaL_Reg functions[] = {{"hold_begin", hold_begin}, {"hold_end", hold_end}, {NULL, NULL}};
  cl_setfuncs(L, functions);
}
