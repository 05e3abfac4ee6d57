/* SPDX-License-Identifier: MIT */
/* driver.c: the only code that touches libcuda.
 *
 * The driver is opened with dlopen() on first use, so cudalua builds, loads
 * and explains itself on machines without one. Every entry point comes from
 * cuGetProcAddress at the ABI version of the cuda.h we were built with. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "driver.h"
#include "handle.h"

struct cl_DriverAPI cl_driver;

/* --- the hold (driver.h): one per process, as the driver is ------------------ */

_Atomic int cl_hold_spinning, cl_holding;
static volatile int *_Atomic hold_flag;
static const int *hold_flag_closed;
static const char *_Atomic hold_breaker;

int cl_hold_begin(volatile int *flag, const int *closed)
{
  int off = 0;
  if (!atomic_compare_exchange_strong(&cl_holding, &off, 1))
    return 0;
  hold_breaker = NULL;
  hold_flag_closed = closed;
  hold_flag = flag;
  cl_hold_spinning = 1;
  return 1;
}

/* The flag is pinned host memory the kernel polls: the store is seen
 * there within microseconds, and the fence puts it before the wait. */
static void let_go(const char *api)
{
  volatile int *flag = atomic_exchange(&hold_flag, NULL);
  cl_hold_spinning = 0;
  if (!flag)
    return;
  if (!*hold_flag_closed)
    *flag = 1;
  atomic_thread_fence(memory_order_seq_cst);
  hold_breaker = api;
}

void cl_hold_break(const char *api)
{
  let_go(api);
}

const char *cl_hold_end(void)
{
  let_go(NULL);
  const char *breaker = hold_breaker;
  hold_breaker = NULL;
  cl_holding = 0;
  return breaker;
}
/* The context this thread last made current through us (cl_device_activate). */
__thread CUcontext cl_current_ctx;

typedef CUresult (*cl_GetProcFn)(const char *, void **, int, cuuint64_t,
                                 CUdriverProcAddressQueryResult *);

static enum { UNTRIED, LOADED, FAILED } load_state = UNTRIED;
static char load_failure[512];
static int driver_version = -1;  /* from cuDriverGetVersion, -1 unknown */

static int fail(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(load_failure, sizeof load_failure, fmt, ap);
  va_end(ap);
  load_state = FAILED;
  return 0;
}

