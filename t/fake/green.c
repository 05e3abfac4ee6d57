/* SPDX-License-Identifier: MIT */
/* green.c: SM resources and green contexts.
 *
 * A device's SM resource has all FAKE_SM_COUNT SMs. Splits round the SMs
 * a group asks for up to Hopper's granularity: 8 (a GPC's co-scheduled
 * SMs), or 2 when co-scheduling is ignored. A resource descriptor is the SM
 * count itself, cast to the opaque pointer (the driver never frees one). A
 * green context is a context of its device with that many SMs; its streams
 * are ordinary fake streams, since all work runs at issue time anyway. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define GREEN_MAGIC 0x4752454eu
#define MIN_PARTITION 8u

struct CUgreenCtx_st {
  unsigned magic;
  unsigned sms;
  struct CUctx_st ctx;
  struct CUgreenCtx_st *next;   /* the live ones */
};

static struct CUgreenCtx_st *greens;

int fake_green_ctx_live(CUcontext ctx)
{
  for (struct CUgreenCtx_st *g = greens; g; g = g->next)
    if (&g->ctx == ctx)
      return 1;
  return 0;
}

static void sm_resource(CUdevResource *res, unsigned sms, unsigned alignment)
{
  memset(res, 0, sizeof *res);
  res->type = CU_DEV_RESOURCE_TYPE_SM;
  res->sm.smCount = sms;
  res->sm.minSmPartitionSize = MIN_PARTITION;
  res->sm.smCoscheduledAlignment = alignment;
}

static int green_valid(CUgreenCtx g) { return g && g->magic == GREEN_MAGIC; }

CUresult fake_cuDeviceGetDevResource(CUdevice d, CUdevResource *res, CUdevResourceType type)
{
  FAKE_ENTER(cuDeviceGetDevResource);
  if (fake_bad_device(d))
    return CUDA_ERROR_INVALID_DEVICE;
  if (!res || type != CU_DEV_RESOURCE_TYPE_SM)
    return CUDA_ERROR_INVALID_VALUE;
  sm_resource(res, FAKE_SM_COUNT, MIN_PARTITION);
  return CUDA_SUCCESS;
}

/* result NULL: how many groups fit in *groups; else up to *groups groups
 * into result and what is left into remaining (when given). */
CUresult fake_cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *groups,
                                          const CUdevResource *input, CUdevResource *remaining,
                                          unsigned int flags, unsigned int min_count)
{
  FAKE_ENTER(cuDevSmResourceSplitByCount);
  if (!groups || !input || input->type != CU_DEV_RESOURCE_TYPE_SM || min_count == 0 ||
      (flags & ~(unsigned)CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING))
    return CUDA_ERROR_INVALID_VALUE;
  unsigned step = flags ? 2 : MIN_PARTITION;
  unsigned size = (min_count < MIN_PARTITION ? MIN_PARTITION : min_count + step - 1) / step * step;
  unsigned fit = input->sm.smCount / size;
  if (result == NULL) {
    *groups = fit;
    return CUDA_SUCCESS;
  }
  if (*groups > fit)
    *groups = fit;
  for (unsigned k = 0; k < *groups; k++)
    sm_resource(&result[k], size, step);
  if (remaining)
    sm_resource(remaining, input->sm.smCount - *groups * size, step);
  return CUDA_SUCCESS;
}

CUresult fake_cuDevResourceGenerateDesc(CUdevResourceDesc *desc, CUdevResource *res,
                                        unsigned int n)
{
  FAKE_ENTER(cuDevResourceGenerateDesc);
  if (!desc || !res || n == 0)
    return CUDA_ERROR_INVALID_VALUE;
  uintptr_t sms = 0;
  for (unsigned k = 0; k < n; k++) {
    if (res[k].type != CU_DEV_RESOURCE_TYPE_SM)
      return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    sms += res[k].sm.smCount;
  }
  if (sms == 0 || sms > FAKE_SM_COUNT)
    return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  *desc = (CUdevResourceDesc)sms;
  return CUDA_SUCCESS;
}

CUresult fake_cuGreenCtxCreate(CUgreenCtx *g, CUdevResourceDesc desc, CUdevice d,
                               unsigned int flags)
{
  fake_current_call = "cuGreenCtxCreate";   /* the wait comes before the entry: name it for hold.c */
  fake_host_wait();              /* as the H200's driver: it waits for pending host functions */
  FAKE_ENTER(cuGreenCtxCreate);
  uintptr_t sms = (uintptr_t)desc;
  if (fake_bad_device(d))
    return CUDA_ERROR_INVALID_DEVICE;
  if (!g || sms == 0 || sms > FAKE_SM_COUNT || flags != CU_GREEN_CTX_DEFAULT_STREAM)
    return CUDA_ERROR_INVALID_VALUE;
  *g = calloc(1, sizeof **g);
  if (!*g)
    return CUDA_ERROR_OUT_OF_MEMORY;
  (*g)->magic = GREEN_MAGIC;
  (*g)->sms = (unsigned)sms;
  (*g)->ctx.ordinal = d;
  (*g)->next = greens;
  greens = *g;
  fake_keep(*g);
  fake_live[FAKE_GREEN]++;
  return CUDA_SUCCESS;
}

CUresult fake_cuGreenCtxDestroy(CUgreenCtx g)
{
  FAKE_ENTER(cuGreenCtxDestroy);
  if (!green_valid(g))
    return CUDA_ERROR_INVALID_HANDLE;
  for (struct CUgreenCtx_st **p = &greens; *p; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      break;
    }
  fake_context_destroyed(&g->ctx);
  g->magic = 0;
  fake_unkeep(g);
  free(g);
  fake_live[FAKE_GREEN]--;
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxFromGreenCtx(CUcontext *ctx, CUgreenCtx g)
{
  FAKE_ENTER(cuCtxFromGreenCtx);
  if (!ctx || !green_valid(g))
    return CUDA_ERROR_INVALID_HANDLE;
  *ctx = &g->ctx;
  return CUDA_SUCCESS;
}

CUresult fake_cuGreenCtxGetDevResource(CUgreenCtx g, CUdevResource *res, CUdevResourceType type)
{
  FAKE_ENTER(cuGreenCtxGetDevResource);
  if (!green_valid(g))
    return CUDA_ERROR_INVALID_HANDLE;
  if (!res || type != CU_DEV_RESOURCE_TYPE_SM)
    return CUDA_ERROR_INVALID_VALUE;
  sm_resource(res, g->sms, MIN_PARTITION);
  return CUDA_SUCCESS;
}

CUresult fake_cuGreenCtxStreamCreate(CUstream *s, CUgreenCtx g, unsigned int flags, int priority)
{
  FAKE_ENTER(cuGreenCtxStreamCreate);
  (void)priority;
  if (!green_valid(g))
    return CUDA_ERROR_INVALID_HANDLE;
  if (flags != CU_STREAM_NON_BLOCKING)
    return CUDA_ERROR_INVALID_VALUE;
  return fake_stream_create(s, flags, &g->ctx);
}
