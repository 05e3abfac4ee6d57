/* SPDX-License-Identifier: MIT */
/* memory.c: device, pinned and managed memory, pools, copies and fills.
 *
 * Every allocation is its own malloc'd block of exactly the size asked for,
 * and its CUdeviceptr is the host address (unified addressing): cudalua's
 * views read device memory directly, and ASan sees every overflow. Pools are
 * bookkeeping only: used and reserved bytes, a release threshold.
 *
 * cuMemAlloc's memory is a memfd mapped shared instead, so that CUDA IPC
 * works between processes of one host: a handle names the exporter's pid
 * and descriptor, and cuIpcOpenMemHandle maps /proc/PID/fd/FD. A freed
 * allocation's address and descriptor number come back for the next one of
 * its size, as a GPU reuses addresses: whoever caches a mapping by address
 * sees the old memory. FAKECUDA_IPC=refuse makes cuIpcOpenMemHandle fail
 * (CUDA_ERROR_NOT_SUPPORTED), as a driver without IPC does.
 *
 * A pool made with POSIX file-descriptor handles allocates memfds the same
 * way. Its shareable handle is a memfd holding the exporter's pid and the
 * pool's identity; a pointer's export data names the pool, the pid, the
 * allocation's descriptor and size. cuMemPoolImportPointer maps it only
 * through a pool imported from that same pool's handle, as the driver
 * refuses a pointer of another pool. */
#define _GNU_SOURCE   /* memfd_create */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake.h"

struct CUmemPoolHandle_st {
  int is_default;
  int exportable;          /* made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
  int shared;              /* its handle exported: only then are its pointers (as the H200's driver) */
  int imported_pid;        /* imported: the exporter's pid and its pool, else 0 */
  unsigned access;         /* devices granted access (cuMemPoolSetAccess), bit = ordinal */
  uint64_t imported_id;
  cuuint64_t threshold, used, used_high, reserved, reserved_high;
};

struct Allocation {
  struct Allocation *next;
  void *p;
  size_t size;
  CUmemoryPool pool;       /* NULL: not from a pool */
  int host;                /* cuMemHostAlloc: freed by cuMemFreeHost */
  int fd;                  /* cuMemAlloc's memfd, else -1 */
  int opened;              /* mapped by cuIpcOpenMemHandle: unmapped by cuIpcCloseMemHandle */
};

static struct Allocation *allocations;
static CUmemoryPool shareable[64];   /* live pools made with POSIX descriptors: this process's own */
static size_t allocated;
static struct CUmemPoolHandle_st default_pools[FAKE_MAX_DEVICES];

size_t fake_allocated_bytes(void) { return allocated; }

/* The one check of the device's memory: allocations and arrays alike. */
int fake_reserve_device_bytes(size_t n)
{
  if (n > FAKE_TOTAL_MEM - allocated)
    return 0;
  allocated += n;
  return 1;
}

void fake_release_device_bytes(size_t n) { allocated -= n; }

