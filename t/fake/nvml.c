/* SPDX-License-Identifier: MIT */
/* nvml.c: a fake NVML for the fake driver's devices.
 *
 * Built into the fake driver's .so (tests point CUDALUA_LIBNVML at it, as
 * t/fake.lua does), where the Lua module fakecuda steers it; and once more,
 * with FAKE_NVML_OLD, into fakenvml_old.so: an older NVML that lacks some
 * entry points (clock-event reasons under their old name, the old
 * temperature call, no power reading, no MIG mode, no NVLink, no NVML
 * version, no lookup by PCI bus id), for the nil-with-reason paths.
 *
 * Its devices are the fake driver's (FAKECUDA_DEVICES of them), with the
 * PCI bus ids and UUIDs device.c gives, and H100-like readings that differ
 * per device (d is the ordinal): temperature 40 + d C, power 75 + d W of
 * 700 W, utilization 3 + d % and 1 %, SM and graphics clocks 1980 MHz
 * (maximum 1980, application 1755), memory 2619 MHz, video 1545 MHz, a
 * 5120-bit bus, PCIe generation 4 x16 of 5 x16, ECC and persistence on,
 * compute mode default, MIG off, 18 NVLinks of which the last is down.
 *
 * Knobs, read at nvmlInit_v2 from the environment and set any time from
 * Lua (fakecuda.nvml_*, lua.c lists them):
 *   FAKENVML_THROTTLE="mhz[:calls[:mask]]"  the SM and graphics clocks read
 *     mhz, and the clock-event reasons say mask (default 0x20,
 *     sw_thermal_slowdown), for the next `calls` reads of a current SM or
 *     graphics clock (0 or none: until cleared)
 *   FAKENVML_INIT_FAIL=code                 nvmlInit_v2 fails with code
 *   FAKENVML_HOSTILE=mode                   a hostile NVML (fakecuda.nvml_hostile):
 *     strings[:filler]     every string fills its whole buffer, no NUL: the
 *                          true string, then filler (default "~") over and over
 *     fail[:nth[:code]]    the nth call from now (0 or none: every call) of
 *                          any entry point but nvmlShutdown fails with code
 *                          (default 999, NVML_ERROR_UNKNOWN)
 *     absurd[:value[:width]]  every number it reports (clocks, link
 *                          generations, temperatures, power, counts, modes,
 *                          states) is value (default UINT_MAX; signed ones
 *                          get its bits), and every width (the PCIe link's,
 *                          the memory bus's) is width (default: value) */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
struct nvmlDevice_st { int ordinal; };
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct { char busIdLegacy[16]; unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
                 char busId[32]; } nvmlPciInfo_t;
typedef struct { unsigned gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned version; int sensorType; int temperature; } nvmlTemperature_t;

enum { OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6,
       INSUFFICIENT_SIZE = 7, ARGUMENT_VERSION_MISMATCH = 25 };
#define MAX_DEVICES 8
#define NVLINKS 18

/* The prototypes, for -Wmissing-prototypes and to keep the fake honest. */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t r);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n);
nvmlReturn_t nvmlSystemGetDriverVersion(char *s, unsigned n);
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned *index);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *s, unsigned n);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *s, unsigned n);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, int kind, unsigned *mhz);
nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t dev, int kind, unsigned *mhz);
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t dev, int kind, unsigned *mhz);
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev, unsigned long long *m);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, int sensor, unsigned *c);
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t dev, unsigned *mw);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *u);
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t dev, unsigned *v);
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t dev, unsigned *v);
nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t dev, unsigned *v);
nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t dev, unsigned *v);
nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t dev, unsigned *bits);
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t dev, int *current, int *pending);
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t dev, int *mode);
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t dev, int *mode);
#ifndef FAKE_NVML_OLD
nvmlReturn_t nvmlSystemGetNVMLVersion(char *s, unsigned n);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *dev);
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev, unsigned long long *m);
nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_t *t);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned *mw);
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned *current, unsigned *pending);
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned link, int *active);
#endif

/* --- state and knobs -------------------------------------------------------- */

