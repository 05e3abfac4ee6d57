/* SPDX-License-Identifier: MIT */
/* bandwidth_ref: the transfer-size sweep of `cudalua bandwidth` through the
 * raw CUDA driver API: pinned host memory and the copy engines, four paths
 * (h2d, d2h, both directions at once, d2d), every size of --sizes; and the
 * copy engines' cost per operation (--op-cost), as separate copies and,
 * where the driver has it, as one cuMemcpyBatchAsync.
 *
 * Method, call for call the same as cuda.bandwidth's (bench/README.md,
 * "Like with like"): per size, fresh data in every source; --warmup
 * untimed then --runs timed runs of: poison the destinations, memset
 * --head-start bytes of device scratch (so the stream is busy while the
 * host issues the rest), record the start event, copy, record the stop
 * event, wait; every timed copy is checked (device destinations read back
 * into a zeroed pinned buffer). Device memory from the default pool with
 * cudalua's release threshold, pinned memory from cuMemHostAlloc(PORTABLE),
 * streams non-blocking at priority 0, as cudalua makes them.
 * Output: "<key> <median> <min> <max> <n> <ci_lo> <ci_hi>" in microseconds
 * per copy ("both": the pair; op-cost keys: the whole run of N copies),
 * after '#' header lines. */
#include <unistd.h>

#include "ref.h"

#define MAX_SIZES 64
#define POISON    0xa5
#define MAX_OPS   64

typedef struct leg {
  CUdeviceptr src, dst;         /* host pointers are device pointers too (UVA) */
  int dst_on_host;
} leg;

typedef struct sweep {
  CUstream stream[2];
  CUevent start, stop, join;
  CUdeviceptr head_start;
  size_t head_bytes;
  unsigned char *expect;        /* pinned: what every source holds */
  unsigned char *check;         /* pinned: device destinations are read back here */
  double *times, *scratch;
  ref_timing timing;
} sweep;

static void fill_random(unsigned char *p, size_t bytes, uint64_t seed)
{
  uint64_t x = seed * 0x9e3779b97f4a7c15u | 1;
  for (size_t i = 0; i < bytes; i += sizeof x) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    memcpy(p + i, &x, bytes - i < sizeof x ? bytes - i : sizeof x);
  }
}

static void *host(CUdeviceptr p)
{
  return (void *)(uintptr_t)p;
}

/* As cuda.bandwidth's legs_correct: a device destination is read back into
 * the check buffer, zeroed first; every leg waits for its stream. */
static void expect_copied(sweep *w, const char *path, const leg *l, size_t bytes)
{
  const unsigned char *got = host(l->dst);
  if (!l->dst_on_host) {
    CHECK(cuMemsetD8Async((CUdeviceptr)(uintptr_t)w->check, 0, bytes, w->stream[0]));
    CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)w->check, l->dst, bytes, w->stream[0]));
    got = w->check;
  }
  CHECK(cuStreamSynchronize(w->stream[0]));
  if (memcmp(got, w->expect, bytes) != 0)
    ref_die("%s_%zu: the copy is wrong", path, bytes);
}

/* cuMemcpyAsync finds each pointer's kind itself, as buf:copy_from does. */
static void issue(sweep *w, const leg *legs, int nlegs, size_t bytes)
{
  for (int i = 0; i < nlegs; i++) {
    if (i > 0)
      CHECK(cuStreamWaitEvent(w->stream[i], w->start, 0));
    CHECK(cuMemcpyAsync(legs[i].dst, legs[i].src, bytes, w->stream[i]));
    if (i > 0) {
      CHECK(cuEventRecord(w->join, w->stream[i]));
      CHECK(cuStreamWaitEvent(w->stream[0], w->join, 0));
    }
  }
}

/* One timed run after the untimed, stream-ordered preparation: the
 * destinations poisoned, the head start. Microseconds. */
static double timed_run(sweep *w, const leg *legs, int nlegs, size_t poison_bytes,
                        void (*fn)(sweep *, const leg *, int, size_t, const void *), size_t bytes,
                        const void *extra)
{
  for (int i = 0; i < nlegs; i++)
    CHECK(cuMemsetD8Async(legs[i].dst, POISON, poison_bytes, w->stream[0]));
  if (w->head_bytes)
    CHECK(cuMemsetD8Async(w->head_start, 0, w->head_bytes, w->stream[0]));
  CHECK(cuEventRecord(w->start, w->stream[0]));
  fn(w, legs, nlegs, bytes, extra);
  CHECK(cuEventRecord(w->stop, w->stream[0]));
  CHECK(cuEventSynchronize(w->stop));
  float ms = 0;
  CHECK(cuEventElapsedTime(&ms, w->start, w->stop));
  return (double)ms * 1e3;
}

