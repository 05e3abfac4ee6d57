/* SPDX-License-Identifier: MIT */
/* vmm.c: virtual memory management on the host's own: a reservation is an
 * mmap of PROT_NONE pages, a physical allocation (cuMemCreate) a memfd of
 * its size, cuMemMap maps the file over the reservation (still PROT_NONE,
 * as a GPU's mappings start with no access), cuMemSetAccess opens it, and
 * cuMemUnmap puts PROT_NONE pages back. Contents live in the file, so they
 * move with it when a range is remapped elsewhere, as on a GPU.
 *
 * The rules the driver enforces are checked: sizes and addresses in
 * granularity multiples, an unmap covers a whole mapping, a release leaves
 * the memory until its last mapping goes, a reservation is freed whole.
 *
 * A freed reservation stays reserved (PROT_NONE) in a quarantine of the
 * last QUARANTINE ones, so no other mapping takes its addresses, and
 * copies, fills and launches that reach it fail with
 * CUDA_ERROR_ILLEGAL_ADDRESS (fake_vmm_freed), where a GPU would fault and
 * lose the context: a test observes a use of a stale address. */
#define _GNU_SOURCE   /* memfd_create */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake.h"

#define GRANULARITY ((size_t)2 << 20)
#define MAX_RECORDS 1024
#define HEADROOM ((size_t)256 << 20)

struct Physical { int fd; size_t size; int released, mappings; };
struct Mapping { uintptr_t va; size_t size; struct Physical *phys; int prot; };
struct Reservation { uintptr_t va; size_t size; };

static struct Physical *physicals[MAX_RECORDS];
static struct Mapping mappings[MAX_RECORDS];
static struct Reservation reservations[MAX_RECORDS];

static int aligned(uintptr_t x) { return x % GRANULARITY == 0; }

CUmemAllocationProp fake_last_mem_create;
struct fake_VmmLog fake_vmm_log;

#define QUARANTINE 64
static struct Reservation freed[QUARANTINE];
static size_t freed_next;

static void quarantine(uintptr_t va, size_t size)
{
  struct Reservation *q = &freed[freed_next++ % QUARANTINE];
  if (q->size)
    munmap((void *)q->va, q->size);   /* the oldest goes back to the system */
  *q = (struct Reservation){va, size};
}

int fake_vmm_freed(uintptr_t p, size_t n)
{
  if (n == 0)
    n = 1;
  for (size_t i = 0; i < QUARANTINE; i++)
    if (freed[i].size && p < freed[i].va + freed[i].size && freed[i].va < p + n)
      return 1;
  return 0;
}

/* The writable bytes from p on in virtual memory: 0 in a freed or a live
 * reservation where nothing writable is mapped at p, SIZE_MAX outside any. */
size_t fake_vmm_room(uintptr_t p)
{
  if (fake_vmm_freed(p, 1))
    return 0;
  for (size_t i = 0; i < MAX_RECORDS; i++) {
    const struct Reservation *r = &reservations[i];
    if (!r->size || p < r->va || p >= r->va + r->size)
      continue;
    uintptr_t end = p;          /* across back-to-back writable mappings */
    for (int grew = 1; grew;) {
      grew = 0;
      for (size_t k = 0; k < MAX_RECORDS; k++)
        if (mappings[k].size && (mappings[k].prot & PROT_WRITE) && mappings[k].va <= end &&
            end < mappings[k].va + mappings[k].size) {
          end = mappings[k].va + mappings[k].size;
          grew = 1;
        }
    }
    return end - p;
  }
  return SIZE_MAX;
}

/* Whether [p, p + n) can be read (or written, write = 1) by a GPU: not a
 * freed reservation, and inside a live one only where it is mapped with
 * that access (cuMemSetAccess). A GPU faults elsewhere; the host that the
 * fake runs work on would crash, so copies and fills fail instead. */
