/* SPDX-License-Identifier: MIT */
/* signature.c: the C++ types of a kernel's parameters, read three ways.
 *
 * - From a C++ kernel's mangled name (Itanium C++ ABI, what NVRTC and nvcc
 *   emit, and the lowered name of a name expression): _Z3addIfEvPT_PKS0_i
 *   is add<float>(float*, const float*, int). The decoder knows builtin
 *   types, pointers, qualifiers, template parameters and substitutions;
 *   class, enum and template types give their name only (the driver gives
 *   their size).
 * - From a declaration in C declarator syntax, written by the user
 *   ("const float*, float*, double, size_t") or found in the source of an
 *   extern "C" kernel that cudalua compiled (cl_find_declaration).
 *
 * Pure functions over strings, with bounded work and recursion: they never
 * raise, never allocate, and report why they fail in a caller's buffer.
 * cuda._signature (module.c) exposes them to the tests. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cl.h"

static void set_name(cl_ArgType *t, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->name, sizeof t->name, fmt, ap);
  va_end(ap);
  if (n >= (int)sizeof t->name)            /* cut: say so */
    memcpy(t->name + sizeof t->name - 4, "...", 4);
}

/* Append to the string in buf (of size bytes), cutting what does not fit. */
static void append(char *buf, size_t size, const char *fmt, ...)
{
  size_t used = strnlen(buf, size);
  if (used + 1 >= size)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, size - used, fmt, ap);
  va_end(ap);
}

static void set_type(cl_ArgType *t, int kind, int size, const char *name)
{
  t->kind = (unsigned char)kind;
  t->size = (unsigned short)size;
  set_name(t, "%s", name);
}

/* --- builtin types --------------------------------------------------------- */

typedef struct Builtin {
  const char *code;                        /* mangled */
  const char *name;
  int kind, size;
} Builtin;

/* long is 8 bytes (LP64, as on every platform CUDA kernels run from);
 * char's signedness follows the host (signed on x86-64, unsigned on
 * Arm), so it takes either. Sizes 0: only the driver knows. */
static const Builtin builtins[] = {
  {"v", "void", CL_ARG_VOID, 0},
  {"b", "bool", CL_ARG_BOOL, 1},
  {"c", "char", CL_ARG_INT, 1},
  {"a", "signed char", CL_ARG_SINT, 1},
  {"h", "unsigned char", CL_ARG_UINT, 1},
  {"s", "short", CL_ARG_SINT, 2},
  {"t", "unsigned short", CL_ARG_UINT, 2},
  {"i", "int", CL_ARG_SINT, 4},
  {"j", "unsigned int", CL_ARG_UINT, 4},
  {"l", "long", CL_ARG_SINT, 8},
  {"m", "unsigned long", CL_ARG_UINT, 8},
  {"x", "long long", CL_ARG_SINT, 8},
  {"y", "unsigned long long", CL_ARG_UINT, 8},
  {"w", "wchar_t", CL_ARG_SINT, 4},
  {"f", "float", CL_ARG_FLOAT, 4},
  {"d", "double", CL_ARG_FLOAT, 8},
  {"n", "__int128", CL_ARG_NAMED, 16},
  {"o", "unsigned __int128", CL_ARG_NAMED, 16},
  {"e", "long double", CL_ARG_NAMED, 0},
  {"g", "__float128", CL_ARG_NAMED, 16},
  {"Ds", "char16_t", CL_ARG_UINT, 2},
  {"Di", "char32_t", CL_ARG_UINT, 4},
  {"Du", "char8_t", CL_ARG_UINT, 1},
  {"Dn", "decltype(nullptr)", CL_ARG_PTR, 8},
  {"Dh", "__fp16", CL_ARG_NAMED, 2},
  {"DF16_", "_Float16", CL_ARG_NAMED, 2},
  {"DF16b", "__bf16", CL_ARG_NAMED, 2},
  {"DF32_", "_Float32", CL_ARG_FLOAT, 4},
  {"DF64_", "_Float64", CL_ARG_FLOAT, 8},
};
#define NBUILTINS (sizeof builtins / sizeof builtins[0])

/* --- the Itanium C++ ABI decoder -------------------------------------------- */

#define MAX_SUBS 96
#define MAX_TARGS 32
#define MAX_DEPTH 48

typedef struct Decoder {
  const char *p;
  cl_ArgType subs[MAX_SUBS];             /* the substitution candidates, in order */
  int nsubs;
  cl_ArgType targs[MAX_TARGS];           /* the function's template arguments */
  int ntargs;
  int depth;
  const char *why;
} Decoder;

