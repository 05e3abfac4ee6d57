/* SPDX-License-Identifier: MIT */
/* launch.c: kernel launches and the host emulations of cudalua's bundled
 * kernels (the .cu files in kernels/), found by name.
 *
 * A launch copies its parameter values into a work item's parameter buffer,
 * each at its offset as the driver lays them out, so a captured launch
 * replays with the values of its capture, as on a GPU. The emulations loop
 * over all n elements, as the kernels' grid-stride loops do for any grid.
 * A kernel whose name contains "echo_params" and whose first parameter is
 * a pointer copies the buffer from its second parameter's offset on to
 * that pointer: the tests compare what cudalua packed, bit for bit, with
 * what a GPU kernel would have received. Other kernels without an
 * emulation, and kernels of an emulated name whose parameter sizes differ,
 * run as no-ops. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fake.h"

typedef unsigned char Param[8];

static float param_f32(const Param p) { float v; memcpy(&v, p, sizeof v); return v; }
static uint64_t param_u64(const Param p) { uint64_t v; memcpy(&v, p, sizeof v); return v; }
static unsigned char *param_ptr(const Param p) { return (unsigned char *)(uintptr_t)param_u64(p); }

/* Element i of a float array at any address: a fuzzed slice may be
 * unaligned, where a GPU faults and a typed load here is undefined. */
static float load_f32(const unsigned char *a, uint64_t i) { float v; memcpy(&v, a + i * sizeof v, sizeof v); return v; }
static void store_f32(unsigned char *a, uint64_t i, float v) { memcpy(a + i * sizeof v, &v, sizeof v); }

/* n elements of elem bytes, or fewer: as many as the memory at each of
 * the arrays holds. A GPU faults past an allocation; the host the fake runs
 * kernels on would write over its own heap, so the fake stops there. */
static uint64_t clamp(uint64_t n, size_t elem, const unsigned char *a, const unsigned char *b)
{
  size_t room = fake_room((uintptr_t)a) / elem;
  if (b && fake_room((uintptr_t)b) / elem < room)
    room = fake_room((uintptr_t)b) / elem;
  return n < room ? n : room;
}

/* vector_scale(const float *input, float *output, float scale, u64 n) */
static void vector_scale(Param *p)
{
  const unsigned char *input = param_ptr(p[0]);
  unsigned char *output = param_ptr(p[1]);
  float scale = param_f32(p[2]);
  for (uint64_t i = 0, n = clamp(param_u64(p[3]), sizeof(float), input, output); i < n; i++) {
    float val = load_f32(input, i) * scale;
    for (int k = 0; k < 50; k++)
      val = sqrtf(val * val + 1.0f);
    store_f32(output, i, val);
  }
}

/* scale_and_bias(float *data, float scale, float bias, u64 n) */
static void scale_and_bias(Param *p)
{
  unsigned char *data = param_ptr(p[0]);
  float scale = param_f32(p[1]), bias = param_f32(p[2]);
  for (uint64_t i = 0, n = clamp(param_u64(p[3]), sizeof(float), data, NULL); i < n; i++)
    store_f32(data, i, load_f32(data, i) * scale + bias);
}

/* mpi_reduce_<op>_<dtype>(T *acc, const T *in, u64 n) (kernels/mpi_reduce.cu) */
#define REDUCE_LOOP(T)                                                           \
  do {                                                                           \
    unsigned char *acc = param_ptr(p[0]);                                        \
    const unsigned char *in = param_ptr(p[1]);                                   \
    for (uint64_t i = 0, n = clamp(param_u64(p[2]), sizeof(T), acc, in); i < n; i++) { \
      T a, b;                   /* by memcpy: the arrays may be unaligned */     \
      memcpy(&a, acc + i * sizeof a, sizeof a);                                  \
      memcpy(&b, in + i * sizeof b, sizeof b);                                   \
      a = op == 0 ? (T)(a + b) : op == 1 ? (b < a ? b : a) : (b > a ? b : a);    \
      memcpy(acc + i * sizeof a, &a, sizeof a);                                  \
    }                                                                            \
  } while (0)

