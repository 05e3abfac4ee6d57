/* SPDX-License-Identifier: MIT */
/* hostfunc.h: waiting on the GPU (hostfunc.c), inline: a wait with no host
 * function outstanding is the plain driver call. */
#ifndef CUDALUA_HOSTFUNC_H
#define CUDALUA_HOSTFUNC_H

#include "cl.h"

/* Every wait on the GPU goes through here: the plain driver call unless a
 * host function is outstanding, which the wait must run on this thread
 * (or a release waits for the next wait). A wait runs Lua: the caller
 * re-checks what it uses after it. */
static inline void cl_sync(lua_State *L, cl_WaitFn wait, void *object, const char *api)
{
  if (cl_hostfunc_outstanding == 0 && cl_releases_deferred == 0 && cl_quiet_work_pending == 0)
    cl_check(L, wait(object, 1), api);
  else
    cl_hostfunc_wait(L, wait, object, api);
}

#endif
