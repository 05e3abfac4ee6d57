/* program.c: cuda.Program (NVRTC), cuda.ObjectCode, cuda.Kernel and
 * cuda.find_kernel.
 *
 * A Program holds its source and the NVRTC argument list, resolved once at
 * construction (the default arch comes from the current device); compile
 * hashes both into a key and asks the compile cache (cache.c) before
 * running NVRTC, so a cache hit costs a file read and no compiler.
 *
 * An ObjectCode holds its bytes as a Lua string and loads them with
 * cuLibraryLoadData on the first get_kernel: a library is
 * context-independent, so one load serves every device. Each Kernel keeps
 * its ObjectCode alive (user value 1); the ObjectCode remembers its kernels
 * in a weak table (user value 2) so that closing it, which unloads the
 * library, also closes them. That keeps cl_check_kernel, on the launch
 * path, a metatable check and one flag. */
#include <errno.h>
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


const char *const cl_code_kinds[] = {"cubin", "ptx", "fatbin", NULL};
enum { KIND_CUBIN, KIND_PTX, KIND_FATBIN };

#define FILE_LIMIT ((size_t)1 << 30)
#define NVRTC_GUARD "cuda.NVRTCProgram"

typedef struct Program {
  int closed;
  int is_ptx;                   /* the source is PTX: nothing to compile */
  int cached;                   /* the last compile came from the cache */
  int compiled;                 /* compile has run at least once */
} Program;

/* Program user values */
enum { PROG_SOURCE = 1, PROG_OPTIONS, PROG_NAME, PROG_LOG, PROG_NUV = PROG_LOG };

/* ObjectCode user values: 1 the code (see cl.h), 2 its kernels (weak keys) */
enum { OBJ_CODE = 1, OBJ_KERNELS, OBJ_NUV = OBJ_KERNELS };

/* Kernel user values: 1 the ObjectCode (see cl.h), 2 the full name */
enum { KERNEL_OBJ = 1, KERNEL_NAME, KERNEL_NUV = KERNEL_NAME };

