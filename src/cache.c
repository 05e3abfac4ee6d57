/* SPDX-License-Identifier: MIT */
/* cache.c: the program cache, on disk: cuda.ProgramCache and the automatic
 * compile cache, one machinery for both.
 *
 * A cache is a directory with one file per key, named by the SHA-256 of the
 * key in hex. program.c makes keys (cuda.program_cache_key) from
 * everything that determines a compile's output; a ProgramCache takes any
 * string. The automatic cache, used by prog:compile unless given one, is a
 * ProgramCache whose directory comes from the environment:
 *
 *     CUDALUA_CACHE=off          no cache at all
 *     CUDALUA_CACHE=DIR          DIR
 *     XDG_CACHE_HOME=DIR         DIR/cudalua
 *     otherwise                  $HOME/.cache/cudalua
 *
 * A file is a 96-byte header followed by the payload (the code, the compile
 * log, then the name expressions as "expr\0lowered\0" pairs):
 *
 *     0   "CLCACHE3"             magic and format version
 *     8   u64 code length        little-endian
 *     16  u64 log length
 *     24  u64 names length
 *     32  u32 kind               index into cl_code_kinds
 *     36  u32 0                  reserved
 *     40  sha256(key)[32]        the key the entry was stored under
 *     72  u64 checksum           XXH64 (seed 0) of the whole file, these
 *                                8 bytes read as zero: header and payload
 *     80  16 zero bytes          reserved
 *
 * The key is a cryptographic hash (nettle's SHA-256, over a few kilobytes);
 * the entry, up to megabytes, is checked with XXH64, which finds
 * corruption at memory speed: a hit costs a file read. A truncated,
 * corrupted or misplaced file fails these checks, and so does code that
 * fails the checks cuda.ObjectCode.from_data applies (cl_code_problem): it
 * reaches the driver, which reads as far as the code says. Such a file
 * counts as corrupt, is removed, and is a miss. An entry of the previous
 * format ("CLCACHE2", whose checksum left the header out) is a plain miss,
 * replaced by the next store. Writes go to a temporary file in the same
 * directory, renamed over the entry, so readers never see half an entry. A
 * cache that cannot be read or written never fails a compile: the failure
 * is counted and the compile goes on.
 *
 * Stores and hits set an entry's modification time, so it records the last
 * use: past max_size, a store removes the least recently used entries first.
 * The time is set explicitly, at the clock's full resolution: the kernel
 * stamps files from a coarse clock (a tick of 1-4 ms), so a store and a hit
 * within one tick would tie, and which entry goes would depend on the
 * directory's hash order.
 *
 * The automatic key does not cover headers pulled in with #include from
 * include_path: change a define, or set CUDALUA_CACHE=off, while editing
 * headers. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <nettle/sha2.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cl.h"

#define HEADER_SIZE 96
#define MAGIC "CLCACHE3"
#define OLD_MAGIC "CLCACHE2"
#define SUM_AT 72                       /* the checksum's 8 bytes in the header */
#define ENTRY_LIMIT ((size_t)1 << 30)   /* larger files are not ours */
#define SUFFIX ".entry"

/* --- keys -------------------------------------------------------------------- */

void cl_sha256(const void *data, size_t len, unsigned char out[CL_HASH_SIZE])
{
  struct sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, len, data);
  sha256_digest(&ctx, CL_HASH_SIZE, out);
}

void cl_hex(const unsigned char *bytes, size_t n, char *out)
{
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * n] = '\0';
}

/* --- where entries live ---------------------------------------------------------- */

static cl_ProgramCache automatic;

/* The automatic cache's directory, from the environment, read at each use
 * (a script may change it); NULL when the cache is off or has no home. */
