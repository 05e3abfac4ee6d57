/* SPDX-License-Identifier: MIT */
/* device.h: making a device's primary context current (device.c), inline: every
 * launch, copy and record starts with it, and it is one comparison when the
 * context is current already. */
#ifndef CUDALUA_DEVICE_H
#define CUDALUA_DEVICE_H

#include "cl.h"

static inline void cl_device_activate(lua_State *L, cl_Device *d)
{
  if (d->ctx == NULL || d->ctx != cl_current_ctx)
    cl_device_activate_slow(L, d);
}

#endif