static uint64_t load_le(const unsigned char *p, int nbytes)
{
  uint64_t v = 0;
  for (int i = nbytes - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* --- recognizing object code ----------------------------------------------- */

#define ELF_HEADER_SIZE 64
#define EM_CUDA 190
#define FATBIN_MAGIC 0xBA55ED50u

/* Each check returns NULL when s[0..n) is sound code of its kind, else
 * writes why into why. */
static const char *cubin_problem(const unsigned char *s, size_t n, char *why, size_t size)
{
  if (n < 4 || memcmp(s, "\x7f" "ELF", 4) != 0)
    snprintf(why, size, "not a cubin: it does not start with the ELF magic \\x7fELF");
  else if (n < ELF_HEADER_SIZE)
    snprintf(why, size, "truncated cubin: %zu bytes is shorter than an ELF header", n);
  else if (s[4] != 2 || s[5] != 1)
    snprintf(why, size, "not a cubin: a 32-bit or big-endian ELF file");
  else if (load_le(s + 18, 2) != EM_CUDA)
    snprintf(why, size, "not a cubin: an ELF file for machine %u, not CUDA (%d)",
             (unsigned)load_le(s + 18, 2), EM_CUDA);
  else {
    uint64_t shoff = load_le(s + 0x28, 8), shsize = load_le(s + 0x3a, 2) * load_le(s + 0x3c, 2);
    if (shoff > n || shsize > n - shoff)
      snprintf(why, size, "truncated cubin: its section headers end past its %zu bytes", n);
    else
      return NULL;
  }
  return why;
}

static const char *fatbin_problem(const unsigned char *s, size_t n, char *why, size_t size)
{
  if (n < 4 || load_le(s, 4) != FATBIN_MAGIC)
    snprintf(why, size, "not a fatbin: it does not start with the magic 0x%X", FATBIN_MAGIC);
  else if (n < 16 || load_le(s + 6, 2) < 16)
    snprintf(why, size, "truncated fatbin: %zu bytes is shorter than its header", n);
  else {
    uint64_t header = load_le(s + 6, 2), body = load_le(s + 8, 8);
    if (header > n || body > n - header)
      snprintf(why, size, "truncated fatbin: its header announces %llu bytes, there are %zu",
               (unsigned long long)(header + body), n);
    else
      return NULL;
  }
  return why;
}

/* Past whitespace and comments, where PTX's first directive starts. */
static const char *skip_ptx_preamble(const char *p, const char *end)
{
  while (p < end) {
    if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v')
      p++;
    else if (end - p >= 2 && p[0] == '/' && p[1] == '/') {
      const char *nl = memchr(p, '\n', (size_t)(end - p));
      p = nl ? nl + 1 : end;
    } else if (end - p >= 2 && p[0] == '/' && p[1] == '*') {
      const char *q = p + 2;
      while (q + 1 < end && !(q[0] == '*' && q[1] == '/'))
        q++;
      p = q + 1 < end ? q + 2 : end;
    } else
      break;
  }
  return p;
}

static int starts_with_version(const unsigned char *s, size_t n)
{
  const char *end = (const char *)s + n, *p = skip_ptx_preamble((const char *)s, end);
  return end - p >= 9 && memcmp(p, ".version", 8) == 0 && (p[8] == ' ' || p[8] == '\t');
}

static const char *ptx_problem(const unsigned char *s, size_t n, char *why, size_t size)
{
  if (!starts_with_version(s, n))
    snprintf(why, size, "not PTX: its first directive (after comments) is not .version");
  else if (memchr(s, '\0', n))
    snprintf(why, size, "not PTX: it contains a NUL byte");
  else
    return NULL;
  return why;
}

typedef const char *(*CodeCheck)(const unsigned char *, size_t, char *, size_t);
static const CodeCheck code_checks[] = {cubin_problem, ptx_problem, fatbin_problem};

/* The kind of the code: *kind if >= 0 (checked), else detected. Returns
 * NULL, or why it is not object code of that kind. */
static const char *check_code(const char *code, size_t n, int *kind, char *why, size_t size)
{
  const unsigned char *s = (const unsigned char *)code;
  if (*kind < 0) {
    if (n >= 4 && memcmp(s, "\x7f" "ELF", 4) == 0)
      *kind = KIND_CUBIN;
    else if (n >= 4 && load_le(s, 4) == FATBIN_MAGIC)
      *kind = KIND_FATBIN;
    else if (starts_with_version(s, n))
      *kind = KIND_PTX;
    else {
      snprintf(why, size, "not CUDA object code: a cubin starts with \\x7fELF, a fatbin "
               "with 0x%X, PTX with .version", FATBIN_MAGIC);
      return why;
    }
  }
  return code_checks[*kind](s, n, why, size);
}

/* --- the kernels in a piece of code, for "no such kernel" errors ------------ */

#define MAX_LISTED 24

static void add_name(luaL_Buffer *b, int *count, const char *name, size_t len)
{
  if (*count < MAX_LISTED) {
    luaL_addstring(b, *count ? ", " : "");
    luaL_addlstring(b, name, len);
  } else if (*count == MAX_LISTED)
    luaL_addstring(b, ", ...");
  (*count)++;
}

/* Kernels are the FUNC symbols of a cubin's symbol table that carry
 * STO_CUDA_ENTRY (0x10) in st_other. Every offset is bounds-checked:
 * the cubin may be hostile. */
static void list_cubin_kernels(luaL_Buffer *b, int *count, const unsigned char *s, size_t n)
{
  uint64_t shoff = load_le(s + 0x28, 8), shentsize = load_le(s + 0x3a, 2);
  uint64_t shnum = load_le(s + 0x3c, 2);
  if (shentsize < 64)
    return;
  for (uint64_t i = 0; i < shnum; i++) {
    const unsigned char *sh = s + shoff + i * shentsize;
    uint64_t link = load_le(sh + 0x28, 4);
    if (load_le(sh + 4, 4) != 2 || link >= shnum)     /* SHT_SYMTAB */
      continue;
    const unsigned char *strsh = s + shoff + link * shentsize;
    uint64_t symoff = load_le(sh + 0x18, 8), symsize = load_le(sh + 0x20, 8);
    uint64_t stroff = load_le(strsh + 0x18, 8), strsize = load_le(strsh + 0x20, 8);
    if (symoff > n || symsize > n - symoff || stroff > n || strsize > n - stroff)
      return;
    for (uint64_t k = 0; k + 24 <= symsize; k += 24) {
      const unsigned char *sym = s + symoff + k;
      uint64_t name = load_le(sym, 4);
      if ((sym[4] & 0xf) != 2 || !(sym[5] & 0x10) || name >= strsize)
        continue;
      const char *str = (const char *)s + stroff + name;
      const char *nul = memchr(str, '\0', (size_t)(strsize - name));
      if (nul)
        add_name(b, count, str, (size_t)(nul - str));
    }
  }
}

static int is_ident_char(char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '_' || c == '$';
}

static void list_ptx_kernels(luaL_Buffer *b, int *count, const char *s, size_t n)
{
  const char *end = s + n, *p = s;
  while ((p = memchr(p, '.', (size_t)(end - p))) != NULL) {
    p++;
    if (end - p < 6 || memcmp(p, "entry", 5) != 0 || (p[5] != ' ' && p[5] != '\t'))
      continue;
    p += 5;
    while (p < end && (*p == ' ' || *p == '\t'))
      p++;
    const char *name = p;
    while (p < end && is_ident_char(*p))
      p++;
    if (p > name)
      add_name(b, count, name, (size_t)(p - name));
  }
}

/* Push "a, b, c" naming the kernels in the code; "" when unknown (fatbin). */
static void push_kernel_list(lua_State *L, const char *code, size_t n, int kind)
{
  luaL_Buffer b;
  int count = 0;
  luaL_buffinit(L, &b);
  if (kind == KIND_CUBIN)
    list_cubin_kernels(&b, &count, (const unsigned char *)code, n);
  else if (kind == KIND_PTX)
    list_ptx_kernels(&b, &count, code, n);
  luaL_pushresult(&b);
}

/* --- cuda.ObjectCode ------------------------------------------------------- */

static cl_ObjectCode *check_objectcode(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_OBJECTCODE);
}

/* A new ObjectCode over the code string at index codei. */
static cl_ObjectCode *push_objectcode(lua_State *L, int codei, int kind)
{
  codei = lua_absindex(L, codei);
  cl_ObjectCode *o = lua_newuserdatauv(L, sizeof *o, OBJ_NUV);
  memset(o, 0, sizeof *o);
  o->kind = kind;
  luaL_setmetatable(L, CL_OBJECTCODE);
  lua_pushvalue(L, codei);
  lua_setiuservalue(L, -2, OBJ_CODE);
  return o;
}

/* kind argument: nil to detect it, else one of cl_code_kinds. */
static int opt_kind(lua_State *L, int i)
{
  if (lua_isnoneornil(L, i))
    return -1;
  const char *name = luaL_checkstring(L, i);
  for (int k = 0; cl_code_kinds[k]; k++)
    if (strcmp(name, cl_code_kinds[k]) == 0)
      return k;
  return luaL_argerror(L, i, lua_pushfstring(L, "kind must be \"cubin\", \"ptx\" or \"fatbin\", "
                                             "got '%s'", name));
}

/* cuda.ObjectCode.from_data(bytes [, kind]): kind is detected when omitted. */
static int objectcode_from_data(lua_State *L)
{
  char why[160];
  size_t n;
  luaL_checktype(L, 1, LUA_TSTRING);
  const char *code = lua_tolstring(L, 1, &n);
  int kind = opt_kind(L, 2);
  if (check_code(code, n, &kind, why, sizeof why))
    return luaL_argerror(L, 1, why);
  push_objectcode(L, 1, kind);
  return 1;
}

/* cuda.ObjectCode.from_file(path [, kind]) */
static int objectcode_from_file(lua_State *L)
{
  char why[160];
  size_t n = 0;
  const char *path = luaL_checkstring(L, 1);
  int kind = opt_kind(L, 2);
  const char *buf = cl_push_file(L, path, FILE_LIMIT, &n);
  if (!buf)
    return luaL_error(L, "cannot read object code from '%s': %s", path, strerror(errno));
  if (check_code(buf, n, &kind, why, sizeof why))
    return luaL_error(L, "cannot load '%s': %s", path, why);
  lua_pushlstring(L, buf, n);
  push_objectcode(L, -1, kind);
  return 1;
}

/* Load the library on first use; the driver keeps its own copy. */
static void load_library(lua_State *L, int oi, cl_ObjectCode *o)
{
  size_t n;
  if (o->library)
    return;
  cl_driver_load(L);
  lua_getiuservalue(L, oi, OBJ_CODE);
  const char *code = lua_tolstring(L, -1, &n);
  CUlibrary lib = NULL;
  CUresult r = CL_CALL(cuLibraryLoadData, (&lib, code, NULL, NULL, 0, NULL, NULL, 0));
  lua_pop(L, 1);
  if (r != CUDA_SUCCESS)
    cl_raise_detail(L, r, "cuLibraryLoadData", "loading cuda.ObjectCode(%s, %I bytes)",
                    cl_code_kinds[o->kind], (lua_Integer)n);
  o->library = lib;
}

static int raise_missing_kernel(lua_State *L, int oi, cl_ObjectCode *o, const char *name)
{
  size_t n;
  lua_getiuservalue(L, oi, OBJ_CODE);
  const char *code = lua_tolstring(L, -1, &n);
  push_kernel_list(L, code, n, o->kind);
  const char *list = lua_tostring(L, -1);
  return cl_raise_detail(L, CUDA_ERROR_NOT_FOUND, "cuLibraryGetKernel",
                         "no kernel named '%s' in cuda.ObjectCode(%s, %I bytes)%s%s%s", name,
                         cl_code_kinds[o->kind], (lua_Integer)n, *list ? " (it has: " : "",
                         list, *list ? ")" : "");
}

/* Record the kernel at ki in the ObjectCode's weak table of kernels. */
static void remember_kernel(lua_State *L, int oi, int ki)
{
  ki = lua_absindex(L, ki);
  if (lua_getiuservalue(L, oi, OBJ_KERNELS) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, oi, OBJ_KERNELS);
  }
  lua_pushvalue(L, ki);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

static CUfunction current_function(lua_State *L, cl_Kernel *k);

/* Parameter layout from the driver, read through the function handle of the
 * current device: that loads the kernel (libraries load lazily), so the
 * layout is known. nparams stays -1 when the driver does not say. */
static void read_params(lua_State *L, cl_Kernel *k, const char *name)
{
  CUfunction fn = current_function(L, k);
  lua_pop(L, 1);
  for (size_t i = 0;; i++) {
    size_t offset = 0, size = 0;
    CUresult r = CL_CALL(cuFuncGetParamInfo, (fn, i, &offset, &size));
    if (r != CUDA_SUCCESS) {
      /* asking one past the last parameter is INVALID_VALUE */
      k->nparams = r == CUDA_ERROR_INVALID_VALUE ? (int)i : -1;
      return;
    }
    if (i == CL_MAX_PARAMS)
      luaL_error(L, "kernel '%s' has more than %d parameters, the most cudalua can launch",
                 name, CL_MAX_PARAMS);
    k->param_offset[i] = offset;
    k->param_size[i] = (unsigned short)size;
  }
}

static void push_kernel(lua_State *L, int oi, CUkernel handle, int namei)
{
  const char *name = lua_tostring(L, namei);
  cl_Kernel *k = lua_newuserdatauv(L, sizeof *k, KERNEL_NUV);
  memset(k, 0, sizeof *k);
  k->closed = 1;                /* until it is complete */
  k->fn_device = -1;
  k->nparams = -1;
  luaL_setmetatable(L, CL_KERNEL);
  k->handle = handle;
  snprintf(k->name, sizeof k->name, "%s", name);
  read_params(L, k, name);
  lua_pushvalue(L, oi);
  lua_setiuservalue(L, -2, KERNEL_OBJ);
  lua_pushvalue(L, namei);
  lua_setiuservalue(L, -2, KERNEL_NAME);
  remember_kernel(L, oi, -1);
  k->closed = 0;
}

/* obj:get_kernel(name) */
static int objectcode_get_kernel(lua_State *L)
{
  cl_ObjectCode *o = check_objectcode(L, 1);
  size_t len;
  const char *name = luaL_checklstring(L, 2, &len);
  luaL_argcheck(L, len > 0 && strlen(name) == len, 2, "kernel name is empty or has a NUL byte");
  load_library(L, 1, o);
  CUkernel handle = NULL;
  CUresult r = CL_CALL(cuLibraryGetKernel, (&handle, o->library, name));
  if (r == CUDA_ERROR_NOT_FOUND)
    return raise_missing_kernel(L, 1, o, name);
  cl_check(L, r, "cuLibraryGetKernel");
  push_kernel(L, 1, handle, 2);
  return 1;
}

/* Closing unloads the library, so every kernel taken from it closes too. */
static void close_kernels(lua_State *L, int oi)
{
  if (lua_getiuservalue(L, oi, OBJ_KERNELS) == LUA_TTABLE) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      cl_Kernel *k = luaL_testudata(L, -2, CL_KERNEL);
      if (k)
        k->closed = 1;
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
}

static int objectcode_close(lua_State *L)
{
  cl_ObjectCode *o = luaL_checkudata(L, 1, CL_OBJECTCODE);
  if (o->closed)
    return 0;
  o->closed = 1;
  close_kernels(L, 1);
  if (o->library) {
    CL_CALL(cuLibraryUnload, (o->library));
    o->library = NULL;
  }
  return 0;
}

static int objectcode_tostring(lua_State *L)
{
  cl_ObjectCode *o = luaL_checkudata(L, 1, CL_OBJECTCODE);
  if (o->closed)
    return cl_push_closed_name(L, CL_OBJECTCODE);
  lua_getiuservalue(L, 1, OBJ_CODE);
  lua_pushfstring(L, "cuda.ObjectCode(%s, %I bytes)", cl_code_kinds[o->kind],
                  (lua_Integer)lua_rawlen(L, -1));
  return 1;
}

static int objectcode_fields(lua_State *L)
{
  cl_ObjectCode *o = check_objectcode(L, 1);
  const char *key = luaL_checkstring(L, 2);
  if (strcmp(key, "code") == 0)
    lua_getiuservalue(L, 1, OBJ_CODE);
  else if (strcmp(key, "kind") == 0)
    lua_pushstring(L, cl_code_kinds[o->kind]);
  else if (strcmp(key, "size") == 0) {
    lua_getiuservalue(L, 1, OBJ_CODE);
    lua_pushinteger(L, (lua_Integer)lua_rawlen(L, -1));
  } else
    lua_pushnil(L);
  return 1;
}

/* --- cuda.Kernel ------------------------------------------------------------ */

cl_Kernel *cl_check_kernel(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_KERNEL);
}

