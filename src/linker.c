/* SPDX-License-Identifier: MIT */
/* linker.c: cuda.Linker, device linking over nvJitLink.
 *
 *     local linker = cuda.Linker({obj_a, obj_b}, {arch = "sm_90", lto = true})
 *     local obj = linker:link("cubin")      -- a cuda.ObjectCode
 *
 * A Linker keeps its objects and the nvJitLink argument list, resolved at
 * construction like a Program's (the default arch is the current device's).
 * Its info and error logs are kept as linker.log; a failed link raises a
 * cuda.Error carrying them.
 *
 * nvJitLink can end the process: exit(1) for -arch=sm_3 ("fatal : Unknown
 * arch name 'compute_3'"), a segfault in nvJitLinkAddData when, after one
 * LTO link in the process, two PTX objects define the same kernel, and
 * now and then on garbage LTO-IR. No Lua program may crash cudalua, so:
 *   - the arch is checked when the linker is made (check_arch): a clear
 *     argument error, naming the archs this toolkit links for;
 *   - every link runs in a child process (fork) that only calls nvJitLink
 *     and writes to a pipe, then _exits: the parent reads the linked code,
 *     the logs and the result as they come, and reports a child that died
 *     as a cuda.Error ("nvJitLink crashed (signal 11, ...) while adding
 *     object 2 (ptx)", err.crashed). Each link also starts from the
 *     parent's untouched nvJitLink state, so no link sees an earlier one's.
 * What it costs, bench/link_cost.lua (a fresh Linker each link; median of
 * 40; this 2-core machine, shared, no GPU; before = the same build with
 * nvJitLink called in the process), three rounds of each, in turn:
 *     two small PTX objects   11.7-22.3 ms before, 24.4-25.2 ms after
 *     their LTO-IR            11.5-13.7 ms before, 24.5-37.9 ms after
 *     (with 1 GB of the process touched: 13-14 ms before, 48-53 ms after)
 * and at a busier half hour, 26-27 ms before, 43-52 ms after (PTX), 22-26
 * before, 55-60 after (LTO-IR): a small link takes about twice as long.
 * fork itself takes 0.3 ms for a small process; the rest is nvJitLink
 * starting cold in every child (2646 page faults in a child's link
 * against under 40 in a warm process; a link in the parent beforehand
 * does not warm the children), plus the page tables fork copies, which
 * grow with the process (about 30 ms a GB here). A link is not a hot path
 * (once per program, and pc:store can keep its result), so safety wins;
 * a long-lived helper process would win most of it back. The child: no
 * Lua, no CUDA (the parent's context and driver threads are not touched;
 * fork copies only the calling thread), its inherited exit handlers
 * skipped (exit_at_once), its crash signals back to their defaults; the
 * parent reads both pipes together (large cubins), retries on EINTR, and
 * notices a child that exited even if something else holds its pipes. */
#define _GNU_SOURCE                             /* pipe2, on_exit, strsignal */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cl.h"
#include "toolkit.h"

#define LINK_JOB "cuda.LinkJob"
/* "object 9223372036854775807 (library)" fits */
#define INPUT_NAME_SIZE 48

typedef struct Linker {
  int closed;
  int lto;                      /* -lto given: link("ptx") is possible */
} Linker;

/* Linker user values */
enum { LINK_OBJECTS = 1, LINK_OPTIONS, LINK_INFO_LOG, LINK_ERROR_LOG, LINK_NUV = LINK_ERROR_LOG };

/* cuda.core's LinkerOptions that nvJitLink takes, and their flags. */
static const cl_NamedOption linker_flags[] = {
  {"lto", CL_OPT_BOOL, "-lto", NULL},
  {"link_time_optimization", CL_OPT_BOOL, "-lto", NULL},
  {"max_register_count", CL_OPT_INT, "-maxrregcount=", NULL},
  {"debug", CL_OPT_BOOL, "-g", NULL},
  {"lineinfo", CL_OPT_BOOL, "-lineinfo", NULL},
  {"ftz", CL_OPT_BOOL, "-ftz=1", "-ftz=0"},
  {"prec_div", CL_OPT_BOOL, "-prec-div=1", "-prec-div=0"},
  {"prec_sqrt", CL_OPT_BOOL, "-prec-sqrt=1", "-prec-sqrt=0"},
  {"fma", CL_OPT_BOOL, "-fma=1", "-fma=0"},
  {"optimization_level", CL_OPT_INT, "-O", NULL},
  {"verbose", CL_OPT_BOOL, "-verbose", NULL},
  {"time", CL_OPT_BOOL, "-time", NULL},
};
#define NFLAGS (sizeof linker_flags / sizeof linker_flags[0])

