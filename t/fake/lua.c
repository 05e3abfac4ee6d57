/* SPDX-License-Identifier: MIT */
/* lua.c: require "fakecuda", the test suite's handle on the fake driver.
 *
 * The fake's .so is also this Lua C module: loaded from the same path as
 * CUDALUA_LIBCUDA, dlopen returns the same handle, so Lua sees the state the
 * driver calls change. Nothing here is ever called from a driver call. */
#include <lauxlib.h>
#include <lua.h>

#include "fake.h"

int luaopen_fakecuda(lua_State *L);
void fake_nvml_register(lua_State *L);   /* nvml.c: fakecuda.nvml_* */
void fake_open_dlpack(lua_State *L);   /* dlpack.c: a C library's DLPack tensors */

static void check_name(lua_State *L, int i, const char *name)
{
  if (fake_calls(name) < 0)
    luaL_argerror(L, i, lua_pushfstring(L, "the fake driver has no entry point '%s'", name));
}

/* fakecuda.fail(name [, nth = 1 [, code = CUDA_ERROR_OUT_OF_MEMORY]]) */
static int fail(lua_State *L)
{
  const char *name = luaL_checkstring(L, 1);
  lua_Integer nth = luaL_optinteger(L, 2, 1);
  lua_Integer code = luaL_optinteger(L, 3, CUDA_ERROR_OUT_OF_MEMORY);
  check_name(L, 1, name);
  luaL_argcheck(L, nth > 0, 2, "nth must be > 0");
  luaL_argcheck(L, code != CUDA_SUCCESS, 3, "a failure needs an error code");
  fake_fail(name, (long)nth, (CUresult)code);
  return 0;
}

static int reset(lua_State *L)
{
  (void)L;
  fake_reset();
  return 0;
}

static int calls(lua_State *L)
{
  const char *name = luaL_checkstring(L, 1);
  check_name(L, 1, name);
  lua_pushinteger(L, fake_calls(name));
  return 1;
}

/* fakecuda.stalls() -> n, name: the waits made while cuda.bench's blocking
 * kernel held its stream (hold.c), and the entry point of the last one */
static int stalls(lua_State *L)
{
  const char *last = NULL;
  lua_pushinteger(L, fake_hold_stalls(&last));
  if (last)
    lua_pushstring(L, last);
  else
    lua_pushnil(L);
  return 2;
}

/* {allocations = n, streams = n, ..., bytes = n}, and their total */
static int live(lua_State *L)
{
  long total = 0;
  lua_createtable(L, 0, FAKE_NKINDS + 1);
  for (int k = 0; k < FAKE_NKINDS; k++) {
    lua_pushinteger(L, fake_live[k]);
    lua_setfield(L, -2, fake_kind_names[k]);
    total += fake_live[k];
  }
  lua_pushinteger(L, (lua_Integer)fake_allocated_bytes());
  lua_setfield(L, -2, "bytes");
  lua_pushinteger(L, total);
  return 2;
}

/* fakecuda.context_usable(): whether the current context is not a
 * destroyed one (a green context destroyed while current). */
static int context_usable(lua_State *L)
{
  lua_pushboolean(L, fake_ctx_usable() == CUDA_SUCCESS);
  return 1;
}

/* fakecuda.host_registered(address): the flags, base and size of the
 * registration (cuMemHostRegister) holding it, or nothing */
static int host_registered(lua_State *L)
{
  unsigned flags;
  uintptr_t base;
  size_t size;
  if (!fake_host_registered((uintptr_t)luaL_checkinteger(L, 1), &flags, &base, &size))
    return 0;
  lua_pushinteger(L, flags);
  lua_pushinteger(L, (lua_Integer)base);
  lua_pushinteger(L, (lua_Integer)size);
  return 3;
}

/* fakecuda.code_address(): an address in this library's code, memory a
 * process may read but not write (t/host_register.t) */
static int code_address(lua_State *L)
{
  lua_pushinteger(L, (lua_Integer)(uintptr_t)&code_address);
  return 1;
}

