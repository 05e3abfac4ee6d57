/* SPDX-License-Identifier: MIT */
/* driver.h: the CUDA driver API, opened at run time.
 *
 * Nothing in cudalua links libcuda. driver.c dlopen()s it on first use and
 * fills cl_driver with entry points from cuGetProcAddress, asked for the ABI
 * of the cuda.h we were compiled against (CUDA_VERSION), so the prototypes
 * below are exactly the ones the driver hands back.
 *
 * Call through CL_TRY, which raises a cuda.Error naming the function:
 *     CL_TRY(L, cuStreamSynchronize, (s->handle));
 * or, where an error must not raise (finalizers), through CL_CALL. */
#ifndef CUDALUA_DRIVER_H
#define CUDALUA_DRIVER_H

#include <cuda.h>
#include <lua.h>

#define CL_DRIVER_API(X)                                                    \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)     \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName)                     \
  X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDeviceGetUuid)            \
  X(cuDeviceGetPCIBusId) X(cuDevicePrimaryCtxRetain)                        \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)       \
  X(cuCtxGetStreamPriorityRange) X(cuMemGetInfo)                            \
  X(cuStreamCreateWithPriority) X(cuStreamDestroy) X(cuStreamSynchronize)   \
  X(cuStreamWaitEvent) X(cuStreamQuery)                                     \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                       \
  X(cuEventSynchronize) X(cuEventQuery) X(cuEventElapsedTime)               \
  X(cuDeviceGetDefaultMemPool) X(cuMemPoolCreate) X(cuMemPoolDestroy)       \
  X(cuMemPoolSetAttribute) X(cuMemPoolGetAttribute) X(cuMemPoolSetAccess)   \
  X(cuMemPoolTrimTo) X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync)           \
  X(cuMemFree) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemAllocManaged)      \
  X(cuMemcpyAsync) X(cuMemsetD8Async) X(cuMemsetD16Async)                   \
  X(cuMemsetD32Async) X(cuMemPrefetchAsync) X(cuMemAdvise)                  \
  X(cuLibraryLoadData) X(cuLibraryUnload) X(cuLibraryGetKernel)             \
  X(cuLibraryGetKernelCount) X(cuLibraryEnumerateKernels) X(cuKernelGetName) \
  X(cuKernelGetFunction) X(cuFuncGetParamInfo) X(cuFuncGetAttribute)      \
  X(cuFuncSetAttribute) X(cuOccupancyMaxActiveBlocksPerMultiprocessor)      \
  X(cuLaunchKernel) X(cuLaunchKernelEx)                                     \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags)      \
  X(cuGraphLaunch) X(cuGraphExecDestroy) X(cuGraphDestroy)                  \
  X(cuGraphGetNodes) X(cuGraphClone) X(cuGraphDebugDotPrint)               \
  X(cuGraphNodeGetType) X(cuGraphChildGraphNodeGetGraph)                   \
  X(cuGraphUpload) X(cuGraphCreate) X(cuGraphAddKernelNode)                 \
  X(cuGraphAddMemcpyNode) X(cuGraphAddMemsetNode) X(cuGraphAddEmptyNode)    \
  X(cuGraphAddEventRecordNode) X(cuGraphAddEventWaitNode)                   \
  X(cuGraphAddChildGraphNode) X(cuGraphExecKernelNodeSetParams)          \
  X(cuGraphExecUpdate) X(cuMemAllocAsync)                                                \
  X(cuDeviceGetDevResource) X(cuDevSmResourceSplitByCount)                  \
  X(cuDevResourceGenerateDesc) X(cuGreenCtxCreate) X(cuGreenCtxDestroy)     \
  X(cuCtxFromGreenCtx) X(cuGreenCtxStreamCreate) X(cuGreenCtxGetDevResource) \
  X(cuGraphConditionalHandleCreate) X(cuGraphAddNode) X(cuLaunchHostFunc)  \
  X(cuDeviceCanAccessPeer)                                                  \
  X(cuStreamIsCapturing)                                                    \
  X(cuMemAlloc) X(cuMemGetAddressRange) X(cuIpcGetMemHandle)                \
  X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle) X(cuMemcpyBatchAsync)                   \
  X(cuMemPoolExportToShareableHandle) X(cuMemPoolImportFromShareableHandle) \
  X(cuMemPoolExportPointer) X(cuMemPoolImportPointer) X(cuMemPoolGetAccess)  \
  X(cuArray3DCreate) X(cuArrayDestroy) X(cuMemcpy3DAsync)                   \
  X(cuTexObjectCreate) X(cuTexObjectDestroy)                                \
  X(cuSurfObjectCreate) X(cuSurfObjectDestroy)                              \
  X(cuDeviceGetGraphMemAttribute) X(cuDeviceGraphMemTrim)                  \
  X(cuMemGetAllocationGranularity) X(cuMemCreate) X(cuMemRelease)          \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemMap) X(cuMemUnmap)      \
  X(cuMemSetAccess)                                                         \
  X(cuTensorMapEncodeTiled) X(cuTensorMapEncodeIm2col) X(cuTensorMapReplaceAddress) \
  X(cuMemHostRegister) X(cuMemHostUnregister) X(cuMemHostGetDevicePointer)

