/* SPDX-License-Identifier: MIT */
/* file.c: reading whole files into Lua memory, for the compile cache and
 * for programs loaded from disk. Neither owns the other, so the reader
 * lives apart from both; cl_load_le (cl.h) decodes what it reads. And
 * where the files cudalua ships lie (cl_datadir). */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#include "cl.h"

#ifndef CUDALUA_PKGDATADIR
#define CUDALUA_PKGDATADIR "/usr/local/share/cudalua"
#endif

const char *cl_datadir = CUDALUA_PKGDATADIR;

/* Read the regular file at path into a new userdata pushed on the stack.
 * Returns it, or NULL (pushing nothing) with errno set; files larger than
 * limit fail with EFBIG. The userdata is allocated before the file is
 * opened, so a memory error cannot leak the descriptor. */
void *cl_push_file(lua_State *L, const char *path, size_t limit, size_t *size)
{
  struct stat st;
  if (stat(path, &st) != 0)
    return NULL;
  if (S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode)) {
    errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    return NULL;
  }
  if ((uint64_t)st.st_size > limit) {
    errno = EFBIG;
    return NULL;
  }
  size_t n = (size_t)st.st_size;
  char *buf = lua_newuserdatauv(L, n ? n : 1, 0);
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = errno;
    lua_pop(L, 1);
    errno = e;
    return NULL;
  }
  size_t got = fread(buf, 1, n, f);
  int grew = got == n && fgetc(f) != EOF;     /* changed since stat: not a stable file */
  int failed = ferror(f);
  fclose(f);
  if (got != n || grew || failed) {
    lua_pop(L, 1);
    errno = EIO;
    return NULL;
  }
  *size = n;
  return buf;
}
