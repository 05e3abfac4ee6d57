/* SPDX-License-Identifier: MIT */
/* launch_ref: host cost per call of launches, a small copy and an event
 * record through the raw CUDA driver API, and the cost of a captured graph
 * of 100 launches against 100 direct launches. The yardstick for
 * scripts/launch_cost.lua, which measures the same operations through
 * cudalua by the same method (see bench/README.md).
 *
 * Method, for each host figure: warm up; then, per repeat, synchronize the
 * stream, read the monotonic clock, issue a batch of B calls, read the clock
 * again and record the time per call. B stays far below the driver's launch
 * queue depth, so the host never waits for the GPU inside a batch. Output:
 * one line per figure, "<key> <median> <min> <p90>", in microseconds per
 * call (milliseconds for the *_gpu_ms keys), after '#' header lines.
 * With --cpu N the measuring thread runs on CPU N only, as launch_cost
 * pins itself, so both sides pay the same core's clock and caches. */
#define _GNU_SOURCE             /* sched_setaffinity */
#include <sched.h>
#include <stdint.h>

#include "ref.h"

#define DEFAULT_REPEATS  200
#define DEFAULT_BATCH    100
#define MAX_BATCH        500    /* far below the ~1024-entry launch queue */
#define WARMUP_BATCHES   10
#define GRAPH_LAUNCHES   100    /* launches captured in the graph, and direct launches compared */
#define SMALL_COPY_BYTES 4096
#define EMPTY4_ELEMENTS  1024   /* n passed to empty4; the kernel touches nothing */

/* The same kernels as kernels/empty.cu (used instead with --kernels DIR). */
static const char embedded_empty_source[] =
  "extern \"C\" __global__ void empty() {}\n"
  "extern \"C\" __global__ void empty4(const float *a, float *b, float s,\n"
  "                                    unsigned long long n) {}\n";

typedef struct options {
  int repeats, batch, device;
  int cpu;                      /* -1: not pinned */
  const char *kernels_dir;      /* NULL: the embedded source */
} options;

/* Everything the timed loops touch, made before any timing starts. */
typedef struct bench {
  CUstream stream;
  CUmodule module;
  CUfunction empty, empty4;
  CUdeviceptr d_a, d_b;         /* empty4's pointer arguments */
  float scale;
  unsigned long long n;
  void *empty4_params[4];       /* point at d_a, d_b, scale, n above */
  void *host_small;             /* cuMemHostAlloc, SMALL_COPY_BYTES */
  CUdeviceptr dev_small;        /* the device's default pool, SMALL_COPY_BYTES */
  CUevent marker;               /* recorded by event_record; no timing, like cuda.Event's default */
  CUevent gpu_start, gpu_end;   /* timing events for the *_gpu_ms figures */
  CUgraphExec graph;            /* GRAPH_LAUNCHES launches of empty4 */
  int repeats;
  double *samples;              /* one per repeat */
} bench;

/* Issues count operations of one kind on b->stream. */
typedef void (*issue_fn)(bench *b, int count);

/* --- the operations measured ------------------------------------------------ */

static void launch_empty(bench *b, int count)
{
  for (int i = 0; i < count; i++)
    CHECK(cuLaunchKernel(b->empty, 1, 1, 1, 32, 1, 1, 0, b->stream, NULL, NULL));
}

static void launch_empty4(bench *b, int count)
{
  for (int i = 0; i < count; i++)
    CHECK(cuLaunchKernel(b->empty4, 1, 1, 1, 32, 1, 1, 0, b->stream, b->empty4_params, NULL));
}

static void copy_small_htod(bench *b, int count)
{
  for (int i = 0; i < count; i++)
    CHECK(cuMemcpyAsync(b->dev_small, (CUdeviceptr)(uintptr_t)b->host_small, SMALL_COPY_BYTES, b->stream));
}

static void record_marker(bench *b, int count)
{
  for (int i = 0; i < count; i++)
    CHECK(cuEventRecord(b->marker, b->stream));
}

static void replay_graph(bench *b, int count)
{
  for (int i = 0; i < count; i++)
    CHECK(cuGraphLaunch(b->graph, b->stream));
}

/* --- measuring ------------------------------------------------------------ */

/* Host microseconds per call over batches of `batch` calls. */
static ref_stats time_host_per_call(bench *b, issue_fn issue, int batch)
{
  for (int r = 0; r < WARMUP_BATCHES; r++) {
    CHECK(cuStreamSynchronize(b->stream));
    issue(b, batch);
  }
  for (int r = 0; r < b->repeats; r++) {
    CHECK(cuStreamSynchronize(b->stream));
    double t0 = ref_clock();
    issue(b, batch);
    double t1 = ref_clock();
    b->samples[r] = (t1 - t0) * 1e6 / batch;
  }
  /* an asynchronous failure surfaces here, before anything is printed */
  CHECK(cuStreamSynchronize(b->stream));
  return ref_summarize(b->samples, b->repeats);
}

/* GPU milliseconds between events recorded around `count` calls, which
 * start on an idle stream. For direct launches this includes the time the
 * GPU waits for the host to submit the next launch: it is the time the
 * work takes on the GPU's timeline, the figure a graph replay improves. */
