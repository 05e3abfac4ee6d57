/* SPDX-License-Identifier: MIT */
/* overlap_ref: the streaming copy/compute overlap through the raw CUDA
 * driver API. The yardstick for `streaming_overlap --reference`, which runs
 * the same schedules through cudalua (see bench/README.md).
 *
 * The problem is the script's: n float32 inputs uniform in [0, 100) in
 * page-locked memory, the vector_scale kernel (scale 2.5, 256 threads a
 * block), results back into page-locked memory. Figures, each the median
 * of --runs runs between two events on the main stream after --warmup
 * runs, in milliseconds:
 *   h2d, d2h, both, kernel  the limits: one whole-array copy each way,
 *                           both at once, the kernel over the whole array;
 *   sequential              copy in, compute, copy out on one stream;
 *   streams_K               the cuda.core sample's schedule: K chunks, chunk
 *                           i copied in, computed and copied out on stream i;
 *   engines_N               N chunks, one stream per engine (copy in,
 *                           compute, copy out) chained by events per chunk;
 *   copies_N                the engine schedule's copies alone: N copies
 *                           each way, both ways at once, no kernel and no
 *                           waits; what the copies cost split this finely.
 *                           Not a bound: from about 32 chunks on the H200
 *                           the pipeline beat its copies alone, as copying
 *                           both ways costs more per copy than one way.
 * Other streams join the main stream through events, so the end event
 * covers every stream with no host synchronization inside the timed region.
 * After timing, each computing schedule runs once more into a poisoned
 * output, which is compared element by element with a host reference
 * (rtol = atol = 1e-4: the device contracts v * v + 1 into an FMA); a
 * mismatch ends the program with exit status 1. Output: "<key> <median>
 * <min> <max>" after '#' header lines. */
#include <math.h>
#include <stdint.h>

#include "ref.h"

#define DEFAULT_ELEMENTS 16000000LL
#define MAX_ELEMENTS     (1LL << 31)
#define MAX_CHUNKS       256
#define MAX_STREAMS      64
#define LIST_MAX         16
#define BLOCK            256
#define SCALE            2.5f
#define TOLERANCE        1e-4   /* rtol and atol */
#define POISON           0xff   /* NaN in every float32 */

/* The same kernel as kernels/vector_scale.cu (used instead with --kernels DIR). */
static const char embedded_kernel_source[] =
  "extern \"C\" __global__ void vector_scale(const float *input, float *output, float scale,\n"
  "                                        unsigned long long n) {\n"
  "  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;\n"
  "  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
  "       i < n; i += stride) {\n"
  "    float val = input[i] * scale;\n"
  "    for (int k = 0; k < 50; k++) val = sqrtf(val * val + 1.0f);\n"
  "    output[i] = val;\n"
  "  }\n"
  "}\n";

typedef struct int_list { int count, values[LIST_MAX]; } int_list;

typedef struct options {
  long long elements;
  int runs, warmup, device;
  int_list streams, chunks;
  const char *kernels_dir;      /* NULL: the embedded source */
} options;

/* One chunk: its slice of the four arrays and its kernel's parameters,
 * made before any timing so the timed loops only issue work. */
typedef struct chunk {
  void *h_in, *h_out;
  CUdeviceptr d_in, d_out;
  size_t bytes;
  unsigned long long count;
  unsigned grid;
  float scale;
  void *params[4];              /* point at d_in, d_out, scale, count above */
} chunk;

typedef struct bench {
  CUfunction kernel;
  CUmodule module;
  CUstream streams[MAX_STREAMS];  /* streams[0] is the main stream */
  CUevent start, stop, fork, joins[MAX_STREAMS], copied[MAX_CHUNKS], computed[MAX_CHUNKS];
  float *h_in, *h_out, *reference;
  CUdeviceptr d_in, d_out;
  size_t n;
  chunk whole, chunks[MAX_CHUNKS];
  int nchunks;                  /* how many of chunks[] the schedule uses */
  int runs, warmup;
  double *samples;
} bench;