static void issue_whole(sweep *w, const leg *legs, int nlegs, size_t bytes, const void *extra)
{
  (void)extra;
  issue(w, legs, nlegs, bytes);
}

static void fill_sources(sweep *w, const leg *legs, int nlegs, size_t bytes, uint64_t seed)
{
  fill_random(w->expect, bytes, seed);
  for (int i = 0; i < nlegs; i++)
    CHECK(cuMemcpyAsync(legs[i].src, (CUdeviceptr)(uintptr_t)w->expect, bytes, w->stream[0]));
  CHECK(cuStreamSynchronize(w->stream[0]));
}

static void measure(sweep *w, const char *path, const leg *legs, int nlegs, size_t bytes, uint64_t seed)
{
  fill_sources(w, legs, nlegs, bytes, seed);
  for (int r = 0; r < w->timing.warmup; r++)
    timed_run(w, legs, nlegs, bytes, issue_whole, bytes, NULL);
  ref_loop loop;
  int n = 0;
  ref_loop_start(&loop, &w->timing, w->scratch);
  do {
    w->times[n++] = timed_run(w, legs, nlegs, bytes, issue_whole, bytes, NULL);
    for (int i = 0; i < nlegs; i++)
      expect_copied(w, path, &legs[i], bytes);
  } while (!ref_loop_done(&loop, w->times, n));
  char key[64];
  snprintf(key, sizeof key, "%s_%zu", path, bytes);
  ref_print_figure(key, w->times, n, 3);
}

/* --- the cost per operation ----------------------------------------------------- */

/* --op-cost TOTAL: TOTAL bytes each way as N copies of TOTAL / N, N = 1, 2,
 * 4, ..., 64, all issued between the two events (h2d and d2h on the main
 * stream; both: the copies in on the main stream and the copies out on the
 * second, chunk by chunk). The slope of time against N is what one more
 * copy costs the engines (cuda.bandwidth.op_cost measures the same). As one
 * cuMemcpyBatchAsync per direction where the driver has it (CUDA 13.0's
 * signature, found through cuGetProcAddress): the cost per segment. */
typedef struct chunks {
  int n;
  size_t chunk;
  int batched;
} chunks;

#if CUDA_VERSION >= 13000
typedef CUresult (*batch_fn)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,
                             size_t *, size_t, CUstream);
static batch_fn memcpy_batch;

static void issue_batch(const leg *l, const chunks *c, CUstream s)
{
  CUdeviceptr dsts[MAX_OPS], srcs[MAX_OPS];
  size_t sizes[MAX_OPS], index = 0;
  for (int i = 0; i < c->n; i++) {
    dsts[i] = l->dst + (CUdeviceptr)(i * c->chunk);
    srcs[i] = l->src + (CUdeviceptr)(i * c->chunk);
    sizes[i] = c->chunk;
  }
  CUmemcpyAttributes attr;
  memset(&attr, 0, sizeof attr);
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  attr.srcLocHint.type = l->dst_on_host ? CU_MEM_LOCATION_TYPE_DEVICE : CU_MEM_LOCATION_TYPE_HOST;
  attr.dstLocHint.type = l->dst_on_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE;
  CHECK(memcpy_batch(dsts, srcs, sizes, (size_t)c->n, &attr, &index, 1, s));
}
#endif