static int fail(Decoder *D, const char *why)
{
  if (!D->why)
    D->why = why;
  return 0;
}

static void add_sub(Decoder *D, const cl_ArgType *t)
{
  if (D->nsubs < MAX_SUBS)
    D->subs[D->nsubs] = *t;
  D->nsubs++;                              /* counted past the end: a later use fails */
}

/* <number>: decimal, for lengths and array sizes. */
static int number(Decoder *D, long *out)
{
  long v = 0;
  if (!isdigit((unsigned char)*D->p))
    return fail(D, "a number was expected");
  while (isdigit((unsigned char)*D->p)) {
    if (v > 100000)
      return fail(D, "a number is too large");
    v = v * 10 + (*D->p++ - '0');
  }
  *out = v;
  return 1;
}

/* <seq-id> _ : base 36 with digits and capitals; "_" alone is 0, else +1. */
static int seq_id(Decoder *D, int *out)
{
  long v = 0;
  if (*D->p == '_') {
    D->p++;
    *out = 0;
    return 1;
  }
  while (isdigit((unsigned char)*D->p) || isupper((unsigned char)*D->p)) {
    int c = *D->p++;
    v = v * 36 + (isdigit(c) ? c - '0' : c - 'A' + 10);
    if (v > 100000)
      return fail(D, "a substitution index is too large");
  }
  if (*D->p++ != '_')
    return fail(D, "a substitution does not end with _");
  *out = (int)v + 1;
  return 1;
}

/* <source-name> ::= <length> <identifier>, appended to buf. */
static int source_name(Decoder *D, char *buf, size_t size)
{
  long n;
  if (!number(D, &n))
    return 0;
  if (n <= 0 || (long)strnlen(D->p, (size_t)n) < n)
    return fail(D, "a name runs past the end");
  const char *id = D->p;
  if (n == 12 && strncmp(id, "_GLOBAL__N_1", 12) == 0)
    append(buf, size, "(anonymous namespace)");
  else
    append(buf, size, "%.*s", (int)n, id);
  D->p += n;
  return 1;
}

static int type(Decoder *D, cl_ArgType *t);
static int template_param(Decoder *D, cl_ArgType *t);

/* <template-arg>: a type, a literal (L <type> <value> E) or a template
 * parameter used as a value (X T_ E); appended to buf. */
static int template_arg(Decoder *D, char *buf, size_t size, cl_ArgType *arg)
{
  cl_ArgType t;
  memset(&t, 0, sizeof t);
  size_t used = strlen(buf);
  if (*D->p == 'L') {
    D->p++;
    if (*D->p == '_' && D->p[1] == 'Z')
      return fail(D, "a template argument names a symbol");
    if (!type(D, &t))
      return 0;
    int negative = *D->p == 'n';
    D->p += negative;
    const char *digits = D->p;
    while (isdigit((unsigned char)*D->p) || islower((unsigned char)*D->p))
      D->p++;                              /* decimal, or a float's lowercase hex */
    if (*D->p++ != 'E')
      return fail(D, "a literal does not end with E");
    int len = (int)(D->p - 1 - digits);
    if (t.kind == CL_ARG_BOOL && len == 1)
      append(buf, size, "%s", *digits == '1' ? "true" : "false");
    else
      append(buf, size, "%s%.*s", negative ? "-" : "", len, digits);
    set_name(&t, "%s", buf + used);
  } else if (*D->p == 'X') {
    D->p++;
    if (*D->p != 'T' || !template_param(D, &t))   /* no substitution candidate */
      return fail(D, "a template argument is an expression");
    if (*D->p++ != 'E')
      return fail(D, "an expression does not end with E");
    append(buf, size, "%s", t.name);
  } else {
    if (!type(D, &t))
      return 0;
    append(buf, size, "%s", t.name);
  }
  if (arg)
    *arg = t;
  return 1;
}

/* <template-args> ::= I <template-arg>+ E, appended to buf as "<a, b>";
 * the function's own are kept (save) for T_. */
static int template_args(Decoder *D, char *buf, size_t size, int save)
{
  D->p++;                                  /* I */
  if (save)
    D->ntargs = 0;
  append(buf, size, "<");
  for (int first = 1; *D->p != 'E'; first = 0) {
    if (!*D->p)
      return fail(D, "template arguments do not end");
    if (!first)
      append(buf, size, ", ");
    cl_ArgType arg;
    if (!template_arg(D, buf, size, &arg))
      return 0;
    if (save && D->ntargs < MAX_TARGS)
      D->targs[D->ntargs++] = arg;
  }
  D->p++;
  append(buf, size, ">");
  return 1;
}

