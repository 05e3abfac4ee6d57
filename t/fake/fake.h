/* SPDX-License-Identifier: MIT */
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
#include <stdint.h>
#include <cuda.h>

#include "../../src/driver.h"

#define FAKE_MAX_DEVICES 8
#define FAKE_MAX_PARAMS 80   /* more than cudalua's 64, to test its limit */
#define FAKE_PARAM_BYTES 4096   /* a kernel's parameter buffer, as the driver's classic limit */

/* What the live-object counters track, for leak checks from Lua. */
enum fake_Kind { FAKE_ALLOC, FAKE_STREAM, FAKE_EVENT, FAKE_LIBRARY, FAKE_GRAPH, FAKE_POOL,
                 FAKE_GREEN, FAKE_ARRAY, FAKE_TEXTURE, FAKE_VMM, FAKE_HOSTREG, FAKE_GRAPHMEM, FAKE_NKINDS };
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

/* inject.c. fake_current_call: the entry point called last (its name). */
extern const char *fake_current_call;
void fake_fail(const char *name, long nth, CUresult r);
void fake_reset(void);
long fake_calls(const char *name);
void fake_fail_from_env(void);

/* device.c. The current context: a primary one, or a green context's
 * (green.c says which are live); a green context destroyed while current
 * leaves a destroyed context current, and the calls that use the current
 * context fail with CUDA_ERROR_CONTEXT_IS_DESTROYED (fake_ctx_usable). */
void fake_context_destroyed(CUcontext ctx);
CUresult fake_ctx_usable(void);
CUcontext fake_ctx_current(void);
int fake_green_ctx_live(CUcontext ctx);
int fake_initialized(void);
int fake_device_count(void);
int fake_bad_device(CUdevice d);
struct CUctx_st { int ordinal; };
#define FAKE_SM_COUNT 132
#define FAKE_TOTAL_MEM ((size_t)16 << 30)

/* memory.c: every allocation cudalua gets is a malloc'd host block. */
size_t fake_allocated_bytes(void);
/* memory.c: every byte of device memory, an allocation's or an array's,
 * is reserved against FAKE_TOTAL_MEM, as on a GPU; reserve says 0 when it
 * does not fit. */
int fake_reserve_device_bytes(size_t n);
void fake_release_device_bytes(size_t n);
/* memory.c: the last cuMemcpyBatchAsync's attributes, copy by copy. */
#define FAKE_BATCH_RECORD 256
struct fake_BatchRecord {
  size_t count, nattrs;
  CUmemcpyAttributes attrs[FAKE_BATCH_RECORD];
};
extern struct fake_BatchRecord fake_last_batch;
/* memory.c: the last cuMemAdvise that succeeded. */
struct fake_AdviseRecord { CUdeviceptr ptr; size_t size; CUmem_advise advice; CUmemLocation loc; };
extern struct fake_AdviseRecord fake_last_advise;
/* vmm.c: the properties of the last cuMemCreate that succeeded. */
extern CUmemAllocationProp fake_last_mem_create;
/* vmm.c: where each cuMemCreate since the log was read put its memory
 * (location ids), and how many devices the last cuMemSetAccess granted. */
#define FAKE_VMM_LOG 64
struct fake_VmmLog { int created_on[FAKE_VMM_LOG]; size_t ncreated, access_count; };
extern struct fake_VmmLog fake_vmm_log;
/* vmm.c: whether [p, p + n) reaches a freed virtual-memory reservation. */
int fake_vmm_freed(uintptr_t p, size_t n);
int fake_vmm_faults(uintptr_t p, size_t n, int write);
size_t fake_vmm_room(uintptr_t p);
size_t fake_room(uintptr_t p);

/* Work issued to a stream: run at once, or recorded while it captures.
 * A graph's items also carry their node's id (graph.c). */
enum fake_WorkKind { WORK_KERNEL, WORK_MEMCPY, WORK_MEMSET, WORK_EVENT, WORK_NOP, WORK_HOST,
                     WORK_CHILD, WORK_COND, WORK_MEMALLOC, WORK_MEMFREE };
struct fake_Work {
  enum fake_WorkKind kind;
  unsigned long long node;
  union {
    struct { CUfunction fn; unsigned char args[FAKE_PARAM_BYTES]; } kernel;   /* at their offsets */
    struct { void *dst; const void *src; size_t n; } memcpy;
    struct { void *dst; unsigned value; unsigned elem; size_t count; } memset;
    struct { CUevent ev; } event;
    struct { CUhostFn fn; void *data; } host;
    struct { struct fake_GraphAlloc *a; } gmem;   /* graph memory (graphmem.c) */
    struct { CUgraph graph; } child;   /* the graph's own copy */
    struct { CUgraph *bodies; unsigned size; CUgraphConditionalNodeType type;
             unsigned long long value; } cond;
  } u;
};

/* A graph: its work in the order its nodes were added, which is a valid
 * topological order (a node's dependencies exist before it). */
struct CUgraph_st {
  unsigned magic;
  struct fake_Work *work;
  size_t n, cap;
  struct CUgraph_st *next;   /* every graph of nodes (not executables), for cuGraphNodeGetType */
};