static const char *find_batch(void)
{
#if CUDA_VERSION >= 13000
  int version = 0;
  CHECK(cuDriverGetVersion(&version));
  if (version < 13000)
    return "the driver is older than CUDA 13.0 (cuMemcpyBatchAsync's signature changed there)";
  CUdriverProcAddressQueryResult status;
  void *pfn = NULL;
  if (cuGetProcAddress("cuMemcpyBatchAsync", &pfn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
          CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || pfn == NULL)
    return "the driver has no cuMemcpyBatchAsync";
  memcpy_batch = (batch_fn)pfn;
  return NULL;
#else
  return "built with a cuda.h older than 13.0";
#endif
}

static void issue_chunks(sweep *w, const leg *legs, int nlegs, size_t bytes, const void *extra)
{
  const chunks *c = extra;
  (void)bytes;
  if (nlegs > 1)
    CHECK(cuStreamWaitEvent(w->stream[1], w->start, 0));
#if CUDA_VERSION >= 13000
  if (c->batched) {
    for (int k = 0; k < nlegs; k++)
      issue_batch(&legs[k], c, w->stream[k]);
  } else
#endif
  {
    for (int i = 0; i < c->n; i++)
      for (int k = 0; k < nlegs; k++) {
        CUdeviceptr off = (CUdeviceptr)(i * c->chunk);
        CHECK(cuMemcpyAsync(legs[k].dst + off, legs[k].src + off, c->chunk, w->stream[k]));
      }
  }
  if (nlegs > 1) {
    CHECK(cuEventRecord(w->join, w->stream[1]));
    CHECK(cuStreamWaitEvent(w->stream[0], w->join, 0));
  }
}

static void measure_chunks(sweep *w, const char *prefix, const char *path, const leg *legs, int nlegs,
                           size_t total, const chunks *c)
{
  for (int r = 0; r < w->timing.warmup; r++)
    timed_run(w, legs, nlegs, total, issue_chunks, total, c);
  ref_loop loop;
  int n = 0;
  ref_loop_start(&loop, &w->timing, w->scratch);
  do
    w->times[n++] = timed_run(w, legs, nlegs, total, issue_chunks, total, c);
  while (!ref_loop_done(&loop, w->times, n));
  char key[64];
  snprintf(key, sizeof key, "%s_%s_%d", prefix, path, c->n);
  ref_print_figure(key, w->times, n, 3);
  for (int i = 0; i < nlegs; i++)   /* the last run's copies, into poisoned destinations */
    expect_copied(w, key, &legs[i], total);
}

static void op_cost(sweep *w, CUdeviceptr h_src, CUdeviceptr h_dst, CUdeviceptr d_src, CUdeviceptr d_dst,
                    size_t total)
{
  const char *no_batch = find_batch();
  const struct { const char *path; leg legs[2]; int nlegs; } modes[] = {
    {"h2d", {{h_src, d_dst, 0}}, 1},
    {"d2h", {{d_src, h_dst, 1}}, 1},
    {"both", {{h_src, d_dst, 0}, {d_src, h_dst, 1}}, 2},
  };
  printf("# op-cost: %zu bytes each way as N copies (N = 1, 2, 4, ..., %d); ops_*: one cuMemcpyAsync a "
         "copy; batch_*: one cuMemcpyBatchAsync a direction\n", total, MAX_OPS);
  if (no_batch)
    printf("# skip batch_*: %s\n", no_batch);
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    fill_sources(w, modes[m].legs, modes[m].nlegs, total, 1000 + m);
    for (int batched = 0; batched <= (no_batch ? 0 : 1); batched++)
      for (int n = 1; n <= MAX_OPS; n *= 2) {
        chunks c = {n, total / (size_t)n, batched};
        measure_chunks(w, batched ? "batch" : "ops", modes[m].path, modes[m].legs, modes[m].nlegs, total, &c);
      }
  }
}

/* --- the sweep ------------------------------------------------------------------ */

static CUdeviceptr device_alloc(sweep *w, size_t bytes)
{
  CUdeviceptr p = 0;
  CHECK(cuMemAllocAsync(&p, bytes, w->stream[0]));
  return p;
}

static CUdeviceptr pinned_alloc(size_t bytes)
{
  return (CUdeviceptr)(uintptr_t)ref_pinned_alloc(bytes);
}