/* A substitution S_, S<n>_ or a standard one (St, Sa, ...), into t. */
static int substitution(Decoder *D, cl_ArgType *t)
{
  static const struct { char c; const char *name; } standard[] = {
    {'a', "std::allocator"}, {'b', "std::basic_string"}, {'s', "std::string"},
    {'i', "std::istream"}, {'o', "std::ostream"}, {'d', "std::iostream"},
  };
  D->p++;                                  /* S */
  for (size_t i = 0; i < sizeof standard / sizeof standard[0]; i++)
    if (*D->p == standard[i].c) {
      D->p++;
      set_type(t, CL_ARG_NAMED, 0, standard[i].name);
      return 1;
    }
  int id;
  if (!seq_id(D, &id))
    return 0;
  if (id >= D->nsubs || id >= MAX_SUBS)
    return fail(D, "a substitution refers to nothing before it");
  *t = D->subs[id];
  return 1;
}

/* A template parameter T_ or T<n>_, into t. */
static int template_param(Decoder *D, cl_ArgType *t)
{
  D->p++;                                  /* T */
  int id;
  if (!seq_id(D, &id))
    return 0;
  if (id >= D->ntargs)
    return fail(D, "a template parameter refers to no template argument");
  *t = D->targs[id];
  return 1;
}

/* Skip ABI tags (B <source-name>) and the local-linkage mark L. */
static int skip_tags(Decoder *D)
{
  while (*D->p == 'B') {
    char tag[256] = "";
    D->p++;
    if (!source_name(D, tag, sizeof tag))
      return 0;
  }
  return 1;
}

/* A name: <nested-name> (N ... E), or an unscoped one with optional
 * template arguments (St for std::, or a substitution of a template
 * name). Adds its substitution candidates; for a function's name (fn) the
 * whole name is not one, and its template arguments are kept for T_. *t
 * is the named class type; *templated says whether it ended in template
 * arguments. */
static int name(Decoder *D, cl_ArgType *t, int fn, int *templated)
{
  char buf[sizeof t->name] = "";
  cl_ArgType prefix;
  *templated = 0;
  if (*D->p == 'N') {
    D->p++;
    while (*D->p == 'r' || *D->p == 'V' || *D->p == 'K' || *D->p == 'R' || *D->p == 'O')
      D->p++;                              /* a member function's qualifiers */
    int from_sub = 0;                      /* the last component was a substitution */
    for (int components = 0; *D->p != 'E'; components++) {
      *templated = 0;
      if (*D->p == 'S' && D->p[1] == 't') {
        D->p += 2;
        snprintf(buf, sizeof buf, "std::");
        if (!source_name(D, buf, sizeof buf))
          return 0;
      } else if (*D->p == 'S') {
        if (components > 0 || !substitution(D, &prefix))
          return fail(D, "a substitution inside a nested name");
        snprintf(buf, sizeof buf, "%s", prefix.name);
        from_sub = 1;
        continue;                          /* a substitution is no new candidate */
      } else if (*D->p == 'T') {
        if (components > 0 || !template_param(D, &prefix))
          return fail(D, "a template parameter inside a nested name");
        snprintf(buf, sizeof buf, "%s", prefix.name);
      } else if (*D->p == 'I') {
        if (components == 0)
          return fail(D, "template arguments without a name");
        if (!from_sub) {
          cl_ArgType named;
          set_type(&named, CL_ARG_NAMED, 0, buf);
          add_sub(D, &named);              /* the template prefix */
        }
        from_sub = 0;
        if (!template_args(D, buf, sizeof buf, fn))   /* the innermost are kept last */
          return 0;
        *templated = 1;
        if (*D->p == 'E')
          break;                           /* the whole name: added below */
        cl_ArgType named;
        set_type(&named, CL_ARG_NAMED, 0, buf);
        add_sub(D, &named);
        continue;
      } else {
        if (*D->p == 'L')
          D->p++;
        if (components > 0)
          append(buf, sizeof buf, "::");
        if (!isdigit((unsigned char)*D->p))
          return fail(D, "a nested name has a component cudalua cannot read");
        if (!source_name(D, buf, sizeof buf) || !skip_tags(D))
          return 0;
      }
      from_sub = 0;
      if (!*D->p)
        return fail(D, "a nested name does not end with E");
      if (D->p[0] != 'E' && D->p[0] != 'I') {
        cl_ArgType named;
        set_type(&named, CL_ARG_NAMED, 0, buf);
        add_sub(D, &named);                /* a prefix */
      }
    }
    D->p++;                                /* E */
    set_type(t, CL_ARG_NAMED, 0, buf);
    if (!fn)
      add_sub(D, t);
    return 1;
  }
  if (*D->p == 'S' && D->p[1] != 't') {    /* a substituted template name */
    if (!substitution(D, &prefix))
      return 0;
    snprintf(buf, sizeof buf, "%s", prefix.name);
    if (*D->p != 'I') {
      *t = prefix;
      return 1;
    }
  } else {
    if (*D->p == 'S') {
      D->p += 2;
      snprintf(buf, sizeof buf, "std::");
    }
    if (*D->p == 'L')
      D->p++;
    if (!isdigit((unsigned char)*D->p))
      return fail(D, "a name cudalua cannot read");
    if (!source_name(D, buf, sizeof buf) || !skip_tags(D))
      return 0;
    if (*D->p == 'I') {
      cl_ArgType named;
      set_type(&named, CL_ARG_NAMED, 0, buf);
      add_sub(D, &named);                  /* the template name */
    }
  }
  if (*D->p == 'I') {
    if (!template_args(D, buf, sizeof buf, fn))
      return 0;
    *templated = 1;
  }
  set_type(t, CL_ARG_NAMED, 0, buf);
  if (!fn)
    add_sub(D, t);
  return 1;
}