static ref_stats time_gpu_ms(bench *b, issue_fn issue, int count)
{
  for (int r = 0; r < WARMUP_BATCHES + b->repeats; r++) {
    CHECK(cuStreamSynchronize(b->stream));
    CHECK(cuEventRecord(b->gpu_start, b->stream));
    issue(b, count);
    CHECK(cuEventRecord(b->gpu_end, b->stream));
    CHECK(cuEventSynchronize(b->gpu_end));
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, b->gpu_start, b->gpu_end));
    if (r >= WARMUP_BATCHES)
      b->samples[r - WARMUP_BATCHES] = ms;
  }
  return ref_summarize(b->samples, b->repeats);
}

/* The small copies must have delivered their bytes: dev_small was
 * poisoned before them (setup). */
static void verify_small_copies(bench *b)
{
  unsigned char got[SMALL_COPY_BYTES];
  CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)got, b->dev_small, SMALL_COPY_BYTES, b->stream));
  CHECK(cuStreamSynchronize(b->stream));
  const unsigned char *want = b->host_small;
  for (int i = 0; i < SMALL_COPY_BYTES; i++)
    if (got[i] != want[i])
      ref_die("the 4 KiB copies are wrong: byte %d on the device is %d, expected %d", i, got[i],
              want[i]);
}

/* decimals: 3 for microseconds, 4 for milliseconds */
static void print_figure(const char *key, ref_stats st, int decimals)
{
  printf("%s %.*f %.*f %.*f\n", key, decimals, st.median, decimals, st.min, decimals, st.p90);
  fflush(stdout);
}

/* --- setup ---------------------------------------------------------------- */

static void load_kernels(bench *b, const ref_device *d, const char *kernels_dir)
{
  b->module = ref_load_kernels(d, kernels_dir, "empty.cu", embedded_empty_source);
  CHECK(cuModuleGetFunction(&b->empty, b->module, "empty"));
  CHECK(cuModuleGetFunction(&b->empty4, b->module, "empty4"));
}

/* Capture GRAPH_LAUNCHES launches of empty4 from the stream and
 * instantiate them; check the graph holds exactly that many nodes. */
