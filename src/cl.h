/* SPDX-License-Identifier: MIT */
/* cl.h: what the files of the cudalua core share.
 *
 * Every CUDA concept is a full userdata with a metatable registered under
 * its type name (CL_STREAM, ...). Handles start with `int closed`; check_*
 * functions raise a type error for the wrong type and "cuda.X is closed"
 * for a closed handle. Parents are kept alive through user values. */
#ifndef CUDALUA_CL_H
#define CUDALUA_CL_H

#include <float.h>
#include <stdatomic.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>
#include <lauxlib.h>
#include <cuda.h>

#include "driver.h"
#include "handle.h"


/* --- devices (device.c) -------------------------------------------------- */

typedef struct cl_Device {
  int ordinal;
  CUdevice handle;
  CUcontext ctx;                /* primary context; NULL until first use */
  int cc_major, cc_minor;
  int sm_count;
  int max_shmem_optin;          /* bytes of dynamic shared memory, opt-in */
  int cluster_launch;
  int cooperative_launch;
  int concurrent_managed_access;
  int memory_pools;
  int pageable_memory_access;   /* kernels reach pageable host memory (HMM, ATS) */
  char name[256];
} cl_Device;

cl_Device *cl_check_device(lua_State *L, int i);
/* Push the Device object for ordinal (the same object for the same id). */
cl_Device *cl_push_device(lua_State *L, int ordinal);
/* The device made current with set_current, else the launcher's node-local
 * rank's device (rank % device count), else device 0; pushes it. */
cl_Device *cl_push_current_device(lua_State *L);
/* The device argument at i (absolute): a cuda.Device, a device id, or
 * none/nil for the current device; pushes it. */
cl_Device *cl_push_device_arg(lua_State *L, int i);
/* Retain the primary context on first use and make it current. */
void cl_device_activate_slow(lua_State *L, cl_Device *d);

/* --- streams and events (stream.c) --------------------------------------- */

struct cl_GraphRefs;

typedef struct cl_Stream {
  int closed;
  CUstream handle;
  cl_Device *dev;
  int priority;
  int non_blocking;
  struct cl_GraphRefs *capture; /* the capture it records into (user value 3), or NULL */
  void *green;                  /* its green context (context.c; user value 2), or NULL */
  int is_default;               /* the driver's legacy or per-thread stream: never destroyed */
} cl_Stream;

typedef struct cl_Event {
  int closed;
  CUevent handle;
  cl_Device *dev;
  int timing;
  int recorded;
  struct cl_GraphRefs *capture; /* recorded in that capture (user value 2), or NULL */
  int graph_refs;               /* live graphs recording or waiting on it: close defers the destroy */
} cl_Event;

cl_Stream *cl_check_stream(lua_State *L, int i);
cl_Stream *cl_opt_stream(lua_State *L, int i);    /* NULL for none/nil */
cl_Event *cl_check_event(lua_State *L, int i);
/* A graph that recorded or waited on ev is gone: a closed event is
 * destroyed with the last such graph. Never raises: it runs in finalizers. */
void cl_event_graph_release(cl_Event *ev);
/* s:sync() and ev:sync(), host functions polled (cl_sync). */
void cl_stream_sync(lua_State *L, cl_Stream *s);
void cl_event_sync(lua_State *L, cl_Event *ev);

/* --- host functions into Lua (hostfunc.c) --------------------------------- */

/* A driver wait on object (a cl_Stream, cl_Event or cl_Device that the
 * caller keeps on the stack): block until done (block = 1), or say
 * whether it is done (CUDA_SUCCESS) or not yet (CUDA_ERROR_NOT_READY).
 * It reads the object's handle at each call, and a closed object is done:
 * host functions that the wait runs may close it (destroying a stream or
 * an event with work pending already lets that work complete). */
typedef CUresult (*cl_WaitFn)(void *object, int block);
/* Host functions issued and not yet run or released, of every state
 * (lifetimes.c). */
extern _Atomic int cl_hostfunc_outstanding;
/* Releases deferred behind host functions (lifetimes.c), not yet made. */
extern _Atomic int cl_releases_deferred;
/* Make the deferred releases; only with no host function outstanding,
 * since they may wait for the GPU. Never raises, runs no Lua. */
void cl_release_deferred(void);
/* Wait with host functions outstanding: run them as they become ready. */
void cl_hostfunc_wait(lua_State *L, cl_WaitFn wait, void *object, const char *api);
/* The cl_WaitFn of a device's primary context (dev:sync; object: its cl_Device). */
CUresult cl_device_wait(void *device, int block);
/* Work left for the next wait with no host function outstanding, that
 * needs the Lua state (host_register.c's unregistrations, registered with
 * cl_lifetimes_quiet_work); it runs no Lua. */
extern _Atomic int cl_quiet_work_pending;
void cl_run_quiet_work(lua_State *L);
void cl_lifetimes_quiet_work(void (*work)(lua_State *L));
/* s:launch_host_func (stream.c) in two steps: push the holder of the
 * function at 2 and its arguments (returns its index), then, with the
 * collector held and the stream checked, issue it on stream. */
