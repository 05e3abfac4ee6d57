/* SPDX-License-Identifier: MIT */
/* stream.c: streams, events, stream capture and host functions.
 *
 * Work runs at issue time, so a stream is never busy and an event is
 * complete as soon as it is recorded; it records a monotonic clock so
 * elapsed times are real and >= 0. A capturing stream records its work into
 * a graph instead; streams that wait on an event recorded in a capture join
 * it (fork/join capture), until the origin stream ends the capture. As on a
 * GPU, such a record and its waits are dependencies between the captured
 * nodes, not nodes: a graph's work runs in the order it was issued, which
 * already honours them. Graphs are graph.c's. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake.h"

#define STREAM_MAGIC 0x5354524du
#define EVENT_MAGIC 0x4556454eu

struct CUstream_st {
  unsigned magic;
  struct CUstream_st *next;   /* every live stream, to end joined captures */
  CUgraph capture;            /* the graph this stream records into */
  int capture_origin;
  int capture_invalid;        /* an unsafe call was made during it (fake_capture_unsafe) */
  CUstreamCaptureMode capture_mode;
  pthread_t capture_thread;   /* the thread that began it */
  CUcontext ctx;              /* the context it was made in (fake.h) */
};

struct CUevent_st {
  unsigned magic;
  unsigned flags;
  int recorded;
  double ms;
  CUgraph capture;            /* recorded while capturing into this graph */
};

static struct CUstream_st *streams;