static struct nvmlDevice_st devices[MAX_DEVICES];
static int refs;                          /* nvmlInit_v2 calls not yet shut down */
static int env_read;
static unsigned throttle_mhz;             /* 0: not throttled */
static long throttle_calls;               /* reads left; 0: until cleared */
static unsigned long long throttle_mask;
static int init_failure;                  /* nvmlInit_v2's next result */
static struct { char name[64]; long nth; int code; } injected;
static enum { CALM, STRINGS, FAILING, ABSURD } hostile;
static char filler[128] = "~";            /* STRINGS: what follows the true string */
static int fail_every;                    /* FAILING: every call, else the countdown's */
static long fail_countdown;
static int fail_code;
static unsigned absurd, absurd_width;     /* ABSURD: every number and width reported */
static long ncalls;                       /* entry point calls, for fakecuda.nvml_calls */
#define NSIZES 8
static struct { const char *api; unsigned size; } sizes[NSIZES];   /* string buffers given */

void fake_nvml_throttle(unsigned mhz, long calls, unsigned long long mask);
void fake_nvml_fail(const char *name, long nth, int code);
void fake_nvml_fail_init(int code);
int fake_nvml_refs(void);
void fake_nvml_calm(void);
int fake_nvml_hostile(const char *mode, const char *arg1, const char *arg2);

void fake_nvml_throttle(unsigned mhz, long calls, unsigned long long mask)
{
  throttle_mhz = mhz;
  throttle_calls = mhz ? calls : 0;
  throttle_mask = mhz ? mask : 0;
}

/* The nth call (from now) of the entry point `name` fails with code. */
void fake_nvml_fail(const char *name, long nth, int code)
{
  snprintf(injected.name, sizeof injected.name, "%s", name);
  injected.nth = nth;
  injected.code = code;
}

void fake_nvml_fail_init(int code) { init_failure = code; }
int fake_nvml_refs(void) { return refs; }

void fake_nvml_calm(void) { hostile = CALM; }

/* Set a hostile mode (the top says which): 0, or -1 for a mode or an
 * argument it does not know (the mode is left as it was). */
int fake_nvml_hostile(const char *mode, const char *arg1, const char *arg2)
{
  char *end = NULL;
  if (strcmp(mode, "strings") == 0) {
    if (arg1 && (!*arg1 || strlen(arg1) >= sizeof filler))
      return -1;
    snprintf(filler, sizeof filler, "%s", arg1 ? arg1 : "~");
    hostile = STRINGS;
  } else if (strcmp(mode, "fail") == 0) {
    long nth = arg1 ? strtol(arg1, &end, 0) : 0;
    long code = arg2 ? strtol(arg2, NULL, 0) : 999;
    if ((arg1 && *end) || nth < 0 || code == OK || code < INT_MIN || code > INT_MAX)
      return -1;
    fail_every = nth == 0;
    fail_countdown = nth;
    fail_code = (int)code;
    hostile = FAILING;
  } else if (strcmp(mode, "absurd") == 0) {
    unsigned long long v = arg1 ? strtoull(arg1, &end, 0) : UINT_MAX;
    if ((arg1 && *end) || v > UINT_MAX)
      return -1;
    unsigned long long w = arg2 ? strtoull(arg2, &end, 0) : v;
    if ((arg2 && *end) || w > UINT_MAX)
      return -1;
    absurd = (unsigned)v;
    absurd_width = (unsigned)w;
    hostile = ABSURD;
  } else
    return -1;
  return 0;
}

/* FAKENVML_HOSTILE="mode[:arg1[:arg2]]" */
static void read_hostile(const char *spec)
{
  char copy[256], *arg1, *arg2 = NULL;
  snprintf(copy, sizeof copy, "%s", spec);
  if ((arg1 = strchr(copy, ':')) != NULL) {
    *arg1++ = '\0';
    if ((arg2 = strchr(arg1, ':')) != NULL)
      *arg2++ = '\0';
  }
  if (fake_nvml_hostile(copy, arg1, arg2) != 0) {
    fprintf(stderr, "fake NVML: FAKENVML_HOSTILE=%s is not a hostile mode\n", spec);
    abort();
  }
}

/* A number the fake reports: its true value, or the absurd one. */
static unsigned reading(unsigned value) { return hostile == ABSURD ? absurd : value; }
static int signed_reading(int value) { return hostile == ABSURD ? (int)absurd : value; }
static unsigned width_reading(unsigned value) { return hostile == ABSURD ? absurd_width : value; }

static void read_env(void)
{
  const char *t = getenv("FAKENVML_THROTTLE"), *f = getenv("FAKENVML_INIT_FAIL");
  const char *h = getenv("FAKENVML_HOSTILE");
  env_read = 1;
  if (h && *h)
    read_hostile(h);
  if (t && *t) {
    unsigned mhz = 0;
    long calls = 0;
    unsigned long long mask = 0x20;
    sscanf(t, "%u:%ld:%lli", &mhz, &calls, &mask);
    fake_nvml_throttle(mhz, calls, mask);
  }
  if (f && *f)
    init_failure = atoi(f);
}

