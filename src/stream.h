/* SPDX-License-Identifier: MIT */
/* stream.h: what a copy does before it starts on a stream (stream.c), inline:
 * a copy pays one load when no host function is outstanding. */
#ifndef CUDALUA_STREAM_H
#define CUDALUA_STREAM_H

#include "cl.h"

/* A copy the driver finishes before it returns (into pageable memory, or
 * host to host) waits for its stream's earlier work, so for a host
 * function pending there, which runs only at this thread's next wait: it
 * would wait for ever. With one outstanding, such a copy first waits for
 * its stream (which must stay on the stack), running them. That wait runs
 * Lua: it returns 1 when it waited, and the caller checks its arguments
 * again. */
static inline int cl_copy_finishes_at_once(cl_MRKind dst, cl_MRKind src)
{
  int dst_host = dst == CL_MR_HOST || dst == CL_MR_PINNED;
  int src_host = src == CL_MR_HOST || src == CL_MR_PINNED;
  return dst == CL_MR_HOST || (dst_host && src_host);
}

static inline int cl_copy_wait_first(lua_State *L, cl_Stream *s, cl_MRKind dst, cl_MRKind src)
{
  if (cl_hostfunc_outstanding == 0 || !cl_copy_finishes_at_once(dst, src))
    return 0;
  cl_stream_sync(L, s);
  return 1;
}

#endif
