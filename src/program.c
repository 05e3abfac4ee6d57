/* program.c: stub (being written). */
#include "cl.h"

void cl_open_program(lua_State *L)
{
  (void)L;
}