static void run(sweep *w, const long long *sizes, int nsizes, size_t top, size_t op_total)
{
  CUdeviceptr h_src = pinned_alloc(top), h_dst = pinned_alloc(top);
  CUdeviceptr d_src = device_alloc(w, top), d_dst = device_alloc(w, top);
  const struct { const char *path; leg legs[2]; int nlegs; } paths[] = {
    {"h2d", {{h_src, d_dst, 0}}, 1},
    {"d2h", {{d_src, h_dst, 1}}, 1},
    {"both", {{h_src, d_dst, 0}, {d_src, h_dst, 1}}, 2},
    {"d2d", {{d_src, d_dst, 0}}, 1},
  };
  for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++)
    for (int i = 0; i < nsizes; i++)
      measure(w, paths[p].path, paths[p].legs, paths[p].nlegs, (size_t)sizes[i], (uint64_t)i + 1);
  if (op_total)
    op_cost(w, h_src, h_dst, d_src, d_dst, op_total);
  CHECK(cuMemFreeAsync(d_dst, w->stream[0]));
  CHECK(cuMemFreeAsync(d_src, w->stream[0]));
  CHECK(cuStreamSynchronize(w->stream[0]));
  CHECK(cuMemFreeHost(host(h_dst)));
  CHECK(cuMemFreeHost(host(h_src)));
}

static void setup(sweep *w, const ref_timing *timing, size_t top, size_t head_bytes, int extra_streams)
{
  memset(w, 0, sizeof *w);
  w->timing = *timing;
  w->head_bytes = head_bytes;
  int most = timing->precision > 0 ? timing->max_runs : timing->runs;
  w->times = ref_malloc(sizeof(double) * (size_t)most);
  w->scratch = ref_malloc(sizeof(double) * (size_t)most);
  /* --extra-streams: streams made (and left idle) before the measuring ones,
   * to see whether where a stream lands among the driver's channels matters */
  for (int i = 0; i < extra_streams; i++)
    (void)ref_create_stream();
  for (int i = 0; i < 2; i++)
    w->stream[i] = ref_create_stream();
  CHECK(cuEventCreate(&w->start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&w->stop, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&w->join, CU_EVENT_DISABLE_TIMING));
  w->expect = ref_pinned_alloc(top);
  w->check = ref_pinned_alloc(top);
  if (head_bytes)
    w->head_start = device_alloc(w, head_bytes);
}

static void teardown(sweep *w)
{
  if (w->head_start)
    CHECK(cuMemFreeAsync(w->head_start, w->stream[0]));
  CHECK(cuStreamSynchronize(w->stream[0]));
  CHECK(cuMemFreeHost(w->check));
  CHECK(cuMemFreeHost(w->expect));
  CHECK(cuEventDestroy(w->join));
  CHECK(cuEventDestroy(w->stop));
  CHECK(cuEventDestroy(w->start));
  for (int i = 0; i < 2; i++)
    CHECK(cuStreamDestroy(w->stream[i]));
  free(w->scratch);
  free(w->times);
}

static void usage(FILE *out)
{
  fprintf(out,
    "usage: %s [--sizes N,N,...|none] [--runs N] [--warmup N] [--precision P] [--max-time S]\n"
    "       [--op-cost BYTES] [--head-start BYTES] [--extra-streams K] [--idle S] [--device D]\n"
    "The copy sweep of `cudalua bandwidth` through the raw CUDA driver API: pinned\n"
    "memory and the copy engines; h2d, d2h, both at once, d2d; every copy verified.\n"
    "  --sizes LIST       bytes per copy, multiples of 4 (default 4096,65536,1048576,67108864);\n"
    "                     none: no sweep (with --op-cost)\n"
    "  --runs N           timed copies per size (default 10; with --precision, the least)\n"
    "  --warmup N         untimed copies per size first (default 3)\n"
    "  --precision P      time until the median's 95%% interval is within +-P%% (default 0: --runs only)\n"
    "  --max-time S       with --precision: seconds of timed runs per figure at most (default 1)\n"
    "  --op-cost BYTES    also time BYTES each way as 1, 2, 4, ..., 64 copies (multiple of 256)\n"
    "  --head-start BYTES the device memset queued before each start event (default %llu; 0: none)\n"
    "  --extra-streams K  make K idle streams before the measuring ones (default 0)\n"
    "  --idle S           only hold a context, streams and buffers as a sweep does for S seconds\n"
    "  --device D         device ordinal (default 0)\n"
    "Output: '<key> <median> <min> <max> <n> <ci_lo> <ci_hi>' in microseconds per copy.\n",
    ref_prog, REF_HEAD_START_BYTES);
}