static CUresult track(void **out, size_t n, CUmemoryPool pool, int host)
{
  if (n == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (!fake_reserve_device_bytes(n))
    return CUDA_ERROR_OUT_OF_MEMORY;
  struct Allocation *a = malloc(sizeof *a);
  void *p = malloc(n);
  if (!a || !p) {
    free(a);
    free(p);
    fake_release_device_bytes(n);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *a = (struct Allocation){allocations, p, n, pool, host, -1, 0};
  allocations = a;
  fake_live[FAKE_ALLOC]++;
  *out = p;
  return CUDA_SUCCESS;
}

/* Unlink the allocation at p (of the given host-ness); NULL if none. */
static struct Allocation *untrack(void *p, int host)
{
  for (struct Allocation **a = &allocations; *a; a = &(*a)->next)
    if ((*a)->p == p && (*a)->host == host) {
      struct Allocation *found = *a;
      *a = found->next;
      allocated -= found->size;
      fake_live[FAKE_ALLOC]--;
      return found;
    }
  return NULL;
}

static CUresult release(void *p, int host)
{
  struct Allocation *a = untrack(p, host);
  if (!a)
    return CUDA_ERROR_INVALID_VALUE;
  if (a->opened) {   /* cuMemFree of an IPC mapping: the driver refuses it */
    a->next = allocations;
    allocations = a;
    allocated += a->size;
    fake_live[FAKE_ALLOC]++;
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (a->pool)
    a->pool->used -= a->size;
  if (a->fd >= 0) {
    munmap(a->p, a->size);
    close(a->fd);
  } else
    free(a->p);
  free(a);
  return CUDA_SUCCESS;
}

/* A shared mapping of fd's n bytes, tracked like any allocation. */
static CUresult track_mapping(void **out, int fd, size_t n, int opened)
{
  if (!fake_reserve_device_bytes(n))
    return CUDA_ERROR_OUT_OF_MEMORY;
  struct Allocation *a = malloc(sizeof *a);
  void *p = a ? mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (p == MAP_FAILED) {
    free(a);
    fake_release_device_bytes(n);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *a = (struct Allocation){allocations, p, n, NULL, 0, opened ? -1 : fd, opened};
  allocations = a;
  fake_live[FAKE_ALLOC]++;
  *out = p;
  return CUDA_SUCCESS;
}

/* n bytes of a memfd mapped shared: memory another process can map. */
static CUresult alloc_memfd(void **p, size_t n)
{
  if (n == 0)
    return CUDA_ERROR_INVALID_VALUE;
  int fd = memfd_create("fakecuda", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)n) != 0) {
    if (fd >= 0)
      close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult r = track_mapping(p, fd, n, 0);
  if (r != CUDA_SUCCESS)
    close(fd);
  return r;
}

CUresult fake_cuMemAlloc(CUdeviceptr *dptr, size_t n)
{
  FAKE_ENTER(cuMemAlloc);
  void *p = NULL;
  if (!dptr)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = alloc_memfd(&p, n);
  if (r == CUDA_SUCCESS)
    *dptr = (CUdeviceptr)(uintptr_t)p;
  return r;
}

static struct Allocation *containing(CUdeviceptr ptr)
{
  for (struct Allocation *a = allocations; a; a = a->next)
    if (!a->host && ptr >= (uintptr_t)a->p && ptr < (uintptr_t)a->p + a->size)
      return a;
  return NULL;
}

/* The bytes from p to the end of the memory it lies in, for the emulated
 * kernels (launch.c): a tracked allocation's, else virtual memory's
 * (vmm.c), SIZE_MAX for memory the fake does not know (a host's own). */
size_t fake_room(uintptr_t p)
{
  for (struct Allocation *a = allocations; a; a = a->next)
    if (p >= (uintptr_t)a->p && p < (uintptr_t)a->p + a->size)
      return (uintptr_t)a->p + a->size - p;
  return fake_vmm_room(p);
}

CUresult fake_cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr ptr)
{
  FAKE_ENTER(cuMemGetAddressRange);
  struct Allocation *a = containing(ptr);
  if (!a)
    return CUDA_ERROR_NOT_FOUND;
  if (base)
    *base = (CUdeviceptr)(uintptr_t)a->p;
  if (size)
    *size = a->size;
  return CUDA_SUCCESS;
}

/* FAKECUDA_IPC=refuse: a driver without IPC. */
static int ipc_refused(void)
{
  const char *mode = getenv("FAKECUDA_IPC");
  return mode && strcmp(mode, "refuse") == 0;
}

/* Another descriptor of the memfd another process exported. */
static int open_exported(int pid, int fd)
{
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, fd);
  return open(path, O_RDWR | O_CLOEXEC);
}

/* The handle's bytes: a tag, then the exporter's pid, descriptor and size. */
struct fake_IpcHandle { char tag[8]; int pid, fd; size_t size; };

CUresult fake_cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr ptr)
{
  FAKE_ENTER(cuIpcGetMemHandle);
  struct Allocation *a = containing(ptr);
  if (!handle || !a || (uintptr_t)a->p != ptr || a->fd < 0 || a->pool)
    return CUDA_ERROR_INVALID_VALUE;   /* pool, managed or opened memory, or not a base */
  struct fake_IpcHandle h = {"fakeipc", (int)getpid(), a->fd, a->size};
  memset(handle, 0, sizeof *handle);
  memcpy(handle, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult fake_cuIpcOpenMemHandle(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags)
{
  FAKE_ENTER(cuIpcOpenMemHandle);
  struct fake_IpcHandle h;
  memcpy(&h, &handle, sizeof h);
  if (!dptr || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS || memcmp(h.tag, "fakeipc", 8) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (ipc_refused())
    return CUDA_ERROR_NOT_SUPPORTED;
  if (h.pid == (int)getpid())
    return CUDA_ERROR_INVALID_CONTEXT;   /* a process cannot open its own handles */
  int fd = open_exported(h.pid, h.fd);
  if (fd < 0)
    return CUDA_ERROR_INVALID_HANDLE;
  void *p = NULL;
  CUresult r = track_mapping(&p, fd, h.size, 1);
  close(fd);
  if (r == CUDA_SUCCESS)
    *dptr = (CUdeviceptr)(uintptr_t)p;
  return r;
}

CUresult fake_cuIpcCloseMemHandle(CUdeviceptr ptr)
{
  FAKE_ENTER(cuIpcCloseMemHandle);
  for (struct Allocation **a = &allocations; *a; a = &(*a)->next)
    if ((uintptr_t)(*a)->p == ptr && (*a)->opened) {
      struct Allocation *found = *a;
      *a = found->next;
      allocated -= found->size;
      fake_live[FAKE_ALLOC]--;
      munmap(found->p, found->size);
      free(found);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}

static void pool_grow(CUmemoryPool pool, size_t n)
{
  pool->used += n;
  if (pool->used > pool->used_high)
    pool->used_high = pool->used;
  if (pool->used > pool->reserved)
    pool->reserved = pool->used;
  if (pool->reserved > pool->reserved_high)
    pool->reserved_high = pool->reserved;
}

CUresult fake_cuMemGetInfo(size_t *free_bytes, size_t *total)
{
  FAKE_ENTER(cuMemGetInfo);
  *free_bytes = FAKE_TOTAL_MEM - allocated;
  *total = FAKE_TOTAL_MEM;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d)
{
  FAKE_ENTER(cuDeviceGetDefaultMemPool);
  if (d < 0 || d >= fake_device_count())
    return CUDA_ERROR_INVALID_DEVICE;
  default_pools[d].is_default = 1;
  *pool = &default_pools[d];
  return CUDA_SUCCESS;
}

CUresult fake_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
  FAKE_ENTER(cuMemPoolCreate);
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      (props->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && props->location.id != 0))
    return CUDA_ERROR_INVALID_VALUE;   /* one host NUMA node: 0 */
  if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
      props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return CUDA_ERROR_NOT_SUPPORTED;
  *pool = calloc(1, sizeof **pool);
  if (!*pool)
    return CUDA_ERROR_OUT_OF_MEMORY;
  (*pool)->exportable = props->handleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  for (size_t i = 0; (*pool)->exportable && i < sizeof shareable / sizeof *shareable; i++)
    if (!shareable[i]) {
      shareable[i] = *pool;
      break;
    }
  fake_keep(*pool);
  fake_live[FAKE_POOL]++;
  return CUDA_SUCCESS;
}

/* Allocations still out keep their memory; they just no longer count. */
CUresult fake_cuMemPoolDestroy(CUmemoryPool pool)
{
  FAKE_ENTER(cuMemPoolDestroy);
  fake_capture_unsafe();
  if (!pool || pool->is_default)
    return CUDA_ERROR_INVALID_VALUE;
  for (struct Allocation *a = allocations; a; a = a->next)
    if (a->pool == pool)
      a->pool = NULL;
  for (size_t i = 0; i < sizeof shareable / sizeof *shareable; i++)
    if (shareable[i] == pool)
      shareable[i] = NULL;
  fake_unkeep(pool);
  free(pool);
  fake_live[FAKE_POOL]--;
  return CUDA_SUCCESS;
}

static cuuint64_t *pool_counter(CUmemoryPool pool, CUmemPool_attribute a)
{
  switch (a) {
  case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: return &pool->threshold;
  case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: return &pool->reserved;
  case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: return &pool->reserved_high;
  case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: return &pool->used;
  case CU_MEMPOOL_ATTR_USED_MEM_HIGH: return &pool->used_high;
  default: return NULL;    /* the int-valued reuse flags */
  }
}

CUresult fake_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *value)
{
  FAKE_ENTER(cuMemPoolSetAttribute);
  cuuint64_t *c = pool ? pool_counter(pool, a) : NULL;
  if (!pool)
    return CUDA_ERROR_INVALID_VALUE;
  if (c && a != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD && *(cuuint64_t *)value != 0)
    return CUDA_ERROR_INVALID_VALUE;   /* high-water marks may only be reset */
  if (c && a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
    *c = *(cuuint64_t *)value;
  else if (c)
    *c = a == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? pool->used : pool->reserved;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *value)
{
  FAKE_ENTER(cuMemPoolGetAttribute);
  if (!pool)
    return CUDA_ERROR_INVALID_VALUE;
  cuuint64_t *c = pool_counter(pool, a);
  if (c)
    *(cuuint64_t *)value = *c;
  else
    *(int *)value = 1;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
  FAKE_ENTER(cuMemPoolSetAccess);
  for (size_t i = 0; i < count; i++)
    if (map[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
        map[i].location.id >= fake_device_count())
      return CUDA_ERROR_INVALID_DEVICE;
  if (!pool)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; i++)
    if (map[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && map[i].location.id < 32)
      pool->access |= 1u << map[i].location.id;
  return CUDA_SUCCESS;
}

/* An imported pool is accessible from its own device (the fake's device
 * 0) and those granted; every other pool from every device. */
CUresult fake_cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *where)
{
  FAKE_ENTER(cuMemPoolGetAccess);
  if (!flags || !pool || !where || where->type != CU_MEM_LOCATION_TYPE_DEVICE ||
      where->id < 0 || where->id >= fake_device_count())
    return CUDA_ERROR_INVALID_VALUE;
  int granted = where->id == 0 || (where->id < 32 && (pool->access >> where->id & 1));
  *flags = !pool->imported_pid || granted ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
  FAKE_ENTER(cuMemPoolTrimTo);
  if (!pool)
    return CUDA_ERROR_INVALID_VALUE;
  if (pool->reserved > keep)
    pool->reserved = pool->used > keep ? pool->used : keep;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t n, CUmemoryPool pool,
                                      CUstream s)
{
  FAKE_ENTER(cuMemAllocFromPoolAsync);
  void *p = NULL;
  if (!pool || !fake_stream_valid(s) || pool->imported_pid)
    return CUDA_ERROR_INVALID_VALUE;   /* imported pools allocate nothing */
  CUresult r = pool->exportable ? alloc_memfd(&p, n) : track(&p, n, pool, 0);
  if (r == CUDA_SUCCESS && pool->exportable)
    containing((CUdeviceptr)(uintptr_t)p)->pool = pool;
  if (r == CUDA_SUCCESS) {
    pool_grow(pool, n);
    *dptr = (CUdeviceptr)(uintptr_t)p;
  }
  return r;
}

CUresult fake_cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
  FAKE_ENTER(cuMemFreeAsync);
  if (!fake_stream_valid(s))
    return CUDA_ERROR_INVALID_HANDLE;
  if (s == NULL || s == CU_STREAM_LEGACY)   /* the legacy stream waits for capturing streams */
    fake_capture_unsafe();
  if (fake_graph_mem_owns(p))
    return fake_graph_mem_free(p, s);
  return release((void *)(uintptr_t)p, 0);
}

CUresult fake_cuMemFree(CUdeviceptr p)
{
  FAKE_ENTER(cuMemFree);
  fake_capture_unsafe();
  fake_host_wait();              /* a free may wait for the device, so for host functions */
  if (fake_ctx_usable() != CUDA_SUCCESS)
    return fake_ctx_usable();
  return release((void *)(uintptr_t)p, 0);
}

CUresult fake_cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned int flags)
{
  FAKE_ENTER(cuMemAllocManaged);
  void *p = NULL;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = track(&p, n, NULL, 0);
  if (r == CUDA_SUCCESS)
    *dptr = (CUdeviceptr)(uintptr_t)p;
  return r;
}