static int lookup(cl_GetProcFn getproc, const char *name, int version, void **pfn)
{
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = getproc(name, pfn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && *pfn)
    return 1;
  return fail("the NVIDIA driver is too old for cudalua: it has no %s for CUDA %d.%d "
              "(install a driver for CUDA %d.%d or newer)", name,
              CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10,
              CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
}

static int init_failure(CUresult r)
{
  const char *name = NULL, *text = NULL;
  cl_driver.p_cuGetErrorName(r, &name);
  cl_driver.p_cuGetErrorString(r, &text);
  if (r == CUDA_ERROR_NO_DEVICE)
    return fail("no CUDA device found: the NVIDIA driver is loaded but reports no GPU");
  return fail("the NVIDIA driver could not start: cuInit: %s (%s)",
              name ? name : "unknown error", text ? text : "no description");
}

static int load(void)
{
  const char *path = getenv("CUDALUA_LIBCUDA");
  if (!path || !*path)
    path = "libcuda.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return fail("no NVIDIA driver found: %s", dlerror());
  cl_GetProcFn getproc = (cl_GetProcFn)dlsym(lib, "cuGetProcAddress_v2");
  if (!getproc)
    return fail("the NVIDIA driver at %s is too old for cudalua "
                "(it has no cuGetProcAddress_v2; CUDA 12.4 or newer is needed)", path);
#define CL_LOOKUP(name) \
  if (!lookup(getproc, #name, CUDA_VERSION, (void **)&cl_driver.p_##name)) return 0;
#define CL_LOOKUP_AT(name, version) \
  if (!lookup(getproc, #name, version, (void **)&cl_driver.p_##name)) return 0;
  CL_DRIVER_API(CL_LOOKUP)
  CL_DRIVER_API_AT(CL_LOOKUP_AT)
#undef CL_LOOKUP
#undef CL_LOOKUP_AT
  cl_driver.p_cuDriverGetVersion(&driver_version);
  CUresult r = cl_driver.p_cuInit(0);
  if (r != CUDA_SUCCESS)
    return init_failure(r);
  load_state = LOADED;
  return 1;
}

int cl_driver_try_load(char *why, size_t whysize)
{
  if (load_state == UNTRIED)
    load();
  if (load_state == LOADED)
    return 1;
  if (why)
    snprintf(why, whysize, "%s", load_failure);
  return 0;
}

void cl_driver_load(lua_State *L)
{
  if (load_state == LOADED)
    return;
  if (!cl_driver_try_load(NULL, 0))
    cl_raise_unavailable(L, "%s", load_failure);
}

/* --- cuda.Error ---------------------------------------------------------- */

void cl_push_error(lua_State *L, int code, const char *name, const char *api,
                   const char *message)
{
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, code);
  lua_setfield(L, -2, "code");
  lua_pushstring(L, name);
  lua_setfield(L, -2, "name");
  if (api) {
    lua_pushstring(L, api);
    lua_setfield(L, -2, "api");
  }
  lua_pushstring(L, message);
  lua_setfield(L, -2, "message");
  luaL_setmetatable(L, CL_ERROR);
}

/* --- errors that lose the context ------------------------------------------ */

/* cuda.h documents these as leaving the process "in an inconsistent state":
 * every later CUDA call fails, and only a new process can use the GPU again.
 * The first one is remembered, so that it and every error after it say so
 * (later calls then raise instead of working on a broken context). */
#define CONTEXT_LOST "the context is lost: restart the process"
static CUresult context_lost = CUDA_SUCCESS;

static int loses_context(CUresult r)
{
  switch ((int)r) {
  case CUDA_ERROR_ILLEGAL_ADDRESS: case CUDA_ERROR_LAUNCH_TIMEOUT:
  case CUDA_ERROR_HARDWARE_STACK_ERROR: case CUDA_ERROR_ILLEGAL_INSTRUCTION:
  case CUDA_ERROR_MISALIGNED_ADDRESS: case CUDA_ERROR_INVALID_ADDRESS_SPACE:
  case CUDA_ERROR_INVALID_PC: case CUDA_ERROR_LAUNCH_FAILED:
  case CUDA_ERROR_MPS_CLIENT_TERMINATED: case CUDA_ERROR_EXTERNAL_DEVICE:
  /* by number: older headers than CUDA 12.8 lack the names */
  case 226:  /* CUDA_ERROR_CONTAINED */
  case 721:  /* CUDA_ERROR_TENSOR_MEMORY_LEAK */
    return 1;
  default:
    return 0;
  }
}

/* Push the cuda.Error for r: the driver's text, then detail (or NULL), then
 * whether the context is lost (also as the field context_lost = true). */
static void push_driver_error(lua_State *L, CUresult r, const char *api, const char *detail)
{
  const char *name = NULL, *text = NULL;
  if (cl_driver.p_cuGetErrorName) {
    cl_driver.p_cuGetErrorName(r, &name);
    cl_driver.p_cuGetErrorString(r, &text);
  } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {  /* host allocations, no driver */
    name = "CUDA_ERROR_OUT_OF_MEMORY";
    text = "out of memory";
  }
  if (context_lost == CUDA_SUCCESS && loses_context(r))
    context_lost = r;
  const char *message = lua_pushfstring(L, "%s%s%s%s", text ? text : "unknown error",
                                        detail ? ": " : "", detail ? detail : "",
                                        context_lost ? "; " CONTEXT_LOST : "");
  cl_push_error(L, (int)r, name ? name : "CUDA_ERROR_UNKNOWN", api, message);
  lua_remove(L, -2);
  if (context_lost) {
    lua_pushboolean(L, 1);
    lua_setfield(L, -2, "context_lost");
  }
}

int cl_raise(lua_State *L, CUresult r, const char *api)
{
  push_driver_error(L, r, api, NULL);
  return lua_error(L);
}

int cl_raise_detail(lua_State *L, CUresult r, const char *api, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  const char *detail = lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  push_driver_error(L, r, api, detail);
  lua_remove(L, -2);
  return lua_error(L);
}

int cl_raise_unavailable(lua_State *L, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  const char *message = lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  cl_push_error(L, CUDA_ERROR_NO_DEVICE, "CUDALUA_UNAVAILABLE", NULL, message);
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "unavailable");
  return lua_error(L);
}

static int error_tostring(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "api");
  lua_getfield(L, 1, "name");
  lua_getfield(L, 1, "message");
  if (lua_isnil(L, 2))
    lua_pushstring(L, luaL_optstring(L, 4, "cuda.Error"));
  else
    lua_pushfstring(L, "%s: %s (%s)", lua_tostring(L, 2), luaL_optstring(L, 3, "?"),
                    luaL_optstring(L, 4, ""));
  return 1;
}

/* --- module functions ---------------------------------------------------- */

static int cuda_is_available(lua_State *L)
{
  char why[512];
  int count = 0;
  if (!cl_driver_try_load(why, sizeof why)) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, why);
    return 2;
  }
  CUresult r = CL_CALL(cuDeviceGetCount, (&count));
  if (r != CUDA_SUCCESS || count == 0) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, "no CUDA device found: the NVIDIA driver is loaded but reports no GPU");
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int cuda_device_count(lua_State *L)
{
  int count = 0;
  if (cl_driver_try_load(NULL, 0) && CL_CALL(cuDeviceGetCount, (&count)) != CUDA_SUCCESS)
    count = 0;
  lua_pushinteger(L, count);
  return 1;
}

/* (major, minor) of the CUDA version the driver supports, or nil, reason. */
static int cuda_driver_version(lua_State *L)
{
  char why[512];
  if (!cl_driver_try_load(why, sizeof why) && driver_version < 0) {
    lua_pushnil(L);
    lua_pushstring(L, why);
    return 2;
  }
  lua_pushinteger(L, driver_version / 1000);
  lua_pushinteger(L, driver_version % 1000 / 10);
  return 2;
}

void cl_open_driver(lua_State *L)
{
  static const luaL_Reg error_meta[] = {
    {"__tostring", error_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg functions[] = {
    {"is_available", cuda_is_available},
    {"device_count", cuda_device_count},
    {"driver_version", cuda_driver_version},
    {NULL, NULL}
  };
  luaL_newmetatable(L, CL_ERROR);
  luaL_setfuncs(L, error_meta, 0);
  lua_setfield(L, -2, "Error");
  luaL_setfuncs(L, functions, 0);
}
