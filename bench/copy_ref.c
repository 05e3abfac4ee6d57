/* SPDX-License-Identifier: MIT */
/* copy_ref: copy bandwidth through the raw CUDA driver API, for pinned,
 * pageable, pool-allocated pinned, device and managed memory. The
 * yardstick for `memory_resources --bandwidth`, which copies the same way
 * through cudalua (see bench/README.md).
 *
 * Method: per kind of copy, WARMUP_COPIES unmeasured copies, then per
 * repeat: poison the destination, record an event, copy, record an event,
 * wait, and take bytes / elapsed time. Every measured copy is then checked
 * byte for byte against the pattern its source was filled with, so a copy
 * that went wrong ends the program (exit 1) instead of printing a rate.
 * Output: "<key> <median> <min> <max>" in GB/s (1e9 bytes/s), after '#'
 * header lines; a kind the driver refuses is reported on a '#' line. */
#include <stdint.h>

#include "ref.h"

#define DEFAULT_BYTES   64000000LL
#define MAX_BYTES       (16LL << 30)
#define DEFAULT_REPEATS 20
#define WARMUP_COPIES   2
#define POISON          0xa5    /* written over a destination before each copy */

typedef enum { HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE } direction;

/* One kind of copy. Device-to-device copies go through cuMemcpyAsync,
 * which finds the kind of memory from the pointers, as managed memory
 * needs; the host copies use the explicit HtoD/DtoH calls. */
typedef struct copy {
  const char *key;
  direction dir;
  void *host;                   /* HOST_TO_DEVICE: source; DEVICE_TO_HOST: destination */
  CUdeviceptr dst;              /* HOST_TO_DEVICE, DEVICE_TO_DEVICE: destination */
  CUdeviceptr src;              /* DEVICE_TO_HOST, DEVICE_TO_DEVICE: source */
  CUdeviceptr prefetch;         /* managed memory moved to the device before each copy, or 0 */
} copy;

typedef struct bench {
  const ref_device *dev;
  CUstream stream, stream2;     /* stream2: the second direction of the concurrent copies */
  CUevent start, end, end2;     /* timing events */
  size_t bytes;
  int repeats;
  unsigned char *pattern;       /* pageable: what every source holds */
  unsigned char *readback;      /* pinned: device destinations are read back here */
  CUdeviceptr dev_src;          /* holds the pattern; never written after setup */
  CUdeviceptr dev_dst;          /* destination of the copies to the device */
  double *rates, *rates2, *times;   /* one per repeat */
} bench;

/* --- data and its verification ------------------------------------------------ */

/* Non-constant bytes from xorshift64: a copy engine or a page that is
 * all zeros can look fast or look right by accident; this cannot. */
static void fill_pattern(unsigned char *p, size_t bytes, uint64_t seed)
{
  uint64_t x = seed | 1;
  for (size_t i = 0; i < bytes; i += sizeof x) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t n = bytes - i < sizeof x ? bytes - i : sizeof x;
    memcpy(p + i, &x, n);
  }
}

static void expect_pattern(const bench *b, const char *key, const unsigned char *got)
{
  if (memcmp(got, b->pattern, b->bytes) == 0)
    return;
  size_t i = 0;
  while (got[i] == b->pattern[i])
    i++;
  ref_die("%s: the copy is wrong: byte %zu is 0x%02x, expected 0x%02x%s", key, i, got[i],
          b->pattern[i], got[i] == POISON ? " (the poison: not copied)" : "");
}

/* Read device memory back into b->readback and compare it with the pattern. */
static void expect_device_pattern(bench *b, const char *key, CUdeviceptr p)
{
  CHECK(cuMemcpyDtoHAsync(b->readback, p, b->bytes, b->stream));
  CHECK(cuStreamSynchronize(b->stream));
  expect_pattern(b, key, b->readback);
}

static void *host_pointer(CUdeviceptr p)
{
  return (void *)(uintptr_t)p;
}

/* --- one kind of copy --------------------------------------------------------- */

static void issue_copy(const bench *b, const copy *c, CUstream s)
{
  switch (c->dir) {
  case HOST_TO_DEVICE: CHECK(cuMemcpyHtoDAsync(c->dst, c->host, b->bytes, s)); break;
  case DEVICE_TO_HOST: CHECK(cuMemcpyDtoHAsync(c->host, c->src, b->bytes, s)); break;
  case DEVICE_TO_DEVICE: CHECK(cuMemcpyAsync(c->dst, c->src, b->bytes, s)); break;
  }
}

