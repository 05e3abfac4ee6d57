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
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
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

/* --- adaptive timing, as cuda.bench.time's -------------------------------- */

/* How a figure is timed: runs timed runs after warmup untimed ones; with
 * precision > 0 (adaptive), at least runs, then on until the median's 95%
 * confidence interval is within +-precision of it, max_time seconds of
 * timed runs have passed or max_runs are done. The same rule as
 * cuda.bench.time (lua/cuda/bench.lua), so both sides of a ratio stop
 * alike. */
typedef struct ref_timing {
  int runs, warmup, max_runs;
  double precision, max_time;
} ref_timing;

#define REF_MAX_RUNS 100000

/* The 1-based ranks lo, hi of a distribution-free 95% confidence interval
 * of the median of n samples: the count below the median is Binomial(n,
 * 1/2), lo the greatest rank with P(X <= lo - 1) <= 2.5%, hi = n + 1 - lo
 * (cuda.bench.median_ci_ranks). 0 when n is too small (n < 6). */
static inline int ref_median_ci_ranks(int n, int *lo, int *hi)
{
  double cdf = 0, log_choose = 0, log_half_n = n * log(0.5);
  int found = 0;
  for (int j = 0; j <= n / 2; j++) {
    if (j > 0)
      log_choose += log((double)(n - j + 1)) - log((double)j);
    cdf += exp(log_choose + log_half_n);
    if (cdf > 0.025)
      break;
    found = j + 1;
  }
  if (!found)
    return 0;
  *lo = found;
  *hi = n + 1 - found;
  return 1;
}

/* The state of one adaptive loop: ref_loop_start after the warm-up, then
 * ref_loop_done after each timed run. */
typedef struct ref_loop {
  const ref_timing *t;
  double t0;
  int last_check;
  double *sorted;               /* scratch, REF_MAX_RUNS */
} ref_loop;

static inline void ref_loop_start(ref_loop *l, const ref_timing *t, double *scratch)
{
  l->t = t;
  l->t0 = ref_clock();
  l->last_check = 0;
  l->sorted = scratch;
}

/* Whether the n samples so far are enough. */
static inline int ref_loop_done(ref_loop *l, const double *samples, int n)
{
  const ref_timing *t = l->t;
  if (t->precision <= 0)
    return n >= t->runs;
  if (n >= t->max_runs || (n >= t->runs && ref_clock() - l->t0 >= t->max_time))
    return 1;
  int step = l->last_check / 10 > 1 ? l->last_check / 10 : 1, lo, hi;
  if (n < t->runs || n - l->last_check < step)
    return 0;
  l->last_check = n;
  memcpy(l->sorted, samples, sizeof(double) * (size_t)n);
  qsort(l->sorted, (size_t)n, sizeof(double), ref_compare_doubles);
  if (!ref_median_ci_ranks(n, &lo, &hi))
    return 0;
  double median = n % 2 ? l->sorted[n / 2] : (l->sorted[n / 2 - 1] + l->sorted[n / 2]) / 2;
  return (l->sorted[hi - 1] - l->sorted[lo - 1]) / 2 <= t->precision * median;
}

/* "<key> <median> <min> <max> <n> <ci_lo> <ci_hi>": a figure with its run
 * count and the median's 95% interval (min and max below 6 runs). Sorts
 * the samples in place. */
static inline void ref_print_figure(const char *key, double *samples, int n, int decimals)
{
  ref_stats st = ref_summarize(samples, n);
  int lo = 1, hi = n;
  ref_median_ci_ranks(n, &lo, &hi);
  printf("%s %.*f %.*f %.*f %d %.*f %.*f\n", key, decimals, st.median, decimals, st.min, decimals,
         st.max, n, decimals, samples[lo - 1], decimals, samples[hi - 1]);
  fflush(stdout);
}

/* --precision P (a percentage: "1%", "1", "0.5") and --max-time S. */
static inline double ref_parse_percent(const char *opt, const char *text)
{
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end != text && *end == '%')
    end++;
  if (errno != 0 || end == text || *end != '\0' || !(v >= 0) || v > 100) {
    fprintf(stderr, "%s: --%s must be a percentage from 0 to 100 (got '%s')\n", ref_prog, opt, text);
    exit(REF_EXIT_USAGE);
  }
  return v / 100;
}

static inline double ref_parse_seconds(const char *opt, const char *text)
{
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !(v > 0) || v > 3600) {
    fprintf(stderr, "%s: --%s must be a number of seconds above 0 (got '%s')\n", ref_prog, opt, text);
    exit(REF_EXIT_USAGE);
  }
  return v;
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
  /* As cudalua's dev.memory_resource: the default pool keeps what is freed
   * across synchronizations (release threshold UINT64_MAX). */
  CUmemoryPool pool;
  cuuint64_t threshold = UINT64_MAX;
  CHECK(cuDeviceGetDefaultMemPool(&pool, d->handle));
  CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
}

/* A stream as cudalua's dev:create_stream() makes one: non-blocking, priority 0. */
static inline CUstream ref_create_stream(void)
{
  CUstream s;
  CHECK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0));
  return s;
}

/* Page-locked host memory as cudalua's cuda.PinnedMemoryResource() allocates it. */
#define REF_PINNED_FLAGS CU_MEMHOSTALLOC_PORTABLE

static inline void *ref_pinned_alloc(size_t bytes)
{
  void *p = NULL;
  CHECK(cuMemHostAlloc(&p, bytes, REF_PINNED_FLAGS));
  return p;
}

/* The head start (cuda.bandwidth.HEAD_START_BYTES): a device memset of this
 * many bytes queued before the start event keeps the stream busy (~60 us on
 * an H200) while the host issues the start event, the work and the stop
 * event, so the start event fires with the work already queued behind it. */
#define REF_HEAD_START_BYTES (256ull << 20)

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
