/* SPDX-License-Identifier: MIT */
/* handle.h: the handle pattern every type of the core follows (handle.c):
 * type names, registration, the fast type checks of the hot paths, the
 * collector hold of HACKING.md's check-to-use rule, option tables and
 * range-checked integers. The lowest layer: it uses Lua alone. */
#ifndef CUDALUA_HANDLE_H
#define CUDALUA_HANDLE_H

#include <lua.h>
#include <lauxlib.h>

#define CL_ERROR        "cuda.Error"
#define CL_DEVICE       "cuda.Device"
#define CL_STREAM       "cuda.Stream"
#define CL_EVENT        "cuda.Event"
#define CL_MR           "cuda.MemoryResource"
#define CL_BUFFER       "cuda.Buffer"
#define CL_VIEW         "cuda.View"
#define CL_PROGRAM      "cuda.Program"
#define CL_OBJECTCODE   "cuda.ObjectCode"
#define CL_KERNEL       "cuda.Kernel"
#define CL_LAUNCHCONFIG "cuda.LaunchConfig"
#define CL_SCALAR       "cuda.Scalar"
#define CL_GRAPH        "cuda.Graph"
#define CL_GRAPHDEF     "cuda.GraphDefinition"
#define CL_ARRAY        "cuda.Array"
#define CL_TENSORMAP    "cuda.TensorMap"

/* --- handles: the pattern every type follows (handle.c) ------------------ */

/* Register a type: metamethods `meta`, methods `methods`, and `fields`,
 * called as fields(L) with (self, key) for keys that are not methods. */
void cl_new_type(lua_State *L, const char *tname, const luaL_Reg *meta,
                 const luaL_Reg *methods, lua_CFunction fields);
/* luaL_checkudata, then "cuda.X is closed" for a closed handle. */
void *cl_check_open(lua_State *L, int i, const char *tname);

/* Fast type checks for the hot paths (launch, copies, record, v[i]). Every
 * method, metamethod and module function registered through cl_new_type,
 * cl_add_methods, cl_setfuncs or cl_push_closure has as its upvalue 1 one
 * userdata of the Lua state, a cl_Types: the addresses of the metatables of
 * these types (which it keeps alive as its user values), so a check is one
 * pointer comparison instead of a registry lookup by name, and a function
 * that checks several values reads the addresses once (cl_types). Only
 * those functions may use the checks (and the fields functions of
 * cl_new_type, which run inside its __index): in a light C function, or a
 * closure whose upvalue 1 is no userdata, cl_types is NULL and nothing
 * matches; a closure over another userdata must not use them. The CL_UV_*
 * names the types in the cl_Types (they were upvalues once). */
enum { CL_UV_BUFFER, CL_UV_STREAM, CL_UV_EVENT, CL_UV_SCALAR, CL_UV_CONFIG,
       CL_UV_KERNEL, CL_UV_GRAPH, CL_UV_VIEW, CL_NTYPES };
typedef struct cl_Types {
  const void *mt[CL_NTYPES];    /* in CL_UV_* order */
} cl_Types;
/* The upvalues: the cl_Types, then (in a type's __index closure) its
 * methods table; cl_push_closure's values follow the cl_Types. */
#define CL_UV_TYPES   1
#define CL_UV_METHODS 2
void cl_setfuncs(lua_State *L, const luaL_Reg *fns);
/* Push fn as a closure over the cl_Types (upvalue 1) and the n values on
 * the top of the stack, which it pops (upvalues 2 on): for metamethods a
 * type sets up itself, such as View's __index. */
void cl_push_closure(lua_State *L, lua_CFunction fn, int n);

static inline const cl_Types *cl_types(lua_State *L)
{
  return lua_touserdata(L, lua_upvalueindex(CL_UV_TYPES));
}

/* The metatable of the value at i, as a pointer to compare; NULL for none.
 * A pointer comparison is cheaper than lua_rawequal. */
static inline const void *cl_metatable_of(lua_State *L, int i)
{
  if (!lua_getmetatable(L, i))
    return NULL;
  const void *mt = lua_topointer(L, -1);
  lua_pop(L, 1);
  return mt;
}

/* Whether mt, from cl_metatable_of, is the metatable of type uv (a CL_UV_*)
 * in t, from cl_types: for a value that may be one of several types (a
 * kernel argument). */
static inline int cl_is_type(const cl_Types *t, const void *mt, int uv)
{
  return mt != NULL && t != NULL && mt == t->mt[uv];
}

static inline int cl_metatable_is(lua_State *L, const void *mt, int uv)
{
  return mt != NULL && cl_is_type(cl_types(L), mt, uv);
}

/* The userdata at i if it is of type uv, else NULL. */
static inline void *cl_fast_test_in(lua_State *L, const cl_Types *t, int i, int uv)
{
  void *p = lua_touserdata(L, i);
  return p != NULL && cl_is_type(t, cl_metatable_of(L, i), uv) ? p : NULL;
}

