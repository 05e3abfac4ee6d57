/* view.c: stub (being written). */
#include "cl.h"

void cl_open_view(lua_State *L)
{
  (void)L;
}
