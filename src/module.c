/* SPDX-License-Identifier: MIT */
/* module.c: cuda.ObjectCode and cuda.Kernel.
 *
 * An ObjectCode holds its bytes as a Lua string and loads them with
 * cuLibraryLoadData on the first get_kernel: a library is
 * context-independent, so one load serves every device. Each Kernel keeps
 * its ObjectCode alive (user value 1); the ObjectCode remembers its kernels
 * in a weak table (user value 2) so that closing it, which unloads the
 * library, also closes them. That keeps cl_check_kernel, on the launch
 * path, a metatable check and one flag.
 *
 * The kernels a library has, named in "no such kernel" errors, come from
 * the driver, for every kind of code. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "device.h"

const char *const cl_code_kinds[] = {"cubin", "ptx", "fatbin", "ltoir", "object", "library",
                                     NULL};

#define FILE_LIMIT ((size_t)1 << 30)

/* ObjectCode user values: 1 the code (see cl.h), 2 its kernels (weak
 * keys), 3 its name expressions (expression -> lowered name) or nil, 4 the
 * C++ source it was compiled from, or nil */
enum { OBJ_CODE = 1, OBJ_KERNELS, OBJ_NAMES, OBJ_SOURCE, OBJ_NUV = OBJ_SOURCE };

/* Kernel user values: 1 the ObjectCode (see cl.h), 2 the full name, 3 the
 * parameters' type names (see cl.h) */
enum { KERNEL_OBJ = 1, KERNEL_NAME, KERNEL_TYPES, KERNEL_NUV = KERNEL_TYPES };

/* --- the one check of untrusted code ------------------------------------------
 *
 * cuLibraryLoadData takes no length: the driver reads as far as the code
 * says it reaches. So what it would read past the data is refused here: a
 * cubin's header tables and what their entries point at, a fatbin's body.
 * PTX is read up to its NUL, which a Lua string always has; an earlier NUL
 * would silently cut it short. Everything else the driver checks itself. */

static int fits(uint64_t offset, uint64_t size, size_t n)
{
  return offset <= n && size <= n - offset;
}

#define ELF_MAGIC "\x7f" "ELF"
#define ELF64_HEADER_SIZE 64
#define EM_CUDA 190
#define FATBIN_MAGIC 0xBA55ED50u
#define LTOIR_MAGIC 0x7F4E43EDu
#define AR_MAGIC "!<arch>\n"

/* An ELF64 header table: where the ELF header says it is, and where each
 * entry says its bytes are. */
typedef struct ElfTable {
  const char *name;
  int table_at, entsize_at, count_at;   /* fields of the ELF header */
  uint64_t entsize, min_count;
  int type_at, offset_at, size_at;      /* fields of an entry */
  uint64_t no_bytes_type;               /* entries of this type own no bytes */
} ElfTable;

static const ElfTable elf_tables[] = {
  {"section", 0x28, 0x3a, 0x3c, 64, 1, 0x04, 0x18, 0x20, 8 /* SHT_NOBITS */},
  {"segment", 0x20, 0x36, 0x38, 56, 0, 0x00, 0x08, 0x20, UINT64_MAX},
};

static const char *table_problem(const ElfTable *t, const unsigned char *s, size_t n,
                                 char *why, size_t size)
{
  uint64_t table = cl_load_le(s + t->table_at, 8), count = cl_load_le(s + t->count_at, 2);
  if (count < t->min_count || (count > 0 && cl_load_le(s + t->entsize_at, 2) != t->entsize)) {
    snprintf(why, size, "not a cubin: it has no ELF64 %s header table", t->name);
    return why;
  }
  if (!fits(table, count * t->entsize, n)) {
    snprintf(why, size, "truncated cubin: its %s headers end past its %zu bytes", t->name, n);
    return why;
  }
  for (uint64_t i = 0; i < count; i++) {
    const unsigned char *e = s + table + i * t->entsize;
    if (cl_load_le(e + t->type_at, 4) != t->no_bytes_type &&
        !fits(cl_load_le(e + t->offset_at, 8), cl_load_le(e + t->size_at, 8), n)) {
      snprintf(why, size, "truncated cubin: %s %u ends past its %zu bytes", t->name,
               (unsigned)i, n);
      return why;
    }
  }
  return NULL;
}