/* cl_fast_test_in without the pop: the value's metatable, if it has one,
 * stays pushed (a pop is a fifth of a check). For a hot path that ends by
 * pushing its result and reads its arguments at indexes below the top it
 * had (lua_gettop first), as Stream:record does. */
static inline void *cl_fast_test_keep(lua_State *L, const cl_Types *t, int i, int uv)
{
  void *p = lua_touserdata(L, i);
  return p != NULL && lua_getmetatable(L, i) && cl_is_type(t, lua_topointer(L, -1), uv) ? p : NULL;
}

static inline void *cl_fast_test(lua_State *L, int i, int uv)
{
  return cl_fast_test_in(L, cl_types(L), i, uv);
}

/* An open handle of type uv (named tname), or the usual errors. */
static inline void *cl_fast_check_in(lua_State *L, const cl_Types *t, int i, int uv,
                                     const char *tname)
{
  int *h = cl_fast_test_in(L, t, i, uv);
  if (h == NULL || *h)
    h = cl_check_open(L, i, tname);
  return h;
}

static inline void *cl_fast_check(lua_State *L, int i, int uv, const char *tname)
{
  return cl_fast_check_in(L, cl_types(L), i, uv, tname);
}

/* HACKING.md's rule: nothing runs Lua between checking a handle and using
 * it. A function that must allocate after its checks calls cl_gc_hold
 * before them: it pushes one to-be-closed slot (its index is returned)
 * and holds the collector off, so no finalizer runs, until the function
 * returns or raises, or cl_gc_release closes the slot. It does not stop
 * metamethods, calls or host functions. An error that leaves a coroutine
 * uncaught closes its slots only at coroutine.close: cl_gc_unstick (run
 * by every cl_check_open and hold) then gives up a hold whose thread died. */
int cl_gc_hold(lua_State *L);
void cl_gc_release(lua_State *L, int slot);
extern int cl_gc_held;
void cl_gc_unstick_slow(lua_State *L);
static inline void cl_gc_unstick(lua_State *L)
{
  if (cl_gc_held)
    cl_gc_unstick_slow(L);
}
void cl_open_gc_hold(lua_State *L);

/* Add methods to a type registered earlier (Device gets create_stream
 * from stream.c, ...). */
void cl_add_methods(lua_State *L, const char *tname, const luaL_Reg *methods);
/* Add attribute fields to a type registered with a fields function: each
 * fields[k].func is called as that function is, with (self, key), for its
 * key. A noun above another gives it fields that make the higher noun
 * (Device gets default_stream from stream.c), so the lower knows nothing of
 * it. */
void cl_add_fields(lua_State *L, const char *tname, const luaL_Reg *fields);
/* "cuda.X(detail)" or "cuda.X (closed)" for __tostring. */
int cl_push_closed_name(lua_State *L, const char *tname);

/* Option tables: idx is an option table or none/nil. Unknown keys and
 * values of the wrong type raise argument errors naming the field. */
void cl_check_options(lua_State *L, int idx, const char *const known[]);
const char *cl_push_names(lua_State *L, const char *const names[]);   /* "a, b, c" */
int cl_opt_boolean(lua_State *L, int idx, const char *field, int def);
lua_Integer cl_opt_integer(lua_State *L, int idx, const char *field, lua_Integer def);
/* Pushes the field's string (def, or nil for a NULL def, when absent) and
 * returns it: valid while that slot stays on the stack, which the caller
 * pops when done. An __index may have made the string, and nothing else
 * anchors it against the collector. */
const char *cl_opt_string(lua_State *L, int idx, const char *field, const char *def);

/* Integers before they are cast to a narrower C type: the value must be an
 * integer (a float with an integer value counts) in [lo, hi], else an error
 * naming `what` and the limit it broke ("offset must be >= 0, got -1").
 * cl_check_integer_range raises an argument error for argument arg;
 * cl_opt_integer_range reads a field of the option table at idx;
 * cl_to_integer_range checks any stack slot i and raises a plain error. */
lua_Integer cl_check_integer_range(lua_State *L, int arg, lua_Integer lo, lua_Integer hi,
                                   const char *what);
lua_Integer cl_opt_integer_range(lua_State *L, int idx, const char *field, lua_Integer def,
                                 lua_Integer lo, lua_Integer hi);
lua_Integer cl_to_integer_range(lua_State *L, int i, lua_Integer lo, lua_Integer hi,
                                const char *what);

/* --- arguments ------------------------------------------------------------ */

/* Raise "bad argument #N (unexpected argument ...)" when a function that
 * takes at most `most` arguments got a non-nil one past them. */
static inline void cl_check_nargs(lua_State *L, int most)
{
  for (int i = lua_gettop(L); i > most; i--)
    if (!lua_isnil(L, i))
      luaL_argerror(L, i, lua_pushfstring(L, "unexpected argument (a %s)",
                                          luaL_typename(L, i)));
}

#endif
