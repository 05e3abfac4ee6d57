/* SPDX-License-Identifier: MIT */
/* program.c: cuda.Program (NVRTC), its compile options, the compile cache
 * glue, and cuda.find_kernel's entry point.
 *
 * A Program holds its source and the NVRTC argument list, resolved once at
 * construction (the default arch comes from the current device); compile
 * hashes both into a key and asks the compile cache (cache.c) before
 * running NVRTC, so a cache hit costs a file read and no compiler. What it
 * compiles to is a cuda.ObjectCode (module.c). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cl.h"
#include "toolkit.h"

#ifndef CUDALUA_CUDA_INCLUDE
#define CUDALUA_CUDA_INCLUDE "/usr/local/cuda/include"
#endif

#define NVRTC_GUARD "cuda.NVRTCProgram"

typedef struct Program {
  int closed;
  int is_ptx;                   /* the source is PTX: nothing to compile */
  int cached;                   /* the last compile came from the cache */
  int compiled;                 /* compile has run at least once */
} Program;

/* Program user values */
enum { PROG_SOURCE = 1, PROG_OPTIONS, PROG_NAME, PROG_LOG, PROG_NUV = PROG_LOG };

/* --- NVRTC options ---------------------------------------------------------- */

/* The named options, cuda.core's ProgramOptions, and the NVRTC flag each
 * maps to (see cl_NamedOption). arch, defines, name and extra are handled
 * apart. */
static const cl_NamedOption named_options[] = {
  {"std", CL_OPT_STRING, "--std=", NULL},
  {"relocatable_device_code", CL_OPT_BOOL, "--relocatable-device-code=true",
   "--relocatable-device-code=false"},
  {"extensible_whole_program", CL_OPT_BOOL, "--extensible-whole-program", NULL},
  {"debug", CL_OPT_BOOL, "--device-debug", NULL},
  {"lineinfo", CL_OPT_BOOL, "--generate-line-info", NULL},
  {"device_code_optimize", CL_OPT_BOOL, "--dopt=on", "--dopt=off"},
  {"ptxas_options", CL_OPT_STRINGS, "--ptxas-options=", NULL},
  {"max_register_count", CL_OPT_INT, "--maxrregcount=", NULL},
  {"ftz", CL_OPT_BOOL, "--ftz=true", "--ftz=false"},
  {"prec_sqrt", CL_OPT_BOOL, "--prec-sqrt=true", "--prec-sqrt=false"},
  {"prec_div", CL_OPT_BOOL, "--prec-div=true", "--prec-div=false"},
  {"fma", CL_OPT_BOOL, "--fmad=true", "--fmad=false"},
  {"fast_math", CL_OPT_BOOL, "--use_fast_math", NULL},
  {"use_fast_math", CL_OPT_BOOL, "--use_fast_math", NULL},
  {"extra_device_vectorization", CL_OPT_BOOL, "--extra-device-vectorization", NULL},
  {"link_time_optimization", CL_OPT_BOOL, "--dlink-time-opt", NULL},
  {"gen_opt_lto", CL_OPT_BOOL, "--gen-opt-lto", NULL},
  {"undefine_macro", CL_OPT_STRINGS, "--undefine-macro=", NULL},
  {"include_path", CL_OPT_STRINGS, "--include-path=", NULL},
  {"pre_include", CL_OPT_STRINGS, "--pre-include=", NULL},
  {"no_source_include", CL_OPT_BOOL, "--no-source-include", NULL},
  {"builtin_move_forward", CL_OPT_BOOL, "--builtin-move-forward=true",
   "--builtin-move-forward=false"},
  {"builtin_initializer_list", CL_OPT_BOOL, "--builtin-initializer-list=true",
   "--builtin-initializer-list=false"},
  {"disable_warnings", CL_OPT_BOOL, "--disable-warnings", NULL},
  {"restrict", CL_OPT_BOOL, "--restrict", NULL},
  {"device_as_default_execution_space", CL_OPT_BOOL, "--device-as-default-execution-space", NULL},
  {"device_int128", CL_OPT_BOOL, "--device-int128", NULL},
  {"optimization_info", CL_OPT_STRING, "--optimization-info=", NULL},
  {"no_display_error_number", CL_OPT_BOOL, "--no-display-error-number", NULL},
  {"diag_error", CL_OPT_INTS, "--diag-error=", NULL},
  {"diag_suppress", CL_OPT_INTS, "--diag-suppress=", NULL},
  {"diag_warn", CL_OPT_INTS, "--diag-warn=", NULL},
  {"brief_diagnostics", CL_OPT_BOOL, "--brief-diagnostics=true", "--brief-diagnostics=false"},
  {"time", CL_OPT_STRING, "--time=", NULL},
  {"split_compile", CL_OPT_INT, "--split-compile=", NULL},
  {"fdevice_syntax_only", CL_OPT_BOOL, "--fdevice-syntax-only", NULL},
  {"minimal", CL_OPT_BOOL, "--minimal", NULL},
  {"no_cache", CL_OPT_BOOL, "--no-cache", NULL},
};
#define NNAMED (sizeof named_options / sizeof named_options[0])