static int special_stream(CUstream s)
{
  return s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

int fake_stream_valid(CUstream s)
{
  return special_stream(s) || s->magic == STREAM_MAGIC;
}

int fake_event_valid(CUevent ev) { return ev && ev->magic == EVENT_MAGIC; }

void fake_event_stamp(CUevent ev)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ev->recorded = 1;
  ev->ms = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void fake_run(const struct fake_Work *w)
{
  switch (w->kind) {
  case WORK_KERNEL:
    fake_kernel_run(w->u.kernel.fn, w->u.kernel.args);
    break;
  case WORK_MEMCPY:
    memmove(w->u.memcpy.dst, w->u.memcpy.src, w->u.memcpy.n);
    break;
  case WORK_MEMSET:
    fake_memset_run(w->u.memset.dst, w->u.memset.value, w->u.memset.elem, w->u.memset.count);
    break;
  case WORK_EVENT:
    fake_event_stamp(w->u.event.ev);
    break;
  case WORK_HOST:
    w->u.host.fn(w->u.host.data);
    break;
  default:        /* no-ops; child graphs and conditionals are flattened by instantiation */
    break;
  }
}

/* --- host functions on a driver thread (fake.h) ------------------------------ */

struct HostItem {
  struct HostItem *next;
  CUhostFn fn;
  void *data;
};

static int host_threaded = -1;          /* unknown until cuInit */
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t host_cond = PTHREAD_COND_INITIALIZER;
static struct HostItem *host_head, **host_tail = &host_head;
static long host_pending;               /* issued and not yet returned */
static int host_started;

static void *host_worker(void *unused)
{
  (void)unused;
  pthread_mutex_lock(&host_lock);
  for (;;) {
    while (host_head == NULL)
      pthread_cond_wait(&host_cond, &host_lock);
    struct HostItem *it = host_head;
    host_head = it->next;
    if (host_head == NULL)
      host_tail = &host_head;
    pthread_mutex_unlock(&host_lock);
    it->fn(it->data);
    free(it);
    pthread_mutex_lock(&host_lock);
    host_pending--;
    pthread_cond_broadcast(&host_cond);
  }
  return NULL;
}

void fake_host_wait(void)
{
  fake_hold_wait();
  if (host_threaded <= 0)
    return;
  pthread_mutex_lock(&host_lock);
  while (host_pending > 0)
    pthread_cond_wait(&host_cond, &host_lock);
  pthread_mutex_unlock(&host_lock);
}

static int host_busy(void)
{
  if (host_threaded <= 0)
    return 0;
  pthread_mutex_lock(&host_lock);
  long n = host_pending;
  pthread_mutex_unlock(&host_lock);
  return n > 0;
}

void fake_host_init(void)
{
  if (host_threaded >= 0)
    return;
  const char *env = getenv("CUDALUA_FAKE_HOST_THREAD");
  host_threaded = env && *env && strcmp(env, "0") != 0;
  if (host_threaded)
    atexit(fake_host_wait);     /* the driver's teardown waits for its threads */
}

static CUresult host_issue(CUhostFn fn, void *data)
{
  struct HostItem *it = malloc(sizeof *it);
  if (!it)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *it = (struct HostItem){NULL, fn, data};
  pthread_mutex_lock(&host_lock);
  if (!host_started) {
    pthread_t t;
    if (pthread_create(&t, NULL, host_worker, NULL) != 0) {
      pthread_mutex_unlock(&host_lock);
      free(it);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_detach(t);
    host_started = 1;
  }
  *host_tail = it;
  host_tail = &it->next;
  host_pending++;
  pthread_cond_broadcast(&host_cond);
  pthread_mutex_unlock(&host_lock);
  return CUDA_SUCCESS;
}

/* The legacy and per-thread streams are the current context's. */
int fake_stream_in_current_ctx(CUstream s)
{
  return special_stream(s) || s->ctx == NULL || s->ctx == fake_ctx_current();
}

int fake_stream_green(CUstream s)
{
  return !special_stream(s) && s->ctx != NULL && fake_green_ctx_live(s->ctx);
}

int fake_stream_capturing(CUstream s)
{
  return fake_stream_valid(s) && !special_stream(s) && s->capture != NULL;
}

CUresult fake_submit(CUstream s, const struct fake_Work *w)
{
  if (!fake_stream_valid(s))
    return CUDA_ERROR_INVALID_HANDLE;
  if (!special_stream(s) && s->capture)
    return fake_graph_append(s->capture, w);
  fake_run(w);
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int priority)
{
  FAKE_ENTER(cuStreamCreateWithPriority);
  (void)priority;
  return fake_stream_create(s, flags, fake_ctx_current());
}

CUresult fake_stream_create(CUstream *s, unsigned flags, CUcontext ctx)
{
  if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
    return CUDA_ERROR_INVALID_VALUE;
  *s = calloc(1, sizeof **s);
  if (!*s)
    return CUDA_ERROR_OUT_OF_MEMORY;
  (*s)->magic = STREAM_MAGIC;
  (*s)->ctx = ctx;
  (*s)->next = streams;
  streams = *s;
  fake_live[FAKE_STREAM]++;
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamDestroy(CUstream s)
{
  FAKE_ENTER(cuStreamDestroy);
  if (special_stream(s) || s->magic != STREAM_MAGIC)
    return CUDA_ERROR_INVALID_HANDLE;
  for (struct CUstream_st **p = &streams; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  if (s->capture_origin) {   /* an unfinished capture dies with its stream */
    for (struct CUstream_st *o = streams; o; o = o->next)
      if (o->capture == s->capture)
        o->capture = NULL;      /* the streams that joined it leave it */
    fake_graph_destroy(s->capture);
  }
  s->magic = 0;
  free(s);
  fake_live[FAKE_STREAM]--;
  return CUDA_SUCCESS;
}

static int capturing(CUstream s) { return !special_stream(s) && s->capture; }

CUgraph fake_stream_capture(CUstream s) { return capturing(s) ? s->capture : NULL; }

/* Whether g is a capture still going on: an event keeps the capture it was
 * recorded in after that capture ended, and its graph may be gone since. */
static int capture_live(CUgraph g)
{
  for (struct CUstream_st *o = streams; o; o = o->next)
    if (o->capture_origin && o->capture == g)
      return 1;
  return 0;
}

CUresult fake_cuStreamSynchronize(CUstream s)
{
  FAKE_ENTER(cuStreamSynchronize);
  if (!fake_stream_valid(s))
    return CUDA_ERROR_INVALID_HANDLE;
  if (capturing(s))
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  fake_host_wait();
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
  FAKE_ENTER(cuStreamIsCapturing);
  if (!fake_stream_valid(s))
    return CUDA_ERROR_INVALID_HANDLE;
  *status = capturing(s) ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamQuery(CUstream s)
{
  FAKE_ENTER(cuStreamQuery);
  if (!fake_stream_valid(s))
    return CUDA_ERROR_INVALID_HANDLE;
  if (capturing(s))
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  return host_busy() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult fake_cuStreamWaitEvent(CUstream s, CUevent ev, unsigned int flags)
{
  FAKE_ENTER(cuStreamWaitEvent);
  if (!fake_stream_valid(s) || !fake_event_valid(ev) || flags != 0)
    return CUDA_ERROR_INVALID_HANDLE;
  if (ev->capture && capturing(s) && capture_live(s->capture) && s->capture != ev->capture &&
      capture_live(ev->capture))
    return CUDA_ERROR_STREAM_CAPTURE_MERGE;   /* two captures would become one */
  if (ev->capture && !special_stream(s) && !s->capture && capture_live(ev->capture))
    s->capture = ev->capture;    /* joins the capture */
  return CUDA_SUCCESS;
}

CUresult fake_cuEventCreate(CUevent *ev, unsigned int flags)
{
  FAKE_ENTER(cuEventCreate);
  *ev = calloc(1, sizeof **ev);
  if (!*ev)
    return CUDA_ERROR_OUT_OF_MEMORY;
  (*ev)->magic = EVENT_MAGIC;
  (*ev)->flags = flags;
  fake_keep(*ev);
  fake_live[FAKE_EVENT]++;
  return CUDA_SUCCESS;
}

CUresult fake_cuEventDestroy(CUevent ev)
{
  FAKE_ENTER(cuEventDestroy);
  if (!fake_event_valid(ev))
    return CUDA_ERROR_INVALID_HANDLE;
  ev->magic = 0;
  fake_unkeep(ev);
  free(ev);
  fake_live[FAKE_EVENT]--;
  return CUDA_SUCCESS;
}

CUresult fake_cuEventRecord(CUevent ev, CUstream s)
{
  FAKE_ENTER(cuEventRecord);
  if (!fake_event_valid(ev))
    return CUDA_ERROR_INVALID_HANDLE;
  if (!fake_stream_valid(s))
    return CUDA_ERROR_INVALID_HANDLE;
  ev->capture = capturing(s) ? s->capture : NULL;
  if (ev->capture)   /* as on a GPU: a dependency for waits in the capture, not a node */
    return CUDA_SUCCESS;
  struct fake_Work w = {.kind = WORK_EVENT};
  w.u.event.ev = ev;
  return fake_submit(s, &w);
}

CUresult fake_cuEventSynchronize(CUevent ev)
{
  FAKE_ENTER(cuEventSynchronize);
  if (!fake_event_valid(ev))
    return CUDA_ERROR_INVALID_HANDLE;
  fake_host_wait();
  return CUDA_SUCCESS;
}

CUresult fake_cuEventQuery(CUevent ev)
{
  FAKE_ENTER(cuEventQuery);
  if (!fake_event_valid(ev))
    return CUDA_ERROR_INVALID_HANDLE;
  return host_busy() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult fake_cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
  FAKE_ENTER(cuEventElapsedTime);
  if (!fake_event_valid(start) || !fake_event_valid(end) || !start->recorded || !end->recorded ||
      (start->flags | end->flags) & CU_EVENT_DISABLE_TIMING)
    return CUDA_ERROR_INVALID_HANDLE;
  *ms = (float)(end->ms - start->ms);
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode)
{
  FAKE_ENTER(cuStreamBeginCapture);
  (void)mode;
  if (special_stream(s) || s->magic != STREAM_MAGIC)
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capture)
    return CUDA_ERROR_ILLEGAL_STATE;
  CUresult r = fake_graph_new(&s->capture);
  s->capture_origin = r == CUDA_SUCCESS;
  s->capture_invalid = 0;
  s->capture_mode = mode;
  s->capture_thread = pthread_self();
  return r;
}

/* A "potentially unsafe" call (a synchronous free or destroy, a context
 * synchronize, work on the legacy stream) was made: as on a GPU, it
 * invalidates every capture begun in global mode, and the calling
 * thread's thread-local ones; their cuStreamEndCapture fails. */
void fake_capture_unsafe(void)
{
  for (struct CUstream_st *o = streams; o; o = o->next)
    if (o->capture_origin &&
        (o->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL ||
         (o->capture_mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
          pthread_equal(o->capture_thread, pthread_self()))))
      o->capture_invalid = 1;
}

CUresult fake_cuStreamEndCapture(CUstream s, CUgraph *graph)
{
  FAKE_ENTER(cuStreamEndCapture);
  if (special_stream(s) || s->magic != STREAM_MAGIC || !s->capture_origin)
    return CUDA_ERROR_ILLEGAL_STATE;
  *graph = s->capture;
  for (struct CUstream_st *o = streams; o; o = o->next)
    if (o->capture == *graph)
      o->capture = NULL;
  s->capture_origin = 0;
  if (s->capture_invalid) {     /* the capture ends, and its graph with it */
    fake_graph_destroy(*graph);
    *graph = NULL;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  return CUDA_SUCCESS;
}

/* Host functions run at issue time, on the calling thread, unless the
 * fake runs them on its driver thread (fake.h). */
CUresult fake_cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
  FAKE_ENTER(cuLaunchHostFunc);
  if (!fn)
    return CUDA_ERROR_INVALID_VALUE;
  if (host_threaded > 0 && fake_stream_valid(s) && !capturing(s))
    return host_issue(fn, data);
  struct fake_Work w = {.kind = WORK_HOST};
  w.u.host.fn = fn;
  w.u.host.data = data;
  return fake_submit(s, &w);
}