cl_ProgramCache *cl_default_cache(void)
{
  const char *env = getenv("CUDALUA_CACHE");
  char *dir = automatic.dir;
  size_t size = sizeof automatic.dir;
  int n;
  if (env && strcmp(env, "off") == 0)
    return NULL;
  if (env && *env)
    n = snprintf(dir, size, "%s", env);
  else if ((env = getenv("XDG_CACHE_HOME")) && env[0] == '/')   /* XDG: absolute only */
    n = snprintf(dir, size, "%s/cudalua", env);
  else if ((env = getenv("HOME")) && *env)
    n = snprintf(dir, size, "%s/.cache/cudalua", env);
  else
    return NULL;
  return n > 0 && (size_t)n < size ? &automatic : NULL;
}

static int entry_path(char *path, size_t size, const char *dir,
                      const unsigned char digest[CL_HASH_SIZE])
{
  char hex[2 * CL_HASH_SIZE + 1];
  cl_hex(digest, CL_HASH_SIZE, hex);
  int n = snprintf(path, size, "%s/%s" SUFFIX, dir, hex);
  return n > 0 && (size_t)n < size;
}

/* mkdir -p: 1 when dir exists (or was made) as a directory. */
static int make_dirs(const char *dir)
{
  char p[CL_CACHE_PATH_MAX];
  struct stat st;
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
    return 0;
  for (char *s = p + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
      return 0;
    *s = '/';
  }
  if (mkdir(p, 0700) != 0 && errno != EEXIST)
    return 0;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* --- use times, for eviction ----------------------------------------------------- */

/* <0, 0 or >0 as a is before, at or after b. */
static int compare_times(const struct timespec *a, const struct timespec *b)
{
  if (a->tv_sec != b->tv_sec)
    return a->tv_sec < b->tv_sec ? -1 : 1;
  return (a->tv_nsec > b->tv_nsec) - (a->tv_nsec < b->tv_nsec);
}

/* Records a use of the entry at path: its times become now, to the
 * nanosecond, and later than any use this process recorded before. */
static void mark_used(const char *path)
{
  static struct timespec last;
  struct timespec now[2];
  clock_gettime(CLOCK_REALTIME, &now[0]);
  if (compare_times(&now[0], &last) <= 0) {
    now[0] = last;
    if (++now[0].tv_nsec == 1000000000L) {
      now[0].tv_sec++;
      now[0].tv_nsec = 0;
    }
  }
  last = now[1] = now[0];
  /* Only the owner may set a given time; a writer of another's entry (a
   * shared, group-writable cache) may still set "now", to the tick. */
  if (utimensat(AT_FDCWD, path, now, 0) != 0)
    utimensat(AT_FDCWD, path, NULL, 0);
}

/* --- reading ----------------------------------------------------------------- */

/* The checksum of an entry: XXH64 of its header, with the checksum's own
 * bytes read as zero, and of its payload (given in up to three parts). */
static uint64_t entry_sum(const unsigned char header[HEADER_SIZE], const void *const part[3],
                          const size_t len[3])
{
  static const unsigned char zero[8];
  XXH64_state_t sum;
  XXH64_reset(&sum, 0);
  XXH64_update(&sum, header, SUM_AT);
  XXH64_update(&sum, zero, sizeof zero);
  XXH64_update(&sum, header + SUM_AT + 8, HEADER_SIZE - SUM_AT - 8);
  for (int i = 0; i < 3; i++)
    XXH64_update(&sum, part[i], len[i]);
  return XXH64_digest(&sum);
}

/* 1 when buf (size bytes) is a sound entry stored under digest: lengths,
 * kind, key and the checksum over all of it. */
static int entry_is_sound(const unsigned char *buf, size_t size,
                          const unsigned char digest[CL_HASH_SIZE])
{
  if (size < HEADER_SIZE || memcmp(buf, MAGIC, 8) != 0)
    return 0;
  uint64_t code_len = cl_load_le(buf + 8, 8), log_len = cl_load_le(buf + 16, 8),
           names_len = cl_load_le(buf + 24, 8);
  if (code_len > size || log_len > size || names_len > size ||
      HEADER_SIZE + code_len + log_len + names_len != size)
    return 0;
  if (cl_load_le(buf + 32, 4) >= CL_NKINDS || memcmp(buf + 40, digest, CL_HASH_SIZE) != 0)
    return 0;
  const void *part[3] = {buf + HEADER_SIZE, "", ""};
  const size_t len[3] = {size - HEADER_SIZE, 0, 0};
  return entry_sum(buf, part, len) == cl_load_le(buf + SUM_AT, 8);
}

/* On a hit, push the code, the log and the names string and return the
 * code's kind; else push nothing and return -1. Counts hits, misses and
 * corrupt entries (which it removes); never raises except for lack of
 * memory. It allocates before it counts: the caller holds the collector
 * (cl_gc_hold) or c is the automatic cache. */
int cl_cache_get(lua_State *L, cl_ProgramCache *c, const char *key, size_t key_len)
{
  char path[CL_CACHE_PATH_MAX + 80], why[160];
  unsigned char digest[CL_HASH_SIZE];
  size_t size = 0;
  cl_sha256(key, key_len, digest);
  if (!entry_path(path, sizeof path, c->dir, digest))
    return -1;
  unsigned char *buf = cl_push_file(L, path, ENTRY_LIMIT, &size);
  if (!buf) {
    if (errno != ENOENT && errno != ENOTDIR)
      c->stats.errors++;
    c->stats.misses++;
    return -1;
  }
  if (size >= HEADER_SIZE && memcmp(buf, OLD_MAGIC, 8) == 0) {
    lua_pop(L, 1);                                /* an older cudalua's: the next store replaces it */
    c->stats.misses++;
    return -1;
  }
  int kind = entry_is_sound(buf, size, digest) ? (int)cl_load_le(buf + 32, 4) : -1;
  size_t code_len = 0, log_len = 0;
  const char *payload = (const char *)buf + HEADER_SIZE;
  if (kind >= 0) {
    code_len = (size_t)cl_load_le(buf + 8, 8);
    log_len = (size_t)cl_load_le(buf + 16, 8);
    /* checked as a Lua string, which ends in a NUL (PTX is read to it) */
    const char *code = lua_pushlstring(L, payload, code_len);
    if (cl_code_problem(code, code_len, &kind, why, sizeof why)) {
      lua_pop(L, 1);
      kind = -1;
    }
  }
  if (kind < 0) {
    lua_pop(L, 1);
    unlink(path);
    c->stats.corrupt++;
    c->stats.misses++;
    return -1;
  }
  lua_pushlstring(L, payload + code_len, log_len);
  lua_pushlstring(L, payload + code_len + log_len, size - HEADER_SIZE - code_len - log_len);
  lua_remove(L, -4);
  mark_used(path);                               /* the last use, for eviction */
  c->stats.hits++;
  return kind;
}

/* --- writing ----------------------------------------------------------------- */

static void store_le(unsigned char *p, uint64_t v, int nbytes)
{
  for (int i = 0; i < nbytes; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

static int write_all(int fd, const void *data, size_t len)
{
  const char *p = data;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return 0;
    p += n;
    len -= (size_t)n;
  }
  return 1;
}

static void make_header(unsigned char header[HEADER_SIZE], const unsigned char digest[CL_HASH_SIZE],
                        const cl_CacheEntry *e)
{
  memset(header, 0, HEADER_SIZE);
  memcpy(header, MAGIC, 8);
  store_le(header + 8, e->code_len, 8);
  store_le(header + 16, e->log_len, 8);
  store_le(header + 24, e->names_len, 8);
  store_le(header + 32, (uint64_t)e->kind, 4);
  memcpy(header + 40, digest, CL_HASH_SIZE);
  const void *part[3] = {e->code, e->log, e->names};
  const size_t len[3] = {e->code_len, e->log_len, e->names_len};
  store_le(header + SUM_AT, entry_sum(header, part, len), 8);
}

/* Write the entry to a temporary file beside it, then rename it into place:
 * rename is atomic, so a reader sees the old entry or the new one. */
static int write_entry(const char *path, const unsigned char header[HEADER_SIZE],
                       const cl_CacheEntry *e)
{
  char tmp[CL_CACHE_PATH_MAX + 100];
  snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0)
    return 0;
  int ok = write_all(fd, header, HEADER_SIZE) && write_all(fd, e->code, e->code_len) &&
           write_all(fd, e->log, e->log_len) && write_all(fd, e->names, e->names_len);
  ok = close(fd) == 0 && ok;
  if (ok && rename(tmp, path) == 0) {
    mark_used(path);
    return 1;
  }
  unlink(tmp);
  return 0;
}

/* --- what a directory holds, for size and eviction -------------------------------- */

typedef struct Entry {
  char name[2 * CL_HASH_SIZE + sizeof SUFFIX];
  off_t size;
  struct timespec used;
} Entry;

static int is_entry_name(const char *name)
{
  size_t n = strlen(name);
  return n == 2 * CL_HASH_SIZE + strlen(SUFFIX) && strcmp(name + 2 * CL_HASH_SIZE, SUFFIX) == 0;
}

/* The entries of dir in a malloc'ed array (count in *n, bytes in *total);
 * NULL with *n = 0 when there are none or the listing fails. */
static Entry *list_entries(const char *dir, size_t *n, uint64_t *total)
{
  Entry *list = NULL;
  size_t cap = 0;
  struct stat st;
  char path[CL_CACHE_PATH_MAX + 80];
  *n = 0;
  *total = 0;
  DIR *d = opendir(dir);
  if (!d)
    return NULL;
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (!is_entry_name(de->d_name) || stat(path, &st) != 0)
      continue;
    if (*n == cap) {
      Entry *grown = realloc(list, (cap = cap ? 2 * cap : 16) * sizeof *list);
      if (!grown)
        break;
      list = grown;
    }
    snprintf(list[*n].name, sizeof list[*n].name, "%s", de->d_name);
    list[*n].size = st.st_size;
    list[*n].used = st.st_mtim;
    *total += (uint64_t)st.st_size;
    (*n)++;
  }
  closedir(d);
  return list;
}

