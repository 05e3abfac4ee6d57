/* SPDX-License-Identifier: MIT */
/* handle.c: the handle pattern every type follows, and option tables.
 *
 * Every function a type or the module registers gets, as upvalue 1, the
 * Lua state's cl_Types: the addresses of the metatables of the types the
 * hot paths check (handle.h's CL_UV_*), so that cl_fast_test compares one
 * pointer instead of looking a metatable up by name. A type's __index
 * closure carries its methods table next, as upvalue CL_UV_METHODS, where
 * cl_add_methods finds it. */
#include <math.h>
#include <string.h>

#include "handle.h"

/* The metatables the fast checks compare with, in CL_UV_* order. */
static const char *const fast_types[CL_NTYPES] = {
  CL_BUFFER, CL_STREAM, CL_EVENT, CL_SCALAR, CL_LAUNCHCONFIG, CL_KERNEL, CL_GRAPH, CL_VIEW
};

/* Registry key of the state's cl_Types. */
static const char types_key = 0;

/* Push the state's cl_Types, made on first use with the metatables (those
 * of types not registered yet are created, and their files find them):
 * its user values keep them alive, so an address it holds is never that
 * of another table, whatever a program does to the registry. */
static void push_types(lua_State *L)
{
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &types_key) != LUA_TNIL)
    return;
  lua_pop(L, 1);
  cl_Types *t = lua_newuserdatauv(L, sizeof *t, CL_NTYPES);
  for (int k = 0; k < CL_NTYPES; k++) {
    luaL_newmetatable(L, fast_types[k]);
    t->mt[k] = lua_topointer(L, -1);
    lua_setiuservalue(L, -2, k + 1);
  }
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &types_key);
}

void cl_setfuncs(lua_State *L, const luaL_Reg *fns)
{
  push_types(L);
  luaL_setfuncs(L, fns, 1);
}

void cl_push_closure(lua_State *L, lua_CFunction fn, int n)
{
  push_types(L);
  lua_rotate(L, -(1 + n), 1);   /* the cl_Types below the n values */
  lua_pushcclosure(L, fn, 1 + n);
}

#define UV_FIELDS (CL_UV_METHODS + 1)

/* __index for handles: methods first, then the type's attribute fields,
 * which run in this frame and so see the metatables too. */
static int handle_index(lua_State *L)
{
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(CL_UV_METHODS)) != LUA_TNIL)
    return 1;
  lua_pop(L, 1);
  lua_CFunction read_field = lua_tocfunction(L, lua_upvalueindex(UV_FIELDS));
  return read_field ? read_field(L) : 0;
}

#define UV_ADDED_FIELDS (UV_FIELDS + 1)

/* __index of a type that files above its own added fields to (cl_add_fields):
 * the added fields, then handle_index. No added field is named as a method. */
static int handle_index_added(lua_State *L)
{
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(UV_ADDED_FIELDS)) == LUA_TFUNCTION) {
    lua_CFunction read_field = lua_tocfunction(L, -1);
    lua_pop(L, 1);
    return read_field(L);
  }
  lua_pop(L, 1);
  return handle_index(L);
}

void cl_new_type(lua_State *L, const char *tname, const luaL_Reg *meta,
                 const luaL_Reg *methods, lua_CFunction fields)
{
  luaL_newmetatable(L, tname);
  if (meta)
    cl_setfuncs(L, meta);
  lua_newtable(L);
  if (methods)
    cl_setfuncs(L, methods);
  if (fields) {
    lua_pushcfunction(L, fields);
    cl_push_closure(L, handle_index, 2);
  }
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
}

void cl_add_methods(lua_State *L, const char *tname, const luaL_Reg *methods)
{
  luaL_getmetatable(L, tname);
  lua_getfield(L, -1, "__index");
  if (lua_iscfunction(L, -1)) {
    lua_getupvalue(L, -1, CL_UV_METHODS);
    lua_remove(L, -2);
  }
  cl_setfuncs(L, methods);
  lua_pop(L, 2);
}