/* Every key cuda.Program takes, for cl_check_options. */
static const char *const *program_options(void)
{
  static const char *names[NNAMED + 5];
  if (!names[0]) {
    static const char *const apart[] = {"arch", "defines", "extra", "name"};
    for (size_t i = 0; i < 4; i++)
      names[i] = apart[i];
    for (size_t i = 0; i < NNAMED; i++)
      names[4 + i] = named_options[i].name;
  }
  return names;
}

static void add_option(lua_State *L, int list, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  lua_rawseti(L, list, (lua_Integer)lua_rawlen(L, list) + 1);
}

/* "sm_XY" of the current device, pushed; raises, saying arch is needed,
 * when there is none. */
static const char *push_device_arch(lua_State *L, const char *who)
{
  char why[512];
  int count = 0;
  if (!cl_driver_try_load(why, sizeof why))
    luaL_error(L, "%s needs the option 'arch' (such as \"sm_80\") when there is no "
               "CUDA device to take it from: %s", who, why);
  if (CL_CALL(cuDeviceGetCount, (&count)) != CUDA_SUCCESS || count == 0)
    luaL_error(L, "%s needs the option 'arch' (such as \"sm_80\") when there is no "
               "CUDA device to take it from: no CUDA device found", who);
  cl_Device *d = cl_push_current_device(L);     /* anchored in the registry */
  lua_pop(L, 1);
  return lua_pushfstring(L, "sm_%d%d", d->cc_major, d->cc_minor);
}

const char *cl_push_arch(lua_State *L, int opti, const char *who)
{
  const char *arch = cl_opt_string(L, opti, "arch", NULL);   /* pushed */
  if (arch == NULL) {
    lua_pop(L, 1);
    return push_device_arch(L, who);
  }
  if (arch[0] >= '0' && arch[0] <= '9')
    lua_pushfstring(L, "sm_%s", arch);            /* "90" means "sm_90" */
  else
    lua_pushvalue(L, -1);
  lua_remove(L, -2);
  return lua_tostring(L, -1);
}

static void add_arch(lua_State *L, int opti, int list, int is_ptx)
{
  int has_arch = cl_opt_string(L, opti, "arch", NULL) != NULL;
  lua_pop(L, 1);
  if (is_ptx && !has_arch)
    return;                                       /* PTX is not compiled */
  add_option(L, list, "--gpu-architecture=%s", cl_push_arch(L, opti, "cuda.Program"));
  lua_pop(L, 1);
}

/* Push the option's table and return 1, or 0 (pushing nothing) when absent. */
static int get_table_option(lua_State *L, int opti, const char *field, const char *what)
{
  if (lua_isnoneornil(L, opti))
    return 0;
  if (lua_getfield(L, opti, field) == LUA_TNIL) {
    lua_pop(L, 1);
    return 0;
  }
  if (!lua_istable(L, -1))
    luaL_argerror(L, opti, lua_pushfstring(L, "field '%s' must be %s, got %s", field, what,
                                           luaL_typename(L, -1)));
  return 1;
}