/* Stream-ordered before the start event, so none of it is timed. */
static void prepare_copy(const bench *b, const copy *c)
{
  if (c->dir == DEVICE_TO_HOST)
    memset(c->host, POISON, b->bytes);
  else
    CHECK(cuMemsetD8Async(c->dst, POISON, b->bytes, b->stream));
  if (c->prefetch) {
    CUmemLocation to_device = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = b->dev->ordinal};
    CHECK(cuMemPrefetchAsync(c->prefetch, b->bytes, to_device, 0, b->stream));
  }
}

static void verify_copy(bench *b, const copy *c)
{
  if (c->dir == DEVICE_TO_HOST)
    expect_pattern(b, c->key, c->host);
  else
    expect_device_pattern(b, c->key, c->dst);
}

/* GB/s (1e9 bytes/s) of bytes copied in ms milliseconds. */
static double gbps(const bench *b, const char *key, float ms)
{
  if (!(ms > 0))
    ref_die("%s: cuEventElapsedTime gave %g ms for %zu bytes", key, (double)ms, b->bytes);
  return (double)b->bytes / ((double)ms * 1e6);
}

static float elapsed_ms(CUevent from, CUevent to)
{
  float ms = 0;
  CHECK(cuEventElapsedTime(&ms, from, to));
  return ms;
}

static void print_rates(const char *key, double *rates, int n)
{
  ref_stats st = ref_summarize(rates, n);
  printf("%s %.2f %.2f %.2f\n", key, st.median, st.min, st.max);
  fflush(stdout);
}

static void measure_copy(bench *b, const copy *c)
{
  for (int w = 0; w < WARMUP_COPIES; w++) {
    prepare_copy(b, c);
    issue_copy(b, c, b->stream);
    CHECK(cuStreamSynchronize(b->stream));
  }
  for (int r = 0; r < b->repeats; r++) {
    prepare_copy(b, c);
    CHECK(cuEventRecord(b->start, b->stream));
    issue_copy(b, c, b->stream);
    CHECK(cuEventRecord(b->end, b->stream));
    CHECK(cuEventSynchronize(b->end));
    b->rates[r] = gbps(b, c->key, elapsed_ms(b->start, b->end));
    verify_copy(b, c);
  }
  print_rates(c->key, b->rates, b->repeats);
}

/* --- pinned, pageable, device ------------------------------------------------ */

/* Pinned to device and back, then both at once: the copy to the device on
 * b->stream, the copy back on b->stream2, both behind one start event.
 * Each direction's time runs from that common start to its own end event,
 * so a direction issued a few microseconds later is charged for them. */
static void measure_concurrent(bench *b, const copy *h2d, const copy *d2h)
{
  for (int w = 0; w < WARMUP_COPIES; w++) {
    issue_copy(b, h2d, b->stream);
    issue_copy(b, d2h, b->stream2);
  }
  CHECK(cuCtxSynchronize());
  for (int r = 0; r < b->repeats; r++) {
    prepare_copy(b, h2d);
    prepare_copy(b, d2h);
    CHECK(cuEventRecord(b->start, b->stream));
    CHECK(cuStreamWaitEvent(b->stream2, b->start, 0));
    issue_copy(b, h2d, b->stream);
    CHECK(cuEventRecord(b->end, b->stream));
    issue_copy(b, d2h, b->stream2);
    CHECK(cuEventRecord(b->end2, b->stream2));
    CHECK(cuEventSynchronize(b->end));
    CHECK(cuEventSynchronize(b->end2));
    float h2d_ms = elapsed_ms(b->start, b->end), d2h_ms = elapsed_ms(b->start, b->end2);
    b->rates[r] = gbps(b, "h2d_pinned_concurrent", h2d_ms);
    b->rates2[r] = gbps(b, "d2h_pinned_concurrent", d2h_ms);
    b->times[r] = h2d_ms > d2h_ms ? h2d_ms : d2h_ms;
    verify_copy(b, h2d);
    verify_copy(b, d2h);
  }
  print_rates("h2d_pinned_concurrent", b->rates, b->repeats);
  print_rates("d2h_pinned_concurrent", b->rates2, b->repeats);
  ref_stats both = ref_summarize(b->times, b->repeats);
  printf("# pinned_concurrent_combined_ms %.3f %.3f %.3f (median min max; %.2f GB/s in both "
         "directions together at the median)\n",
         both.median, both.min, both.max, 2.0 * (double)b->bytes / (both.median * 1e6));
}

