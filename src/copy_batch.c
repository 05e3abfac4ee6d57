/* SPDX-License-Identifier: MIT */
/* copy_batch.c: cuda.copy_batch, many copies in one driver call.
 *
 * cuda.copy_batch(stream, {{dst, src [, size]}, ...} [, options]) issues
 * every pair through one cuMemcpyBatchAsync: the batch runs in stream
 * order as a whole, its copies in no particular order among themselves.
 * Each end is a buffer, a slice or a contiguous view of any memory
 * (device, pinned, managed, pageable). Every pair is checked (open
 * handles, sizes, bounds, devices) before anything is queued, so a bad
 * pair queues nothing.
 *
 * Since the copies run in no order, none may depend on another: no two
 * destinations overlap and no source overlaps another copy's destination
 * (a copy's source may overlap its own destination, as in a single copy).
 * The check sorts the destinations by address (O(n log n)) and looks each
 * source up among them; an error names the two copies.
 *
 * The one allocation is the scratch the driver reads (the pointer and size
 * arrays) with the sorted ranges after it, a userdata made first, before
 * any check (HACKING.md); reading the list is raw, so no metamethod runs
 * between the checks and the call. */
#include <stdlib.h>
#include <string.h>

#include "cl.h"
#include "stream.h"

/* A destination's bytes [start, end), of copy `copy` (0-based). */
typedef struct Range { CUdeviceptr start, end; size_t copy; } Range;

typedef struct Scratch {
  CUdeviceptr *dsts, *srcs;
  size_t *sizes;
  Range *ranges;                /* the destinations, sorted by start */
  int per_copy;                 /* options: a set a copy, else one for all */
  int at_once;                  /* a copy the driver finishes before it returns (stream.h) */
  size_t nattrs, *idxs;         /* the driver's numAttrs, attrsIdxs and attrs */
  CUmemcpyAttributes *attrs;
} Scratch;

/* One block for all (n >= 1): the ranges, the driver's arrays, then the
 * attribute sets, n of them for per-copy options, else one. */
static void *scratch_new(lua_State *L, size_t n, Scratch *s)
{
  const size_t each = sizeof(Range) + 2 * sizeof(CUdeviceptr) + sizeof(size_t) +
                      (s->per_copy ? sizeof(size_t) + sizeof(CUmemcpyAttributes) : 0);
  const size_t one = sizeof(size_t) + sizeof(CUmemcpyAttributes);
  if (n > (SIZE_MAX - one) / each)
    luaL_error(L, "copy_batch: %I copies are too many", (lua_Integer)n);
  size_t nsets = s->per_copy ? n : 1;
  unsigned char *p = lua_newuserdatauv(L, n * each + (s->per_copy ? 0 : one), 0);
  s->ranges = (Range *)(void *)p;   /* first: the strictest alignment */
  s->dsts = (CUdeviceptr *)(void *)(s->ranges + n);
  s->srcs = s->dsts + n;
  s->sizes = (size_t *)(void *)(s->srcs + n);
  s->idxs = s->sizes + n;
  s->attrs = (CUmemcpyAttributes *)(void *)(s->idxs + nsets);
  return p;
}

static int by_start(const void *a, const void *b)
{
  const Range *x = a, *y = b;
  return x->start < y->start ? -1 : x->start > y->start;
}

/* The first of the sorted, disjoint ranges r[0..n) that ends after p: their
 * ends ascend as their starts do. */