/* fakecuda.texture(handle): {filter_mode, address_mode = {x, y, z},
 * flags, max_anisotropy, border_color = {r, g, b, a}, resource = "array" |
 * "linear" | "pitch2d", width, height, pitch, size, format, channels,
 * array_flags and depth of an array's}, or
 * nil for a handle that is no live texture */
static int texture(lua_State *L)
{
  CUDA_RESOURCE_DESC r;
  CUDA_TEXTURE_DESC t;
  if (!fake_texture_desc((unsigned long long)luaL_checkinteger(L, 1), &r, &t))
    return 0;
  lua_newtable(L);
  lua_pushinteger(L, t.filterMode);
  lua_setfield(L, -2, "filter_mode");
  lua_pushinteger(L, t.flags);
  lua_setfield(L, -2, "flags");
  lua_pushinteger(L, t.maxAnisotropy);
  lua_setfield(L, -2, "max_anisotropy");
  lua_createtable(L, 3, 0);
  for (int k = 0; k < 3; k++) {
    lua_pushinteger(L, t.addressMode[k]);
    lua_rawseti(L, -2, k + 1);
  }
  lua_setfield(L, -2, "address_mode");
  lua_createtable(L, 4, 0);
  for (int k = 0; k < 4; k++) {
    lua_pushnumber(L, t.borderColor[k]);
    lua_rawseti(L, -2, k + 1);
  }
  lua_setfield(L, -2, "border_color");
  static const char *const types[] = {"array", "mipmap", "linear", "pitch2d"};
  lua_pushstring(L, types[r.resType & 3]);
  lua_setfield(L, -2, "resource");
  CUDA_ARRAY3D_DESCRIPTOR ad;
  if (r.resType == CU_RESOURCE_TYPE_ARRAY && fake_array_desc(r.res.array.hArray, &ad)) {
    lua_pushinteger(L, ad.Flags);     /* the array's: CUDA_ARRAY3D_CUBEMAP, ... */
    lua_setfield(L, -2, "array_flags");
    lua_pushinteger(L, (lua_Integer)ad.Depth);
    lua_setfield(L, -2, "depth");
  }
  if (r.resType == CU_RESOURCE_TYPE_LINEAR) {
    lua_pushinteger(L, (lua_Integer)r.res.linear.sizeInBytes);
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, r.res.linear.format);
    lua_setfield(L, -2, "format");
    lua_pushinteger(L, r.res.linear.numChannels);
    lua_setfield(L, -2, "channels");
  } else if (r.resType == CU_RESOURCE_TYPE_PITCH2D) {
    lua_pushinteger(L, (lua_Integer)r.res.pitch2D.width);
    lua_setfield(L, -2, "width");
    lua_pushinteger(L, (lua_Integer)r.res.pitch2D.height);
    lua_setfield(L, -2, "height");
    lua_pushinteger(L, (lua_Integer)r.res.pitch2D.pitchInBytes);
    lua_setfield(L, -2, "pitch");
    lua_pushinteger(L, r.res.pitch2D.format);
    lua_setfield(L, -2, "format");
    lua_pushinteger(L, r.res.pitch2D.numChannels);
    lua_setfield(L, -2, "channels");
  }
  return 1;
}

/* fakecuda.last_batch() -> numAttrs, {{order, flags, src_hint, dst_hint}
 * for each copy (of the first 256)} of the last cuMemcpyBatchAsync; a hint
 * is "host", a device ordinal, or nil for none. */
static void push_hint(lua_State *L, const CUmemLocation *loc)
{
  if (loc->type == CU_MEM_LOCATION_TYPE_HOST)
    lua_pushstring(L, "host");
  else if (loc->type == CU_MEM_LOCATION_TYPE_DEVICE)
    lua_pushinteger(L, loc->id);
  else
    lua_pushnil(L);
}