/* stream.c. With CUDALUA_FAKE_HOST_THREAD=1 in the environment (read at
 * cuInit), host functions run on a driver thread of the fake's, in issue
 * order, as a GPU's driver runs them: every synchronize, query and the
 * process' exit (an atexit handler, as the driver's teardown) wait for
 * those issued; so do module loads and unloads and green contexts (as the
 * H200's driver does) and cuMemFree, cuMemFreeHost and cuArrayDestroy
 * (frees that may wait for the device), and graph destroys (the real-GPU
 * fuzzer hung at one). fake_host_wait is that wait. */
void fake_host_init(void);
void fake_host_wait(void);
CUresult fake_submit(CUstream s, const struct fake_Work *w);
void fake_run(const struct fake_Work *w);
void fake_event_stamp(CUevent ev);
int fake_stream_valid(CUstream s);
int fake_stream_capturing(CUstream s);
void fake_capture_unsafe(void);   /* invalidates the captures an unsafe call breaks */
int fake_event_valid(CUevent ev);
/* A stream of the context ctx: the current one for cuStreamCreate, a green
 * context's for cuGreenCtxStreamCreate. cuMemcpyBatchAsync refuses a
 * stream whose context is not current (CUDA_ERROR_INVALID_CONTEXT): the
 * driver's batch checks its pointers in the current context. */
CUresult fake_stream_create(CUstream *s, unsigned flags, CUcontext ctx);
int fake_stream_in_current_ctx(CUstream s);
/* Whether s is a green context's stream: driver 580's cuMemcpyBatchAsync
 * dies of SIGSEGV on one even with its context current (H100,
 * t/context.t); the fake's refuses it. */
int fake_stream_green(CUstream s);

/* graphmem.c: graph memory. An allocation made in a capture is a node;
 * its memory exists from then on (the fake's address space is the host's)
 * but is usable only between a launch of its graph and its free. */
struct fake_GraphAlloc;
CUgraph fake_stream_capture(CUstream s);
int fake_graph_mem_owns(CUdeviceptr p);
CUresult fake_graph_mem_free(CUdeviceptr p, CUstream s);
CUresult fake_graph_mem_launch(const struct CUgraph_st *exec, int auto_free);

/* graph.c */
CUresult fake_graph_new(CUgraph *g);
void fake_graph_destroy(CUgraph g);
CUresult fake_graph_append(CUgraph g, const struct fake_Work *w);

/* memory.c: the work items of copies and fills */
void fake_memcpy_item(struct fake_Work *w, CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult fake_memset_item(struct fake_Work *w, CUdeviceptr dst, unsigned value, unsigned elem,
                          size_t count);
void fake_memset_run(void *dst, unsigned value, unsigned elem, size_t count);

/* library.c: what a launch needs to know of a function */
const char *fake_function_name(CUfunction fn);
int fake_function_nparams(CUfunction fn);
CUresult fake_function_param(CUfunction fn, size_t i, size_t *offset, size_t *size);
int fake_function_shmem_limit(CUfunction fn);

/* hold.c: cuda.bench's blocking kernel holds its stream from its launch
 * until its flag is written; a wait meanwhile is a stall (fakecuda.stalls). */
void fake_hold_launched(volatile int *flag, volatile int *timed_out);
void fake_hold_wait(void);
long fake_hold_stalls(const char **last);

/* launch.c */
void fake_kernel_run(CUfunction fn, const unsigned char *args);
CUresult fake_kernel_item(struct fake_Work *w, CUfunction fn, const unsigned grid[3],
                          const unsigned block[3], unsigned shmem, void **params);

/* array.c: the memory a texture (surface = 0) or surface object reads,
 * its size and its rows' pitch (linear memory: one row of all of it); NULL for a handle that is not one, or whose array is gone.
 * fake_texture_desc: what a texture was made with (0 for no texture). */
void *fake_object_data(unsigned long long h, int surface, size_t *bytes, size_t *pitch);
int fake_texture_desc(unsigned long long h, CUDA_RESOURCE_DESC *r, CUDA_TEXTURE_DESC *t);
int fake_array_desc(CUarray a, CUDA_ARRAY3D_DESCRIPTOR *d);
/* hostreg.c: the registration holding address a (0 for none) */
int fake_host_registered(uintptr_t a, unsigned *flags, uintptr_t *base, size_t *size);   /* 0 for no live array */

/* entry.c: the i-th entry point's name, NULL past the last */
const char *fake_entry_name(size_t i);

/* Every entry point the fake implements: exactly the ones cudalua asks
 * for (src/driver.h), so a name added there without a fake_<name> here
 * fails this library's build. X is called as X(name) or X(name, version). */
#define FAKE_API(X) CL_DRIVER_API(X) CL_DRIVER_API_AT(X)

/* Each implementation is fake_<name>, with cuda.h's prototype for <name>:
 * the compiler checks every definition against it. */
#define FAKE_DECLARE(name, ...) __typeof__(name) fake_##name;
FAKE_API(FAKE_DECLARE)

#endif
