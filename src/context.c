/* SPDX-License-Identifier: MIT */
/* context.c: green contexts, as cuda.core's Context.
 *
 *   local groups, rest = dev.resources.sm:split{count = 16, groups = 2}
 *   local ctx = dev:create_context{resources = {groups[1]}}
 *   local s = ctx:create_stream()     -- a cuda.Stream: launches run on 16 SMs
 *
 * A cuda.SMResource is a plain value (a CUdevResource); a cuda.Context owns
 * a CUgreenCtx. Each stream of a context keeps it alive (the stream's user
 * value 2); the context lists its streams in a weak table, so that close()
 * destroys them before the green context, as the driver requires. */
#include <string.h>

#include "device.h"

#define CL_SMRESOURCE "cuda.SMResource"
#define CL_CONTEXT    "cuda.Context"
#define MAX_RESOURCES 32

typedef struct SMResource {
  int closed;                   /* never: a resource is a value */
  CUdevResource res;
  cl_Device *dev;
} SMResource;                   /* user value 1: the device */

typedef struct Context {
  int closed;
  CUgreenCtx green;             /* NULL once destroyed */
  CUcontext ctx;                /* its context, once made current; else NULL */
  cl_Device *dev;
  int graphs;                   /* graphs captured on its streams, not yet closed */
} Context;                      /* user values: 1 the device, 2 its streams (weak) */

/* --- SM resources ----------------------------------------------------------- */

static SMResource *push_resource(lua_State *L, const CUdevResource *res, int devi)
{
  SMResource *r = lua_newuserdatauv(L, sizeof *r, 1);
  r->closed = 0;
  r->res = *res;
  r->dev = cl_check_device(L, devi);
  luaL_setmetatable(L, CL_SMRESOURCE);
  lua_pushvalue(L, devi);
  lua_setiuservalue(L, -2, 1);
  return r;
}

static void push_resources_table(lua_State *L, const CUdevResource *sm, int devi)
{
  lua_createtable(L, 0, 1);
  push_resource(L, sm, devi);
  lua_setfield(L, -2, "sm");
}

static void cl_push_device_resources(lua_State *L, int devi)
{
  cl_Device *d = cl_check_device(L, devi);
  CUdevResource sm;
  CL_TRY(L, cuDeviceGetDevResource, (d->handle, &sm, CU_DEV_RESOURCE_TYPE_SM));
  push_resources_table(L, &sm, devi);
}

/* dev.resources (a field of Device, from here) */
static int device_resources(lua_State *L)
{
  cl_push_device_resources(L, 1);
  return 1;
}

static SMResource *check_resource(lua_State *L, int i)
{
  return luaL_checkudata(L, i, CL_SMRESOURCE);
}

/* An integer option in 1 .. max, or def when absent. */
static unsigned check_count(lua_State *L, int opts, const char *field, lua_Integer def,
                            unsigned max)
{
  lua_Integer v = cl_opt_integer(L, opts, field, def);
  if (v < 1 || v > (lua_Integer)max)
    luaL_argerror(L, opts, lua_pushfstring(L, "field '%s' must be 1 to %d, got %I", field,
                                           (int)max, v));
  return (unsigned)v;
}

/* sm:split{count = n, groups = g, coscheduling = true} -> {group, ...}, remainder
 * groups of at least n SMs each, as many as fit unless groups is given */
