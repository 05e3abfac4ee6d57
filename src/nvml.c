/* SPDX-License-Identifier: MIT */
/* nvml.c: cuda.system, the GPU as NVML (the NVIDIA Management Library) sees
 * it: clocks and why they are low, temperature, power, the PCIe link, the
 * memory bus, ECC, persistence, compute and MIG modes, NVLink.
 *
 * NVML is opened at run time, like the driver (driver.c): dlopen() of
 * libnvidia-ml.so.1 (or CUDALUA_LIBNVML) on first use, every entry point by
 * dlsym from one table. Without NVML only cuda.system says so, in one
 * sentence; the rest of cudalua never touches this file. An entry point
 * the library lacks (an older NVML) makes only the fields that need it
 * nil, with the reason at nd:get(field).
 *
 * The declarations below are ours, written from NVML's documentation: we
 * never include nvml.h (the toolkit need not have it).
 *
 * Each Lua state that uses NVML holds one nvmlInit_v2 (NVML counts them),
 * given back by a registry sentinel when the state closes. NVML device
 * handles stay valid while any holder remains: a field read after the last
 * one (a finalizer at lua_close) gets nil and a reason, never a stale
 * handle. No NVML handle can be closed by Lua, so nothing here has a check
 * that Lua could undo before its use (HACKING.md).
 *
 * NVML is trusted no further than a driver: a string it fills is read to
 * the end of its buffer at most, NUL or not, and every number it reports
 * is checked against what a GPU can report (the ranges below) before any
 * arithmetic; one outside is unknown (nil and the reason) or, where a
 * function must answer, refused in one sentence. */
#include <ctype.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cl.h"
#include "nvml.h"

#define CL_NVML_DEVICE "cuda.system.Device"

/* --- NVML's types, as its documentation gives them ----------------------- */

typedef int nvmlReturn_t;                    /* an enum in nvml.h */
typedef struct nvmlDevice_st *nvmlDevice_t;
enum {
  NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13, NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
};
enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 };
#define NVML_NVLINK_MAX_LINKS 36             /* nvml.h of CUDA 13 (18 before) */
#define NVML_BUFFER_SIZE 96                  /* >= every *_BUFFER_SIZE we use (names, UUIDs: 96) */

typedef struct {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
} nvmlPciInfo_t;

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;

typedef struct {                             /* nvmlTemperature_v1_t */
  unsigned int version;
  int sensorType;                            /* NVML_TEMPERATURE_GPU = 0 */
  int temperature;
} nvmlTemperature_t;
/* NVML_STRUCT_VERSION(Temperature, 1) */
#define NVML_TEMPERATURE_V1 ((unsigned int)(sizeof(nvmlTemperature_t) | (1u << 24)))

/* The entry points: required ones first (without them the library is not
 * a usable NVML), then the optional ones (without one, its fields are nil). */
#define CL_NVML_REQUIRED(X)                                                          \
  X(nvmlReturn_t, nvmlInit_v2, (void))                                               \
  X(nvmlReturn_t, nvmlShutdown, (void))                                              \
  X(const char *, nvmlErrorString, (nvmlReturn_t))                                   \
  X(nvmlReturn_t, nvmlDeviceGetCount_v2, (unsigned int *))
#define CL_NVML_OPTIONAL(X)                                                          \
  X(nvmlReturn_t, nvmlSystemGetDriverVersion, (char *, unsigned int))                \
  X(nvmlReturn_t, nvmlSystemGetNVMLVersion, (char *, unsigned int))                  \
  X(nvmlReturn_t, nvmlSystemGetCudaDriverVersion_v2, (int *))                        \
  X(nvmlReturn_t, nvmlDeviceGetHandleByPciBusId_v2, (const char *, nvmlDevice_t *))  \
  X(nvmlReturn_t, nvmlDeviceGetHandleByUUID, (const char *, nvmlDevice_t *))         \
  X(nvmlReturn_t, nvmlDeviceGetIndex, (nvmlDevice_t, unsigned int *))                \
  X(nvmlReturn_t, nvmlDeviceGetPciInfo_v3, (nvmlDevice_t, nvmlPciInfo_t *))          \
  X(nvmlReturn_t, nvmlDeviceGetUUID, (nvmlDevice_t, char *, unsigned int))           \
  X(nvmlReturn_t, nvmlDeviceGetName, (nvmlDevice_t, char *, unsigned int))           \
  X(nvmlReturn_t, nvmlDeviceGetClockInfo, (nvmlDevice_t, int, unsigned int *))       \
  X(nvmlReturn_t, nvmlDeviceGetApplicationsClock, (nvmlDevice_t, int, unsigned int *)) \
  X(nvmlReturn_t, nvmlDeviceGetMaxClockInfo, (nvmlDevice_t, int, unsigned int *))    \
  X(nvmlReturn_t, nvmlDeviceGetCurrentClocksEventReasons, (nvmlDevice_t, unsigned long long *)) \
  X(nvmlReturn_t, nvmlDeviceGetCurrentClocksThrottleReasons, (nvmlDevice_t, unsigned long long *)) \
  X(nvmlReturn_t, nvmlDeviceGetTemperatureV, (nvmlDevice_t, nvmlTemperature_t *))    \
  X(nvmlReturn_t, nvmlDeviceGetTemperature, (nvmlDevice_t, int, unsigned int *))     \
  X(nvmlReturn_t, nvmlDeviceGetPowerUsage, (nvmlDevice_t, unsigned int *))           \
  X(nvmlReturn_t, nvmlDeviceGetEnforcedPowerLimit, (nvmlDevice_t, unsigned int *))   \
  X(nvmlReturn_t, nvmlDeviceGetUtilizationRates, (nvmlDevice_t, nvmlUtilization_t *)) \
  X(nvmlReturn_t, nvmlDeviceGetCurrPcieLinkGeneration, (nvmlDevice_t, unsigned int *)) \
  X(nvmlReturn_t, nvmlDeviceGetCurrPcieLinkWidth, (nvmlDevice_t, unsigned int *))    \
  X(nvmlReturn_t, nvmlDeviceGetMaxPcieLinkGeneration, (nvmlDevice_t, unsigned int *)) \
  X(nvmlReturn_t, nvmlDeviceGetMaxPcieLinkWidth, (nvmlDevice_t, unsigned int *))     \
  X(nvmlReturn_t, nvmlDeviceGetMemoryBusWidth, (nvmlDevice_t, unsigned int *))       \
  X(nvmlReturn_t, nvmlDeviceGetEccMode, (nvmlDevice_t, int *, int *))                \
  X(nvmlReturn_t, nvmlDeviceGetPersistenceMode, (nvmlDevice_t, int *))               \
  X(nvmlReturn_t, nvmlDeviceGetComputeMode, (nvmlDevice_t, int *))                   \
  X(nvmlReturn_t, nvmlDeviceGetMigMode, (nvmlDevice_t, unsigned int *, unsigned int *)) \
  X(nvmlReturn_t, nvmlDeviceGetNvLinkState, (nvmlDevice_t, unsigned int, int *))