static const char *const linker_options[] = {
  "arch", "lto", "link_time_optimization", "max_register_count", "debug", "lineinfo", "ftz",
  "prec_div", "prec_sqrt", "fma", "optimization_level", "verbose", "time", NULL
};

static const nvJitLinkInputType input_types[CL_NKINDS] = {
  NVJITLINK_INPUT_CUBIN, NVJITLINK_INPUT_PTX, NVJITLINK_INPUT_FATBIN, NVJITLINK_INPUT_LTOIR,
  NVJITLINK_INPUT_OBJECT, NVJITLINK_INPUT_LIBRARY,
};

static const char *result_name(nvJitLinkResult r)
{
  static const char *const names[] = {
    "NVJITLINK_SUCCESS", "NVJITLINK_ERROR_UNRECOGNIZED_OPTION", "NVJITLINK_ERROR_MISSING_ARCH",
    "NVJITLINK_ERROR_INVALID_INPUT", "NVJITLINK_ERROR_PTX_COMPILE",
    "NVJITLINK_ERROR_NVVM_COMPILE", "NVJITLINK_ERROR_INTERNAL", "NVJITLINK_ERROR_THREADPOOL",
    "NVJITLINK_ERROR_UNRECOGNIZED_INPUT", "NVJITLINK_ERROR_FINALIZE",
    "NVJITLINK_ERROR_NULL_INPUT", "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS",
    "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE", "NVJITLINK_ERROR_ARCH_MISMATCH",
    "NVJITLINK_ERROR_OUTDATED_LIBRARY", "NVJITLINK_ERROR_MISSING_FATBIN",
    "NVJITLINK_ERROR_UNRECOGNIZED_ARCH", "NVJITLINK_ERROR_UNSUPPORTED_ARCH",
    "NVJITLINK_ERROR_LTO_NOT_ENABLED",
  };
  return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "NVJITLINK_ERROR_UNKNOWN";
}

/* --- construction ------------------------------------------------------------ */

static Linker *check_linker(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_LINKER);
}

/* Push a copy of the list of ObjectCodes at i, each checked. */
static void push_objects(lua_State *L, int i)
{
  luaL_checktype(L, i, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, i);
  luaL_argcheck(L, n > 0, i, "a list of cuda.ObjectCode expected, got an empty table");
  lua_createtable(L, (int)n, 0);
  for (lua_Integer k = 1; k <= n; k++) {
    lua_rawgeti(L, i, k);
    if (!luaL_testudata(L, -1, CL_OBJECTCODE))
      luaL_argerror(L, i, lua_pushfstring(L, "item %I is a %s, not a cuda.ObjectCode", k,
                                          luaL_typename(L, -1)));
    cl_check_objectcode(L, -1);                   /* open */
    lua_rawseti(L, -2, k);
  }
}

/* --- the arch ------------------------------------------------------------------ */

/* nvJitLink ends the process (exit(1): "fatal : Unknown arch name
 * 'compute_3'") for -arch=sm_3, sm_09 or lto_7, and a link after an
 * earlier one may crash there instead. So the arch is refused here, with
 * a message that says what is accepted: sm_, compute_ or lto_ and a
 * number of two to four digits (no leading zero), then a, f or nothing;
 * and, where NVRTC can say (nvrtcGetSupportedArchs: this toolkit's), a
 * number it supports. The child process (below) still catches what gets
 * past this. Returns the number, or 0 for a bad name. */
static int arch_number(const char *arch)
{
  static const char *const prefixes[] = {"sm_", "compute_", "lto_"};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
    size_t n = strlen(prefixes[i]);
    if (strncmp(arch, prefixes[i], n) != 0)
      continue;
    const char *p = arch + n;
    int number = 0, digits = 0;
    if (*p < '1' || *p > '9')
      return 0;
    for (; *p >= '0' && *p <= '9' && digits < 5; p++, digits++)
      number = number * 10 + (*p - '0');
    if (digits < 2 || digits > 4)
      return 0;
    if (*p == 'a' || *p == 'f')
      p++;
    return *p == '\0' ? number : 0;
  }
  return 0;
}

