/* SPDX-License-Identifier: MIT */
/* graphmem.c: graph memory (cuMemAllocAsync and cuMemFreeAsync while a
 * stream is captured).
 *
 * An allocation made in a capture becomes a WORK_MEMALLOC node of the
 * capture's graph, a free of it a WORK_MEMFREE node. The memory itself is
 * host memory reserved at the allocation and kept to the process' end (a
 * real driver keeps the address reserved for the graph): what the fake
 * checks is the driver's rule on its life. A launch maps it (live) and a
 * free node or a cuMemFreeAsync after the launch unmaps it; a graph whose
 * allocation is still live cannot be launched again
 * (CUDA_ERROR_INVALID_VALUE, as the driver), and a free outside the graph
 * of memory that is not live is refused. Live graph allocations count as
 * fakecuda.live().graph_allocations: one a launch left unfreed leaks. */
#include <stdint.h>
#include <stdlib.h>

#include "fake.h"

struct fake_GraphAlloc {
  struct fake_GraphAlloc *next;
  void *mem;
  size_t size;
  int live;                     /* a launch allocated it and nothing freed it yet */
};

static struct fake_GraphAlloc *allocs;   /* every graph allocation, reachable to the end */

static struct fake_GraphAlloc *find(CUdeviceptr p)
{
  for (struct fake_GraphAlloc *a = allocs; a; a = a->next)
    if ((CUdeviceptr)(uintptr_t)a->mem == p)
      return a;
  return NULL;
}

int fake_graph_mem_owns(CUdeviceptr p) { return find(p) != NULL; }

static void set_live(struct fake_GraphAlloc *a, int live)
{
  fake_live[FAKE_GRAPHMEM] += live - a->live;
  a->live = live;
}

/* Outside a capture cudalua never calls it (it allocates from pools with
 * cuMemAllocFromPoolAsync): only the graph allocation is modelled. */
CUresult fake_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{
  FAKE_ENTER(cuMemAllocAsync);
  if (!dptr || size == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (!fake_stream_valid(s))
    return CUDA_ERROR_INVALID_HANDLE;
  CUgraph g = fake_stream_capture(s);
  if (!g)
    return CUDA_ERROR_NOT_SUPPORTED;
  struct fake_GraphAlloc *a = calloc(1, sizeof *a);
  if (a)
    a->mem = calloc(1, size);
  if (!a || !a->mem) {
    free(a);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a->size = size;
  struct fake_Work w = {.kind = WORK_MEMALLOC};
  w.u.gmem.a = a;
  CUresult r = fake_graph_append(g, &w);
  if (r != CUDA_SUCCESS) {
    free(a->mem);
    free(a);
    return r;
  }
  a->next = allocs;
  allocs = a;
  *dptr = (CUdeviceptr)(uintptr_t)a->mem;
  return CUDA_SUCCESS;
}

/* A free node in a capture, or the free after a launch outside it. */
CUresult fake_graph_mem_free(CUdeviceptr p, CUstream s)
{
  struct fake_GraphAlloc *a = find(p);
  CUgraph g = fake_stream_capture(s);
  if (g) {
    struct fake_Work w = {.kind = WORK_MEMFREE};
    w.u.gmem.a = a;
    return fake_graph_append(g, &w);
  }
  if (!a->live)
    return CUDA_ERROR_INVALID_VALUE;
  set_live(a, 0);
  return CUDA_SUCCESS;
}

/* Before a launch of exec: refused while one of its allocations is live,
 * unless it was instantiated to free them (auto_free: freed here); then
 * its allocations and frees take effect in order. */
CUresult fake_graph_mem_launch(const struct CUgraph_st *exec, int auto_free)
{
  for (size_t i = 0; i < exec->n; i++)
    if (exec->work[i].kind == WORK_MEMALLOC && exec->work[i].u.gmem.a->live && !auto_free)
      return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < exec->n; i++)
    if (exec->work[i].kind == WORK_MEMALLOC || exec->work[i].kind == WORK_MEMFREE)
      set_live(exec->work[i].u.gmem.a, exec->work[i].kind == WORK_MEMALLOC);
  return CUDA_SUCCESS;
}