/* Entry points whose prototype in cuda.h is older than the newest ABI the
 * driver has under that name: asked for at the version of the header's
 * prototype. CUDA 13 gave cuCtxSynchronize a context argument (v13000) but
 * cuda.h still declares the void one (v2000). Names that cuda.h maps to
 * another name (cuGraphInstantiate -> cuGraphInstantiateWithFlags) are
 * listed above under the name they map to, for the same reason. */
#define CL_DRIVER_API_AT(X) X(cuCtxSynchronize, 2000)

/* One field per entry point, typed from cuda.h's own prototype. The name is
 * pasted (p_##name) so that cuda.h's versioning macros (cuMemAlloc ->
 * cuMemAlloc_v2) do not rename the field. */
#define CL_DRIVER_FIELD(name) __typeof__(name) *p_##name;
#define CL_DRIVER_FIELD_AT(name, version) __typeof__(name) *p_##name;
struct cl_DriverAPI {
  CL_DRIVER_API(CL_DRIVER_FIELD)
  CL_DRIVER_API_AT(CL_DRIVER_FIELD_AT)
};
extern struct cl_DriverAPI cl_driver;
/* The context this thread last made current through cudalua (device.h's
 * cl_device_activate; green contexts and releases too). */
extern __thread CUcontext cl_current_ctx;

/* Load the driver and call cuInit once per process. Raises a cuda.Error
 * with unavailable = true, naming the cause, when there is no driver. */
void cl_driver_load(lua_State *L);

/* The same without raising: 1 when the driver works, else 0 with the
 * reason in why. */
int cl_driver_try_load(char *why, size_t whysize);

/* Raise a cuda.Error for a failed driver call. After an error that leaves
 * the context unusable (an illegal address in a kernel, ...), this one and
 * every later one say "the context is lost: restart the process" and carry
 * context_lost = true. */
int cl_raise(lua_State *L, CUresult r, const char *api);

/* The same, with a detail appended to the message ("... (asked for N bytes)"). */
int cl_raise_detail(lua_State *L, CUresult r, const char *api, const char *fmt, ...);

/* Raise a cuda.Error that is not a driver result: no driver, no device. */
int cl_raise_unavailable(lua_State *L, const char *fmt, ...);

/* Push a cuda.Error table (code, name, api, message) without raising. */
void cl_push_error(lua_State *L, int code, const char *name, const char *api,
                   const char *message);

static inline void cl_check(lua_State *L, CUresult r, const char *api)
{
  if (r != CUDA_SUCCESS)
    cl_raise(L, r, api);
}