static int older_first(const void *a, const void *b)
{
  return compare_times(&((const Entry *)a)->used, &((const Entry *)b)->used);
}

/* Remove the least recently used entries until the cache fits max_size. */
static void evict(cl_ProgramCache *c)
{
  size_t n;
  uint64_t total;
  char path[CL_CACHE_PATH_MAX + 80];
  if (c->max_size <= 0)
    return;
  Entry *list = list_entries(c->dir, &n, &total);
  if (n > 1)                                      /* list is NULL when there are none */
    qsort(list, n, sizeof *list, older_first);
  for (size_t i = 0; i < n && total > (uint64_t)c->max_size; i++) {
    snprintf(path, sizeof path, "%s/%s", c->dir, list[i].name);
    if (unlink(path) == 0) {
      total -= (uint64_t)list[i].size;
      c->stats.evictions++;
    }
  }
  free(list);
}

void cl_cache_put(cl_ProgramCache *c, const char *key, size_t key_len, const cl_CacheEntry *e)
{
  char path[CL_CACHE_PATH_MAX + 80];
  unsigned char digest[CL_HASH_SIZE], header[HEADER_SIZE];
  cl_sha256(key, key_len, digest);
  if (!entry_path(path, sizeof path, c->dir, digest)) {
    c->stats.errors++;
    return;
  }
  make_header(header, digest, e);
  if (make_dirs(c->dir) && write_entry(path, header, e))
    c->stats.writes++;
  else
    c->stats.errors++;
  evict(c);
}