static int parse_sizes(const char *text, long long *sizes)
{
  if (strcmp(text, "none") == 0)
    return 0;
  char *copy = ref_malloc(strlen(text) + 1), *save = NULL;
  strcpy(copy, text);
  int n = 0;
  for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    if (n == MAX_SIZES)
      ref_die("--sizes: at most %d sizes", MAX_SIZES);
    sizes[n] = ref_parse_number("sizes", item, 4, 16LL << 30);
    if (sizes[n++] % 4 != 0) {
      fprintf(stderr, "%s: --sizes: %s is not a multiple of 4\n", ref_prog, item);
      exit(REF_EXIT_USAGE);
    }
  }
  free(copy);
  return n;
}

int main(int argc, char **argv)
{
  static const struct option longopts[] = {
    {"sizes", required_argument, NULL, 's'}, {"runs", required_argument, NULL, 'r'},
    {"warmup", required_argument, NULL, 'w'}, {"device", required_argument, NULL, 'd'},
    {"precision", required_argument, NULL, 'p'}, {"max-time", required_argument, NULL, 't'},
    {"op-cost", required_argument, NULL, 'o'}, {"head-start", required_argument, NULL, 'H'},
    {"extra-streams", required_argument, NULL, 'x'}, {"idle", required_argument, NULL, 'i'},
    {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
  };
  ref_prog = "bandwidth_ref";
  long long sizes[MAX_SIZES] = {4096, 65536, 1048576, 67108864};
  ref_timing timing = {.runs = 10, .warmup = 3, .max_runs = REF_MAX_RUNS, .precision = 0, .max_time = 1};
  long long op_total = 0, head = (long long)REF_HEAD_START_BYTES;
  int nsizes = 4, device = 0, extra_streams = 0, idle = 0, c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 's': nsizes = parse_sizes(optarg, sizes); break;
    case 'r': timing.runs = (int)ref_parse_number("runs", optarg, 1, REF_MAX_RUNS); break;
    case 'w': timing.warmup = (int)ref_parse_number("warmup", optarg, 0, 100000); break;
    case 'p': timing.precision = ref_parse_percent("precision", optarg); break;
    case 't': timing.max_time = ref_parse_seconds("max-time", optarg); break;
    case 'o': op_total = ref_parse_number("op-cost", optarg, 256, 16LL << 30); break;
    case 'H': head = ref_parse_number("head-start", optarg, 0, 16LL << 30); break;
    case 'x': extra_streams = (int)ref_parse_number("extra-streams", optarg, 0, 1024); break;
    case 'i': idle = (int)ref_parse_number("idle", optarg, 1, 3600); break;
    case 'd': device = (int)ref_parse_number("device", optarg, 0, 1024); break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return REF_EXIT_USAGE;
    }
  }
  ref_reject_operands(argc, argv, usage);
  if (op_total % 256 != 0) {
    fprintf(stderr, "%s: --op-cost must be a multiple of 256 bytes\n", ref_prog);
    return REF_EXIT_USAGE;
  }
  size_t top = (size_t)op_total > 4 ? (size_t)op_total : 4;
  for (int i = 0; i < nsizes; i++)
    top = (size_t)sizes[i] > top ? (size_t)sizes[i] : top;
  ref_device dev;
  ref_open_device(&dev, device);
  ref_print_device_header(&dev);
  sweep w;
  setup(&w, &timing, top, (size_t)head, extra_streams);
  if (idle) {   /* a second process on the GPU, holding what cudalua's sweep holds between series */
    CHECK(cuStreamSynchronize(w.stream[0]));
    printf("# holding the primary context, two streams, 2 x %zu bytes pinned and the head start for %d s\n",
           top, idle);
    fflush(stdout);
    sleep((unsigned)idle);
    teardown(&w);
    ref_close_device(&dev);
    return 0;
  }
  if (timing.precision > 0)
    printf("# %d+ runs to +-%g%% (at most %g s) after %d warm-up runs a figure", timing.runs,
           100 * timing.precision, timing.max_time, timing.warmup);
  else
    printf("# %d runs after %d warm-up runs a figure", timing.runs, timing.warmup);
  printf(", timed with CUDA events behind a %lld-byte memset head start; pinned memory (portable), "
         "the default pool; %d extra streams; every copy verified\n", head, extra_streams);
  printf("# key median min max n ci_lo ci_hi (microseconds; ci: the median's 95%% interval)\n");
  run(&w, sizes, nsizes, top, (size_t)op_total);
  teardown(&w);
  ref_close_device(&dev);
  return 0;
}
