/* cuda.c: luaopen_cuda, and the handle pattern every type follows. */
#include <string.h>
#include <time.h>

#include "cl.h"

#ifndef CUDALUA_PKGDATADIR
#define CUDALUA_PKGDATADIR "/usr/local/share/cudalua"
#endif

const char *cl_datadir = CUDALUA_PKGDATADIR;

/* __index for handles: methods first, then the type's attribute fields. */
static int handle_index(lua_State *L)
{
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
    return 1;
  lua_pop(L, 1);
  lua_CFunction fields = lua_tocfunction(L, lua_upvalueindex(2));
  return fields ? fields(L) : 0;
}

/* The metatables the fast checks compare with, in CL_UV_* order. */
static const char *const upvalue_types[CL_NUV] = {
  CL_BUFFER, CL_STREAM, CL_EVENT, CL_SCALAR, CL_LAUNCHCONFIG, CL_KERNEL, CL_GRAPH
};

/* Set fns into the table on the top of the stack, each with the metatables
 * as upvalues (created here if their type is not registered yet). */
void cl_setfuncs(lua_State *L, const luaL_Reg *fns)
{
  for (int k = 0; k < CL_NUV; k++)
    luaL_newmetatable(L, upvalue_types[k]);
  luaL_setfuncs(L, fns, CL_NUV);
}

void cl_new_type(lua_State *L, const char *tname, const luaL_Reg *meta,
                 const luaL_Reg *methods, lua_CFunction fields)
{
  luaL_newmetatable(L, tname);
  if (meta)
    luaL_setfuncs(L, meta, 0);
  lua_newtable(L);
  if (methods)
    cl_setfuncs(L, methods);
  if (fields) {
    lua_pushcfunction(L, fields);
    lua_pushcclosure(L, handle_index, 2);
  }
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
}

void cl_add_methods(lua_State *L, const char *tname, const luaL_Reg *methods)
{
  luaL_getmetatable(L, tname);
  lua_getfield(L, -1, "__index");
  if (lua_iscfunction(L, -1)) {
    lua_getupvalue(L, -1, 1);
    lua_remove(L, -2);
  }
  cl_setfuncs(L, methods);
  lua_pop(L, 2);
}

void *cl_check_open(lua_State *L, int i, const char *tname)
{
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
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (int k = 0; known[k]; k++) {
        luaL_addstring(&b, k ? ", " : "");
        luaL_addstring(&b, known[k]);
      }
      luaL_pushresult(&b);
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
  if (!get_option(L, idx, field))
    return def;
  int isint = 0;
  lua_Integer v = lua_tointegerx(L, -1, &isint);
  if (!isint || lua_type(L, -1) != LUA_TNUMBER)
    option_type_error(L, idx, field, "an integer");
  lua_pop(L, 1);
  return v;
}

const char *cl_opt_string(lua_State *L, int idx, const char *field, const char *def)
{
  if (!get_option(L, idx, field))
    return def;
  if (lua_type(L, -1) != LUA_TSTRING)
    option_type_error(L, idx, field, "a string");
  const char *v = lua_tostring(L, -1);  /* anchored in the option table */
  lua_pop(L, 1);
  return v;
}

/* cuda.clock(): seconds on a monotonic clock, for host-side timing. */
static int cuda_clock(lua_State *L)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
  return 1;
}

int luaopen_cuda(lua_State *L)
{
  lua_newtable(L);
  lua_pushcfunction(L, cuda_clock);
  lua_setfield(L, -2, "clock");
  lua_pushliteral(L, PACKAGE_VERSION);
  lua_setfield(L, -2, "version");
  cl_open_driver(L);
  cl_open_device(L);
  cl_open_stream(L);
  cl_open_dtype(L);
  cl_open_memory(L);
  cl_open_buffer(L);
  cl_open_view(L);
  cl_open_program(L);
  cl_open_launch(L);
  cl_open_graph(L);
  cl_open_graph_builder(L);
  return 1;
}
