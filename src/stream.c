/* SPDX-License-Identifier: MIT */
/* stream.c: cuda.Stream and cuda.Event.
 *
 * record and wait are on the hot path of every pipelined script: with an
 * event given they allocate nothing. */
#include <string.h>

#include "device.h"
#include "hostfunc.h"

static const char *const stream_options[] = {"non_blocking", "priority", NULL};
static const char *const event_options[] = {"timing", "blocking_sync", NULL};

cl_Stream *cl_check_stream(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_STREAM);
}

cl_Stream *cl_opt_stream(lua_State *L, int i)
{
  return lua_isnoneornil(L, i) ? NULL : cl_check_stream(L, i);
}

cl_Event *cl_check_event(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_EVENT);
}

/* --- creation ------------------------------------------------------------- */

static cl_Event *push_event(lua_State *L, int devi, int timing, int blocking)
{
  cl_Device *d = cl_check_device(L, devi);
  unsigned flags = (timing ? 0 : CU_EVENT_DISABLE_TIMING) | (blocking ? CU_EVENT_BLOCKING_SYNC : 0);
  cl_Event *ev = lua_newuserdatauv(L, sizeof *ev, 2);
  memset(ev, 0, sizeof *ev);
  ev->closed = 1;               /* until the handle exists */
  luaL_setmetatable(L, CL_EVENT);
  cl_device_activate(L, d);     /* after allocating: a finalizer may switch contexts */
  CL_TRY(L, cuEventCreate, (&ev->handle, flags));
  ev->closed = 0;
  ev->dev = d;
  ev->timing = timing;
  lua_pushvalue(L, devi);
  lua_setiuservalue(L, -2, 1);
  return ev;
}

int cl_check_stream_options(lua_State *L, int opts, cl_Device *d, int *non_blocking)
{
  cl_check_options(L, opts, stream_options);
  *non_blocking = cl_opt_boolean(L, opts, "non_blocking", 1);
  lua_Integer priority = cl_opt_integer(L, opts, "priority", 0);
  int least = 0, greatest = 0;
  cl_device_activate(L, d);
  CL_TRY(L, cuCtxGetStreamPriorityRange, (&least, &greatest));
  /* greatest is the numerically lowest: clamp into [greatest, least] */
  if (priority < greatest)
    priority = greatest;
  if (priority > least)
    priority = least;
  return (int)priority;
}

cl_Stream *cl_push_new_stream(lua_State *L, int devi, int owneri, int priority, int non_blocking)
{
  cl_Stream *s = lua_newuserdatauv(L, sizeof *s, 3);
  memset(s, 0, sizeof *s);
  s->closed = 1;
  luaL_setmetatable(L, CL_STREAM);
  s->dev = cl_check_device(L, devi);
  s->priority = priority;
  s->non_blocking = non_blocking;
  lua_pushvalue(L, devi);
  lua_setiuservalue(L, -2, 1);
  if (owneri) {
    lua_pushvalue(L, owneri);
    lua_setiuservalue(L, -2, 2);
  }
  return s;
}

/* dev:create_stream{non_blocking = true, priority = 0} */
static int device_create_stream(lua_State *L)
{
  cl_Device *d = cl_check_device(L, 1);
  int non_blocking = 0;
  int priority = cl_check_stream_options(L, 2, d, &non_blocking);
  cl_Stream *s = cl_push_new_stream(L, 1, 0, priority, non_blocking);
  cl_device_activate(L, d);     /* a finalizer that allocating ran may have switched */
  CL_TRY(L, cuStreamCreateWithPriority,
         (&s->handle, non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT, priority));
  s->closed = 0;
  return 1;
}

/* dev:create_event{timing = false, blocking_sync = false} */
static int device_create_event(lua_State *L)
{
  cl_check_device(L, 1);
  cl_check_options(L, 2, event_options);
  int timing = cl_opt_boolean(L, 2, "timing", 0);
  int blocking = cl_opt_boolean(L, 2, "blocking_sync", 0);
  push_event(L, 1, timing, blocking);
  return 1;
}

/* --- Stream --------------------------------------------------------------- */

/* The cl_WaitFns: a stream or event that a host function closed during
 * the wait has nothing left to wait for (cl.h). */
static CUresult stream_wait_fn(void *object, int block)
{
  cl_Stream *s = object;
  if (s->closed)
    return CUDA_SUCCESS;
  return block ? CL_CALL(cuStreamSynchronize, (s->handle)) : CL_CALL(cuStreamQuery, (s->handle));
}

