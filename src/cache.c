/* cache.c: the persistent compile cache, and the SHA-256 that keys it.
 *
 * program.c hashes everything that determines a compile's output (source,
 * NVRTC options, target, NVRTC version) into a 32-byte key and asks this
 * file for the entry. Entries live in one directory:
 *
 *     CUDALUA_CACHE=off          no cache at all
 *     CUDALUA_CACHE=DIR          DIR
 *     XDG_CACHE_HOME=DIR         DIR/cudalua
 *     otherwise                  $HOME/.cache/cudalua
 *
 * one file per key, named by the key in hex. A file is a 96-byte header
 * followed by the payload (the code, then the compile log):
 *
 *     0   "CLCACHE1"             magic and format version
 *     8   u64 code length        little-endian
 *     16  u64 log length
 *     24  u32 kind               index into cl_code_kinds
 *     28  u32 0                  reserved
 *     32  key[32]                the key the entry was stored under
 *     64  sha256(code .. log)    the payload checksum
 *
 * A truncated, corrupted or misplaced file fails these checks, counts as
 * corrupt, and is rewritten by the compile that follows. Writes go to a
 * temporary file in the same directory, renamed over the entry, so readers
 * never see half an entry. A cache that cannot be read or written never
 * fails a compile: the failure is counted and the compile goes on.
 *
 * The key does not cover headers pulled in with #include from
 * include_path: change a define, or set CUDALUA_CACHE=off, while editing
 * headers. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cl.h"

/* --- SHA-256 (FIPS 180-4) ------------------------------------------------ */

static const uint32_t round_constants[64] = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static uint32_t load_be32(const unsigned char *p)
{
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void compress(uint32_t state[8], const unsigned char block[64])
{
  uint32_t w[64], v[8];
  for (int i = 0; i < 16; i++)
    w[i] = load_be32(block + 4 * i);
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  memcpy(v, state, sizeof v);
  for (int i = 0; i < 64; i++) {
    uint32_t e = v[4], a = v[0];
    uint32_t t1 = v[7] + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & v[5]) ^ (~e & v[6])) +
                  round_constants[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & v[1]) ^ (a & v[2]) ^ (v[1] & v[2]));
    memmove(v + 1, v, 7 * sizeof v[0]);
    v[4] += t1;
    v[0] = t1 + t2;
  }
  for (int i = 0; i < 8; i++)
    state[i] += v[i];
}

void cl_hash_init(cl_Hash *h)
{
  static const uint32_t initial[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  };
  memcpy(h->state, initial, sizeof initial);
  h->total = 0;
  h->used = 0;
}

void cl_hash_update(cl_Hash *h, const void *data, size_t len)
{
  const unsigned char *p = data;
  h->total += len;
  while (len > 0) {
    size_t n = 64 - h->used < len ? 64 - h->used : len;
    memcpy(h->block + h->used, p, n);
    h->used += n;
    p += n;
    len -= n;
    if (h->used == 64) {
      compress(h->state, h->block);
      h->used = 0;
    }
  }
}

void cl_hash_final(cl_Hash *h, unsigned char out[CL_HASH_SIZE])
{
  uint64_t bits = h->total * 8;
  unsigned char pad[72] = {0x80};
  size_t padlen = (h->used < 56 ? 56 : 120) - h->used;
  for (size_t i = 0; i < 8; i++)
    pad[padlen + i] = (unsigned char)(bits >> (56 - 8 * i));
  cl_hash_update(h, pad, padlen + 8);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 4; j++)
      out[4 * i + j] = (unsigned char)(h->state[i] >> (24 - 8 * j));
}

/* --- where the cache lives -------------------------------------------------- */

#define HEADER_SIZE 96
#define MAGIC "CLCACHE1"
#define ENTRY_LIMIT ((size_t)1 << 30)   /* larger files are not ours */

static struct {
  lua_Integer hits, misses, writes, corrupt, errors;
} stats;

/* The cache directory into dir; 0 when the cache is off or has no home. */
static int cache_dir(char *dir, size_t size)
{
  const char *env = getenv("CUDALUA_CACHE");
  int n;
  if (env && strcmp(env, "off") == 0)
    return 0;
  if (env && *env)
    n = snprintf(dir, size, "%s", env);
  else if ((env = getenv("XDG_CACHE_HOME")) && env[0] == '/')   /* XDG: absolute only */
    n = snprintf(dir, size, "%s/cudalua", env);
  else if ((env = getenv("HOME")) && *env)
    n = snprintf(dir, size, "%s/.cache/cudalua", env);
  else
    return 0;
  return n > 0 && (size_t)n < size;
}

static int entry_path(char *path, size_t size, const unsigned char key[CL_HASH_SIZE])
{
  char dir[4096];
  if (!cache_dir(dir, sizeof dir))
    return 0;
  int n = snprintf(path, size, "%s/", dir);
  if (n < 0 || (size_t)n + 2 * CL_HASH_SIZE + sizeof ".entry" > size)
    return 0;
  for (int i = 0; i < CL_HASH_SIZE; i++)
    n += snprintf(path + n, size - (size_t)n, "%02x", key[i]);
  snprintf(path + n, size - (size_t)n, ".entry");
  return 1;
}

