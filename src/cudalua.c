/* SPDX-License-Identifier: MIT */
/* cudalua: a lua(1)-compatible interpreter with the cuda module preloaded.
 *
 *   cudalua [options] [script | name] [args...]
 *
 * A bare name that is not a file runs the bundled scripts/NAME.lua. Exit
 * status: 0 success, 1 a script error, 2 a usage error or no usable GPU. */
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "cl.h"

#ifdef HAVE_READLINE
#include <readline/readline.h>
#include <readline/history.h>
#endif

#define EXIT_SCRIPT 1
#define EXIT_USAGE  2

static const char *const progname = "cudalua";
static char lua_dir[PATH_MAX];          /* holds the cuda.* Lua modules */
static char mpi_core[PATH_MAX];         /* cuda.mpi's C part, where built or installed */

static void usage(FILE *out)
{
  fprintf(out,
    "usage: %s [options] [script | name [args...]]\n"
    "Runs a Lua 5.4 script with the 'cuda' module preloaded. A name that is not\n"
    "a file runs the bundled script of that name (see --list).\n"
    "Options:\n"
    "  -e stat     execute string 'stat'\n"
    "  -l mod      require library 'mod' into global 'mod'\n"
    "  -l g=mod    require library 'mod' into global 'g'\n"
    "  -i          enter interactive mode after running the script\n"
    "  -v          show version information\n"
    "  -E          ignore environment variables (LUA_INIT, LUA_PATH, ...)\n"
    "  -W          turn warnings on\n"
    "  --list      list the bundled scripts\n"
    "  --version   show version information\n"
    "  -h, --help  show this help\n"
    "  --          stop handling options\n"
    "  -           run standard input and stop handling options\n"
    "Exit status: 0 success, 1 script error, 2 usage error or no usable GPU.\n",
    progname);
}

/* --- where the scripts, kernels and Lua modules are ------------------------ */

static int same_file(const char *a, const char *b)
{
  char ra[PATH_MAX], rb[PATH_MAX];
  return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

/* From the build tree, use the source tree's files; installed, the
 * installed ones. No environment variable is needed either way. */
static void locate_data(void)
{
  if (same_file("/proc/self/exe", CUDALUA_BUILDDIR "/src/cudalua")) {
    cl_datadir = CUDALUA_SRCDIR;
    snprintf(lua_dir, sizeof lua_dir, "%s/lua", CUDALUA_SRCDIR);
    snprintf(mpi_core, sizeof mpi_core, "%s/src/.libs/mpi_core.so", CUDALUA_BUILDDIR);
  } else {
    cl_datadir = CUDALUA_PKGDATADIR;
    snprintf(lua_dir, sizeof lua_dir, "%s", CUDALUA_LUADIR);
    snprintf(mpi_core, sizeof mpi_core, "%s/cuda/mpi_core.so", CUDALUA_CMODDIR);
  }
}

/* --- errors ---------------------------------------------------------------- */

/* An error object may be anything, with metamethods that raise. Whatever
 * looks into one runs under lua_pcall, and an object that cannot be turned
 * into text is reported by its type alone: reporting never raises. */

static int gpu_usable(void)
{
  int count = 0;
  return cl_driver_try_load(NULL, 0) && CL_CALL(cuDeviceGetCount, (&count)) == CUDA_SUCCESS
         && count > 0;
}

/* The error the C core raises when there is no driver or no device: a
 * cuda.Error (by its registered metatable) named CUDALUA_UNAVAILABLE, read
 * without metamethods, while the driver indeed offers no GPU. A script
 * cannot fake the condition with a table field. */
static int is_no_gpu(lua_State *L, int i)
{
  if (!lua_istable(L, i) || !lua_getmetatable(L, i))
    return 0;
  luaL_getmetatable(L, CL_ERROR);
  int is_cuda_error = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  if (!is_cuda_error)
    return 0;
  lua_pushliteral(L, "name");
  int named = lua_rawget(L, i) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "CUDALUA_UNAVAILABLE") == 0;
  lua_pop(L, 1);
  return named && !gpu_usable();
}

