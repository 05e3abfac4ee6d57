/* SPDX-License-Identifier: MIT */
/* bandwidth_ref: the transfer-size sweep of `cudalua bandwidth` through the
 * raw CUDA driver API: pinned host memory and the copy engines, four paths
 * (h2d, d2h, both directions at once, d2d), every size of --sizes.
 *
 * Method, the same as cuda.bandwidth's (see bench/README.md): per size,
 * fresh data in every source; --warmup untimed then --runs timed runs of:
 * poison the destinations, memset HEAD_START_BYTES of device scratch (so
 * the stream is busy while the host issues the rest), record the start
 * event, copy, record the stop event, wait; every timed copy is checked.
 * Device memory comes from the device's default pool (cuMemAllocAsync), as
 * cudalua's device buffers do. Output: "<path>_<bytes> <median> <min> <max>"
 * in microseconds per copy ("both": the pair), after '#' header lines. */
#include <stdint.h>

#include "ref.h"

#define MAX_SIZES        64
#define HEAD_START_BYTES (256ull << 20)
#define POISON           0xa5

typedef struct leg {
  CUdeviceptr src, dst;         /* host pointers are device pointers too (UVA) */
  int dst_on_host;
} leg;

typedef struct sweep {
  CUstream stream[2];
  CUevent start, stop, join;
  CUdeviceptr head_start;
  unsigned char *expect;        /* pinned: what every source holds */
  unsigned char *check;         /* pinned: device destinations are read back here */
  double *times;
  int runs, warmup;
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

static void expect_copied(sweep *w, const char *path, const leg *l, size_t bytes)
{
  const unsigned char *got = host(l->dst);
  if (!l->dst_on_host) {
    CHECK(cuMemcpyDtoHAsync(w->check, l->dst, bytes, w->stream[0]));
    CHECK(cuStreamSynchronize(w->stream[0]));
    got = w->check;
  }
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

static void measure(sweep *w, const char *path, const leg *legs, int nlegs, size_t bytes, uint64_t seed)
{
  fill_random(w->expect, bytes, seed);
  for (int i = 0; i < nlegs; i++)
    CHECK(cuMemcpyAsync(legs[i].src, (CUdeviceptr)(uintptr_t)w->expect, bytes, w->stream[0]));
  CHECK(cuStreamSynchronize(w->stream[0]));
  for (int r = 0; r < w->warmup + w->runs; r++) {
    for (int i = 0; i < nlegs; i++)
      CHECK(cuMemsetD8Async(legs[i].dst, POISON, bytes, w->stream[0]));
    CHECK(cuMemsetD8Async(w->head_start, 0, HEAD_START_BYTES, w->stream[0]));
    CHECK(cuEventRecord(w->start, w->stream[0]));
    issue(w, legs, nlegs, bytes);
    CHECK(cuEventRecord(w->stop, w->stream[0]));
    CHECK(cuEventSynchronize(w->stop));
    if (r < w->warmup)
      continue;
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, w->start, w->stop));
    w->times[r - w->warmup] = (double)ms * 1e3;
    for (int i = 0; i < nlegs; i++)
      expect_copied(w, path, &legs[i], bytes);
  }
  ref_stats st = ref_summarize(w->times, w->runs);
  printf("%s_%zu %.3f %.3f %.3f\n", path, bytes, st.median, st.min, st.max);
  fflush(stdout);
}

static CUdeviceptr device_alloc(sweep *w, size_t bytes)
{
  CUdeviceptr p = 0;
  CHECK(cuMemAllocAsync(&p, bytes, w->stream[0]));
  return p;
}

static CUdeviceptr pinned_alloc(size_t bytes)
{
  void *p = NULL;
  CHECK(cuMemHostAlloc(&p, bytes, 0));
  return (CUdeviceptr)(uintptr_t)p;
}

static void run(sweep *w, const long long *sizes, int nsizes, size_t top)
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
  CHECK(cuMemFreeAsync(d_dst, w->stream[0]));
  CHECK(cuMemFreeAsync(d_src, w->stream[0]));
  CHECK(cuStreamSynchronize(w->stream[0]));
  CHECK(cuMemFreeHost(host(h_dst)));
  CHECK(cuMemFreeHost(host(h_src)));
}

static void setup(sweep *w, int runs, int warmup, size_t top)
{
  memset(w, 0, sizeof *w);
  w->runs = runs;
  w->warmup = warmup;
  w->times = ref_malloc(sizeof(double) * (size_t)runs);
  for (int i = 0; i < 2; i++)
    CHECK(cuStreamCreate(&w->stream[i], CU_STREAM_NON_BLOCKING));
  CHECK(cuEventCreate(&w->start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&w->stop, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&w->join, CU_EVENT_DISABLE_TIMING));
  w->expect = host(pinned_alloc(top));
  w->check = host(pinned_alloc(top));
  w->head_start = device_alloc(w, HEAD_START_BYTES);
}

static void teardown(sweep *w)
{
  CHECK(cuMemFreeAsync(w->head_start, w->stream[0]));
  CHECK(cuStreamSynchronize(w->stream[0]));
  CHECK(cuMemFreeHost(w->check));
  CHECK(cuMemFreeHost(w->expect));
  CHECK(cuEventDestroy(w->join));
  CHECK(cuEventDestroy(w->stop));
  CHECK(cuEventDestroy(w->start));
  for (int i = 0; i < 2; i++)
    CHECK(cuStreamDestroy(w->stream[i]));
  free(w->times);
}

static void usage(FILE *out)
{
  fprintf(out,
    "usage: %s --sizes N,N,... [--runs N] [--warmup N] [--device D]\n"
    "The copy sweep of `cudalua bandwidth` through the raw CUDA driver API: pinned\n"
    "memory and the copy engines; h2d, d2h, both at once, d2d; every copy verified.\n"
    "  --sizes LIST  bytes per copy, multiples of 4 (default 4096,65536,1048576,67108864)\n"
    "  --runs N      timed copies per size (default 10)\n"
    "  --warmup N    untimed copies per size first (default 3)\n"
    "  --device D    device ordinal (default 0)\n"
    "Output: '<path>_<bytes> <median> <min> <max>' in microseconds per copy.\n", ref_prog);
}

static int parse_sizes(const char *text, long long *sizes)
{
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
    {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
  };
  ref_prog = "bandwidth_ref";
  long long sizes[MAX_SIZES] = {4096, 65536, 1048576, 67108864};
  int nsizes = 4, runs = 10, warmup = 3, device = 0, c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 's': nsizes = parse_sizes(optarg, sizes); break;
    case 'r': runs = (int)ref_parse_number("runs", optarg, 1, 100000); break;
    case 'w': warmup = (int)ref_parse_number("warmup", optarg, 0, 100000); break;
    case 'd': device = (int)ref_parse_number("device", optarg, 0, 1024); break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return REF_EXIT_USAGE;
    }
  }
  ref_reject_operands(argc, argv, usage);
  size_t top = 4;
  for (int i = 0; i < nsizes; i++)
    top = (size_t)sizes[i] > top ? (size_t)sizes[i] : top;
  ref_device dev;
  ref_open_device(&dev, device);
  sweep w;
  setup(&w, runs, warmup, top);
  ref_print_device_header(&dev);
  printf("# %d runs after %d warm-up runs a size, timed with CUDA events behind a %llu-byte memset "
         "head start; pinned memory, the default pool; every copy verified\n", runs, warmup,
         HEAD_START_BYTES);
  printf("# key median min max (microseconds per copy)\n");
  run(&w, sizes, nsizes, top);
  teardown(&w);
  ref_close_device(&dev);
  return 0;
}
