/* SPDX-License-Identifier: MIT */
/* cudalua_dlpack.h: DLPack tensors between a C library and the cuda module
 * of a Lua state (installed; see cudalua-dlpack(3)).
 *
 * The cuda module registers its functions in the state's registry, so a C
 * library that embeds Lua, or a Lua C module, reaches them however the
 * module was loaded (built into the interpreter, or a cuda.so opened
 * without global symbols). Include the DLPack header (dlpack.h) for the
 * structs' fields; this one only names them. require "cuda" first.
 *
 *   int cudalua_push_dlpack(L, t)           a cuda.View of t, taking it over
 *   int cudalua_push_dlpack_legacy(L, t)    the same for a DLManagedTensor
 *   struct DLManagedTensorVersioned *cudalua_to_dlpack(L, idx)
 *   struct DLManagedTensor *cudalua_to_dlpack_legacy(L, idx)
 *
 * The push functions return LUA_OK with the view pushed, and the view then
 * owns t: releasing its buffer calls t's deleter once. Otherwise they push
 * an error message and return its code, and the caller still owns t. The
 * to functions return a new tensor of the view at idx (which the tensor
 * keeps alive until its deleter is called, on this state's thread while
 * no Lua runs there), or NULL with an error message pushed. They run in
 * protected mode (lua_pcall): no error escapes to the caller. */
#ifndef CUDALUA_DLPACK_H
#define CUDALUA_DLPACK_H

#ifdef __cplusplus
extern "C" {
#endif

#include <lua.h>

struct DLManagedTensor;
struct DLManagedTensorVersioned;

#define CUDALUA_DLPACK_API "cudalua.dlpack"     /* registry field: a light userdata */
#define CUDALUA_DLPACK_API_VERSION 1

typedef struct cudalua_DLPackAPI {
  int version;
  int (*push)(lua_State *L, struct DLManagedTensorVersioned *t);
  int (*push_legacy)(lua_State *L, struct DLManagedTensor *t);
  struct DLManagedTensorVersioned *(*to)(lua_State *L, int idx);
  struct DLManagedTensor *(*to_legacy)(lua_State *L, int idx);
} cudalua_DLPackAPI;

/* The functions of the cuda module loaded in L, or NULL when it is not. */
static inline const cudalua_DLPackAPI *cudalua_dlpack_api(lua_State *L)
{
  lua_getfield(L, LUA_REGISTRYINDEX, CUDALUA_DLPACK_API);
  const cudalua_DLPackAPI *api = (const cudalua_DLPackAPI *)lua_touserdata(L, -1);
  lua_pop(L, 1);
  return api && api->version >= CUDALUA_DLPACK_API_VERSION ? api : NULL;
}

static inline int cudalua_dlpack_missing(lua_State *L)
{
  lua_pushliteral(L, "cudalua: the cuda module is not loaded in this Lua state (require \"cuda\")");
  return LUA_ERRRUN;
}

static inline int cudalua_push_dlpack(lua_State *L, struct DLManagedTensorVersioned *t)
{
  const cudalua_DLPackAPI *api = cudalua_dlpack_api(L);
  return api ? api->push(L, t) : cudalua_dlpack_missing(L);
}

static inline int cudalua_push_dlpack_legacy(lua_State *L, struct DLManagedTensor *t)
{
  const cudalua_DLPackAPI *api = cudalua_dlpack_api(L);
  return api ? api->push_legacy(L, t) : cudalua_dlpack_missing(L);
}

static inline struct DLManagedTensorVersioned *cudalua_to_dlpack(lua_State *L, int idx)
{
  const cudalua_DLPackAPI *api = cudalua_dlpack_api(L);
  return api ? api->to(L, idx) : (cudalua_dlpack_missing(L), (struct DLManagedTensorVersioned *)0);
}

static inline struct DLManagedTensor *cudalua_to_dlpack_legacy(lua_State *L, int idx)
{
  const cudalua_DLPackAPI *api = cudalua_dlpack_api(L);
  return api ? api->to_legacy(L, idx) : (cudalua_dlpack_missing(L), (struct DLManagedTensor *)0);
}

#ifdef __cplusplus
}
#endif

#endif
