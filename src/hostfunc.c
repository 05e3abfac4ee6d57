/* SPDX-License-Identifier: MIT */
/* hostfunc.c: host functions into Lua (stream:launch_host_func(fn, ...),
 * whose method is stream.c's, and cuda.poll()), and every wait on the GPU.
 *
 * The driver calls a host function on a thread of its own, where Lua must
 * never run. So the C trampoline it calls only hands the call over: it
 * queues it as ready and blocks (the stream with it) until the Lua thread
 * has run fn(...) at its next wait, stream:sync(), event:sync(), dev:sync()
 * or cuda.poll(). Later work on the stream therefore sees fn's effects.
 *
 * A wait with calls outstanding polls: it runs the ready ones, asks the
 * driver whether its work is done (cuStreamQuery, cuEventQuery) and sleeps
 * up to POLL_NS on a condition the trampoline signals. With none
 * outstanding it is the plain blocking driver call.
 *
 * A call's record is malloc'd, never Lua memory: the driver may reach it
 * after the Lua state is gone. Its function and arguments are in a holder
 * userdata the registry keeps until it runs; the holder's __gc (the state
 * closing) releases a call that never ran, without running it, so no
 * driver thread stays blocked. Everything the Lua side and the trampoline
 * share is under one mutex.
 *
 * A trampoline that runs on the Lua thread itself (a driver, such as the
 * test suite's fake, that calls host functions at issue time) cannot wait
 * for that thread: it queues the call and returns; the next poll runs it.
 *
 * A host function may close anything, the stream or event the wait that
 * runs it is on included: a wait is given the object, not its handle, and
 * its cl_WaitFn reads the handle at each driver call, after the last host
 * function ran. A closed object ends the wait (closing is already "destroy
 * once its work completes"). A call keeps its holder until it returned,
 * so a state closed from inside it (os.exit(code, true)) still lets its
 * driver thread go; and an exit that does not close the state
 * (os.exit(code)) lets every driver thread go from an atexit handler,
 * registered after the driver's own (cuInit came first), so it runs before
 * the driver's teardown waits for those threads. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "cl.h"

#define CL_HOSTCALL "cuda.HostCall"
#define POLL_NS 1000000L        /* the longest sleep between two driver queries */

typedef enum { ISSUED, READY, DONE } CallState;

typedef struct HostCall {
  struct HostCall *next;        /* in the ready queue */
  CallState state;
  int abandoned;                /* issued, and its Lua state closed: never run */
  int waiter;                   /* a driver thread blocks until DONE and frees it */
  int ref;                      /* registry reference of its holder */
  lua_State *owner;             /* the main thread of the issuing state */
  pthread_t lua_thread;
} HostCall;

typedef struct Holder {
  HostCall *call;               /* NULL once it ran or was released */
} Holder;                       /* user value 1: {[0] = #args, fn, args...} */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t became_ready = PTHREAD_COND_INITIALIZER;
static pthread_cond_t became_done = PTHREAD_COND_INITIALIZER;
static HostCall *ready_head;    /* FIFO: the order the driver reached them */
static int exiting;             /* the process exits: no call will ever run */
static __thread int in_host_function;

/* --- the queue (callers hold the lock) --------------------------------------- */

static void enqueue(HostCall *c)
{
  HostCall **p = &ready_head;
  while (*p)
    p = &(*p)->next;
  c->next = NULL;
  *p = c;
}

static void unqueue(HostCall *c)
{
  for (HostCall **p = &ready_head; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      return;
    }
}

static HostCall *first_ready(lua_State *owner)
{
  HostCall *c = ready_head;
  while (c && c->owner != owner)
    c = c->next;
  return c;
}

/* --- the driver's side ---------------------------------------------------------- */

static void CUDA_CB trampoline(void *data)
{
  HostCall *c = data;
  pthread_mutex_lock(&lock);
  if (c->abandoned) {
    pthread_mutex_unlock(&lock);
    free(c);
    return;
  }
  if (exiting) {                /* its holder may still point to it: leave it */
    pthread_mutex_unlock(&lock);
    return;
  }
  c->state = READY;
  enqueue(c);
  pthread_cond_broadcast(&became_ready);
  if (pthread_equal(pthread_self(), c->lua_thread)) {
    pthread_mutex_unlock(&lock);   /* issued right now, on the Lua thread: a poll runs it */
    return;
  }
  c->waiter = 1;
  while (c->state != DONE && !exiting)
    pthread_cond_wait(&became_done, &lock);
  int done = c->state == DONE;
  pthread_mutex_unlock(&lock);
  if (done)
    free(c);
}