/* Each check returns NULL when s[0..n) is sound code of its kind, else
 * writes why into why. */
static const char *cubin_problem(const unsigned char *s, size_t n, char *why, size_t size)
{
  if (n < 4 || memcmp(s, ELF_MAGIC, 4) != 0)
    snprintf(why, size, "not a cubin: it does not start with the ELF magic \\x7fELF");
  else if (n < ELF64_HEADER_SIZE)
    snprintf(why, size, "truncated cubin: %zu bytes is shorter than an ELF header", n);
  else if (s[4] != 2 || s[5] != 1)
    snprintf(why, size, "not a cubin: a 32-bit or big-endian ELF file");
  else if (cl_load_le(s + 18, 2) != EM_CUDA)
    snprintf(why, size, "not a cubin: an ELF file for machine %u, not CUDA (%d)",
             (unsigned)cl_load_le(s + 18, 2), EM_CUDA);
  else {
    for (size_t i = 0; i < sizeof elf_tables / sizeof elf_tables[0]; i++)
      if (table_problem(&elf_tables[i], s, n, why, size))
        return why;
    return NULL;
  }
  return why;
}

static const char *fatbin_problem(const unsigned char *s, size_t n, char *why, size_t size)
{
  if (n < 4 || cl_load_le(s, 4) != FATBIN_MAGIC)
    snprintf(why, size, "not a fatbin: it does not start with the magic 0x%X", FATBIN_MAGIC);
  else if (n < 16 || cl_load_le(s + 6, 2) < 16)
    snprintf(why, size, "truncated fatbin: %zu bytes is shorter than its header", n);
  else {
    uint64_t header = cl_load_le(s + 6, 2), body = cl_load_le(s + 8, 8);
    if (!fits(header, body, n))
      snprintf(why, size, "truncated fatbin: its header announces %llu bytes, there are %zu",
               (unsigned long long)(header + body), n);
    else
      return NULL;
  }
  return why;
}

/* Text with a .version directive and no NUL but the string's own; the
 * driver's JIT compiler judges the rest. */
static int has_version(const unsigned char *s)
{
  return strstr((const char *)s, ".version") != NULL;
}

static const char *ptx_problem(const unsigned char *s, size_t n, char *why, size_t size)
{
  if (memchr(s, '\0', n))
    snprintf(why, size, "not PTX: it contains a NUL byte");
  else if (!has_version(s))
    snprintf(why, size, "not PTX: it has no .version directive");
  else
    return NULL;
  return why;
}

/* LTO-IR, host objects and libraries are never loaded by the driver, only
 * handed to nvJitLink with their length: a check of the magic suffices. */
static const char *ltoir_problem(const unsigned char *s, size_t n, char *why, size_t size)
{
  if (n >= 4 && cl_load_le(s, 4) == LTOIR_MAGIC)
    return NULL;
  snprintf(why, size, "not LTO-IR: it does not start with the magic 0x%X", LTOIR_MAGIC);
  return why;
}

static const char *object_problem(const unsigned char *s, size_t n, char *why, size_t size)
{
  if (n >= 4 && memcmp(s, ELF_MAGIC, 4) == 0)
    return NULL;
  snprintf(why, size, "not a host object: it does not start with the ELF magic \\x7fELF");
  return why;
}

static const char *library_problem(const unsigned char *s, size_t n, char *why, size_t size)
{
  if (n >= 8 && memcmp(s, AR_MAGIC, 8) == 0)
    return NULL;
  snprintf(why, size, "not a library: it does not start with the archive magic !<arch>");
  return why;
}