/* This toolkit's architectures (nvrtcGetSupportedArchs), or 0 of them
 * where NVRTC cannot be opened: then only the name is checked. */
static int supported_archs(const int **archs)
{
  static int list[64], count = -1;
  if (count < 0) {
    int n = 0;
    count = 0;
    if (cl_toolkit_try_load(CL_LIB_NVRTC, NULL, 0) &&
        CL_NVRTC(nvrtcGetNumSupportedArchs)(&n) == NVRTC_SUCCESS && n > 0 &&
        n <= (int)(sizeof list / sizeof list[0]) &&
        CL_NVRTC(nvrtcGetSupportedArchs)(list) == NVRTC_SUCCESS)
      count = n;
  }
  *archs = list;
  return count;
}

/* Raise an argument error for an arch nvJitLink must not be given. */
static void check_arch(lua_State *L, int opti, const char *arch)
{
  const int *archs;
  int count = supported_archs(&archs), number = arch_number(arch), known = count == 0;
  for (int i = 0; i < count && !known; i++)
    known = archs[i] == number;
  if (number && known)
    return;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  lua_pushfstring(L, "option 'arch': '%s' is not ", arch);
  luaL_addvalue(&b);
  luaL_addstring(&b, number ? "an architecture this toolkit links for" :
                 "an architecture name (sm_XY, compute_XY or lto_XY, as \"sm_90\" or \"90\")");
  for (int i = 0; i < count; i++) {
    lua_pushfstring(L, "%s%d", i == 0 ? "; it links for " : ", ", archs[i]);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  luaL_argerror(L, opti, lua_tostring(L, -1));
}

/* cuda.Linker(objects [, options]) */
static int cuda_linker(lua_State *L)
{
  cl_check_nargs(L, 2);
  lua_settop(L, 2);
  cl_check_options(L, 2, linker_options);
  push_objects(L, 1);                             /* 3 */
  lua_newtable(L);                                /* 4: the nvJitLink arguments */
  const char *arch = cl_push_arch(L, 2, "cuda.Linker");
  check_arch(L, 2, arch);
  lua_pushfstring(L, "-arch=%s", arch);
  lua_rawseti(L, 4, 1);
  lua_pop(L, 1);
  cl_add_named_options(L, 2, 4, linker_flags, NFLAGS);
  Linker *k = lua_newuserdatauv(L, sizeof *k, LINK_NUV);
  memset(k, 0, sizeof *k);
  k->lto = cl_opt_boolean(L, 2, "lto", 0) || cl_opt_boolean(L, 2, "link_time_optimization", 0);
  luaL_setmetatable(L, CL_LINKER);
  lua_pushvalue(L, 3);
  lua_setiuservalue(L, -2, LINK_OBJECTS);
  lua_pushvalue(L, 4);
  lua_setiuservalue(L, -2, LINK_OPTIONS);
  return 1;
}

/* --- linking, in a child process ------------------------------------------------- */

/* What one link gives nvJitLink and what the child hands back: a userdata
 * on the stack for the whole link, whose __gc frees the buffers the parent
 * reads into, so they go on every path, errors included. */
typedef struct Input {
  const char *code;             /* an ObjectCode's string, anchored on the stack */
  size_t len;
  nvJitLinkInputType type;
  char name[INPUT_NAME_SIZE];   /* "object 2 (ptx)": nvJitLink's logs quote it */
} Input;

typedef struct Bytes {
  char *data;
  size_t len, cap;
} Bytes;

typedef struct Job {
  uint32_t nargs;
  const char **argv;            /* a userdata of its own, on the stack */
  int target;                   /* CL_CUBIN or CL_PTX */
  Bytes reply;                  /* the child's records */
  Bytes said;                   /* what it wrote on its standard output and error */
  int status;                   /* its wait status; -1 when it could not be had */
  const char *failure;          /* why the parent could not run it, or NULL */
  size_t ninputs;
  Input inputs[];
} Job;

static int job_gc(lua_State *L)
{
  Job *job = luaL_checkudata(L, 1, LINK_JOB);   /* getmetatable(x).__gc(other) reaches it too */
  free(job->reply.data);
  free(job->said.data);
  job->reply.data = job->said.data = NULL;
  return 0;
}

static Job *push_job(lua_State *L, size_t ninputs)
{
  Job *job = lua_newuserdatauv(L, sizeof *job + ninputs * sizeof job->inputs[0], 0);
  memset(job, 0, sizeof *job);
  job->ninputs = ninputs;
  job->status = -1;
  luaL_setmetatable(L, LINK_JOB);
  return job;
}

/* The child's records on its pipe: a tag byte, a size_t length, the bytes.
 * A stage ("api\0what\0") is sent before each nvJitLink call, so that the
 * parent can say where a child that died was; the result ("code api\0")
 * comes last, after the logs and the output. */
enum { REC_STAGE = 'S', REC_INFO = 'I', REC_ERROR = 'E', REC_OUTPUT = 'O', REC_RESULT = 'R' };
#define CHILD_LOST_PARENT 120   /* its exit status when the pipe broke */
#define SAID_LIMIT (64 << 10)   /* bytes of the child's own printing that are kept */

static void put_all(int fd, const void *p, size_t n)
{
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      _exit(CHILD_LOST_PARENT);
    c += w;
    n -= (size_t)w;
  }
}