static int resource_split(lua_State *L)
{
  static const char *const options[] = {"count", "groups", "coscheduling", NULL};
  check_resource(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  cl_check_options(L, 2, options);
  SMResource *r = check_resource(L, 1);
  unsigned total = r->res.sm.smCount;
  if (lua_getfield(L, 2, "count") == LUA_TNIL)
    return luaL_argerror(L, 2, "field 'count' (SMs per group) is required");
  lua_pop(L, 1);
  unsigned count = check_count(L, 2, "count", 1, total);
  unsigned flags = cl_opt_boolean(L, 2, "coscheduling", 1)
                       ? 0 : CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING;
  unsigned groups = 0;
  CL_TRY(L, cuDevSmResourceSplitByCount, (NULL, &groups, &r->res, NULL, flags, count));
  if (groups == 0)
    return luaL_error(L, "split: no group of %d SMs fits in %d SMs", (int)count, (int)total);
  groups = check_count(L, 2, "groups", groups, groups);
  CUdevResource *result = lua_newuserdatauv(L, (groups + 1) * sizeof *result, 0);
  memset(result, 0, (groups + 1) * sizeof *result);
  CL_TRY(L, cuDevSmResourceSplitByCount, (result, &groups, &r->res, &result[groups], flags, count));
  lua_getiuservalue(L, 1, 1);
  int devi = lua_gettop(L);
  lua_createtable(L, (int)groups, 0);
  for (unsigned k = 0; k < groups; k++) {
    push_resource(L, &result[k], devi);
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  push_resource(L, &result[groups], devi);
  return 2;
}

static int resource_fields(lua_State *L)
{
  SMResource *r = check_resource(L, 1);
  const char *key = luaL_checkstring(L, 2);
  if (strcmp(key, "sm_count") == 0)
    lua_pushinteger(L, r->res.sm.smCount);
  else if (strcmp(key, "min_partition_size") == 0)
    lua_pushinteger(L, r->res.sm.minSmPartitionSize);
  else if (strcmp(key, "coscheduled_alignment") == 0)
    lua_pushinteger(L, r->res.sm.smCoscheduledAlignment);
  else if (strcmp(key, "device") == 0)
    lua_getiuservalue(L, 1, 1);
  else
    lua_pushnil(L);
  return 1;
}

static int resource_tostring(lua_State *L)
{
  SMResource *r = check_resource(L, 1);
  lua_pushfstring(L, "cuda.SMResource(%d SMs, device %d)", (int)r->res.sm.smCount,
                  r->dev->ordinal);
  return 1;
}

/* --- contexts ------------------------------------------------------------- */

static Context *check_context(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_CONTEXT);
}

/* The resources listed at field `resources` of the options at opts, all
 * of device d, copied into res; returns how many. */
static unsigned check_context_resources(lua_State *L, int opts, cl_Device *d,
                                        CUdevResource res[MAX_RESOURCES])
{
  if (lua_getfield(L, opts, "resources") != LUA_TTABLE)
    luaL_argerror(L, opts, "field 'resources' must be a list of cuda.SMResource");
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  if (n < 1 || n > MAX_RESOURCES)
    luaL_argerror(L, opts, "field 'resources' must list 1 to 32 resources");
  for (lua_Integer k = 1; k <= n; k++) {
    lua_rawgeti(L, -1, k);
    SMResource *r = luaL_testudata(L, -1, CL_SMRESOURCE);
    if (r == NULL)
      luaL_argerror(L, opts, lua_pushfstring(L, "resource %I is not a cuda.SMResource", k));
    if (r->dev != d)
      luaL_argerror(L, opts, lua_pushfstring(L, "resource %I belongs to another device", k));
    res[k - 1] = r->res;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return (unsigned)n;
}

/* dev:create_context{resources = {sm_group, ...}} -> cuda.Context */
static int device_create_context(lua_State *L)
{
  static const char *const options[] = {"resources", NULL};
  cl_hostfunc_drain(L);         /* cuGreenCtxCreate waits for pending host functions (H200) */
  cl_Device *d = cl_check_device(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  cl_check_options(L, 2, options);
  CUdevResource res[MAX_RESOURCES];
  unsigned n = check_context_resources(L, 2, d, res);
  CUdevResourceDesc desc;
  cl_device_activate(L, d);     /* the green context retains the primary one */
  CL_TRY(L, cuDevResourceGenerateDesc, (&desc, res, n));
  Context *c = lua_newuserdatauv(L, sizeof *c, 2);
  memset(c, 0, sizeof *c);
  c->closed = 1;
  luaL_setmetatable(L, CL_CONTEXT);
  CL_TRY(L, cuGreenCtxCreate, (&c->green, desc, d->handle, CU_GREEN_CTX_DEFAULT_STREAM));
  c->closed = 0;
  c->dev = d;
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_setiuservalue(L, -2, 2);
  return 1;
}

/* ctx:create_stream{priority = 0}: streams of a green context never block.
 * The stream is made (closed) and listed for close() first; a finalizer
 * that these allocations run may close the context, so it is checked
 * after them, and nothing after the check allocates. */
static int context_create_stream(lua_State *L)
{
  Context *c = check_context(L, 1);
  int non_blocking = 1;
  int priority = cl_check_stream_options(L, 2, c->dev, &non_blocking);
  if (!non_blocking)
    return luaL_argerror(L, 2, "streams of a green context are non-blocking");
  lua_getiuservalue(L, 1, 1);
  cl_Stream *s = cl_push_new_stream(L, lua_gettop(L), 1, priority, 1);
  lua_getiuservalue(L, 1, 2);   /* listed for close() */
  lua_pushvalue(L, -2);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  c = check_context(L, 1);
  CL_TRY(L, cuGreenCtxStreamCreate, (&s->handle, c->green, CU_STREAM_NON_BLOCKING, priority));
  s->green = c;
  s->closed = 0;
  return 1;
}

static void destroy(Context *c)
{
  if (c->green == NULL)
    return;
  /* A graph's launch or instantiation made it current (cl_green_activate):
   * leave the device's primary context current instead, so that later
   * calls (a finalizer's release) never run in a destroyed context. */
  if (c->ctx && c->ctx == cl_current_ctx) {
    CUcontext primary = c->dev->ctx;
    if (primary == NULL || CL_CALL(cuCtxSetCurrent, (primary)) != CUDA_SUCCESS) {
      CL_CALL(cuCtxSetCurrent, (NULL));
      primary = NULL;
    }
    cl_current_ctx = primary;
  }
  CL_CALL(cuGreenCtxDestroy, (c->green));
  c->green = NULL;
}

/* Close the streams of the context at index 1, then the green context. */
static int context_close(lua_State *L)
{
  Context *c = luaL_checkudata(L, 1, CL_CONTEXT);
  if (c->closed)
    return 0;
  if (lua_getiuservalue(L, 1, 2) == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      lua_pop(L, 1);
      if (luaL_callmeta(L, -1, "__close"))
        lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  c = luaL_checkudata(L, 1, CL_CONTEXT);
  if (!c->closed) {             /* a stream's __close cannot reach it, but be sure */
    c->closed = 1;
    if (c->graphs == 0)         /* else the last graph captured on it destroys it */
      destroy(c);
  }
  return 0;
}

/* --- graphs captured on a green context's streams (graph.c) ------------------- */

void cl_green_activate(lua_State *L, void *green)
{
  Context *c = green;
  if (c->closed)
    luaL_error(L, "the stream's green context is closed");
  if (c->ctx && c->ctx == cl_current_ctx)   /* as cl_device_activate: no driver call */
    return;
  CUcontext ctx = NULL;
  CL_TRY(L, cuCtxFromGreenCtx, (&ctx, c->green));
  CL_TRY(L, cuCtxSetCurrent, (ctx));
  c->ctx = ctx;                 /* destroy() makes the primary current instead */
  cl_current_ctx = ctx;         /* so the next cl_device_activate switches back */
}

void cl_stream_activate(lua_State *L, const cl_Stream *s)
{
  if (s->green)
    cl_green_activate(L, s->green);
  else
    cl_device_activate(L, s->dev);
}

int cl_green_is_closed(const void *green)
{
  return ((const Context *)green)->closed;
}

void cl_green_graph_opened(void *green)
{
  ((Context *)green)->graphs++;
}

void cl_green_graph_closed(void *green)
{
  Context *c = green;
  if (--c->graphs == 0 && c->closed)
    destroy(c);
}

static int context_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);
  Context *c = check_context(L, 1);
  if (strcmp(key, "resources") == 0) {
    CUdevResource sm;
    CL_TRY(L, cuGreenCtxGetDevResource, (c->green, &sm, CU_DEV_RESOURCE_TYPE_SM));
    lua_getiuservalue(L, 1, 1);
    push_resources_table(L, &sm, lua_gettop(L));
  } else if (strcmp(key, "handle") == 0) {
    CUcontext ctx = NULL;
    CL_TRY(L, cuCtxFromGreenCtx, (&ctx, c->green));
    lua_pushinteger(L, (lua_Integer)(uintptr_t)ctx);
  } else if (strcmp(key, "is_green") == 0)
    lua_pushboolean(L, 1);
  else if (strcmp(key, "device") == 0)
    lua_getiuservalue(L, 1, 1);
  else
    lua_pushnil(L);
  return 1;
}

static int context_tostring(lua_State *L)
{
  Context *c = luaL_checkudata(L, 1, CL_CONTEXT);
  if (c->closed)
    return cl_push_closed_name(L, CL_CONTEXT);
  lua_pushfstring(L, "cuda.Context(%p, green, device %d)", (void *)c->green, c->dev->ordinal);
  return 1;
}

void cl_open_context(lua_State *L)
{
  static const luaL_Reg resource_meta[] = {{"__tostring", resource_tostring}, {NULL, NULL}};
  static const luaL_Reg resource_methods[] = {{"split", resource_split}, {NULL, NULL}};
  static const luaL_Reg meta[] = {
    {"__gc", context_close}, {"__close", context_close}, {"__tostring", context_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"create_stream", context_create_stream}, {"close", context_close}, {NULL, NULL}
  };
  static const luaL_Reg device_methods[] = {
    {"create_context", device_create_context}, {NULL, NULL}
  };
  static const luaL_Reg device_fields[] = {{"resources", device_resources}, {NULL, NULL}};
  cl_new_type(L, CL_SMRESOURCE, resource_meta, resource_methods, resource_fields);
  cl_new_type(L, CL_CONTEXT, meta, methods, context_fields);
  cl_add_methods(L, CL_DEVICE, device_methods);
  cl_add_fields(L, CL_DEVICE, device_fields);
}