static int last_batch(lua_State *L)
{
  static const char *const orders[] = {"invalid", "stream", "during_api_call", "any"};
  lua_pushinteger(L, (lua_Integer)fake_last_batch.nattrs);
  lua_createtable(L, (int)fake_last_batch.count, 0);
  for (size_t k = 0; k < fake_last_batch.count; k++) {
    const CUmemcpyAttributes *a = &fake_last_batch.attrs[k];
    lua_createtable(L, 0, 4);
    lua_pushstring(L, (unsigned)a->srcAccessOrder < 4 ? orders[a->srcAccessOrder] : "?");
    lua_setfield(L, -2, "order");
    lua_pushinteger(L, a->flags);
    lua_setfield(L, -2, "flags");
    push_hint(L, &a->srcLocHint);
    lua_setfield(L, -2, "src_hint");
    push_hint(L, &a->dstLocHint);
    lua_setfield(L, -2, "dst_hint");
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  return 2;
}

/* fakecuda.last_advise() -> ptr, size, advice (CUmem_advise), the
 * location's type ("device", "host", "host_numa") and id: the last
 * cuMemAdvise that succeeded, or nothing before any. */
static int last_advise(lua_State *L)
{
  const struct fake_AdviseRecord *a = &fake_last_advise;
  if (a->ptr == 0)
    return 0;
  lua_pushinteger(L, (lua_Integer)a->ptr);
  lua_pushinteger(L, (lua_Integer)a->size);
  lua_pushinteger(L, a->advice);
  lua_pushstring(L, a->loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? "device"
                  : a->loc.type == CU_MEM_LOCATION_TYPE_HOST ? "host"
                  : a->loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? "host_numa" : "other");
  lua_pushinteger(L, a->loc.id);
  return 5;
}

/* fakecuda.last_mem_create() -> {type, handle_types, location_type,
 * location_id, gpu_direct_rdma}: the last cuMemCreate's properties, as
 * the driver's numbers. */
static int last_mem_create(lua_State *L)
{
  const CUmemAllocationProp *p = &fake_last_mem_create;
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, p->type);
  lua_setfield(L, -2, "type");
  lua_pushinteger(L, p->requestedHandleTypes);
  lua_setfield(L, -2, "handle_types");
  lua_pushinteger(L, p->location.type);
  lua_setfield(L, -2, "location_type");
  lua_pushinteger(L, p->location.id);
  lua_setfield(L, -2, "location_id");
  lua_pushboolean(L, p->allocFlags.gpuDirectRDMACapable);
  lua_setfield(L, -2, "gpu_direct_rdma");
  return 1;
}

/* fakecuda.vmm_log() -> {location ids of the cuMemCreate calls since the
 * last read}, the device count of the last cuMemSetAccess; clears the list. */
static int vmm_log(lua_State *L)
{
  lua_createtable(L, (int)fake_vmm_log.ncreated, 0);
  for (size_t k = 0; k < fake_vmm_log.ncreated; k++) {
    lua_pushinteger(L, fake_vmm_log.created_on[k]);
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  fake_vmm_log.ncreated = 0;
  lua_pushinteger(L, (lua_Integer)fake_vmm_log.access_count);
  return 2;
}

/* The entry points, in cuGetProcAddress's table order. */
static int names(lua_State *L)
{
  lua_newtable(L);
  for (size_t i = 0; fake_entry_name(i); i++) {
    lua_pushstring(L, fake_entry_name(i));
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

int luaopen_fakecuda(lua_State *L)
{
  static const luaL_Reg functions[] = {
    {"fail", fail}, {"reset", reset}, {"calls", calls}, {"live", live}, {"names", names},
    {"context_usable", context_usable}, {"texture", texture}, {"last_batch", last_batch},
    {"last_advise", last_advise}, {"last_mem_create", last_mem_create},
    {"vmm_log", vmm_log}, {"host_registered", host_registered},
    {"code_address", code_address}, {"stalls", stalls},
    {NULL, NULL}
  };
  luaL_newlib(L, functions);
  fake_nvml_register(L);
  fake_open_dlpack(L);
  return 1;
}