static void put_record(int fd, int tag, const void *data, size_t len)
{
  unsigned char t = (unsigned char)tag;
  put_all(fd, &t, 1);
  put_all(fd, &len, sizeof len);
  put_all(fd, data, len);
}

static void put_stage(int fd, const char *api, const char *what)
{
  char buf[128];
  size_t a = strlen(api) + 1, w = strlen(what) + 1;
  if (a + w > sizeof buf)
    w = sizeof buf - a;                           /* never: api and what are short */
  memcpy(buf, api, a);
  memcpy(buf + a, what, w);
  buf[a + w - 1] = '\0';
  put_record(fd, REC_STAGE, buf, a + w);
}

static void put_log(int fd, nvJitLinkHandle h, int tag)
{
  size_t size = 0;
  int info = tag == REC_INFO;
  nvJitLinkResult r = info ? CL_NVJITLINK(nvJitLinkGetInfoLogSize)(h, &size)
                           : CL_NVJITLINK(nvJitLinkGetErrorLogSize)(h, &size);
  char *buf = r == NVJITLINK_SUCCESS && size > 1 ? malloc(size) : NULL;
  if (buf == NULL)
    return;
  r = info ? CL_NVJITLINK(nvJitLinkGetInfoLog)(h, buf) : CL_NVJITLINK(nvJitLinkGetErrorLog)(h, buf);
  if (r == NVJITLINK_SUCCESS)
    put_record(fd, tag, buf, strnlen(buf, size));
  free(buf);
}

/* The logs, then the result; the child ends here. The handle is not
 * destroyed: the process goes, with all of nvJitLink's memory. */
static _Noreturn void child_finish(int fd, nvJitLinkHandle h, nvJitLinkResult r, const char *api)
{
  char buf[64];
  int32_t code = (int32_t)r;
  size_t n = strlen(api) + 1;
  if (h) {
    put_log(fd, h, REC_INFO);
    put_log(fd, h, REC_ERROR);
  }
  memcpy(buf, &code, sizeof code);
  memcpy(buf + sizeof code, api, n);
  put_record(fd, REC_RESULT, buf, sizeof code + n);
  fflush(stdout);
  _exit(0);
}

/* exit() inside nvJitLink ("fatal : Unknown arch name"): registered last,
 * this runs first and ends the child before the handlers it inherited (the
 * parent's, LeakSanitizer's, MPI's) can run in it. */
static void exit_at_once(int status, void *arg)
{
  (void)arg;
  fflush(stdout);
  _exit(status);
}

/* The child: only nvJitLink and the pipe, then _exit. Its standard output
 * and error go to the parent (said). */