/* A function handle belongs to one context, so it is resolved again when
 * the kernel moves to another device. Shared-memory opt-in is an attribute
 * of that handle: it starts over with it. */
static CUfunction resolve_function(lua_State *L, cl_Kernel *k, cl_Device *d)
{
  CUfunction fn = NULL;
  CL_TRY(L, cuKernelGetFunction, (&fn, k->handle));
  k->fn = fn;
  k->fn_device = d->ordinal;
  k->shmem_optin = 0;
  return fn;
}

CUfunction cl_kernel_function(lua_State *L, cl_Kernel *k, cl_Device *d)
{
  if (k->fn_device == d->ordinal)
    return k->fn;
  return resolve_function(L, k, d);
}

/* The kernel's function for the current device, whose context is made
 * current. Pushes the device. */
static CUfunction current_function(lua_State *L, cl_Kernel *k)
{
  cl_Device *d = cl_push_current_device(L);
  cl_device_activate(L, d);
  return cl_kernel_function(L, k, d);
}

static const struct { const char *name; CUfunction_attribute attr; } kernel_attributes[] = {
  {"num_regs", CU_FUNC_ATTRIBUTE_NUM_REGS},
  {"max_threads_per_block", CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
  {"shared_size_bytes", CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES},
  {"const_size_bytes", CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES},
  {"local_size_bytes", CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES},
  {"ptx_version", CU_FUNC_ATTRIBUTE_PTX_VERSION},
  {"binary_version", CU_FUNC_ATTRIBUTE_BINARY_VERSION},
  {"max_dynamic_shared_size_bytes", CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES},
};

static void push_attributes(lua_State *L, cl_Kernel *k)
{
  size_t n = sizeof kernel_attributes / sizeof kernel_attributes[0];
  CUfunction fn = current_function(L, k);
  lua_createtable(L, 0, (int)n);
  for (size_t i = 0; i < n; i++) {
    int v = 0;
    CL_TRY(L, cuFuncGetAttribute, (&v, kernel_attributes[i].attr, fn));
    lua_pushinteger(L, v);
    lua_setfield(L, -2, kernel_attributes[i].name);
  }
}

/* {{offset=, size=}, ...}, or nil when the driver does not report them. */
static void push_params(lua_State *L, const cl_Kernel *k)
{
  if (k->nparams < 0) {
    lua_pushnil(L);
    return;
  }
  lua_createtable(L, k->nparams, 0);
  for (int i = 0; i < k->nparams; i++) {
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, (lua_Integer)k->param_offset[i]);
    lua_setfield(L, -2, "offset");
    lua_pushinteger(L, k->param_size[i]);
    lua_setfield(L, -2, "size");
    lua_rawseti(L, -2, i + 1);
  }
}