CUresult fake_cuMemHostAlloc(void **p, size_t n, unsigned int flags)
{
  FAKE_ENTER(cuMemHostAlloc);
  (void)flags;
  return track(p, n, NULL, 1);
}

CUresult fake_cuMemFreeHost(void *p)
{
  FAKE_ENTER(cuMemFreeHost);
  fake_capture_unsafe();
  fake_host_wait();              /* a free may wait for the device, so for host functions */
  if (fake_ctx_usable() != CUDA_SUCCESS)
    return fake_ctx_usable();
  return release(p, 1);
}

/* Copies and fills are stream work: done now, or recorded while capturing. */
/* What the fake knows of p: DEVICE memory (an allocation, or virtual
 * memory), PINNED host memory (cuMemHostAlloc's, or registered), or
 * nothing: PAGEABLE host memory. */
enum { PAGEABLE, DEVICE, PINNED };
static int memory_kind(CUdeviceptr p)
{
  unsigned flags;
  uintptr_t base;
  size_t size;
  for (struct Allocation *a = allocations; a; a = a->next)
    if (p >= (uintptr_t)a->p && p < (uintptr_t)a->p + a->size)
      return a->host ? PINNED : DEVICE;
  if (fake_vmm_room(p) != SIZE_MAX)
    return DEVICE;
  return fake_host_registered(p, &flags, &base, &size) ? PINNED : PAGEABLE;
}