static int device_count(void)
{
  const char *env = getenv("FAKECUDA_DEVICES");   /* as the fake driver's device.c */
  int n = env && *env ? atoi(env) : 1;
  return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

/* Every entry point but the error string starts here: an injected failure,
 * NVML_ERROR_UNINITIALIZED outside nvmlInit_v2 .. nvmlShutdown, or the
 * hostile mode's failure. */
static int enter(const char *name)
{
  ncalls++;
  if (injected.nth > 0 && strcmp(injected.name, name) == 0 && --injected.nth == 0)
    return injected.code;
  if (refs <= 0)
    return UNINITIALIZED;
  if (hostile == FAILING && strcmp(name, "nvmlShutdown") != 0 &&
      (fail_every || (fail_countdown > 0 && --fail_countdown == 0)))
    return fail_code;
  return OK;
}
#define ENTER(name)                       \
  do {                                    \
    int r_ = enter(#name);                \
    if (r_ != OK)                         \
      return r_;                          \
  } while (0)
/* ... and a device entry point checks its handle. */
#define ENTER_DEVICE(name, dev)                                                   \
  do {                                                                            \
    ENTER(name);                                                                  \
    if (!(dev) || (dev) < devices || (dev) >= devices + device_count())           \
      return INVALID_ARGUMENT;                                                    \
  } while (0)

/* Remember the size of the buffer api was given (fakecuda.nvml_string_size). */
static void note_size(const char *api, unsigned n)
{
  for (int k = 0; k < NSIZES; k++)
    if (!sizes[k].api || strcmp(sizes[k].api, api) == 0) {
      sizes[k].api = api;
      sizes[k].size = n;
      return;
    }
}

/* The hostile string: all n bytes of dst, src and then the filler over and
 * over, no NUL. */
static void fill_hostile(char *dst, size_t n, const char *src)
{
  size_t len = strlen(src), flen = strlen(filler);
  for (size_t k = 0; k < n; k++)
    dst[k] = k < len ? src[k] : filler[(k - len) % flen];
}

static int copy_string(const char *api, char *dst, unsigned n, const char *src)
{
  note_size(api, n);
  if (dst && hostile == STRINGS) {
    fill_hostile(dst, n, src);
    return OK;
  }
  if (!dst || strlen(src) >= n)
    return INSUFFICIENT_SIZE;
  strcpy(dst, src);
  return OK;
}

/* --- the library ---------------------------------------------------------- */

nvmlReturn_t nvmlInit_v2(void)
{
  if (!env_read)
    read_env();
  if (init_failure)
    return init_failure;
  for (int d = 0; d < MAX_DEVICES; d++)
    devices[d].ordinal = d;
  refs++;
  return OK;
}

nvmlReturn_t nvmlShutdown(void)
{
  ENTER(nvmlShutdown);
  refs--;
  return OK;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
  switch (r) {
  case OK: return "Success";
  case UNINITIALIZED: return "Uninitialized";
  case INVALID_ARGUMENT: return "Invalid Argument";
  case NOT_SUPPORTED: return "Not Supported";
  case NOT_FOUND: return "Not Found";
  case INSUFFICIENT_SIZE: return "Insufficient Size";
  case 9: return "Driver Not Loaded";
  case 15: return "GPU is lost";
  case ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
  default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n)
{
  ENTER(nvmlDeviceGetCount_v2);
  *n = reading((unsigned)device_count());
  return OK;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *s, unsigned n)
{
  ENTER(nvmlSystemGetDriverVersion);
  return copy_string(__func__, s, n, "580.65.06");
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
  ENTER(nvmlSystemGetCudaDriverVersion_v2);
  *v = signed_reading(13010);
  return OK;
}

/* device.c's cuDeviceGetUuid: byte k of device d is 0xf0 + k + d. */
static void format_uuid(int d, char *s, size_t n)
{
  size_t at = (size_t)snprintf(s, n, "GPU-");
  for (int k = 0; k < 16; k++)
    at += (size_t)snprintf(s + at, n - at, "%s%02x", k == 4 || k == 6 || k == 8 || k == 10 ? "-" : "",
                           (0xf0 + k + d) & 0xff);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev)
{
  ENTER(nvmlDeviceGetHandleByUUID);
  char s[64];
  for (int d = 0; d < device_count(); d++) {
    format_uuid(d, s, sizeof s);
    if (strcmp(s, uuid) == 0) {
      *dev = &devices[d];
      return OK;
    }
  }
  return NOT_FOUND;
}

/* device.c's cuDeviceGetPCIBusId: bus 0x18 + d, domain 0, device 0. */
#define BUS(d) (0x18 + (d))

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned *index)
{
  ENTER_DEVICE(nvmlDeviceGetIndex, dev);
  *index = reading((unsigned)dev->ordinal);
  return OK;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t dev, nvmlPciInfo_t *pci)
{
  ENTER_DEVICE(nvmlDeviceGetPciInfo_v3, dev);
  memset(pci, 0, sizeof *pci);
  pci->bus = (unsigned)BUS(dev->ordinal);
  pci->pciDeviceId = 0x233510de;
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", pci->bus);
  snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", pci->bus);
  note_size(__func__, sizeof pci->busId);
  if (hostile == STRINGS) {
    char bus[sizeof pci->busId];
    memcpy(bus, pci->busId, sizeof bus);
    fill_hostile(pci->busId, sizeof pci->busId, bus);
    memcpy(bus, pci->busIdLegacy, sizeof pci->busIdLegacy);
    fill_hostile(pci->busIdLegacy, sizeof pci->busIdLegacy, bus);
  }
  return OK;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *s, unsigned n)
{
  ENTER_DEVICE(nvmlDeviceGetUUID, dev);
  char uuid[64];
  format_uuid(dev->ordinal, uuid, sizeof uuid);
  return copy_string(__func__, s, n, uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *s, unsigned n)
{
  ENTER_DEVICE(nvmlDeviceGetName, dev);
  char name[64];
  snprintf(name, sizeof name, "Fake CUDA Device %d", dev->ordinal);   /* as cuDeviceGetName */
  return copy_string(__func__, s, n, name);
}

/* Clocks by nvmlClockType_t: graphics, SM, memory, video. */
static const unsigned max_clocks[4] = {1980, 1980, 2619, 1545};
static const unsigned app_clocks[4] = {1755, 1755, 2619, 1545};

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, int kind, unsigned *mhz)
{
  ENTER_DEVICE(nvmlDeviceGetClockInfo, dev);
  if (kind < 0 || kind > 3)
    return INVALID_ARGUMENT;
  *mhz = max_clocks[kind];
  if (throttle_mhz && kind <= 1) {   /* graphics and SM clocks */
    *mhz = throttle_mhz;
    if (throttle_calls > 0 && --throttle_calls == 0)
      fake_nvml_throttle(0, 0, 0);
  }
  *mhz = reading(*mhz);
  return OK;
}

nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t dev, int kind, unsigned *mhz)
{
  ENTER_DEVICE(nvmlDeviceGetApplicationsClock, dev);
  if (kind < 0 || kind > 3)
    return INVALID_ARGUMENT;
  *mhz = reading(app_clocks[kind]);
  return OK;
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t dev, int kind, unsigned *mhz)
{
  ENTER_DEVICE(nvmlDeviceGetMaxClockInfo, dev);
  if (kind < 0 || kind > 3)
    return INVALID_ARGUMENT;
  *mhz = reading(max_clocks[kind]);
  return OK;
}

static nvmlReturn_t reasons(nvmlDevice_t dev, unsigned long long *m)
{
  (void)dev;
  *m = hostile == ABSURD ? (unsigned long long)absurd << 32 | absurd : throttle_mask;
  return OK;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t dev, unsigned long long *m)
{
  ENTER_DEVICE(nvmlDeviceGetCurrentClocksThrottleReasons, dev);
  return reasons(dev, m);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, int sensor, unsigned *c)
{
  ENTER_DEVICE(nvmlDeviceGetTemperature, dev);
  if (sensor != 0)
    return INVALID_ARGUMENT;
  *c = reading(40u + (unsigned)dev->ordinal);
  return OK;
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t dev, unsigned *mw)
{
  ENTER_DEVICE(nvmlDeviceGetEnforcedPowerLimit, dev);
  *mw = reading(700000);
  return OK;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *u)
{
  ENTER_DEVICE(nvmlDeviceGetUtilizationRates, dev);
  u->gpu = reading(3u + (unsigned)dev->ordinal);
  u->memory = reading(1);
  return OK;
}

#define UINT_READING(name, value, reading)        \
  nvmlReturn_t name(nvmlDevice_t dev, unsigned *v) \
  {                                               \
    ENTER_DEVICE(name, dev);                      \
    *v = reading(value);                          \
    return OK;                                    \
  }
UINT_READING(nvmlDeviceGetCurrPcieLinkGeneration, 4, reading)
UINT_READING(nvmlDeviceGetCurrPcieLinkWidth, 16, width_reading)
UINT_READING(nvmlDeviceGetMaxPcieLinkGeneration, 5, reading)
UINT_READING(nvmlDeviceGetMaxPcieLinkWidth, 16, width_reading)
UINT_READING(nvmlDeviceGetMemoryBusWidth, 5120, width_reading)

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t dev, int *current, int *pending)
{
  ENTER_DEVICE(nvmlDeviceGetEccMode, dev);
  *current = *pending = signed_reading(1);
  return OK;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t dev, int *mode)
{
  ENTER_DEVICE(nvmlDeviceGetPersistenceMode, dev);
  *mode = signed_reading(1);
  return OK;
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t dev, int *mode)
{
  ENTER_DEVICE(nvmlDeviceGetComputeMode, dev);
  *mode = signed_reading(0);
  return OK;
}