/* k:occupancy(block_size [, dynamic_shmem]): resident blocks per SM on the
 * current device. */
static int kernel_occupancy(lua_State *L)
{
  cl_Kernel *k = cl_check_kernel(L, 1);
  lua_Integer block = luaL_checkinteger(L, 2);
  lua_Integer shmem = luaL_optinteger(L, 3, 0);
  luaL_argcheck(L, block > 0 && block <= 1 << 20, 2, "block size must be > 0");
  luaL_argcheck(L, shmem >= 0, 3, "shared memory size must be >= 0");
  CUfunction fn = current_function(L, k);
  int blocks = 0;
  CL_TRY(L, cuOccupancyMaxActiveBlocksPerMultiprocessor, (&blocks, fn, (int)block, (size_t)shmem));
  lua_pushinteger(L, blocks);
  return 1;
}

/* A kernel owns no driver resource (its library is the ObjectCode's), so
 * closing only marks it; there is no __gc. */
static int kernel_close(lua_State *L)
{
  cl_Kernel *k = luaL_checkudata(L, 1, CL_KERNEL);
  k->closed = 1;
  return 0;
}

static int kernel_tostring(lua_State *L)
{
  cl_Kernel *k = luaL_checkudata(L, 1, CL_KERNEL);
  if (k->closed)
    return cl_push_closed_name(L, CL_KERNEL);
  lua_getiuservalue(L, 1, KERNEL_NAME);
  if (k->nparams >= 0)
    lua_pushfstring(L, "cuda.Kernel(%s, %d params)", lua_tostring(L, -1), k->nparams);
  else
    lua_pushfstring(L, "cuda.Kernel(%s)", lua_tostring(L, -1));
  return 1;
}