/* --- cuda.ProgramCache ---------------------------------------------------------- */

static cl_ProgramCache *check_cache(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_PROGRAMCACHE);
}

cl_ProgramCache *cl_opt_program_cache(lua_State *L, int i)
{
  return lua_isnoneornil(L, i) ? NULL : check_cache(L, i);
}

/* cuda.ProgramCache(dir [, {max_size = bytes}]) */
static int cuda_program_cache(lua_State *L)
{
  static const char *const known[] = {"max_size", NULL};
  size_t len;
  const char *dir = luaL_checklstring(L, 1, &len);
  cl_check_nargs(L, 2);
  cl_check_options(L, 2, known);
  lua_Integer max_size = cl_opt_integer(L, 2, "max_size", 0);
  luaL_argcheck(L, len > 0 && len < CL_CACHE_PATH_MAX, 1, "the directory name is empty or too long");
  luaL_argcheck(L, max_size >= 0, 2, "field 'max_size' must be >= 0 (0: no limit)");
  cl_ProgramCache *c = lua_newuserdatauv(L, sizeof *c, 0);
  memset(c, 0, sizeof *c);
  memcpy(c->dir, dir, len + 1);
  c->max_size = max_size;
  luaL_setmetatable(L, CL_PROGRAMCACHE);
  return 1;
}