typedef const char *(*CodeCheck)(const unsigned char *, size_t, char *, size_t);
static const CodeCheck code_checks[CL_NKINDS] = {cubin_problem, ptx_problem, fatbin_problem,
                                                 ltoir_problem, object_problem, library_problem};

const char *cl_code_problem(const char *code, size_t n, int *kind, char *why, size_t size)
{
  const unsigned char *s = (const unsigned char *)code;
  if (*kind < 0) {
    if (n >= 4 && memcmp(s, ELF_MAGIC, 4) == 0)
      *kind = CL_CUBIN;
    else if (n >= 4 && cl_load_le(s, 4) == FATBIN_MAGIC)
      *kind = CL_FATBIN;
    else if (n >= 4 && cl_load_le(s, 4) == LTOIR_MAGIC)
      *kind = CL_LTOIR;
    else if (n >= 8 && memcmp(s, AR_MAGIC, 8) == 0)
      *kind = CL_LIBRARY;
    else if (has_version(s))
      *kind = CL_PTX;
    else {
      snprintf(why, size, "not CUDA object code: a cubin starts with \\x7fELF, a fatbin "
               "with 0x%X, LTO-IR with 0x%X, a library with !<arch>, PTX is text with a "
               ".version directive", FATBIN_MAGIC, LTOIR_MAGIC);
      return why;
    }
  }
  return code_checks[*kind](s, n, why, size);
}

int cl_is_blank(const char *s, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (s[i] != '\0')
      return 0;
  return 1;
}

/* --- the kernels a library has, for "no such kernel" errors ------------------ */

#define MAX_LISTED 24

/* Push " (it has: a, b, c)", the first MAX_LISTED kernels the driver
 * enumerates; "" when it cannot say. */
static void push_kernel_list(lua_State *L, CUlibrary lib)
{
  CUkernel kernels[MAX_LISTED];
  unsigned int count = 0;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  if (CL_CALL(cuLibraryGetKernelCount, (&count, lib)) == CUDA_SUCCESS && count > 0) {
    unsigned int listed = count < MAX_LISTED ? count : MAX_LISTED;
    if (CL_CALL(cuLibraryEnumerateKernels, (kernels, listed, lib)) == CUDA_SUCCESS) {
      luaL_addstring(&b, " (it has: ");
      for (unsigned int i = 0; i < listed; i++) {
        const char *name = NULL;
        if (CL_CALL(cuKernelGetName, (&name, kernels[i])) != CUDA_SUCCESS || !name)
          name = "?";
        luaL_addstring(&b, i ? ", " : "");
        luaL_addstring(&b, name);
      }
      luaL_addstring(&b, count > listed ? ", ...)" : ")");
    }
  }
  luaL_pushresult(&b);
}

/* --- cuda.ObjectCode ------------------------------------------------------- */

cl_ObjectCode *cl_check_objectcode(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_OBJECTCODE);
}

void cl_objectcode_push_code(lua_State *L, int oi)
{
  lua_getiuservalue(L, oi, OBJ_CODE);
}

void cl_objectcode_set_names(lua_State *L, int oi, int ti)
{
  oi = lua_absindex(L, oi);
  lua_pushvalue(L, ti);
  lua_setiuservalue(L, oi, OBJ_NAMES);
}

void cl_objectcode_push_names(lua_State *L, int oi)
{
  lua_getiuservalue(L, oi, OBJ_NAMES);
}

void cl_objectcode_set_source(lua_State *L, int oi, int si)
{
  oi = lua_absindex(L, oi);
  lua_pushvalue(L, si);
  lua_setiuservalue(L, oi, OBJ_SOURCE);
}

/* A copy of the name expressions, so callers cannot change what get_kernel
 * resolves through. */
