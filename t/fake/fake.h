/* fake.h: the fake CUDA driver's shared state and helpers.
 *
 * The fake is a libcuda stand-in for machines without a GPU: cudalua asks it
 * for entry points through cuGetProcAddress_v2 (entry.c) and gets host
 * emulations with cuda.h's exact prototypes. Everything runs synchronously at
 * issue time, on the calling thread: there are no driver threads.
 *
 * The driver's handle types are pointers to structs that cuda.h declares but
 * never defines (struct CUstream_st ...); the fake defines them here. */
#ifndef FAKECUDA_FAKE_H
#define FAKECUDA_FAKE_H

#include <stddef.h>
#include <cuda.h>

#define FAKE_MAX_DEVICES 8
#define FAKE_MAX_PARAMS 80   /* more than cudalua's 64, to test its limit */

/* What the live-object counters track, for leak checks from Lua. */
enum fake_Kind { FAKE_ALLOC, FAKE_STREAM, FAKE_EVENT, FAKE_LIBRARY, FAKE_GRAPH, FAKE_POOL,
                 FAKE_NKINDS };
extern const char *const fake_kind_names[FAKE_NKINDS];
extern long fake_live[FAKE_NKINDS];

/* Keep a record of every driver object reachable from here while it is
 * live: a release cudalua could not make (an injected failure) then leaks
 * it the way a GPU would, without LeakSanitizer calling it the fake's. */
void fake_keep(void *object);
void fake_unkeep(void *object);

/* Count a call of an entry point and return the failure injected for it, if
 * any: every entry point starts with FAKE_ENTER(its cuda.h name). */
CUresult fake_enter(const char *name);
#define FAKE_ENTER(name)                 \
  do {                                   \
    CUresult injected_ = fake_enter(#name); \
    if (injected_ != CUDA_SUCCESS)       \
      return injected_;                  \
  } while (0)

/* inject.c */
void fake_fail(const char *name, long nth, CUresult r);
void fake_reset(void);
long fake_calls(const char *name);
void fake_fail_from_env(void);

/* device.c */
int fake_initialized(void);
int fake_device_count(void);
struct CUctx_st { int ordinal; };
#define FAKE_TOTAL_MEM ((size_t)16 << 30)

/* memory.c: every allocation cudalua gets is a malloc'd host block. */
size_t fake_allocated_bytes(void);

/* Work issued to a stream: run at once, or recorded while it captures. */
enum fake_WorkKind { WORK_KERNEL, WORK_MEMCPY, WORK_MEMSET, WORK_EVENT };
struct fake_Work {
  enum fake_WorkKind kind;
  union {
    struct { CUfunction fn; unsigned char params[FAKE_MAX_PARAMS][8]; } kernel;
    struct { void *dst; const void *src; size_t n; } memcpy;
    struct { void *dst; unsigned value; unsigned elem; size_t count; } memset;
    struct { CUevent ev; } event;
  } u;
};

/* stream.c */
CUresult fake_submit(CUstream s, const struct fake_Work *w);
void fake_run(const struct fake_Work *w);
void fake_event_stamp(CUevent ev);
int fake_stream_valid(CUstream s);

void fake_memset_run(void *dst, unsigned value, unsigned elem, size_t count);

/* library.c: what a launch needs to know of a function */
const char *fake_function_name(CUfunction fn);
int fake_function_nparams(CUfunction fn);
CUresult fake_function_param(CUfunction fn, size_t i, size_t *offset, size_t *size);
int fake_function_shmem_limit(CUfunction fn);

/* launch.c */
void fake_kernel_run(CUfunction fn, unsigned char (*params)[8]);

/* entry.c: the i-th entry point's name, NULL past the last */
const char *fake_entry_name(size_t i);

/* Every entry point the fake implements, by its name in cuda.h. */
#define FAKE_API(X)                                                           \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)       \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)                       \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDeviceGetUuid)              \
  X(cuDeviceGetPCIBusId) X(cuDevicePrimaryCtxRetain)                          \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize)         \
  X(cuCtxGetStreamPriorityRange) X(cuMemGetInfo)                              \
  X(cuStreamCreateWithPriority) X(cuStreamDestroy) X(cuStreamSynchronize)     \
  X(cuStreamWaitEvent) X(cuStreamQuery)                                       \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                         \
  X(cuEventSynchronize) X(cuEventQuery) X(cuEventElapsedTime)                 \
  X(cuDeviceGetDefaultMemPool) X(cuMemPoolCreate) X(cuMemPoolDestroy)         \
  X(cuMemPoolSetAttribute) X(cuMemPoolGetAttribute) X(cuMemPoolSetAccess)     \
  X(cuMemPoolTrimTo) X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync)             \
  X(cuMemFree) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemAllocManaged)        \
  X(cuMemcpyAsync) X(cuMemsetD8Async) X(cuMemsetD16Async)                     \
  X(cuMemsetD32Async) X(cuMemPrefetchAsync) X(cuMemAdvise)                    \
  X(cuLibraryLoadData) X(cuLibraryUnload) X(cuLibraryGetKernel)               \
  X(cuLibraryGetKernelCount) X(cuLibraryEnumerateKernels) X(cuKernelGetName)  \
  X(cuKernelGetFunction) X(cuFuncGetParamInfo) X(cuFuncGetAttribute)          \
  X(cuFuncSetAttribute) X(cuOccupancyMaxActiveBlocksPerMultiprocessor)        \
  X(cuLaunchKernel) X(cuLaunchKernelEx)                                       \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) \
  X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuGraphGetNodes) \
  X(cuDeviceCanAccessPeer)                                                    \
  X(cuStreamIsCapturing)

/* Each implementation is fake_<name>, with cuda.h's prototype for <name>:
 * the compiler checks every definition against it. */
#define FAKE_DECLARE(name) __typeof__(name) fake_##name;
FAKE_API(FAKE_DECLARE)

#endif