int fake_vmm_faults(uintptr_t p, size_t n, int write)
{
  if (n == 0)
    n = 1;
  if (fake_vmm_freed(p, n))
    return 1;
  int need = write ? PROT_WRITE : PROT_READ;
  for (size_t i = 0; i < MAX_RECORDS; i++) {
    const struct Reservation *r = &reservations[i];
    if (!r->size || p >= r->va + r->size || r->va >= p + n)
      continue;
    size_t usable = 0;   /* the bytes of [p, p + n) inside r that mappings allow */
    uintptr_t lo = p > r->va ? p : r->va, hi = p + n < r->va + r->size ? p + n : r->va + r->size;
    for (size_t k = 0; k < MAX_RECORDS; k++) {
      const struct Mapping *m = &mappings[k];
      if (!m->size || !(m->prot & need) || m->va >= hi || lo >= m->va + m->size)
        continue;
      usable += (m->va + m->size < hi ? m->va + m->size : hi) - (m->va > lo ? m->va : lo);
    }
    if (usable != hi - lo)
      return 1;
  }
  return 0;
}

CUresult fake_cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                            CUmemAllocationGranularity_flags option)
{
  FAKE_ENTER(cuMemGetAllocationGranularity);
  if (!g || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
    return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && fake_bad_device(prop->location.id))
    return CUDA_ERROR_INVALID_DEVICE;
  *g = GRANULARITY;
  return CUDA_SUCCESS;
}

static void drop_physical(struct Physical *p)
{
  if (!p->released || p->mappings > 0)
    return;
  for (size_t i = 0; i < MAX_RECORDS; i++)
    if (physicals[i] == p)
      physicals[i] = NULL;
  close(p->fd);
  fake_unkeep(p);
  fake_live[FAKE_VMM]--;
  free(p);
}