typedef void (*issue_fn)(bench *b);

/* --- data ------------------------------------------------------------------------ */

/* Uniform in [0, 100) from xorshift64: never constant, never zeros. */
static void fill_inputs(float *x, size_t n, uint64_t seed)
{
  uint64_t s = seed | 1;
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x[i] = (float)((s >> 40) * (100.0 / 16777216.0));
  }
}

/* The kernel's arithmetic in float32, a cache-sized block at a time so
 * that the innermost loop runs across elements and vectorizes. */
static void compute_reference(const float *in, float *out, size_t n)
{
  enum { BLOCK_ELEMENTS = 4096 };
  for (size_t first = 0; first < n; first += BLOCK_ELEMENTS) {
    size_t count = n - first < BLOCK_ELEMENTS ? n - first : BLOCK_ELEMENTS;
    float *v = out + first;
    for (size_t i = 0; i < count; i++)
      v[i] = in[first + i] * SCALE;
    for (int k = 0; k < 50; k++)
      for (size_t i = 0; i < count; i++)
        v[i] = sqrtf(v[i] * v[i] + 1.0f);
  }
}

static void expect_reference(const bench *b, const char *key)
{
  for (size_t i = 0; i < b->n; i++) {
    double got = b->h_out[i], want = b->reference[i];
    if (!(fabs(got - want) <= TOLERANCE + TOLERANCE * fabs(want)))
      ref_die("%s: element %zu is %.9g, expected %.9g", key, i, got, want);
  }
}

/* --- chunks ---------------------------------------------------------------------- */

static void set_chunk(bench *b, chunk *c, size_t offset, size_t count)
{
  c->h_in = b->h_in + offset;
  c->h_out = b->h_out + offset;
  c->d_in = b->d_in + offset * sizeof(float);
  c->d_out = b->d_out + offset * sizeof(float);
  c->bytes = count * sizeof(float);
  c->count = count;
  c->grid = (unsigned)((count + BLOCK - 1) / BLOCK);
  c->scale = SCALE;
  c->params[0] = &c->d_in;
  c->params[1] = &c->d_out;
  c->params[2] = &c->scale;
  c->params[3] = &c->count;
}

/* k chunks with boundaries on 64-element (256-byte) multiples, as the
 * script splits them. */
static void split(bench *b, int k)
{
  size_t offset = 0;
  b->nchunks = 0;
  for (int i = 1; i <= k; i++) {
    size_t stop = i == k ? b->n : (size_t)llround((double)b->n * i / k / 64.0) * 64;
    if (stop > b->n)
      stop = b->n;
    if (stop > offset) {
      set_chunk(b, &b->chunks[b->nchunks++], offset, stop - offset);
      offset = stop;
    }
  }
}

/* --- issuing work ------------------------------------------------------------------ */

/* cuMemcpyAsync, as buf:copy_from issues every copy */
static void copy_in(const chunk *c, CUstream s)
{
  CHECK(cuMemcpyAsync(c->d_in, (CUdeviceptr)(uintptr_t)c->h_in, c->bytes, s));
}

static void copy_out(const chunk *c, CUstream s)
{
  CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)c->h_out, c->d_out, c->bytes, s));
}

static void compute(const bench *b, chunk *c, CUstream s)
{
  CHECK(cuLaunchKernel(b->kernel, c->grid, 1, 1, BLOCK, 1, 1, 0, s, c->params, NULL));
}

/* Streams 1..k-1 wait for the main stream, and the main stream for them. */
static void fork_streams(bench *b, int k)
{
  CHECK(cuEventRecord(b->fork, b->streams[0]));
  for (int i = 1; i < k; i++)
    CHECK(cuStreamWaitEvent(b->streams[i], b->fork, 0));
}

static void join_streams(bench *b, int k)
{
  for (int i = 1; i < k; i++) {
    CHECK(cuEventRecord(b->joins[i], b->streams[i]));
    CHECK(cuStreamWaitEvent(b->streams[0], b->joins[i], 0));
  }
}

