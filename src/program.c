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

#include <nvrtc.h>

#include "cl.h"

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

static const char *const program_options[] = {
  "arch", "std", "defines", "include_path", "lineinfo", "debug", "fast_math", "extra", "name",
  NULL
};

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
static const char *push_device_arch(lua_State *L)
{
  char why[512];
  int count = 0;
  if (!cl_driver_try_load(why, sizeof why))
    luaL_error(L, "cuda.Program needs the option 'arch' (such as \"sm_80\") when there is no "
               "CUDA device to take it from: %s", why);
  if (CL_CALL(cuDeviceGetCount, (&count)) != CUDA_SUCCESS || count == 0)
    luaL_error(L, "cuda.Program needs the option 'arch' (such as \"sm_80\") when there is no "
               "CUDA device to take it from: no CUDA device found");
  cl_Device *d = cl_push_current_device(L);     /* anchored in the registry */
  lua_pop(L, 1);
  return lua_pushfstring(L, "sm_%d%d", d->cc_major, d->cc_minor);
}

static void add_arch(lua_State *L, int opti, int list, int is_ptx)
{
  const char *arch = cl_opt_string(L, opti, "arch", NULL);
  if (arch && arch[0] >= '0' && arch[0] <= '9')
    arch = lua_pushfstring(L, "sm_%s", arch);     /* "90" means "sm_90" */
  else if (!arch && is_ptx)
    return;                                       /* PTX is not compiled */
  else if (!arch)
    arch = push_device_arch(L);
  add_option(L, list, "--gpu-architecture=%s", arch);
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

/* include_path and extra: lists of strings, added with prefix. */
static void add_string_list(lua_State *L, int opti, int list, const char *field,
                            const char *prefix)
{
  if (!get_table_option(L, opti, field, "a list of strings"))
    return;
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_rawgeti(L, -1, i) != LUA_TSTRING)
      luaL_argerror(L, opti, lua_pushfstring(L, "field '%s' must be a list of strings "
                                             "(item %I is a %s)", field, i,
                                             luaL_typename(L, -1)));
    add_option(L, list, "%s%s", prefix, lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
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
  const char *std = cl_opt_string(L, opti, "std", NULL);
  if (std)
    add_option(L, list, "--std=%s", std);
  if (cl_opt_boolean(L, opti, "lineinfo", 0))
    add_option(L, list, "--generate-line-info");
  if (cl_opt_boolean(L, opti, "debug", 0))
    add_option(L, list, "--device-debug");
  if (cl_opt_boolean(L, opti, "fast_math", 0))
    add_option(L, list, "--use_fast_math");
  add_string_list(L, opti, list, "include_path", "--include-path=");
  /* CUDA's headers always, and CCCL's (<cuda/std/...>) where they live apart */
  add_option(L, list, "--include-path=%s", CUDALUA_CUDA_INCLUDE);
  if (is_directory(CUDALUA_CUDA_INCLUDE "/cccl"))
    add_option(L, list, "--include-path=%s", CUDALUA_CUDA_INCLUDE "/cccl");
  add_defines(L, opti, list);
  add_string_list(L, opti, list, "extra", "");
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

/* cuda.Program(source, "c++" | "ptx" [, options]) */
static int cuda_program(lua_State *L)
{
  char why[160];
  size_t len;
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_typeerror(L, 1, "string");
  const char *source = lua_tolstring(L, 1, &len);
  int is_ptx = check_code_type(L, 2);
  lua_settop(L, 3);
  cl_check_options(L, 3, program_options);
  const char *name = cl_opt_string(L, 3, "name", "default_program");
  luaL_argcheck(L, strlen(source) == len, 1, "source contains a NUL byte");
  int kind = CL_PTX;
  if (is_ptx && cl_code_problem(source, len, &kind, why, sizeof why))
    return luaL_argerror(L, 1, why);
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

/* nvrtcVersion never changes within a process: ask once. */
static void nvrtc_version(int *major, int *minor)
{
  static int cached_major = -1, cached_minor = -1;
  if (cached_major < 0 && nvrtcVersion(&cached_major, &cached_minor) != NVRTC_SUCCESS)
    cached_major = cached_minor = 0;
  *major = cached_major;
  *minor = cached_minor;
}

/* Length, then bytes: no two different field lists hash the same stream. */
static void hash_field(cl_Hash *h, const char *s, size_t n)
{
  unsigned char len[8];
  for (int i = 0; i < 8; i++)
    len[i] = (unsigned char)((uint64_t)n >> (8 * i));
  cl_hash_update(h, len, sizeof len);
  cl_hash_update(h, s, n);
}

static void hash_uservalue(lua_State *L, cl_Hash *h, int n)
{
  size_t len;
  lua_getiuservalue(L, 1, n);
  const char *s = lua_tolstring(L, -1, &len);
  hash_field(h, s, len);
  lua_pop(L, 1);
}

/* The cache key of the program at index 1 compiled to target: everything
 * that decides NVRTC's output (see cache.c for what it leaves out). */
static void program_key(lua_State *L, int target, unsigned char key[CL_HASH_SIZE])
{
  char version[32];
  int major, minor;
  cl_Hash h;
  nvrtc_version(&major, &minor);
  snprintf(version, sizeof version, "nvrtc %d.%d", major, minor);
  cl_hash_init(&h);
  hash_field(&h, "cudalua compile v1", 18);
  hash_field(&h, version, strlen(version));
  hash_field(&h, cl_code_kinds[target], strlen(cl_code_kinds[target]));
  hash_uservalue(L, &h, PROG_NAME);
  hash_uservalue(L, &h, PROG_SOURCE);
  lua_getiuservalue(L, 1, PROG_OPTIONS);
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  for (lua_Integer i = 1; i <= n; i++) {
    size_t len;
    lua_rawgeti(L, -1, i);
    const char *s = lua_tolstring(L, -1, &len);
    hash_field(&h, s, len);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  cl_hash_final(&h, key);
}

/* An nvrtcProgram owned by a userdata, so a Lua error cannot leak it. */
static int guard_gc(lua_State *L)
{
  nvrtcProgram *g = lua_touserdata(L, 1);
  if (*g)
    nvrtcDestroyProgram(g);
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
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) {
    lua_pushliteral(L, "");
    return;
  }
  char *buf = lua_newuserdatauv(L, size, 0);
  if (nvrtcGetProgramLog(prog, buf) != NVRTC_SUCCESS)
    size = 1;
  lua_pushlstring(L, buf, strnlen(buf, size));
  lua_remove(L, -2);
}

static int raise_nvrtc(lua_State *L, nvrtcResult r, const char *api, const char *message)
{
  cl_push_error(L, (int)r, nvrtcGetErrorString(r), api, message);
  return lua_error(L);
}

/* A failed compile: a cuda.Error whose message is the whole log. The log
 * (at the top) is also kept as prog.log and err.log. */
static int raise_compile_error(lua_State *L, nvrtcResult r)
{
  int logi = lua_gettop(L);
  size_t len;
  const char *log = lua_tolstring(L, logi, &len);
  while (len > 0 && log[len - 1] == '\n')
    len--;
  lua_pushvalue(L, logi);
  lua_setiuservalue(L, 1, PROG_LOG);
  lua_getiuservalue(L, 1, PROG_NAME);
  lua_pushfstring(L, "compiling %s failed:\n", lua_tostring(L, -1));
  if (len > 0)
    lua_pushlstring(L, log, len);
  else
    lua_pushstring(L, nvrtcGetErrorString(r));
  lua_concat(L, 2);
  cl_push_error(L, (int)r, nvrtcGetErrorString(r), "nvrtcCompileProgram", lua_tostring(L, -1));
  lua_pushvalue(L, logi);
  lua_setfield(L, -2, "log");
  return lua_error(L);
}

static void push_nvrtc_code(lua_State *L, nvrtcProgram prog, int target)
{
  size_t size = 0;
  nvrtcResult r = target == CL_CUBIN ? nvrtcGetCUBINSize(prog, &size)
                                       : nvrtcGetPTXSize(prog, &size);
  if (r != NVRTC_SUCCESS)
    raise_nvrtc(L, r, target == CL_CUBIN ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize",
                "cannot get the compiled code");
  if (size == 0)
    luaL_error(L, "no cubin: the option 'arch' names a virtual architecture (compute_XX); "
               "compile(\"cubin\") needs a real one (sm_XX), compile(\"ptx\") takes either");
  char *buf = lua_newuserdatauv(L, size, 0);
  r = target == CL_CUBIN ? nvrtcGetCUBIN(prog, buf) : nvrtcGetPTX(prog, buf);
  if (r != NVRTC_SUCCESS)
    raise_nvrtc(L, r, target == CL_CUBIN ? "nvrtcGetCUBIN" : "nvrtcGetPTX",
                "cannot get the compiled code");
  lua_pushlstring(L, buf, target == CL_PTX ? strnlen(buf, size) : size);
  lua_remove(L, -2);
}

/* Compile the program at index 1 with NVRTC; pushes the code and the log. */
static void nvrtc_compile(lua_State *L, int target)
{
  int base = lua_gettop(L);
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
  nvrtcResult r = nvrtcCreateProgram(prog, lua_tostring(L, base + 1), lua_tostring(L, base + 2),
                                     0, NULL, NULL);
  if (r != NVRTC_SUCCESS)
    raise_nvrtc(L, r, "nvrtcCreateProgram", "cannot create the NVRTC program");
  r = nvrtcCompileProgram(*prog, n, argv);
  push_log(L, *prog);
  if (r != NVRTC_SUCCESS)
    raise_compile_error(L, r);
  push_nvrtc_code(L, *prog, target);
  nvrtcDestroyProgram(prog);                      /* now, not at the next GC */
  *prog = NULL;
  lua_insert(L, -2);                              /* code, log */
  lua_rotate(L, base + 1, 2);
  lua_settop(L, base + 2);
}

static int check_target(lua_State *L, int i)
{
  const char *target = luaL_checkstring(L, i);
  if (strcmp(target, "cubin") == 0)
    return CL_CUBIN;
  if (strcmp(target, "ptx") == 0)
    return CL_PTX;
  return luaL_argerror(L, i, lua_pushfstring(L, "target must be \"cubin\" or \"ptx\", got '%s'",
                                             target));
}

/* PTX input is handed to the driver as it is: the driver JIT-compiles it
 * for the GPU when the library is loaded. Producing a cubin offline would
 * need ptxas or nvJitLink, which cudalua does not link. */
static int compile_ptx_source(lua_State *L, Program *p, int target)
{
  if (target == CL_CUBIN)
    return luaL_error(L, "compile(\"cubin\") of a PTX program is not supported: NVRTC compiles "
                      "C++ only; use compile(\"ptx\"), and the driver JIT-compiles the PTX for "
                      "the GPU when its kernels are first used");
  lua_pushliteral(L, "");
  lua_setiuservalue(L, 1, PROG_LOG);
  p->cached = 0;
  p->compiled = 1;
  lua_getiuservalue(L, 1, PROG_SOURCE);
  cl_push_objectcode(L, -1, CL_PTX);
  return 1;
}

/* prog:compile("cubin" | "ptx") -> cuda.ObjectCode */
static int program_compile(lua_State *L)
{
  Program *p = check_program(L, 1);
  int target = check_target(L, 2);
  unsigned char key[CL_HASH_SIZE];
  lua_settop(L, 2);
  if (p->is_ptx)
    return compile_ptx_source(L, p, target);
  program_key(L, target, key);
  p->cached = cl_cache_lookup(L, key, target);
  if (!p->cached) {
    nvrtc_compile(L, target);
    size_t code_len, log_len;
    const char *code = lua_tolstring(L, 3, &code_len), *log = lua_tolstring(L, 4, &log_len);
    cl_cache_store(key, target, code, code_len, log, log_len);
  }
  p->compiled = 1;
  lua_setiuservalue(L, 1, PROG_LOG);
  cl_push_objectcode(L, 3, target);
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
  Program *p = check_program(L, 1);
  const char *key = luaL_checkstring(L, 2);
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
    {"compile_cache_stats", cl_cache_stats}, {NULL, NULL}
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