/* "X*", "X&", "const X", "X* const": the declarator spelling. */
static void qualify(cl_ArgType *t, const char *qualifier)
{
  char inner[sizeof t->name];
  snprintf(inner, sizeof inner, "%s", t->name);
  size_t n = strlen(inner);
  if (n > 0 && (inner[n - 1] == '*' || inner[n - 1] == '&'))
    set_name(t, "%s %s", inner, qualifier);
  else
    set_name(t, "%s %s", qualifier, inner);
}

/* <function-type> F [Y] <return type> <parameter types> E, as "R(A, B)". */
static int function_type(Decoder *D, cl_ArgType *t)
{
  char buf[sizeof t->name];
  cl_ArgType part;
  D->p++;
  if (*D->p == 'Y')
    D->p++;
  if (!type(D, &part))
    return 0;
  buf[0] = '\0';
  append(buf, sizeof buf, "%s(", part.name);
  for (int first = 1; *D->p != 'E'; first = 0) {
    if (!*D->p || !type(D, &part))
      return fail(D, "a function type does not end with E");
    if (!(first && part.kind == CL_ARG_VOID && *D->p == 'E'))
      append(buf, sizeof buf, "%s%s", first ? "" : ", ", part.name);
  }
  D->p++;
  append(buf, sizeof buf, ")");
  set_type(t, CL_ARG_NAMED, 0, buf);
  return 1;
}

static int builtin(Decoder *D, cl_ArgType *t)
{
  for (size_t i = 0; i < NBUILTINS; i++) {
    size_t n = strlen(builtins[i].code);
    if (strncmp(D->p, builtins[i].code, n) == 0) {
      D->p += n;
      set_type(t, builtins[i].kind, builtins[i].size, builtins[i].name);
      return 1;
    }
  }
  return 0;
}