void cl_add_fields(lua_State *L, const char *tname, const luaL_Reg *fields)
{
  luaL_getmetatable(L, tname);
  lua_getfield(L, -1, "__index");
  lua_CFunction index = lua_tocfunction(L, -1);
  if (index != handle_index_added) {
    if (index != handle_index)
      luaL_error(L, "%s has no fields to add to", tname);   /* a bug of ours */
    lua_getupvalue(L, -1, CL_UV_METHODS);
    lua_getupvalue(L, -2, UV_FIELDS);
    lua_newtable(L);
    cl_push_closure(L, handle_index_added, 3);
    lua_replace(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "__index");
  }
  lua_getupvalue(L, -1, UV_ADDED_FIELDS);
  for (; fields->name; fields++) {
    lua_pushcfunction(L, fields->func);
    lua_setfield(L, -2, fields->name);
  }
  lua_pop(L, 3);
}

void *cl_check_open(lua_State *L, int i, const char *tname)
{
  cl_gc_unstick(L);
  int *closed = luaL_checkudata(L, i, tname);
  if (*closed)
    luaL_error(L, "%s is closed", tname);
  return closed;
}

int cl_push_closed_name(lua_State *L, const char *tname)
{
  lua_pushfstring(L, "%s (closed)", tname);
  return 1;
}

/* --- option tables ------------------------------------------------------ */

/* Push names (NULL-terminated) joined by ", ", for an error's "known: ...". */
const char *cl_push_names(lua_State *L, const char *const names[])
{
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int k = 0; names[k]; k++) {
    luaL_addstring(&b, k ? ", " : "");
    luaL_addstring(&b, names[k]);
  }
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

void cl_check_options(lua_State *L, int idx, const char *const known[])
{
  if (lua_isnoneornil(L, idx))
    return;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    int found = 0;
    if (lua_type(L, -1) == LUA_TSTRING)
      for (int k = 0; known[k] && !found; k++)
        found = strcmp(lua_tostring(L, -1), known[k]) == 0;
    if (!found) {
      cl_push_names(L, known);
      const char *key = luaL_tolstring(L, -2, NULL);
      luaL_argerror(L, idx, lua_pushfstring(L, "unknown option '%s' (known: %s)", key,
                                            lua_tostring(L, -2)));
    }
  }
}

/* Push the field, or nothing and return 0 when the table or field is absent. */
static int get_option(lua_State *L, int idx, const char *field)
{
  if (lua_isnoneornil(L, idx))
    return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  if (lua_getfield(L, idx, field) == LUA_TNIL) {
    lua_pop(L, 1);
    return 0;
  }
  return 1;
}

static void option_type_error(lua_State *L, int idx, const char *field, const char *want)
{
  luaL_argerror(L, idx, lua_pushfstring(L, "field '%s' must be %s, got %s", field, want,
                                        luaL_typename(L, -1)));
}

