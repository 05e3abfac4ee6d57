/* SPDX-License-Identifier: MIT */
/* ref.h: what the raw driver-API reference programs (launch_ref, copy_ref)
 * share: error checks that exit loudly, the clock, order statistics, option
 * parsing, device setup and an NVRTC compile.
 *
 * The references are the yardstick the Lua benchmarks are measured
 * against, so a wrong number is worse than none: every CUresult is checked
 * and the first failure ends the program with exit status 1, naming the API
 * and the error. Usage errors exit with status 2. */
#ifndef CUDALUA_BENCH_REF_H
#define CUDALUA_BENCH_REF_H

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <nvrtc.h>

#define REF_EXIT_FAILURE 1
#define REF_EXIT_USAGE   2

/* The program's name, for messages; main sets it. */
static const char *ref_prog = "ref";

/* --- failing loudly --------------------------------------------------------- */

__attribute__((noreturn, format(printf, 1, 2)))
static inline void ref_die(const char *fmt, ...)
{
  va_list ap;
  fflush(stdout);               /* keep a combined log in order */
  fprintf(stderr, "%s: ", ref_prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(REF_EXIT_FAILURE);
}

/* call is the text of the failed call expression; only the API name (the
 * text before the first parenthesis) goes into the message. */
__attribute__((noreturn, cold))
static inline void ref_cuda_failed(CUresult rc, const char *call, const char *file, int line)
{
  const char *name = NULL, *text = NULL;
  if (cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == NULL)
    name = "unknown CUresult";
  if (cuGetErrorString(rc, &text) != CUDA_SUCCESS || text == NULL)
    text = "no description";
  /* the stub library cannot name its own error */
  if (rc == CUDA_ERROR_STUB_LIBRARY)
    name = "CUDA_ERROR_STUB_LIBRARY", text = "the toolkit's stub libcuda was loaded, not the driver";
  ref_die("%.*s: %s (%d: %s) at %s:%d", (int)strcspn(call, "("), call, name, (int)rc,
          text, file, line);
}

__attribute__((noreturn, cold))
static inline void ref_nvrtc_failed(nvrtcResult rc, const char *call, const char *file, int line)
{
  ref_die("%.*s: %s (%d) at %s:%d", (int)strcspn(call, "("), call, nvrtcGetErrorString(rc),
          (int)rc, file, line);
}

/* Cheap enough for the timed loops: a compare and a never-taken branch. */
#define CHECK(call)                                                     \
  do {                                                                  \
    CUresult ref_rc_ = (call);                                          \
    if (ref_rc_ != CUDA_SUCCESS)                                        \
      ref_cuda_failed(ref_rc_, #call, __FILE__, __LINE__);              \
  } while (0)

#define NVRTC_CHECK(call)                                               \
  do {                                                                  \
    nvrtcResult ref_nrc_ = (call);                                      \
    if (ref_nrc_ != NVRTC_SUCCESS)                                      \
      ref_nvrtc_failed(ref_nrc_, #call, __FILE__, __LINE__);            \
  } while (0)

/* The name of a CUresult, for '#' lines that report a skip. */
static inline const char *ref_error_name(CUresult rc)
{
  const char *name = NULL;
  if (cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == NULL)
    return "unknown CUresult";
  return name;
}

static inline void *ref_malloc(size_t size)
{
  void *p = malloc(size);
  if (p == NULL)
    ref_die("out of host memory (%zu bytes)", size);
  return p;
}

/* --- time and statistics ----------------------------------------------------- */

/* Seconds on the monotonic clock: the same clock as cuda.clock(), so the
 * Lua benchmarks and the references read time the same way. */
static inline double ref_clock(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int ref_compare_doubles(const void *pa, const void *pb)
{
  double a = *(const double *)pa, b = *(const double *)pb;
  return (a > b) - (a < b);
}

/* The p-th percentile (0..100) of n sorted values, interpolating linearly
 * between the two nearest ranks (numpy's default). launch_cost.lua computes
 * it the same way. */
static inline double ref_percentile(const double *sorted, int n, double p)
{
  double pos = p / 100.0 * (n - 1);
  int lo = (int)pos;
  if (lo >= n - 1)
    return sorted[n - 1];
  return sorted[lo] + (pos - lo) * (sorted[lo + 1] - sorted[lo]);
}

typedef struct ref_stats {
  double median, min, p90, max;
} ref_stats;

/* Sorts values in place. */
static inline ref_stats ref_summarize(double *values, int n)
{
  qsort(values, (size_t)n, sizeof *values, ref_compare_doubles);
  ref_stats st = {
    .median = ref_percentile(values, n, 50),
    .min = values[0],
    .p90 = ref_percentile(values, n, 90),
    .max = values[n - 1],
  };
  return st;
}

/* --- options -------------------------------------------------------------- */

/* A whole decimal number in [min, max] for option opt, or exit 2. */
static inline long long ref_parse_number(const char *opt, const char *text, long long min,
                                         long long max)
{
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max) {
    fprintf(stderr, "%s: --%s must be a whole number from %lld to %lld (got '%s')\n",
            ref_prog, opt, min, max, text);
    exit(REF_EXIT_USAGE);
  }
  return v;
}

/* After getopt_long: the references take options only. */
static inline void ref_reject_operands(int argc, char **argv, void (*usage)(FILE *))
{
  if (optind < argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", ref_prog, argv[optind]);
    usage(stderr);
    exit(REF_EXIT_USAGE);
  }
}

/* --- device --------------------------------------------------------------- */

typedef struct ref_device {
  int ordinal;
  CUdevice handle;
  CUcontext ctx;                /* the retained primary context, current */
  int cc_major, cc_minor;
  char name[256];
} ref_device;

/* Initialise the driver and make the primary context of device ordinal
 * current: the context cudalua uses too. */
static inline void ref_open_device(ref_device *d, int ordinal)
{
  int count = 0;
  CHECK(cuInit(0));
  CHECK(cuDeviceGetCount(&count));
  if (ordinal >= count)
    ref_die("no device %d: the driver reports %d device(s)", ordinal, count);
  d->ordinal = ordinal;
  CHECK(cuDeviceGet(&d->handle, ordinal));
  CHECK(cuDeviceGetName(d->name, (int)sizeof d->name, d->handle));
  CHECK(cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->handle));
  CHECK(cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->handle));
  CHECK(cuDevicePrimaryCtxRetain(&d->ctx, d->handle));
  CHECK(cuCtxSetCurrent(d->ctx));
}

static inline void ref_close_device(ref_device *d)
{
  CHECK(cuCtxSynchronize());
  CHECK(cuCtxSetCurrent(NULL));
  CHECK(cuDevicePrimaryCtxRelease(d->handle));
}

/* The first header line: "# PROG: NAME (device N, sm_XY), driver X.Y". */
static inline void ref_print_device_header(const ref_device *d)
{
  int version = 0;
  CHECK(cuDriverGetVersion(&version));
  printf("# %s: %s (device %d, sm_%d%d), driver %d.%d, cuda.h %d.%d\n", ref_prog, d->name,
         d->ordinal, d->cc_major, d->cc_minor, version / 1000, version % 1000 / 10,
         CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
}

/* --- NVRTC ---------------------------------------------------------------- */

/* Compile CUDA C++ source to a cubin for sm_<major><minor>. On failure,
 * print the compile log and exit 1. The caller frees the cubin. */
static inline char *ref_compile_cubin(const char *source, const char *name, int major,
                                      int minor)
{
  char arch[64];
  snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
  const char *options[] = {arch};
  nvrtcProgram prog;
  NVRTC_CHECK(nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL));
  nvrtcResult rc = nvrtcCompileProgram(prog, 1, options);
  if (rc != NVRTC_SUCCESS) {
    size_t log_size = 0;
    NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &log_size));
    char *log = ref_malloc(log_size + 1);
    NVRTC_CHECK(nvrtcGetProgramLog(prog, log));
    log[log_size] = '\0';
    ref_die("nvrtcCompileProgram: %s for %s (%s):\n%s", nvrtcGetErrorString(rc), name, arch, log);
  }
  size_t size = 0;
  NVRTC_CHECK(nvrtcGetCUBINSize(prog, &size));
  char *cubin = ref_malloc(size);
  NVRTC_CHECK(nvrtcGetCUBIN(prog, cubin));
  NVRTC_CHECK(nvrtcDestroyProgram(&prog));
  return cubin;
}

