/* SPDX-License-Identifier: MIT */
/* nvml.h: cuda.system (nvml.c), registered by luaopen_cuda (cuda.c). */
#ifndef CUDALUA_NVML_H
#define CUDALUA_NVML_H

#include <lua.h>

/* Register cuda.system into the module table on the top of the stack. */
void cl_open_nvml(lua_State *L);

#endif