static void run_pinned(bench *b)
{
  void *src = NULL, *dst = NULL;
  CHECK(cuMemHostAlloc(&src, b->bytes, 0));
  CHECK(cuMemHostAlloc(&dst, b->bytes, 0));
  memcpy(src, b->pattern, b->bytes);
  copy h2d = {.key = "h2d_pinned", .dir = HOST_TO_DEVICE, .host = src, .dst = b->dev_dst};
  copy d2h = {.key = "d2h_pinned", .dir = DEVICE_TO_HOST, .host = dst, .src = b->dev_src};
  measure_copy(b, &h2d);
  measure_copy(b, &d2h);
  h2d.key = "h2d_pinned_concurrent";
  d2h.key = "d2h_pinned_concurrent";
  measure_concurrent(b, &h2d, &d2h);
  CHECK(cuMemFreeHost(dst));
  CHECK(cuMemFreeHost(src));
}

static void run_pageable(bench *b)
{
  unsigned char *src = ref_malloc(b->bytes), *dst = ref_malloc(b->bytes);
  memcpy(src, b->pattern, b->bytes);
  copy h2d = {.key = "h2d_pageable", .dir = HOST_TO_DEVICE, .host = src, .dst = b->dev_dst};
  copy d2h = {.key = "d2h_pageable", .dir = DEVICE_TO_HOST, .host = dst, .src = b->dev_src};
  measure_copy(b, &h2d);
  measure_copy(b, &d2h);
  free(dst);
  free(src);
}

/* Device to device: the rate counts the bytes copied once, not read + written. */
static void run_device(bench *b)
{
  copy d2d = {.key = "d2d", .dir = DEVICE_TO_DEVICE, .dst = b->dev_dst, .src = b->dev_src};
  measure_copy(b, &d2d);
}

/* --- pinned memory from a host-located pool ---------------------------------- */

/* A pool of pinned host memory that the device may read and write, or
 * NULL, after a '#' line, where the driver refuses one. The driver makes
 * such a pool accessible to the host only; without device access copies
 * would not run as DMA from pinned memory. */
static CUmemoryPool create_host_pool(const bench *b)
{
  const char *skip = "# skip h2d_pinned_pool d2h_pinned_pool:";
  int supported = 0;
  CHECK(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED,
                             b->dev->handle));
  if (!supported) {
    printf("%s the device does not support host memory pools\n", skip);
    return NULL;
  }
  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemoryPool pool = NULL;
  CUresult rc = cuMemPoolCreate(&pool, &props);
  if (rc != CUDA_SUCCESS) {
    printf("%s cuMemPoolCreate: %s\n", skip, ref_error_name(rc));
    return NULL;
  }
  CUmemAccessDesc access = {
    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = b->dev->ordinal},
    .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
  };
  rc = cuMemPoolSetAccess(pool, &access, 1);
  if (rc != CUDA_SUCCESS) {
    printf("%s cuMemPoolSetAccess: %s\n", skip, ref_error_name(rc));
    CHECK(cuMemPoolDestroy(pool));
    return NULL;
  }
  return pool;
}

static void run_pinned_pool(bench *b)
{
  CUmemoryPool pool = create_host_pool(b);
  if (pool == NULL)
    return;
  CUdeviceptr src = 0, dst = 0;
  CHECK(cuMemAllocFromPoolAsync(&src, b->bytes, pool, b->stream));
  CHECK(cuMemAllocFromPoolAsync(&dst, b->bytes, pool, b->stream));
  CHECK(cuStreamSynchronize(b->stream));
  memcpy(host_pointer(src), b->pattern, b->bytes);
  copy h2d = {.key = "h2d_pinned_pool", .dir = HOST_TO_DEVICE, .host = host_pointer(src),
              .dst = b->dev_dst};
  copy d2h = {.key = "d2h_pinned_pool", .dir = DEVICE_TO_HOST, .host = host_pointer(dst),
              .src = b->dev_src};
  measure_copy(b, &h2d);
  measure_copy(b, &d2h);
  CHECK(cuMemFreeAsync(dst, b->stream));
  CHECK(cuMemFreeAsync(src, b->stream));
  CHECK(cuStreamSynchronize(b->stream));
  CHECK(cuMemPoolDestroy(pool));
}

/* --- managed memory, resident on the device ----------------------------------- */

