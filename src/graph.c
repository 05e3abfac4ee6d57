/* graph.c: stub (being written). */
#include "cl.h"

void cl_open_graph(lua_State *L)
{
  (void)L;
}
