/* SPDX-License-Identifier: MIT */
/* term.c: the host OS, where Lua's own io and os libraries stop: the
 * terminal, for output that adapts to it (progress bars, the timeline's
 * Gantt chart), and what a path names, for output files written safely.
 *
 *   cuda.isatty(file_or_fd)          -- true when it is a terminal
 *   cuda.terminal_columns([file])    -- the width to draw in (default io.stdout)
 *   cuda.file_kind(path)             -- "file", "directory", "fifo", ..., writable
 *   cuda.real_path(path)             -- absolute, symlinks resolved
 *
 * In C because Lua has no isatty, stat or realpath, and asking a shell
 * (`test -t 2`, `test -p`) costs a process and cannot see the window size.
 * Opening a path to find out is no substitute: opening a FIFO blocks. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cl.h"

#define DEFAULT_COLUMNS 80

/* The descriptor of argument i: an open Lua file or a descriptor number. */
static int check_fd(lua_State *L, int i)
{
  luaL_Stream *stream = luaL_testudata(L, i, LUA_FILEHANDLE);
  if (stream) {
    if (stream->closef == NULL)
      luaL_argerror(L, i, "attempt to use a closed file");
    return fileno(stream->f);
  }
  if (!lua_isinteger(L, i))
    luaL_typeerror(L, i, "file or file descriptor");
  lua_Integer fd = lua_tointeger(L, i);
  luaL_argcheck(L, fd >= 0 && fd <= 65535, i, "file descriptor out of range");
  return (int)fd;
}

static int term_isatty(lua_State *L)
{
  lua_pushboolean(L, isatty(check_fd(L, 1)));
  return 1;
}

/* COLUMNS, when it is a positive number; else the window's width, when
 * the file is a terminal that knows it; else 80. */
static int term_columns(lua_State *L)
{
  int fd = lua_isnoneornil(L, 1) ? STDOUT_FILENO : check_fd(L, 1);
  const char *env = getenv("COLUMNS");
  char *end;
  long columns = env ? strtol(env, &end, 10) : 0;
  if (env && *end == '\0' && columns > 0 && columns <= 100000) {
    lua_pushinteger(L, columns);
    return 1;
  }
  struct winsize size;
  if (isatty(fd) && ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0)
    lua_pushinteger(L, size.ws_col);
  else
    lua_pushinteger(L, DEFAULT_COLUMNS);
  return 1;
}

static const char *kind_name(mode_t mode)
{
  if (S_ISREG(mode)) return "file";
  if (S_ISDIR(mode)) return "directory";
  if (S_ISFIFO(mode)) return "fifo";
  if (S_ISCHR(mode)) return "character device";
  if (S_ISBLK(mode)) return "block device";
  if (S_ISSOCK(mode)) return "socket";
  return "other";
}

/* What path names, following symlinks, and whether this process may write
 * it: "absent", false when nothing is there (a dangling symlink included);
 * nil, message, errno when it cannot be looked at. */
static int file_kind(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno != ENOENT)
      return luaL_fileresult(L, 0, path);
    lua_pushliteral(L, "absent");
    lua_pushboolean(L, 0);
    return 2;
  }
  lua_pushstring(L, kind_name(st.st_mode));
  lua_pushboolean(L, access(path, W_OK) == 0);
  return 2;
}

/* The absolute path, with every symlink, "." and ".." resolved; nil,
 * message, errno when some part of it does not exist. */
static int real_path(lua_State *L)
{
  const char *path = luaL_checkstring(L, 1);
  char resolved[PATH_MAX];
  if (!realpath(path, resolved))
    return luaL_fileresult(L, 0, path);
  lua_pushstring(L, resolved);
  return 1;
}

void cl_open_term(lua_State *L)
{
  static const luaL_Reg functions[] = {
    {"isatty", term_isatty},
    {"terminal_columns", term_columns},
    {"file_kind", file_kind},
    {"real_path", real_path},
    {NULL, NULL}
  };
  luaL_setfuncs(L, functions, 0);
}