static void issue_h2d(bench *b) { copy_in(&b->whole, b->streams[0]); }
static void issue_d2h(bench *b) { copy_out(&b->whole, b->streams[0]); }
static void issue_kernel(bench *b) { compute(b, &b->whole, b->streams[0]); }

static void issue_both(bench *b)
{
  fork_streams(b, 2);
  copy_in(&b->whole, b->streams[0]);
  copy_out(&b->whole, b->streams[1]);
  join_streams(b, 2);
}

static void issue_sequential(bench *b)
{
  CUstream s = b->streams[0];
  copy_in(&b->whole, s);
  compute(b, &b->whole, s);
  copy_out(&b->whole, s);
}

/* The sample's schedule, issued chunk by chunk (depth first): one stream
 * per chunk, as split() made as many chunks as streams asked for. */
static void issue_streams(bench *b)
{
  int k = b->nchunks;
  fork_streams(b, k);
  for (int i = 0; i < k; i++) {
    CUstream s = b->streams[i];
    copy_in(&b->chunks[i], s);
    compute(b, &b->chunks[i], s);
    copy_out(&b->chunks[i], s);
  }
  join_streams(b, k);
}

/* Streams 1, 2, 3: copy in, compute, copy out. */
static void issue_engines(bench *b)
{
  CUstream in = b->streams[1], comp = b->streams[2], out = b->streams[3];
  fork_streams(b, 4);
  for (int i = 0; i < b->nchunks; i++) {
    copy_in(&b->chunks[i], in);
    CHECK(cuEventRecord(b->copied[i], in));
    CHECK(cuStreamWaitEvent(comp, b->copied[i], 0));
    compute(b, &b->chunks[i], comp);
    CHECK(cuEventRecord(b->computed[i], comp));
    CHECK(cuStreamWaitEvent(out, b->computed[i], 0));
    copy_out(&b->chunks[i], out);
  }
  join_streams(b, 4);
}

static void issue_copies_alone(bench *b)
{
  fork_streams(b, 3);
  for (int i = 0; i < b->nchunks; i++)
    copy_in(&b->chunks[i], b->streams[1]);
  for (int i = 0; i < b->nchunks; i++)
    copy_out(&b->chunks[i], b->streams[2]);
  join_streams(b, 3);
}

/* --- measuring --------------------------------------------------------------------- */

/* Warm up, time --runs runs, print the figure; with verify, run once more
 * into a poisoned output and check every element. The copies alone check
 * their copies out too: the device holds the last schedule's results. */
static void measure(bench *b, const char *key, issue_fn issue, int verify)
{
  CUstream main_stream = b->streams[0];
  for (int w = 0; w < b->warmup; w++)
    issue(b);
  for (int r = 0; r < b->runs; r++) {
    CHECK(cuEventRecord(b->start, main_stream));
    issue(b);
    CHECK(cuEventRecord(b->stop, main_stream));
    CHECK(cuEventSynchronize(b->stop));
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, b->start, b->stop));
    b->samples[r] = ms;
  }
  ref_print_figure(key, b->samples, b->runs, 4);
  if (verify) {
    memset(b->h_out, POISON, b->n * sizeof(float));
    issue(b);
    CHECK(cuStreamSynchronize(main_stream));
    expect_reference(b, key);
  }
}

/* --- setup ------------------------------------------------------------------------- */

static int most_streams(const options *o)
{
  int most = 4;                 /* engines: main + 3 */
  for (int i = 0; i < o->streams.count; i++)
    if (o->streams.values[i] > most)
      most = o->streams.values[i];
  return most;
}