static int kernel_fields(lua_State *L)
{
  cl_Kernel *k = cl_check_kernel(L, 1);
  const char *key = luaL_checkstring(L, 2);
  if (strcmp(key, "name") == 0)
    lua_getiuservalue(L, 1, KERNEL_NAME);
  else if (strcmp(key, "params") == 0)
    push_params(L, k);
  else if (strcmp(key, "attributes") == 0)
    push_attributes(L, k);
  else if (strcmp(key, "object_code") == 0)
    lua_getiuservalue(L, 1, KERNEL_OBJ);
  else
    lua_pushnil(L);
  return 1;
}

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

static int is_macro_name(const char *s)
{
  if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
    return 0;
  while (*++s)
    if (!is_ident_char(*s) || *s == '$')
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
  if (is_ptx && ptx_problem((const unsigned char *)source, len, why, sizeof why))
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
  nvrtcResult r = target == KIND_CUBIN ? nvrtcGetCUBINSize(prog, &size)
                                       : nvrtcGetPTXSize(prog, &size);
  if (r != NVRTC_SUCCESS)
    raise_nvrtc(L, r, target == KIND_CUBIN ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize",
                "cannot get the compiled code");
  if (size == 0)
    luaL_error(L, "no cubin: the option 'arch' names a virtual architecture (compute_XX); "
               "compile(\"cubin\") needs a real one (sm_XX), compile(\"ptx\") takes either");
  char *buf = lua_newuserdatauv(L, size, 0);
  r = target == KIND_CUBIN ? nvrtcGetCUBIN(prog, buf) : nvrtcGetPTX(prog, buf);
  if (r != NVRTC_SUCCESS)
    raise_nvrtc(L, r, target == KIND_CUBIN ? "nvrtcGetCUBIN" : "nvrtcGetPTX",
                "cannot get the compiled code");
  lua_pushlstring(L, buf, target == KIND_PTX ? strnlen(buf, size) : size);
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
    return KIND_CUBIN;
  if (strcmp(target, "ptx") == 0)
    return KIND_PTX;
  return luaL_argerror(L, i, lua_pushfstring(L, "target must be \"cubin\" or \"ptx\", got '%s'",
                                             target));
}

