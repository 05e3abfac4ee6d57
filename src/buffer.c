/* buffer.c: stub (being written). */
#include "cl.h"

void cl_open_buffer(lua_State *L)
{
  (void)L;
}