static void setup(bench *b, const ref_device *d, const options *o, uint64_t seed)
{
  memset(b, 0, sizeof *b);
  b->n = (size_t)o->elements;
  b->runs = o->runs;
  b->warmup = o->warmup;
  b->samples = ref_malloc(sizeof *b->samples * (size_t)o->runs);
  b->module = ref_load_kernels(d, o->kernels_dir, "vector_scale.cu", embedded_kernel_source);
  CHECK(cuModuleGetFunction(&b->kernel, b->module, "vector_scale"));
  for (int i = 0; i < most_streams(o); i++)
    b->streams[i] = ref_create_stream();
  CHECK(cuEventCreate(&b->start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&b->stop, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&b->fork, CU_EVENT_DISABLE_TIMING));
  for (int i = 0; i < MAX_STREAMS; i++)
    CHECK(cuEventCreate(&b->joins[i], CU_EVENT_DISABLE_TIMING));
  for (int i = 0; i < MAX_CHUNKS; i++) {
    CHECK(cuEventCreate(&b->copied[i], CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&b->computed[i], CU_EVENT_DISABLE_TIMING));
  }
  size_t bytes = b->n * sizeof(float);
  /* as cuda.overlap.pipeline: pinned memory as PinnedMemoryResource, device memory from the pool */
  b->h_in = ref_pinned_alloc(bytes);
  b->h_out = ref_pinned_alloc(bytes);
  CHECK(cuMemAllocAsync(&b->d_in, bytes, b->streams[0]));
  CHECK(cuMemAllocAsync(&b->d_out, bytes, b->streams[0]));
  CHECK(cuStreamSynchronize(b->streams[0]));
  b->reference = ref_malloc(bytes);
  fill_inputs(b->h_in, b->n, seed);
  compute_reference(b->h_in, b->reference, b->n);
  set_chunk(b, &b->whole, 0, b->n);
}

static void teardown(bench *b)
{
  CHECK(cuCtxSynchronize());
  CHECK(cuMemFreeAsync(b->d_out, b->streams[0]));
  CHECK(cuMemFreeAsync(b->d_in, b->streams[0]));
  CHECK(cuStreamSynchronize(b->streams[0]));
  CHECK(cuMemFreeHost(b->h_out));
  CHECK(cuMemFreeHost(b->h_in));
  for (int i = 0; i < MAX_CHUNKS; i++) {
    CHECK(cuEventDestroy(b->computed[i]));
    CHECK(cuEventDestroy(b->copied[i]));
  }
  for (int i = 0; i < MAX_STREAMS; i++)
    CHECK(cuEventDestroy(b->joins[i]));
  CHECK(cuEventDestroy(b->fork));
  CHECK(cuEventDestroy(b->stop));
  CHECK(cuEventDestroy(b->start));
  for (int i = 0; i < MAX_STREAMS && b->streams[i] != NULL; i++)
    CHECK(cuStreamDestroy(b->streams[i]));
  CHECK(cuModuleUnload(b->module));
  free(b->reference);
  free(b->samples);
}

/* --- main --------------------------------------------------------------------------- */

static void usage(FILE *out)
{
  fprintf(out,
    "usage: %s [--elements N] [--runs R] [--warmup W] [--device D] [--streams LIST]\n"
    "          [--chunks LIST] [--seed S] [--kernels DIR]\n"
    "The streaming copy/compute overlap through the raw CUDA driver API.\n"
    "  --elements N   float32 elements (default %lld)\n"
    "  --runs R       timed runs per figure, median reported (default 10)\n"
    "  --warmup W     untimed runs first (default 3)\n"
    "  --device D     device ordinal (default 0)\n"
    "  --streams LIST stream counts of the sample's schedule (default 2,4,8)\n"
    "  --chunks LIST  chunk counts of the engine schedule and of its copies alone\n"
    "                 (default 16,20,24)\n"
    "  --seed S       seed of the inputs (default: from the clock)\n"
    "  --kernels DIR  compile DIR/vector_scale.cu instead of the embedded copy\n"
    "Output: '<key> <median> <min> <max>' in ms.\n",
    ref_prog, DEFAULT_ELEMENTS);
}