int cl_hostfunc_push_holder(lua_State *L);
void cl_hostfunc_launch(lua_State *L, CUstream stream, int hi);
void cl_open_hostfunc(lua_State *L);

/* --- memory resources (memory.c) ----------------------------------------- */

typedef enum { CL_MR_DEVICE, CL_MR_PINNED, CL_MR_MANAGED, CL_MR_HOST } cl_MRKind;

struct cl_MemoryResource;
struct cl_Buffer;
/* What a kind of resource made above memory.c does its own way (vmm.c,
 * graph_memory.c): allocate n bytes (the device is current); push the
 * field key and return 1, or return 0 for the common fields; close one of
 * its buffers (buf:close(s)). A NULL member: memory.c's way. */
typedef struct cl_MROps {
  CUdeviceptr (*allocate)(lua_State *L, struct cl_MemoryResource *mr, size_t n);
  int (*push_field)(lua_State *L, const struct cl_MemoryResource *mr, const char *key);
  int (*close_buffer)(lua_State *L, struct cl_Buffer *b, struct cl_Stream *s);
} cl_MROps;

typedef struct cl_MemoryResource {
  int closed;
  cl_MRKind kind;
  cl_Device *dev;               /* NULL for host memory */
  CUmemoryPool pool;            /* NULL unless pool-backed */
  int owns_pool;                /* created by us: destroyed on close */
  size_t live_bytes;            /* bytes of buffers not yet released */
  size_t live_buffers;
  size_t graph_held;            /* live buffers closed for Lua, kept by graphs */
  int close_pending;            /* closed for Lua; destroyed with its last buffer */
  uint64_t peer_mask;           /* devices granted access (peer_accessible_by), bit = ordinal */
  int ipc_opened;               /* another process's memory (ipc.c), allocates nothing: */
#define CL_IPC_MAPPED 1         /* cuIpcOpenMemHandle's mappings */
#define CL_IPC_POOL 2           /* an imported pool's pointers (cuMemPoolImportPointer) */
  int ipc_pool;                 /* a pool other processes can import (DeviceMemoryResource{ipc = true}) */
  int pool_shared;              /* its handle exported once: the driver exports pointers only then */
  const cl_MROps *ops;          /* a kind made above memory.c, else NULL */
  void *vmm;                    /* a cuda.VirtualMemoryResource's settings (vmm.c), else NULL */
  CUmemLocation location;       /* a pinned pool's host NUMA node, a managed resource's preferred
                                 * location (cuMemAdvise on each allocation); type 0: none */
  int graph_memory;             /* a cuda.GraphMemoryResource (graph_memory.c) */
  struct cl_Foreign *foreign;   /* memory another library owns (view_foreign.c), else NULL */
} cl_MemoryResource;

cl_MemoryResource *cl_check_mr(lua_State *L, int i);
/* n bytes of mr, allocated on s (NULL for none) for a new buffer and
 * counted in mr's live totals (buffer.c's mr:allocate). */
CUdeviceptr cl_mr_allocate(lua_State *L, cl_MemoryResource *mr, size_t n, cl_Stream *s);
/* Give a buffer's size bytes at ptr back to its resource, stream-ordered on
 * s where the resource is a pool, and count the buffer out of the
 * resource's live totals. Never raises: it runs in finalizers too. */
/* A buffer of mr was closed for Lua while a graph still uses it
 * (graph_held); its memory goes back later, through
 * cl_mr_release_graph_held. */
void cl_mr_hold_for_graph(cl_MemoryResource *mr);
void cl_mr_release_graph_held(cl_MemoryResource *mr, CUdeviceptr ptr, size_t size);
void cl_mr_release(cl_MemoryResource *mr, CUdeviceptr ptr, size_t size, CUstream s,
                   int stream_known);
/* Run every pending host function before a driver call that waits for
 * them (module loads, green contexts): a wait on the device, as dev:sync().
 * It runs Lua: callers check their handles after it (HACKING.md). */
void cl_hostfunc_drain(lua_State *L);
extern const char *const cl_mr_kind_names[];   /* "device", "pinned", ... */
/* Push the resource that owns device memory opened from another process on
 * the device at devi, as how says (CL_IPC_MAPPED: its buffers close their
 * cuIpcOpenMemHandle mapping; CL_IPC_POOL: they free their imported
 * pointer); it allocates nothing (ipc.c). */
cl_MemoryResource *cl_push_ipc_mr(lua_State *L, int devi, int how);
/* Memory another library owns, under the one buffer of a resource of its
 * own (view_foreign.c): the resource allocates nothing, and releasing
 * the buffer calls release once (after the device's work is done when
 * wait is set; deferred behind host functions as any release is), which
 * frees the struct too. The struct is valid while that buffer is open. */
typedef struct cl_Foreign {
  void (*release)(struct cl_Foreign *f);
  int wait;                     /* GPU work may use it: synchronize the device first */
  int readonly;                 /* the exporter said it must not be written */
} cl_Foreign;
/* Push a resource for one foreign buffer of kind on the device at devi (0
 * for host memory); user value 2 (set by the caller) keeps its owner alive. */