CUresult fake_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
  FAKE_ENTER(cuMemcpyAsync);
  if (fake_vmm_faults(dst, n, 1) || fake_vmm_faults(src, n, 0))
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  /* The driver finishes a copy into pageable memory, or host to host,
   * before it returns: after the stream's earlier work, host functions too.
   * A captured one only becomes a node. */
  int to = memory_kind(dst);
  if (!fake_stream_capturing(s) && (to == PAGEABLE || (to == PINNED && memory_kind(src) != DEVICE)))
    fake_host_wait();
  struct fake_Work w;
  fake_memcpy_item(&w, dst, src, n);
  return fake_submit(s, &w);
}

/* The attributes of the last batch, each copy's as its run gave it
 * (fakecuda.last_batch), for tests of per-copy options. */
struct fake_BatchRecord fake_last_batch;

static void record_batch(const CUmemcpyAttributes *attrs, const size_t *idxs, size_t nattrs,
                         size_t count)
{
  fake_last_batch.count = count < FAKE_BATCH_RECORD ? count : FAKE_BATCH_RECORD;
  fake_last_batch.nattrs = nattrs;
  for (size_t k = 0, run = 0; k < fake_last_batch.count; k++) {
    while (run + 1 < nattrs && idxs[run + 1] <= k)
      run++;
    fake_last_batch.attrs[k] = attrs[run];
  }
}