/* exit() without closing the state: no Lua will run again, so no call
 * will. Let every driver thread that waits for one go. */
static void let_driver_threads_go(void)
{
  pthread_mutex_lock(&lock);
  exiting = 1;
  pthread_cond_broadcast(&became_done);
  pthread_mutex_unlock(&lock);
}

static void register_exit_handler(void)
{
  atexit(let_driver_threads_go);
}

/* --- the Lua side ------------------------------------------------------------------ */

/* Mark c done (it ran, or never will) and let its driver thread go; c must
 * not be in the queue. Frees c unless a driver thread waits on it. */
static void release(HostCall *c)
{
  pthread_mutex_lock(&lock);
  int waiter = c->waiter;
  c->state = DONE;
  if (waiter)
    pthread_cond_broadcast(&became_done);
  pthread_mutex_unlock(&lock);
  if (!waiter)
    free(c);
  cl_hostfunc_outstanding--;
}

/* The holder's finalizer: the state closes (or the call failed to issue)
 * before the call ran. One still issued is freed by its trampoline. */
static int holder_gc(lua_State *L)
{
  Holder *h = luaL_checkudata(L, 1, CL_HOSTCALL);
  HostCall *c = h->call;
  if (c == NULL)
    return 0;
  h->call = NULL;
  pthread_mutex_lock(&lock);
  int issued = c->state == ISSUED;
  if (issued)
    c->abandoned = 1;
  else
    unqueue(c);
  pthread_mutex_unlock(&lock);
  if (issued)
    cl_hostfunc_outstanding--;
  else
    release(c);
  return 0;
}

static lua_State *main_thread(lua_State *L)
{
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State *m = lua_tothread(L, -1);
  lua_pop(L, 1);
  return m;
}

static HostCall *take_ready(lua_State *L)
{
  lua_State *owner = main_thread(L);
  pthread_mutex_lock(&lock);
  HostCall *c = first_ready(owner);
  if (c)
    unqueue(c);
  pthread_mutex_unlock(&lock);
  return c;
}

/* Push the function and the arguments kept by the holder at hi; returns
 * their count. Raw reads of the holder's own table: nothing allocates. */
static int push_call(lua_State *L, int hi)
{
  lua_getiuservalue(L, hi, 1);
  lua_rawgeti(L, -1, 0);        /* the argument count */
  int n = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  luaL_checkstack(L, n + 1, "host function arguments");
  for (int k = 1; k <= n + 1; k++)
    lua_rawgeti(L, -k, k);
  lua_remove(L, -(n + 2));
  return n;
}

/* Run the oldest ready call of this state: 0 when there is none. Its
 * holder stays registered, and points to it, until fn returned: a state
 * closed from inside fn (os.exit(code, true)) releases the call through
 * the holder's __gc. Its stream is released before an error fn raised is
 * raised again. */
static int run_one(lua_State *L)
{
  HostCall *c = take_ready(L);
  if (c == NULL)
    return 0;
  int ref = c->ref;
  lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
  int hi = lua_gettop(L);
  Holder *h = lua_touserdata(L, hi);
  int n = push_call(L, hi);
  in_host_function = 1;
  int r = lua_pcall(L, n, 0, 0);
  in_host_function = 0;
  c = h->call;                  /* NULL when its __gc, called by hand, released it */
  h->call = NULL;
  luaL_unref(L, LUA_REGISTRYINDEX, ref);
  if (c)
    release(c);
  if (r != LUA_OK)
    lua_error(L);
  lua_settop(L, hi - 1);
  return 1;
}

/* Sleep until a call of this state is ready, at most POLL_NS. */
static void wait_ready(lua_State *L)
{
  lua_State *owner = main_thread(L);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += POLL_NS;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&lock);
  if (first_ready(owner) == NULL)
    pthread_cond_timedwait(&became_ready, &lock, &until);
  pthread_mutex_unlock(&lock);
}

static void check_not_inside(lua_State *L, const char *what)
{
  if (in_host_function)
    luaL_error(L, "%s inside a host function (stream:launch_host_func) would wait for the "
                  "function itself: its stream is blocked until it returns", what);
}