/* --- a stream held by a blocking kernel -------------------------------------
 *
 * cuda.bench queues a kernel that spins until the host writes a flag, then
 * queues the work behind it (NVBench's blocking kernel). A driver call that
 * waits for the GPU, made while the kernel spins, waits for the kernel, so
 * until it times out. While a hold is on (cl_hold_begin, in hold.c's
 * cuda.hold_begin), every call that may wait first lets the kernel go: it
 * writes the flag and is named as the call that broke the hold. Releases
 * (frees, unloads, destroys: lifetimes.c) are deferred until the hold ends,
 * so that a finalizer run by the collector in the window breaks nothing.
 *
 * Which calls may wait is decided here, at compile time: CL_TRY and CL_CALL
 * of any other entry point test nothing. Copies into pageable memory wait
 * too; copy code breaks the hold for them (stream.h). */
#define CL_DRIVER_MAY_WAIT(X)                                                \
  X(cuCtxSynchronize) X(cuStreamSynchronize) X(cuEventSynchronize)          \
  X(cuMemFree) X(cuMemFreeHost) X(cuMemAlloc) X(cuMemAllocManaged)          \
  X(cuMemHostAlloc) X(cuMemHostRegister) X(cuMemHostUnregister)             \
  X(cuMemAllocFromPoolAsync) X(cuMemAllocAsync) X(cuMemPoolTrimTo)          \
  X(cuMemPoolDestroy) X(cuLibraryLoadData) X(cuLibraryUnload)               \
  X(cuKernelGetFunction) X(cuArray3DCreate) X(cuArrayDestroy)               \
  X(cuGraphDestroy) X(cuGraphExecDestroy) X(cuGraphInstantiateWithFlags)     \
  X(cuGreenCtxCreate) X(cuGreenCtxDestroy) X(cuIpcOpenMemHandle)            \
  X(cuIpcCloseMemHandle) X(cuMemCreate) X(cuMemRelease) X(cuMemMap)         \
  X(cuMemUnmap) X(cuDeviceGraphMemTrim) X(cuDevicePrimaryCtxRetain)         \
  X(cuDevicePrimaryCtxRelease) X(cuMemPoolImportPointer)

#define CL_API_ID(name) CL_API_ID_##name,
#define CL_API_ID_AT(name, version) CL_API_ID_##name,
enum { CL_DRIVER_API(CL_API_ID) CL_DRIVER_API_AT(CL_API_ID_AT) CL_API_COUNT };
#define CL_API_WAITS(name) [CL_API_ID_##name] = 1,
/* A constant table: cl_api_may_wait[CL_API_ID_x] folds to 0 or 1. */
static const unsigned char cl_api_may_wait[CL_API_COUNT] __attribute__((unused)) = {CL_DRIVER_MAY_WAIT(CL_API_WAITS)};

/* Nonzero while a blocking kernel spins behind a hold (driver.c). */
extern _Atomic int cl_hold_spinning;
/* Nonzero from cl_hold_begin to cl_hold_end, broken or not. */
extern _Atomic int cl_holding;

/* Start a hold on the kernel that spins until *flag != 0; 0 when one is on
 * already. closed: the flag memory's closed word; the flag is written only
 * while it is 0 (a host buffer closed in the window is freed memory). */
int cl_hold_begin(volatile int *flag, const int *closed);
/* Let the kernel go (write the flag) and name api as the call that did. */
void cl_hold_break(const char *api);
/* End the hold, letting the kernel go; the call that broke it, or NULL. */
const char *cl_hold_end(void);

static inline void cl_hold_check(int may_wait, const char *api)
{
  if (may_wait && cl_hold_spinning)
    cl_hold_break(api);
}

/* name is pasted, never expanded (cuda.h renames cuMemFree to cuMemFree_v2) */
#define CL_TRY(L, name, args)                                                 \
  (cl_hold_check(cl_api_may_wait[CL_API_ID_##name], #name),                   \
   cl_check((L), cl_driver.p_##name args, #name))
#define CL_CALL(name, args) \
  (cl_hold_check(cl_api_may_wait[CL_API_ID_##name], #name), cl_driver.p_##name args)

/* Registers cuda.Error and the driver's module functions. */
void cl_open_driver(lua_State *L);

#endif