static int type_body(Decoder *D, cl_ArgType *t)
{
  int templated;
  char c = *D->p;
  switch (c) {
  case 'r': case 'V': case 'K': {         /* qualifiers, in the order r V K */
    int restrict_ = 0, volatile_ = 0, const_ = 0;
    while (*D->p == 'r' || *D->p == 'V' || *D->p == 'K') {
      restrict_ |= *D->p == 'r';
      volatile_ |= *D->p == 'V';
      const_ |= *D->p == 'K';
      D->p++;
    }
    if (!type(D, t))
      return 0;
    if (volatile_)
      qualify(t, "volatile");
    if (const_)
      qualify(t, "const");
    if (restrict_) {
      char inner[sizeof t->name];
      snprintf(inner, sizeof inner, "%s", t->name);
      set_name(t, "%s __restrict__", inner);
    }
    add_sub(D, t);
    return 1;
  }
  case 'P': case 'R': case 'O':
    D->p++;
    if (!type(D, t))
      return 0;
    if (t->name[0] && t->name[strlen(t->name) - 1] == ')' && t->kind == CL_ARG_NAMED) {
      char inner[sizeof t->name];   /* a function: R(*)(A) */
      snprintf(inner, sizeof inner, "%s", t->name);
      char *paren = strchr(inner, '(');
      *paren = '\0';
      set_name(t, "%s(%s)(%s", inner, c == 'P' ? "*" : c == 'R' ? "&" : "&&", paren + 1);
    } else {
      char inner[sizeof t->name];
      snprintf(inner, sizeof inner, "%s", t->name);
      set_name(t, "%s%s", inner, c == 'P' ? "*" : c == 'R' ? "&" : "&&");
    }
    t->kind = CL_ARG_PTR;
    t->size = 8;
    add_sub(D, t);
    return 1;
  case 'F':
    if (!function_type(D, t))
      return 0;
    add_sub(D, t);
    return 1;
  case 'A': {                              /* A <n> _ <type>: T[n] */
    long n = -1;
    D->p++;
    if (*D->p != '_' && !number(D, &n))
      return 0;
    if (*D->p++ != '_' || !type(D, t))
      return fail(D, "an array type cudalua cannot read");
    char inner[sizeof t->name];
    snprintf(inner, sizeof inner, "%s", t->name);
    if (n >= 0)
      set_name(t, "%s[%ld]", inner, n);
    else
      set_name(t, "%s[]", inner);
    t->kind = CL_ARG_NAMED;
    t->size = 0;
    add_sub(D, t);
    return 1;
  }
  case 'T':
    if (!template_param(D, t))
      return 0;
    add_sub(D, t);
    if (*D->p == 'I') {                    /* a template template parameter */
      char buf[sizeof t->name];
      snprintf(buf, sizeof buf, "%s", t->name);
      if (!template_args(D, buf, sizeof buf, 0))
        return 0;
      set_type(t, CL_ARG_NAMED, 0, buf);
      add_sub(D, t);
    }
    return 1;
  case 'S':
    if (D->p[1] != 't' && !isdigit((unsigned char)D->p[1]) && !isupper((unsigned char)D->p[1]) &&
        D->p[1] != '_' && strchr("absiod", D->p[1]) == NULL)
      return fail(D, "an unknown substitution");
    return name(D, t, 0, &templated);
  case 'N':
    return name(D, t, 0, &templated);
  case 'D':
    if (builtin(D, t))
      return 1;
    return fail(D, "a D type cudalua cannot read (decltype, a vector or a pack)");
  case 'u': {                              /* a vendor type */
    char buf[sizeof t->name] = "";
    D->p++;
    if (!source_name(D, buf, sizeof buf))
      return 0;
    set_type(t, CL_ARG_NAMED, 0, buf);
    add_sub(D, t);
    return 1;
  }
  default:
    if (isdigit((unsigned char)c) || c == 'L')
      return name(D, t, 0, &templated);
    if (builtin(D, t))
      return 1;
    return fail(D, "a type cudalua cannot read");
  }
}

static int type(Decoder *D, cl_ArgType *t)
{
  if (++D->depth > MAX_DEPTH)
    return fail(D, "types nest too deeply");
  memset(t, 0, sizeof *t);
  int ok = *D->p ? type_body(D, t) : fail(D, "the name ends inside a type");
  D->depth--;
  return ok;
}

int cl_demangle(const char *mangled, cl_ArgType *params, int max, char *fname, size_t fname_size,
                const char **why)
{
  Decoder D;
  cl_ArgType fn;
  int templated;
  memset(&D, 0, sizeof D);
  *why = NULL;
  if (strncmp(mangled, "_Z", 2) != 0) {
    *why = "not a mangled C++ name (extern \"C\"?)";
    return -1;
  }
  D.p = mangled + 2;
  if (*D.p == 'L')
    D.p++;
  if (!name(&D, &fn, 1, &templated)) {
    *why = D.why ? D.why : "a name cudalua cannot read";
    return -1;
  }
  if (fname)
    snprintf(fname, fname_size, "%s", fn.name);
  cl_ArgType ret;
  if (templated && !type(&D, &ret)) {      /* a template function's return type */
    *why = D.why;
    return -1;
  }
  int n = 0;
  while (*D.p && *D.p != '.') {           /* ".clone" suffixes end it */
    cl_ArgType t;
    if (!type(&D, &t)) {
      *why = D.why;
      return -1;
    }
    if (t.kind == CL_ARG_VOID && n == 0 && (*D.p == '\0' || *D.p == '.'))
      return 0;                            /* f(void) */
    if (n == max) {
      *why = "too many parameters";
      return -1;
    }
    params[n++] = t;
  }
  if (n == 0) {
    *why = "the name has no parameter types";
    return -1;
  }
  return n;
}

/* --- declarations in C declarator syntax ------------------------------------ */

typedef struct Typedef { const char *name; int kind, size; } Typedef;

/* Typedef names a kernel's declaration commonly uses, with or without
 * std:: or cuda::std::. */