static int mpi_reduce(const char *name, Param *p)
{
  static const char *const ops[] = {"sum_", "min_", "max_"};
  const char *prefix = "mpi_reduce_";
  if (strncmp(name, prefix, strlen(prefix)) != 0)
    return 0;
  name += strlen(prefix);
  int op = -1;
  for (int i = 0; i < 3; i++)
    if (strncmp(name, ops[i], 4) == 0)
      op = i;
  if (op < 0)
    return 0;
  name += 4;
  if (strcmp(name, "float32") == 0) REDUCE_LOOP(float);
  else if (strcmp(name, "float64") == 0) REDUCE_LOOP(double);
  else if (strcmp(name, "int8") == 0) REDUCE_LOOP(int8_t);
  else if (strcmp(name, "int16") == 0) REDUCE_LOOP(int16_t);
  else if (strcmp(name, "int32") == 0) REDUCE_LOOP(int32_t);
  else if (strcmp(name, "int64") == 0) REDUCE_LOOP(int64_t);
  else if (strcmp(name, "uint8") == 0) REDUCE_LOOP(uint8_t);
  else if (strcmp(name, "uint16") == 0) REDUCE_LOOP(uint16_t);
  else if (strcmp(name, "uint32") == 0) REDUCE_LOOP(uint32_t);
  else if (strcmp(name, "uint64") == 0) REDUCE_LOOP(uint64_t);
  else
    return 0;
  return 1;
}

/* tex_fetch(u64 tex, float *out, u64 w, u64 n): out[i] = the texture's
 * float element (i % w, i / w), or NaN past its end or for a handle that
 * is not a live texture (t/texture_kernels.lua) */
static void tex_fetch(Param *p)
{
  size_t bytes = 0, pitch = 0;
  const unsigned char *data = fake_object_data(param_u64(p[0]), 0, &bytes, &pitch);
  unsigned char *out = param_ptr(p[1]);   /* bytes: a fuzzed slice may be unaligned */
  uint64_t w = param_u64(p[2]);
  const float nan = NAN;
  for (uint64_t i = 0, n = clamp(param_u64(p[3]), sizeof(float), out, NULL); i < n; i++) {
    size_t at = w ? (size_t)(i / w) * pitch + (size_t)(i % w) * sizeof(float) : SIZE_MAX;
    int inside = data && at <= bytes - sizeof(float) && bytes >= sizeof(float);
    memcpy(out + i * sizeof(float), inside ? data + at : (const unsigned char *)&nan, sizeof(float));
  }
}

/* surf_fill(u64 surf, float value, u64 w, u64 n): the surface's float
 * element (i % w, i / w) becomes value + i, as far as the surface reaches */
static void surf_fill(Param *p)
{
  size_t bytes = 0, pitch = 0;
  unsigned char *data = fake_object_data(param_u64(p[0]), 1, &bytes, &pitch);
  float value = param_f32(p[1]);
  uint64_t w = param_u64(p[2]);
  for (uint64_t i = 0, n = param_u64(p[3]); data && w && i < n; i++) {
    size_t at = (size_t)(i / w) * pitch + (size_t)(i % w) * sizeof(float);
    float v = value + (float)i;
    if (bytes >= sizeof v && at <= bytes - sizeof v)
      memcpy(data + at, &v, sizeof v);
  }
}

/* An emulation runs only for a kernel of its name whose parameters have
 * its sizes, in bytes, one digit each: a user's kernel of the same name
 * with other parameters (scale_and_bias(float *, size_t, float, float))
 * runs as a no-op, as other unknown kernels do, rather than reading its
 * size as a pointer. */
static const struct { const char *name; const char *sizes; void (*run)(Param *); } emulations[] = {
  {"tex_fetch", "8888", tex_fetch},
  {"surf_fill", "8488", surf_fill},
  {"vector_scale", "8848", vector_scale},
  {"scale_and_bias", "8448", scale_and_bias},
};

