/* launch.c: stub (being written). */
#include "cl.h"

void cl_open_launch(lua_State *L)
{
  (void)L;
}