static CUresult event_wait_fn(void *object, int block)
{
  cl_Event *ev = object;
  if (ev->closed)
    return CUDA_SUCCESS;
  return block ? CL_CALL(cuEventSynchronize, (ev->handle)) : CL_CALL(cuEventQuery, (ev->handle));
}

/* s and ev must stay on the stack: the wait reads them after host functions. */
void cl_stream_sync(lua_State *L, cl_Stream *s)
{
  cl_sync(L, stream_wait_fn, s, "cuStreamSynchronize");
}

void cl_event_sync(lua_State *L, cl_Event *ev)
{
  cl_sync(L, event_wait_fn, ev, "cuEventSynchronize");
}

static int stream_sync(lua_State *L)
{
  cl_stream_sync(L, cl_check_stream(L, 1));
  return 0;
}

/* The event s:record makes when given none: s:record() makes a timing
 * event; s:record{...} or s:record(nil, {...}) one with those options,
 * create_event's defaults for the rest (as cuda.core's record(options=)). */
static cl_Event *record_new_event(lua_State *L)
{
  int opts = lua_istable(L, 2) ? 2 : 3;
  if (opts == 3 && !lua_isnoneornil(L, 2))
    luaL_typeerror(L, 2, "cuda.Event or an option table");
  int timing = 1, blocking = 0;
  if (!lua_isnoneornil(L, opts)) {
    cl_check_options(L, opts, event_options);
    timing = cl_opt_boolean(L, opts, "timing", 0);
    blocking = cl_opt_boolean(L, opts, "blocking_sync", 0);
  }
  lua_getiuservalue(L, 1, 1);   /* the device: stream_record checks the stream after */
  return push_event(L, lua_gettop(L), timing, blocking);
}

/* s:record([event | options]) -> event. The checks leave the metatables
 * they read pushed (cl_fast_test_keep), and the event goes on top. */
static int stream_record(lua_State *L)
{
  const cl_Types *t = cl_types(L);
  int top = lua_gettop(L);
  cl_Stream *s = cl_fast_test_keep(L, t, 1, CL_UV_STREAM);
  cl_Event *ev = top >= 2 ? cl_fast_test_keep(L, t, 2, CL_UV_EVENT) : NULL;
  if (ev == NULL || s == NULL || s->closed) {
    lua_settop(L, top);         /* the arguments alone */
    s = cl_check_stream(L, 1);
  }
  if (ev == NULL) {
    ev = record_new_event(L);
    s = cl_check_stream(L, 1);  /* making the event can run finalizers */
  } else if (ev->closed)
    return luaL_error(L, "%s is closed", CL_EVENT);
  else
    lua_pushvalue(L, 2);
  CL_TRY(L, cuEventRecord, (ev->handle, s->handle));
  ev->recorded = 1;
  if (s->capture || ev->capture)
    cl_capture_record(L, ev, -1, 1);
  return 1;
}

/* s:wait(event_or_stream): later work on s waits for it. */
static int stream_wait(lua_State *L)
{
  const cl_Types *t = cl_types(L);
  cl_Stream *s = cl_fast_check_in(L, t, 1, CL_UV_STREAM, CL_STREAM);
  cl_Event *ev = cl_fast_test_in(L, t, 2, CL_UV_EVENT);
  if (ev) {
    if (ev->closed)
      return luaL_error(L, "%s is closed", CL_EVENT);
    CL_TRY(L, cuStreamWaitEvent, (s->handle, ev->handle, 0));
    if (ev->capture)
      cl_capture_join(L, 1, 2);
    return 0;
  }
  cl_Stream *other = luaL_testudata(L, 2, CL_STREAM);
  if (!other)
    return luaL_typeerror(L, 2, "cuda.Event or cuda.Stream");
  if (other->closed)
    return luaL_error(L, "%s is closed", CL_STREAM);
  CUevent tmp;
  cl_device_activate(L, other->dev);
  CL_TRY(L, cuEventCreate, (&tmp, CU_EVENT_DISABLE_TIMING));
  const char *failed = "cuEventRecord";   /* the call an error names */
  CUresult r = CL_CALL(cuEventRecord, (tmp, other->handle));
  if (r == CUDA_SUCCESS) {
    failed = "cuStreamWaitEvent";
    r = CL_CALL(cuStreamWaitEvent, (s->handle, tmp, 0));
  }
  CL_CALL(cuEventDestroy, (tmp));  /* released once the wait is satisfied */
  cl_check(L, r, failed);
  if (other->capture)
    cl_capture_join(L, 1, 2);
  return 0;
}