/* Push the message of a "no usable GPU" error at index 1; 0 for others. */
static int push_no_gpu_message(lua_State *L)
{
  if (!is_no_gpu(L, 1))
    return 0;
  lua_pushliteral(L, "message");
  if (lua_rawget(L, 1) == LUA_TSTRING)
    return 1;
  lua_pop(L, 1);
  return 0;
}

/* Push any value as text, the way lua(1) shows error objects; raises when
 * a __tostring metamethod does, or returns no string. */
static void push_object_text(lua_State *L, int i)
{
  if (lua_type(L, i) == LUA_TSTRING || lua_type(L, i) == LUA_TNUMBER) {
    lua_pushvalue(L, i);
    lua_tostring(L, -1);
  } else if (luaL_getmetafield(L, i, "__tostring") != LUA_TNIL) {
    lua_pop(L, 1);
    luaL_tolstring(L, i, NULL);
  } else
    lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, i));
}

/* Called protected with the error object: returns its text and whether it
 * means "no usable GPU" (then the text is its message alone). */
static int describe_error(lua_State *L)
{
  int no_gpu = push_no_gpu_message(L);
  if (!no_gpu)
    push_object_text(L, 1);
  lua_pushboolean(L, no_gpu);
  return 2;
}

/* Push the text of the error object at i; *no_gpu tells whether it means
 * "no usable GPU". Raises only when memory runs out. */
static void push_error_text(lua_State *L, int i, int *no_gpu)
{
  i = lua_absindex(L, i);
  lua_pushcfunction(L, describe_error);
  lua_pushvalue(L, i);
  *no_gpu = 0;
  if (lua_pcall(L, 1, 2, 0) == LUA_OK) {
    *no_gpu = lua_toboolean(L, -1);
    lua_pop(L, 1);
  } else {
    lua_pop(L, 1);
    lua_pushfstring(L, "(error object is a %s value, which could not be converted to a string)",
                    luaL_typename(L, i));
  }
}

/* Message handler: a traceback, except for "no driver / no device", which
 * is reported as one sentence. */
static int message_handler(lua_State *L)
{
  int no_gpu;
  push_error_text(L, 1, &no_gpu);
  if (no_gpu)
    lua_settop(L, 1);
  else
    luaL_traceback(L, L, lua_tostring(L, -1), 1);
  return 1;
}

/* Called protected with the error object: prints it, returns the exit
 * status it deserves. */
static int print_error(lua_State *L)
{
  int no_gpu;
  push_error_text(L, 1, &no_gpu);
  fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
  lua_pushinteger(L, no_gpu ? EXIT_USAGE : EXIT_SCRIPT);
  return 1;
}

/* Report the error on the top of the stack (and pop it); the exit status
 * it deserves. */
static int report(lua_State *L)
{
  int status = EXIT_SCRIPT;
  lua_pushcfunction(L, print_error);
  lua_insert(L, -2);
  if (lua_pcall(L, 1, 1, 0) == LUA_OK)
    status = (int)lua_tointeger(L, -1);
  else
    fprintf(stderr, "%s: an error occurred, and there was no memory left to report it\n", progname);
  lua_pop(L, 1);
  return status;
}

/* --- Ctrl-C ------------------------------------------------------------------ */

/* As in lua(1): SIGINT while a chunk runs sets a hook that raises
 * "interrupted!" at the next Lua instruction, so the chunk unwinds like any
 * error (its <close> handlers run, then lua_close's finalizers give the
 * driver's memory back) and the exit status is 1. The handler puts the
 * default action back first: a second Ctrl-C, while stuck in one long C
 * call (a synchronize), ends the process at once. Between chunks (at the
 * interactive prompt) Ctrl-C has its default action too. */
static lua_State *volatile interrupted_state;