static _Noreturn void child_link(const Job *job, int out, int said)
{
  static const int deadly[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGINT, SIGPIPE};
  nvJitLinkHandle h = NULL;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (size_t i = 0; i < sizeof deadly / sizeof deadly[0]; i++)
    signal(deadly[i], SIG_DFL);                   /* a crash is a signal the parent sees */
  on_exit(exit_at_once, NULL);
  if (dup2(said, STDOUT_FILENO) < 0 || dup2(said, STDERR_FILENO) < 0)
    _exit(CHILD_LOST_PARENT);
  close(said);
  put_stage(out, "nvJitLinkCreate", "creating the link handle");
  nvJitLinkResult r = CL_NVJITLINK(nvJitLinkCreate)(&h, job->nargs, job->argv);
  if (r != NVJITLINK_SUCCESS)
    child_finish(out, h, r, "nvJitLinkCreate");
  for (size_t i = 0; i < job->ninputs; i++) {
    const Input *in = &job->inputs[i];
    char what[INPUT_NAME_SIZE + 16];
    snprintf(what, sizeof what, "adding %s", in->name);
    put_stage(out, "nvJitLinkAddData", what);
    r = CL_NVJITLINK(nvJitLinkAddData)(h, in->type, in->code, in->len, in->name);
    if (r != NVJITLINK_SUCCESS)
      child_finish(out, h, r, "nvJitLinkAddData");
  }
  put_stage(out, "nvJitLinkComplete", "completing the link");
  r = CL_NVJITLINK(nvJitLinkComplete)(h);
  if (r != NVJITLINK_SUCCESS)
    child_finish(out, h, r, "nvJitLinkComplete");
  int cubin = job->target == CL_CUBIN;
  const char *api = cubin ? "nvJitLinkGetLinkedCubin" : "nvJitLinkGetLinkedPtx";
  put_stage(out, api, cubin ? "reading the linked cubin" : "reading the linked PTX");
  size_t size = 0;
  r = cubin ? CL_NVJITLINK(nvJitLinkGetLinkedCubinSize)(h, &size)
            : CL_NVJITLINK(nvJitLinkGetLinkedPtxSize)(h, &size);
  if (r != NVJITLINK_SUCCESS)
    child_finish(out, h, r, cubin ? "nvJitLinkGetLinkedCubinSize" : "nvJitLinkGetLinkedPtxSize");
  char *buf = malloc(size ? size : 1);
  if (buf == NULL)
    child_finish(out, h, NVJITLINK_ERROR_INTERNAL, "malloc");
  r = cubin ? CL_NVJITLINK(nvJitLinkGetLinkedCubin)(h, buf) : CL_NVJITLINK(nvJitLinkGetLinkedPtx)(h, buf);
  if (r != NVJITLINK_SUCCESS)
    child_finish(out, h, r, api);
  put_record(out, REC_OUTPUT, buf, cubin ? size : strnlen(buf, size));
  child_finish(out, h, NVJITLINK_SUCCESS, api);
}

/* --- the parent's side --- */

/* Read what fd has into b (up to limit bytes kept; the rest is read and
 * dropped); 0 at its end, -1 when b cannot grow. */
static int read_into(int fd, Bytes *b, size_t limit)
{
  char chunk[1 << 16];
  ssize_t n = read(fd, chunk, sizeof chunk);
  if (n < 0)
    return errno == EINTR || errno == EAGAIN ? 1 : 0;
  if (n == 0)
    return 0;
  size_t keep = b->len >= limit ? 0 : (size_t)n < limit - b->len ? (size_t)n : limit - b->len;
  if (b->len + keep > b->cap) {
    size_t cap = b->cap ? b->cap : sizeof chunk;
    while (cap < b->len + keep)
      cap *= 2;
    char *data = realloc(b->data, cap);
    if (data == NULL)
      return -1;
    b->data = data;
    b->cap = cap;
  }
  memcpy(b->data + b->len, chunk, keep);
  b->len += keep;
  return 1;
}

/* 1 when pid is reaped (status -1 when another waiter took it: SIGCHLD
 * ignored), 0 while it runs (WNOHANG). */
static int reap(pid_t pid, int *status, int flags)
{
  for (;;) {
    pid_t r = waitpid(pid, status, flags);
    if (r == pid)
      return 1;
    if (r == 0)
      return 0;
    if (errno != EINTR) {
      *status = -1;
      return 1;
    }
  }
}

/* Read both pipes as the child writes (a large cubin never blocks it),
 * until both end, then reap it. A child that died closes its pipes; one
 * that exited while something else still holds them (a process forked
 * meanwhile by another thread) is noticed at the next quiet poll. */
static void collect_child(Job *job, pid_t pid, int out, int said)
{
  struct pollfd fds[2] = {{out, POLLIN, 0}, {said, POLLIN, 0}};
  Bytes *into[2] = {&job->reply, &job->said};
  size_t limits[2] = {SIZE_MAX, SAID_LIMIT};
  int reaped = 0;
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    int n = poll(fds, 2, reaped ? 0 : 200);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 || (n == 0 && reaped))
      break;
    if (n == 0) {
      reaped = reap(pid, &job->status, WNOHANG);
      continue;
    }
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || fds[i].revents == 0)
        continue;
      int more = read_into(fds[i].fd, into[i], limits[i]);
      if (more < 0) {
        job->failure = "out of memory for nvJitLink's output";
        kill(pid, SIGKILL);
      }
      if (more <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
      }
    }
  }
  for (int i = 0; i < 2; i++)
    if (fds[i].fd >= 0)
      close(fds[i].fd);
  if (!reaped)
    reap(pid, &job->status, 0);
}

