/* SPDX-License-Identifier: MIT */
/* stream.h: what a copy does before it starts on a stream (stream.c), inline:
 * a copy pays one load when no host function is outstanding. */
#ifndef CUDALUA_STREAM_H
#define CUDALUA_STREAM_H

#include "cl.h"

/* Whether work issued on s now is captured. A stream that joined a
 * capture keeps pointing to it after that capture ended, until its next
 * keep (lifetimes.c): s->capture alone is not enough. */
static inline int cl_stream_capturing(const cl_Stream *s)
{
  return s->capture != NULL && s->capture->capturing;
}

/* The kind of memory a copy finds at mr's addresses. A foreign view's is
 * only the kind it was said to be (view_foreign.c): the driver goes by
 * the address, so it counts as pageable here, where that errs safe. */
static inline cl_MRKind cl_copy_kind(const cl_MemoryResource *mr)
{
  return mr->foreign ? CL_MR_HOST : mr->kind;
}

static inline int cl_copy_finishes_at_once(cl_MRKind dst, cl_MRKind src)
{
  int dst_host = dst == CL_MR_HOST || dst == CL_MR_PINNED;
  int src_host = src == CL_MR_HOST || src == CL_MR_PINNED;
  return dst == CL_MR_HOST || (dst_host && src_host);
}

/* A copy the driver finishes before it returns (into pageable memory, or
 * host to host: at_once) waits for its stream's earlier work, so for a
 * host function pending there, which runs only at this thread's next
 * wait: it would wait for ever. With one outstanding, such a copy first
 * waits for its stream (which must stay on the stack), running them. That
 * wait runs Lua: it returns 1 when it waited, and the caller checks its
 * arguments again. A captured copy only becomes a node, and a capture
 * cannot be waited for. Callers test cl_hostfunc_outstanding first: the
 * copy's one load when none is. */
static inline int cl_copy_wait_if_at_once(lua_State *L, cl_Stream *s, int at_once)
{
  if (!at_once || cl_stream_capturing(s))
    return 0;
  cl_stream_sync(L, s);
  return 1;
}

/* Such a copy waits for a blocking kernel that holds its stream too: it
 * lets the kernel go first (driver.h's hold), named as api. */
static inline void cl_copy_break_hold(const cl_Stream *s, int at_once, const char *api)
{
  if (at_once && cl_hold_spinning && !cl_stream_capturing(s))
    cl_hold_break(api);
}

/* The same for a copy from src into dst; src NULL: device memory (an
 * array's). */
static inline int cl_copy_wait_first(lua_State *L, cl_Stream *s, const cl_MemoryResource *dst,
                                     const cl_MemoryResource *src)
{
  if (cl_hostfunc_outstanding == 0 && !cl_hold_spinning)
    return 0;
  int at_once = cl_copy_finishes_at_once(cl_copy_kind(dst), src ? cl_copy_kind(src) : CL_MR_DEVICE);
  cl_copy_break_hold(s, at_once, "cuMemcpyAsync (pageable memory)");
  return cl_hostfunc_outstanding > 0 && cl_copy_wait_if_at_once(L, s, at_once);
}

#endif
