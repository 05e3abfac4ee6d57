/* cudalua: a lua(1)-compatible interpreter with the cuda module preloaded.
 *
 *   cudalua [options] [script | name] [args...]
 *
 * A bare name that is not a file runs the bundled scripts/NAME.lua. Exit
 * status: 0 success, 1 a script error, 2 a usage error or no usable GPU. */
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include "cl.h"

#define EXIT_SCRIPT 1
#define EXIT_USAGE  2

static const char *const progname = "cudalua";
static char lua_dir[PATH_MAX];          /* holds the cuda.* Lua modules */

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
  } else {
    cl_datadir = CUDALUA_PKGDATADIR;
    snprintf(lua_dir, sizeof lua_dir, "%s", CUDALUA_LUADIR);
  }
}

/* --- errors ---------------------------------------------------------------- */

static int is_unavailable(lua_State *L, int i)
{
  if (!lua_istable(L, i))
    return 0;
  lua_getfield(L, i, "unavailable");
  int yes = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return yes;
}

/* Message handler: a traceback, except for "no driver / no device", which
 * is reported as one sentence. */
static int message_handler(lua_State *L)
{
  if (is_unavailable(L, 1))
    return 1;
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      msg = lua_tostring(L, -1);
    else
      msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

/* Report the error on the top of the stack; the exit status it deserves. */
static int report(lua_State *L)
{
  if (is_unavailable(L, -1)) {
    lua_getfield(L, -1, "message");
    fprintf(stderr, "%s: %s\n", progname, lua_tostring(L, -1));
    lua_pop(L, 2);
    return EXIT_USAGE;
  }
  const char *msg = lua_tostring(L, -1);
  fprintf(stderr, "%s: %s\n", progname, msg ? msg : "(error object is not a string)");
  lua_pop(L, 1);
  return EXIT_SCRIPT;
}

static int docall(lua_State *L, int nargs, int nresults)
{
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, message_handler);
  lua_insert(L, base);
  int status = lua_pcall(L, nargs, nresults, base);
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

static int file_exists(const char *path)
{
  return access(path, R_OK) == 0;
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

static int incomplete(lua_State *L, int status)
{
  size_t len;
  const char *msg;
  if (status != LUA_ERRSYNTAX)
    return 0;
  msg = lua_tolstring(L, -1, &len);
  return len >= 5 && strcmp(msg + len - 5, "<eof>") == 0;
}

/* Compile a line as an expression ("return ...") first, then as statements,
 * reading more lines while the chunk is incomplete. */
static int load_line(lua_State *L, const char *line)
{
  lua_pushfstring(L, "return %s", line);
  if (luaL_loadbuffer(L, lua_tostring(L, -1), lua_rawlen(L, -1), "=stdin") == LUA_OK) {
    lua_remove(L, -2);
    return LUA_OK;
  }
  lua_pop(L, 2);
  luaL_Buffer b;
  char more[4096];
  lua_pushstring(L, line);
  for (;;) {
    int status = luaL_loadbuffer(L, lua_tostring(L, -1), lua_rawlen(L, -1), "=stdin");
    if (!incomplete(L, status)) {
      lua_remove(L, -2);
      return status;
    }
    lua_pop(L, 1);
    fputs(">> ", stdout);
    fflush(stdout);
    if (!fgets(more, sizeof more, stdin))
      return luaL_loadbuffer(L, lua_tostring(L, -1), lua_rawlen(L, -1), "=stdin");
    luaL_buffinit(L, &b);
    luaL_addvalue(&b);
    luaL_addstring(&b, "\n");
    luaL_addstring(&b, more);
    luaL_pushresult(&b);
  }
}

static void print_results(lua_State *L, int n)
{
  if (n == 0)
    return;
  lua_getglobal(L, "print");
  lua_insert(L, -n - 1);
  if (lua_pcall(L, n, 0, 0) != LUA_OK)
    report(L);
}

static void repl(lua_State *L)
{
  char line[4096];
  for (;;) {
    fputs("> ", stdout);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
      break;
    line[strcspn(line, "\n")] = '\0';
    int base = lua_gettop(L);
    int status = load_line(L, line);
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
      if (++i >= argc || argv[i][0] == '\0') {
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

/* The bundled Lua modules come first on package.path; "cuda" is preloaded. */
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
