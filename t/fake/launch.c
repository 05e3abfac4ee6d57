/* SPDX-License-Identifier: MIT */
/* launch.c: kernel launches and the host emulations of cudalua's bundled
 * kernels (the .cu files in kernels/), found by name.
 *
 * A launch copies its parameter values (up to 8 bytes each, all the bundled
 * kernels need) into a work item, so a captured launch replays with the
 * values of its capture, as on a GPU. The emulations loop over all n
 * elements, as the kernels' grid-stride loops do for any grid. Kernels
 * without an emulation run as no-ops. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fake.h"

typedef unsigned char Param[8];

static float param_f32(const Param p) { float v; memcpy(&v, p, sizeof v); return v; }
static uint64_t param_u64(const Param p) { uint64_t v; memcpy(&v, p, sizeof v); return v; }
static float *param_ptr(const Param p) { return (float *)(uintptr_t)param_u64(p); }

/* vector_scale(const float *input, float *output, float scale, u64 n) */
static void vector_scale(Param *p)
{
  const float *input = param_ptr(p[0]);
  float *output = param_ptr(p[1]);
  float scale = param_f32(p[2]);
  for (uint64_t i = 0, n = param_u64(p[3]); i < n; i++) {
    float val = input[i] * scale;
    for (int k = 0; k < 50; k++)
      val = sqrtf(val * val + 1.0f);
    output[i] = val;
  }
}

/* scale_and_bias(float *data, float scale, float bias, u64 n) */
static void scale_and_bias(Param *p)
{
  float *data = param_ptr(p[0]);
  float scale = param_f32(p[1]), bias = param_f32(p[2]);
  for (uint64_t i = 0, n = param_u64(p[3]); i < n; i++)
    data[i] = data[i] * scale + bias;
}

/* tex_fetch(u64 tex, float *out, u64 w, u64 n): out[i] = the texture's
 * float element (i % w, i / w), or NaN past its end or for a handle that
 * is not a live texture (t/texture_kernels.lua) */
static void tex_fetch(Param *p)
{
  size_t bytes = 0, pitch = 0;
  const unsigned char *data = fake_object_data(param_u64(p[0]), 0, &bytes, &pitch);
  float *out = param_ptr(p[1]);
  uint64_t w = param_u64(p[2]);
  for (uint64_t i = 0, n = param_u64(p[3]); i < n; i++) {
    size_t at = w ? (size_t)(i / w) * pitch + (size_t)(i % w) * sizeof(float) : SIZE_MAX;
    out[i] = NAN;
    if (data && at <= bytes - sizeof(float) && bytes >= sizeof(float))
      memcpy(&out[i], data + at, sizeof(float));
  }
}

/* surf_fill(u64 surf, float value, u64 w, u64 n): the surface's float
 * element (i % w, i / w) becomes value + i, as far as the surface reaches */
static void surf_fill(Param *p)
{
  size_t bytes = 0, pitch = 0;
  float *data = fake_object_data(param_u64(p[0]), 1, &bytes, &pitch);
  float value = param_f32(p[1]);
  uint64_t w = param_u64(p[2]);
  for (uint64_t i = 0, n = param_u64(p[3]); data && w && i < n; i++) {
    size_t at = (size_t)(i / w) * pitch + (size_t)(i % w) * sizeof(float);
    float v = value + (float)i;
    if (bytes >= sizeof v && at <= bytes - sizeof v)
      memcpy((unsigned char *)data + at, &v, sizeof v);
  }
}

static const struct { const char *name; int nparams; void (*run)(Param *); } emulations[] = {
  {"tex_fetch", 4, tex_fetch},
  {"surf_fill", 4, surf_fill},
  {"vector_scale", 4, vector_scale},
  {"scale_and_bias", 4, scale_and_bias},
};

void fake_kernel_run(CUfunction fn, Param *params)
{
  for (size_t i = 0; i < sizeof emulations / sizeof emulations[0]; i++)
    if (strcmp(fake_function_name(fn), emulations[i].name) == 0 &&
        fake_function_nparams(fn) == emulations[i].nparams)
      emulations[i].run(params);
}

/* A launch's work item, its arguments checked as the driver would. */
CUresult fake_kernel_item(struct fake_Work *w, CUfunction fn, const unsigned grid[3],
                          const unsigned block[3], unsigned shmem, void **params)
{
  *w = (struct fake_Work){.kind = WORK_KERNEL};
  if (!fn)
    return CUDA_ERROR_INVALID_HANDLE;
  if (!grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2] ||
      (uint64_t)block[0] * block[1] * block[2] > 1024 || block[2] > 64 || grid[1] > 65535 ||
      grid[2] > 65535)
    return CUDA_ERROR_INVALID_VALUE;
  if ((int)shmem > fake_function_shmem_limit(fn))
    return CUDA_ERROR_INVALID_VALUE;
  int n = fake_function_nparams(fn);
  if (n > 0 && !params)
    return CUDA_ERROR_INVALID_VALUE;
  w->u.kernel.fn = fn;
  for (int i = 0; i < n && i < FAKE_MAX_PARAMS; i++) {
    size_t offset = 0, size = 0;
    fake_function_param(fn, (size_t)i, &offset, &size);
    memcpy(w->u.kernel.params[i], params[i], size < 8 ? size : 8);
  }
  return CUDA_SUCCESS;
}

static CUresult launch(CUfunction fn, const unsigned grid[3], const unsigned block[3],
                       unsigned shmem, CUstream s, void **params)
{
  struct fake_Work w;
  CUresult r = fake_kernel_item(&w, fn, grid, block, shmem, params);
  return r != CUDA_SUCCESS ? r : fake_submit(s, &w);
}

CUresult fake_cuLaunchKernel(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz,
                             unsigned int shmem, CUstream s, void **params, void **extra)
{
  FAKE_ENTER(cuLaunchKernel);
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  if (extra)
    return CUDA_ERROR_NOT_SUPPORTED;
  return launch(fn, grid, block, shmem, s, params);
}

/* Clusters must tile the grid, at most 8 blocks each (the portable size). */
static CUresult check_attributes(const CUlaunchConfig *c)
{
  for (unsigned i = 0; i < c->numAttrs; i++) {
    const CUlaunchAttribute *a = &c->attrs[i];
    if (a->id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      unsigned x = a->value.clusterDim.x, y = a->value.clusterDim.y, z = a->value.clusterDim.z;
      if (!x || !y || !z || x * y * z > 8 || c->gridDimX % x || c->gridDimY % y ||
          c->gridDimZ % z)
        return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    } else if (a->id != CU_LAUNCH_ATTRIBUTE_COOPERATIVE)
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction fn, void **params,
                               void **extra)
{
  FAKE_ENTER(cuLaunchKernelEx);
  if (!c || extra)
    return c ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
  const unsigned block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
  CUresult r = check_attributes(c);
  return r != CUDA_SUCCESS ? r : launch(fn, grid, block, c->sharedMemBytes, c->hStream, params);
}