/* The whole of a text file, NUL-terminated; exits on failure. */
static inline char *ref_read_file(const char *path)
{
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    ref_die("cannot open %s: %s", path, strerror(errno));
  size_t cap = 4096, len = 0, got;
  char *text = ref_malloc(cap);
  while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
    len += got;
    if (cap - len - 1 == 0) {
      cap *= 2;
      text = realloc(text, cap);
      if (text == NULL)
        ref_die("out of host memory reading %s", path);
    }
  }
  if (ferror(f))
    ref_die("cannot read %s: %s", path, strerror(errno));
  fclose(f);
  text[len] = '\0';
  return text;
}

/* Compile file from kernels_dir, or the embedded copy of it when kernels_dir
 * is NULL, for the device's architecture, and load it as a module. */
static inline CUmodule ref_load_kernels(const ref_device *d, const char *kernels_dir,
                                        const char *file, const char *embedded)
{
  char *source = NULL;
  char name[4096];
  snprintf(name, sizeof name, "%s (embedded)", file);
  if (kernels_dir != NULL) {
    snprintf(name, sizeof name, "%s/%s", kernels_dir, file);
    source = ref_read_file(name);
  }
  char *cubin = ref_compile_cubin(source ? source : embedded, name, d->cc_major, d->cc_minor);
  CUmodule module;
  CHECK(cuModuleLoadData(&module, cubin));
  free(cubin);
  free(source);
  return module;
}

#endif
