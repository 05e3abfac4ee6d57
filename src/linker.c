/* SPDX-License-Identifier: MIT */
/* linker.c: cuda.Linker, device linking over nvJitLink.
 *
 *     local linker = cuda.Linker({obj_a, obj_b}, {arch = "sm_90", lto = true})
 *     local obj = linker:link("cubin")      -- a cuda.ObjectCode
 *
 * A Linker keeps its objects and the nvJitLink argument list, resolved at
 * construction like a Program's (the default arch is the current device's).
 * Each link makes a fresh nvJitLink handle, owned by a guard userdata so
 * that it is destroyed on every path, errors included. Its info and error
 * logs are kept as linker.log; a failed link raises a cuda.Error carrying
 * them. */
#include <stdio.h>
#include <string.h>

#include "cl.h"
#include "toolkit.h"

#define NVJITLINK_GUARD "cuda.NvJitLinkHandle"

typedef struct Linker {
  int closed;
  int lto;                      /* -lto given: link("ptx") is possible */
} Linker;

/* Linker user values */
enum { LINK_OBJECTS = 1, LINK_OPTIONS, LINK_INFO_LOG, LINK_ERROR_LOG, LINK_NUV = LINK_ERROR_LOG };

/* cuda.core's LinkerOptions that nvJitLink takes, and their flags. */
static const cl_NamedOption linker_flags[] = {
  {"lto", CL_OPT_BOOL, "-lto", NULL},
  {"link_time_optimization", CL_OPT_BOOL, "-lto", NULL},
  {"max_register_count", CL_OPT_INT, "-maxrregcount=", NULL},
  {"debug", CL_OPT_BOOL, "-g", NULL},
  {"lineinfo", CL_OPT_BOOL, "-lineinfo", NULL},
  {"ftz", CL_OPT_BOOL, "-ftz=1", "-ftz=0"},
  {"prec_div", CL_OPT_BOOL, "-prec-div=1", "-prec-div=0"},
  {"prec_sqrt", CL_OPT_BOOL, "-prec-sqrt=1", "-prec-sqrt=0"},
  {"fma", CL_OPT_BOOL, "-fma=1", "-fma=0"},
  {"optimization_level", CL_OPT_INT, "-O", NULL},
  {"verbose", CL_OPT_BOOL, "-verbose", NULL},
  {"time", CL_OPT_BOOL, "-time", NULL},
};
#define NFLAGS (sizeof linker_flags / sizeof linker_flags[0])

static const char *const linker_options[] = {
  "arch", "lto", "link_time_optimization", "max_register_count", "debug", "lineinfo", "ftz",
  "prec_div", "prec_sqrt", "fma", "optimization_level", "verbose", "time", NULL
};

static const nvJitLinkInputType input_types[CL_NKINDS] = {
  NVJITLINK_INPUT_CUBIN, NVJITLINK_INPUT_PTX, NVJITLINK_INPUT_FATBIN, NVJITLINK_INPUT_LTOIR,
  NVJITLINK_INPUT_OBJECT, NVJITLINK_INPUT_LIBRARY,
};

static const char *result_name(nvJitLinkResult r)
{
  static const char *const names[] = {
    "NVJITLINK_SUCCESS", "NVJITLINK_ERROR_UNRECOGNIZED_OPTION", "NVJITLINK_ERROR_MISSING_ARCH",
    "NVJITLINK_ERROR_INVALID_INPUT", "NVJITLINK_ERROR_PTX_COMPILE",
    "NVJITLINK_ERROR_NVVM_COMPILE", "NVJITLINK_ERROR_INTERNAL", "NVJITLINK_ERROR_THREADPOOL",
    "NVJITLINK_ERROR_UNRECOGNIZED_INPUT", "NVJITLINK_ERROR_FINALIZE",
    "NVJITLINK_ERROR_NULL_INPUT", "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS",
    "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE", "NVJITLINK_ERROR_ARCH_MISMATCH",
    "NVJITLINK_ERROR_OUTDATED_LIBRARY", "NVJITLINK_ERROR_MISSING_FATBIN",
    "NVJITLINK_ERROR_UNRECOGNIZED_ARCH", "NVJITLINK_ERROR_UNSUPPORTED_ARCH",
    "NVJITLINK_ERROR_LTO_NOT_ENABLED",
  };
  return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "NVJITLINK_ERROR_UNKNOWN";
}