cl_MemoryResource *cl_push_foreign_mr(lua_State *L, cl_MRKind kind, int devi);
/* Whether pool is one of this process's shared pools, which it may not
 * import (ipc.c asks). */
int cl_shared_pool_is_own(CUmemoryPool pool);

/* --- buffers (buffer.c) -------------------------------------------------- */

typedef struct cl_Buffer {
  int closed;
  CUdeviceptr ptr;
  size_t size;
  cl_MemoryResource *mr;
  struct cl_Buffer *owner;      /* the owning buffer of a slice, else NULL */
  cl_Stream *stream;            /* the stream it was allocated on, or NULL */
  int graph_refs;               /* live graphs using it (or its slices): close defers the free */
  unsigned moves;               /* an owner: times buf:grow moved it (vmm.c); a slice, a view, a
                                 * tensor map: that count when it was made (it holds the address) */
  int graph_alloc;              /* graph memory: its allocation's state (graph_memory.c) */
  const void *graph_capture;    /* graph memory: the capture (cuda.GraphRefs) that allocated it */
} cl_Buffer;

/* A buffer or slice that is open, and whose owner is open. */
cl_Buffer *cl_check_buffer(lua_State *L, int i);
static inline int cl_buffer_is_open(const cl_Buffer *b)
{
  return !b->closed && !(b->owner && (b->owner->closed || b->owner->moves != b->moves));
}
/* What a slice, view or tensor map made before its buffer moved says. */
#define CL_BUFFER_MOVED "the buffer moved when it grew"
/* Why b is not open (a static string: launch and copies format nothing):
 * closed, its owner closed, or a slice of an owner that moved since. */
const char *cl_buffer_closed_why(const cl_Buffer *b);
/* Push a new buffer over ptr/size owned by mr (at index mri), allocated
 * on stream s (at index si, 0 for none). */
cl_Buffer *cl_push_buffer(lua_State *L, CUdeviceptr ptr, size_t size, int mri,
                          cl_Stream *s, int si);
/* A graph that used b is gone: the memory of a closed buffer is freed
 * with the last such graph. Never raises: it runs in finalizers. */
void cl_buffer_graph_release(cl_Buffer *b);
/* For a kernel's pointer parameter (launch.c): the buffer of the view at i
 * (a cuda.View; NULL for anything else), the address of its first element
 * in *ptr. Only for functions registered through cl_setfuncs (cl_fast_test).
 * A view made before its buffer moved (buf:grow) raises an argument error. */
cl_Buffer *cl_view_pointer(lua_State *L, int i, CUdeviceptr *ptr);
/* A pending operation outside the GPU (an MPI request) uses b's memory:
 * closing b then closes it for Lua only, and the memory goes back at the
 * matching cl_buffer_graph_release. The module cuda.mpi_core reaches both
 * through the registry's CL_BUFFER_API, a light userdata. */
void cl_buffer_hold(cl_Buffer *b);
typedef struct cl_BufferAPI {
  void (*hold)(cl_Buffer *b);
  void (*release)(cl_Buffer *b);
} cl_BufferAPI;
#define CL_BUFFER_API "cuda.BufferAPI"
/* The host address of a host-accessible buffer; raises otherwise. */
void *cl_buffer_host(lua_State *L, int i, cl_Buffer *b);

static inline int cl_mr_host_accessible(const cl_MemoryResource *mr)
{
  return mr->kind != CL_MR_DEVICE;
}
static inline int cl_mr_device_accessible(const cl_MemoryResource *mr)
{
  return mr->kind != CL_MR_HOST;
}
/* Whether kernels on device d can use mr's memory: its own device, memory
 * mapped for every device (cuMemHostAlloc'd pinned, managed), or a pool
 * that granted d access (peer_accessible_by). One bit test: launch runs it
 * for every buffer argument. */
static inline int cl_mr_accessible_from(const cl_MemoryResource *mr, const cl_Device *d)
{
  if (mr->dev == d || (mr->kind != CL_MR_DEVICE && mr->pool == NULL))
    return 1;
  return d->ordinal < 64 && (mr->peer_mask >> d->ordinal & 1);
}

/* --- views (view.c) ------------------------------------------------------ */

/* The memory of a cuda.View (its userdata pointer): for launch and copies. */
typedef struct cl_ViewMemory {
  cl_Buffer *buf;               /* the view's buffer: the caller checks it is open */
  CUdeviceptr ptr;              /* its first element */
  size_t nbytes;                /* elements * itemsize: its bytes when contiguous */
  int contiguous;
  int moved;                    /* made before its buffer moved (vmm.c): ptr is stale */
} cl_ViewMemory;
void cl_view_memory(const void *view, cl_ViewMemory *m);

/* A run of memory a copy reads or writes (buffer.c): a buffer, a slice or
 * a contiguous view's elements. */
typedef struct cl_Span {
  CUdeviceptr ptr;
  size_t size;
  cl_MemoryResource *mr;
} cl_Span;
/* The open Buffer or contiguous View at i as a span, or the error (arg
 * names the argument). Only for functions with the metatables as upvalues
 * (cl_setfuncs). Allocates nothing unless it raises. */
void cl_check_span(lua_State *L, int i, cl_Span *out);