static void raise_interrupted(lua_State *L, lua_Debug *ar)
{
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

static void set_sigint_action(void (*action)(int))
{
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = action;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
}

/* lua_sethook is the one Lua call documented as safe in a signal handler. */
static void on_sigint(int sig)
{
  (void)sig;
  set_sigint_action(SIG_DFL);
  lua_sethook(interrupted_state, raise_interrupted,
              LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
}

static int docall(lua_State *L, int nargs, int nresults)
{
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, message_handler);
  lua_insert(L, base);
  interrupted_state = L;
  set_sigint_action(on_sigint);
  int status = lua_pcall(L, nargs, nresults, base);
  set_sigint_action(SIG_DFL);
  if (lua_gethook(L) == raise_interrupted)   /* Ctrl-C just as the chunk ended */
    lua_sethook(L, NULL, 0, 0);
  lua_remove(L, base);
  return status;
}

/* --- running things --------------------------------------------------------- */

static int run_chunk(lua_State *L, int status)
{
  if (status == LUA_OK)
    status = docall(L, 0, 0);
  return status == LUA_OK ? 0 : report(L);
}

static int run_string(lua_State *L, const char *code, const char *name)
{
  return run_chunk(L, luaL_loadbuffer(L, code, strlen(code), name));
}

/* -l mod or -l g=mod */
static int run_require(lua_State *L, const char *spec)
{
  const char *eq = strchr(spec, '=');
  const char *mod = eq ? eq + 1 : spec;
  lua_getglobal(L, "require");
  lua_pushstring(L, mod);
  if (docall(L, 1, 1) != LUA_OK)
    return report(L);
  if (eq)
    lua_pushlstring(L, spec, (size_t)(eq - spec));
  else
    lua_pushstring(L, mod);
  lua_insert(L, -2);
  lua_setglobal(L, lua_tostring(L, -2));
  lua_pop(L, 1);
  return 0;
}

/* A readable path that is not a folder: a folder named like a bundled
 * script (the source tree's bench/ for `cudalua bench`) must not hide it. */
static int file_exists(const char *path)
{
  struct stat st;
  return access(path, R_OK) == 0 && !(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
}

/* The file to run for a script argument: itself, or a bundled script. */
static const char *resolve_script(const char *name, char *buf, size_t size)
{
  if (strcmp(name, "-") == 0 || file_exists(name) || strchr(name, '/'))
    return name;
  snprintf(buf, size, "%s/scripts/%s.lua", cl_datadir, name);
  return file_exists(buf) ? buf : NULL;
}

static int push_script_args(lua_State *L, int nargs)
{
  luaL_checkstack(L, nargs + 3, "too many arguments to script");
  lua_getglobal(L, "arg");
  for (int i = 1; i <= nargs; i++)
    lua_rawgeti(L, -i, i);
  lua_remove(L, -nargs - 1);
  return nargs;
}

static int run_script(lua_State *L, const char *path, int nargs)
{
  int status = luaL_loadfile(L, strcmp(path, "-") == 0 ? NULL : path);
  if (status != LUA_OK)
    return report(L);
  push_script_args(L, nargs);
  status = docall(L, nargs, 0);
  return status == LUA_OK ? 0 : report(L);
}

/* --- interactive mode -------------------------------------------------------- */

/* A line of standard input without its newline, malloc'ed; NULL at the end. */
static char *read_stdin_line(const char *prompt)
{
  char *line = NULL;
  size_t capacity = 0;
  fputs(prompt, stdout);
  fflush(stdout);
  ssize_t length = getline(&line, &capacity, stdin);
  if (length < 0) {
    free(line);
    return NULL;
  }
  if (length > 0 && line[length - 1] == '\n')
    line[length - 1] = '\0';
  return line;
}

#ifdef HAVE_READLINE
static char *read_terminal_line(const char *prompt)
{
  char *line = readline(prompt);
  if (line && line[0])
    add_history(line);
  return line;
}
#endif

/* Reading a line: GNU readline (editing, history) on a terminal when
 * configure found it; otherwise plain reads of any length. */
static char *read_line(const char *prompt)
{
#ifdef HAVE_READLINE
  if (isatty(STDIN_FILENO))
    return read_terminal_line(prompt);
#endif
  return read_stdin_line(prompt);
}

/* Push the next line of input; 0 at the end of input. */
static int push_line(lua_State *L, const char *prompt)
{
  char *line = read_line(prompt);
  if (line == NULL)
    return 0;
  lua_pushstring(L, line);
  free(line);
  return 1;
}

/* A syntax error at the end of the input: the chunk needs more lines. */
static int incomplete(lua_State *L, int status)
{
  size_t len;
  const char *msg = lua_tolstring(L, -1, &len);
  return status == LUA_ERRSYNTAX && len >= 5 && strcmp(msg + len - 5, "<eof>") == 0;
}

static int load_text(lua_State *L, const char *text)
{
  return luaL_loadbuffer(L, text, strlen(text), "=stdin");
}

/* The line on the top of the stack as an expression ("=expr" or a bare
 * one), whose values are printed: replaced by the function on success. */
static int load_expression(lua_State *L)
{
  const char *line = lua_tostring(L, -1);
  lua_pushfstring(L, "return %s", line + (line[0] == '='));
  int status = load_text(L, lua_tostring(L, -1));
  if (status == LUA_OK) {
    lua_replace(L, -3);
    lua_pop(L, 1);          /* the "return" text */
  } else
    lua_pop(L, 2);          /* the "return" text and the error */
  return status;
}

/* The line on the top of the stack as statements, reading more lines while
 * the chunk is incomplete: replaced by the function, or by the error. */
static int load_statements(lua_State *L)
{
  for (;;) {
    int status = load_text(L, lua_tostring(L, -1));
    if (!incomplete(L, status) || !push_line(L, ">> ")) {
      lua_remove(L, -2);
      return status;
    }
    lua_remove(L, -2);                   /* the "<eof>" error */
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
}

/* Read and compile one chunk; pushes the function (or the error) and
 * returns the status; -1 at the end of input. */
static int read_chunk(lua_State *L)
{
  if (!push_line(L, "> "))
    return -1;
  return load_expression(L) == LUA_OK ? LUA_OK : load_statements(L);
}

static void print_results(lua_State *L, int n)
{
  if (n == 0)
    return;
  luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
  lua_getglobal(L, "print");
  lua_insert(L, -n - 1);
  if (docall(L, n, 0) != LUA_OK)   /* Ctrl-C stops a slow __tostring too */
    report(L);
}

/* `cuda` is a global in interactive sessions, unless the script took it. */
static void preload_cuda_global(lua_State *L)
{
  if (lua_getglobal(L, "cuda") == LUA_TNIL)
    run_require(L, "cuda");
  lua_pop(L, 1);
}

static void repl(lua_State *L)
{
  preload_cuda_global(L);
  for (;;) {
    int base = lua_gettop(L);
    int status = read_chunk(L);
    if (status < 0)
      break;
    if (status == LUA_OK)
      status = docall(L, 0, LUA_MULTRET);
    if (status == LUA_OK)
      print_results(L, lua_gettop(L) - base);
    else
      report(L);
    lua_settop(L, base);
  }
  fputs("\n", stdout);
}

/* --- --version and --list ---------------------------------------------------- */

static void print_version(lua_State *L)
{
  char why[512];
  printf("cudalua %s (%s", PACKAGE_VERSION, LUA_RELEASE);
  if (cl_driver_try_load(why, sizeof why) || strstr(why, "no CUDA device")) {
    lua_getglobal(L, "require");
    lua_pushliteral(L, "cuda");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "driver_version");
    lua_call(L, 0, 2);
    if (lua_isinteger(L, -2))
      printf("; NVIDIA driver for CUDA %d.%d", (int)lua_tointeger(L, -2), (int)lua_tointeger(L, -1));
    lua_pop(L, 3);
  } else
    printf("; %s", why);
  printf(")\n");
}

static int compare_names(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The description of a script is its first line, a Lua comment. */
static void print_description(const char *dir, const char *file)
{
  char path[2 * PATH_MAX], line[256] = "";
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "r");
  if (f) {
    if (!fgets(line, sizeof line, f))
      line[0] = '\0';
    fclose(f);
  }
  line[strcspn(line, "\n")] = '\0';
  const char *text = line;
  while (*text == '-' || *text == ' ')
    text++;
  printf("  %-22.*s %s\n", (int)(strlen(file) - 4), file, text);
}

static int list_scripts(void)
{
  char dir[PATH_MAX];
  char *names[256];
  size_t n = 0;
  snprintf(dir, sizeof dir, "%s/scripts", cl_datadir);
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "%s: no bundled scripts at %s\n", progname, dir);
    return EXIT_USAGE;
  }
  for (struct dirent *e; (e = readdir(d)) && n < 256;) {
    size_t len = strlen(e->d_name);
    if (len > 4 && strcmp(e->d_name + len - 4, ".lua") == 0)
      names[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, n, sizeof names[0], compare_names);
  printf("Bundled scripts (run as: %s NAME [options]; NAME --help for details):\n", progname);
  for (size_t k = 0; k < n; k++) {
    print_description(dir, names[k]);
    free(names[k]);
  }
  return 0;
}

/* --- the command line --------------------------------------------------------- */

typedef struct Options {
  int interactive, version, ignore_env, warnings, list, help;
  int script;              /* index of the script in argv, 0 for none */
  int first_action;        /* index of the first -e / -l */
} Options;

/* Returns 0, or EXIT_USAGE for a bad option (after saying why). */
static int parse_options(int argc, char **argv, Options *o)
{
  memset(o, 0, sizeof *o);
  int i;
  for (i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || strcmp(a, "-") == 0)
      break;
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (strcmp(a, "--list") == 0) o->list = 1;
    else if (strcmp(a, "--version") == 0 || strcmp(a, "-v") == 0) o->version = 1;
    else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) o->help = 1;
    else if (strcmp(a, "-i") == 0) o->interactive = o->version = 1;
    else if (strcmp(a, "-E") == 0) o->ignore_env = 1;
    else if (strcmp(a, "-W") == 0) o->warnings = 1;
    else if ((a[1] == 'e' || a[1] == 'l') && a[2] == '\0') {
      if (++i >= argc) {
        fprintf(stderr, "%s: '%s' needs an argument\n", progname, a);
        return EXIT_USAGE;
      }
      if (!o->first_action)
        o->first_action = i - 1;
    } else if ((a[1] == 'e' || a[1] == 'l') && a[2] != '\0') {
      if (!o->first_action)
        o->first_action = i;
    } else {
      fprintf(stderr, "%s: unrecognized option '%s'\n", progname, a);
      usage(stderr);
      return EXIT_USAGE;
    }
  }
  o->script = i < argc ? i : 0;
  return 0;
}

