/* SPDX-License-Identifier: MIT */
/* dtype.c: the element types of host views, and typed scalars.
 *
 * Conversions are checked: storing 300 into a uint8, 2^40 into an int32,
 * -1 into a uint64 or a string anywhere raises an error naming the type,
 * never wraps silently. A typed scalar (cuda.f32(2.5), cuda.u64(n)) is one
 * converted value that knows its type: a kernel argument of an exact width
 * or a fill pattern. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cl.h"

const char *const cl_dtype_names[CL_NDTYPES + 1] = {
  "float32", "float64", "int8", "int16", "int32", "int64",
  "uint8", "uint16", "uint32", "uint64", NULL
};
const unsigned char cl_dtype_sizes[CL_NDTYPES] = {4, 8, 1, 2, 4, 8, 1, 2, 4, 8};

cl_DType cl_check_dtype(lua_State *L, int i)
{
  return (cl_DType)luaL_checkoption(L, i, NULL, cl_dtype_names);
}

static void range_error(lua_State *L, int i, cl_DType t)
{
  luaL_error(L, "%s out of range for %s", luaL_tolstring(L, i, NULL), cl_dtype_names[t]);
}

static void integer_error(lua_State *L, int i, cl_DType t)
{
  luaL_error(L, "%s expects an integer, got %s", cl_dtype_names[t], luaL_tolstring(L, i, NULL));
}

/* An integer in [lo, hi]; floats with an exact integer value are accepted. */
static lua_Integer check_int(lua_State *L, int i, cl_DType t, lua_Integer lo, lua_Integer hi)
{
  int isint = 0;
  lua_Integer v = lua_tointegerx(L, i, &isint);
  if (lua_type(L, i) != LUA_TNUMBER)
    luaL_error(L, "%s expects a number, got %s", cl_dtype_names[t], luaL_typename(L, i));
  if (!isint)
    integer_error(L, i, t);
  if (v < lo || v > hi)
    range_error(L, i, t);
  return v;
}

/* uint64 takes the full range: integers >= 0, and floats up to 2^64. */
static uint64_t check_u64(lua_State *L, int i)
{
  if (lua_isinteger(L, i)) {
    lua_Integer v = lua_tointeger(L, i);
    if (v < 0)
      range_error(L, i, CL_U64);
    return (uint64_t)v;
  }
  if (lua_type(L, i) != LUA_TNUMBER)
    luaL_error(L, "uint64 expects a number, got %s", luaL_typename(L, i));
  lua_Number x = lua_tonumber(L, i);
  if (!isfinite(x) || floor(x) != x)
    integer_error(L, i, CL_U64);
  if (!(x >= 0 && x < 18446744073709551616.0))
    range_error(L, i, CL_U64);
  return (uint64_t)x;
}

static double check_float(lua_State *L, int i, cl_DType t)
{
  if (lua_type(L, i) != LUA_TNUMBER)
    luaL_error(L, "%s expects a number, got %s", cl_dtype_names[t], luaL_typename(L, i));
  return (double)lua_tonumber(L, i);
}

void cl_dtype_store(lua_State *L, int i, cl_DType t, void *dst)
{
  switch (t) {
  case CL_F32: {
    double x = check_float(L, i, t);
    if (!cl_fits_float32(x))
      range_error(L, i, t);
    float v = (float)x;
    memcpy(dst, &v, 4);
    break;
  }
  case CL_F64: { double v = check_float(L, i, t); memcpy(dst, &v, 8); break; }
  case CL_I8:  { int8_t v = (int8_t)check_int(L, i, t, INT8_MIN, INT8_MAX); memcpy(dst, &v, 1); break; }
  case CL_I16: { int16_t v = (int16_t)check_int(L, i, t, INT16_MIN, INT16_MAX); memcpy(dst, &v, 2); break; }
  case CL_I32: { int32_t v = (int32_t)check_int(L, i, t, INT32_MIN, INT32_MAX); memcpy(dst, &v, 4); break; }
  case CL_I64: { int64_t v = check_int(L, i, t, INT64_MIN, INT64_MAX); memcpy(dst, &v, 8); break; }
  case CL_U8:  { uint8_t v = (uint8_t)check_int(L, i, t, 0, UINT8_MAX); memcpy(dst, &v, 1); break; }
  case CL_U16: { uint16_t v = (uint16_t)check_int(L, i, t, 0, UINT16_MAX); memcpy(dst, &v, 2); break; }
  case CL_U32: { uint32_t v = (uint32_t)check_int(L, i, t, 0, UINT32_MAX); memcpy(dst, &v, 4); break; }
  case CL_U64: { uint64_t v = check_u64(L, i); memcpy(dst, &v, 8); break; }
  default: luaL_error(L, "unknown element type");
  }
}