/* --- CUDA arrays (array.c), textures and surfaces (texture.c) ----------- */

typedef struct cl_Array {
  int closed;
  CUarray handle;               /* kept past close while users > 0 */
  cl_Device *dev;
  CUDA_ARRAY3D_DESCRIPTOR desc;
  unsigned elem_size;           /* bytes of one channel */
  size_t size;                  /* bytes of the whole array, rows packed */
  int users;                    /* live textures and surfaces over it */
} cl_Array;                     /* user value 1: the device */

cl_Array *cl_check_array(lua_State *L, int i);
/* A texture or surface over a is gone: a closed array goes with the last. */
void cl_array_user_gone(cl_Array *a);
/* The format option field of the table at idx ("float32" when absent) as a
 * CUarray_format; *size gets the bytes of one channel. */
int cl_check_array_format(lua_State *L, int idx, const char *field, unsigned *size);
/* graph.c's hook: whether the value at i is an array, a texture or a
 * surface; a delta of 1 counts a graph that uses it, -1 gives that count
 * back (a closed one goes with its last user). Runs no Lua. */
int cl_graph_user(lua_State *L, int i, int delta);
/* cuda.launch's hook: 1 and the 8-byte handle in *slot for an open texture
 * or surface object (metatable mt, userdata ud), -1 for a closed one (its
 * type name in *tname, the device whose context made it in *dev), 0 for
 * any other value. Runs no Lua. */
int cl_object_arg(lua_State *L, const void *mt, const void *ud, uint64_t *slot,
                  const char **tname, cl_Device **dev);

/* --- element types and typed scalars (dtype.c) --------------------------- */

typedef enum {
  CL_F32, CL_F64, CL_I8, CL_I16, CL_I32, CL_I64, CL_U8, CL_U16, CL_U32, CL_U64,
  CL_NDTYPES
} cl_DType;

extern const char *const cl_dtype_names[CL_NDTYPES + 1];
extern const unsigned char cl_dtype_sizes[CL_NDTYPES];
static inline int cl_dtype_is_float(cl_DType t) { return t == CL_F32 || t == CL_F64; }
cl_DType cl_check_dtype(lua_State *L, int i);
/* Convert the number at index i to type t into dst; raises a range error
 * naming the type for values the type cannot hold. */
void cl_dtype_store(lua_State *L, int i, cl_DType t, void *dst);
void cl_dtype_push(lua_State *L, cl_DType t, const void *src);
/* Whether float32 holds x (infinities and NaN included): a C cast of a
 * finite double beyond float's range is undefined. Inline: view.c checks
 * every element of a conversion with it. */
static inline int cl_fits_float32(double x)
{
  return !isfinite(x) || fabs(x) <= FLT_MAX;
}

/* A typed scalar, cuda.f32(2.5) or cuda.u64(n): a kernel argument of an
 * exact width, a fill pattern, a view's operand converted to its dtype. */
typedef struct cl_Scalar {
  cl_DType type;
  int pointer;                  /* cuda.ptr(n): a uint64 that is an address */
  union {
    unsigned char bytes[8];
    float f32; double f64;
    int8_t i8; int16_t i16; int32_t i32; int64_t i64;
    uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
  } v;
} cl_Scalar;

/* The scalar at i, or NULL for any other value. */
cl_Scalar *cl_test_scalar(lua_State *L, int i);
/* Set sc to the number at index i converted to t, as cl_dtype_store does. */
void cl_scalar_store(lua_State *L, int i, cl_DType t, cl_Scalar *sc);

/* --- programs (program.c), object code and kernels (module.c) ----------- */

#define CL_MAX_PARAMS 64
#define CL_PROGRAMCACHE "cuda.ProgramCache"
#define CL_LINKER       "cuda.Linker"

typedef struct cl_ObjectCode {
  int closed;
  CUlibrary library;            /* loaded on first get_kernel; NULL before */
  int kind;                     /* index into cl_code_kinds */
  int graph_refs;               /* live graphs launching its kernels: close defers the unload */
} cl_ObjectCode;                /* user value 1: the code, a Lua string */

/* The loadable kinds first: the driver loads cubin, PTX and fatbin; LTO-IR,
 * host objects and libraries only go into a cuda.Linker. */
enum { CL_CUBIN, CL_PTX, CL_FATBIN, CL_LTOIR, CL_OBJECT, CL_LIBRARY, CL_NKINDS };
#define CL_NLOADABLE CL_LTOIR
extern const char *const cl_code_kinds[];   /* "cubin", "ptx", ..., NULL */

/* NULL when code[0..n) is object code of kind *kind that the driver can
 * load without reading past it, else why not (written into why). A kind
 * < 0 is detected first. code is a Lua string's: code[n] is a NUL. */
const char *cl_code_problem(const char *code, size_t n, int *kind, char *why, size_t size);
/* 1 when s[0..n) has no byte but NULs: a compiler's output with no code. */
int cl_is_blank(const char *s, size_t n);
/* Push a new ObjectCode over the code string at index codei, which must
 * pass cl_code_problem for kind: raises otherwise. */