/* --- default streams ------------------------------------------------------
 * cuda.core's Device.default_stream, LEGACY_DEFAULT_STREAM and
 * PER_THREAD_DEFAULT_STREAM: cuda.Streams over CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD, one of each per device, kept in the registry. They
 * are the driver's: close() leaves them open, as every caller shares them. */
#define DEFAULT_STREAMS_KEY "cuda.default_streams"

static void cl_push_default_stream(lua_State *L, int devi, int per_thread)
{
  devi = lua_absindex(L, devi);
  lua_Integer key = 2 * (lua_Integer)cl_check_device(L, devi)->ordinal + per_thread + 1;
  luaL_getsubtable(L, LUA_REGISTRYINDEX, DEFAULT_STREAMS_KEY);
  if (lua_rawgeti(L, -1, key) == LUA_TNIL) {
    lua_pop(L, 1);
    cl_Stream *s = cl_push_new_stream(L, devi, 0, 0, 0);
    s->handle = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    s->is_default = 1;
    s->closed = 0;
    lua_pushvalue(L, -1);
    lua_rawseti(L, -3, key);
  }
  lua_remove(L, -2);
}

/* s:launch_host_func(fn, ...): fn(...) runs in stream order, on the Lua
 * thread, at its next wait or cuda.poll() (hostfunc.c); the stream waits
 * for it. The holder first; then, with the collector held (registering it
 * allocates), the stream's checks and the launch. */
static int stream_launch_host_func(lua_State *L)
{
  luaL_checkudata(L, 1, CL_STREAM);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  int hi = cl_hostfunc_push_holder(L);
  cl_gc_hold(L);
  cl_Stream *s = cl_check_stream(L, 1);
  cl_device_activate(L, s->dev);
  cl_hostfunc_launch(L, s->handle, hi);
  return 0;
}

/* dev.default_stream: cuda.core's rule, the per-thread stream when the
 * environment asks for it; dev.legacy_default_stream and
 * dev.per_thread_default_stream (fields of Device, from here) */
static int device_default_stream(lua_State *L)
{
  const char *e = getenv("CUDALUA_PER_THREAD_DEFAULT_STREAM");
  cl_push_default_stream(L, 1, e != NULL && *e != '\0' && strcmp(e, "0") != 0);
  return 1;
}

static int device_legacy_default_stream(lua_State *L)
{
  cl_push_default_stream(L, 1, 0);
  return 1;
}

static int device_per_thread_default_stream(lua_State *L)
{
  cl_push_default_stream(L, 1, 1);
  return 1;
}

static int stream_close(lua_State *L)
{
  cl_Stream *s = luaL_checkudata(L, 1, CL_STREAM);
  if (!s->closed && !s->is_default) {
    s->closed = 1;
    cl_GraphRefs *ended = cl_capture_stream_closed(L, s, 1);
    CL_CALL(cuStreamDestroy, (s->handle));   /* ends the driver's capture */
    s->handle = NULL;
    cl_capture_ended(ended);
  }
  return 0;
}

static int stream_tostring(lua_State *L)
{
  cl_Stream *s = luaL_checkudata(L, 1, CL_STREAM);
  if (s->closed)
    return cl_push_closed_name(L, CL_STREAM);
  lua_pushfstring(L, "cuda.Stream(%p, device %d, priority %d%s)", (void *)s->handle,
                  s->dev->ordinal, s->priority, s->non_blocking ? ", non-blocking" : "");
  return 1;
}

static int stream_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);   /* may convert a number: allocates */
  cl_Stream *s = cl_check_stream(L, 1);
  if (strcmp(key, "handle") == 0)
    lua_pushinteger(L, (lua_Integer)(uintptr_t)s->handle);
  else if (strcmp(key, "device") == 0)
    lua_getiuservalue(L, 1, 1);
  else if (strcmp(key, "priority") == 0)
    lua_pushinteger(L, s->priority);
  else if (strcmp(key, "non_blocking") == 0)
    lua_pushboolean(L, s->non_blocking);
  else if (strcmp(key, "is_default") == 0)
    lua_pushboolean(L, s->is_default);
  else if (strcmp(key, "is_done") == 0) {
    CUresult r = CL_CALL(cuStreamQuery, (s->handle));
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY)
      cl_raise(L, r, "cuStreamQuery");
    lua_pushboolean(L, r == CUDA_SUCCESS);
  } else
    lua_pushnil(L);
  return 1;
}

/* --- Event ---------------------------------------------------------------- */

static int event_sync(lua_State *L)
{
  cl_event_sync(L, cl_check_event(L, 1));
  return 0;
}