/* Names table (expr -> lowered) at ti as "expr\0lowered\0" pairs, pushed. */
static void push_names_string(lua_State *L, int ti)
{
  luaL_Buffer b;
  ti = lua_absindex(L, ti);
  luaL_buffinit(L, &b);
  if (lua_istable(L, ti)) {
    lua_pushnil(L);
    while (lua_next(L, ti)) {
      size_t n;
      const char *s = lua_tolstring(L, -2, &n);
      luaL_addlstring(&b, s, n + 1);
      s = lua_tolstring(L, -1, &n);
      luaL_addlstring(&b, s, n + 1);
      lua_pop(L, 1);
    }
  }
  luaL_pushresult(&b);
}

void cl_push_names_table(lua_State *L, const char *s, size_t n)
{
  lua_newtable(L);
  const char *end = s + n;
  while (s < end) {
    const char *lowered = s + strlen(s) + 1;
    if (lowered >= end)
      break;
    lua_pushstring(L, lowered);
    lua_setfield(L, -2, s);
    s = lowered + strlen(lowered) + 1;
  }
}

/* Store code (code, kind), log and names table (at namesi, or nil). */
void cl_cache_put_lua(lua_State *L, cl_ProgramCache *c, int keyi, int codei, int kind,
                      int logi, int namesi)
{
  cl_CacheEntry e = {.kind = kind};
  size_t key_len;
  namesi = lua_absindex(L, namesi);
  const char *key = lua_tolstring(L, keyi, &key_len);
  e.code = lua_tolstring(L, codei, &e.code_len);
  e.log = lua_tolstring(L, logi, &e.log_len);
  push_names_string(L, namesi);
  e.names = lua_tolstring(L, -1, &e.names_len);
  cl_cache_put(c, key, key_len, &e);
  lua_pop(L, 1);
}

/* pc:get(key) -> cuda.ObjectCode, or nil on a miss */
static int cache_get(lua_State *L)
{
  size_t key_len, names_len;
  luaL_checkudata(L, 1, CL_PROGRAMCACHE);
  const char *key = luaL_checklstring(L, 2, &key_len);
  cl_check_nargs(L, 2);
  lua_settop(L, 2);
  cl_gc_hold(L);                                  /* 3: the entry is read after the check */
  cl_ProgramCache *c = check_cache(L, 1);
  int kind = cl_cache_get(L, c, key, key_len);    /* 4 code, 5 log, 6 names */
  if (kind < 0) {
    lua_pushnil(L);
    return 1;
  }
  const char *names = lua_tolstring(L, 6, &names_len);
  cl_push_names_table(L, names, names_len);       /* 7 */
  cl_push_objectcode(L, 4, kind);                 /* 8: checked again, as every ObjectCode */
  cl_objectcode_set_names(L, 8, 7);
  return 1;
}

/* pc:store(key, obj) */
static int cache_store(lua_State *L)
{
  luaL_checkudata(L, 1, CL_PROGRAMCACHE);
  luaL_checkstring(L, 2);
  luaL_checkudata(L, 3, CL_OBJECTCODE);
  cl_check_nargs(L, 3);
  lua_settop(L, 3);
  cl_gc_hold(L);                                  /* 4: the entry is made after the checks */
  cl_ProgramCache *c = check_cache(L, 1);
  cl_ObjectCode *o = cl_check_objectcode(L, 3);
  lua_pushliteral(L, "");                         /* 5: an ObjectCode keeps no log */
  cl_objectcode_push_code(L, 3);                  /* 6 */
  cl_objectcode_push_names(L, 3);                 /* 7 */
  cl_cache_put_lua(L, c, 2, 6, o->kind, 5, 7);
  return 0;
}