/* Fork the child that links and collect what it hands back. Runs no Lua. */
static void run_job(Job *job)
{
  int out[2], said[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    job->failure = strerror(errno);
    return;
  }
  if (pipe2(said, O_CLOEXEC) != 0) {
    job->failure = strerror(errno);
    close(out[0]);
    close(out[1]);
    return;
  }
  fflush(stdout);                                 /* not printed twice by a child's exit */
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    close(said[0]);
    child_link(job, out[1], said[1]);
  }
  int fork_errno = errno;
  close(out[1]);
  close(said[1]);
  if (pid < 0) {
    job->failure = strerror(fork_errno);
    close(out[0]);
    close(said[0]);
    return;
  }
  collect_child(job, pid, out[0], said[0]);
}

/* The child's records, parsed: pointers into job->reply. */
typedef struct Reply {
  const char *api, *what;       /* the last stage it began */
  const char *info, *error, *output;
  size_t info_len, error_len, output_len;
  int finished;                 /* its result came */
  nvJitLinkResult result;
  const char *result_api;
} Reply;

static void parse_reply(const Bytes *b, Reply *r)
{
  memset(r, 0, sizeof *r);
  r->api = "nvJitLinkCreate";
  r->what = "starting";
  size_t pos = 0;
  while (b->len - pos > sizeof(size_t)) {
    int tag = (unsigned char)b->data[pos];
    size_t len;
    memcpy(&len, b->data + pos + 1, sizeof len);
    const char *data = b->data + pos + 1 + sizeof len;
    if (len > b->len - pos - 1 - sizeof len)
      break;                                      /* cut short: the child died writing it */
    pos += 1 + sizeof len + len;
    if (tag == REC_STAGE && len > 0 && data[len - 1] == '\0' && memchr(data, '\0', len) != data + len - 1) {
      r->api = data;
      r->what = data + strlen(data) + 1;
    } else if (tag == REC_INFO) {
      r->info = data;
      r->info_len = len;
    } else if (tag == REC_ERROR) {
      r->error = data;
      r->error_len = len;
    } else if (tag == REC_OUTPUT) {
      r->output = data;
      r->output_len = len;
    } else if (tag == REC_RESULT && len > sizeof(int32_t) && data[len - 1] == '\0') {
      int32_t code;
      memcpy(&code, data, sizeof code);
      r->result = (nvJitLinkResult)code;
      r->result_api = data + sizeof code;
      r->finished = 1;
    }
  }
}

/* 1 when the child's printing has a line "error ..." or "fatal ...": nvJitLink
 * prints "error : Multiple definition of 'k'" for a symbol two PTX or cubin
 * inputs define, and still returns NVJITLINK_SUCCESS. */
static int said_error(const Bytes *said)
{
  const char *p = said->data, *end = said->data + said->len;
  while (p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    size_t n = (size_t)((eol ? eol : end) - p);
    if (n >= 3 && memcmp(p, "@E@", 3) == 0) {
      p += 3;
      n -= 3;
    }
    if ((n >= 5 && memcmp(p, "error", 5) == 0) || (n >= 5 && memcmp(p, "fatal", 5) == 0))
      return 1;
    p = eol ? eol + 1 : end;
  }
  return 0;
}

/* What the child printed, less the "@E@" that nvJitLink's PTX compiler puts
 * before its error lines. */
static void add_said(luaL_Buffer *b, const Bytes *said)
{
  const char *p = said->data, *end = said->data + said->len;
  while (p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    const char *next = eol ? eol + 1 : end;
    if (next - p >= 3 && memcmp(p, "@E@", 3) == 0)
      p += 3;
    luaL_addlstring(b, p, (size_t)(next - p));
    p = next;
  }
}

/* Keep the logs as the linker's (index 1): the error log ends with what
 * nvJitLink printed itself. */