/* ev:close(): while a live graph records or waits on it, the event is
 * closed for Lua and destroyed with the last such graph. */
static int event_close(lua_State *L)
{
  cl_Event *ev = luaL_checkudata(L, 1, CL_EVENT);
  if (!ev->closed) {
    ev->closed = 1;
    if (ev->graph_refs == 0) {
      CL_CALL(cuEventDestroy, (ev->handle));
      ev->handle = NULL;
    }
  }
  return 0;
}

void cl_event_graph_release(cl_Event *ev)
{
  if (--ev->graph_refs == 0 && ev->closed) {
    CL_CALL(cuEventDestroy, (ev->handle));
    ev->handle = NULL;
  }
}

static void check_timing(lua_State *L, cl_Event *ev, const char *which)
{
  if (!ev->timing)
    luaL_error(L, "cannot time events: the %s event was created with timing = false", which);
  if (!ev->recorded)
    luaL_error(L, "cannot time events: the %s event was never recorded", which);
}

/* ev2 - ev1: milliseconds from ev1 to ev2, waiting for both to complete. */
static int event_sub(lua_State *L)
{
  cl_Event *end = cl_check_event(L, 1), *start = cl_check_event(L, 2);
  float ms = 0;
  check_timing(L, end, "later (left)");
  check_timing(L, start, "earlier (right)");
  CUresult r = CL_CALL(cuEventElapsedTime, (&ms, start->handle, end->handle));
  if (r == CUDA_ERROR_NOT_READY) {
    cl_event_sync(L, start);
    cl_event_sync(L, end);      /* host functions ran: check both again */
    end = cl_check_event(L, 1);
    start = cl_check_event(L, 2);
    r = CL_CALL(cuEventElapsedTime, (&ms, start->handle, end->handle));
  }
  cl_check(L, r, "cuEventElapsedTime");
  lua_pushnumber(L, ms);
  return 1;
}

static int event_tostring(lua_State *L)
{
  cl_Event *ev = luaL_checkudata(L, 1, CL_EVENT);
  if (ev->closed)
    return cl_push_closed_name(L, CL_EVENT);
  lua_pushfstring(L, "cuda.Event(%p, device %d%s)", (void *)ev->handle, ev->dev->ordinal,
                  ev->timing ? ", timing" : "");
  return 1;
}

static int event_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);
  cl_Event *ev = cl_check_event(L, 1);
  if (strcmp(key, "is_done") == 0) {
    CUresult r = CL_CALL(cuEventQuery, (ev->handle));
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY)
      cl_raise(L, r, "cuEventQuery");
    lua_pushboolean(L, r == CUDA_SUCCESS);
  } else if (strcmp(key, "handle") == 0)
    lua_pushinteger(L, (lua_Integer)(uintptr_t)ev->handle);
  else if (strcmp(key, "device") == 0)
    lua_getiuservalue(L, 1, 1);
  else if (strcmp(key, "timing") == 0)
    lua_pushboolean(L, ev->timing);
  else
    lua_pushnil(L);
  return 1;
}

void cl_open_stream(lua_State *L)
{
  static const luaL_Reg stream_meta[] = {
    {"__gc", stream_close}, {"__close", stream_close}, {"__tostring", stream_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg stream_methods[] = {
    {"sync", stream_sync}, {"record", stream_record}, {"wait", stream_wait},
    {"launch_host_func", stream_launch_host_func},
    {"close", stream_close}, {NULL, NULL}
  };
  static const luaL_Reg event_meta[] = {
    {"__gc", event_close}, {"__close", event_close}, {"__tostring", event_tostring},
    {"__sub", event_sub}, {NULL, NULL}
  };
  static const luaL_Reg event_methods[] = {
    {"sync", event_sync}, {"close", event_close}, {NULL, NULL}
  };
  static const luaL_Reg device_methods[] = {
    {"create_stream", device_create_stream}, {"create_event", device_create_event},
    {NULL, NULL}
  };
  static const luaL_Reg device_fields[] = {
    {"default_stream", device_default_stream},
    {"legacy_default_stream", device_legacy_default_stream},
    {"per_thread_default_stream", device_per_thread_default_stream}, {NULL, NULL}
  };
  cl_new_type(L, CL_STREAM, stream_meta, stream_methods, stream_fields);
  cl_new_type(L, CL_EVENT, event_meta, event_methods, event_fields);
  cl_lifetimes_event(cl_event_graph_release);
  cl_add_methods(L, CL_DEVICE, device_methods);
  cl_add_fields(L, CL_DEVICE, device_fields);
}
