/* term.c: the terminal, for output that adapts to it (progress bars, the
 * timeline's Gantt chart).
 *
 *   cuda.isatty(file_or_fd)          -- true when it is a terminal
 *   cuda.terminal_columns([file])    -- the width to draw in (default io.stdout)
 *
 * In C because Lua has no isatty, and asking a shell (`test -t 2`) costs a
 * process and cannot see the window size. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
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

void cl_open_term(lua_State *L)
{
  static const luaL_Reg functions[] = {
    {"isatty", term_isatty},
    {"terminal_columns", term_columns},
    {NULL, NULL}
  };
  luaL_setfuncs(L, functions, 0);
}