/* arg[0] is the script, arg[-k] the interpreter and options, arg[1..] the
 * script's arguments; with no script, arg[0] is the interpreter. */
static void create_arg_table(lua_State *L, int argc, char **argv, int script)
{
  lua_createtable(L, argc - script, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

/* Run -e and -l in the order given. */
static int run_actions(lua_State *L, int argc, char **argv, const Options *o)
{
  int end = o->script ? o->script : argc;
  for (int i = o->first_action; i && i < end; i++) {
    const char *a = argv[i];
    if (a[0] != '-' || (a[1] != 'e' && a[1] != 'l'))
      continue;
    const char *value = a[2] ? a + 2 : argv[++i];
    int rc = a[1] == 'e' ? run_string(L, value, "=(command line)") : run_require(L, value);
    if (rc)
      return rc;
  }
  return 0;
}

/* cuda.mpi's C part is a module of its own (it links MPI, which the core
 * does not): loaded from where this cudalua was built or installed,
 * whatever package.cpath says. */
static int load_mpi_core(lua_State *L)
{
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loadlib");
  lua_pushstring(L, mpi_core);
  lua_pushliteral(L, "luaopen_cuda_mpi_core");
  lua_call(L, 2, 2);
  if (lua_isnil(L, -2))
    return luaL_error(L, "%s", lua_tostring(L, -1));
  lua_pop(L, 1);
  lua_pushvalue(L, 1);
  lua_call(L, 1, 1);
  return 1;
}

/* The bundled Lua modules come first on package.path; "cuda" is preloaded,
 * and cuda.mpi's C part where it was built. */
static void setup_paths(lua_State *L)
{
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  const char *path = lua_tostring(L, -1);
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", lua_dir, lua_dir, path);
  lua_setfield(L, -3, "path");
  lua_pop(L, 1);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_cuda);
  lua_setfield(L, -2, "cuda");
  if (access(mpi_core, R_OK) == 0) {
    lua_pushcfunction(L, load_mpi_core);
    lua_setfield(L, -2, "cuda.mpi_core");
  }
  lua_pop(L, 2);
}

static int run_init(lua_State *L)
{
  const char *name = "=LUA_INIT_5_4";
  const char *init = getenv(name + 1);
  if (!init) {
    name = "=LUA_INIT";
    init = getenv(name + 1);
  }
  if (!init)
    return 0;
  if (init[0] == '@')
    return run_chunk(L, luaL_loadfile(L, init + 1));
  return run_string(L, init, name);
}

static int pmain(lua_State *L)
{
  int argc = (int)lua_tointeger(L, 1);
  char **argv = lua_touserdata(L, 2);
  Options o;
  int rc = parse_options(argc, argv, &o);
  lua_Integer *result = lua_touserdata(L, 3);
  *result = rc;
  if (rc)
    return 0;
  if (o.help) {
    usage(stdout);
    return 0;
  }
  if (o.ignore_env) {
    lua_pushboolean(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
  }
  luaL_openlibs(L);
  setup_paths(L);
  if (o.warnings)
    lua_warning(L, "@on", 0);
  if (o.list) {
    *result = list_scripts();
    return 0;
  }
  create_arg_table(L, argc, argv, o.script);
  if (o.version)
    print_version(L);
  if (!o.ignore_env && (rc = run_init(L)) != 0)
    goto done;
  if ((rc = run_actions(L, argc, argv, &o)) != 0)
    goto done;
  if (o.script) {
    char buf[PATH_MAX];
    const char *path = resolve_script(argv[o.script], buf, sizeof buf);
    if (!path) {
      fprintf(stderr, "%s: cannot open %s: no such file, and no bundled script of "
              "that name (see %s --list)\n", progname, argv[o.script], progname);
      rc = EXIT_USAGE;
      goto done;
    }
    /* arg[0] names the file that runs, so a script finds what lies beside it */
    lua_getglobal(L, "arg");
    lua_pushstring(L, path);
    lua_rawseti(L, -2, 0);
    lua_pop(L, 1);
    if ((rc = run_script(L, path, argc - o.script - 1)) != 0)
      goto done;
  }
  if (o.interactive)
    repl(L);
  else if (!o.script && !o.first_action && !o.version) {
    if (isatty(0)) {
      print_version(L);
      repl(L);
    } else
      rc = run_script(L, "-", 0);
  }
done:
  *result = rc;
  return 0;
}

int main(int argc, char **argv)
{
  lua_Integer result = 0;
  locate_data();
  lua_State *L = luaL_newstate();
  if (!L) {
    fprintf(stderr, "%s: cannot create the Lua state: not enough memory\n", progname);
    return EXIT_SCRIPT;
  }
  lua_pushcfunction(L, pmain);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  lua_pushlightuserdata(L, &result);
  if (lua_pcall(L, 3, 0, 0) != LUA_OK)
    result = report(L);
  lua_close(L);
  return (int)result;
}
