/* SPDX-License-Identifier: MIT */
/* affinity.c: which CPUs this thread may run on.
 *
 *   cuda.set_affinity(cpu | {cpu, ...})   -- pin the calling thread
 *   cuda.get_affinity() -> {cpu, ...}     -- the CPUs it may run on, ascending
 *
 * For host-cost measurements that hold still: a thread the scheduler moves
 * between cores pays for cold caches and for the other core's clock, and
 * two programs compared should run on the same core. Only the calling
 * thread is pinned (sched_setaffinity of thread 0): the driver's own
 * threads, started earlier, keep their CPUs. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <string.h>

#include "cl.h"

/* The CPU number at stack index i (a table element or the argument). */
static int check_cpu(lua_State *L, int i, int arg)
{
  int isnum = 0;
  lua_Integer cpu = lua_tointegerx(L, i, &isnum);
  if (!isnum)
    luaL_argerror(L, arg, "a CPU number or a list of CPU numbers expected");
  if (cpu < 0 || cpu >= CPU_SETSIZE)
    luaL_argerror(L, arg, lua_pushfstring(L, "CPU %I out of range 0..%d", cpu, CPU_SETSIZE - 1));
  return (int)cpu;
}

static void check_cpu_set(lua_State *L, cpu_set_t *set)
{
  CPU_ZERO(set);
  if (!lua_istable(L, 1)) {
    CPU_SET(check_cpu(L, 1, 1), set);
    return;
  }
  lua_Integer n = luaL_len(L, 1);
  luaL_argcheck(L, n > 0, 1, "the list of CPUs is empty");
  for (lua_Integer k = 1; k <= n; k++) {
    lua_geti(L, 1, k);
    CPU_SET(check_cpu(L, -1, 1), set);
    lua_pop(L, 1);
  }
}

static int affinity_set(lua_State *L)
{
  cpu_set_t set;
  check_cpu_set(L, &set);
  cl_check_nargs(L, 1);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    return luaL_error(L, "cuda.set_affinity: %s", strerror(errno));
  return 0;
}

static int affinity_get(lua_State *L)
{
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return luaL_error(L, "cuda.get_affinity: %s", strerror(errno));
  lua_createtable(L, CPU_COUNT(&set), 0);
  lua_Integer n = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
    if (CPU_ISSET(cpu, &set)) {
      lua_pushinteger(L, cpu);
      lua_rawseti(L, -2, ++n);
    }
  return 1;
}

void cl_open_affinity(lua_State *L)
{
  static const luaL_Reg functions[] = {
    {"set_affinity", affinity_set},
    {"get_affinity", affinity_get},
    {NULL, NULL}
  };
  luaL_setfuncs(L, functions, 0);
}