/* A list of strings (or of integers, want_int), each added with prefix. */
static void add_list(lua_State *L, int opti, int list, const char *field, const char *prefix,
                     int want_int)
{
  const char *what = want_int ? "integers" : "strings";
  if (!get_table_option(L, opti, field, want_int ? "a list of integers" : "a list of strings"))
    return;
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  for (lua_Integer i = 1; i <= n; i++) {
    int type = lua_rawgeti(L, -1, i);
    if (want_int ? !lua_isinteger(L, -1) : type != LUA_TSTRING)
      luaL_argerror(L, opti, lua_pushfstring(L, "field '%s' must be a list of %s "
                                             "(item %I is a %s)", field, what, i,
                                             luaL_typename(L, -1)));
    add_option(L, list, "%s%s", prefix, lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

static void add_named_option(lua_State *L, int opti, int list, const cl_NamedOption *o)
{
  const char *s = NULL;
  int v;
  lua_Integer n;
  switch (o->type) {
  case CL_OPT_BOOL:
    v = cl_opt_boolean(L, opti, o->name, -1);     /* -1: not given */
    s = v < 0 ? NULL : v ? o->flag : o->on_false;
    if (s)
      add_option(L, list, "%s", s);
    break;
  case CL_OPT_INT:
    n = cl_opt_integer(L, opti, o->name, LUA_MININTEGER);
    if (n == LUA_MININTEGER)
      break;
    if (n < 0)
      luaL_argerror(L, opti, lua_pushfstring(L, "field '%s' must be >= 0", o->name));
    add_option(L, list, "%s%I", o->flag, n);
    break;
  case CL_OPT_STRING:
    s = cl_opt_string(L, opti, o->name, NULL);
    if (s)
      add_option(L, list, "%s%s", o->flag, s);
    lua_pop(L, 1);
    break;
  case CL_OPT_STRINGS:
  case CL_OPT_INTS:
    add_list(L, opti, list, o->name, o->flag, o->type == CL_OPT_INTS);
    break;
  }
}

static int is_macro_char(char c, int first)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         (!first && c >= '0' && c <= '9');
}

static int is_macro_name(const char *s)
{
  if (!is_macro_char(*s, 1))
    return 0;
  while (*++s)
    if (!is_macro_char(*s, 0))
      return 0;
  return 1;
}

/* Push "-DNAME=VALUE" for the pair on the stack (name at -2, value at -1);
 * returns 0, pushing nothing, for false (not defined). */
static int push_define(lua_State *L, int opti)
{
  const char *name = lua_tostring(L, -2);
  char num[64];
  switch (lua_type(L, -1)) {
  case LUA_TSTRING:
    lua_pushfstring(L, "-D%s=%s", name, lua_tostring(L, -1));
    return 1;
  case LUA_TNUMBER:
    if (lua_isinteger(L, -1))
      snprintf(num, sizeof num, LUA_INTEGER_FMT, (LUAI_UACINT)lua_tointeger(L, -1));
    else
      snprintf(num, sizeof num, "%.17g", (double)lua_tonumber(L, -1));
    lua_pushfstring(L, "-D%s=%s", name, num);
    return 1;
  case LUA_TBOOLEAN:
    if (!lua_toboolean(L, -1))
      return 0;
    lua_pushfstring(L, "-D%s", name);
    return 1;
  default:
    return luaL_argerror(L, opti, lua_pushfstring(L, "field 'defines.%s' must be a string, "
                                                  "number or boolean, got %s", name,
                                                  luaL_typename(L, -1)));
  }
}

static int compare_strings(const void *a, const void *b)
{
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void cl_add_named_options(lua_State *L, int opti, int list, const cl_NamedOption *o, size_t n)
{
  for (size_t i = 0; i < n; i++)
    add_named_option(L, opti, list, &o[i]);
}

/* defines = {NAME = value}: added sorted by name, so the same table gives
 * the same arguments (and the same cache key) in every run. */
static void add_defines(lua_State *L, int opti, int list)
{
  if (!get_table_option(L, opti, "defines", "a table of macro names to values"))
    return;
  int defs = lua_gettop(L);
  lua_newtable(L);
  int found = defs + 1, count = 0;
  lua_pushnil(L);
  while (lua_next(L, defs)) {
    if (lua_type(L, -2) != LUA_TSTRING || !is_macro_name(lua_tostring(L, -2)))
      luaL_argerror(L, opti, lua_pushfstring(L, "field 'defines' must map macro names to "
                                             "values (bad key: %s)", luaL_tolstring(L, -2, NULL)));
    if (push_define(L, opti))
      lua_rawseti(L, found, ++count);
    lua_pop(L, 1);
  }
  const char **sorted = lua_newuserdatauv(L, (size_t)(count ? count : 1) * sizeof *sorted, 0);
  for (int i = 0; i < count; i++) {
    lua_rawgeti(L, found, i + 1);
    sorted[i] = lua_tostring(L, -1);              /* anchored in found */
    lua_pop(L, 1);
  }
  qsort(sorted, (size_t)count, sizeof *sorted, compare_strings);
  for (int i = 0; i < count; i++)
    add_option(L, list, "%s", sorted[i]);
  lua_settop(L, defs - 1);
}

static int is_directory(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Push the NVRTC argument list (a sequence of strings) for the options. */
static void push_nvrtc_options(lua_State *L, int opti, int is_ptx)
{
  int base = lua_gettop(L);
  lua_newtable(L);
  int list = base + 1;
  add_arch(L, opti, list, is_ptx);
  cl_add_named_options(L, opti, list, named_options, NNAMED);
  /* CUDA's headers always, and CCCL's (<cuda/std/...>) where they live apart */
  add_option(L, list, "--include-path=%s", CUDALUA_CUDA_INCLUDE);
  if (is_directory(CUDALUA_CUDA_INCLUDE "/cccl"))
    add_option(L, list, "--include-path=%s", CUDALUA_CUDA_INCLUDE "/cccl");
  add_defines(L, opti, list);
  add_list(L, opti, list, "extra", "", 0);
  lua_settop(L, list);
}

/* --- cuda.Program ------------------------------------------------------------ */

static Program *check_program(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_PROGRAM);
}

static int check_code_type(lua_State *L, int i)
{
  if (lua_type(L, i) != LUA_TSTRING)
    return luaL_typeerror(L, i, "string (\"c++\" or \"ptx\")");
  const char *type = lua_tostring(L, i);
  if (strcmp(type, "c++") == 0)
    return 0;
  if (strcmp(type, "ptx") == 0)
    return 1;
  return luaL_argerror(L, i, lua_pushfstring(L, "code type must be \"c++\" or \"ptx\", got '%s'",
                                             type));
}

/* Check the source at si (of code type is_ptx); raises for bad ones. */
static void check_source(lua_State *L, int si, int is_ptx)
{
  char why[160];
  size_t len;
  if (lua_type(L, si) != LUA_TSTRING)
    luaL_typeerror(L, si, "string");
  const char *source = lua_tolstring(L, si, &len);
  luaL_argcheck(L, strlen(source) == len, si, "source contains a NUL byte");
  int kind = CL_PTX;
  if (is_ptx && cl_code_problem(source, len, &kind, why, sizeof why))
    luaL_argerror(L, si, why);
}

/* cuda.Program(source, "c++" | "ptx" [, options]) */
static int cuda_program(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TSTRING);   /* the source first: its absence is the likelier mistake */
  int is_ptx = check_code_type(L, 2);
  check_source(L, 1, is_ptx);
  cl_check_nargs(L, 3);
  lua_settop(L, 3);
  cl_check_options(L, 3, program_options());
  const char *name = cl_opt_string(L, 3, "name", "default_program");
  push_nvrtc_options(L, 3, is_ptx);
  Program *p = lua_newuserdatauv(L, sizeof *p, PROG_NUV);
  memset(p, 0, sizeof *p);
  p->is_ptx = is_ptx;
  luaL_setmetatable(L, CL_PROGRAM);
  lua_insert(L, -2);
  lua_setiuservalue(L, -2, PROG_OPTIONS);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, PROG_SOURCE);
  lua_pushstring(L, name);
  lua_setiuservalue(L, -2, PROG_NAME);
  return 1;
}

/* --- cache keys ------------------------------------------------------------- */

/* NVRTC's version: the library's when it can be opened, else the one of the
 * headers we were built with, so a machine with only the driver finds the
 * entries a matching toolkit wrote. It never changes within a process. */
static void nvrtc_version(int *major, int *minor)
{
  static int cached_major = -1, cached_minor = -1;
  if (cached_major < 0 && (!cl_toolkit_try_load(CL_LIB_NVRTC, NULL, 0) ||
                           CL_NVRTC(nvrtcVersion)(&cached_major, &cached_minor) != NVRTC_SUCCESS)) {
    cached_major = CUDA_VERSION / 1000;
    cached_minor = CUDA_VERSION % 1000 / 10;
  }
  *major = cached_major;
  *minor = cached_minor;
}

/* Length, then bytes: no two different field lists give the same stream. */
static void add_field(luaL_Buffer *b, const char *s, size_t n)
{
  char len[8];
  for (int i = 0; i < 8; i++)
    len[i] = (char)((uint64_t)n >> (8 * i));
  luaL_addlstring(b, len, sizeof len);
  luaL_addlstring(b, s, n);
}

static void add_list_fields(luaL_Buffer *b, lua_State *L, int ti)
{
  lua_Integer n = (lua_Integer)lua_rawlen(L, ti);
  for (lua_Integer i = 1; i <= n; i++) {
    size_t len;
    lua_rawgeti(L, ti, i);
    const char *s = lua_tolstring(L, -1, &len);
    lua_pop(L, 1);                                /* anchored in the list */
    add_field(b, s, len);
  }
}

/* Push the cache key, 64 hex digits: SHA-256 of everything that decides
 * NVRTC's output (see cache.c for what it leaves out): the source at si,
 * the name at ni, the NVRTC argument list at oi, the target and the list of
 * name expressions at ei. */
static void push_key(lua_State *L, int si, int ni, int oi, int target, int ei)
{
  char version[32], hex[2 * CL_HASH_SIZE + 1];
  unsigned char digest[CL_HASH_SIZE];
  int major, minor;
  size_t len;
  luaL_Buffer b;
  si = lua_absindex(L, si), ni = lua_absindex(L, ni);
  oi = lua_absindex(L, oi), ei = lua_absindex(L, ei);
  nvrtc_version(&major, &minor);
  snprintf(version, sizeof version, "nvrtc %d.%d", major, minor);
  luaL_buffinit(L, &b);
  add_field(&b, "cudalua compile v2", 18);
  add_field(&b, version, strlen(version));
  add_field(&b, cl_code_kinds[target], strlen(cl_code_kinds[target]));
  const char *s = lua_tolstring(L, ni, &len);
  add_field(&b, s, len);
  s = lua_tolstring(L, si, &len);
  add_field(&b, s, len);
  add_list_fields(&b, L, oi);
  add_field(&b, "names", 5);
  add_list_fields(&b, L, ei);
  luaL_pushresult(&b);
  s = lua_tolstring(L, -1, &len);
  cl_sha256(s, len, digest);
  cl_hex(digest, CL_HASH_SIZE, hex);
  lua_pop(L, 1);
  lua_pushstring(L, hex);
}

/* --- NVRTC ---------------------------------------------------------------------- */

/* An nvrtcProgram owned by a userdata, so a Lua error cannot leak it. */
static int guard_gc(lua_State *L)
{
  nvrtcProgram *g = luaL_checkudata(L, 1, NVRTC_GUARD);
  if (*g)
    CL_NVRTC(nvrtcDestroyProgram)(g);
  *g = NULL;
  return 0;
}

static nvrtcProgram *push_guard(lua_State *L)
{
  nvrtcProgram *g = lua_newuserdatauv(L, sizeof *g, 0);
  *g = NULL;
  luaL_setmetatable(L, NVRTC_GUARD);
  return g;
}

/* Push the program's log, without NVRTC's trailing NUL. */
static void push_log(lua_State *L, nvrtcProgram prog)
{
  size_t size = 0;
  if (CL_NVRTC(nvrtcGetProgramLogSize)(prog, &size) != NVRTC_SUCCESS || size <= 1) {
    lua_pushliteral(L, "");
    return;
  }
  char *buf = lua_newuserdatauv(L, size, 0);
  if (CL_NVRTC(nvrtcGetProgramLog)(prog, buf) != NVRTC_SUCCESS)
    size = 1;
  lua_pushlstring(L, buf, strnlen(buf, size));
  lua_remove(L, -2);
}

static int raise_nvrtc(lua_State *L, nvrtcResult r, const char *api, const char *message)
{
  cl_push_error(L, (int)r, CL_NVRTC(nvrtcGetErrorString)(r), api, message);
  return lua_error(L);
}

/* A failed compile: a cuda.Error whose message is the whole log. The log
 * (at the top) is also kept as prog.log and err.log. */
static int raise_compile_error(lua_State *L, nvrtcResult r)
{
  int logi = lua_gettop(L);
  size_t len;
  const char *log = lua_tolstring(L, logi, &len);
  const char *what = CL_NVRTC(nvrtcGetErrorString)(r);
  while (len > 0 && log[len - 1] == '\n')
    len--;
  lua_pushvalue(L, logi);
  lua_setiuservalue(L, 1, PROG_LOG);
  lua_getiuservalue(L, 1, PROG_NAME);
  lua_pushfstring(L, "compiling %s failed:\n", lua_tostring(L, -1));
  if (len > 0)
    lua_pushlstring(L, log, len);
  else
    lua_pushstring(L, what);
  lua_concat(L, 2);
  cl_push_error(L, (int)r, what, "nvrtcCompileProgram", lua_tostring(L, -1));
  lua_pushvalue(L, logi);
  lua_setfield(L, -2, "log");
  return lua_error(L);
}

/* How to read each target's code out of NVRTC. */
typedef struct Getter {
  const char *size_name, *get_name;
  nvrtcResult (*size)(nvrtcProgram, size_t *);
  nvrtcResult (*get)(nvrtcProgram, char *);
  const char *empty;            /* why there is none, when the size is 0 */
} Getter;

static Getter getter(int target)
{
  if (target == CL_CUBIN)
    return (Getter){"nvrtcGetCUBINSize", "nvrtcGetCUBIN", CL_NVRTC(nvrtcGetCUBINSize),
                    CL_NVRTC(nvrtcGetCUBIN),
                    "no cubin: the option 'arch' names a virtual architecture (compute_XX), "
                    "or link_time_optimization is on; compile(\"cubin\") needs a real one "
                    "(sm_XX) without it, compile(\"ptx\") takes either"};
  if (target == CL_LTOIR)
    return (Getter){"nvrtcGetLTOIRSize", "nvrtcGetLTOIR", CL_NVRTC(nvrtcGetLTOIRSize),
                    CL_NVRTC(nvrtcGetLTOIR),
                    "no LTO-IR: compile(\"ltoir\") needs the option link_time_optimization = true"};
  return (Getter){"nvrtcGetPTXSize", "nvrtcGetPTX", CL_NVRTC(nvrtcGetPTXSize),
                  CL_NVRTC(nvrtcGetPTX),
                  "no PTX: with link_time_optimization NVRTC makes LTO-IR only; use "
                  "compile(\"ltoir\") and link it with cuda.Linker (lto = true), whose "
                  "link(\"ptx\") makes PTX of it"};
}

static void push_nvrtc_code(lua_State *L, nvrtcProgram prog, int target)
{
  Getter g = getter(target);
  size_t size = 0;
  nvrtcResult r = g.size(prog, &size);
  if (r != NVRTC_SUCCESS)
    raise_nvrtc(L, r, g.size_name, "cannot get the compiled code");
  if (size == 0)
    luaL_error(L, "%s", g.empty);
  char *buf = lua_newuserdatauv(L, size, 0);
  r = g.get(prog, buf);
  if (r != NVRTC_SUCCESS)
    raise_nvrtc(L, r, g.get_name, "cannot get the compiled code");
  if (cl_is_blank(buf, size))                    /* -dlto's PTX is a lone NUL */
    luaL_error(L, "%s", g.empty);
  lua_pushlstring(L, buf, target == CL_PTX ? strnlen(buf, size) : size);
  lua_remove(L, -2);
}

/* Push a table of each name expression in the list at ei to its lowered
 * name. */
static void push_lowered_names(lua_State *L, nvrtcProgram prog, int ei)
{
  lua_Integer n = (lua_Integer)lua_rawlen(L, ei);
  lua_createtable(L, 0, (int)n);
  for (lua_Integer i = 1; i <= n; i++) {
    const char *lowered = NULL;
    lua_rawgeti(L, ei, i);
    nvrtcResult r = CL_NVRTC(nvrtcGetLoweredName)(prog, lua_tostring(L, -1), &lowered);
    if (r != NVRTC_SUCCESS)
      raise_nvrtc(L, r, "nvrtcGetLoweredName", lua_pushfstring(L, "no lowered name for the "
                  "name expression '%s'", lua_tostring(L, -1)));
    lua_pushstring(L, lowered);
    lua_rawset(L, -3);
  }
}

/* Compile the program at index 1 with NVRTC, with the name expressions in
 * the list at ei; pushes the code, the log and the lowered names. */
static void nvrtc_compile(lua_State *L, int target, int ei)
{
  int base = lua_gettop(L);
  cl_toolkit_load(L, CL_LIB_NVRTC);
  lua_getiuservalue(L, 1, PROG_SOURCE);
  lua_getiuservalue(L, 1, PROG_NAME);
  lua_getiuservalue(L, 1, PROG_OPTIONS);
  int n = (int)lua_rawlen(L, -1);
  const char **argv = lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *argv, 0);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, base + 3, i + 1);
    argv[i] = lua_tostring(L, -1);                /* anchored in the options table */
    lua_pop(L, 1);
  }
  nvrtcProgram *prog = push_guard(L);
  nvrtcResult r = CL_NVRTC(nvrtcCreateProgram)(prog, lua_tostring(L, base + 1),
                                               lua_tostring(L, base + 2), 0, NULL, NULL);
  if (r != NVRTC_SUCCESS)
    raise_nvrtc(L, r, "nvrtcCreateProgram", "cannot create the NVRTC program");
  for (lua_Integer i = 1, m = (lua_Integer)lua_rawlen(L, ei); i <= m; i++) {
    lua_rawgeti(L, ei, i);
    r = CL_NVRTC(nvrtcAddNameExpression)(*prog, lua_tostring(L, -1));
    lua_pop(L, 1);
    if (r != NVRTC_SUCCESS)
      raise_nvrtc(L, r, "nvrtcAddNameExpression", "cannot add a name expression");
  }
  r = CL_NVRTC(nvrtcCompileProgram)(*prog, n, argv);
  push_log(L, *prog);
  if (r != NVRTC_SUCCESS)
    raise_compile_error(L, r);
  push_nvrtc_code(L, *prog, target);
  lua_insert(L, -2);                              /* code, log */
  push_lowered_names(L, *prog, ei);               /* code, log, names */
  CL_NVRTC(nvrtcDestroyProgram)(prog);            /* now, not at the next GC */
  *prog = NULL;
  lua_rotate(L, base + 1, 3);
  lua_settop(L, base + 3);
}