/* A batch is its copies in order, each stream work as cuMemcpyAsync's is;
 * the arguments are checked first, as the driver documents them. */
CUresult fake_cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                                 CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                                 CUstream s)
{
  FAKE_ENTER(cuMemcpyBatchAsync);
  if (count == 0 || !dsts || !srcs || !sizes || !attrs || !attrsIdxs || numAttrs == 0 ||
      numAttrs > count || attrsIdxs[0] != 0 || s == CU_STREAM_LEGACY)
    return CUDA_ERROR_INVALID_VALUE;
  if (fake_stream_capturing(s))   /* no graph node form: what the H200's driver answers */
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (fake_stream_valid(s) && !fake_stream_in_current_ctx(s))
    return CUDA_ERROR_INVALID_CONTEXT;
  if (fake_stream_valid(s) && fake_stream_green(s))   /* the real one's SIGSEGV, as an error */
    return CUDA_ERROR_NOT_SUPPORTED;
  for (size_t k = 0; k < numAttrs; k++) {
    CUmemcpySrcAccessOrder o = attrs[k].srcAccessOrder;
    if (o != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM && o != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
        o != CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
      return CUDA_ERROR_INVALID_VALUE;
    if (k > 0 && (attrsIdxs[k] <= attrsIdxs[k - 1] || attrsIdxs[k] >= count))
      return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t k = 0; k < count; k++)
    if (sizes[k] == 0)
      return CUDA_ERROR_INVALID_VALUE;
  for (size_t k = 0; k < count; k++)
    if (fake_vmm_faults(dsts[k], sizes[k], 1) || fake_vmm_faults(srcs[k], sizes[k], 0))
      return CUDA_ERROR_ILLEGAL_ADDRESS;
  record_batch(attrs, attrsIdxs, numAttrs, count);
  for (size_t k = 0; k < count; k++) {
    struct fake_Work w;
    fake_memcpy_item(&w, dsts[k], srcs[k], sizes[k]);
    CUresult r = fake_submit(s, &w);
    if (r != CUDA_SUCCESS)
      return r;
  }
  return CUDA_SUCCESS;
}

void fake_memcpy_item(struct fake_Work *w, CUdeviceptr dst, CUdeviceptr src, size_t n)
{
  *w = (struct fake_Work){.kind = WORK_MEMCPY};
  w->u.memcpy.dst = (void *)(uintptr_t)dst;
  w->u.memcpy.src = (const void *)(uintptr_t)src;
  w->u.memcpy.n = n;
}

CUresult fake_memset_item(struct fake_Work *w, CUdeviceptr dst, unsigned value, unsigned elem,
                          size_t count)
{
  if ((elem != 1 && elem != 2 && elem != 4) || dst % elem)
    return CUDA_ERROR_INVALID_VALUE;
  *w = (struct fake_Work){.kind = WORK_MEMSET};
  w->u.memset.dst = (void *)(uintptr_t)dst;
  w->u.memset.value = value;
  w->u.memset.elem = elem;
  w->u.memset.count = count;
  return CUDA_SUCCESS;
}

static CUresult memset_work(CUdeviceptr dst, unsigned value, unsigned elem, size_t count,
                            CUstream s)
{
  if (fake_vmm_faults(dst, count * elem, 1))
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  struct fake_Work w;
  CUresult r = fake_memset_item(&w, dst, value, elem, count);
  return r != CUDA_SUCCESS ? r : fake_submit(s, &w);
}

CUresult fake_cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s)
{
  FAKE_ENTER(cuMemsetD8Async);
  return memset_work(dst, v, 1, n, s);
}