/* --- what the older NVML lacks ------------------------------------------------ */
#ifndef FAKE_NVML_OLD

nvmlReturn_t nvmlSystemGetNVMLVersion(char *s, unsigned n)
{
  ENTER(nvmlSystemGetNVMLVersion);
  return copy_string(__func__, s, n, "13.580.65.06");
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *dev)
{
  ENTER(nvmlDeviceGetHandleByPciBusId_v2);
  unsigned domain = 0, b = 0, device = 0, function = 0;
  if (!bus || sscanf(bus, "%x:%x:%x.%x", &domain, &b, &device, &function) != 4)
    return INVALID_ARGUMENT;
  for (int d = 0; d < device_count(); d++)
    if (domain == 0 && b == (unsigned)BUS(d) && device == 0 && function == 0) {
      *dev = &devices[d];
      return OK;
    }
  return NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev, unsigned long long *m)
{
  ENTER_DEVICE(nvmlDeviceGetCurrentClocksEventReasons, dev);
  return reasons(dev, m);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_t *t)
{
  ENTER_DEVICE(nvmlDeviceGetTemperatureV, dev);
  if (t->version != (sizeof *t | 1u << 24))
    return ARGUMENT_VERSION_MISMATCH;
  if (t->sensorType != 0)
    return INVALID_ARGUMENT;
  t->temperature = signed_reading(40 + dev->ordinal);
  return OK;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned *mw)
{
  ENTER_DEVICE(nvmlDeviceGetPowerUsage, dev);
  *mw = reading(75000u + 1000u * (unsigned)dev->ordinal);
  return OK;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t dev, unsigned *current, unsigned *pending)
{
  ENTER_DEVICE(nvmlDeviceGetMigMode, dev);
  *current = *pending = reading(0);
  return OK;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned link, int *active)
{
  ENTER_DEVICE(nvmlDeviceGetNvLinkState, dev);
  if (link >= NVLINKS)
    return INVALID_ARGUMENT;
  *active = signed_reading(link != NVLINKS - 1);
  return OK;
}