static void keep_logs(lua_State *L, const Reply *r, const Bytes *said)
{
  lua_pushlstring(L, r->info ? r->info : "", r->info_len);
  lua_setiuservalue(L, 1, LINK_INFO_LOG);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addlstring(&b, r->error ? r->error : "", r->error_len);
  if (r->error_len > 0 && said->len > 0 && r->error[r->error_len - 1] != '\n')
    luaL_addchar(&b, '\n');
  add_said(&b, said);
  luaL_pushresult(&b);
  lua_setiuservalue(L, 1, LINK_ERROR_LOG);
}

/* Raise a cuda.Error: message, then ": " and the error log when there is one
 * (else the result's name); err.log is the log. Extra fields at the top of
 * the stack (a table) are copied in. */
static int raise_link_error(lua_State *L, nvJitLinkResult r, const char *name, const char *api,
                            const char *message)
{
  lua_getiuservalue(L, 1, LINK_ERROR_LOG);
  const char *log = lua_tostring(L, -1);
  log = log ? log : "";
  const char *full = lua_pushfstring(L, "%s: %s", message, *log ? log : name);
  cl_push_error(L, (int)r, name, api, full);
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "log");
  return lua_error(L);
}

/* The child died before its result: a crash (a signal) or an exit inside
 * nvJitLink ("fatal : Unknown arch name"). The process goes on. */
static int raise_child_death(lua_State *L, const Job *job, const Reply *r)
{
  char message[256];
  int status = job->status;
  if (status != -1 && WIFSIGNALED(status))
    snprintf(message, sizeof message, "nvJitLink crashed (signal %d, %s) while %s", WTERMSIG(status),
             strsignal(WTERMSIG(status)), r->what);
  else if (status != -1 && WIFEXITED(status))
    snprintf(message, sizeof message, "nvJitLink ended its process (exit status %d) while %s",
             WEXITSTATUS(status), r->what);
  else
    snprintf(message, sizeof message, "nvJitLink's process ended while %s", r->what);
  lua_getiuservalue(L, 1, LINK_ERROR_LOG);
  const char *log = lua_tostring(L, -1);
  const char *full = *log ? lua_pushfstring(L, "%s: %s", message, log) : lua_pushstring(L, message);
  cl_push_error(L, NVJITLINK_ERROR_INTERNAL, "NVJITLINK_ERROR_INTERNAL", r->api, full);
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "log");
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "crashed");
  if (status != -1 && WIFSIGNALED(status)) {
    lua_pushinteger(L, WTERMSIG(status));
    lua_setfield(L, -2, "signal");
  } else if (status != -1 && WIFEXITED(status)) {
    lua_pushinteger(L, WEXITSTATUS(status));
    lua_setfield(L, -2, "exit_status");
  }
  return lua_error(L);
}

/* Fill the job's inputs from the linker's objects (each checked), their
 * code anchored in a table pushed on the stack. */
static void gather_inputs(lua_State *L, Job *job, int objects)
{
  lua_createtable(L, (int)job->ninputs, 0);
  for (size_t i = 0; i < job->ninputs; i++) {
    Input *in = &job->inputs[i];
    lua_rawgeti(L, objects, (lua_Integer)i + 1);
    cl_ObjectCode *o = cl_check_objectcode(L, -1);
    cl_objectcode_push_code(L, -1);
    in->code = lua_tolstring(L, -1, &in->len);
    in->type = input_types[o->kind];
    snprintf(in->name, sizeof in->name, "object %zu (%s)", i + 1, cl_code_kinds[o->kind]);
    lua_rawseti(L, -3, (lua_Integer)i + 1);
    lua_pop(L, 1);
  }
}