CUresult fake_cuMemsetD16Async(CUdeviceptr dst, unsigned short v, size_t n, CUstream s)
{
  FAKE_ENTER(cuMemsetD16Async);
  return memset_work(dst, v, 2, n, s);
}

CUresult fake_cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream s)
{
  FAKE_ENTER(cuMemsetD32Async);
  return memset_work(dst, v, 4, n, s);
}

/* The fill itself, shared by issue and graph replay: one element, then
 * doubling copies, fast enough for 64 MiB fills under ASan. */
void fake_memset_run(void *dst, unsigned value, unsigned elem, size_t count)
{
  unsigned char *p = dst;
  size_t total = count * elem, done = count ? elem : 0;
  if (count)
    memcpy(p, &value, elem);   /* little-endian: the low elem bytes */
  while (done < total) {
    size_t n = done < total - done ? done : total - done;
    memcpy(p + done, p, n);
    done += n;
  }
}

CUresult fake_cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags,
                                 CUstream s)
{
  FAKE_ENTER(cuMemPrefetchAsync);
  (void)p; (void)n; (void)flags;
  if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && loc.id >= fake_device_count())
    return CUDA_ERROR_INVALID_DEVICE;
  return fake_stream_valid(s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

struct fake_AdviseRecord fake_last_advise;

CUresult fake_cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc)
{
  FAKE_ENTER(cuMemAdvise);
  if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && loc.id >= fake_device_count())
    return CUDA_ERROR_INVALID_DEVICE;
  if (loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA && loc.id != 0)
    return CUDA_ERROR_INVALID_VALUE;   /* one host NUMA node here: 0 */
  fake_last_advise = (struct fake_AdviseRecord){p, n, advice, loc};
  return CUDA_SUCCESS;
}