/* pc:clear(): remove every entry (and any temporary file left behind). */
static int cache_clear(lua_State *L)
{
  cl_ProgramCache *c = check_cache(L, 1);
  char path[CL_CACHE_PATH_MAX + 300];
  cl_check_nargs(L, 1);
  DIR *d = opendir(c->dir);
  if (!d)
    return 0;
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    if (!is_entry_name(de->d_name) && !strstr(de->d_name, SUFFIX ".tmp."))
      continue;
    snprintf(path, sizeof path, "%s/%s", c->dir, de->d_name);
    unlink(path);
  }
  closedir(d);
  return 0;
}

static int cache_close(lua_State *L)
{
  cl_ProgramCache *c = luaL_checkudata(L, 1, CL_PROGRAMCACHE);
  c->closed = 1;
  return 0;
}

static int cache_tostring(lua_State *L)
{
  cl_ProgramCache *c = luaL_checkudata(L, 1, CL_PROGRAMCACHE);
  if (c->closed)
    return cl_push_closed_name(L, CL_PROGRAMCACHE);
  lua_pushfstring(L, "cuda.ProgramCache(%s)", c->dir);
  return 1;
}

static void set_count(lua_State *L, const char *field, lua_Integer v)
{
  lua_pushinteger(L, v);
  lua_setfield(L, -2, field);
}

static void push_stats(lua_State *L, const cl_CacheStats *s)
{
  set_count(L, "hits", s->hits);
  set_count(L, "misses", s->misses);
  set_count(L, "writes", s->writes);
  set_count(L, "corrupt", s->corrupt);
  set_count(L, "errors", s->errors);
  set_count(L, "evictions", s->evictions);
}

/* The bytes of the entries in dir. */
static lua_Integer dir_size(const char *dir)
{
  size_t n;
  uint64_t total;
  free(list_entries(dir, &n, &total));
  return (lua_Integer)total;
}

static int cache_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);
  cl_ProgramCache *c = check_cache(L, 1);
  cl_CacheStats stats = c->stats;                 /* read before the table is made */
  if (strcmp(key, "size") == 0)
    lua_pushinteger(L, dir_size(c->dir));
  else if (strcmp(key, "dir") == 0)
    lua_pushstring(L, c->dir);                    /* c is at 1: closing frees nothing */
  else if (strcmp(key, "max_size") == 0)
    lua_pushinteger(L, (lua_Integer)c->max_size);
  else {                                          /* hits, misses, evictions, ... */
    lua_newtable(L);
    push_stats(L, &stats);
    lua_getfield(L, -1, key);
  }
  return 1;
}

/* cuda.compile_cache_stats(): {hits, misses, writes, corrupt, errors,
 * evictions, enabled, dir}: the automatic cache's counts for this process;
 * dir is where entries go now (false when the cache is off). */
static int cuda_compile_cache_stats(lua_State *L)
{
  cl_ProgramCache *c = cl_default_cache();
  lua_createtable(L, 0, 8);
  push_stats(L, &automatic.stats);
  lua_pushboolean(L, c != NULL);
  lua_setfield(L, -2, "enabled");
  if (c)
    lua_pushstring(L, c->dir);
  else
    lua_pushboolean(L, 0);
  lua_setfield(L, -2, "dir");
  return 1;
}

void cl_open_cache(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__close", cache_close}, {"__tostring", cache_tostring}, {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"get", cache_get}, {"store", cache_store}, {"clear", cache_clear},
    {"close", cache_close}, {NULL, NULL}
  };
  static const luaL_Reg functions[] = {
    {"ProgramCache", cuda_program_cache}, {"compile_cache_stats", cuda_compile_cache_stats},
    {NULL, NULL}
  };
  cl_new_type(L, CL_PROGRAMCACHE, meta, methods, cache_fields);
  cl_setfuncs(L, functions);
}