void cl_dtype_push(lua_State *L, cl_DType t, const void *src)
{
  switch (t) {
  case CL_F32: { float v; memcpy(&v, src, 4); lua_pushnumber(L, v); break; }
  case CL_F64: { double v; memcpy(&v, src, 8); lua_pushnumber(L, v); break; }
  case CL_I8:  { int8_t v; memcpy(&v, src, 1); lua_pushinteger(L, v); break; }
  case CL_I16: { int16_t v; memcpy(&v, src, 2); lua_pushinteger(L, v); break; }
  case CL_I32: { int32_t v; memcpy(&v, src, 4); lua_pushinteger(L, v); break; }
  case CL_I64: { int64_t v; memcpy(&v, src, 8); lua_pushinteger(L, v); break; }
  case CL_U8:  { uint8_t v; memcpy(&v, src, 1); lua_pushinteger(L, v); break; }
  case CL_U16: { uint16_t v; memcpy(&v, src, 2); lua_pushinteger(L, v); break; }
  case CL_U32: { uint32_t v; memcpy(&v, src, 4); lua_pushinteger(L, v); break; }
  /* values past 2^63 come back as floats rather than wrapping negative */
  case CL_U64: {
    uint64_t v;
    memcpy(&v, src, 8);
    if (v <= (uint64_t)INT64_MAX)
      lua_pushinteger(L, (lua_Integer)v);
    else
      lua_pushnumber(L, (lua_Number)v);
    break;
  }
  default: lua_pushnil(L);
  }
}

/* --- typed scalars: cuda.f32(2.5), cuda.u64(n), ... -------------------------- */

cl_Scalar *cl_test_scalar(lua_State *L, int i)
{
  return luaL_testudata(L, i, CL_SCALAR);
}

void cl_scalar_store(lua_State *L, int i, cl_DType t, cl_Scalar *sc)
{
  memset(sc, 0, sizeof *sc);
  sc->type = t;
  cl_dtype_store(L, i, t, sc->v.bytes);
}

/* cuda.f32(x) and friends; upvalue 1 is the dtype. */
static int new_scalar(lua_State *L)
{
  cl_DType t = (cl_DType)lua_tointeger(L, lua_upvalueindex(1));
  luaL_checkany(L, 1);
  cl_Scalar *sc = lua_newuserdatauv(L, sizeof *sc, 0);
  cl_scalar_store(L, 1, t, sc);
  luaL_setmetatable(L, CL_SCALAR);
  return 1;
}

static const char *const scalar_functions[CL_NDTYPES] = {
  "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"
};

/* cuda.ptr(address): a raw device address for a pointer parameter, which
 * takes no plain number (a size passed by mistake would be dereferenced). */
static int new_pointer(lua_State *L)
{
  luaL_checkany(L, 1);
  cl_check_nargs(L, 1);
  cl_Scalar *sc = lua_newuserdatauv(L, sizeof *sc, 0);
  cl_scalar_store(L, 1, CL_U64, sc);
  sc->pointer = 1;
  luaL_setmetatable(L, CL_SCALAR);
  return 1;
}

static int scalar_tostring(lua_State *L)
{
  cl_Scalar *sc = luaL_checkudata(L, 1, CL_SCALAR);
  if (sc->pointer) {
    char hex[32];
    snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)sc->v.u64);
    lua_pushfstring(L, "cuda.ptr(%s)", hex);
    return 1;
  }
  cl_dtype_push(L, sc->type, sc->v.bytes);
  lua_pushfstring(L, "cuda.%s(%s)", scalar_functions[sc->type], luaL_tolstring(L, -1, NULL));
  return 1;
}

static int scalar_fields(lua_State *L)
{
  cl_Scalar *sc = luaL_checkudata(L, 1, CL_SCALAR);
  const char *key = luaL_checkstring(L, 2);
  if (strcmp(key, "value") == 0)
    cl_dtype_push(L, sc->type, sc->v.bytes);
  else if (strcmp(key, "dtype") == 0)
    lua_pushstring(L, cl_dtype_names[sc->type]);
  else if (strcmp(key, "size") == 0)
    lua_pushinteger(L, cl_dtype_sizes[sc->type]);
  else
    lua_pushnil(L);
  return 1;
}

void cl_open_dtype(lua_State *L)
{
  static const luaL_Reg scalar_meta[] = {{"__tostring", scalar_tostring}, {NULL, NULL}};
  cl_new_type(L, CL_SCALAR, scalar_meta, NULL, scalar_fields);
  for (int t = 0; t < CL_NDTYPES; t++) {
    lua_pushinteger(L, t);
    lua_pushcclosure(L, new_scalar, 1);
    lua_setfield(L, -2, scalar_functions[t]);
  }
  lua_pushcfunction(L, new_pointer);
  lua_setfield(L, -2, "ptr");
  lua_createtable(L, 0, CL_NDTYPES);
  for (int t = 0; t < CL_NDTYPES; t++) {
    lua_pushinteger(L, cl_dtype_sizes[t]);
    lua_setfield(L, -2, cl_dtype_names[t]);
  }
  lua_setfield(L, -2, "dtype_sizes");
}