/* --- pools shared between processes ------------------------------------------ */

struct fake_PoolHandle { char tag[8]; int pid; uint64_t pool; };
struct fake_PoolPointer { char tag[8]; int pid, fd; uint64_t pool; size_t size; };

CUresult fake_cuMemPoolExportToShareableHandle(void *handle, CUmemoryPool pool,
                                               CUmemAllocationHandleType type, unsigned long long flags)
{
  FAKE_ENTER(cuMemPoolExportToShareableHandle);
  if (!handle || !pool || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !pool->exportable)
    return CUDA_ERROR_INVALID_VALUE;
  struct fake_PoolHandle h = {"fakepol", (int)getpid(), (uint64_t)(uintptr_t)pool};
  int fd = memfd_create("fakecuda-pool", MFD_CLOEXEC);
  if (fd < 0 || pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
    if (fd >= 0)
      close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *(int *)handle = fd;
  pool->shared = 1;
  return CUDA_SUCCESS;
}

/* The descriptor stays the caller's, as with the driver. */
CUresult fake_cuMemPoolImportFromShareableHandle(CUmemoryPool *pool, void *handle,
                                                 CUmemAllocationHandleType type, unsigned long long flags)
{
  FAKE_ENTER(cuMemPoolImportFromShareableHandle);
  struct fake_PoolHandle h;
  int fd = (int)(intptr_t)handle;
  if (!pool || flags != 0 || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || memcmp(h.tag, "fakepol", 8) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (h.pid == (int)getpid()) {   /* its own pool: the H200's driver imported one; here, the same pool */
    for (size_t i = 0; i < sizeof shareable / sizeof *shareable; i++)
      if (shareable[i] && (uint64_t)(uintptr_t)shareable[i] == h.pool) {
        *pool = shareable[i];
        return CUDA_SUCCESS;
      }
    return CUDA_ERROR_INVALID_VALUE;   /* destroyed since */
  }
  *pool = calloc(1, sizeof **pool);
  if (!*pool)
    return CUDA_ERROR_OUT_OF_MEMORY;
  (*pool)->imported_pid = h.pid;
  (*pool)->imported_id = h.pool;
  fake_keep(*pool);
  fake_live[FAKE_POOL]++;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemPoolExportPointer(CUmemPoolPtrExportData *data, CUdeviceptr ptr)
{
  FAKE_ENTER(cuMemPoolExportPointer);
  struct Allocation *a = containing(ptr);
  if (!data || !a || (uintptr_t)a->p != ptr || !a->pool || !a->pool->shared)
    return CUDA_ERROR_INVALID_VALUE;   /* not the start of an allocation of a shared pool */
  struct fake_PoolPointer e = {"fakeptr", (int)getpid(), a->fd, (uint64_t)(uintptr_t)a->pool, a->size};
  memset(data, 0, sizeof *data);
  memcpy(data, &e, sizeof e);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemPoolImportPointer(CUdeviceptr *dptr, CUmemoryPool pool, CUmemPoolPtrExportData *data)
{
  FAKE_ENTER(cuMemPoolImportPointer);
  struct fake_PoolPointer e;
  if (!dptr || !pool || !data)
    return CUDA_ERROR_INVALID_VALUE;
  memcpy(&e, data, sizeof e);
  if (memcmp(e.tag, "fakeptr", 8) != 0 || e.pid != pool->imported_pid || e.pool != pool->imported_id)
    return CUDA_ERROR_INVALID_VALUE;   /* not a pointer of the pool imported here */
  if (ipc_refused())
    return CUDA_ERROR_NOT_SUPPORTED;
  int fd = open_exported(e.pid, e.fd);
  if (fd < 0)
    return CUDA_ERROR_INVALID_HANDLE;
  void *p = NULL;
  CUresult r = track_mapping(&p, fd, e.size, 0);   /* cuMemFree unmaps it and closes fd */
  if (r != CUDA_SUCCESS) {
    close(fd);
    return r;
  }
  containing((CUdeviceptr)(uintptr_t)p)->pool = pool;
  pool_grow(pool, e.size);
  *dptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}