/* --- fakecuda.nvml_* (the Lua module is lua.c's) ---------------------------- */

#include <lauxlib.h>
#include <lua.h>

void fake_nvml_register(lua_State *L);

static const struct { const char *word; unsigned long long bit; } words[] = {
  {"gpu_idle", 0x1}, {"applications_clocks_setting", 0x2}, {"sw_power_cap", 0x4},
  {"hw_slowdown", 0x8}, {"sync_boost", 0x10}, {"sw_thermal_slowdown", 0x20},
  {"hw_thermal_slowdown", 0x40}, {"hw_power_brake_slowdown", 0x80},
  {"display_clock_setting", 0x100},
};

static unsigned long long word_bit(lua_State *L, int arg, const char *word)
{
  for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
    if (strcmp(words[k].word, word) == 0)
      return words[k].bit;
  return (unsigned long long)luaL_argerror(L, arg, lua_pushfstring(L, "unknown reason '%s'", word));
}

/* fakecuda.nvml_throttle(mhz [, calls [, reasons]]): see the top; reasons
 * is a mask (an integer), a word or a list of words (default
 * "sw_thermal_slowdown"). nvml_throttle() clears it. */
static int nvml_throttle(lua_State *L)
{
  if (lua_isnoneornil(L, 1)) {
    fake_nvml_throttle(0, 0, 0);
    return 0;
  }
  lua_Integer mhz = luaL_checkinteger(L, 1), calls = luaL_optinteger(L, 2, 0);
  luaL_argcheck(L, mhz > 0 && mhz < 100000, 1, "mhz must be 1 to 99999");
  luaL_argcheck(L, calls >= 0, 2, "calls must be >= 0");
  unsigned long long mask = 0x20;
  if (lua_type(L, 3) == LUA_TNUMBER)
    mask = (unsigned long long)luaL_checkinteger(L, 3);
  else if (lua_type(L, 3) == LUA_TSTRING)
    mask = word_bit(L, 3, lua_tostring(L, 3));
  else if (lua_istable(L, 3)) {
    mask = 0;
    for (lua_Integer k = 1; lua_rawgeti(L, 3, k) == LUA_TSTRING; k++, lua_pop(L, 1))
      mask |= word_bit(L, 3, lua_tostring(L, -1));
  }
  fake_nvml_throttle((unsigned)mhz, (long)calls, mask);
  return 0;
}