static void capture_graph(bench *b)
{
  CUgraph graph;
  size_t nodes = 0;
  CHECK(cuStreamBeginCapture(b->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  launch_empty4(b, GRAPH_LAUNCHES);
  CHECK(cuStreamEndCapture(b->stream, &graph));
  CHECK(cuGraphGetNodes(graph, NULL, &nodes));
  if (nodes != GRAPH_LAUNCHES)
    ref_die("the captured graph has %zu nodes, expected %d", nodes, GRAPH_LAUNCHES);
  CHECK(cuGraphInstantiate(&b->graph, graph, 0));
  CHECK(cuGraphDestroy(graph));   /* the executable graph does not need it */
}

static void setup(bench *b, const ref_device *d, const options *o)
{
  memset(b, 0, sizeof *b);
  b->repeats = o->repeats;
  b->samples = ref_malloc(sizeof *b->samples * (size_t)o->repeats);
  b->stream = ref_create_stream();
  load_kernels(b, d, o->kernels_dir);
  /* device memory from the default pool, as dev.memory_resource allocates it */
  CHECK(cuMemAllocAsync(&b->d_a, EMPTY4_ELEMENTS * sizeof(float), b->stream));
  CHECK(cuMemAllocAsync(&b->d_b, EMPTY4_ELEMENTS * sizeof(float), b->stream));
  CHECK(cuMemAllocAsync(&b->dev_small, SMALL_COPY_BYTES, b->stream));
  b->host_small = ref_pinned_alloc(SMALL_COPY_BYTES);
  /* the bytes launch_cost.lua copies too: (i * 7 + 3) % 256 for its 1-based i */
  for (int i = 0; i < SMALL_COPY_BYTES; i++)
    ((unsigned char *)b->host_small)[i] = (unsigned char)(((i + 1) * 7 + 3) % 256);
  CHECK(cuMemsetD8Async(b->dev_small, 0xa5, SMALL_COPY_BYTES, b->stream));
  b->scale = 2.5f;
  b->n = EMPTY4_ELEMENTS;
  b->empty4_params[0] = &b->d_a;
  b->empty4_params[1] = &b->d_b;
  b->empty4_params[2] = &b->scale;
  b->empty4_params[3] = &b->n;
  CHECK(cuEventCreate(&b->marker, CU_EVENT_DISABLE_TIMING));
  CHECK(cuEventCreate(&b->gpu_start, CU_EVENT_DEFAULT));
  CHECK(cuEventCreate(&b->gpu_end, CU_EVENT_DEFAULT));
  capture_graph(b);
  CHECK(cuStreamSynchronize(b->stream));
}

static void teardown(bench *b)
{
  CHECK(cuStreamSynchronize(b->stream));
  CHECK(cuGraphExecDestroy(b->graph));
  CHECK(cuEventDestroy(b->gpu_end));
  CHECK(cuEventDestroy(b->gpu_start));
  CHECK(cuEventDestroy(b->marker));
  CHECK(cuMemFreeHost(b->host_small));
  CHECK(cuMemFreeAsync(b->dev_small, b->stream));
  CHECK(cuMemFreeAsync(b->d_b, b->stream));
  CHECK(cuMemFreeAsync(b->d_a, b->stream));
  CHECK(cuStreamSynchronize(b->stream));
  CHECK(cuStreamDestroy(b->stream));
  CHECK(cuModuleUnload(b->module));
  free(b->samples);
}

/* Pin the calling thread to cpu, after the driver started its own threads
 * (they keep every CPU), as cuda.set_affinity does in launch_cost. */
static void pin_to_cpu(int cpu)
{
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    ref_die("cannot run on CPU %d: %s", cpu, strerror(errno));
}

/* --- main ----------------------------------------------------------------- */

static void usage(FILE *out)
{
  fprintf(out,
    "usage: %s [--repeats N] [--batch B] [--device D] [--cpu C] [--kernels DIR]\n"
    "Host cost per call of cuLaunchKernel, cuMemcpyAsync (4 KiB) and cuEventRecord,\n"
    "and of replaying a graph of %d launches, through the raw CUDA driver API.\n"
    "  --repeats N    timed batches per figure (default %d)\n"
    "  --batch B      calls per timed batch, 1..%d (default %d); graph replays\n"
    "                 are timed in batches of max(1, B/10)\n"
    "  --device D     device ordinal (default 0)\n"
    "  --cpu C        measure on CPU C only (default: wherever the system runs it)\n"
    "  --kernels DIR  compile DIR/empty.cu instead of the embedded copy\n"
    "Output: '<key> <median> <min> <p90>' in us per call (ms for *_gpu_ms).\n",
    ref_prog, GRAPH_LAUNCHES, DEFAULT_REPEATS, MAX_BATCH, DEFAULT_BATCH);
}

static options parse_options(int argc, char **argv)
{
  static const struct option longopts[] = {
    {"repeats", required_argument, NULL, 'r'},
    {"batch", required_argument, NULL, 'b'},
    {"device", required_argument, NULL, 'd'},
    {"cpu", required_argument, NULL, 'c'},
    {"kernels", required_argument, NULL, 'k'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
  };
  options o = {DEFAULT_REPEATS, DEFAULT_BATCH, 0, -1, NULL};
  int c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    switch (c) {
    case 'r': o.repeats = (int)ref_parse_number("repeats", optarg, 1, 1000000); break;
    case 'b': o.batch = (int)ref_parse_number("batch", optarg, 1, MAX_BATCH); break;
    case 'd': o.device = (int)ref_parse_number("device", optarg, 0, 1024); break;
    case 'c': o.cpu = (int)ref_parse_number("cpu", optarg, 0, CPU_SETSIZE - 1); break;
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
  ref_prog = "launch_ref";
  options o = parse_options(argc, argv);
  /* graph replays run GRAPH_LAUNCHES kernels each: fewer per batch keeps
   * the queued work, and so the chance of the host blocking, bounded */
  int graph_batch = o.batch / 10 > 1 ? o.batch / 10 : 1;
  ref_device dev;
  ref_open_device(&dev, o.device);
  if (o.cpu >= 0)
    pin_to_cpu(o.cpu);
  bench b;
  setup(&b, &dev, &o);

  ref_print_device_header(&dev);
  printf("# repeats %d, batch %d, graph replays per batch %d, warm-up batches %d, "
         "non-blocking stream, grid 1, block 32\n",
         o.repeats, o.batch, graph_batch, WARMUP_BATCHES);
  if (o.cpu >= 0)
    printf("# pinned to CPU %d\n", o.cpu);
  printf("# key median min p90 (us per call; ms for *_gpu_ms)\n");
  const int us = 3, ms = 4;
  print_figure("launch_empty", time_host_per_call(&b, launch_empty, o.batch), us);
  print_figure("launch_4params", time_host_per_call(&b, launch_empty4, o.batch), us);
  ref_stats copies = time_host_per_call(&b, copy_small_htod, o.batch);
  verify_small_copies(&b);
  print_figure("memcpy_htod_4k", copies, us);
  print_figure("event_record", time_host_per_call(&b, record_marker, o.batch), us);
  ref_stats replay_host = time_host_per_call(&b, replay_graph, graph_batch);
  print_figure("graph100_replay_host", replay_host, us);
  ref_stats replay_gpu = time_gpu_ms(&b, replay_graph, 1);
  print_figure("graph100_gpu_ms", replay_gpu, ms);
  print_figure("direct100_gpu_ms", time_gpu_ms(&b, launch_empty4, GRAPH_LAUNCHES), ms);
  /* A host that had to wait for queue space would run at the GPU's pace. */
  if (replay_host.median * 1e-3 > 0.5 * replay_gpu.median)
    printf("# warning: a graph replay costs the host %.3f us against %.3f us of GPU time: "
           "the host may have waited on a full queue; try a smaller --batch\n",
           replay_host.median, replay_gpu.median * 1e3);

  teardown(&b);
  ref_close_device(&dev);
  return 0;
}