cl_ObjectCode *cl_push_objectcode(lua_State *L, int codei, int kind);
cl_ObjectCode *cl_check_objectcode(lua_State *L, int i);
void cl_objectcode_push_code(lua_State *L, int oi);
/* The name expressions: a table of expression -> lowered (mangled) name,
 * or nil; get_kernel resolves through it. */
void cl_objectcode_set_names(lua_State *L, int oi, int ti);
void cl_objectcode_push_names(lua_State *L, int oi);
/* The C++ source the code was compiled from (at si), where extern "C"
 * kernels' declarations give their parameter types. */
void cl_objectcode_set_source(lua_State *L, int oi, int si);
/* A graph that launched one of o's kernels is gone (as cl_buffer_graph_release). */
void cl_objectcode_graph_release(cl_ObjectCode *o);

/* --- kernel parameter types (signature.c) --------------------------------- */

/* What a parameter's type says about the Lua values it takes (launch.c).
 * CL_ARG_NAMED is a class, struct, enum or typedef known by name only, or
 * a type not known at all: it takes what any parameter of its size took
 * before types were known, and bytes (a string) of its size. */
enum { CL_ARG_NAMED, CL_ARG_BOOL, CL_ARG_INT /* either sign: char */, CL_ARG_SINT, CL_ARG_UINT,
       CL_ARG_FLOAT, CL_ARG_PTR, CL_ARG_VOID };
typedef struct cl_ArgType {
  unsigned char kind;
  unsigned short size;          /* bytes; 0 where only the driver knows */
  char name[96];                /* "const float*", "Span<float>"; "" unknown */
} cl_ArgType;

/* The parameter types of the mangled C++ name (Itanium ABI): their count,
 * or -1 and *why. fname gets the function's name ("ns::add<float>"). */
int cl_demangle(const char *mangled, cl_ArgType *params, int max, char *fname, size_t fname_size,
                const char **why);
/* The parameter types of a declaration in C declarator syntax ("const
 * float*, double n, Span<float>"): their count, or -1 and why. */
int cl_parse_signature(const char *sig, cl_ArgType *params, int max, char *why, size_t why_size);
/* Copy the parameter list of the __global__ function kernel declared in
 * src[0..len) into out (comments blanked); 0 when there is none (or it
 * does not fit). */
int cl_find_declaration(const char *src, size_t len, const char *kernel, char *out, size_t size);

typedef struct cl_Kernel {
  int closed;
  CUkernel handle;              /* context-independent */
  CUfunction fn;                /* handle resolved for fn_device's context */
  int fn_device;                /* ordinal fn belongs to, -1 for none yet */
  int nparams;                  /* from cuKernelGetParamInfo; -1 unknown */
  int shmem_optin;              /* largest dynamic shared memory enabled */
  size_t param_offset[CL_MAX_PARAMS];
  unsigned short param_size[CL_MAX_PARAMS];
  unsigned char param_kind[CL_MAX_PARAMS];   /* CL_ARG_*, resolved when the kernel is made */
  char name[128];
} cl_Kernel;                    /* user values: 1 the ObjectCode, 2 its name, 3 its parameters'
                                 * type names (a list; nil when none is known) */

cl_Kernel *cl_check_kernel(lua_State *L, int i);
/* The CUfunction of k for device d (whose context is current). */
CUfunction cl_kernel_function(lua_State *L, cl_Kernel *k, cl_Device *d);

/* An option that maps to a compiler or linker flag: a boolean gives flag
 * or on_false (NULL: no flag); an integer or a string is appended to flag;
 * a list (of strings or integers) adds flag once per item. */
typedef enum { CL_OPT_BOOL, CL_OPT_INT, CL_OPT_STRING, CL_OPT_STRINGS, CL_OPT_INTS } cl_OptionType;
typedef struct cl_NamedOption {
  const char *name;
  cl_OptionType type;
  const char *flag;
  const char *on_false;
} cl_NamedOption;
/* Append to the list at index list the flags of the options o[0..n) given
 * in the option table at opti, type-checked. */
void cl_add_named_options(lua_State *L, int opti, int list, const cl_NamedOption *o, size_t n);

/* "sm_XY": the option 'arch' of the table at opti, pushed ("90" means
 * "sm_90"), else the current device's; raises, naming who needs it
 * (cuda.Program, cuda.Linker), when there is none. */
const char *cl_push_arch(lua_State *L, int opti, const char *who);

/* --- the program cache (cache.c) ------------------------------------------ */

#define CL_HASH_SIZE 32
#define CL_CACHE_PATH_MAX 4096

/* SHA-256 of data, and bytes as lowercase hex (out holds 2n + 1). */
void cl_sha256(const void *data, size_t len, unsigned char out[CL_HASH_SIZE]);
void cl_hex(const unsigned char *bytes, size_t n, char *out);

typedef struct cl_CacheStats {
  lua_Integer hits, misses, writes, corrupt, errors, evictions;
} cl_CacheStats;

typedef struct cl_ProgramCache {
  int closed;
  lua_Integer max_size;         /* bytes; 0 for no limit */
  cl_CacheStats stats;
  char dir[CL_CACHE_PATH_MAX];
} cl_ProgramCache;