static int check_target(lua_State *L, int i)
{
  const char *target = luaL_checkstring(L, i);
  if (strcmp(target, "cubin") == 0)
    return CL_CUBIN;
  if (strcmp(target, "ptx") == 0)
    return CL_PTX;
  if (strcmp(target, "ltoir") == 0)
    return CL_LTOIR;
  return luaL_argerror(L, i, lua_pushfstring(L, "target must be \"cubin\", \"ptx\" or "
                                             "\"ltoir\", got '%s'", target));
}

/* The name_expressions option at opti, checked, as a list (empty when
 * absent), pushed. */
static void push_name_expressions(lua_State *L, int opti)
{
  if (!get_table_option(L, opti, "name_expressions", "a list of strings")) {
    lua_newtable(L);
    return;
  }
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_rawgeti(L, -2, i) != LUA_TSTRING || lua_rawlen(L, -1) == 0)
      luaL_argerror(L, opti, lua_pushfstring(L, "field 'name_expressions' must be a list of "
                                             "non-empty strings (item %I is a %s)", i,
                                             luaL_typename(L, -1)));
    lua_rawseti(L, -2, i);
  }
  lua_remove(L, -2);
}

/* PTX input is handed to the driver as it is: the driver JIT-compiles it
 * for the GPU when the library is loaded; cuda.Linker makes a cubin of it. */