static const Typedef typedefs[] = {
  {"size_t", CL_ARG_UINT, 8}, {"ssize_t", CL_ARG_SINT, 8}, {"ptrdiff_t", CL_ARG_SINT, 8},
  {"intptr_t", CL_ARG_SINT, 8}, {"uintptr_t", CL_ARG_UINT, 8},
  {"int8_t", CL_ARG_SINT, 1}, {"int16_t", CL_ARG_SINT, 2}, {"int32_t", CL_ARG_SINT, 4},
  {"int64_t", CL_ARG_SINT, 8}, {"uint8_t", CL_ARG_UINT, 1}, {"uint16_t", CL_ARG_UINT, 2},
  {"uint32_t", CL_ARG_UINT, 4}, {"uint64_t", CL_ARG_UINT, 8},
  {"char8_t", CL_ARG_UINT, 1}, {"char16_t", CL_ARG_UINT, 2}, {"char32_t", CL_ARG_UINT, 4},
  {"wchar_t", CL_ARG_SINT, 4}, {"_Bool", CL_ARG_BOOL, 1}, {"nullptr_t", CL_ARG_PTR, 8},
  {"CUtensorMap", CL_ARG_NAMED, 128}, {"CUtensorMap_st", CL_ARG_NAMED, 128},
};

/* The builtin specifiers, counted: a type is a valid combination of them. */
enum { SP_VOID, SP_BOOL, SP_CHAR, SP_SHORT, SP_INT, SP_LONG, SP_FLOAT, SP_DOUBLE, SP_SIGNED,
       SP_UNSIGNED, SP_INT128, SP_N };
static const char *const specifiers[SP_N] = {"void", "bool", "char", "short", "int", "long",
                                             "float", "double", "signed", "unsigned", "__int128"};

typedef struct Parser {
  const char *p;
  char *why;
  size_t why_size;
  int index;                               /* the parameter, from 1 */
} Parser;

static int parse_error(Parser *P, const char *fmt, ...)
{
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  snprintf(P->why, P->why_size, "parameter %d: %s", P->index, what);
  return 0;
}

static int is_ident(int c, int first)
{
  return c == '_' || isalpha(c) || (!first && isdigit(c));
}

static void skip_space(Parser *P)
{
  while (isspace((unsigned char)*P->p))
    P->p++;
}

/* An identifier, possibly qualified (a::b) and with template arguments
 * (balanced <...>), copied into buf. */
static int word(Parser *P, char *buf, size_t size)
{
  const char *start = P->p;
  int depth = 0;
  while (*P->p) {
    if (is_ident((unsigned char)*P->p, 0) || (P->p[0] == ':' && P->p[1] == ':'))
      P->p += P->p[0] == ':' ? 2 : 1;
    else if (*P->p == '<')
      depth++, P->p++;
    else if (*P->p == '>' && depth > 0)
      depth--, P->p++;
    else if (depth > 0 && *P->p && *P->p != '(' && *P->p != ')')
      P->p++;
    else
      break;
  }
  if (depth > 0)
    return parse_error(P, "'<' without its '>'");
  size_t n = (size_t)(P->p - start);
  while (n > 0 && isspace((unsigned char)start[n - 1]))
    n--;
  if (n >= size)
    return parse_error(P, "a name longer than %d characters", (int)size - 1);
  memcpy(buf, start, n);
  buf[n] = '\0';
  return 1;
}

/* The type the builtin specifiers count[] make, or an error naming them. */
static int builtin_type(Parser *P, const int count[SP_N], cl_ArgType *t, const char *spelled)
{
  int sign = count[SP_SIGNED] + count[SP_UNSIGNED], is_unsigned = count[SP_UNSIGNED] > 0;
  int others = 0;
  for (int i = 0; i < SP_N; i++)
    if (count[i] > (i == SP_LONG ? 2 : 1))
      return parse_error(P, "'%s' repeats '%s'", spelled, specifiers[i]);
  if (count[SP_SIGNED] && count[SP_UNSIGNED])
    return parse_error(P, "'%s' is both signed and unsigned", spelled);
  for (int i = SP_VOID; i <= SP_DOUBLE; i++)
    others += count[i] > 0 && i != SP_INT && i != SP_LONG && i != SP_SHORT;
  others += count[SP_INT128];
  if (others > 1 || (others == 1 && (count[SP_SHORT] || (count[SP_LONG] && !count[SP_DOUBLE]) ||
                                     (count[SP_INT] && !count[SP_INT128]))) ||
      (count[SP_SHORT] && count[SP_LONG]) ||
      (sign && (count[SP_VOID] || count[SP_BOOL] || count[SP_FLOAT] || count[SP_DOUBLE])))
    return parse_error(P, "'%s' is not a type", spelled);
  if (count[SP_DOUBLE] && count[SP_LONG])
    return parse_error(P, "long double is not a type CUDA kernels take");
  if (count[SP_INT128])          /* no Lua number fills it: a 16-byte string does */
    set_type(t, CL_ARG_NAMED, 16, is_unsigned ? "unsigned __int128" : "__int128");
  else if (count[SP_VOID])
    set_type(t, CL_ARG_VOID, 0, "void");
  else if (count[SP_BOOL])
    set_type(t, CL_ARG_BOOL, 1, "bool");
  else if (count[SP_FLOAT])
    set_type(t, CL_ARG_FLOAT, 4, "float");
  else if (count[SP_DOUBLE])
    set_type(t, CL_ARG_FLOAT, 8, "double");
  else if (count[SP_CHAR])
    set_type(t, sign ? (is_unsigned ? CL_ARG_UINT : CL_ARG_SINT) : CL_ARG_INT, 1,
             sign ? (is_unsigned ? "unsigned char" : "signed char") : "char");
  else {
    int size = count[SP_SHORT] ? 2 : count[SP_LONG] ? 8 : 4;
    static const char *const names[2][3] = {{"short", "int", "long"},
                                            {"unsigned short", "unsigned int", "unsigned long"}};
    const char *n = names[is_unsigned][size == 2 ? 0 : size == 4 ? 1 : 2];
    if (count[SP_LONG] == 2)
      n = is_unsigned ? "unsigned long long" : "long long";
    set_type(t, is_unsigned ? CL_ARG_UINT : CL_ARG_SINT, size, n);
  }
  return 1;
}