/* Whether fn's parameters have the sizes that sizes spells, and no more. */
static int params_sized(CUfunction fn, const char *sizes)
{
  int n = fake_function_nparams(fn);
  if (n < 0 || (size_t)n != strlen(sizes))
    return 0;
  for (int i = 0; i < n; i++) {
    size_t offset = 0, size = 0;
    if (fake_function_param(fn, (size_t)i, &offset, &size) != CUDA_SUCCESS ||
        size != (size_t)(sizes[i] - '0'))
      return 0;
  }
  return 1;
}

/* The buffer past the first parameter, to the address in the first. */
static void echo_params(CUfunction fn, const unsigned char *args)
{
  size_t first = 0, offset = 0, size = 0, end = 0;
  int n = fake_function_nparams(fn);
  if (n < 2 || fake_function_param(fn, 0, &first, &size) != CUDA_SUCCESS || size != 8)
    return;
  for (int i = 1; i < n; i++)
    if (fake_function_param(fn, (size_t)i, &offset, &size) == CUDA_SUCCESS && offset + size > end)
      end = offset + size;
  fake_function_param(fn, 1, &offset, &size);
  unsigned char *out = (unsigned char *)(uintptr_t)param_u64(args + first);
  memcpy(out, args + offset, end - offset);
}

/* span2d_scale(struct {float *data; long rows, cols, stride;} m, float s):
 * a struct by value, t/args_gpu.t's mdspan. */
static void span2d_scale(CUfunction fn, const unsigned char *args)
{
  size_t m = 0, sp = 0, size = 0;
  if (fake_function_nparams(fn) != 2 || fake_function_param(fn, 0, &m, &size) != CUDA_SUCCESS ||
      size != 32 || fake_function_param(fn, 1, &sp, &size) != CUDA_SUCCESS || size != 4)
    return;
  float *data = (float *)(uintptr_t)param_u64(args + m), s = param_f32(args + sp);
  int64_t rows, cols, stride;
  memcpy(&rows, args + m + 8, 8);
  memcpy(&cols, args + m + 16, 8);
  memcpy(&stride, args + m + 24, 8);
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++)
      data[i * stride + j] *= s;
}

void fake_kernel_run(CUfunction fn, const unsigned char *args)
{
  Param params[FAKE_MAX_PARAMS];
  int n = fake_function_nparams(fn);
  if (strstr(fake_function_name(fn), "echo_params")) {
    echo_params(fn, args);
    return;
  }
  if (strcmp(fake_function_name(fn), "cudalua_bench_block") == 0 && params_sized(fn, "888")) {
    size_t flag = 0, timed_out = 0, size = 0;
    fake_function_param(fn, 0, &flag, &size);
    fake_function_param(fn, 1, &timed_out, &size);
    fake_hold_launched((volatile int *)param_ptr(args + flag), (volatile int *)param_ptr(args + timed_out));
    return;
  }
  if (strcmp(fake_function_name(fn), "span2d_scale") == 0) {
    span2d_scale(fn, args);
    return;
  }
  for (int i = 0; i < n && i < FAKE_MAX_PARAMS; i++) {
    size_t offset = 0, size = 0;
    memset(params[i], 0, sizeof params[i]);
    if (fake_function_param(fn, (size_t)i, &offset, &size) == CUDA_SUCCESS)
      memcpy(params[i], args + offset, size < 8 ? size : 8);
  }
  if (params_sized(fn, "888") && mpi_reduce(fake_function_name(fn), params))
    return;
  for (size_t i = 0; i < sizeof emulations / sizeof emulations[0]; i++)
    if (strcmp(fake_function_name(fn), emulations[i].name) == 0 && params_sized(fn, emulations[i].sizes))
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
    if (offset + size > FAKE_PARAM_BYTES)
      return CUDA_ERROR_INVALID_VALUE;
    memcpy(w->u.kernel.args + offset, params[i], size);
    for (size_t at = 0; at + 8 <= size; at += 8) {   /* a pointer (or a TMA's) to VMM it cannot write */
      uint64_t word;
      memcpy(&word, (const unsigned char *)params[i] + at, 8);
      if (fake_vmm_faults((uintptr_t)word, 1, 1))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    }
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