/* fakecuda.nvml_fail(name [, nth = 1 [, code = 3, NOT_SUPPORTED]]) */
static int nvml_fail(lua_State *L)
{
  const char *name = luaL_checkstring(L, 1);
  lua_Integer nth = luaL_optinteger(L, 2, 1), code = luaL_optinteger(L, 3, NOT_SUPPORTED);
  luaL_argcheck(L, nth > 0, 2, "nth must be > 0");
  luaL_argcheck(L, code > 0 && code < 1000, 3, "an NVML error code expected");
  fake_nvml_fail(name, (long)nth, (int)code);
  return 0;
}

/* fakecuda.nvml_fail_init(code): nvmlInit_v2 fails with code from now on
 * (0 lets it work again). */
static int nvml_fail_init(lua_State *L)
{
  fake_nvml_fail_init((int)luaL_checkinteger(L, 1));
  return 0;
}

/* fakecuda.nvml_hostile(mode [, arg1 [, arg2]]): FAKENVML_HOSTILE's modes
 * (the top), their arguments as strings or numbers; nvml_hostile() calms it. */
static int nvml_hostile(lua_State *L)
{
  if (lua_isnoneornil(L, 1)) {
    fake_nvml_calm();
    return 0;
  }
  const char *mode = luaL_checkstring(L, 1);
  const char *arg1 = luaL_optstring(L, 2, NULL), *arg2 = luaL_optstring(L, 3, NULL);
  luaL_argcheck(L, !arg1 || strlen(arg1) == lua_rawlen(L, 2), 2, "no NUL bytes");
  if (fake_nvml_hostile(mode, arg1, arg2) != 0)
    return luaL_error(L, "fakecuda.nvml_hostile: not a hostile mode: %s %s %s", mode,
                      arg1 ? arg1 : "", arg2 ? arg2 : "");
  return 0;
}

/* fakecuda.nvml_calls(): entry point calls so far (every one, failed or not) */
static int nvml_calls(lua_State *L)
{
  lua_pushinteger(L, ncalls);
  return 1;
}

/* fakecuda.nvml_string_size(api): the size of the buffer the last call of
 * api (nvmlDeviceGetName, ...; nvmlDeviceGetPciInfo_v3: its busId) was
 * given; nil before its first call. */
static int nvml_string_size(lua_State *L)
{
  const char *api = luaL_checkstring(L, 1);
  for (int k = 0; k < NSIZES && sizes[k].api; k++)
    if (strcmp(sizes[k].api, api) == 0) {
      lua_pushinteger(L, sizes[k].size);
      return 1;
    }
  return 0;
}

/* fakecuda.nvml_refs(): nvmlInit_v2 calls not shut down */
static int nvml_refs(lua_State *L)
{
  lua_pushinteger(L, fake_nvml_refs());
  return 1;
}

void fake_nvml_register(lua_State *L)
{
  static const luaL_Reg functions[] = {
    {"nvml_throttle", nvml_throttle}, {"nvml_fail", nvml_fail},
    {"nvml_fail_init", nvml_fail_init}, {"nvml_refs", nvml_refs},
    {"nvml_hostile", nvml_hostile}, {"nvml_calls", nvml_calls},
    {"nvml_string_size", nvml_string_size},
    {NULL, NULL}
  };
  luaL_setfuncs(L, functions, 0);
}
#endif