static void push_names_copy(lua_State *L, int oi)
{
  if (lua_getiuservalue(L, oi, OBJ_NAMES) != LUA_TTABLE)
    return;
  lua_newtable(L);
  lua_pushnil(L);
  while (lua_next(L, -3)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
}

/* The string at codei as an ObjectCode of kind, its bytes checked already. */
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

/* Every ObjectCode is made here or by from_data and from_file, which check
 * first for their own messages: so every byte that reaches the driver,
 * whether NVRTC, nvJitLink or a cache gave it, passed cl_code_problem. */
cl_ObjectCode *cl_push_objectcode(lua_State *L, int codei, int kind)
{
  char why[160];
  size_t n;
  const char *code = lua_tolstring(L, codei, &n);
  if (cl_code_problem(code, n, &kind, why, sizeof why))
    luaL_error(L, "cannot make a cuda.ObjectCode(%s) of %I bytes: %s", cl_code_kinds[kind],
               (lua_Integer)n, why);
  return push_objectcode(L, codei, kind);
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
  return luaL_argerror(L, i, lua_pushfstring(L, "kind must be \"cubin\", \"ptx\", \"fatbin\", "
                                             "\"ltoir\", \"object\" or \"library\", got '%s'", name));
}

/* The string argument 1 as an ObjectCode of kind (< 0: detected), pushed
 * once it passes the bounds check. */
static int push_checked_code(lua_State *L, int kind)
{
  char why[160];
  size_t n;
  luaL_checktype(L, 1, LUA_TSTRING);
  const char *code = lua_tolstring(L, 1, &n);
  if (cl_code_problem(code, n, &kind, why, sizeof why))
    return luaL_argerror(L, 1, why);
  push_objectcode(L, 1, kind);
  return 1;
}

/* cuda.ObjectCode.from_data(bytes [, kind]): kind is detected when omitted. */
static int objectcode_from_data(lua_State *L)
{
  int kind = opt_kind(L, 2);
  cl_check_nargs(L, 2);
  return push_checked_code(L, kind);
}

/* cuda.ObjectCode.from_cubin(bytes), from_ptx, from_fatbin, from_ltoir,
 * from_object, from_library: the kind is the upvalue. */
static int objectcode_from_kind(lua_State *L)
{
  cl_check_nargs(L, 1);
  return push_checked_code(L, (int)lua_tointeger(L, lua_upvalueindex(1)));
}

/* cuda.ObjectCode.from_file(path [, kind]) */
static int objectcode_from_file(lua_State *L)
{
  char why[160];
  size_t n = 0;
  const char *path = luaL_checkstring(L, 1);
  int kind = opt_kind(L, 2);
  cl_check_nargs(L, 2);
  const char *buf = cl_push_file(L, path, FILE_LIMIT, &n);
  if (!buf)
    return luaL_error(L, "cannot read object code from '%s': %s", path, strerror(errno));
  const char *code = lua_pushlstring(L, buf, n);  /* checked as a string: NUL-terminated */
  if (cl_code_problem(code, n, &kind, why, sizeof why))
    return luaL_error(L, "cannot load '%s': %s", path, why);
  push_objectcode(L, -1, kind);
  return 1;
}

/* Raises for kinds the driver does not load. */
static void check_loadable(lua_State *L, const cl_ObjectCode *o)
{
  if (o->kind >= CL_NLOADABLE)
    luaL_error(L, "cuda.ObjectCode(%s) cannot be loaded: link it with cuda.Linker into a cubin "
               "first", cl_code_kinds[o->kind]);
}

/* Load the library on first use; the driver keeps its own copy. The
 * caller has loaded the driver and runs no Lua between its check of o and
 * this. */
static void load_library(lua_State *L, int oi, cl_ObjectCode *o)
{
  size_t n;
  if (o->library)
    return;
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
  lua_getiuservalue(L, oi, OBJ_CODE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  int held = cl_gc_hold(L);     /* the names are the library's: no finalizer may unload it */
  push_kernel_list(L, o->library);
  cl_gc_release(L, held);       /* before raising (HACKING.md) */
  return cl_raise_detail(L, CUDA_ERROR_NOT_FOUND, "cuLibraryGetKernel",
                         "no kernel named '%s' in cuda.ObjectCode(%s, %I bytes)%s", name,
                         cl_code_kinds[o->kind], n, lua_tostring(L, -1));
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

/* --- parameter types ------------------------------------------------------------ */

/* NULL when the n types fit the kernel's parameters as the driver reports
 * them (their count; each size a type knows), else why not. A kernel whose
 * parameters the driver does not report takes them from declared types,
 * laid out as C lays out a struct's members, when every type is a scalar
 * or a pointer (types read from the code are not trusted that far). */
static const char *types_problem(cl_Kernel *k, const cl_ArgType *types, int n, int declared,
                                 char *why, size_t size)
{
  if (k->nparams < 0 && !declared) {
    snprintf(why, size, "the driver does not report the kernel's parameters");
    return why;
  }
  if (k->nparams < 0) {
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
      size_t align = types[i].size;
      if (types[i].size == 0 || types[i].size > 8) {   /* a CUtensorMap's place is ptxas's */
        snprintf(why, size, "the driver does not report the kernel's parameters, and parameter "
                 "%d (%s) has no size and alignment cudalua knows", i + 1, types[i].name);
        return why;
      }
      offset = (offset + align - 1) / align * align;
      k->param_offset[i] = offset;
      k->param_size[i] = types[i].size;
      offset += types[i].size;
    }
    k->nparams = n;
    return NULL;
  }
  if (n != k->nparams) {
    snprintf(why, size, "%d parameter%s declared, the kernel has %d", n, n == 1 ? "" : "s",
             k->nparams);
    return why;
  }
  for (int i = 0; i < n; i++)
    if (types[i].size != 0 && types[i].size != k->param_size[i]) {
      snprintf(why, size, "parameter %d (%s) is %d bytes, the kernel's is %d bytes", i + 1,
               types[i].name, (int)types[i].size, (int)k->param_size[i]);
      return why;
    }
  return NULL;
}

/* Push the list of the types' names. */
static void push_type_names(lua_State *L, const cl_ArgType *types, int n)
{
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushstring(L, types[i].name);
    lua_rawseti(L, -2, i + 1);
  }
}

/* Give the kernel k at ki the n types, whose names' list is at the top
 * (popped); a declared signature that does not fit raises, types read from
 * the code are dropped (0). The caller has checked k after the last
 * allocation. */
static int set_types(lua_State *L, cl_Kernel *k, int ki, const cl_ArgType *types, int n,
                     int declared)
{
  char why[320];
  if (types_problem(k, types, n, declared, why, sizeof why)) {
    lua_pop(L, 1);
    if (declared)
      luaL_error(L, "the signature does not fit kernel '%s': %s", k->name, why);
    return 0;
  }
  for (int i = 0; i < n; i++)
    k->param_kind[i] = types[i].kind;
  lua_setiuservalue(L, ki, KERNEL_TYPES);
  return 1;
}

/* The parameter types the code itself says: a C++ kernel's mangled name,
 * or the declaration of an extern "C" kernel in the source cudalua
 * compiled (user value OBJ_SOURCE of the ObjectCode at oi). Returns
 * their count, or -1 when they are not known. */
static int types_from_code(lua_State *L, int oi, const char *symbol, cl_ArgType *types)
{
  const char *why;
  char decl[4096], fname[8];
  int n = cl_demangle(symbol, types, CL_MAX_PARAMS, fname, sizeof fname, &why);
  if (n >= 0 || strncmp(symbol, "_Z", 2) == 0)
    return n;
  size_t len;
  if (lua_getiuservalue(L, oi, OBJ_SOURCE) != LUA_TSTRING) {
    lua_pop(L, 1);
    return -1;
  }
  const char *source = lua_tolstring(L, -1, &len);
  int found = cl_find_declaration(source, len, symbol, decl, sizeof decl);
  lua_pop(L, 1);
  return found ? cl_parse_signature(decl, types, CL_MAX_PARAMS, fname, sizeof fname) : -1;
}

/* A new kernel of the ObjectCode at oi, named by the string at namei, of
 * symbol (the lowered name of a name expression, else the name); its
 * types are the n declared ones (n < 0: none declared). */
static void push_kernel(lua_State *L, int oi, CUkernel handle, int namei, const char *symbol,
                        const cl_ArgType *declared, int n)
{
  cl_ArgType found[CL_MAX_PARAMS];
  const char *name = lua_tostring(L, namei);
  cl_Kernel *k = lua_newuserdatauv(L, sizeof *k, KERNEL_NUV);
  memset(k, 0, sizeof *k);
  k->closed = 1;                /* until it is complete */
  k->fn_device = -1;
  k->nparams = -1;
  luaL_setmetatable(L, CL_KERNEL);
  int ki = lua_gettop(L);
  cl_check_objectcode(L, oi);   /* a finalizer run by the allocation may have closed it */
  k->handle = handle;
  snprintf(k->name, sizeof k->name, "%s", name);
  read_params(L, k, name);
  lua_pushvalue(L, oi);
  lua_setiuservalue(L, ki, KERNEL_OBJ);
  lua_pushvalue(L, namei);
  lua_setiuservalue(L, ki, KERNEL_NAME);
  remember_kernel(L, oi, ki);
  const cl_ArgType *types = declared;
  if (n < 0) {
    n = types_from_code(L, oi, symbol, found);
    types = found;
  }
  if (n >= 0)
    push_type_names(L, types, n);
  cl_check_objectcode(L, oi);   /* still loaded after the Lua code above */
  if (n >= 0)
    set_types(L, k, ki, types, n, types == declared);
  k->closed = 0;
}

/* The symbol for name: its lowered name when it is one of the name
 * expressions, else name itself. */
static const char *symbol_name(lua_State *L, int oi, const char *name)
{
  if (lua_getiuservalue(L, oi, OBJ_NAMES) == LUA_TTABLE && lua_getfield(L, -1, name) == LUA_TSTRING)
    name = lua_tostring(L, -1);                   /* anchored in the names table */
  lua_settop(L, 3);
  return name;
}

/* The signature at i (a string) parsed into types: their count; raises
 * an argument error for a bad one. */
static int check_signature(lua_State *L, int i, cl_ArgType *types)
{
  char why[200];
  if (lua_type(L, i) != LUA_TSTRING)
    luaL_typeerror(L, i, "string (a declaration such as \"const float*, double, size_t\")");
  size_t len;
  const char *sig = lua_tolstring(L, i, &len);
  if (strlen(sig) != len)
    luaL_argerror(L, i, "bad signature: it has a NUL byte");
  int n = cl_parse_signature(sig, types, CL_MAX_PARAMS, why, sizeof why);
  if (n < 0)
    luaL_argerror(L, i, lua_pushfstring(L, "bad signature: %s", why));
  return n;
}

/* obj:get_kernel(name [, signature]): a kernel name, or one of the name
 * expressions the program was compiled with ("add<float>"); the signature
 * declares its parameter types ("const float*, float*, double, size_t").
 * The errors that need no driver come first; the library is loaded, and
 * the object checked again right before the driver reads it. */
static int objectcode_get_kernel(lua_State *L)
{
  cl_ArgType declared[CL_MAX_PARAMS];
  luaL_checkudata(L, 1, CL_OBJECTCODE);
  size_t len;
  const char *name = luaL_checklstring(L, 2, &len);
  luaL_argcheck(L, len > 0 && strlen(name) == len, 2, "kernel name is empty or has a NUL byte");
  cl_check_nargs(L, 3);
  lua_settop(L, 3);
  int n = lua_isnil(L, 3) ? -1 : check_signature(L, 3, declared);
  cl_hostfunc_drain(L);         /* the driver's load waits for pending host functions */
  check_loadable(L, cl_check_objectcode(L, 1));
  cl_driver_load(L);
  const char *symbol = symbol_name(L, 1, name);   /* anchored in the names table */
  load_library(L, 1, cl_check_objectcode(L, 1));
  cl_ObjectCode *o = cl_check_objectcode(L, 1);   /* nothing below runs Lua before the driver call */
  CUkernel handle = NULL;
  CUresult r = CL_CALL(cuLibraryGetKernel, (&handle, o->library, symbol));
  if (r == CUDA_ERROR_NOT_FOUND)
    return raise_missing_kernel(L, 1, o, symbol);
  cl_check(L, r, "cuLibraryGetKernel");
  push_kernel(L, 1, handle, 2, symbol, declared, n);
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

static void unload(cl_ObjectCode *o)
{
  if (o->library) {
    cl_library_release(o->library);
    o->library = NULL;
  }
}

/* While a live graph launches one of its kernels, the library stays
 * loaded: it goes with the last such graph (cl_objectcode_graph_release). */
static int objectcode_close(lua_State *L)
{
  cl_ObjectCode *o = luaL_checkudata(L, 1, CL_OBJECTCODE);
  if (o->closed)
    return 0;
  o->closed = 1;
  close_kernels(L, 1);
  if (o->graph_refs == 0)
    unload(o);
  return 0;
}

void cl_objectcode_graph_release(cl_ObjectCode *o)
{
  if (--o->graph_refs == 0 && o->closed)
    unload(o);
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
  const char *key = luaL_checkstring(L, 2);
  cl_ObjectCode *o = cl_check_objectcode(L, 1);
  if (strcmp(key, "code") == 0)
    lua_getiuservalue(L, 1, OBJ_CODE);
  else if (strcmp(key, "kind") == 0)
    lua_pushstring(L, cl_code_kinds[o->kind]);
  else if (strcmp(key, "size") == 0) {
    lua_getiuservalue(L, 1, OBJ_CODE);
    lua_pushinteger(L, (lua_Integer)lua_rawlen(L, -1));
  } else if (strcmp(key, "name_expressions") == 0)
    push_names_copy(L, 1);
  else
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

/* {{type=, offset=, size=}, ...}, or nil when the driver does not report
 * them; type where it is known. */
static void push_params(lua_State *L, int ki)
{
  lua_getiuservalue(L, ki, KERNEL_TYPES);
  cl_Kernel *k = cl_check_kernel(L, ki);
  int nparams = k->nparams;
  if (nparams < 0) {
    lua_pushnil(L);
    return;
  }
  lua_createtable(L, nparams, 0);
  for (int i = 0; i < nparams; i++) {
    lua_createtable(L, 0, 3);
    k = cl_check_kernel(L, ki);
    lua_Integer offset = (lua_Integer)k->param_offset[i], size = k->param_size[i];
    lua_pushinteger(L, offset);
    lua_setfield(L, -2, "offset");
    lua_pushinteger(L, size);
    lua_setfield(L, -2, "size");
    if (lua_istable(L, -3)) {
      if (lua_rawgeti(L, -3, i + 1) == LUA_TSTRING && lua_rawlen(L, -1) > 0)
        lua_setfield(L, -2, "type");
      else
        lua_pop(L, 1);
    }
    lua_rawseti(L, -2, i + 1);
  }
}

/* k:signature(declaration) -> k: declares the parameter types, checked
 * against the sizes the driver reports. */
static int kernel_signature(lua_State *L)
{
  cl_ArgType types[CL_MAX_PARAMS];
  cl_check_kernel(L, 1);
  int n = check_signature(L, 2, types);
  cl_check_nargs(L, 2);
  push_type_names(L, types, n);
  cl_Kernel *k = cl_check_kernel(L, 1);
  set_types(L, k, 1, types, n, 1);
  lua_settop(L, 1);
  return 1;
}

/* k:occupancy(block_size [, dynamic_shmem]): resident blocks per SM on the
 * current device. */
static int kernel_occupancy(lua_State *L)
{
  luaL_checkudata(L, 1, CL_KERNEL);
  lua_Integer block = luaL_checkinteger(L, 2);
  lua_Integer shmem = luaL_optinteger(L, 3, 0);
  luaL_argcheck(L, block > 0 && block <= 1 << 20, 2, "block size must be > 0");
  luaL_argcheck(L, shmem >= 0, 3, "shared memory size must be >= 0");
  cl_Device *d = cl_push_current_device(L);       /* may allocate: before the check */
  cl_Kernel *k = cl_check_kernel(L, 1);
  cl_device_activate(L, d);
  CUfunction fn = cl_kernel_function(L, k, d);
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
  const char *key = luaL_checkstring(L, 2);
  if (strcmp(key, "params") == 0 || strcmp(key, "attributes") == 0) {
    lua_settop(L, 2);
    cl_gc_hold(L);                                /* tables made after the check */
  }
  cl_Kernel *k = cl_check_kernel(L, 1);
  if (strcmp(key, "name") == 0)
    lua_getiuservalue(L, 1, KERNEL_NAME);
  else if (strcmp(key, "params") == 0)
    push_params(L, 1);
  else if (strcmp(key, "attributes") == 0)
    push_attributes(L, k);
  else if (strcmp(key, "object_code") == 0)
    lua_getiuservalue(L, 1, KERNEL_OBJ);
  else
    lua_pushnil(L);
  return 1;
}

/* --- cuda.demangle, cuda.parse_signature ---------------------------------------- */

/* {{type=, size=}, ...}: size where the type alone says it. */
static void push_types(lua_State *L, const cl_ArgType *types, int n)
{
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_createtable(L, 0, 2);
    lua_pushstring(L, types[i].name);
    lua_setfield(L, -2, "type");
    if (types[i].size) {
      lua_pushinteger(L, types[i].size);
      lua_setfield(L, -2, "size");
    }
    lua_rawseti(L, -2, i + 1);
  }
}

/* cuda.demangle(symbol) -> name, params | nil, why */
static int cuda_demangle(lua_State *L)
{
  cl_ArgType types[CL_MAX_PARAMS];
  char fname[256];
  const char *why;
  const char *symbol = luaL_checkstring(L, 1);
  cl_check_nargs(L, 1);
  int n = cl_demangle(symbol, types, CL_MAX_PARAMS, fname, sizeof fname, &why);
  if (n < 0) {
    lua_pushnil(L);
    lua_pushstring(L, why);
    return 2;
  }
  lua_pushstring(L, fname);
  push_types(L, types, n);
  return 2;
}

/* cuda.parse_signature(declaration) -> params; raises for a bad one */
static int cuda_parse_signature(lua_State *L)
{
  cl_ArgType types[CL_MAX_PARAMS];
  int n = check_signature(L, 1, types);
  cl_check_nargs(L, 1);
  push_types(L, types, n);
  return 1;
}

/* --- registration -------------------------------------------------------------- */

void cl_open_module(lua_State *L)
{
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
    {"occupancy", kernel_occupancy}, {"signature", kernel_signature}, {"close", kernel_close},
    {NULL, NULL}
  };
  static const luaL_Reg objectcode_functions[] = {
    {"from_file", objectcode_from_file}, {"from_data", objectcode_from_data}, {NULL, NULL}
  };
  cl_new_type(L, CL_OBJECTCODE, objectcode_meta, objectcode_methods, objectcode_fields);
  cl_new_type(L, CL_KERNEL, kernel_meta, kernel_methods, kernel_fields);
  luaL_newlib(L, objectcode_functions);
  for (int k = 0; cl_code_kinds[k]; k++) {
    lua_pushfstring(L, "from_%s", cl_code_kinds[k]);
    lua_pushinteger(L, k);
    lua_pushcclosure(L, objectcode_from_kind, 1);
    lua_rawset(L, -3);
  }
  lua_setfield(L, -2, "ObjectCode");
  static const luaL_Reg functions[] = {
    {"demangle", cuda_demangle}, {"parse_signature", cuda_parse_signature}, {NULL, NULL}
  };
  luaL_setfuncs(L, functions, 0);
  cl_lifetimes_objectcode(cl_objectcode_graph_release);
}
