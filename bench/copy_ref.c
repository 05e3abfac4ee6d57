/* SPDX-License-Identifier: MIT */
/* copy_ref: copy bandwidth through the raw CUDA driver API, for pinned,
 * pageable, pool-allocated pinned, device and managed memory. The
 * yardstick for `memory_resources --bandwidth`, which copies the same way
 * through cudalua (bench/README.md, "Like with like").
 *
 * Method, call for call memory_resources' measure_copy: per kind of copy,
 * WARMUP_COPIES untimed runs, then timed runs (--runs, and with --precision
 * on until the median's 95% interval is within +-P, as cuda.bench.time) of:
 * poison the destination (cuMemsetD8Async; a host memset after a stream
 * sync for pageable memory, as buf:fill does), memset --head-start bytes of
 * device scratch, record an event, cuMemcpyAsync, record an event, wait;
 * rate = bytes / elapsed time. After the timed runs the last copy, into a
 * poisoned destination, is read back (device memory into a zeroed pinned
 * buffer) and compared byte for byte with its source's pattern; a copy that
 * went wrong ends the program (exit 1) instead of printing a rate. Device
 * memory from the default pool (cudalua's threshold), pinned memory
 * cuMemHostAlloc(PORTABLE), streams non-blocking at priority 0.
 * Output: "<key> <median> <min> <max> <n> <ci_lo> <ci_hi>" in GB/s (1e9
 * bytes/s), after '#' header lines; a kind the driver refuses is reported on
 * a '#' line. */
#include "ref.h"

#define DEFAULT_BYTES   64000000LL
#define MAX_BYTES       (16LL << 30)
#define WARMUP_COPIES   2
#define POISON          0xa5    /* written over a destination before each copy */

typedef struct copy {
  const char *key;
  CUdeviceptr src, dst;         /* host memory by its address (UVA) */
  int dst_pageable;             /* poisoned by the host, as buf:fill poisons host memory */
  int dst_device;               /* read back before the comparison */
} copy;

typedef struct bench {
  const ref_device *dev;
  CUstream stream, stream2;     /* stream2: the second direction of the concurrent copies */
  CUevent start, end, end2;     /* timing events */
  size_t bytes;
  ref_timing timing;
  int verify_each;              /* --verify each: check every timed copy (the GPU idles meanwhile) */
  int pool_memory;              /* device memory from the default pool (else cuMemAlloc) */
  size_t head_bytes;
  const char *only;             /* --only: a comma-separated list of keys, or NULL for all */
  CUdeviceptr head_start;
  unsigned char *pattern;       /* pageable: what every source holds */
  unsigned char *readback;      /* pinned: device destinations are read back here */
  CUdeviceptr dev_src;          /* holds the pattern; never written after setup */
  CUdeviceptr dev_dst;          /* destination of the copies to the device */
  double *rates, *rates2, *times, *scratch;
} bench;