static size_t first_ending_after(const Range *r, size_t n, CUdeviceptr p)
{
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (r[mid].end > p)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* Refuse copies that depend on each other: overlapping destinations, or a
 * source overlapping another copy's destination. Allocates nothing unless
 * it raises. */
static void check_independent(lua_State *L, const Scratch *s, size_t n)
{
  Range *r = s->ranges;
  for (size_t k = 0; k < n; k++)
    r[k] = (Range){s->dsts[k], s->dsts[k] + s->sizes[k], k};
  qsort(r, n, sizeof *r, by_start);
  for (size_t k = 1; k < n; k++)
    if (r[k].start < r[k - 1].end) {
      size_t a = r[k - 1].copy < r[k].copy ? r[k - 1].copy : r[k].copy;
      size_t b = r[k - 1].copy ^ r[k].copy ^ a;
      luaL_error(L, "copy_batch: copies %I and %I write overlapping bytes: the copies of a batch "
                    "run in no order (issue them in two batches)", (lua_Integer)a + 1,
                 (lua_Integer)b + 1);
    }
  for (size_t k = 0; k < n; k++) {
    CUdeviceptr start = s->srcs[k], end = start + s->sizes[k];
    /* the destinations it overlaps are a run from the first ending after
     * start; its own may be one of them, so look at two at most */
    for (size_t i = first_ending_after(r, n, start); i < n && r[i].start < end; i++)
      if (r[i].copy != k)
        luaL_error(L, "copy_batch: copy %I reads bytes that copy %I writes: the copies of a "
                      "batch run in no order (issue them in two batches)", (lua_Integer)k + 1,
                   (lua_Integer)r[i].copy + 1);
  }
}

/* An error in the options: argument 3's (k = 0), or copy k's set in a list. */
static int options_error(lua_State *L, lua_Integer k, const char *msg)
{
  if (k == 0)
    return luaL_argerror(L, 3, msg);
  return luaL_error(L, "copy_batch: options[%I]: %s", k, msg);
}

/* One set of CUmemcpyAttributes from the option table at opts (absolute),
 * or the defaults for nil: the whole batch's (k = 0) or copy k's. Gather:
 * its reads may run metamethods. */
static void read_options(lua_State *L, int opts, lua_Integer k, CUmemcpyAttributes *a)
{
  static const char *const known[] = {
    "src_access_order", "src_location_hint", "dst_location_hint", "prefer_overlap", NULL
  };
  static const char *const orders[] = {"stream", "during_api_call", "any", NULL};
  static const CUmemcpySrcAccessOrder order_values[] = {
    CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL,
    CU_MEMCPY_SRC_ACCESS_ORDER_ANY
  };
  static const char *const hints[] = {"src_location_hint", "dst_location_hint"};
  memset(a, 0, sizeof *a);      /* no padding left unset: sets are compared with memcmp */
  a->srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  a->srcLocHint.type = CU_MEM_LOCATION_TYPE_INVALID;
  a->dstLocHint.type = CU_MEM_LOCATION_TYPE_INVALID;
  if (lua_isnoneornil(L, opts))
    return;
  if (k == 0)
    luaL_checktype(L, opts, LUA_TTABLE);
  else if (!lua_istable(L, opts))
    options_error(L, k, lua_pushfstring(L, "a table of options expected, got %s",
                                        luaL_typename(L, opts)));
  lua_pushnil(L);
  while (lua_next(L, opts)) {   /* raw: no metamethod */
    lua_pop(L, 1);
    int found = 0;
    for (int j = 0; known[j] && !found; j++)
      found = lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), known[j]) == 0;
    if (!found) {
      const char *key = luaL_tolstring(L, -1, NULL);
      options_error(L, k, lua_pushfstring(L, "unknown option '%s' (known: %s)", key,
                                          cl_push_names(L, known)));
    }
  }
  int type = lua_getfield(L, opts, "src_access_order");
  if (type != LUA_TNIL) {
    int j = 0;
    const char *o = type == LUA_TSTRING ? lua_tostring(L, -1) : "";
    while (orders[j] && strcmp(orders[j], o) != 0)
      j++;
    if (!orders[j]) {
      const char *given = luaL_tolstring(L, -1, NULL);
      options_error(L, k, lua_pushfstring(L, "src_access_order: invalid option '%s' (known: %s)",
                                          given, cl_push_names(L, orders)));
    }
    a->srcAccessOrder = order_values[j];
  }
  lua_pop(L, 1);
  type = lua_getfield(L, opts, "prefer_overlap");
  if (type != LUA_TNIL && type != LUA_TBOOLEAN)
    options_error(L, k, lua_pushfstring(L, "field 'prefer_overlap' must be a boolean, got %s",
                                        luaL_typename(L, -1)));
  if (lua_toboolean(L, -1))
    a->flags = CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE;
  lua_pop(L, 1);
  for (int j = 0; j < 2; j++) {
    CUmemLocation *loc = j == 0 ? &a->srcLocHint : &a->dstLocHint;
    lua_getfield(L, opts, hints[j]);
    if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "host") == 0)
      loc->type = CU_MEM_LOCATION_TYPE_HOST;
    else if (luaL_testudata(L, -1, CL_DEVICE)) {
      loc->type = CU_MEM_LOCATION_TYPE_DEVICE;
      loc->id = ((cl_Device *)lua_touserdata(L, -1))->ordinal;
    } else if (!lua_isnil(L, -1))
      options_error(L, k, lua_pushfstring(L, "%s must be a cuda.Device or \"host\", got %s",
                                          hints[j], luaL_typename(L, -1)));
    lua_pop(L, 1);
  }
}

/* Whether the options at 3 are a list of sets, one a copy (cuda.core's
 * options=[CopyOptions, ...]) rather than one set: a table with [1]. */
static int per_copy_options(lua_State *L)
{
  if (!lua_istable(L, 3))
    return 0;
  int list = lua_rawgeti(L, 3, 1) != LUA_TNIL;
  lua_pop(L, 1);
  return list;
}

