/* SPDX-License-Identifier: MIT */
/* device.c: initialization, error names, devices and their primary contexts.
 *
 * FAKECUDA_DEVICES (default 1) devices, each a "Fake CUDA Device" of compute
 * capability 9.0 with H100-like attributes, so scripts size their work the
 * way they would on a real GPU. They reach pageable host memory
 * (pageable_memory_access) only with FAKECUDA_PAGEABLE_MEMORY_ACCESS=1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

static int initialized;
static struct CUctx_st contexts[FAKE_MAX_DEVICES];
static int primary_refs[FAKE_MAX_DEVICES];
static __thread CUcontext current;
static struct CUctx_st destroyed;   /* current after its green context went */

void fake_context_destroyed(CUcontext ctx)
{
  if (current == ctx)
    current = &destroyed;
}

CUcontext fake_ctx_current(void) { return current; }

CUresult fake_ctx_usable(void)
{
  return current == &destroyed ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_SUCCESS;
}

int fake_initialized(void) { return initialized; }

int fake_device_count(void)
{
  const char *env = getenv("FAKECUDA_DEVICES");
  int n = env && *env ? atoi(env) : 1;
  return n < 0 ? 0 : n > FAKE_MAX_DEVICES ? FAKE_MAX_DEVICES : n;
}

int fake_bad_device(CUdevice d) { return d < 0 || d >= fake_device_count(); }

