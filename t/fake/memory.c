/* SPDX-License-Identifier: MIT */
/* memory.c: device, pinned and managed memory, pools, copies and fills.
 *
 * Every allocation is its own malloc'd block of exactly the size asked for,
 * and its CUdeviceptr is the host address (unified addressing): cudalua's
 * views read device memory directly, and ASan sees every overflow. Pools are
 * bookkeeping only: used and reserved bytes, a release threshold. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

struct CUmemPoolHandle_st {
  int is_default;
  cuuint64_t threshold, used, used_high, reserved, reserved_high;
};

struct Allocation {
  struct Allocation *next;
  void *p;
  size_t size;
  CUmemoryPool pool;       /* NULL: not from a pool */
  int host;                /* cuMemHostAlloc: freed by cuMemFreeHost */
};

static struct Allocation *allocations;
static size_t allocated;
static struct CUmemPoolHandle_st default_pools[FAKE_MAX_DEVICES];

size_t fake_allocated_bytes(void) { return allocated; }

static CUresult track(void **out, size_t n, CUmemoryPool pool, int host)
{
  if (n == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (n > FAKE_TOTAL_MEM - allocated)
    return CUDA_ERROR_OUT_OF_MEMORY;
  struct Allocation *a = malloc(sizeof *a);
  void *p = malloc(n);
  if (!a || !p) {
    free(a);
    free(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *a = (struct Allocation){allocations, p, n, pool, host};
  allocations = a;
  allocated += n;
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
  if (a->pool)
    a->pool->used -= a->size;
  free(a->p);
  free(a);
  return CUDA_SUCCESS;
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
  *pool = calloc(1, sizeof **pool);
  if (!*pool)
    return CUDA_ERROR_OUT_OF_MEMORY;
  fake_keep(*pool);
  fake_live[FAKE_POOL]++;
  return CUDA_SUCCESS;
}

/* Allocations still out keep their memory; they just no longer count. */
CUresult fake_cuMemPoolDestroy(CUmemoryPool pool)
{
  FAKE_ENTER(cuMemPoolDestroy);
  if (!pool || pool->is_default)
    return CUDA_ERROR_INVALID_VALUE;
  for (struct Allocation *a = allocations; a; a = a->next)
    if (a->pool == pool)
      a->pool = NULL;
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
  return pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
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
  if (!pool || !fake_stream_valid(s))
    return CUDA_ERROR_INVALID_VALUE;
  CUresult r = track(&p, n, pool, 0);
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
  return release((void *)(uintptr_t)p, 0);
}

CUresult fake_cuMemFree(CUdeviceptr p)
{
  FAKE_ENTER(cuMemFree);
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
  if (fake_ctx_usable() != CUDA_SUCCESS)
    return fake_ctx_usable();
  return release(p, 1);
}

/* Copies and fills are stream work: done now, or recorded while capturing. */
CUresult fake_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
  FAKE_ENTER(cuMemcpyAsync);
  struct fake_Work w;
  fake_memcpy_item(&w, dst, src, n);
  return fake_submit(s, &w);
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

CUresult fake_cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc)
{
  FAKE_ENTER(cuMemAdvise);
  (void)p; (void)n; (void)advice;
  if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && loc.id >= fake_device_count())
    return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}