static int compile_ptx_source(lua_State *L, Program *p, int target, int ei)
{
  if (target != CL_PTX)
    return luaL_error(L, "compile(\"%s\") of a PTX program is not supported: NVRTC compiles "
                      "C++ only; use compile(\"ptx\") (the driver JIT-compiles the PTX when its "
                      "kernels are first used), or link it with cuda.Linker",
                      cl_code_kinds[target]);
  if (lua_rawlen(L, ei) > 0)
    return luaL_error(L, "name_expressions need a C++ program: PTX has no templates");
  lua_pushliteral(L, "");
  lua_setiuservalue(L, 1, PROG_LOG);
  p->cached = 0;
  p->compiled = 1;
  lua_getiuservalue(L, 1, PROG_SOURCE);
  cl_push_objectcode(L, -1, CL_PTX);
  return 1;
}

/* Push the code, the log and the names table of the entry for the key at
 * keyi and return 1, or push nothing and return 0. */
static int cache_lookup(lua_State *L, cl_ProgramCache *c, int keyi, int target)
{
  size_t key_len, names_len;
  const char *key = lua_tolstring(L, keyi, &key_len);
  int kind = cl_cache_get(L, c, key, key_len);
  if (kind < 0)
    return 0;
  if (kind != target) {                           /* not ours: the key covers the target */
    lua_pop(L, 3);
    return 0;
  }
  const char *names = lua_tolstring(L, -1, &names_len);
  cl_push_names_table(L, names, names_len);
  lua_replace(L, -2);
  return 1;
}