/* The options at 3 into s: one set for all, or (a list) copy k's set in
 * attrs[k - 1], runs of equal sets then merged into one entry each, as
 * cuMemcpyBatchAsync takes them (attrsIdxs: the first copy of each run). */
static void read_all_options(lua_State *L, size_t n, Scratch *s)
{
  if (!s->per_copy) {
    read_options(L, 3, 0, s->attrs);
    s->idxs[0] = 0;
    s->nattrs = 1;
    return;
  }
  if (lua_rawlen(L, 3) != n)
    luaL_argerror(L, 3, lua_pushfstring(L, "a list of %I option sets for %I copies: give one "
                                        "set for all, or one a copy", (lua_Integer)lua_rawlen(L, 3),
                                        (lua_Integer)n));
  lua_pushnil(L);
  while (lua_next(L, 3)) {      /* raw: a list takes no fields of one set */
    lua_pop(L, 1);
    if (!lua_isinteger(L, -1))
      luaL_argerror(L, 3, lua_pushfstring(L, "a list of option sets has no field '%s' (a set "
                                          "for all copies is a table without [1])",
                                          luaL_tolstring(L, -1, NULL)));
  }
  size_t m = 0;
  for (size_t k = 1; k <= n; k++) {
    lua_rawgeti(L, 3, (lua_Integer)k);
    read_options(L, lua_gettop(L), (lua_Integer)k, &s->attrs[m]);
    lua_pop(L, 1);
    if (m == 0 || memcmp(&s->attrs[m], &s->attrs[m - 1], sizeof s->attrs[m]) != 0)
      s->idxs[m++] = k - 1;
  }
  s->nattrs = m;
}

/* Pair k (1-based) of the list at li, checked, into slot k - 1 of s. The
 * pair's values stay reachable from the list, which the caller holds. */
static void check_pair(lua_State *L, int li, lua_Integer k, const cl_Stream *st, Scratch *s)
{
  if (lua_rawgeti(L, li, k) != LUA_TTABLE)
    luaL_error(L, "copy_batch: copy %I must be a table {dst, src [, size]}, got %s", k,
               luaL_typename(L, -1));
  int pi = lua_gettop(L);
  lua_rawgeti(L, pi, 1);
  lua_rawgeti(L, pi, 2);
  cl_Span dst, src;
  if (!cl_fast_test(L, -2, CL_UV_BUFFER) && !cl_fast_test(L, -2, CL_UV_VIEW))
    luaL_error(L, "copy_batch: copy %I: dst must be a cuda.Buffer or cuda.View, got %s", k,
               luaL_typename(L, -2));
  if (!cl_fast_test(L, -1, CL_UV_BUFFER) && !cl_fast_test(L, -1, CL_UV_VIEW))
    luaL_error(L, "copy_batch: copy %I: src must be a cuda.Buffer or cuda.View, got %s", k,
               luaL_typename(L, -1));
  cl_check_span(L, -2, &dst);
  cl_check_span(L, -1, &src);
  size_t n = src.size;
  int type = lua_rawgeti(L, pi, 3);
  if (type != LUA_TNIL) {
    int isint = 0;
    lua_Integer size = lua_tointegerx(L, -1, &isint);
    if (type != LUA_TNUMBER || !isint || size < 1)
      luaL_error(L, "copy_batch: copy %I: size must be an integer >= 1", k);
    if ((lua_Unsigned)size > src.size || (lua_Unsigned)size > dst.size)
      luaL_error(L, "copy_batch: copy %I: %I bytes do not fit (src has %I, dst %I)", k, size,
                 (lua_Integer)src.size, (lua_Integer)dst.size);
    n = (size_t)size;
  } else if (src.size != dst.size)
    luaL_error(L, "copy_batch: copy %I: cannot copy %I bytes into %I: sizes must match, or "
                  "give a size", k, (lua_Integer)src.size, (lua_Integer)dst.size);
  if (dst.mr->dev != st->dev && src.mr->dev != st->dev &&
      (dst.mr->kind == CL_MR_DEVICE || src.mr->kind == CL_MR_DEVICE))
    luaL_error(L, "copy_batch: copy %I: device %d memory on a stream of device %d: use a "
                  "stream of the source's or the destination's device", k,
               (dst.mr->kind == CL_MR_DEVICE ? dst.mr : src.mr)->dev->ordinal, st->dev->ordinal);
  s->dsts[k - 1] = dst.ptr;
  s->srcs[k - 1] = src.ptr;
  s->sizes[k - 1] = n;
  s->at_once |= cl_copy_finishes_at_once(cl_copy_kind(dst.mr), cl_copy_kind(src.mr));
  lua_settop(L, pi - 1);
}

/* What a capture keeps: every buffer and view of the batch. After the
 * driver call, so allocating here is safe. A stream that joined a capture
 * that has since ended leaves it at the first keep (st->capture is then
 * NULL): nothing more to keep. */
