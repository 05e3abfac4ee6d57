/* memory.c: stub (being written). */
#include "cl.h"

void cl_open_memory(lua_State *L)
{
  (void)L;
}

void cl_push_default_mr(lua_State *L, int devi)
{
  (void)devi;
  lua_pushnil(L);
}