CUresult fake_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                          const CUmemAllocationProp *prop, unsigned long long flags)
{
  FAKE_ENTER(cuMemCreate);
  if (!h || !prop || flags || !size || !aligned(size) || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
    return CUDA_ERROR_INVALID_VALUE;
  CUmemLocationType where = prop->location.type;
  if (where == CU_MEM_LOCATION_TYPE_HOST ? prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE
      : where == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
    return CUDA_ERROR_INVALID_VALUE;    /* as cuMemCreate's documentation says */
  if (where == CU_MEM_LOCATION_TYPE_DEVICE ? fake_bad_device(prop->location.id)
      : where != CU_MEM_LOCATION_TYPE_HOST &&
        (where != CU_MEM_LOCATION_TYPE_HOST_NUMA || prop->location.id != 0))
    return CUDA_ERROR_INVALID_DEVICE;   /* one host NUMA node here: 0 */
  if (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC)
    return CUDA_ERROR_NOT_PERMITTED;    /* no IMEX channel here */
  fake_last_mem_create = *prop;
  if (fake_vmm_log.ncreated < FAKE_VMM_LOG)
    fake_vmm_log.created_on[fake_vmm_log.ncreated++] = prop->location.id;
  for (size_t i = 0; i < MAX_RECORDS; i++)
    if (!physicals[i]) {
      struct Physical *p = calloc(1, sizeof *p);
      int fd = memfd_create("fakecuda", 0);
      if (!p || fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0)
          close(fd);
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
      *p = (struct Physical){fd, size, 0, 0};
      physicals[i] = p;
      fake_keep(p);
      fake_live[FAKE_VMM]++;
      *h = (CUmemGenericAllocationHandle)(i + 1);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

static struct Physical *physical(CUmemGenericAllocationHandle h)
{
  return h >= 1 && h <= MAX_RECORDS ? physicals[h - 1] : NULL;
}

CUresult fake_cuMemRelease(CUmemGenericAllocationHandle h)
{
  FAKE_ENTER(cuMemRelease);
  struct Physical *p = physical(h);
  if (!p || p->released)
    return CUDA_ERROR_INVALID_VALUE;
  p->released = 1;
  physicals[h - 1] = NULL;      /* the handle is gone; the memory stays while mapped */
  drop_physical(p);
  return CUDA_SUCCESS;
}

static struct Reservation *reservation_of(uintptr_t va, size_t size)
{
  for (size_t i = 0; i < MAX_RECORDS; i++) {
    struct Reservation *r = &reservations[i];
    if (r->size && va >= r->va && va - r->va + size <= r->size)
      return r;
  }
  return NULL;
}

CUresult fake_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                  unsigned long long flags)
{
  FAKE_ENTER(cuMemAddressReserve);
  if (!ptr || !size || flags || !aligned(size) || !aligned(addr) ||
      (alignment & (alignment - 1)))
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < MAX_RECORDS; i++)
    if (!reservations[i].size) {
      /* A hint is honoured when its pages are free, as the driver does.
       * Without one, HEADROOM more is reserved and its end given back, so
       * that (as on a GPU's roomy address space) the range after a new
       * reservation is usually free for a later hint. */
      void *p = MAP_FAILED;
      if (addr)
        p = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
      if (p == MAP_FAILED || (uintptr_t)p != addr) {
        if (p != MAP_FAILED)
          munmap(p, size);
        const size_t extra = GRANULARITY + HEADROOM;
        p = mmap(NULL, size + extra, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
          return CUDA_ERROR_OUT_OF_MEMORY;
        uintptr_t start = ((uintptr_t)p + GRANULARITY - 1) / GRANULARITY * GRANULARITY;
        if (start > (uintptr_t)p)
          munmap(p, start - (uintptr_t)p);
        munmap((void *)(start + size), (uintptr_t)p + size + extra - (start + size));
        p = (void *)start;
      }
      reservations[i] = (struct Reservation){(uintptr_t)p, size};
      fake_live[FAKE_VMM]++;
      *ptr = (CUdeviceptr)(uintptr_t)p;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult fake_cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
  FAKE_ENTER(cuMemAddressFree);
  for (size_t i = 0; i < MAX_RECORDS; i++)
    if (reservations[i].size && reservations[i].va == ptr && reservations[i].size == size) {
      for (size_t k = 0; k < MAX_RECORDS; k++)
        if (mappings[k].size && mappings[k].va >= ptr && mappings[k].va < ptr + size)
          return CUDA_ERROR_INVALID_VALUE;   /* still mapped: unmap first */
      quarantine((uintptr_t)ptr, size);   /* PROT_NONE already: unmapped pages are */
      reservations[i].size = 0;
      fake_live[FAKE_VMM]--;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                       unsigned long long flags)
{
  FAKE_ENTER(cuMemMap);
  struct Physical *p = physical(h);
  if (!p || flags || !size || !aligned(ptr) || !aligned(size) || offset + size > p->size ||
      !reservation_of(ptr, size))
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t k = 0; k < MAX_RECORDS; k++)
    if (mappings[k].size && mappings[k].va < ptr + size && ptr < mappings[k].va + mappings[k].size)
      return CUDA_ERROR_INVALID_VALUE;       /* already mapped there */
  for (size_t k = 0; k < MAX_RECORDS; k++)
    if (!mappings[k].size) {
      if (mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd,
               (off_t)offset) == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
      mappings[k] = (struct Mapping){ptr, size, p, PROT_NONE};
      p->mappings++;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult fake_cuMemUnmap(CUdeviceptr ptr, size_t size)
{
  FAKE_ENTER(cuMemUnmap);
  for (size_t k = 0; k < MAX_RECORDS; k++)
    if (mappings[k].size && mappings[k].va == ptr && mappings[k].size == size) {
      mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
      struct Physical *p = mappings[k].phys;
      mappings[k].size = 0;
      p->mappings--;
      drop_physical(p);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_VALUE;   /* not a whole mapping */
}

CUresult fake_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
  FAKE_ENTER(cuMemSetAccess);
  if (!desc || count < 1 || count > FAKE_MAX_DEVICES)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t k = 0; k < count; k++)   /* one entry a device, all the same protection here */
    if (desc[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE || fake_bad_device(desc[k].location.id) ||
        desc[k].flags != desc[0].flags)
      return CUDA_ERROR_INVALID_VALUE;
  fake_vmm_log.access_count = count;
  size_t covered = 0;
  for (size_t k = 0; k < MAX_RECORDS; k++)
    if (mappings[k].size && mappings[k].va >= ptr && mappings[k].va + mappings[k].size <= ptr + size)
      covered += mappings[k].size;
  if (covered != size)
    return CUDA_ERROR_INVALID_VALUE;   /* every byte must be mapped */
  int prot = desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
           : desc->flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? PROT_READ : PROT_NONE;
  if (mprotect((void *)(uintptr_t)ptr, size, prot) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t k = 0; k < MAX_RECORDS; k++)
    if (mappings[k].size && mappings[k].va >= ptr && mappings[k].va + mappings[k].size <= ptr + size)
      mappings[k].prot = prot;
  return CUDA_SUCCESS;
}