/* A type named by an identifier: a known typedef, else a class, struct,
 * enum or typedef only the driver knows the size of. */
static void named_type(const char *id, cl_ArgType *t)
{
  const char *bare = id;
  if (strncmp(bare, "::", 2) == 0)
    bare += 2;
  if (strncmp(bare, "cuda::", 6) == 0)
    bare += 6;
  if (strncmp(bare, "std::", 5) == 0)
    bare += 5;
  for (size_t i = 0; i < sizeof typedefs / sizeof typedefs[0]; i++)
    if (strcmp(bare, typedefs[i].name) == 0) {
      set_type(t, typedefs[i].kind, typedefs[i].size, id);
      return;
    }
  set_type(t, CL_ARG_NAMED, 0, id);
}

static int is_qualifier(const char *w, int *is_const)
{
  *is_const = strcmp(w, "const") == 0;
  return *is_const || strcmp(w, "volatile") == 0 || strcmp(w, "__restrict__") == 0 ||
         strcmp(w, "__restrict") == 0 || strcmp(w, "restrict") == 0 ||
         strcmp(w, "__grid_constant__") == 0;
}

/* One parameter: specifiers and qualifiers, an optional name, pointers. */
static int parameter(Parser *P, cl_ArgType *t)
{
  int count[SP_N] = {0}, builtin_seen = 0, is_const = 0, pointers = 0, qual_const;
  char id[sizeof t->name] = "", w[sizeof t->name], spelled[sizeof t->name] = "";
  char decl[sizeof t->name] = "", param_name[64] = "";
  memset(t, 0, sizeof *t);
  for (;;) {
    skip_space(P);
    if (*P->p == '*') {
      if (!builtin_seen && !id[0])
        return parse_error(P, "'*' before a type");
      if (param_name[0])
        return parse_error(P, "'*' after the parameter's name");
      pointers++;
      append(decl, sizeof decl, "*");
      P->p++;
      continue;
    }
    if (!is_ident((unsigned char)*P->p, 1) && !(P->p[0] == ':' && P->p[1] == ':'))
      break;
    if (!word(P, w, sizeof w))
      return 0;
    int sp = -1;
    for (int i = 0; i < SP_N; i++)
      if (strcmp(w, specifiers[i]) == 0)
        sp = i;
    if (is_qualifier(w, &qual_const)) {
      if (pointers == 0)
        is_const |= qual_const;
      else if (qual_const) {
        append(decl, sizeof decl, " const");
      }
    } else if (sp >= 0 && !id[0] && !pointers && !param_name[0]) {
      count[sp]++;
      builtin_seen = 1;
      size_t n = strlen(spelled);
      append(spelled, sizeof spelled, "%s%s", n ? " " : "", w);
    } else if (strcmp(w, "struct") == 0 || strcmp(w, "class") == 0 ||
               strcmp(w, "union") == 0 || strcmp(w, "enum") == 0) {
      if (builtin_seen || id[0])
        return parse_error(P, "'%s' after the type", w);
    } else if (!builtin_seen && !id[0] && sp < 0) {
      snprintf(id, sizeof id, "%s", w);
    } else if (!param_name[0] && sp < 0) {
      param_name[0] = '\0';
      append(param_name, sizeof param_name, "%s", w);
    } else
      return parse_error(P, "unexpected '%s'", w);
  }
  skip_space(P);
  if (*P->p && *P->p != ',')
    return parse_error(P, *P->p == '&' ? "a kernel parameter cannot be a reference"
                       : *P->p == '[' || *P->p == '(' ? "arrays and function pointers are not "
                         "supported: declare a pointer (void*)" : "unexpected '%c'", *P->p);
  if (builtin_seen) {
    if (!builtin_type(P, count, t, spelled))
      return 0;
  } else if (id[0])
    named_type(id, t);
  else
    return parse_error(P, "no type");
  if (is_const)
    qualify(t, "const");
  if (pointers) {
    char base[sizeof t->name];
    snprintf(base, sizeof base, "%s", t->name);
    set_name(t, "%s%s", base, decl);
    t->kind = CL_ARG_PTR;
    t->size = 8;
  } else if (t->kind == CL_ARG_VOID)
    return parse_error(P, "void is not a parameter type");
  return 1;
}