/* --- construction ------------------------------------------------------------ */

static Linker *check_linker(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_LINKER);
}

/* Push a copy of the list of ObjectCodes at i, each checked. */
static void push_objects(lua_State *L, int i)
{
  luaL_checktype(L, i, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, i);
  luaL_argcheck(L, n > 0, i, "a list of cuda.ObjectCode expected, got an empty table");
  lua_createtable(L, (int)n, 0);
  for (lua_Integer k = 1; k <= n; k++) {
    lua_rawgeti(L, i, k);
    if (!luaL_testudata(L, -1, CL_OBJECTCODE))
      luaL_argerror(L, i, lua_pushfstring(L, "item %I is a %s, not a cuda.ObjectCode", k,
                                          luaL_typename(L, -1)));
    cl_check_objectcode(L, -1);                   /* open */
    lua_rawseti(L, -2, k);
  }
}

/* cuda.Linker(objects [, options]) */
static int cuda_linker(lua_State *L)
{
  cl_check_nargs(L, 2);
  lua_settop(L, 2);
  cl_check_options(L, 2, linker_options);
  push_objects(L, 1);                             /* 3 */
  lua_newtable(L);                                /* 4: the nvJitLink arguments */
  lua_pushfstring(L, "-arch=%s", cl_push_arch(L, 2, "cuda.Linker"));
  lua_rawseti(L, 4, 1);
  lua_pop(L, 1);
  cl_add_named_options(L, 2, 4, linker_flags, NFLAGS);
  Linker *k = lua_newuserdatauv(L, sizeof *k, LINK_NUV);
  memset(k, 0, sizeof *k);
  k->lto = cl_opt_boolean(L, 2, "lto", 0) || cl_opt_boolean(L, 2, "link_time_optimization", 0);
  luaL_setmetatable(L, CL_LINKER);
  lua_pushvalue(L, 3);
  lua_setiuservalue(L, -2, LINK_OBJECTS);
  lua_pushvalue(L, 4);
  lua_setiuservalue(L, -2, LINK_OPTIONS);
  return 1;
}

/* --- linking ------------------------------------------------------------------- */

/* An nvJitLink handle and the names of its inputs: nvJitLink keeps the
 * name pointers nvJitLinkAddData is given (its logs quote them) until the
 * handle is destroyed, so they live in the guard, which __gc destroys the
 * handle before freeing. "object 9223372036854775807 (library)" fits. */
#define INPUT_NAME_SIZE 48
typedef struct Guard {
  nvJitLinkHandle h;
  char names[][INPUT_NAME_SIZE];
} Guard;

static int guard_gc(lua_State *L)
{
  Guard *g = lua_touserdata(L, 1);
  if (g->h)
    CL_NVJITLINK(nvJitLinkDestroy)(&g->h);
  g->h = NULL;
  return 0;
}

static Guard *push_guard(lua_State *L, size_t ninputs)
{
  Guard *g = lua_newuserdatauv(L, sizeof *g + ninputs * INPUT_NAME_SIZE, 0);
  g->h = NULL;
  luaL_setmetatable(L, NVJITLINK_GUARD);
  return g;
}

/* Push one of the handle's logs, without the trailing NUL. */
static void push_log(lua_State *L, nvJitLinkHandle h, int info)
{
  size_t size = 0;
  nvJitLinkResult r = info ? CL_NVJITLINK(nvJitLinkGetInfoLogSize)(h, &size)
                           : CL_NVJITLINK(nvJitLinkGetErrorLogSize)(h, &size);
  if (r != NVJITLINK_SUCCESS || size <= 1) {
    lua_pushliteral(L, "");
    return;
  }
  char *buf = lua_newuserdatauv(L, size, 0);
  r = info ? CL_NVJITLINK(nvJitLinkGetInfoLog)(h, buf) : CL_NVJITLINK(nvJitLinkGetErrorLog)(h, buf);
  lua_pushlstring(L, buf, r == NVJITLINK_SUCCESS ? strnlen(buf, size) : 0);
  lua_remove(L, -2);
}