/* mkdir -p: 1 when dir exists (or was made) as a directory. */
static int make_dirs(const char *dir)
{
  char p[4096];
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

/* --- reading ------------------------------------------------------------- */

/* 1 when buf (size bytes) is a sound entry for key and kind. */
static int entry_is_sound(const unsigned char *buf, size_t size,
                          const unsigned char key[CL_HASH_SIZE], int kind)
{
  unsigned char sum[CL_HASH_SIZE];
  cl_Hash h;
  if (size < HEADER_SIZE || memcmp(buf, MAGIC, 8) != 0)
    return 0;
  uint64_t code_len = cl_load_le(buf + 8, 8), log_len = cl_load_le(buf + 16, 8);
  if (code_len > size || log_len > size || HEADER_SIZE + code_len + log_len != size)
    return 0;
  if (cl_load_le(buf + 24, 4) != (uint64_t)kind || memcmp(buf + 32, key, CL_HASH_SIZE) != 0)
    return 0;
  cl_hash_init(&h);
  cl_hash_update(&h, buf + HEADER_SIZE, size - HEADER_SIZE);
  cl_hash_final(&h, sum);
  return memcmp(sum, buf + 64, CL_HASH_SIZE) == 0;
}

/* On a hit, push the code and the log and return 1; else push nothing and
 * return 0. Counts hits, misses and corrupt entries; never raises except
 * for lack of memory. */
int cl_cache_lookup(lua_State *L, const unsigned char key[CL_HASH_SIZE], int kind)
{
  char path[4200];
  size_t size = 0;
  if (!entry_path(path, sizeof path, key))
    return 0;
  unsigned char *buf = cl_push_file(L, path, ENTRY_LIMIT, &size);
  if (!buf) {
    if (errno != ENOENT && errno != ENOTDIR)
      stats.errors++;
    stats.misses++;
    return 0;
  }
  if (!entry_is_sound(buf, size, key, kind)) {
    lua_pop(L, 1);
    stats.corrupt++;
    stats.misses++;
    return 0;
  }
  size_t code_len = (size_t)cl_load_le(buf + 8, 8);
  lua_pushlstring(L, (const char *)buf + HEADER_SIZE, code_len);
  lua_pushlstring(L, (const char *)buf + HEADER_SIZE + code_len, size - HEADER_SIZE - code_len);
  lua_remove(L, -3);
  stats.hits++;
  return 1;
}

/* --- writing ------------------------------------------------------------- */

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

static void make_header(unsigned char header[HEADER_SIZE], const unsigned char key[CL_HASH_SIZE],
                        int kind, const char *code, size_t code_len, const char *log,
                        size_t log_len)
{
  cl_Hash h;
  memset(header, 0, HEADER_SIZE);
  memcpy(header, MAGIC, 8);
  store_le(header + 8, code_len, 8);
  store_le(header + 16, log_len, 8);
  store_le(header + 24, (uint64_t)kind, 4);
  memcpy(header + 32, key, CL_HASH_SIZE);
  cl_hash_init(&h);
  cl_hash_update(&h, code, code_len);
  cl_hash_update(&h, log, log_len);
  cl_hash_final(&h, header + 64);
}

/* Write the entry to a temporary file beside it, then rename it into place:
 * rename is atomic, so a reader sees the old entry or the new one. */
static int write_entry(const char *path, const unsigned char header[HEADER_SIZE],
                       const char *code, size_t code_len, const char *log, size_t log_len)
{
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0)
    return 0;
  int ok = write_all(fd, header, HEADER_SIZE) && write_all(fd, code, code_len) &&
           write_all(fd, log, log_len);
  ok = close(fd) == 0 && ok;
  if (ok && rename(tmp, path) == 0)
    return 1;
  unlink(tmp);
  return 0;
}

void cl_cache_store(const unsigned char key[CL_HASH_SIZE], int kind, const char *code,
                    size_t code_len, const char *log, size_t log_len)
{
  char dir[4096], path[4200];
  unsigned char header[HEADER_SIZE];
  if (!cache_dir(dir, sizeof dir) || !entry_path(path, sizeof path, key))
    return;
  make_header(header, key, kind, code, code_len, log, log_len);
  if (make_dirs(dir) && write_entry(path, header, code, code_len, log, log_len))
    stats.writes++;
  else
    stats.errors++;
}

/* --- cuda.compile_cache_stats() ------------------------------------------ */

static void set_count(lua_State *L, const char *field, lua_Integer v)
{
  lua_pushinteger(L, v);
  lua_setfield(L, -2, field);
}

/* {hits, misses, writes, corrupt, errors, enabled, dir}: counts for this
 * process; dir is where entries go now (false when the cache is off). */
int cl_cache_stats(lua_State *L)
{
  char dir[4096];
  int enabled = cache_dir(dir, sizeof dir);
  lua_createtable(L, 0, 7);
  set_count(L, "hits", stats.hits);
  set_count(L, "misses", stats.misses);
  set_count(L, "writes", stats.writes);
  set_count(L, "corrupt", stats.corrupt);
  set_count(L, "errors", stats.errors);
  lua_pushboolean(L, enabled);
  lua_setfield(L, -2, "enabled");
  if (enabled)
    lua_pushstring(L, dir);
  else
    lua_pushboolean(L, 0);
  lua_setfield(L, -2, "dir");
  return 1;
}