#define CL_NVML_FIELD(ret, name, params) ret (*name) params;
static struct {
  CL_NVML_REQUIRED(CL_NVML_FIELD)
  CL_NVML_OPTIONAL(CL_NVML_FIELD)
} nvml;

/* --- opening NVML ---------------------------------------------------------- */

static enum { UNTRIED, LOADED, FAILED } load_state = UNTRIED;
static char load_failure[512];
static _Atomic int nvml_holders;   /* Lua states holding an nvmlInit_v2 */

static int fail(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(load_failure, sizeof load_failure, fmt, ap);
  va_end(ap);
  load_state = FAILED;
  return 0;
}

static void load(void)
{
  const char *path = getenv("CUDALUA_LIBNVML");
  if (!path || !*path)
    path = "libnvidia-ml.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fail("NVML (the NVIDIA Management Library) was not found: %s", dlerror());
    return;
  }
#define CL_NVML_REQUIRE(ret, name, params)                                               \
  if (!(*(void **)&nvml.name = dlsym(lib, #name))) {                                     \
    fail("the library at %s is not a usable NVML: it has no %s", path, #name);           \
    return;                                                                              \
  }
#define CL_NVML_RESOLVE(ret, name, params) *(void **)&nvml.name = dlsym(lib, #name);
  CL_NVML_REQUIRED(CL_NVML_REQUIRE)
  CL_NVML_OPTIONAL(CL_NVML_RESOLVE)
#undef CL_NVML_REQUIRE
#undef CL_NVML_RESOLVE
  if (!nvml.nvmlDeviceGetHandleByPciBusId_v2 && !nvml.nvmlDeviceGetHandleByUUID) {
    fail("the library at %s is not a usable NVML: it finds devices neither by PCI bus id "
         "nor by UUID", path);
    return;
  }
  load_state = LOADED;
}

static int state_key;   /* its address: the registry key of this state's hold */

/* The hold's finalizer: the Lua state closes. Reachable from a script
 * (debug.getregistry), it acts on this state's hold only, once. */
static int hold_gc(lua_State *L)
{
  lua_rawgetp(L, LUA_REGISTRYINDEX, &state_key);
  int own = lua_type(L, 1) == LUA_TUSERDATA && lua_rawequal(L, 1, -1);
  lua_pop(L, 1);
  unsigned char *released = own ? lua_touserdata(L, 1) : NULL;
  if (released == NULL || *released)
    return 0;
  *released = 1;
  if (atomic_fetch_sub(&nvml_holders, 1) == 1)
    nvml.nvmlShutdown();
  return 0;
}

/* Whether NVML works for this state (initialized once per state); else the
 * one sentence why not in why. It allocates: call it in a function's
 * gather step. */
static int nvml_open(lua_State *L, char *why, size_t size)
{
  if (load_state == UNTRIED)
    load();
  if (load_state == LOADED) {
    int held = lua_rawgetp(L, LUA_REGISTRYINDEX, &state_key) != LUA_TNIL;
    lua_pop(L, 1);
    if (held)
      return 1;
    nvmlReturn_t r = nvml.nvmlInit_v2();
    if (r == NVML_SUCCESS) {
      *(unsigned char *)lua_newuserdatauv(L, 1, 0) = 0;   /* released: not yet */
      lua_createtable(L, 0, 1);
      lua_pushcfunction(L, hold_gc);
      lua_setfield(L, -2, "__gc");
      lua_setmetatable(L, -2);
      lua_rawsetp(L, LUA_REGISTRYINDEX, &state_key);
      atomic_fetch_add(&nvml_holders, 1);
      return 1;
    }
    const char *text = nvml.nvmlErrorString(r);
    fail("NVML could not start: nvmlInit_v2: %s", text ? text : "unknown error");
  }
  snprintf(why, size, "%s", load_failure);
  return 0;
}

static void nvml_check(lua_State *L)
{
  char why[512];
  if (!nvml_open(L, why, sizeof why))
    cl_raise_unavailable(L, "%s", why);
}

/* NVML's return codes by name, for cuda.Error's name. */
static const char *const return_names[] = {
  "NVML_SUCCESS", "NVML_ERROR_UNINITIALIZED", "NVML_ERROR_INVALID_ARGUMENT",
  "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_ALREADY_INITIALIZED",
  "NVML_ERROR_NOT_FOUND", "NVML_ERROR_INSUFFICIENT_SIZE", "NVML_ERROR_INSUFFICIENT_POWER",
  "NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_TIMEOUT", "NVML_ERROR_IRQ_ISSUE",
  "NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_FUNCTION_NOT_FOUND",
  "NVML_ERROR_CORRUPTED_INFOROM", "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED",
  "NVML_ERROR_OPERATING_SYSTEM", "NVML_ERROR_LIB_RM_VERSION_MISMATCH", "NVML_ERROR_IN_USE",
  "NVML_ERROR_MEMORY", "NVML_ERROR_NO_DATA", "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
  "NVML_ERROR_INSUFFICIENT_RESOURCES", "NVML_ERROR_FREQ_NOT_SUPPORTED",
  "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_DEPRECATED", "NVML_ERROR_NOT_READY",
  "NVML_ERROR_GPU_NOT_FOUND", "NVML_ERROR_INVALID_STATE",
};

static const char *error_text(nvmlReturn_t r)
{
  const char *text = nvml.nvmlErrorString(r);
  return text ? text : "unknown error";
}

/* Raise a cuda.Error for a failed NVML call that must not fail quietly. */
static int raise_nvml(lua_State *L, nvmlReturn_t r, const char *api, const char *what)
{
  const char *name = r >= 0 && (size_t)r < sizeof return_names / sizeof return_names[0]
                     ? return_names[r] : "NVML_ERROR_UNKNOWN";
  const char *message = lua_pushfstring(L, "%s (%s)", error_text(r), what);
  cl_push_error(L, r, name, api, message);
  return lua_error(L);
}

/* --- reading one value: pushed and 1, or the reason pushed and 0 ---------- */

static int missing(lua_State *L, const char *name)
{
  lua_pushfstring(L, "this NVML has no %s", name);
  return 0;
}

static int failed(lua_State *L, const char *api, nvmlReturn_t r)
{
  lua_pushfstring(L, "%s: %s", api, error_text(r));
  return 0;
}

/* Call an optional entry point; a missing one or a failure returns its
 * reason from the reading function. */
#define NVML_READ(L, name, args)                        \
  do {                                                  \
    if (!nvml.name)                                     \
      return missing((L), #name);                       \
    nvmlReturn_t r_ = nvml.name args;                   \
    if (r_ != NVML_SUCCESS)                             \
      return failed((L), #name, r_);                    \
  } while (0)

/* What a GPU can report: a reading outside its range is a broken or
 * hostile NVML's, never arithmetic's input. The bounds keep every product
 * below within int64 (peak bandwidth: 2 x 100000 MHz x 10^6 x 8192 bytes,
 * 1.6e18) and every PCIe rate far below 2^63. */
typedef struct { lua_Integer lo, hi; const char *what; } Range;
static const Range clock_range = {1, 100000, "a clock in MHz"};
static const Range bus_range = {8, 65536, "a memory bus width in bits"};
static const Range gen_range = {1, 32, "a PCIe generation"};
static const Range lanes_range = {1, 64, "a PCIe link width in lanes"};
static const Range temperature_range = {0, 250, "a temperature in C"};
static const Range power_range = {0, 10000000, "a power in mW"};
static const Range limit_range = {1, 10000000, "a power limit in mW"};
static const Range percent_range = {0, 100, "a utilization in %"};
static const Range index_range = {0, 65535, "a device index"};
static const Range count_range = {0, 65536, "a device count"};
static const Range cuda_range = {1000, 999999, "a CUDA version (1000 x major + 10 x minor)"};
static const Range feature_range = {0, 1, "a feature state (0 or 1)"};
static const Range mode_range = {0, 255, "a compute mode"};
static const Range link_state_range = {0, 1, "an NVLink state (0 or 1)"};

/* Whether v, a reading of api, is in r; else 0 and the reason pushed. */
static int in_range(lua_State *L, const char *api, lua_Integer v, const Range *r)
{
  if (v >= r->lo && v <= r->hi)
    return 1;
  lua_pushfstring(L, "%s reported %I, which is not %s (%I to %I)", api, v, r->what, r->lo, r->hi);
  return 0;
}

/* ... as a reading function's return: the reason, from the function */
#define NVML_CHECK(L, name, v, range)                   \
  do {                                                  \
    if (!in_range((L), #name, (v), (range)))            \
      return 0;                                         \
  } while (0)

/* Push v, a reading of api, where it is in r (1); else the reason (0). */
static int push_reading(lua_State *L, const char *api, lua_Integer v, const Range *r)
{
  if (!in_range(L, api, v, r))
    return 0;
  lua_pushinteger(L, v);
  return 1;
}

/* Push the string NVML filled into buf: at most its size bytes, for a
 * broken NVML may fill it to the end without a NUL. */
static void push_filled(lua_State *L, const char *buf, size_t size)
{
  lua_pushlstring(L, buf, strnlen(buf, size));
}

typedef struct cl_NvmlDevice {
  nvmlDevice_t handle;
  int ordinal;                  /* the CUDA device's */
} cl_NvmlDevice;                /* user value 1: the cuda.Device */

static int read_clock(lua_State *L, cl_NvmlDevice *nd, int kind)
{
  unsigned int mhz = 0;
  NVML_READ(L, nvmlDeviceGetClockInfo, (nd->handle, kind, &mhz));
  return push_reading(L, "nvmlDeviceGetClockInfo", mhz, &clock_range);
}

static int read_max_clock(lua_State *L, cl_NvmlDevice *nd, int kind)
{
  unsigned int mhz = 0;
  NVML_READ(L, nvmlDeviceGetMaxClockInfo, (nd->handle, kind, &mhz));
  return push_reading(L, "nvmlDeviceGetMaxClockInfo", mhz, &clock_range);
}

static int read_application_clock(lua_State *L, cl_NvmlDevice *nd, int kind)
{
  unsigned int mhz = 0;
  NVML_READ(L, nvmlDeviceGetApplicationsClock, (nd->handle, kind, &mhz));
  return push_reading(L, "nvmlDeviceGetApplicationsClock", mhz, &clock_range);
}

/* The clock-event (throttle) reasons of nvml.h's bit mask, in cuda.core's
 * words (ClocksEventReasons, lowercase). */
static const struct { unsigned long long bit; const char *word; } event_reasons[] = {
  {0x1, "gpu_idle"}, {0x2, "applications_clocks_setting"}, {0x4, "sw_power_cap"},
  {0x8, "hw_slowdown"}, {0x10, "sync_boost"}, {0x20, "sw_thermal_slowdown"},
  {0x40, "hw_thermal_slowdown"}, {0x80, "hw_power_brake_slowdown"},
  {0x100, "display_clock_setting"},
};
#define NREASONS (sizeof event_reasons / sizeof event_reasons[0])

static int read_clock_event_reasons(lua_State *L, cl_NvmlDevice *nd)
{
  unsigned long long mask = 0;
  if (nvml.nvmlDeviceGetCurrentClocksEventReasons)
    NVML_READ(L, nvmlDeviceGetCurrentClocksEventReasons, (nd->handle, &mask));
  else   /* its name before NVML 12.2 */
    NVML_READ(L, nvmlDeviceGetCurrentClocksThrottleReasons, (nd->handle, &mask));
  lua_createtable(L, 2, 0);
  lua_Integer n = 0;
  for (size_t k = 0; k < NREASONS; k++)
    if (mask & event_reasons[k].bit) {
      lua_pushstring(L, event_reasons[k].word);
      lua_rawseti(L, -2, ++n);
      mask &= ~event_reasons[k].bit;
    }
  for (int bit = 0; bit < 64; bit++)   /* reasons newer than this file, by bit */
    if (mask & 1ull << bit) {
      lua_pushfstring(L, "reason_bit_%d", bit);
      lua_rawseti(L, -2, ++n);
    }
  return 1;
}

static int read_temperature(lua_State *L, cl_NvmlDevice *nd)
{
  if (nvml.nvmlDeviceGetTemperatureV) {
    nvmlTemperature_t t = {NVML_TEMPERATURE_V1, 0, 0};
    nvmlReturn_t r = nvml.nvmlDeviceGetTemperatureV(nd->handle, &t);
    if (r == NVML_SUCCESS)
      return push_reading(L, "nvmlDeviceGetTemperatureV", t.temperature, &temperature_range);
    if (r != NVML_ERROR_ARGUMENT_VERSION_MISMATCH && r != NVML_ERROR_FUNCTION_NOT_FOUND &&
        r != NVML_ERROR_NOT_SUPPORTED)
      return failed(L, "nvmlDeviceGetTemperatureV", r);
  }
  unsigned int c = 0;   /* the older call (deprecated in CUDA 13) */
  NVML_READ(L, nvmlDeviceGetTemperature, (nd->handle, 0, &c));
  return push_reading(L, "nvmlDeviceGetTemperature", c, &temperature_range);
}

static int read_power_usage(lua_State *L, cl_NvmlDevice *nd)
{
  unsigned int mw = 0;
  NVML_READ(L, nvmlDeviceGetPowerUsage, (nd->handle, &mw));
  NVML_CHECK(L, nvmlDeviceGetPowerUsage, mw, &power_range);
  lua_pushnumber(L, mw / 1000.0);
  return 1;
}

static int read_power_limit(lua_State *L, cl_NvmlDevice *nd)
{
  unsigned int mw = 0;
  NVML_READ(L, nvmlDeviceGetEnforcedPowerLimit, (nd->handle, &mw));
  NVML_CHECK(L, nvmlDeviceGetEnforcedPowerLimit, mw, &limit_range);
  lua_pushnumber(L, mw / 1000.0);
  return 1;
}

static int read_utilization(lua_State *L, cl_NvmlDevice *nd)
{
  nvmlUtilization_t u = {0, 0};
  NVML_READ(L, nvmlDeviceGetUtilizationRates, (nd->handle, &u));
  NVML_CHECK(L, nvmlDeviceGetUtilizationRates, u.gpu, &percent_range);
  NVML_CHECK(L, nvmlDeviceGetUtilizationRates, u.memory, &percent_range);
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, u.gpu);
  lua_setfield(L, -2, "gpu");
  lua_pushinteger(L, u.memory);
  lua_setfield(L, -2, "memory");
  return 1;
}

/* Bytes per second one PCIe lane carries in each direction: the transfer
 * rate by generation times its encoding (8b/10b for 1 and 2, 128b/130b for
 * 3 to 5, FLIT mode's 242 of 256 bytes for 6 and 7); 0 unknown. */
static double pcie_lane_rate(unsigned int gen)
{
  static const double gts[] = {0, 2.5, 5, 8, 16, 32, 64, 128};
  if (gen == 0 || gen >= sizeof gts / sizeof gts[0])
    return 0;
  double encoding = gen <= 2 ? 8.0 / 10 : gen <= 5 ? 128.0 / 130 : 242.0 / 256;
  return gts[gen] * 1e9 * encoding / 8;
}

/* rate: the link's bytes per second; gen and width are in their ranges,
 * so it is below 2^40 and converts exactly. */
static void set_link_rate(lua_State *L, const char *key, unsigned int gen, unsigned int width)
{
  double rate = pcie_lane_rate(gen) * width;
  if (rate > 0) {
    lua_pushinteger(L, (lua_Integer)(rate + 0.5));
    lua_setfield(L, -2, key);
  }
}

typedef nvmlReturn_t (*cl_NvmlUintFn)(nvmlDevice_t, unsigned int *);

/* Read an unsigned reading of api with fn into *v: 1 where it worked and
 * r admits it, else 0 and the reason pushed. */
static int read_uint(lua_State *L, cl_NvmlUintFn fn, const char *api, nvmlDevice_t h,
                     unsigned int *v, const Range *r)
{
  if (!fn)
    return missing(L, api);
  nvmlReturn_t rc = fn(h, v);
  if (rc != NVML_SUCCESS)
    return failed(L, api, rc);
  return in_range(L, api, *v, r);
}

/* The four readings NVML gives of the link, each where it has it; nil and
 * the current generation's reason where it has none. */
static int read_pcie(lua_State *L, cl_NvmlDevice *nd)
{
  static const char *const apis[4] = {
    "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth"
  };
  static const char *const keys[4] = {"generation", "width", "max_generation", "max_width"};
  const cl_NvmlUintFn fns[4] = {
    nvml.nvmlDeviceGetCurrPcieLinkGeneration, nvml.nvmlDeviceGetCurrPcieLinkWidth,
    nvml.nvmlDeviceGetMaxPcieLinkGeneration, nvml.nvmlDeviceGetMaxPcieLinkWidth
  };
  unsigned int v[4] = {0, 0, 0, 0};
  int ok[4], any = 0;
  for (int k = 3; k >= 0; k--) {   /* the current generation's reason is left on top */
    ok[k] = read_uint(L, fns[k], apis[k], nd->handle, &v[k], k % 2 ? &lanes_range : &gen_range);
    if (!ok[k] && k > 0)
      lua_pop(L, 1);
    any |= ok[k];
  }
  if (!any)
    return 0;
  if (!ok[0])
    lua_pop(L, 1);
  lua_createtable(L, 0, 6);
  for (int k = 0; k < 4; k++)
    if (ok[k]) {
      lua_pushinteger(L, v[k]);
      lua_setfield(L, -2, keys[k]);
    }
  if (ok[0] && ok[1])
    set_link_rate(L, "rate", v[0], v[1]);
  if (ok[2] && ok[3])
    set_link_rate(L, "max_rate", v[2], v[3]);
  return 1;
}

static int read_bus_bits(lua_State *L, cl_NvmlDevice *nd, unsigned int *bits)
{
  return read_uint(L, nvml.nvmlDeviceGetMemoryBusWidth, "nvmlDeviceGetMemoryBusWidth", nd->handle,
                   bits, &bus_range);
}

static int read_memory_bus_width(lua_State *L, cl_NvmlDevice *nd)
{
  unsigned int bits = 0;
  if (!read_bus_bits(L, nd, &bits))
    return 0;
  lua_pushinteger(L, bits);
  return 1;
}

/* NVBench's peak (device_info's global memory bus bandwidth): two
 * transfers a clock (DDR, HBM) at the maximum memory clock, times the bus
 * width in bytes. */
static int read_peak_memory_bandwidth(lua_State *L, cl_NvmlDevice *nd)
{
  unsigned int bits = 0, mhz = 0;
  if (!read_bus_bits(L, nd, &bits))
    return 0;
  NVML_READ(L, nvmlDeviceGetMaxClockInfo, (nd->handle, NVML_CLOCK_MEM, &mhz));
  NVML_CHECK(L, nvmlDeviceGetMaxClockInfo, mhz, &clock_range);
  lua_pushinteger(L, 2 * (lua_Integer)mhz * 1000000 * (bits / 8));   /* < 2^61: the ranges */
  return 1;
}

static int read_ecc(lua_State *L, cl_NvmlDevice *nd)
{
  int current = 0, pending = 0;
  NVML_READ(L, nvmlDeviceGetEccMode, (nd->handle, &current, &pending));
  NVML_CHECK(L, nvmlDeviceGetEccMode, current, &feature_range);
  lua_pushboolean(L, current == 1);   /* NVML_FEATURE_ENABLED */
  return 1;
}

static int read_persistence_mode(lua_State *L, cl_NvmlDevice *nd)
{
  int mode = 0;
  NVML_READ(L, nvmlDeviceGetPersistenceMode, (nd->handle, &mode));
  NVML_CHECK(L, nvmlDeviceGetPersistenceMode, mode, &feature_range);
  lua_pushboolean(L, mode == 1);
  return 1;
}

static int read_compute_mode(lua_State *L, cl_NvmlDevice *nd)
{
  static const char *const modes[] = {"default", "exclusive_thread", "prohibited",
                                      "exclusive_process"};
  int mode = 0;
  NVML_READ(L, nvmlDeviceGetComputeMode, (nd->handle, &mode));
  NVML_CHECK(L, nvmlDeviceGetComputeMode, mode, &mode_range);
  if (mode < 4)
    lua_pushstring(L, modes[mode]);
  else
    lua_pushfstring(L, "mode_%d", mode);
  return 1;
}

static int read_mig_mode(lua_State *L, cl_NvmlDevice *nd)
{
  unsigned int current = 0, pending = 0;
  NVML_READ(L, nvmlDeviceGetMigMode, (nd->handle, &current, &pending));
  NVML_CHECK(L, nvmlDeviceGetMigMode, current, &feature_range);
  lua_pushboolean(L, current == 1);   /* NVML_DEVICE_MIG_ENABLE */
  return 1;
}

/* One boolean (active) per link the device has: NVML answers for links up
 * to NVML_NVLINK_MAX_LINKS and refuses the first one past the device's
 * (INVALID_ARGUMENT). A device without NVLink (NOT_SUPPORTED at link 0)
 * has an empty list; any other failure leaves the list unknown, not short. */
static int read_nvlink(lua_State *L, cl_NvmlDevice *nd)
{
  int active[NVML_NVLINK_MAX_LINKS];
  unsigned int n = 0;
  if (!nvml.nvmlDeviceGetNvLinkState)
    return missing(L, "nvmlDeviceGetNvLinkState");
  for (; n < NVML_NVLINK_MAX_LINKS; n++) {
    int state = 0;
    nvmlReturn_t r = nvml.nvmlDeviceGetNvLinkState(nd->handle, n, &state);
    if (r != NVML_SUCCESS) {
      if (r != NVML_ERROR_NOT_SUPPORTED && r != NVML_ERROR_INVALID_ARGUMENT)
        return failed(L, "nvmlDeviceGetNvLinkState", r);
      break;
    }
    NVML_CHECK(L, nvmlDeviceGetNvLinkState, state, &link_state_range);
    active[n] = state == 1;
  }
  lua_createtable(L, (int)n, 0);
  for (unsigned int k = 0; k < n; k++) {
    lua_pushboolean(L, active[k]);
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  return 1;
}

static int read_name(lua_State *L, cl_NvmlDevice *nd)
{
  char s[NVML_BUFFER_SIZE] = "";
  NVML_READ(L, nvmlDeviceGetName, (nd->handle, s, sizeof s));
  push_filled(L, s, sizeof s);
  return 1;
}

static int read_uuid(lua_State *L, cl_NvmlDevice *nd)
{
  char s[NVML_BUFFER_SIZE] = "";
  NVML_READ(L, nvmlDeviceGetUUID, (nd->handle, s, sizeof s));
  push_filled(L, s, sizeof s);
  return 1;
}

static int read_pci_bus_id(lua_State *L, cl_NvmlDevice *nd)
{
  nvmlPciInfo_t pci;
  memset(&pci, 0, sizeof pci);
  NVML_READ(L, nvmlDeviceGetPciInfo_v3, (nd->handle, &pci));
  push_filled(L, pci.busId, sizeof pci.busId);
  return 1;
}

static int read_index(lua_State *L, cl_NvmlDevice *nd)
{
  unsigned int index = 0;
  NVML_READ(L, nvmlDeviceGetIndex, (nd->handle, &index));
  return push_reading(L, "nvmlDeviceGetIndex", index, &index_range);
}

static int read_id(lua_State *L, cl_NvmlDevice *nd)
{
  lua_pushinteger(L, nd->ordinal);
  return 1;
}

typedef int (*cl_NvmlRead)(lua_State *L, cl_NvmlDevice *nd);
static const struct { const char *name; cl_NvmlRead read; } fields[] = {
  {"id", read_id}, {"index", read_index}, {"name", read_name}, {"uuid", read_uuid},
  {"pci_bus_id", read_pci_bus_id}, {"memory_bus_width", read_memory_bus_width},
  {"peak_memory_bandwidth", read_peak_memory_bandwidth}, {"pcie", read_pcie},
  {"temperature", read_temperature}, {"power_usage", read_power_usage},
  {"power_limit", read_power_limit}, {"utilization", read_utilization}, {"ecc", read_ecc},
  {"persistence_mode", read_persistence_mode}, {"compute_mode", read_compute_mode},
  {"mig_mode", read_mig_mode}, {"nvlink", read_nvlink},
  {"clock_event_reasons", read_clock_event_reasons},
};
#define NFIELDS (sizeof fields / sizeof fields[0])

/* --- cuda.system.Device ----------------------------------------------------- */

static cl_NvmlDevice *check_nvml_device(lua_State *L, int i)
{
  return luaL_checkudata(L, i, CL_NVML_DEVICE);
}

/* Whether NVML still holds (see the top); else the reason pushed. */
static int nvml_live(lua_State *L)
{
  if (atomic_load(&nvml_holders) > 0)
    return 1;
  lua_pushliteral(L, "NVML was shut down: the Lua state that opened it is closing");
  return 0;
}

/* Run field k's reader: its value, or nil and the reason (nreturn 2). */
static int run_field(lua_State *L, cl_NvmlDevice *nd, size_t k, int nreturn)
{
  if (nvml_live(L) && fields[k].read(L, nd))
    return 1;
  lua_pushnil(L);
  lua_insert(L, -2);   /* nil, reason */
  return nreturn == 1 ? (lua_pop(L, 1), 1) : 2;
}

static size_t find_field(const char *key)
{
  for (size_t k = 0; k < NFIELDS; k++)
    if (strcmp(fields[k].name, key) == 0)
      return k;
  return NFIELDS;
}

static int nvml_device_fields(lua_State *L)
{
  cl_NvmlDevice *nd = check_nvml_device(L, 1);
  if (lua_type(L, 2) != LUA_TSTRING)
    return 0;
  const char *key = lua_tostring(L, 2);
  if (strcmp(key, "device") == 0) {
    lua_getiuservalue(L, 1, 1);
    return 1;
  }
  size_t k = find_field(key);
  if (k == NFIELDS)
    return 0;
  return run_field(L, nd, k, 1);
}

/* nd:get(field): the field's value, or nil and why it has none. */
static int nvml_device_get(lua_State *L)
{
  cl_NvmlDevice *nd = check_nvml_device(L, 1);
  const char *key = luaL_checkstring(L, 2);
  cl_check_nargs(L, 2);
  size_t k = find_field(key);
  if (k == NFIELDS)
    return luaL_argerror(L, 2, lua_pushfstring(L, "no field '%s' of cuda.system.Device", key));
  return run_field(L, nd, k, 2);
}

/* The clock kind at arg, as NVML's nvmlClockType_t. No allocation unless
 * it raises: nd:clock("sm") runs between benchmark samples. */
static int check_clock_kind(lua_State *L, int arg)
{
  static const char *const kinds[] = {"graphics", "sm", "memory", "video"};
  if (lua_type(L, arg) == LUA_TSTRING) {
    const char *s = lua_tostring(L, arg);
    for (int k = 0; k < 4; k++)
      if (strcmp(s, kinds[k]) == 0)
        return k;   /* NVML_CLOCK_GRAPHICS, _SM, _MEM, _VIDEO */
    return luaL_argerror(L, arg, lua_pushfstring(L, "clock kind must be \"sm\", \"memory\", "
                                                 "\"graphics\" or \"video\", got '%s'", s));
  }
  return luaL_argerror(L, arg, lua_pushfstring(L, "clock kind (a string) expected, got %s",
                                               luaL_typename(L, arg)));
}

static int clock_result(lua_State *L, cl_NvmlDevice *nd, int kind,
                        int (*read)(lua_State *, cl_NvmlDevice *, int))
{
  if (nvml_live(L) && read(L, nd, kind))
    return 1;
  lua_pushnil(L);
  lua_insert(L, -2);
  return 2;
}

/* nd:clock(kind): the current clock in MHz (nil, reason where NVML has none) */
static int nvml_device_clock(lua_State *L)
{
  cl_NvmlDevice *nd = check_nvml_device(L, 1);
  int kind = check_clock_kind(L, 2);
  cl_check_nargs(L, 2);
  return clock_result(L, nd, kind, read_clock);
}

static int nvml_device_max_clock(lua_State *L)
{
  cl_NvmlDevice *nd = check_nvml_device(L, 1);
  int kind = check_clock_kind(L, 2);
  cl_check_nargs(L, 2);
  return clock_result(L, nd, kind, read_max_clock);
}

static int nvml_device_application_clock(lua_State *L)
{
  cl_NvmlDevice *nd = check_nvml_device(L, 1);
  int kind = check_clock_kind(L, 2);
  cl_check_nargs(L, 2);
  return clock_result(L, nd, kind, read_application_clock);
}

static int nvml_device_clock_event_reasons(lua_State *L)
{
  cl_NvmlDevice *nd = check_nvml_device(L, 1);
  cl_check_nargs(L, 1);
  return run_field(L, nd, find_field("clock_event_reasons"), 2);
}

static int nvml_device_tostring(lua_State *L)
{
  cl_NvmlDevice *nd = check_nvml_device(L, 1);
  lua_pushfstring(L, "%s(CUDA device %d)", CL_NVML_DEVICE, nd->ordinal);
  return 1;
}

/* The NVML handle of the CUDA device d: by PCI bus id, else by UUID (as
 * cuda.core maps its two Device types). */
static nvmlDevice_t find_handle(lua_State *L, cl_Device *d)
{
  char bus[64] = "", uuid[64];
  CUuuid u;
  CL_TRY(L, cuDeviceGetPCIBusId, (bus, (int)sizeof bus, d->handle));
  CL_TRY(L, cuDeviceGetUuid, (&u, d->handle));
  size_t n = (size_t)snprintf(uuid, sizeof uuid, "GPU-");
  for (int k = 0; k < 16; k++)
    n += (size_t)snprintf(uuid + n, sizeof uuid - n, "%s%02x",
                          k == 4 || k == 6 || k == 8 || k == 10 ? "-" : "",
                          (unsigned char)u.bytes[k]);
  nvmlDevice_t h = NULL;
  nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
  const char *api = "nvmlDeviceGetHandleByPciBusId_v2";
  if (nvml.nvmlDeviceGetHandleByPciBusId_v2)
    r = nvml.nvmlDeviceGetHandleByPciBusId_v2(bus, &h);
  if (r != NVML_SUCCESS && nvml.nvmlDeviceGetHandleByUUID) {
    r = nvml.nvmlDeviceGetHandleByUUID(uuid, &h);
    api = "nvmlDeviceGetHandleByUUID";
  }
  if (r != NVML_SUCCESS)
    raise_nvml(L, r, api, lua_pushfstring(L, "NVML finds no device at PCI bus id %s or UUID "
                                          "%s, CUDA device %d's", bus, uuid, d->ordinal));
  return h;
}

/* cuda.system.Device(id | cuda.Device | nil): NVML's view of a CUDA device. */
static int system_device(lua_State *L)
{
  cl_check_nargs(L, 1);
  cl_Device *d = cl_push_device_arg(L, 1);   /* at 2 */
  nvml_check(L);
  cl_NvmlDevice *nd = lua_newuserdatauv(L, sizeof *nd, 1);
  nd->handle = NULL;
  nd->ordinal = d->ordinal;
  luaL_setmetatable(L, CL_NVML_DEVICE);
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, -2, 1);
  nd->handle = find_handle(L, d);
  return 1;
}

/* --- cuda.system's functions ------------------------------------------------ */

static int system_is_available(lua_State *L)
{
  char why[512];
  cl_check_nargs(L, 0);
  if (nvml_open(L, why, sizeof why)) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  lua_pushstring(L, why);
  return 2;
}

/* Push NVML's device count (1), or the reason it has none (0). */
static int read_count(lua_State *L)
{
  unsigned int n = 0;
  nvmlReturn_t r = nvml.nvmlDeviceGetCount_v2(&n);
  if (r != NVML_SUCCESS)
    return failed(L, "nvmlDeviceGetCount_v2", r);
  return push_reading(L, "nvmlDeviceGetCount_v2", n, &count_range);
}

/* device_count(): 0 without NVML, as cuda.device_count() without a
 * driver, and where NVML cannot count */
static int system_device_count(lua_State *L)
{
  char why[512];
  cl_check_nargs(L, 0);
  if (nvml_open(L, why, sizeof why) && read_count(L))
    return 1;
  lua_pushinteger(L, 0);
  return 1;
}

/* get_num_devices(): cuda.core's name; it raises without NVML and where
 * NVML cannot count. */
static int system_get_num_devices(lua_State *L)
{
  cl_check_nargs(L, 0);
  nvml_check(L);
  return read_count(L) ? 1 : lua_error(L);
}

typedef nvmlReturn_t (*cl_NvmlVersionFn)(char *, unsigned int);

/* Push a version string of NVML's (1), or the reason (0). */
static int read_version(lua_State *L, cl_NvmlVersionFn fn, const char *name)
{
  char s[NVML_BUFFER_SIZE] = "";
  if (!fn)
    return missing(L, name);
  nvmlReturn_t r = fn(s, sizeof s);
  if (r != NVML_SUCCESS)
    return failed(L, name, r);
  push_filled(L, s, sizeof s);
  return 1;
}

static int not_a_version(lua_State *L, const char *name, int i)
{
  lua_pushfstring(L, "%s gave '%s', which is not a version", name, lua_tostring(L, i));
  return lua_error(L);
}

/* Push the numbers of the dotted version string at -1, name's, replacing
 * it: at most 8 numbers of digits only (no sign, no space: "580.65.06"
 * gives 580, 65, 6), up to the first character that does not go on with
 * one. A string that starts with no number, or a number past 9 digits,
 * is not a version: it raises. */
static int push_version_numbers(lua_State *L, const char *name)
{
  const char *s = lua_tostring(L, -1);
  int n = 0;
  while (n < 8 && isdigit((unsigned char)*s)) {
    lua_Integer v = 0;
    for (int digits = 0; isdigit((unsigned char)*s); s++, digits++) {
      if (digits == 9)
        return not_a_version(L, name, -n - 1);
      v = 10 * v + (*s - '0');
    }
    lua_pushinteger(L, v);
    n++;
    if (*s != '.')
      break;
    s++;
  }
  if (n == 0)
    return not_a_version(L, name, -1);
  lua_remove(L, -n - 1);
  return n;
}

/* get_driver_version([kernel_mode]): cuda.core's: the CUDA (user-mode)
 * driver's major, minor, patch; with kernel_mode the kernel module's
 * numbers (580, 65, 6). Raises without NVML. */
static int system_get_driver_version(lua_State *L)
{
  int kernel_mode = lua_toboolean(L, 1);
  cl_check_nargs(L, 1);
  nvml_check(L);
  if (kernel_mode) {
    if (!read_version(L, nvml.nvmlSystemGetDriverVersion, "nvmlSystemGetDriverVersion"))
      return lua_error(L);
    return push_version_numbers(L, "nvmlSystemGetDriverVersion");
  }
  int v = 0;
  if (!nvml.nvmlSystemGetCudaDriverVersion_v2) {
    missing(L, "nvmlSystemGetCudaDriverVersion_v2");
    return lua_error(L);
  }
  nvmlReturn_t r = nvml.nvmlSystemGetCudaDriverVersion_v2(&v);
  if (r != NVML_SUCCESS)
    return raise_nvml(L, r, "nvmlSystemGetCudaDriverVersion_v2", "the CUDA driver's version");
  if (!in_range(L, "nvmlSystemGetCudaDriverVersion_v2", v, &cuda_range))
    return lua_error(L);
  lua_pushinteger(L, v / 1000);
  lua_pushinteger(L, v / 10 % 100);
  lua_pushinteger(L, v % 10);
  return 3;
}

static int system_get_nvml_version(lua_State *L)
{
  cl_check_nargs(L, 0);
  nvml_check(L);
  if (!read_version(L, nvml.nvmlSystemGetNVMLVersion, "nvmlSystemGetNVMLVersion"))
    return lua_error(L);
  return push_version_numbers(L, "nvmlSystemGetNVMLVersion");
}

/* cuda.system.driver_version and .nvml_version: strings, nil without NVML. */
static int system_index(lua_State *L)
{
  char why[512];
  luaL_checktype(L, 1, LUA_TTABLE);
  const char *key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
  int driver = key && strcmp(key, "driver_version") == 0;
  if (!driver && !(key && strcmp(key, "nvml_version") == 0))
    return 0;
  if (!nvml_open(L, why, sizeof why))
    return 0;
  int ok = driver ? read_version(L, nvml.nvmlSystemGetDriverVersion, "nvmlSystemGetDriverVersion")
                  : read_version(L, nvml.nvmlSystemGetNVMLVersion, "nvmlSystemGetNVMLVersion");
  if (!ok)
    lua_pushnil(L);
  return 1;
}

void cl_open_nvml(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__tostring", nvml_device_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"clock", nvml_device_clock},
    {"max_clock", nvml_device_max_clock},
    {"application_clock", nvml_device_application_clock},
    {"clock_event_reasons", nvml_device_clock_event_reasons},
    {"get", nvml_device_get},
    {NULL, NULL}
  };
  static const luaL_Reg functions[] = {
    {"is_available", system_is_available},
    {"device_count", system_device_count},
    {"get_num_devices", system_get_num_devices},
    {"get_driver_version", system_get_driver_version},
    {"get_nvml_version", system_get_nvml_version},
    {"Device", system_device},
    {NULL, NULL}
  };
  cl_new_type(L, CL_NVML_DEVICE, meta, methods, nvml_device_fields);
  lua_createtable(L, 0, 8);
  cl_setfuncs(L, functions);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, system_index);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
  lua_setfield(L, -2, "system");
}