/* "2,4,8": at most LIST_MAX whole numbers in [min, max]. */
static int_list parse_list(const char *opt, const char *text, int min, int max)
{
  int_list list = {0, {0}};
  char buf[256];
  snprintf(buf, sizeof buf, "%s", text);
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item != NULL;
       item = strtok_r(NULL, ",", &save)) {
    if (list.count == LIST_MAX) {
      fprintf(stderr, "%s: --%s takes at most %d values\n", ref_prog, opt, LIST_MAX);
      exit(REF_EXIT_USAGE);
    }
    list.values[list.count++] = (int)ref_parse_number(opt, item, min, max);
  }
  if (list.count == 0) {
    fprintf(stderr, "%s: --%s needs at least one value\n", ref_prog, opt);
    exit(REF_EXIT_USAGE);
  }
  return list;
}

static options parse_options(int argc, char **argv, uint64_t *seed)
{
  static const struct option longopts[] = {
    {"elements", required_argument, NULL, 'n'},
    {"runs", required_argument, NULL, 'r'},
    {"warmup", required_argument, NULL, 'w'},
    {"device", required_argument, NULL, 'd'},
    {"streams", required_argument, NULL, 's'},
    {"chunks", required_argument, NULL, 'c'},
    {"seed", required_argument, NULL, 'S'},
    {"kernels", required_argument, NULL, 'k'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  options o = {DEFAULT_ELEMENTS, 10, 3, 0, {3, {2, 4, 8}}, {3, {16, 20, 24}}, NULL};
  int c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 'n': o.elements = ref_parse_number("elements", optarg, 1, MAX_ELEMENTS); break;
    case 'r': o.runs = (int)ref_parse_number("runs", optarg, 1, 100000); break;
    case 'w': o.warmup = (int)ref_parse_number("warmup", optarg, 0, 100000); break;
    case 'd': o.device = (int)ref_parse_number("device", optarg, 0, 1024); break;
    case 's': o.streams = parse_list("streams", optarg, 1, MAX_STREAMS); break;
    case 'c': o.chunks = parse_list("chunks", optarg, 1, MAX_CHUNKS); break;
    case 'S': *seed = (uint64_t)ref_parse_number("seed", optarg, 1, INT64_MAX); break;
    case 'k': o.kernels_dir = optarg; break;
    case 'h': usage(stdout); exit(0);
    default: usage(stderr); exit(REF_EXIT_USAGE);
    }
  }
  ref_reject_operands(argc, argv, usage);
  return o;
}

int main(int argc, char **argv)
{
  ref_prog = "overlap_ref";
  uint64_t seed = (uint64_t)(ref_clock() * 1e6);
  options o = parse_options(argc, argv, &seed);
  ref_device dev;
  ref_open_device(&dev, o.device);
  bench b;
  setup(&b, &dev, &o, seed);

  ref_print_device_header(&dev);
  printf("# elements %lld, runs %d, warm-up runs %d, seed %llu, non-blocking streams, block %d\n",
         o.elements, o.runs, o.warmup, (unsigned long long)seed, BLOCK);
  printf("# key median min max n ci_lo ci_hi (ms; ci: the median's 95%% interval); every computing schedule "
         "verified\n");
  measure(&b, "h2d", issue_h2d, 0);
  measure(&b, "d2h", issue_d2h, 0);
  measure(&b, "both", issue_both, 0);
  measure(&b, "kernel", issue_kernel, 0);
  measure(&b, "sequential", issue_sequential, 1);
  char key[64];
  for (int i = 0; i < o.streams.count; i++) {
    int k = o.streams.values[i];
    split(&b, k);
    snprintf(key, sizeof key, "streams_%d", k);
    measure(&b, key, issue_streams, 1);
  }
  for (int i = 0; i < o.chunks.count; i++) {
    split(&b, o.chunks.values[i]);
    snprintf(key, sizeof key, "engines_%d", o.chunks.values[i]);
    measure(&b, key, issue_engines, 1);
    snprintf(key, sizeof key, "copies_%d", o.chunks.values[i]);
    measure(&b, key, issue_copies_alone, 1);
  }

  teardown(&b);
  ref_close_device(&dev);
  return 0;
}