/* The cache option at i: nil for the automatic cache (NULL when it is
 * off), else an open cuda.ProgramCache; with `open_only`, a closed one is
 * NULL instead of an error. */
static cl_ProgramCache *cache_option(lua_State *L, int i, int open_only)
{
  if (lua_isnil(L, i))
    return cl_default_cache();
  if (open_only) {
    cl_ProgramCache *c = luaL_checkudata(L, i, CL_PROGRAMCACHE);
    return c->closed ? NULL : c;
  }
  return cl_check_open(L, i, CL_PROGRAMCACHE);
}

/* prog:compile("cubin" | "ptx" | "ltoir" [, {name_expressions =, cache =}])
 * -> cuda.ObjectCode. The options are read first (the cache stays at 5,
 * anchored: an __index may have made it). The compile allocates, so the
 * cache is checked right before each use: a finalizer that closed it
 * meanwhile means the result is not stored. */
static int program_compile(lua_State *L)
{
  static const char *const known[] = {"name_expressions", "cache", NULL};
  luaL_checkudata(L, 1, CL_PROGRAM);
  int target = check_target(L, 2);
  cl_check_nargs(L, 3);
  lua_settop(L, 3);
  cl_check_options(L, 3, known);
  push_name_expressions(L, 3);                    /* 4 */
  if (lua_isnil(L, 3))
    lua_pushnil(L);                               /* 5: the cache option */
  else
    lua_getfield(L, 3, "cache");
  Program *p = check_program(L, 1);
  if (p->is_ptx)
    return compile_ptx_source(L, p, target, 4);
  lua_getiuservalue(L, 1, PROG_SOURCE);           /* 6 */
  lua_getiuservalue(L, 1, PROG_NAME);             /* 7 */
  lua_getiuservalue(L, 1, PROG_OPTIONS);          /* 8 */
  push_key(L, 6, 7, 8, target, 4);                /* 9 */
  cl_ProgramCache *cache = cache_option(L, 5, 0);
  int cached = cache && cache_lookup(L, cache, 9, target);
  if (!cached)
    nvrtc_compile(L, target, 4);                  /* 10 code, 11 log, 12 names */
  cl_push_objectcode(L, 10, target);              /* 13: the code is checked before it is stored */
  cl_objectcode_set_source(L, 13, 6);             /* extern "C" kernels' declarations */
  if (!cached && (cache = cache_option(L, 5, 1)) != NULL)
    cl_cache_put_lua(L, cache, 9, 10, target, 11, 12);
  p->cached = cached;
  p->compiled = 1;
  lua_pushvalue(L, 11);
  lua_setiuservalue(L, 1, PROG_LOG);
  if (lua_rawlen(L, 4) > 0)
    cl_objectcode_set_names(L, 13, 12);
  lua_pushvalue(L, 13);
  return 1;
}