CUresult fake_cuInit(unsigned int flags)
{
  FAKE_ENTER(cuInit);
  if (flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  initialized = 1;
  fake_host_init();
  return fake_device_count() ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult fake_cuDriverGetVersion(int *version)
{
  FAKE_ENTER(cuDriverGetVersion);
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

/* The names cudalua may see; others are "CUDA_ERROR_<number>"-less unknowns. */
static const struct { CUresult r; const char *name, *text; } errors[] = {
  {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
  {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
  {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
  {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
  {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
  {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
  {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
  {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
   "no kernel image is available for execution on the device"},
  {CUDA_ERROR_INVALID_CLUSTER_SIZE, "CUDA_ERROR_INVALID_CLUSTER_SIZE", "invalid cluster size"},
  {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
   "operation not permitted when stream is capturing"},
  {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
  {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
  {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
  {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
  {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
  {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
  {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
   "an illegal memory access was encountered"},
  {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
  {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
   "operation failed due to a previous error during capture"},
  {CUDA_ERROR_STREAM_CAPTURE_MERGE, "CUDA_ERROR_STREAM_CAPTURE_MERGE",
   "operation would result in a merge of separate capture sequences"},
  {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation is not permitted"},
  {CUDA_ERROR_INVALID_RESOURCE_TYPE, "CUDA_ERROR_INVALID_RESOURCE_TYPE",
   "invalid resource type"},
  {CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION",
   "invalid resource configuration"},
  {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM",
   "OS call failed or operation not supported on this OS"},
  {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
   "part or all of the requested memory range is already mapped"},
  {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
   "pointer does not correspond to a registered memory region"},
  {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int error_index(CUresult r)
{
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].r == r)
      return (int)i;
  return -1;
}

CUresult fake_cuGetErrorName(CUresult r, const char **name)
{
  FAKE_ENTER(cuGetErrorName);
  int i = error_index(r);
  *name = i < 0 ? NULL : errors[i].name;
  return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult fake_cuGetErrorString(CUresult r, const char **text)
{
  FAKE_ENTER(cuGetErrorString);
  int i = error_index(r);
  *text = i < 0 ? NULL : errors[i].text;
  return i < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetCount(int *count)
{
  FAKE_ENTER(cuDeviceGetCount);
  *count = fake_device_count();
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGet(CUdevice *d, int ordinal)
{
  FAKE_ENTER(cuDeviceGet);
  if (fake_bad_device(ordinal))
    return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

/* Fake devices share the host's memory: every pair can access each other. */
CUresult fake_cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer)
{
  FAKE_ENTER(cuDeviceCanAccessPeer);
  if (fake_bad_device(d) || fake_bad_device(peer))
    return CUDA_ERROR_INVALID_DEVICE;
  *can = d != peer;   /* as the driver: a device is not its own peer */
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetName(char *name, int len, CUdevice d)
{
  FAKE_ENTER(cuDeviceGetName);
  if (fake_bad_device(d))
    return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "Fake CUDA Device %d", d);
  return CUDA_SUCCESS;
}

static int attribute(CUdevice_attribute a)
{
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 48 * 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 227 * 1024;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 228 * 1024;
  case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 64 * 1024;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
  case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
  case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 50 * 1024 * 1024;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return FAKE_SM_COUNT;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
  case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
  case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
  case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18;
  case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return 0;   /* one host NUMA node: 0 */
  case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
  case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:   /* FAKECUDA_PAGEABLE_MEMORY_ACCESS=1: HMM */
    return getenv("FAKECUDA_PAGEABLE_MEMORY_ACCESS") && atoi(getenv("FAKECUDA_PAGEABLE_MEMORY_ACCESS")) == 1;
  default: return 1;   /* every capability flag: supported */
  }
}

CUresult fake_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
  FAKE_ENTER(cuDeviceGetAttribute);
  if (fake_bad_device(d))
    return CUDA_ERROR_INVALID_DEVICE;
  *v = a == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID ? attribute(a) + d : attribute(a);
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceTotalMem(size_t *bytes, CUdevice d)
{
  FAKE_ENTER(cuDeviceTotalMem);
  if (fake_bad_device(d))
    return CUDA_ERROR_INVALID_DEVICE;
  *bytes = FAKE_TOTAL_MEM;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetUuid(CUuuid *uuid, CUdevice d)
{
  FAKE_ENTER(cuDeviceGetUuid);
  if (fake_bad_device(d))
    return CUDA_ERROR_INVALID_DEVICE;
  for (int i = 0; i < 16; i++)
    uuid->bytes[i] = (char)(0xf0 + i + d);
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetPCIBusId(char *bus, int len, CUdevice d)
{
  FAKE_ENTER(cuDeviceGetPCIBusId);
  if (fake_bad_device(d))
    return CUDA_ERROR_INVALID_DEVICE;
  snprintf(bus, (size_t)len, "00000000:%02X:00.0", attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) + d);
  return CUDA_SUCCESS;
}

CUresult fake_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d)
{
  FAKE_ENTER(cuDevicePrimaryCtxRetain);
  if (fake_bad_device(d))
    return CUDA_ERROR_INVALID_DEVICE;
  contexts[d].ordinal = d;
  primary_refs[d]++;
  *ctx = &contexts[d];
  return CUDA_SUCCESS;
}

CUresult fake_cuDevicePrimaryCtxRelease(CUdevice d)
{
  FAKE_ENTER(cuDevicePrimaryCtxRelease);
  if (fake_bad_device(d) || primary_refs[d] == 0)
    return CUDA_ERROR_INVALID_CONTEXT;
  primary_refs[d]--;
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxSetCurrent(CUcontext ctx)
{
  FAKE_ENTER(cuCtxSetCurrent);
  int primary = ctx >= contexts && ctx < contexts + FAKE_MAX_DEVICES;
  if (ctx && !(primary ? primary_refs[ctx->ordinal] > 0 : fake_green_ctx_live(ctx)))
    return CUDA_ERROR_INVALID_CONTEXT;
  current = ctx;
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxSynchronize(void)
{
  FAKE_ENTER(cuCtxSynchronize);
  fake_capture_unsafe();
  CUresult r = fake_ctx_usable();
  if (r == CUDA_SUCCESS)
    fake_host_wait();
  return r;
}

CUresult fake_cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
  FAKE_ENTER(cuCtxGetStreamPriorityRange);
  *least = 0;
  *greatest = -5;
  return CUDA_SUCCESS;
}