int cl_opt_boolean(lua_State *L, int idx, const char *field, int def)
{
  if (!get_option(L, idx, field))
    return def;
  if (!lua_isboolean(L, -1))
    option_type_error(L, idx, field, "a boolean");
  int v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

lua_Integer cl_opt_integer(lua_State *L, int idx, const char *field, lua_Integer def)
{
  return cl_opt_integer_range(L, idx, field, def, LUA_MININTEGER, LUA_MAXINTEGER);
}

const char *cl_opt_string(lua_State *L, int idx, const char *field, const char *def)
{
  if (!get_option(L, idx, field)) {
    /* pushed too, so that every outcome leaves one value to pop */
    if (def)
      return lua_pushstring(L, def);
    lua_pushnil(L);
    return NULL;
  }
  if (lua_type(L, -1) != LUA_TSTRING)
    option_type_error(L, idx, field, "a string");
  /* left on the stack: an __index may have made it, and nothing else
   * anchors it against the collector */
  return lua_tostring(L, -1);
}

/* --- integer ranges ----------------------------------------------------- */

/* NULL when the value at i is an integer (or a float with an integer value)
 * in [lo, hi], stored into *v; else pushes and returns why not, naming
 * `what` and the limit. Formats numbers itself: luaL_tolstring could run a
 * __tostring that debug.setmetatable gave numbers. */
static const char *integer_range_problem(lua_State *L, int i, lua_Integer lo, lua_Integer hi,
                                         const char *what, lua_Integer *v)
{
  int isint = 0;
  if (lua_type(L, i) != LUA_TNUMBER)
    return lua_pushfstring(L, "%s must be an integer, got %s", what, luaL_typename(L, i));
  *v = lua_tointegerx(L, i, &isint);
  if (!isint) {
    lua_Number x = lua_tonumber(L, i);
    if (floor(x) != x)          /* fractional or NaN */
      return lua_pushfstring(L, "%s must be an integer, got %f", what, x);
    return lua_pushfstring(L, "%s must be %s %I, got %f", what, x < 0 ? ">=" : "<=",
                           x < 0 ? lo : hi, x);
  }
  if (*v < lo)
    return lua_pushfstring(L, "%s must be >= %I, got %I", what, lo, *v);
  if (*v > hi)
    return lua_pushfstring(L, "%s must be <= %I, got %I", what, hi, *v);
  return NULL;
}

/* The integer at i, or an error: an argument error of arg, or for arg 0 a
 * plain one. */
static lua_Integer check_range_at(lua_State *L, int i, int arg, lua_Integer lo, lua_Integer hi,
                                  const char *what)
{
  lua_Integer v = 0;
  const char *why = integer_range_problem(L, i, lo, hi, what, &v);
  if (why && arg)
    luaL_argerror(L, arg, why);
  else if (why)
    luaL_error(L, "%s", why);
  return v;
}

lua_Integer cl_check_integer_range(lua_State *L, int arg, lua_Integer lo, lua_Integer hi,
                                   const char *what)
{
  return check_range_at(L, arg, arg, lo, hi, what);
}

lua_Integer cl_to_integer_range(lua_State *L, int i, lua_Integer lo, lua_Integer hi,
                                const char *what)
{
  return check_range_at(L, i, 0, lo, hi, what);
}

lua_Integer cl_opt_integer_range(lua_State *L, int idx, const char *field, lua_Integer def,
                                 lua_Integer lo, lua_Integer hi)
{
  if (!get_option(L, idx, field))
    return def;
  int vi = lua_gettop(L);
  lua_Integer v = check_range_at(L, vi, idx, lo, hi, lua_pushfstring(L, "field '%s'", field));
  lua_settop(L, vi - 1);
  return v;
}

/* --- holding the collector (HACKING.md's rule) ------------------------------ */

/* Registry keys: the value whose __close starts the collector again, and
 * the thread that holds it (kept there so that a coroutine that died
 * holding it stays readable). Both are made by luaopen_cuda, so that
 * setting them later allocates nothing. */
static const char gc_holder_key = 0, gc_owner_key = 0;
int cl_gc_held;                 /* a hold stopped the collector and is open */
static lua_State *gc_owner;     /* the thread of that hold */

static void gc_restart(lua_State *L)
{
  cl_gc_held = 0;
  lua_gc(L, LUA_GCRESTART);
}

/* __close of the held slot: only the hold that stopped the collector
 * starts it (a coroutine closed late finds its hold already given up). */
static int gc_holder_close(lua_State *L)
{
  if (cl_gc_held && gc_owner == L)
    gc_restart(L);
  return 0;
}

/* An error that leaves a coroutine uncaught closes none of its
 * to-be-closed slots until coroutine.close: a hold taken there would keep
 * the collector off. The owner, dead by an error, gives it up here. */
void cl_gc_unstick_slow(lua_State *L)
{
  if (gc_owner != L && lua_status(gc_owner) > LUA_YIELD && lua_gc(L, LUA_GCISRUNNING) == 0)
    gc_restart(L);
}

int cl_gc_hold(lua_State *L)
{
  cl_gc_unstick(L);
  /* 1: running; 0: stopped by the script or by an outer hold; -1 (Lua
   * 5.4.4 on): inside a finalizer, where no step runs anyway. Only a
   * collector this call stopped is started again, so holds nest. */
  if (lua_gc(L, LUA_GCISRUNNING) == 1) {
    lua_pushthread(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &gc_owner_key);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &gc_holder_key);
    lua_gc(L, LUA_GCSTOP);
    cl_gc_held = 1;
    gc_owner = L;
  } else
    lua_pushboolean(L, 0);      /* a to-be-closed false is never closed */
  lua_toclose(L, -1);
  return lua_gettop(L);
}

void cl_gc_release(lua_State *L, int slot)
{
  lua_closeslot(L, slot);
}

void cl_open_gc_hold(lua_State *L)
{
  lua_pushboolean(L, 0);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &gc_owner_key);
  lua_newuserdatauv(L, 0, 0);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, gc_holder_close);
  lua_setfield(L, -2, "__close");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &gc_holder_key);
}