void cl_hostfunc_wait(lua_State *L, cl_WaitFn wait, void *object, const char *api)
{
  check_not_inside(L, api);
  for (;;) {
    while (run_one(L))
      ;
    /* wait reads object's handle now, after the last host function ran */
    if (cl_hostfunc_outstanding == 0) {
      cl_run_quiet_work(L);
      cl_release_deferred();
      cl_check(L, wait(object, 1), api);
      return;
    }
    CUresult r = wait(object, 0);
    if (r != CUDA_ERROR_NOT_READY) {
      cl_check(L, r, api);
      return;
    }
    wait_ready(L);
  }
}

/* dev:sync: a context cannot be queried, so it polls until no call is
 * outstanding, then waits for the rest of the work. Its device's primary
 * context is made current at each call: a host function may have made
 * another one current. */
CUresult cl_device_wait(void *device, int block)
{
  cl_Device *d = device;
  if (!block)
    return CUDA_ERROR_NOT_READY;
  if (d->ctx == NULL)
    return CUDA_SUCCESS;        /* never used: nothing to wait for */
  if (d->ctx != cl_current_ctx) {
    CUresult r = CL_CALL(cuCtxSetCurrent, (d->ctx));
    if (r != CUDA_SUCCESS)
      return r;
    cl_current_ctx = d->ctx;
  }
  return CL_CALL(cuCtxSynchronize, ());
}

/* --- the functions ------------------------------------------------------------------- */

static void check_not_capturing(lua_State *L, CUstream stream)
{
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CL_TRY(L, cuStreamIsCapturing, (stream, &status));
  if (status != CU_STREAM_CAPTURE_STATUS_NONE)
    luaL_error(L, "launch_host_func cannot be captured into a graph: a replay would call "
                  "into Lua from the driver's thread");
}

/* Push the holder of fn (at 2) and the arguments after it; its index. */
int cl_hostfunc_push_holder(lua_State *L)
{
  int n = lua_gettop(L) - 2;
  Holder *h = lua_newuserdatauv(L, sizeof *h, 1);
  h->call = NULL;
  luaL_setmetatable(L, CL_HOSTCALL);
  lua_createtable(L, n + 1, 1);
  for (int k = 0; k <= n; k++) {
    lua_pushvalue(L, 2 + k);
    lua_rawseti(L, -2, k + 1);
  }
  lua_pushinteger(L, n);
  lua_rawseti(L, -2, 0);
  lua_setiuservalue(L, -2, 1);
  return lua_gettop(L);
}

/* Issue the call held by the holder at hi on stream (stream.c's
 * s:launch_host_func, with the collector held and its checks made). */
void cl_hostfunc_launch(lua_State *L, CUstream stream, int hi)
{
  Holder *h = lua_touserdata(L, hi);
  check_not_capturing(L, stream);
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, register_exit_handler);   /* after cuInit: runs before the driver's */
  HostCall *c = calloc(1, sizeof *c);
  if (c == NULL)
    luaL_error(L, "launch_host_func: out of memory");
  lua_pushvalue(L, hi);
  int ref = luaL_ref(L, LUA_REGISTRYINDEX);
  c->ref = ref;
  c->owner = main_thread(L);
  c->lua_thread = pthread_self();
  h->call = c;
  cl_hostfunc_outstanding++;
  CUresult r = CL_CALL(cuLaunchHostFunc, (stream, trampoline, c));
  if (r != CUDA_SUCCESS) {      /* never issued: no trampoline will see it */
    h->call = NULL;
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
    free(c);
    cl_hostfunc_outstanding--;
    cl_raise(L, r, "cuLaunchHostFunc");
  }
}

/* cuda.poll() -> n: run the host functions that are ready; never waits. */
static int cuda_poll(lua_State *L)
{
  check_not_inside(L, "cuda.poll()");
  lua_Integer n = 0;
  while (run_one(L))
    n++;
  if (cl_hostfunc_outstanding == 0) {
    cl_run_quiet_work(L);
    cl_release_deferred();
  }
  lua_pushinteger(L, n);
  return 1;
}

void cl_open_hostfunc(lua_State *L)
{
  static const luaL_Reg holder_meta[] = {{"__gc", holder_gc}, {NULL, NULL}};
  static const luaL_Reg functions[] = {{"poll", cuda_poll}, {NULL, NULL}};
  cl_new_type(L, CL_HOSTCALL, holder_meta, NULL, NULL);
  cl_setfuncs(L, functions);
}