static int wanted(const bench *b, const char *key)
{
  if (b->only == NULL)
    return 1;
  size_t n = strlen(key);
  for (const char *p = b->only; (p = strstr(p, key)) != NULL; p += n)
    if ((p == b->only || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
      return 1;
  return 0;
}

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

static void *host_pointer(CUdeviceptr p)
{
  return (void *)(uintptr_t)p;
}

static CUdeviceptr address(const void *p)
{
  return (CUdeviceptr)(uintptr_t)p;
}

/* As memory_resources: a zeroed pinned buffer, the copy back, a wait. */
static void verify_copy(bench *b, const copy *c)
{
  const unsigned char *got = host_pointer(c->dst);
  if (c->dst_device) {
    CHECK(cuMemsetD8Async(address(b->readback), 0, b->bytes, b->stream));
    CHECK(cuMemcpyAsync(address(b->readback), c->dst, b->bytes, b->stream));
    got = b->readback;
  }
  CHECK(cuStreamSynchronize(b->stream));
  expect_pattern(b, c->key, got);
}

/* --- one kind of copy --------------------------------------------------------- */

/* Stream-ordered before the start event, so none of it is timed. */
static void prepare_copy(const bench *b, const copy *c, CUstream s)
{
  if (c->dst_pageable) {
    CHECK(cuStreamSynchronize(s));
    memset(host_pointer(c->dst), POISON, b->bytes);
  } else
    CHECK(cuMemsetD8Async(c->dst, POISON, b->bytes, s));
}

static void head_start(const bench *b)
{
  if (b->head_bytes)
    CHECK(cuMemsetD8Async(b->head_start, 0, b->head_bytes, b->stream));
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

static void measure_copy(bench *b, const copy *c)
{
  if (!wanted(b, c->key))
    return;
  for (int w = 0; w < WARMUP_COPIES; w++)   /* as bench.time's warm-up: the copy alone */
    CHECK(cuMemcpyAsync(c->dst, c->src, b->bytes, b->stream));
  CHECK(cuStreamSynchronize(b->stream));
  ref_loop loop;
  int n = 0;
  ref_loop_start(&loop, &b->timing, b->scratch);
  do {
    prepare_copy(b, c, b->stream);
    head_start(b);
    CHECK(cuEventRecord(b->start, b->stream));
    CHECK(cuMemcpyAsync(c->dst, c->src, b->bytes, b->stream));
    CHECK(cuEventRecord(b->end, b->stream));
    CHECK(cuEventSynchronize(b->end));
    b->rates[n++] = gbps(b, c->key, elapsed_ms(b->start, b->end));
    if (b->verify_each)
      verify_copy(b, c);
  } while (!ref_loop_done(&loop, b->rates, n));
  verify_copy(b, c);
  ref_print_figure(c->key, b->rates, n, 2);
}

/* --- pinned, pageable, device ------------------------------------------------ */

/* Pinned to device and back, then both at once: the copy to the device on
 * b->stream, the copy back on b->stream2, both behind one start event.
 * Each direction's time runs from that common start to its own end event,
 * so a direction issued a few microseconds later is charged for them. */
static void measure_concurrent(bench *b, const copy *h2d, const copy *d2h)
{
  if (!wanted(b, "h2d_pinned_concurrent"))
    return;
  for (int w = 0; w < WARMUP_COPIES; w++) {
    CHECK(cuMemcpyAsync(h2d->dst, h2d->src, b->bytes, b->stream));
    CHECK(cuMemcpyAsync(d2h->dst, d2h->src, b->bytes, b->stream2));
  }
  CHECK(cuCtxSynchronize());
  ref_loop loop;
  int n = 0;
  ref_loop_start(&loop, &b->timing, b->scratch);
  do {
    prepare_copy(b, h2d, b->stream);
    prepare_copy(b, d2h, b->stream);
    head_start(b);
    CHECK(cuEventRecord(b->start, b->stream));
    CHECK(cuStreamWaitEvent(b->stream2, b->start, 0));
    CHECK(cuMemcpyAsync(h2d->dst, h2d->src, b->bytes, b->stream));
    CHECK(cuEventRecord(b->end, b->stream));
    CHECK(cuMemcpyAsync(d2h->dst, d2h->src, b->bytes, b->stream2));
    CHECK(cuEventRecord(b->end2, b->stream2));
    CHECK(cuEventSynchronize(b->end));
    CHECK(cuEventSynchronize(b->end2));
    float h2d_ms = elapsed_ms(b->start, b->end), d2h_ms = elapsed_ms(b->start, b->end2);
    b->rates[n] = gbps(b, "h2d_pinned_concurrent", h2d_ms);
    b->rates2[n] = gbps(b, "d2h_pinned_concurrent", d2h_ms);
    b->times[n++] = h2d_ms > d2h_ms ? h2d_ms : d2h_ms;
  } while (!ref_loop_done(&loop, b->times, n));
  verify_copy(b, h2d);
  verify_copy(b, d2h);
  ref_print_figure("h2d_pinned_concurrent", b->rates, n, 2);
  ref_print_figure("d2h_pinned_concurrent", b->rates2, n, 2);
  ref_stats both = ref_summarize(b->times, n);
  printf("# pinned_concurrent_combined_ms %.3f %.3f %.3f (median min max; %.2f GB/s in both "
         "directions together at the median)\n",
         both.median, both.min, both.max, 2.0 * (double)b->bytes / (both.median * 1e6));
}

static void run_pinned(bench *b)
{
  unsigned char *src = ref_pinned_alloc(b->bytes), *dst = ref_pinned_alloc(b->bytes);
  memcpy(src, b->pattern, b->bytes);
  copy h2d = {.key = "h2d_pinned", .src = address(src), .dst = b->dev_dst, .dst_device = 1};
  copy d2h = {.key = "d2h_pinned", .src = b->dev_src, .dst = address(dst)};
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
  copy h2d = {.key = "h2d_pageable", .src = address(src), .dst = b->dev_dst, .dst_device = 1};
  copy d2h = {.key = "d2h_pageable", .src = b->dev_src, .dst = address(dst), .dst_pageable = 1};
  measure_copy(b, &h2d);
  measure_copy(b, &d2h);
  free(dst);
  free(src);
}

/* Device to device: the rate counts the bytes copied once, not read + written. */
static void run_device(bench *b)
{
  copy d2d = {.key = "d2d", .src = b->dev_src, .dst = b->dev_dst, .dst_device = 1};
  measure_copy(b, &d2d);
}

/* --- pinned memory from a host-located pool ---------------------------------- */

/* A pool of pinned host memory that the device may read and write, as
 * cuda.PinnedMemoryResource{pool = true} makes it, or NULL, after a '#'
 * line, where the driver refuses one. */
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
  cuuint64_t threshold = UINT64_MAX;
  CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
  return pool;
}

static void run_pinned_pool(bench *b)
{
  if (!wanted(b, "h2d_pinned_pool") && !wanted(b, "d2h_pinned_pool"))
    return;
  CUmemoryPool pool = create_host_pool(b);
  if (pool == NULL)
    return;
  CUdeviceptr src = 0, dst = 0;
  CHECK(cuMemAllocFromPoolAsync(&src, b->bytes, pool, b->stream));
  CHECK(cuMemAllocFromPoolAsync(&dst, b->bytes, pool, b->stream));
  CHECK(cuStreamSynchronize(b->stream));
  memcpy(host_pointer(src), b->pattern, b->bytes);
  copy h2d = {.key = "h2d_pinned_pool", .src = src, .dst = b->dev_dst, .dst_device = 1};
  copy d2h = {.key = "d2h_pinned_pool", .src = b->dev_src, .dst = dst};
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
  if (!wanted(b, "managed_prefetched_to_device"))
    return;
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
  /* ...and moved to the device once, as memory_resources does (buf:prefetch) */
  CUmemLocation to_device = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = b->dev->ordinal};
  CHECK(cuMemPrefetchAsync(managed, b->bytes, to_device, 0, b->stream));
  copy d2d = {.key = "managed_prefetched_to_device", .src = managed, .dst = b->dev_dst, .dst_device = 1};
  measure_copy(b, &d2d);
  CHECK(cuMemFree(managed));
}

/* --- setup and main ------------------------------------------------------------ */

static CUdeviceptr device_alloc(bench *b, size_t bytes)
{
  CUdeviceptr p = 0;
  if (b->pool_memory)
    CHECK(cuMemAllocAsync(&p, bytes, b->stream));
  else
    CHECK(cuMemAlloc(&p, bytes));
  return p;
}

static void device_free(bench *b, CUdeviceptr p)
{
  if (b->pool_memory)
    CHECK(cuMemFreeAsync(p, b->stream));
  else
    CHECK(cuMemFree(p));
}

static void setup(bench *b)
{
  int most = b->timing.precision > 0 ? b->timing.max_runs : b->timing.runs;
  b->rates = ref_malloc(sizeof(double) * (size_t)most);
  b->rates2 = ref_malloc(sizeof(double) * (size_t)most);
  b->times = ref_malloc(sizeof(double) * (size_t)most);
  b->scratch = ref_malloc(sizeof(double) * (size_t)most);
  b->stream = ref_create_stream();
  b->stream2 = ref_create_stream();
  CHECK(cuEventCreate(&b->start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&b->end, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&b->end2, CU_EVENT_DEFAULT));
  b->pattern = ref_malloc(b->bytes);
  fill_pattern(b->pattern, b->bytes, 0x9e3779b97f4a7c15u);
  b->readback = ref_pinned_alloc(b->bytes);
  b->dev_src = device_alloc(b, b->bytes);
  b->dev_dst = device_alloc(b, b->bytes);
  if (b->head_bytes)
    b->head_start = device_alloc(b, b->head_bytes);
  CHECK(cuMemcpyAsync(b->dev_src, address(b->pattern), b->bytes, b->stream));
  copy source = {.key = "device source", .dst = b->dev_src, .dst_device = 1};
  verify_copy(b, &source);
}

static void teardown(bench *b)
{
  CHECK(cuCtxSynchronize());
  if (b->head_start)
    device_free(b, b->head_start);
  device_free(b, b->dev_dst);
  device_free(b, b->dev_src);
  CHECK(cuStreamSynchronize(b->stream));
  CHECK(cuMemFreeHost(b->readback));
  CHECK(cuEventDestroy(b->end2));
  CHECK(cuEventDestroy(b->end));
  CHECK(cuEventDestroy(b->start));
  CHECK(cuStreamDestroy(b->stream2));
  CHECK(cuStreamDestroy(b->stream));
  free(b->pattern);
  free(b->scratch);
  free(b->times);
  free(b->rates2);
  free(b->rates);
}

static void usage(FILE *out)
{
  fprintf(out,
    "usage: %s [--bytes N] [--runs N] [--precision P] [--max-time S] [--device D]\n"
    "       [--head-start BYTES] [--verify last|each] [--device-memory pool|memalloc] [--only KEYS]\n"
    "Copy bandwidth through the raw CUDA driver API: pinned, pageable, pool-allocated\n"
    "pinned, device-to-device and managed memory, timed with CUDA events.\n"
    "  --bytes N          bytes per copy (default %lld)\n"
    "  --runs N           timed copies per kind (default 10, after %d warm-up copies;\n"
    "                     with --precision, the least)\n"
    "  --precision P      time until the median's 95%% interval is within +-P%% (default 0: --runs only)\n"
    "  --max-time S       with --precision: seconds of timed copies per kind at most (default 1)\n"
    "  --head-start BYTES the device memset queued before each start event (default %llu; 0: none)\n"
    "  --verify WHEN      last: the last timed copy (default, as memory_resources); each: every one\n"
    "  --device-memory M  pool: the default pool (default, as cudalua); memalloc: cuMemAlloc\n"
    "  --only KEYS        only these kinds, comma-separated (e.g. d2d,h2d_pinned)\n"
    "  --device D         device ordinal (default 0)\n"
    "Output: '<key> <median> <min> <max> <n> <ci_lo> <ci_hi>' in GB/s (1e9 bytes/s).\n",
    ref_prog, DEFAULT_BYTES, WARMUP_COPIES, REF_HEAD_START_BYTES);
}

static int parse_choice(const char *opt, const char *text, const char *yes, const char *no)
{
  if (strcmp(text, yes) == 0)
    return 1;
  if (strcmp(text, no) == 0)
    return 0;
  fprintf(stderr, "%s: --%s must be %s or %s (got '%s')\n", ref_prog, opt, yes, no, text);
  exit(REF_EXIT_USAGE);
}

int main(int argc, char **argv)
{
  static const struct option longopts[] = {
    {"bytes", required_argument, NULL, 'n'}, {"runs", required_argument, NULL, 'r'},
    {"repeats", required_argument, NULL, 'r'}, {"precision", required_argument, NULL, 'p'},
    {"max-time", required_argument, NULL, 't'}, {"head-start", required_argument, NULL, 'H'},
    {"verify", required_argument, NULL, 'v'}, {"device-memory", required_argument, NULL, 'm'},
    {"only", required_argument, NULL, 'o'}, {"device", required_argument, NULL, 'd'},
    {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
  };
  ref_prog = "copy_ref";
  long long bytes = DEFAULT_BYTES, head = (long long)REF_HEAD_START_BYTES;
  bench b;
  memset(&b, 0, sizeof b);
  b.timing = (ref_timing){.runs = 10, .warmup = WARMUP_COPIES, .max_runs = REF_MAX_RUNS, .max_time = 1};
  b.pool_memory = 1;
  int device = 0, c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 'n': bytes = ref_parse_number("bytes", optarg, 1, MAX_BYTES); break;
    case 'r': b.timing.runs = (int)ref_parse_number("runs", optarg, 1, REF_MAX_RUNS); break;
    case 'p': b.timing.precision = ref_parse_percent("precision", optarg); break;
    case 't': b.timing.max_time = ref_parse_seconds("max-time", optarg); break;
    case 'H': head = ref_parse_number("head-start", optarg, 0, MAX_BYTES); break;
    case 'v': b.verify_each = parse_choice("verify", optarg, "each", "last"); break;
    case 'm': b.pool_memory = parse_choice("device-memory", optarg, "pool", "memalloc"); break;
    case 'o': b.only = optarg; break;
    case 'd': device = (int)ref_parse_number("device", optarg, 0, 1024); break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return REF_EXIT_USAGE;
    }
  }
  ref_reject_operands(argc, argv, usage);

  ref_device dev;
  ref_open_device(&dev, device);
  b.dev = &dev;
  b.bytes = (size_t)bytes;
  b.head_bytes = (size_t)head;
  setup(&b);
  ref_print_device_header(&dev);
  if (b.timing.precision > 0)
    printf("# %lld bytes per copy, %d+ runs to +-%g%% (at most %g s)", bytes, b.timing.runs,
           100 * b.timing.precision, b.timing.max_time);
  else
    printf("# %lld bytes per copy, %d runs", bytes, b.timing.runs);
  printf(" after %d warm-up copies, timed with CUDA events behind a %lld-byte memset head start (0: none) on a "
         "non-blocking stream; device memory: %s; verified: %s copy\n", WARMUP_COPIES, head,
         b.pool_memory ? "the default pool" : "cuMemAlloc", b.verify_each ? "every" : "the last");
  printf("# key median min max n ci_lo ci_hi (GB/s = 1e9 bytes/s; ci: the median's 95%% interval)\n");
  run_pinned(&b);
  run_pageable(&b);
  run_device(&b);
  run_pinned_pool(&b);
  run_managed(&b);
  teardown(&b);
  ref_close_device(&dev);
  return 0;
}