static void run_managed(bench *b)
{
  int concurrent = 0;
  CHECK(cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
                             b->dev->handle));
  if (!concurrent) {
    printf("# skip managed_prefetched_to_device: the device cannot prefetch managed memory "
           "(no concurrent managed access)\n");
    return;
  }
  CUdeviceptr managed = 0;
  CHECK(cuMemAllocManaged(&managed, b->bytes, CU_MEM_ATTACH_GLOBAL));
  memcpy(host_pointer(managed), b->pattern, b->bytes);   /* written on the host... */
  copy d2d = {.key = "managed_prefetched_to_device", .dir = DEVICE_TO_DEVICE,
              .dst = b->dev_dst, .src = managed, .prefetch = managed};  /* ...moved before each copy */
  measure_copy(b, &d2d);
  CHECK(cuMemFree(managed));
}

/* --- setup and main ------------------------------------------------------------ */

static void setup(bench *b, const ref_device *d, size_t bytes, int repeats)
{
  memset(b, 0, sizeof *b);
  b->dev = d;
  b->bytes = bytes;
  b->repeats = repeats;
  b->rates = ref_malloc(sizeof(double) * (size_t)repeats);
  b->rates2 = ref_malloc(sizeof(double) * (size_t)repeats);
  b->times = ref_malloc(sizeof(double) * (size_t)repeats);
  CHECK(cuStreamCreate(&b->stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuStreamCreate(&b->stream2, CU_STREAM_NON_BLOCKING));
  CHECK(cuEventCreate(&b->start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&b->end, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&b->end2, CU_EVENT_DEFAULT));
  b->pattern = ref_malloc(bytes);
  fill_pattern(b->pattern, bytes, 0x9e3779b97f4a7c15u);
  CHECK(cuMemHostAlloc((void **)&b->readback, bytes, 0));
  CHECK(cuMemAlloc(&b->dev_src, bytes));
  CHECK(cuMemAlloc(&b->dev_dst, bytes));
  CHECK(cuMemcpyHtoD(b->dev_src, b->pattern, bytes));
  expect_device_pattern(b, "device source", b->dev_src);
}

static void teardown(bench *b)
{
  CHECK(cuCtxSynchronize());
  CHECK(cuMemFree(b->dev_dst));
  CHECK(cuMemFree(b->dev_src));
  CHECK(cuMemFreeHost(b->readback));
  CHECK(cuEventDestroy(b->end2));
  CHECK(cuEventDestroy(b->end));
  CHECK(cuEventDestroy(b->start));
  CHECK(cuStreamDestroy(b->stream2));
  CHECK(cuStreamDestroy(b->stream));
  free(b->pattern);
  free(b->times);
  free(b->rates2);
  free(b->rates);
}

static void usage(FILE *out)
{
  fprintf(out,
    "usage: %s [--bytes N] [--repeats N] [--device D]\n"
    "Copy bandwidth through the raw CUDA driver API: pinned, pageable, pool-allocated\n"
    "pinned, device-to-device and managed memory, timed with CUDA events.\n"
    "  --bytes N     bytes per copy (default %lld)\n"
    "  --repeats N   measured copies per kind (default %d, after %d warm-up copies)\n"
    "  --device D    device ordinal (default 0)\n"
    "Output: '<key> <median> <min> <max>' in GB/s (1e9 bytes/s).\n",
    ref_prog, DEFAULT_BYTES, DEFAULT_REPEATS, WARMUP_COPIES);
}

int main(int argc, char **argv)
{
  static const struct option longopts[] = {
    {"bytes", required_argument, NULL, 'n'},
    {"repeats", required_argument, NULL, 'r'},
    {"device", required_argument, NULL, 'd'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  ref_prog = "copy_ref";
  long long bytes = DEFAULT_BYTES;
  int repeats = DEFAULT_REPEATS, device = 0, c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 'n': bytes = ref_parse_number("bytes", optarg, 1, MAX_BYTES); break;
    case 'r': repeats = (int)ref_parse_number("repeats", optarg, 1, 100000); break;
    case 'd': device = (int)ref_parse_number("device", optarg, 0, 1024); break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return REF_EXIT_USAGE;
    }
  }
  ref_reject_operands(argc, argv, usage);

  ref_device dev;
  ref_open_device(&dev, device);
  bench b;
  setup(&b, &dev, (size_t)bytes, repeats);
  ref_print_device_header(&dev);
  printf("# %lld bytes per copy, %d repeats after %d warm-up copies, timed with CUDA events "
         "on a non-blocking stream; every copy verified\n", bytes, repeats, WARMUP_COPIES);
  printf("# key median min max (GB/s = 1e9 bytes/s)\n");
  run_pinned(&b);
  run_pageable(&b);
  run_device(&b);
  run_pinned_pool(&b);
  run_managed(&b);
  teardown(&b);
  ref_close_device(&dev);
  return 0;
}