typedef struct cl_CacheEntry {
  int kind;
  const char *code, *log, *names;
  size_t code_len, log_len, names_len;
} cl_CacheEntry;

/* The automatic cache (CUDALUA_CACHE...), NULL when it is off. */
cl_ProgramCache *cl_default_cache(void);
cl_ProgramCache *cl_opt_program_cache(lua_State *L, int i);   /* NULL for nil */
/* On a hit, push the code, the log and the names ("expr\0lowered\0"...)
 * and return the kind; else push nothing and return -1. Never raises but
 * for memory. */
int cl_cache_get(lua_State *L, cl_ProgramCache *c, const char *key, size_t key_len);
/* Store an entry; failures are counted in the stats, never raised. */
void cl_cache_put(cl_ProgramCache *c, const char *key, size_t key_len, const cl_CacheEntry *e);
/* The same from the stack: key, code, log strings, names table or nil. */
void cl_cache_put_lua(lua_State *L, cl_ProgramCache *c, int keyi, int codei, int kind,
                      int logi, int namesi);
/* Push the names table a names string stands for. */
void cl_push_names_table(lua_State *L, const char *s, size_t n);

/* --- reading files (file.c) ---------------------------------------------- */

/* Read a regular file into a new userdata on the stack; NULL with errno. */
void *cl_push_file(lua_State *L, const char *path, size_t limit, size_t *size);
/* The folder that holds scripts/ and kernels/: $(pkgdatadir) when
 * installed; the interpreter points it at the source tree when it runs from
 * the build tree. */