int cl_parse_signature(const char *sig, cl_ArgType *params, int max, char *why, size_t why_size)
{
  Parser P = {sig, why, why_size, 1};
  const char *s = sig;
  while (isspace((unsigned char)*s))
    s++;
  if (*s == '\0' || (strncmp(s, "void", 4) == 0 && strspn(s + 4, " \t\n") == strlen(s + 4)))
    return 0;
  int n = 0;
  for (;;) {
    if (n == max) {
      snprintf(why, why_size, "more than %d parameters", max);
      return -1;
    }
    skip_space(&P);
    if (*P.p == ',' || *P.p == '\0') {
      parse_error(&P, "empty");
      return -1;
    }
    if (!parameter(&P, &params[n]))
      return -1;
    n++;
    if (*P.p == '\0')
      return n;
    P.p++;                                 /* , */
    P.index++;
  }
}

/* --- the declaration of an extern "C" kernel in its source ------------------- */

/* Skip a comment, a string or character literal or a preprocessor line
 * at s; returns where it ends, or s when there is none. */
static const char *skip_noise(const char *s, const char *end, int line_start)
{
  if (s + 1 < end && s[0] == '/' && s[1] == '/') {
    while (s < end && *s != '\n')
      s++;
  } else if (s + 1 < end && s[0] == '/' && s[1] == '*') {
    const char *close = s + 2;
    while (close + 1 < end && !(close[0] == '*' && close[1] == '/'))
      close++;
    s = close + 1 < end ? close + 2 : end;
  } else if (*s == '"' || *s == '\'') {
    char quote = *s++;
    while (s < end && *s != quote && *s != '\n')
      s += *s == '\\' && s + 1 < end ? 2 : 1;
    s += s < end;
  } else if (*s == '#' && line_start) {
    while (s < end && *s != '\n')
      s += *s == '\\' && s + 1 < end ? 2 : 1;
  }
  return s;
}

int cl_find_declaration(const char *src, size_t len, const char *kernel, char *out, size_t size)
{
  const char *s = src, *end = src + len;
  size_t klen = strlen(kernel);
  int global = 0, line_start = 1;
  while (s < end) {
    const char *after = skip_noise(s, end, line_start);
    if (after != s) {
      s = after;
      continue;
    }
    if (*s == '\n')
      line_start = 1;
    else if (!isspace((unsigned char)*s))
      line_start = 0;
    if (*s == ';' || *s == '{' || *s == '}') {
      global = 0;
      s++;
      continue;
    }
    if (!is_ident((unsigned char)*s, 1)) {
      s++;
      continue;
    }
    const char *w = s;
    while (s < end && is_ident((unsigned char)*s, 0))
      s++;
    size_t n = (size_t)(s - w);
    if (n == 10 && memcmp(w, "__global__", 10) == 0)
      global = 1;
    if (!global || n != klen || memcmp(w, kernel, n) != 0)
      continue;
    const char *p = s;
    while (p < end && isspace((unsigned char)*p))
      p++;
    if (p == end || *p != '(')
      continue;
    /* the parameter list, comments blanked, up to its balanced ')' */
    size_t o = 0;
    int depth = 0;
    for (p++; p < end; ) {
      const char *q = skip_noise(p, end, 0);
      if (q != p) {
        if (o + 1 < size)
          out[o++] = ' ';
        p = q;
        continue;
      }
      if (*p == '(')
        depth++;
      else if (*p == ')' && depth-- == 0)
        break;
      if (o + 1 >= size)
        return 0;
      out[o++] = *p++;
    }
    if (p == end)
      return 0;
    out[o] = '\0';
    return 1;
  }
  return 0;
}