/* cuda.program_cache_key(source, code_type, options, target [, name_expressions])
 * -> the key prog:compile uses, 64 hex digits */
static int cuda_program_cache_key(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TSTRING);
  int is_ptx = check_code_type(L, 2);
  check_source(L, 1, is_ptx);
  int target = check_target(L, 4);
  cl_check_nargs(L, 5);
  lua_settop(L, 5);
  cl_check_options(L, 3, program_options());
  cl_opt_string(L, 3, "name", "default_program");                      /* 6 */
  push_nvrtc_options(L, 3, is_ptx);                                    /* 7 */
  lua_createtable(L, 0, 1);
  lua_pushvalue(L, 5);
  lua_setfield(L, -2, "name_expressions");
  push_name_expressions(L, 8);                                         /* 9 */
  push_key(L, 1, 6, 7, target, 9);
  return 1;
}

static int program_close(lua_State *L)
{
  Program *p = luaL_checkudata(L, 1, CL_PROGRAM);
  p->closed = 1;
  return 0;
}

static int program_tostring(lua_State *L)
{
  Program *p = luaL_checkudata(L, 1, CL_PROGRAM);
  if (p->closed)
    return cl_push_closed_name(L, CL_PROGRAM);
  lua_getiuservalue(L, 1, PROG_NAME);
  lua_pushfstring(L, "cuda.Program(%s, %s)", p->is_ptx ? "ptx" : "c++", lua_tostring(L, -1));
  return 1;
}