/* Keep the logs of h as the linker's (index 1). */
static void keep_logs(lua_State *L, nvJitLinkHandle h)
{
  push_log(L, h, 1);
  lua_setiuservalue(L, 1, LINK_INFO_LOG);
  push_log(L, h, 0);
  lua_setiuservalue(L, 1, LINK_ERROR_LOG);
}

/* A failed call: a cuda.Error whose message carries the error log, with
 * the log as err.log. */
static int raise_link_error(lua_State *L, nvJitLinkHandle h, nvJitLinkResult r, const char *api)
{
  if (h)
    keep_logs(L, h);
  lua_getiuservalue(L, 1, LINK_ERROR_LOG);
  const char *log = lua_tostring(L, -1);
  const char *message = lua_pushfstring(L, "linking failed: %s", *log ? log : result_name(r));
  cl_push_error(L, (int)r, result_name(r), api, message);
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "log");
  return lua_error(L);
}

/* Each object is checked just before nvJitLink is given its code: nothing
 * in between runs Lua. */
static void add_objects(lua_State *L, Guard *g)
{
  lua_getiuservalue(L, 1, LINK_OBJECTS);
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  for (lua_Integer i = 1; i <= n; i++) {
    size_t len;
    char *name = g->names[i - 1];
    lua_rawgeti(L, -1, i);
    cl_ObjectCode *o = cl_check_objectcode(L, -1);
    cl_objectcode_push_code(L, -1);
    const char *code = lua_tolstring(L, -1, &len);
    snprintf(name, INPUT_NAME_SIZE, "object %lld (%s)", (long long)i, cl_code_kinds[o->kind]);
    nvJitLinkResult r = CL_NVJITLINK(nvJitLinkAddData)(g->h, input_types[o->kind], code, len, name);
    if (r != NVJITLINK_SUCCESS)
      raise_link_error(L, g->h, r, "nvJitLinkAddData");
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
}

static void push_linked(lua_State *L, nvJitLinkHandle h, int target)
{
  size_t size = 0;
  int cubin = target == CL_CUBIN;
  nvJitLinkResult r = cubin ? CL_NVJITLINK(nvJitLinkGetLinkedCubinSize)(h, &size)
                            : CL_NVJITLINK(nvJitLinkGetLinkedPtxSize)(h, &size);
  if (r != NVJITLINK_SUCCESS)
    raise_link_error(L, h, r, cubin ? "nvJitLinkGetLinkedCubinSize" : "nvJitLinkGetLinkedPtxSize");
  char *buf = lua_newuserdatauv(L, size ? size : 1, 0);
  r = cubin ? CL_NVJITLINK(nvJitLinkGetLinkedCubin)(h, buf)
            : CL_NVJITLINK(nvJitLinkGetLinkedPtx)(h, buf);
  if (r != NVJITLINK_SUCCESS)
    raise_link_error(L, h, r, cubin ? "nvJitLinkGetLinkedCubin" : "nvJitLinkGetLinkedPtx");
  if (cl_is_blank(buf, size))
    luaL_error(L, "nvJitLink linked no %s: its output is empty", cubin ? "cubin" : "PTX");
  lua_pushlstring(L, buf, cubin ? size : strnlen(buf, size));
  lua_remove(L, -2);
}

/* linker:link("cubin" | "ptx") -> cuda.ObjectCode */
static int linker_link(lua_State *L)
{
  static const char *const targets[] = {"cubin", "ptx", NULL};
  luaL_checkudata(L, 1, CL_LINKER);
  int target = luaL_checkoption(L, 2, NULL, targets) == 0 ? CL_CUBIN : CL_PTX;
  cl_check_nargs(L, 2);
  Linker *k = check_linker(L, 1);                 /* its last use is k->lto */
  if (target == CL_PTX && !k->lto)
    return luaL_error(L, "link(\"ptx\") needs the option lto = true: nvJitLink makes PTX only "
                      "from LTO-IR");
  cl_toolkit_load(L, CL_LIB_NVJITLINK);
  lua_settop(L, 2);
  lua_getiuservalue(L, 1, LINK_OPTIONS);          /* 3 */
  int n = (int)lua_rawlen(L, 3);
  const char **argv = lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *argv, 0);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, 3, i + 1);
    argv[i] = lua_tostring(L, -1);                /* anchored in the options list */
    lua_pop(L, 1);
  }
  if (target == CL_PTX)
    argv[n++] = "-ptx";                           /* nvJitLink's output is chosen up front */
  lua_getiuservalue(L, 1, LINK_OBJECTS);          /* fixed when the linker was made */
  Guard *g = push_guard(L, lua_rawlen(L, -1));
  nvJitLinkResult r = CL_NVJITLINK(nvJitLinkCreate)(&g->h, (uint32_t)n, argv);
  if (r != NVJITLINK_SUCCESS)
    raise_link_error(L, g->h, r, "nvJitLinkCreate");
  add_objects(L, g);
  r = CL_NVJITLINK(nvJitLinkComplete)(g->h);
  if (r != NVJITLINK_SUCCESS)
    raise_link_error(L, g->h, r, "nvJitLinkComplete");
  push_linked(L, g->h, target);
  keep_logs(L, g->h);
  CL_NVJITLINK(nvJitLinkDestroy)(&g->h);          /* now, not at the next GC */
  g->h = NULL;
  cl_push_objectcode(L, -1, target);              /* checked, as every ObjectCode */
  return 1;
}