/* linker:link("cubin" | "ptx") -> cuda.ObjectCode */
static int linker_link(lua_State *L)
{
  static const char *const targets[] = {"cubin", "ptx", NULL};
  luaL_checkudata(L, 1, CL_LINKER);
  int target = luaL_checkoption(L, 2, NULL, targets) == 0 ? CL_CUBIN : CL_PTX;
  cl_check_nargs(L, 2);
  Linker *k = check_linker(L, 1);                 /* its last use is k->lto */
  if (target == CL_PTX && !k->lto)
    return luaL_error(L, "link(\"ptx\") needs the option lto = true: nvJitLink makes PTX only "
                      "from LTO-IR");
  cl_toolkit_load(L, CL_LIB_NVJITLINK);           /* here: every child inherits it loaded */
  lua_settop(L, 2);
  lua_getiuservalue(L, 1, LINK_OPTIONS);          /* 3 */
  int n = (int)lua_rawlen(L, 3);
  const char **argv = lua_newuserdatauv(L, (size_t)(n + 1) * sizeof *argv, 0);   /* 4 */
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, 3, i + 1);
    argv[i] = lua_tostring(L, -1);                /* anchored in the options list */
    lua_pop(L, 1);
  }
  if (target == CL_PTX)
    argv[n++] = "-ptx";                           /* nvJitLink's output is chosen up front */
  lua_getiuservalue(L, 1, LINK_OBJECTS);          /* 5: fixed when the linker was made */
  Job *job = push_job(L, lua_rawlen(L, 5));       /* 6 */
  job->nargs = (uint32_t)n;
  job->argv = argv;
  job->target = target;
  gather_inputs(L, job, 5);                       /* 7 */
  run_job(job);
  if (job->failure)
    return luaL_error(L, "cannot link: %s", job->failure);
  Reply r;
  parse_reply(&job->reply, &r);
  keep_logs(L, &r, &job->said);
  if (!r.finished)
    return raise_child_death(L, job, &r);
  if (r.result != NVJITLINK_SUCCESS)
    return raise_link_error(L, r.result, result_name(r.result), r.result_api, "linking failed");
  if (said_error(&job->said))
    return raise_link_error(L, NVJITLINK_ERROR_INVALID_INPUT, "NVJITLINK_ERROR_INVALID_INPUT",
                            "nvJitLink", "linking failed (nvJitLink printed an error, though it "
                            "returned NVJITLINK_SUCCESS)");
  if (r.output == NULL || cl_is_blank(r.output, r.output_len))
    return luaL_error(L, "nvJitLink linked no %s: its output is empty", target == CL_CUBIN ? "cubin" : "PTX");
  lua_pushlstring(L, r.output, r.output_len);
  cl_push_objectcode(L, -1, target);              /* checked, as every ObjectCode */
  return 1;
}

/* --- the rest of the handle ------------------------------------------------------ */

static int linker_close(lua_State *L)
{
  Linker *k = luaL_checkudata(L, 1, CL_LINKER);
  k->closed = 1;
  return 0;
}

static int linker_tostring(lua_State *L)
{
  Linker *k = luaL_checkudata(L, 1, CL_LINKER);
  if (k->closed)
    return cl_push_closed_name(L, CL_LINKER);
  lua_getiuservalue(L, 1, LINK_OBJECTS);
  lua_pushfstring(L, "cuda.Linker(%I objects)", (lua_Integer)lua_rawlen(L, -1));
  return 1;
}

/* A copy of a list user value, so callers cannot change the linker. */
static void push_list_copy(lua_State *L, int uv)
{
  lua_getiuservalue(L, 1, uv);
  lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
  lua_createtable(L, (int)n, 0);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, -2, i);
    lua_rawseti(L, -2, i);
  }
}

/* The info log, then the error log; nil before the first link. */
static void push_whole_log(lua_State *L)
{
  if (lua_getiuservalue(L, 1, LINK_INFO_LOG) == LUA_TNIL)
    return;
  lua_getiuservalue(L, 1, LINK_ERROR_LOG);
  lua_concat(L, 2);
}

static int linker_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);
  check_linker(L, 1);
  if (strcmp(key, "log") == 0)
    push_whole_log(L);
  else if (strcmp(key, "info_log") == 0)
    lua_getiuservalue(L, 1, LINK_INFO_LOG);
  else if (strcmp(key, "error_log") == 0)
    lua_getiuservalue(L, 1, LINK_ERROR_LOG);
  else if (strcmp(key, "options") == 0)
    push_list_copy(L, LINK_OPTIONS);
  else if (strcmp(key, "objects") == 0)
    push_list_copy(L, LINK_OBJECTS);
  else
    lua_pushnil(L);
  return 1;
}

void cl_open_linker(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", linker_close}, {"__close", linker_close}, {"__tostring", linker_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"link", linker_link}, {"close", linker_close}, {NULL, NULL}
  };
  cl_new_type(L, CL_LINKER, meta, methods, linker_fields);
  luaL_newmetatable(L, LINK_JOB);
  lua_pushcfunction(L, job_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  lua_pushcfunction(L, cuda_linker);
  lua_setfield(L, -2, "Linker");
}
