/* SPDX-License-Identifier: MIT */
/* hostreg.c: cuMemHostRegister and its kin.
 *
 * The fake's device addresses are host addresses, so a registration only
 * records its range and flags: a range that overlaps a registered one is
 * refused as the driver refuses it (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED),
 * unregistering takes the base address registered, and a mapped range's
 * device pointer is its host address. fakecuda.host_registered(address)
 * tells tests what the driver holds (lua.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fake.h"

struct Registered {
  struct Registered *next;
  uintptr_t lo, hi;
  unsigned flags;
};

static struct Registered *registered;

static struct Registered *find(uintptr_t lo, uintptr_t hi)
{
  for (struct Registered *r = registered; r; r = r->next)
    if (r->lo < hi && lo < r->hi)
      return r;
  return NULL;
}

/* Whether [lo, hi) is all mapped host memory, writable too unless the
 * registration is read-only: the driver pins the pages and fails on any it
 * cannot (a raw address a script made up), where the fake's kernels would
 * write through them and crash the process. /proc/self/maps lists the
 * mappings in address order. */
static int pinnable(uintptr_t lo, uintptr_t hi, int read_only)
{
  FILE *maps = fopen("/proc/self/maps", "re");
  if (!maps)
    return 1;                   /* cannot tell: as before */
  unsigned long start, end;
  char perms[8];
  uintptr_t covered = lo;
  while (covered < hi && fscanf(maps, "%lx-%lx %7s%*[^\n]", &start, &end, perms) == 3) {
    if (end <= covered)
      continue;
    if (start > covered || perms[0] != 'r' || (!read_only && perms[1] != 'w'))
      break;
    covered = end;
  }
  fclose(maps);
  return covered >= hi;
}

CUresult fake_cuMemHostRegister(void *p, size_t n, unsigned int flags)
{
  FAKE_ENTER(cuMemHostRegister);
  CUresult usable = fake_ctx_usable();
  if (usable != CUDA_SUCCESS)
    return usable;
  uintptr_t lo = (uintptr_t)p;
  if (!p || n == 0 || lo + n < lo ||
      (flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                           CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY)))
    return CUDA_ERROR_INVALID_VALUE;
  if (find(lo, lo + n))
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (!pinnable(lo, lo + n, (flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0))
    return CUDA_ERROR_INVALID_VALUE;
  struct Registered *r = malloc(sizeof *r);
  if (!r)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *r = (struct Registered){registered, lo, lo + n, flags};
  registered = r;
  fake_keep(r);
  fake_live[FAKE_HOSTREG]++;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemHostUnregister(void *p)
{
  FAKE_ENTER(cuMemHostUnregister);
  fake_host_wait();              /* unpinning may wait for the device, so for host functions */
  for (struct Registered **at = &registered; *at; at = &(*at)->next)
    if ((*at)->lo == (uintptr_t)p) {
      struct Registered *r = *at;
      *at = r->next;
      fake_unkeep(r);
      fake_live[FAKE_HOSTREG]--;
      free(r);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

CUresult fake_cuMemHostGetDevicePointer(CUdeviceptr *dptr, void *p, unsigned int flags)
{
  FAKE_ENTER(cuMemHostGetDevicePointer);
  uintptr_t a = (uintptr_t)p;
  struct Registered *r = p ? find(a, a + 1) : NULL;
  if (!dptr || flags || !r || !(r->flags & CU_MEMHOSTREGISTER_DEVICEMAP))
    return CUDA_ERROR_INVALID_VALUE;
  *dptr = (CUdeviceptr)a;
  return CUDA_SUCCESS;
}

int fake_host_registered(uintptr_t a, unsigned *flags, uintptr_t *base, size_t *size)
{
  struct Registered *r = find(a, a + 1);
  if (!r)
    return 0;
  *flags = r->flags;
  *base = r->lo;
  *size = r->hi - r->lo;
  return 1;
}