/* --- the rest of the handle ------------------------------------------------------ */

static int linker_close(lua_State *L)
{
  Linker *k = luaL_checkudata(L, 1, CL_LINKER);
  k->closed = 1;
  return 0;
}

static int linker_tostring(lua_State *L)
{
  Linker *k = luaL_checkudata(L, 1, CL_LINKER);
  if (k->closed)
    return cl_push_closed_name(L, CL_LINKER);
  lua_getiuservalue(L, 1, LINK_OBJECTS);
  lua_pushfstring(L, "cuda.Linker(%I objects)", (lua_Integer)lua_rawlen(L, -1));
  return 1;
}

/* A copy of a list user value, so callers cannot change the linker. */
static void push_list_copy(lua_State *L, int uv)
{
  lua_getiuservalue(L, 1, uv);
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, -2, i);
    lua_rawseti(L, -2, i);
  }
}

/* The info log, then the error log; nil before the first link. */
static void push_whole_log(lua_State *L)
{
  if (lua_getiuservalue(L, 1, LINK_INFO_LOG) == LUA_TNIL)
    return;
  lua_getiuservalue(L, 1, LINK_ERROR_LOG);
  lua_concat(L, 2);
}

static int linker_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);
  check_linker(L, 1);
  if (strcmp(key, "log") == 0)
    push_whole_log(L);
  else if (strcmp(key, "info_log") == 0)
    lua_getiuservalue(L, 1, LINK_INFO_LOG);
  else if (strcmp(key, "error_log") == 0)
    lua_getiuservalue(L, 1, LINK_ERROR_LOG);
  else if (strcmp(key, "options") == 0)
    push_list_copy(L, LINK_OPTIONS);
  else if (strcmp(key, "objects") == 0)
    push_list_copy(L, LINK_OBJECTS);
  else
    lua_pushnil(L);
  return 1;
}

void cl_open_linker(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", linker_close}, {"__close", linker_close}, {"__tostring", linker_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"link", linker_link}, {"close", linker_close}, {NULL, NULL}
  };
  cl_new_type(L, CL_LINKER, meta, methods, linker_fields);
  luaL_newmetatable(L, NVJITLINK_GUARD);
  lua_pushcfunction(L, guard_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_pushcfunction(L, cuda_linker);
  lua_setfield(L, -2, "Linker");
}