static void keep_for_capture(lua_State *L, cl_Stream *st, int li, size_t n)
{
  for (size_t k = 1; k <= n && st->capture; k++) {
    lua_rawgeti(L, li, (lua_Integer)k);
    int pi = lua_gettop(L);
    lua_rawgeti(L, pi, 1);
    lua_rawgeti(L, pi, 2);
    cl_capture_keep(L, st, 1, pi + 1, pi + 2);
    lua_settop(L, pi - 1);
  }
}

/* How to issue a batch: one cuMemcpyBatchAsync, unless
 * CUDALUA_COPY_BATCH=pairs asks for one cuMemcpyAsync a pair (to compare
 * the two, or where a driver's batch misbehaves). A capture always takes
 * pairs: the batch call has no graph node (the H200's driver answers
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), and a copy a pair captures as
 * one memcpy node each. So does a green context's stream: driver
 * 580.159.04's batch dies of SIGSEGV on one, with that context current
 * (t/context.t on the H100; the real-GPU fuzzer's crash of issue 27). */
static int batch_mode(const cl_Stream *st)
{
  const char *e = getenv("CUDALUA_COPY_BATCH");
  return !cl_stream_capturing(st) && !st->green && !(e && strcmp(e, "pairs") == 0);
}

/* Every pair of the list at index 2, then that no copy writes what another
 * reads or writes (n >= 1). */
static void check_all(lua_State *L, const cl_Stream *st, Scratch *s, size_t n)
{
  s->at_once = 0;
  for (size_t k = 1; k <= n; k++)
    check_pair(L, 2, (lua_Integer)k, st, s);
  check_independent(L, s, n);
}

/* cuda.copy_batch(stream, {{dst, src [, size]}, ...} [, options | {options, ...}]) */
static int cuda_copy_batch(lua_State *L)
{
  lua_settop(L, 3);
  luaL_checktype(L, 2, LUA_TTABLE);
  size_t n = (size_t)lua_rawlen(L, 2);
  Scratch s;
  s.per_copy = per_copy_options(L);
  scratch_new(L, n > 0 ? n : 1, &s);   /* before the checks (HACKING.md) */
  read_all_options(L, n, &s);          /* metamethods may run: before the checks too */
  cl_Stream *st = cl_fast_check(L, 1, CL_UV_STREAM, CL_STREAM);
  if (st->handle == CU_STREAM_LEGACY || st->handle == NULL)
    luaL_argerror(L, 1, "copy_batch needs a stream other than the legacy default stream");
  if (n == 0)
    return 0;
  check_all(L, st, &s, n);
  /* Issued as pairs, a copy the driver finishes before it returns would
   * wait for ever behind a pending host function: wait for the stream
   * first, as buf:copy_to does (stream.h) */
  cl_copy_break_hold(st, s.at_once, "cuMemcpyBatchAsync (pageable memory)");
  if (cl_hostfunc_outstanding > 0 && !batch_mode(st) && cl_copy_wait_if_at_once(L, st, s.at_once)) {
    st = cl_fast_check(L, 1, CL_UV_STREAM, CL_STREAM);   /* the wait ran Lua: check everything again */
    check_all(L, st, &s, n);
  }
  /* The batch call checks its pointers in the current context, not the
   * stream's: the stream's own made current. */
  cl_stream_activate(L, st);
  if (!batch_mode(st)) {               /* one cuMemcpyAsync a pair, in order */
    for (size_t k = 0; k < n; k++)
      CL_TRY(L, cuMemcpyAsync, (s.dsts[k], s.srcs[k], s.sizes[k], st->handle));
    if (st->capture)
      keep_for_capture(L, st, 2, n);
    return 0;
  }
#if CUDA_VERSION >= 13000
  CL_TRY(L, cuMemcpyBatchAsync, (s.dsts, s.srcs, s.sizes, n, s.attrs, s.idxs, s.nattrs,
                                 st->handle));
#else
  size_t fail = SIZE_MAX;
  CUresult r = CL_CALL(cuMemcpyBatchAsync, (s.dsts, s.srcs, s.sizes, n, s.attrs, s.idxs,
                                            s.nattrs, &fail, st->handle));
  if (r != CUDA_SUCCESS)
    cl_raise_detail(L, r, "cuMemcpyBatchAsync", fail == SIZE_MAX ? "" : " (copy %d)",
                    (int)fail + 1);
#endif
  if (st->capture)
    keep_for_capture(L, st, 2, n);
  return 0;
}

void cl_open_copy_batch(lua_State *L)
{
  static const luaL_Reg functions[] = {{"copy_batch", cuda_copy_batch}, {NULL, NULL}};
  cl_setfuncs(L, functions);
}