/* PTX input is handed to the driver as it is: the driver JIT-compiles it
 * for the GPU when the library is loaded. Producing a cubin offline would
 * need ptxas or nvJitLink, which cudalua does not link. */
static int compile_ptx_source(lua_State *L, Program *p, int target)
{
  if (target == KIND_CUBIN)
    return luaL_error(L, "compile(\"cubin\") of a PTX program is not supported: NVRTC compiles "
                      "C++ only; use compile(\"ptx\"), and the driver JIT-compiles the PTX for "
                      "the GPU when its kernels are first used");
  lua_pushliteral(L, "");
  lua_setiuservalue(L, 1, PROG_LOG);
  p->cached = 0;
  p->compiled = 1;
  lua_getiuservalue(L, 1, PROG_SOURCE);
  push_objectcode(L, -1, KIND_PTX);
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
  push_objectcode(L, 3, target);
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

static void append(lua_State *L, int t)
{
  lua_rawseti(L, t, (lua_Integer)lua_rawlen(L, t) + 1);
}

/* Append dir/name for each directory of a colon-separated list. */
static void add_path_dirs(lua_State *L, int t, const char *path, const char *name)
{
  while (path && *path) {
    const char *colon = strchr(path, ':');
    int n = (int)(colon ? (size_t)(colon - path) : strlen(path));
    if (n > 0) {
      lua_pushfstring(L, "%s/%s", lua_pushlstring(L, path, (size_t)n), name);
      lua_remove(L, -2);
      append(L, t);
    }
    path = colon ? colon + 1 : NULL;
  }
}

/* Append name in the running script's directory (dirname of arg[0]) and
 * in its ../kernels. */
static void add_script_dirs(lua_State *L, int t, const char *name)
{
  int top = lua_gettop(L);
  if (lua_getglobal(L, "arg") == LUA_TTABLE && lua_rawgeti(L, -1, 0) == LUA_TSTRING) {
    const char *script = lua_tostring(L, -1);
    const char *slash = strrchr(script, '/');
    if (!slash)
      lua_pushliteral(L, ".");
    else
      lua_pushlstring(L, script, slash == script ? 1 : (size_t)(slash - script));
    const char *dir = lua_tostring(L, -1);
    lua_pushfstring(L, "%s/%s", dir, name);
    append(L, t);
    lua_pushfstring(L, "%s/../kernels/%s", dir, name);
    append(L, t);
  }
  lua_settop(L, top);
}

static int is_regular_file(const char *path)
{
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int raise_not_found(lua_State *L, const char *name, int t)
{
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  lua_pushfstring(L, "kernel file '%s' not found; looked for:", name);
  luaL_addvalue(&b);
  for (lua_Integer i = 1; i <= (lua_Integer)lua_rawlen(L, t); i++) {
    luaL_addstring(&b, "\n  ");
    lua_rawgeti(L, t, i);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  return lua_error(L);
}

/* cuda.find_kernel(file_name) -> path: the first of CUDALUA_KERNEL_PATH's
 * directories, the script's directory, its ../kernels, and the installed
 * kernels/ that holds the file. An absolute name is only checked. */
static int cuda_find_kernel(lua_State *L)
{
  const char *name = luaL_checkstring(L, 1);
  luaL_argcheck(L, *name, 1, "kernel file name is empty");
  lua_settop(L, 1);
  lua_newtable(L);                                /* 2: the paths to try */
  if (name[0] == '/') {
    lua_pushvalue(L, 1);
    append(L, 2);
  } else {
    add_path_dirs(L, 2, getenv("CUDALUA_KERNEL_PATH"), name);
    add_script_dirs(L, 2, name);
    lua_pushfstring(L, "%s/kernels/%s", cl_datadir, name);
    append(L, 2);
  }
  for (lua_Integer i = 1; i <= (lua_Integer)lua_rawlen(L, 2); i++) {
    lua_rawgeti(L, 2, i);
    if (is_regular_file(lua_tostring(L, -1)))
      return 1;
    lua_pop(L, 1);
  }
  return raise_not_found(L, name, 2);
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
  static const luaL_Reg objectcode_meta[] = {
    {"__gc", objectcode_close}, {"__close", objectcode_close},
    {"__tostring", objectcode_tostring}, {NULL, NULL}
  };
  static const luaL_Reg objectcode_methods[] = {
    {"get_kernel", objectcode_get_kernel}, {"close", objectcode_close}, {NULL, NULL}
  };
  static const luaL_Reg kernel_meta[] = {
    {"__close", kernel_close}, {"__tostring", kernel_tostring}, {NULL, NULL}
  };
  static const luaL_Reg kernel_methods[] = {
    {"occupancy", kernel_occupancy}, {"close", kernel_close}, {NULL, NULL}
  };
  static const luaL_Reg objectcode_functions[] = {
    {"from_file", objectcode_from_file}, {"from_data", objectcode_from_data}, {NULL, NULL}
  };
  static const luaL_Reg functions[] = {
    {"Program", cuda_program}, {"find_kernel", cuda_find_kernel},
    {"compile_cache_stats", cl_cache_stats}, {NULL, NULL}
  };
  cl_new_type(L, CL_PROGRAM, program_meta, program_methods, program_fields);
  cl_new_type(L, CL_OBJECTCODE, objectcode_meta, objectcode_methods, objectcode_fields);
  cl_new_type(L, CL_KERNEL, kernel_meta, kernel_methods, kernel_fields);
  luaL_newmetatable(L, NVRTC_GUARD);
  lua_pushcfunction(L, guard_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newlib(L, objectcode_functions);
  lua_setfield(L, -2, "ObjectCode");
  luaL_setfuncs(L, functions, 0);
}