extern const char *cl_datadir;
/* The nbytes-byte little-endian unsigned integer at p (file formats). */
static inline uint64_t cl_load_le(const unsigned char *p, int nbytes)
{
  uint64_t v = 0;
  for (int i = nbytes - 1; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

/* --- the module (cuda.c) ------------------------------------------------ */


/* Each file registers its types and module functions into the table on
 * the top of the stack. */
void cl_open_device(lua_State *L);
void cl_open_stream(lua_State *L);
void cl_open_memory(lua_State *L);
void cl_open_buffer(lua_State *L);
void cl_open_view(lua_State *L);
void cl_open_view_math(lua_State *L);   /* the bulk methods of cuda.View (view_math.c) */
void cl_open_copy(lua_State *L);        /* copy_to, copy_from of buffers and views (copy.c) */
void cl_open_copy_batch(lua_State *L);
void cl_open_dtype(lua_State *L);
void cl_open_program(lua_State *L);
void cl_open_module(lua_State *L);
void cl_open_cache(lua_State *L);
void cl_open_linker(lua_State *L);
void cl_open_launch(lua_State *L);
void cl_open_graph(lua_State *L);
void cl_open_term(lua_State *L);
void cl_open_ipc(lua_State *L);
void cl_open_array(lua_State *L);
void cl_open_texture(lua_State *L);
void cl_open_vmm(lua_State *L);
void cl_open_tensormap(lua_State *L);
/* cuda.StridedMemoryView, cuda.from_dlpack, v:to_dlpack (view_foreign.c, dlpack.c) */
void cl_open_foreign(lua_State *L);
void cl_open_dlpack(lua_State *L);      /* v:to_dlpack, cuda.from_dlpack (dlpack.c) */
void cl_open_host_register(lua_State *L);
void cl_open_hold(lua_State *L);      /* cuda.hold_begin, cuda.hold_end (hold.c) */
/* cuda.launch's hook (tensormap.c): for a cuda.TensorMap (metatable mt,
 * userdata ud) its 128-byte descriptor, and in *buf the buffer it encodes
 * (NULL when the map is closed); NULL for any other value. Runs no Lua
 * but to raise for a map made before its buffer moved (buf:grow). */
const void *cl_tensormap_arg(lua_State *L, const void *mt, void *ud, cl_Buffer **buf);
/* A virtual-memory resource's buffers (vmm.c): its cl_MROps allocate
 * them, lifetimes.c frees them (cl_open_vmm registers cl_vmm_free);
 * cl_vmm_free never raises and waits for nothing (the caller synchronized). */
void cl_vmm_free(CUdeviceptr p);
/* PinnedMemoryResource's numa_id option (memory.c; vmm.c reads it too) of the table at idx: the node
 * (>= 0; it makes the resource a pool: *pooled is set, and pool = false
 * with it is an error), or -1 when absent. */
int cl_numa_option(lua_State *L, int idx, int *pooled);

/* --- devices, graphs and green contexts at cuda.core's level -------------- */

/* Every CUdevice_attribute under its cuda.core name, NULL-terminated;
 * generated from cuda.h by src/device_props.awk (device_props.c). */
typedef struct cl_DeviceProperty {
  const char *name;
  CUdevice_attribute attr;
} cl_DeviceProperty;
extern const cl_DeviceProperty cl_device_properties[];

/* Check kernel arguments first .. first + nargs - 1 against k's parameters
 * and pack them for device d, as cuda.launch does (launch.c). Only for
 * functions registered through cl_setfuncs (it compares metatables with
 * the upvalues). */
void cl_pack_kernel_args(lua_State *L, cl_Kernel *k, int first, int nargs, cl_Device *d,
                         uint64_t storage[CL_MAX_PARAMS], void *params[CL_MAX_PARAMS]);
/* The grid, block and shmem of the cuda.LaunchConfig at i, for a kernel node. */
void cl_check_node_config(lua_State *L, int i, CUDA_KERNEL_NODE_PARAMS *p);

/* An executable graph (graph.c): cl_push_graph pushes one that is closed
 * until cl_graph_instantiate (which allocates nothing) makes the graph at
 * gi an executable of graph, which it destroys on close only when
 * owns_graph; the value at refs (0 for none) is kept alive with it: what
 * the graph's nodes use. */
void cl_push_graph(lua_State *L);
void cl_graph_instantiate(lua_State *L, int gi, CUgraph graph, int owns_graph, int devi, int refs,
                          unsigned long long flags);
/* What a cuda.Graph asks of the graph it was instantiated from when that
 * is built or defined above graph.c (a cuda.GraphBuilder, graph_builder.c;
 * a cuda.GraphDefinition, graph_def.c): the graph of the open one at i and
 * its device, for g:update (raises for a closed one); and that one of its
 * executables was closed (once it is closed too and none is left, what its
 * nodes use may go; runs no Lua). Each type registers its own. */
typedef struct cl_GraphSource {
  CUgraph (*graph)(lua_State *L, int i, cl_Device **dev);
  void (*exec_closed)(lua_State *L, int i);
} cl_GraphSource;
void cl_graph_source_register(lua_State *L, const char *tname, const cl_GraphSource *source);
/* The flags of the instantiate options at idx, whose names were checked. */
unsigned long long cl_instantiate_flags(lua_State *L, int idx);
/* Green contexts and graphs (context.c): a graph captured on a stream of a
 * green context is instantiated with that context current, launches only on
 * that context's streams, and keeps the context from being destroyed until
 * the graph is closed (ctx:close() then waits for its last graph). */
void cl_green_activate(lua_State *L, void *green);
/* Make current the context a stream's work runs in: its green context's,
 * else its device's primary. Calls that check pointers in the current
 * context (cuMemcpyBatchAsync) or act in it (instantiation) need it. */
void cl_stream_activate(lua_State *L, const cl_Stream *s);
int cl_green_is_closed(const void *green);
void cl_green_graph_opened(void *green);
void cl_green_graph_closed(void *green);

/* cuda.Graph() options of instantiate: a CUgraphInstantiate_flags mask. */
unsigned long long cl_check_instantiate_options(lua_State *L, int idx);
/* The executable of the open cuda.Graph at i. */
CUgraphExec cl_graph_exec(lua_State *L, int i);
void cl_open_graph_builder(lua_State *L);
/* The graph of the open definition at i, its device and green context
 * (NULL for none), for b:child (and its cl_GraphSource); raises for a
 * closed one. */
CUgraph cl_graphdef_graph(lua_State *L, int i, cl_Device **dev, void **green);
/* What in the open definition at i (at any depth of child graphs) cuda.h
 * restricts in a child graph: a mask of CL_DEF_EVENTS (event record or
 * wait nodes) and CL_DEF_CONDITIONAL (conditional nodes). Raises the
 * driver's errors; runs no Lua otherwise. */
#define CL_DEF_EVENTS 1
#define CL_DEF_CONDITIONAL 2
unsigned cl_graphdef_restrictions(lua_State *L, int i);
/* The executable at gi runs in the green context green (its handle at
 * ctxi), which it keeps alive and counts (graph.c). */
void cl_graph_set_green(lua_State *L, int gi, void *green, int ctxi);
void cl_open_graph_def(lua_State *L);
/* Whether the capture refs (a cuda.GraphRefs at hi) allocated graph memory
 * that the program frees (no free node): launches of its graph then go
 * through cl_graph_memory_launch (check = 1, before cuGraphLaunch: raises
 * when that memory is not free to allocate again; 2: the same, where the
 * launch frees the last one's memory itself (auto_free_on_launch); 0,
 * after it: the buffers own the new allocation, freed on s at si). Run no
 * Lua except the raise. */
int cl_graph_memory_left(lua_State *L, int hi);
void cl_graph_memory_launch(lua_State *L, int hi, int si, int check);
void cl_open_graph_memory(lua_State *L);

/* Stream options (non_blocking, priority) at opts for d: the priority,
 * clamped into the device's range (stream.c). */
int cl_check_stream_options(lua_State *L, int opts, cl_Device *d, int *non_blocking);
/* Push a cuda.Stream of the device at devi that is closed until its maker
 * creates s->handle and sets closed = 0; it keeps the value at owneri (0
 * for none) alive: a green context keeps its streams' context. */
cl_Stream *cl_push_new_stream(lua_State *L, int devi, int owneri, int priority, int non_blocking);
void cl_open_context(lua_State *L);

int luaopen_cuda(lua_State *L);

/* --- who keeps what alive (lifetimes.c) ------------------------------------ */

/* What a graph uses, kept alive and counted: a cuda.GraphRefs holds a set
 * of buffers, kernels and events; each counts in its buffer's (or
 * ObjectCode's, or event's) graph_refs until the holder is released, when
 * its graph is closed or the holder collected. A capture fills one as operations
 * are issued on its streams; a cuda.Graph() builder as nodes are added. */
#define CL_GRAPHREFS "cuda.GraphRefs"
typedef struct cl_GraphRefs {
  int released;                 /* the counts were given back */
  int capturing;                /* a capture still adds to it */
  const cl_Stream *origin;      /* the stream whose capture fills it, or NULL */
  int counted;                  /* its capture counts in cl_captures_in_flight */
} cl_GraphRefs;                 /* user value 1: the set {[value] = true} */
void cl_push_graph_refs(lua_State *L);
/* Add the value at vi (buffers, kernels and events count; a graph or a
 * GraphRefs adds what it holds; anything else is ignored) to the holder
 * at hi. Runs no Lua. */
void cl_graph_refs_add(lua_State *L, int hi, int vi);
/* Give back the counts of the GraphRefs at hi: nothing on the GPU uses
 * what it holds any more. */
void cl_graph_refs_release(lua_State *L, int hi);
/* The stream s (at si) records into the capture whose GraphRefs is at hi
 * (0: into none). */
void cl_capture_set(lua_State *L, cl_Stream *s, int si, int hi);
/* The stream s at si is being closed (stream.c): an unfinished capture it
 * began releases what it captured. Returns that capture's GraphRefs (kept
 * by the stream) or NULL: cl_capture_ended is due for it once the stream
 * is destroyed. */
cl_GraphRefs *cl_capture_stream_closed(lua_State *L, cl_Stream *s, int si);
/* Operations on a capturing stream s (at si) keep values first..last. */
void cl_capture_keep(lua_State *L, cl_Stream *s, int si, int first, int last);
/* ev (at evi) was recorded on the capturing s (at si), and s (at si) waits
 * on what is at wi (an event or a stream) that belongs to a capture: it joins. */
void cl_capture_record(lua_State *L, cl_Event *ev, int evi, int si);
void cl_capture_join(lua_State *L, int si, int wi);
/* Each noun registers, when cuda opens, how lifetimes.c gives back what a
 * graph kept of it: a buffer (buffer.c), an event (stream.c), a kernel's
 * ObjectCode (module.c); graph_user counts arrays, textures and surfaces
 * (texture.c's cl_graph_user). */
void cl_lifetimes_buffer(void (*graph_release)(cl_Buffer *b));
void cl_lifetimes_event(void (*graph_release)(cl_Event *ev));
void cl_lifetimes_objectcode(void (*graph_release)(cl_ObjectCode *o));
void cl_lifetimes_graph_user(int (*user)(lua_State *L, int i, int delta));
/* Releases that may wait for the GPU: made now, or deferred while a host
 * function is outstanding (the driver may wait for it there). Never raise:
 * they run in finalizers. cl_release's pool is the pool, library, array or
 * cl_Foreign that the op gives back (ptr, for memory: its address). */
typedef enum { CL_FREE_SYNCED, CL_FREE_MANAGED, CL_FREE_PLAIN, CL_FREE_PINNED, CL_CLOSE_IPC,
               CL_DESTROY_POOL, CL_FREE_VIRTUAL, CL_UNLOAD_LIBRARY, CL_DESTROY_ARRAY,
               CL_RELEASE_FOREIGN, CL_DESTROY_GRAPH_EXEC, CL_DESTROY_GRAPH,
               CL_FREE_GRAPH_MEMORY } cl_ReleaseOp;
void cl_release(cl_ReleaseOp op, CUcontext ctx, CUdeviceptr p, CUmemoryPool pool);
void cl_library_release(CUlibrary lib);
void cl_array_release(CUcontext ctx, CUarray array);
void cl_graph_exec_release(CUgraphExec exec);
void cl_graph_release(CUgraph graph);
/* Stream captures in flight (begun by s:begin_capture, not yet ended or
 * abandoned). While there are any, every release is deferred: the driver
 * counts frees, destroys and synchronizes made during a capture as
 * "potentially unsafe" and invalidates the capture. cl_capture_begun
 * counts the capture whose GraphRefs is r after cuStreamBeginCapture;
 * cl_capture_ended, after its cuStreamEndCapture or cuStreamDestroy (or
 * when r is collected), uncounts it once, whichever path comes first, and
 * makes the deferred releases when it was the last. Neither raises nor
 * runs Lua. */
extern _Atomic int cl_captures_in_flight;
void cl_capture_begun(cl_GraphRefs *r);
void cl_capture_ended(cl_GraphRefs *r);
/* vmm.c registers how a virtual-memory buffer is freed (cl_vmm_free). */
void cl_lifetimes_vmm_free(void (*free_virtual)(CUdeviceptr p));
/* memory.c hears of each pool destroyed (made, not deferred): until then
 * its shared pools are its own, which cuda.ipc_pool_open refuses. */
void cl_lifetimes_pool_destroyed(void (*destroyed)(CUmemoryPool pool));
void cl_open_lifetimes(lua_State *L);

/* cuda.nvtx (nvtx.c) and cuda.set_affinity/get_affinity (affinity.c) */
void cl_open_nvtx(lua_State *L);
void cl_open_affinity(lua_State *L);

#endif