/* A copy of the NVRTC arguments, so callers cannot change the program. */
static void push_options_copy(lua_State *L)
{
  lua_getiuservalue(L, 1, PROG_OPTIONS);
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, -2, i);
    lua_rawseti(L, -2, i);
  }
}

static int program_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);
  Program *p = check_program(L, 1);
  if (strcmp(key, "log") == 0)
    lua_getiuservalue(L, 1, PROG_LOG);
  else if (strcmp(key, "cached") == 0)
    lua_pushboolean(L, p->compiled && p->cached);
  else if (strcmp(key, "name") == 0)
    lua_getiuservalue(L, 1, PROG_NAME);
  else if (strcmp(key, "code_type") == 0)
    lua_pushstring(L, p->is_ptx ? "ptx" : "c++");
  else if (strcmp(key, "options") == 0)
    push_options_copy(L);
  else
    lua_pushnil(L);
  return 1;
}

/* --- cuda.find_kernel ---------------------------------------------------------- */

/* cuda.find_kernel(name) is cuda.kernels.find, written in Lua. It is
 * required on the first call, not here: cuda.kernels itself requires
 * "cuda". */
static int cuda_find_kernel(lua_State *L)
{
  int nargs = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "cuda.kernels");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "find");
  lua_replace(L, -2);
  lua_insert(L, 1);
  lua_call(L, nargs, 1);
  return 1;
}

/* --- registration -------------------------------------------------------------- */

void cl_open_program(lua_State *L)
{
  static const luaL_Reg program_meta[] = {
    {"__gc", program_close}, {"__close", program_close}, {"__tostring", program_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg program_methods[] = {
    {"compile", program_compile}, {"close", program_close}, {NULL, NULL}
  };
  static const luaL_Reg functions[] = {
    {"Program", cuda_program}, {"find_kernel", cuda_find_kernel},
    {"program_cache_key", cuda_program_cache_key}, {NULL, NULL}
  };
  cl_new_type(L, CL_PROGRAM, program_meta, program_methods, program_fields);
  luaL_newmetatable(L, NVRTC_GUARD);
  lua_pushcfunction(L, guard_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_setfuncs(L, functions, 0);
  lua_pushstring(L, cl_datadir);        /* where cuda.kernels finds kernels/ */
  lua_setfield(L, -2, "datadir");
}
