/* SPDX-License-Identifier: MIT */
/* vmm.c: cuda.VirtualMemoryResource, device memory whose buffers grow.
 *
 *   local vmr = cuda.VirtualMemoryResource(dev, {granularity = "recommended"})
 *   local buf = vmr:allocate(2 << 20)
 *   buf:grow(64 << 20, s)         -- same pointer where the driver allows
 *
 * A buffer is physical chunks (cuMemCreate, each a multiple of the
 * granularity) mapped into reserved address ranges (cuMemAddressReserve,
 * cuMemMap, cuMemSetAccess). Growing reserves the range right after the
 * buffer's end: where the driver gives it, one new chunk is mapped there and
 * the pointer stays; else a new range big enough for all is reserved, every
 * chunk is mapped into it (the contents move with their physical memory:
 * nothing is copied) and the old ranges go. A release unmaps every chunk,
 * releases it, then frees the ranges, in that order. A move leaves the
 * slices, views and tensor maps made before at the old address: each use
 * compares the buffer's move count with theirs and refuses them.
 *
 * {devices = {d0, d1, ...}} spreads each allocation over several devices
 * (CUDA's vectorAddMMAP): one chunk a device, back to back in one range,
 * every device granted access; such buffers do not grow. The options are
 * cuda.core's VirtualMemoryResourceOptions, checked against what
 * cuMemCreate takes before any driver call.
 *
 * The resource is a cuda.MemoryResource of kind "device" (memory.c), with
 * this file's settings after its struct; its buffers are plain cuda.Buffers
 * whose memory lifetimes.c gives back through cl_vmm_free (registered in
 * cl_open_vmm). The records of the chunks live in malloc'd memory, so a
 * release deferred past the resource's collection (lifetimes.c) still
 * finds them. */
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "hostfunc.h"

typedef struct Chunk { CUdeviceptr va; size_t size; CUmemGenericAllocationHandle handle; } Chunk;
typedef struct Range { CUdeviceptr va; size_t size; } Range;

#define MAX_DEVICES 64           /* as a resource's peer mask */

/* The devices a resource spreads its allocations over (one for most),
 * each with its primary context, and the access every one is granted. */
typedef struct Spread {
  int n;
  int ordinal[MAX_DEVICES];
  CUcontext ctx[MAX_DEVICES];   /* a release waits for each (cl_vmm_free) */
  CUmemAccessDesc access[MAX_DEVICES];
} Spread;

typedef struct Alloc {
  struct Alloc *next;
  CUdeviceptr ptr;              /* the buffer's pointer (the first chunk's address) */
  size_t mapped;                /* bytes mapped from ptr on */
  Chunk *chunks;
  Range *ranges;
  int nchunks, nranges;
  CUmemAllocationProp prop;
  Spread spread;
  size_t granularity;
} Alloc;

static Alloc *allocs;           /* every live allocation, for cl_vmm_free */

typedef struct Vmm {
  cl_MemoryResource mr;         /* first: a cuda.MemoryResource to memory.c */
  CUmemAllocationProp prop;     /* the first device's; the others differ in location.id */
  Spread spread;
  size_t granularity;           /* the largest of the devices' */
  int granularity_kind;         /* 0 minimum, 1 recommended */
} Vmm;

static Alloc *find(CUdeviceptr p, Alloc ***link)
{
  for (Alloc **a = &allocs; *a; a = &(*a)->next)
    if ((*a)->ptr == p) {
      if (link)
        *link = a;
      return *a;
    }
  return NULL;
}

/* Unmap and release every chunk, then free every range: never raises. */
static void unmap_all(Alloc *a)
{
  for (int k = 0; k < a->nchunks; k++) {
    CL_CALL(cuMemUnmap, (a->chunks[k].va, a->chunks[k].size));
    CL_CALL(cuMemRelease, (a->chunks[k].handle));
  }
  for (int k = 0; k < a->nranges; k++)
    CL_CALL(cuMemAddressFree, (a->ranges[k].va, a->ranges[k].size));
}

/* The other devices' work on a spread allocation first: the caller
 * (lifetimes.c) waited for the first device's. Never raises. */
static void wait_other_devices(const Spread *sp)
{
  if (sp->n < 2)
    return;
  CUcontext was = cl_current_ctx;
  for (int k = 1; k < sp->n; k++)
    if (sp->ctx[k] && CL_CALL(cuCtxSetCurrent, (sp->ctx[k])) == CUDA_SUCCESS)
      CL_CALL(cuCtxSynchronize, ());
  if (CL_CALL(cuCtxSetCurrent, (was)) != CUDA_SUCCESS)
    cl_current_ctx = NULL;      /* the next use makes its own current again */
}

void cl_vmm_free(CUdeviceptr p)
{
  Alloc **link;
  Alloc *a = find(p, &link);
  if (!a)
    return;
  *link = a->next;
  wait_other_devices(&a->spread);
  unmap_all(a);
  free(a->chunks);
  free(a->ranges);
  free(a);
}

/* Map a new chunk of size bytes at va (inside a reserved range) and grant
 * access; 0 and the failing call's result in *r. */
static int map_chunk(Alloc *a, CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h,
                     CUresult *r, const char **api)
{
  *api = "cuMemMap";
  *r = CL_CALL(cuMemMap, (va, size, 0, h, 0));
  if (*r != CUDA_SUCCESS)
    return 0;
  *api = "cuMemSetAccess";
  *r = CL_CALL(cuMemSetAccess, (va, size, a->spread.access, (size_t)a->spread.n));
  if (*r != CUDA_SUCCESS) {
    CL_CALL(cuMemUnmap, (va, size));
    return 0;
  }
  return 1;
}

/* Grow the records by one chunk and one range (capacity for what may come). */
static int reserve_records(Alloc *a, int chunks, int ranges)
{
  Chunk *c = realloc(a->chunks, (size_t)(a->nchunks + chunks) * sizeof *c);
  if (c)
    a->chunks = c;
  Range *g = realloc(a->ranges, (size_t)(a->nranges + ranges) * sizeof *g);
  if (g)
    a->ranges = g;
  return c != NULL && g != NULL;
}

static size_t round_up(size_t n, size_t g)
{
  return n > SIZE_MAX - (g - 1) ? 0 : (n + g - 1) / g * g;
}

/* One chunk of size bytes on each device of a->spread, mapped back to back
 * at va (a reserved range of n * size bytes): the records get them in
 * order. 1, or 0 with *r and *api and nothing left mapped or created. */
static int map_spread(Alloc *a, CUdeviceptr va, size_t size, CUresult *r, const char **api)
{
  int made = 0;
  for (; made < a->spread.n; made++) {
    CUmemAllocationProp prop = a->prop;
    CUmemGenericAllocationHandle h = 0;
    prop.location.id = a->spread.n > 1 ? a->spread.ordinal[made] : a->prop.location.id;
    *api = "cuMemCreate";
    *r = CL_CALL(cuMemCreate, (&h, size, &prop, 0));
    if (*r != CUDA_SUCCESS)
      break;
    CUdeviceptr at = va + (CUdeviceptr)made * size;
    if (!map_chunk(a, at, size, h, r, api)) {
      CL_CALL(cuMemRelease, (h));
      break;
    }
    a->chunks[a->nchunks++] = (Chunk){at, size, h};
  }
  if (made == a->spread.n)
    return 1;
  for (; a->nchunks > 0; a->nchunks--) {     /* undo the chunks made */
    Chunk *c = &a->chunks[a->nchunks - 1];
    CL_CALL(cuMemUnmap, (c->va, c->size));
    CL_CALL(cuMemRelease, (c->handle));
  }
  return 0;
}

/* allocate for a virtual-memory resource (its cl_MROps): one range, one chunk
 * in it (one a device, in device order, for a resource spread over
 * several: vectorAddMMAP's layout). Runs no Lua but to raise. */
static CUdeviceptr vmm_allocate(lua_State *L, cl_MemoryResource *mr, size_t n)
{
  const Vmm *v = (const Vmm *)mr;
  size_t ndev = (size_t)v->spread.n;
  size_t each = round_up((n + ndev - 1) / ndev, v->granularity);
  if (each == 0 || each > SIZE_MAX / ndev)
    luaL_error(L, "cannot allocate %I bytes: the size overflows", (lua_Integer)n);
  size_t size = each * ndev;
  Alloc *a = calloc(1, sizeof *a);
  if (!a || !reserve_records(a, (int)ndev, 1)) {
    if (a) {
      free(a->chunks);
      free(a->ranges);
    }
    free(a);
    luaL_error(L, "out of host memory");
  }
  a->prop = v->prop;
  a->spread = v->spread;
  a->granularity = v->granularity;
  CUdeviceptr va = 0;
  const char *api = "cuMemAddressReserve";
  CUresult r = CL_CALL(cuMemAddressReserve, (&va, size, v->granularity, 0, 0));
  if (r == CUDA_SUCCESS && !map_spread(a, va, each, &r, &api))
    CL_CALL(cuMemAddressFree, (va, size));
  if (r != CUDA_SUCCESS) {
    free(a->chunks);
    free(a->ranges);
    free(a);
    cl_raise_detail(L, r, api, " (asked for %I bytes)", (lua_Integer)size);
  }
  a->ranges[0] = (Range){va, size};
  a->nranges = 1;
  a->ptr = va;
  a->mapped = size;
  a->next = allocs;
  allocs = a;
  return va;
}

/* Try the range right after the mapping: 1 when more bytes are mapped
 * there (the pointer stays), 0 when the driver put the range elsewhere
 * (given back), -1 with *r for a failure. */
static int grow_in_place(Alloc *a, size_t more, CUresult *r, const char **api)
{
  CUdeviceptr want = a->ptr + a->mapped, got = 0;
  *api = "cuMemAddressReserve";
  *r = CL_CALL(cuMemAddressReserve, (&got, more, 0, want, 0));
  if (*r != CUDA_SUCCESS)
    return 0;                   /* no range there: move instead */
  if (got != want) {
    CL_CALL(cuMemAddressFree, (got, more));
    return 0;
  }
  CUmemGenericAllocationHandle h = 0;
  *api = "cuMemCreate";
  *r = CL_CALL(cuMemCreate, (&h, more, &a->prop, 0));
  if (*r == CUDA_SUCCESS && !map_chunk(a, want, more, h, r, api))
    CL_CALL(cuMemRelease, (h));
  if (*r != CUDA_SUCCESS) {
    CL_CALL(cuMemAddressFree, (want, more));
    return -1;
  }
  a->chunks[a->nchunks++] = (Chunk){want, more, h};
  a->ranges[a->nranges++] = (Range){want, more};
  a->mapped += more;
  return 1;
}

/* A new range for everything: the old chunks mapped into it in order,
 * then a new one; the old mappings and ranges go. The work that used the
 * old addresses must be done (the caller waited). */
static int grow_moving(Alloc *a, size_t more, CUresult *r, const char **api)
{
  size_t total = a->mapped + more;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  *api = "cuMemAddressReserve";
  *r = CL_CALL(cuMemAddressReserve, (&va, total, a->granularity, 0, 0));
  if (*r != CUDA_SUCCESS)
    return 0;
  *api = "cuMemCreate";
  *r = CL_CALL(cuMemCreate, (&h, more, &a->prop, 0));
  int mapped = 0;
  size_t at = 0;
  for (; *r == CUDA_SUCCESS && mapped < a->nchunks; mapped++) {
    if (!map_chunk(a, va + at, a->chunks[mapped].size, a->chunks[mapped].handle, r, api))
      break;
    at += a->chunks[mapped].size;
  }
  if (*r == CUDA_SUCCESS && map_chunk(a, va + at, more, h, r, api)) {
    for (int k = 0; k < a->nchunks; k++) {   /* the old mappings, then their ranges */
      CL_CALL(cuMemUnmap, (a->chunks[k].va, a->chunks[k].size));
      a->chunks[k].va = va + (a->chunks[k].va - a->ptr);
    }
    for (int k = 0; k < a->nranges; k++)
      CL_CALL(cuMemAddressFree, (a->ranges[k].va, a->ranges[k].size));
    a->chunks[a->nchunks++] = (Chunk){va + at, more, h};
    a->ranges[0] = (Range){va, total};
    a->nranges = 1;
    a->ptr = va;
    a->mapped = total;
    return 1;
  }
  at = 0;
  for (int k = 0; k < mapped; k++) {   /* undo what was mapped */
    CL_CALL(cuMemUnmap, (va + at, a->chunks[k].size));
    at += a->chunks[k].size;
  }
  if (h)
    CL_CALL(cuMemRelease, (h));
  CL_CALL(cuMemAddressFree, (va, total));
  return 0;
}

/* buf:grow(nbytes [, stream]): a buffer of a cuda.VirtualMemoryResource
 * holds nbytes, its contents kept. The pointer stays where the address
 * range after the buffer is free; else the buffer moves: the device (or
 * stream) is waited for first, and the slices, views and tensor maps made
 * before hold the old address, which no longer holds memory: they count
 * the buffer's moves when made (cl_Buffer.moves), and every use compares
 * that count (one load and compare) and refuses them. Returns the buffer. */
static int buffer_grow(lua_State *L)
{
  cl_check_nargs(L, 3);
  lua_Integer n = luaL_checkinteger(L, 2);
  cl_Buffer *b = cl_check_buffer(L, 1);
  cl_Stream *s = cl_opt_stream(L, 3);
  if (b->owner || b->mr->vmm == NULL)   /* a slice's mr is its owner's */
    return luaL_argerror(L, 1, "only a buffer of a cuda.VirtualMemoryResource grows (not a slice)");
  if (((const Vmm *)b->mr->vmm)->spread.n > 1)
    return luaL_argerror(L, 1, "a buffer spread over several devices does not grow");
  if (n < (lua_Integer)b->size)
    return luaL_argerror(L, 2, "a buffer only grows: the size must be >= buf.size");
  Alloc *a = find(b->ptr, NULL);
  if (a == NULL)
    return luaL_error(L, "cuda.Buffer: no virtual memory record for this buffer");
  if ((size_t)n <= a->mapped) {
    b->mr->live_bytes += (size_t)n - b->size;
    b->size = (size_t)n;
    lua_settop(L, 1);
    return 1;
  }
  size_t more = round_up((size_t)n - a->mapped, a->granularity);
  if (more == 0)
    return luaL_argerror(L, 2, "the size overflows");
  if (!reserve_records(a, 1, 1))
    return luaL_error(L, "out of host memory");
  cl_device_activate(L, b->mr->dev);
  CUresult r = CUDA_SUCCESS;
  const char *api = "";
  int done = grow_in_place(a, more, &r, &api);
  if (done == 0) {
    if (b->graph_refs > 0)
      return luaL_error(L, "cannot move a buffer that a graph or a texture uses: it must grow "
                           "in place, and the address range after it is taken");
    /* the work that uses the old addresses first: a wait runs Lua */
    if (s)
      cl_stream_sync(L, s);
    else
      cl_sync(L, cl_device_wait, b->mr->dev, "cuCtxSynchronize");
    b = cl_check_buffer(L, 1);  /* host functions the wait ran may have closed it, */
    a = find(b->ptr, NULL);     /* or made a texture over it */
    if (a == NULL || b->graph_refs > 0 || !reserve_records(a, 1, 1))
      return luaL_error(L, "cuda.Buffer changed while it was waited for");
    cl_device_activate(L, b->mr->dev);
    done = grow_moving(a, more, &r, &api);
  }
  if (done <= 0)
    return cl_raise_detail(L, r, api, " (growing to %I bytes)", n);
  if (b->ptr != a->ptr)
    b->moves++;                 /* slices, views and tensor maps made before are stale now */
  b->ptr = a->ptr;
  b->mr->live_bytes += (size_t)n - b->size;
  b->size = (size_t)n;
  lua_settop(L, 1);
  return 1;
}

/* The choice of option field at opti among names (def when absent), as
 * its index; an error lists the names. Gather: it may run metamethods. */
static int opt_choice(lua_State *L, int opti, const char *field, const char *def,
                      const char *const names[])
{
  const char *v = cl_opt_string(L, opti, field, def);
  int k = 0;
  while (v && names[k] && strcmp(names[k], v) != 0)
    k++;
  if (v == NULL || names[k] == NULL) {
    const char *given = v ? v : "nil";
    luaL_argerror(L, opti, lua_pushfstring(L, "field '%s' must be one of %s, got '%s'", field,
                                           cl_push_names(L, names), given));
  }
  lua_pop(L, 1);
  return k;
}

/* Whether the option table at opti has field (gather: it may run __index). */
static int present(lua_State *L, int opti, const char *field)
{
  if (!lua_istable(L, opti))
    return 0;
  int has = lua_getfield(L, opti, field) != LUA_TNIL;
  lua_pop(L, 1);
  return has;
}

static const char *const allocation_types[] = {"pinned", "managed", NULL};
static const char *const location_types[] = {"device", "host", "host_numa", "host_numa_current", NULL};
static const CUmemLocationType location_values[] = {
  CU_MEM_LOCATION_TYPE_DEVICE, CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA,
  CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT
};
static const char *const handle_types[] = {"none", "posix_fd", "fabric", "win32", "win32_kmt", NULL};
static const CUmemAllocationHandleType handle_values[] = {
  CU_MEM_HANDLE_TYPE_NONE, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, CU_MEM_HANDLE_TYPE_FABRIC,
  CU_MEM_HANDLE_TYPE_WIN32, CU_MEM_HANDLE_TYPE_WIN32_KMT
};
static const char *const accesses[] = {"rw", "r", NULL};
static const char *const granularities[] = {"minimum", "recommended", NULL};

/* What the options ask for (cuda.core's VirtualMemoryResourceOptions). */
typedef struct Settings {
  int allocation, location, handle, access, granularity, rdma;
  lua_Integer numa;
} Settings;

/* A choice under either of two names, today's (old) or cuda.core's
 * (name), def when neither is given; both given and different is refused. */
static int opt_aliased(lua_State *L, int opti, const char *old, const char *name, const char *def,
                       const char *const names[])
{
  int a = opt_choice(L, opti, old, def, names);
  int b = opt_choice(L, opti, name, names[a], names);
  if (a != b && present(L, opti, old))
    luaL_argerror(L, opti, lua_pushfstring(L, "give %s or %s, not both", old, name));
  return b;
}

/* Read the options at opti: today's names (location, access) or
 * cuda.core's (location_type, self_access), not both. */
static void read_settings(lua_State *L, int opti, Settings *st)
{
  st->allocation = opt_choice(L, opti, "allocation_type", "pinned", allocation_types);
  st->location = opt_aliased(L, opti, "location", "location_type", "device", location_types);
  st->handle = opt_choice(L, opti, "handle_type", "none", handle_types);
  st->access = opt_aliased(L, opti, "access", "self_access", "rw", accesses);
  st->granularity = opt_choice(L, opti, "granularity", "recommended", granularities);
  st->rdma = cl_opt_boolean(L, opti, "gpu_direct_rdma", 0);
  int numa_loc = location_values[st->location] == CU_MEM_LOCATION_TYPE_HOST_NUMA;
  st->numa = cl_opt_integer_range(L, opti, "numa_id", numa_loc ? -1 : 0, 0, INT32_MAX);
}

/* Refuse what cuMemCreate cannot make, saying why, before any driver call. */
static void check_settings(lua_State *L, int opti, const Settings *st)
{
  CUmemLocationType loc = location_values[st->location];
  if (st->allocation == 1)
    luaL_argerror(L, opti, "allocation_type = \"managed\": cuMemCreate makes pinned allocations "
                           "only; use cuda.ManagedMemoryResource for managed memory");
  if (loc == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
    luaL_argerror(L, opti, "location_type = \"host_numa_current\": the driver takes no such "
                           "location for physical memory; give \"host_numa\" and numa_id");
  if (loc == CU_MEM_LOCATION_TYPE_HOST_NUMA && st->numa < 0)
    luaL_argerror(L, opti, "location = \"host_numa\" needs numa_id");
  if (loc != CU_MEM_LOCATION_TYPE_HOST_NUMA && st->numa != 0)
    luaL_argerror(L, opti, "field 'numa_id' is for location = \"host_numa\"");
  if (loc == CU_MEM_LOCATION_TYPE_HOST && st->handle != 0)
    luaL_argerror(L, opti, "location_type = \"host\": the driver exports no host allocation "
                           "(handle_type must be \"none\")");
  if (handle_values[st->handle] == CU_MEM_HANDLE_TYPE_WIN32 ||
      handle_values[st->handle] == CU_MEM_HANDLE_TYPE_WIN32_KMT)
    luaL_argerror(L, opti, lua_pushfstring(L, "handle_type = \"%s\" is for Windows; here: "
                                           "\"none\", \"posix_fd\" or \"fabric\"",
                                           handle_types[st->handle]));
  if (st->rdma && loc != CU_MEM_LOCATION_TYPE_DEVICE)
    luaL_argerror(L, opti, "gpu_direct_rdma is for device memory (location_type = \"device\")");
}

/* The devices option at opti: a list of 1 to MAX_DEVICES devices (a
 * cuda.Device or an id), each pushed; their count, or 0 without the
 * option. Gather: reading the list may run metamethods. */
static int push_devices(lua_State *L, int opti)
{
  if (!lua_istable(L, opti) || lua_getfield(L, opti, "devices") == LUA_TNIL) {
    if (lua_istable(L, opti))
      lua_pop(L, 1);
    return 0;
  }
  int li = lua_gettop(L);
  if (!lua_istable(L, li))
    luaL_argerror(L, opti, lua_pushfstring(L, "field 'devices' must be a list of devices, got %s",
                                           luaL_typename(L, li)));
  lua_Unsigned n = lua_rawlen(L, li);
  if (n < 1 || n > MAX_DEVICES)
    luaL_argerror(L, opti, lua_pushfstring(L, "field 'devices' must list 1 to %d devices, got %I",
                                           MAX_DEVICES, (lua_Integer)n));
  luaL_checkstack(L, (int)n + 4, "too many devices");
  for (lua_Unsigned k = 1; k <= n; k++) {
    lua_rawgeti(L, li, (lua_Integer)k);
    int ei = lua_gettop(L);
    if (lua_type(L, ei) == LUA_TNUMBER) {
      const char *name = lua_pushfstring(L, "devices[%I]", (lua_Integer)k);
      lua_Integer id = cl_to_integer_range(L, ei, 0, INT32_MAX, name);
      lua_pop(L, 1);
      cl_push_device(L, (int)id);
    } else if (luaL_testudata(L, ei, CL_DEVICE))
      lua_pushvalue(L, ei);
    else
      luaL_argerror(L, opti, lua_pushfstring(L, "devices[%I] must be a cuda.Device or a device "
                                             "id, got %s", (lua_Integer)k, luaL_typename(L, ei)));
    lua_replace(L, ei);
  }
  lua_remove(L, li);            /* the devices stay, from li on */
  return (int)n;
}

/* The spread over the n devices at first..first + n - 1: distinct, and
 * each able to reach every other's memory (cuDeviceCanAccessPeer), as
 * the access granted to all of them needs. Check: raises, runs no Lua. */
static void check_spread(lua_State *L, int first, int n, int opti)
{
  for (int i = 0; i < n; i++) {
    const cl_Device *a = lua_touserdata(L, first + i);
    for (int j = 0; j < n; j++) {
      const cl_Device *b = lua_touserdata(L, first + j);
      if (i < j && a == b)
        luaL_argerror(L, opti, lua_pushfstring(L, "devices lists device %d twice", a->ordinal));
      int can = 1;
      if (a != b)
        CL_TRY(L, cuDeviceCanAccessPeer, (&can, a->handle, b->handle));
      if (!can)
        luaL_error(L, "devices: device %d cannot access the memory of device %d "
                      "(dev:can_access_peer is false), which one allocation spread over both needs",
                   a->ordinal, b->ordinal);
    }
  }
}

/* The granularity for prop on every device of the spread: the largest. */
static size_t spread_granularity(lua_State *L, const Vmm *v, int kind)
{
  size_t most = 0;
  for (int k = 0; k < v->spread.n; k++) {
    CUmemAllocationProp prop = v->prop;
    size_t g = 0;
    if (v->spread.n > 1)
      prop.location.id = v->spread.ordinal[k];
    CL_TRY(L, cuMemGetAllocationGranularity,
           (&g, &prop, kind ? CU_MEM_ALLOC_GRANULARITY_RECOMMENDED : CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (g == 0)
      luaL_error(L, "cuMemGetAllocationGranularity gave 0");
    most = g > most ? g : most;
  }
  return most;
}

/* A virtual-memory resource's setting key (vmr.handle_type ...) pushed, or
 * 0 and nothing for the common fields (memory.c's) */
static int push_field(lua_State *L, const cl_MemoryResource *mr, const char *key);
static const cl_MROps vmm_ops = {vmm_allocate, push_field, NULL};

/* cuda.VirtualMemoryResource([dev] [, {allocation_type, location | location_type,
 * numa_id, handle_type, access | self_access, granularity, gpu_direct_rdma,
 * devices}]) */
static int cuda_vmm(lua_State *L)
{
  static const char *const options[] = {
    "allocation_type", "location", "location_type", "numa_id", "handle_type", "access",
    "self_access", "granularity", "gpu_direct_rdma", "devices", NULL
  };
  cl_check_nargs(L, 2);
  int opti = lua_istable(L, 1) && lua_isnoneornil(L, 2) ? 1 : 2;
  lua_settop(L, 2);             /* the option reads push above the arguments */
  cl_check_options(L, opti, options);
  Settings st;
  read_settings(L, opti, &st);
  check_settings(L, opti, &st);
  if (location_values[st.location] != CU_MEM_LOCATION_TYPE_DEVICE && present(L, opti, "devices"))
    luaL_argerror(L, opti, "devices spreads device memory: location_type must be \"device\"");
  int devi = lua_gettop(L) + 1; /* the devices: the resource's first */
  int ndev = push_devices(L, opti);
  if (ndev > 0 && opti == 2 && !lua_isnil(L, 1))
    luaL_argerror(L, 1, "give a device or the option devices, not both");
  if (ndev == 0) {
    if (opti == 1)
      cl_push_current_device(L);
    else
      cl_push_device_arg(L, 1);
    ndev = 1;
  }
  Vmm *v = lua_newuserdatauv(L, sizeof *v, 1);
  memset(v, 0, sizeof *v);
  v->mr.closed = 1;             /* until it is made */
  v->mr.kind = CL_MR_DEVICE;
  v->mr.vmm = v;
  v->mr.ops = &vmm_ops;
  luaL_setmetatable(L, CL_MR);
  for (int k = 0; k < ndev; k++)
    cl_check_device(L, devi + k);
  check_spread(L, devi, ndev, opti);
  cl_Device *d = lua_touserdata(L, devi);
  CUmemLocationType loc = location_values[st.location];
  for (int k = 0; st.rdma && k < ndev; k++) {
    const cl_Device *e = lua_touserdata(L, devi + k);
    int rdma = 0;
    CL_TRY(L, cuDeviceGetAttribute, (&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
                                     e->handle));
    if (!rdma)
      return luaL_error(L, "gpu_direct_rdma: device %d does not support GPUDirect RDMA with "
                           "virtual memory (dev.properties.gpu_direct_rdma_with_cuda_vmm_supported)",
                        e->ordinal);
  }
  v->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  v->prop.requestedHandleTypes = handle_values[st.handle];
  v->prop.location.type = loc;
  v->prop.location.id = loc == CU_MEM_LOCATION_TYPE_DEVICE ? d->ordinal
                      : loc == CU_MEM_LOCATION_TYPE_HOST_NUMA ? (int)st.numa : 0;
  v->prop.allocFlags.gpuDirectRDMACapable = (unsigned char)st.rdma;
  v->spread.n = ndev;
  for (int k = 0; k < ndev; k++) {
    cl_Device *e = lua_touserdata(L, devi + k);
    cl_device_activate(L, e);   /* its primary context: a release waits for it */
    v->spread.ordinal[k] = e->ordinal;
    v->spread.ctx[k] = e->ctx;
    v->spread.access[k].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    v->spread.access[k].location.id = e->ordinal;
    v->spread.access[k].flags = st.access ? CU_MEM_ACCESS_FLAGS_PROT_READ
                                          : CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (k > 0 && e->ordinal < 64)
      v->mr.peer_mask |= (uint64_t)1 << e->ordinal;   /* kernels there may use its buffers */
  }
  v->granularity_kind = st.granularity;
  cl_device_activate(L, d);
  v->granularity = spread_granularity(L, v, st.granularity);
  v->mr.dev = d;
  v->mr.closed = 0;
  lua_pushvalue(L, devi);
  lua_setiuservalue(L, -2, 1);
  return 1;
}

/* Push the setting key of v, or nothing (0). */
static int push_setting(lua_State *L, const Vmm *v, const char *key)
{
  CUmemLocationType loc = v->prop.location.type;
  int li = 0, hi = 0;
  while (location_values[li] != loc) li++;
  while (handle_values[hi] != v->prop.requestedHandleTypes) hi++;
  if (strcmp(key, "granularity") == 0)
    lua_pushinteger(L, (lua_Integer)v->granularity);
  else if (strcmp(key, "granularity_type") == 0)
    lua_pushstring(L, granularities[v->granularity_kind]);
  else if (strcmp(key, "location") == 0 || strcmp(key, "location_type") == 0)
    lua_pushstring(L, location_types[li]);
  else if (strcmp(key, "location_id") == 0)
    lua_pushinteger(L, v->prop.location.id);
  else if (strcmp(key, "numa_id") == 0 && loc == CU_MEM_LOCATION_TYPE_HOST_NUMA)
    lua_pushinteger(L, v->prop.location.id);
  else if (strcmp(key, "access") == 0 || strcmp(key, "self_access") == 0)
    lua_pushstring(L, v->spread.access[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READ ? "r" : "rw");
  else if (strcmp(key, "allocation_type") == 0)
    lua_pushstring(L, "pinned");
  else if (strcmp(key, "handle_type") == 0)
    lua_pushstring(L, handle_types[hi]);
  else if (strcmp(key, "gpu_direct_rdma") == 0)
    lua_pushboolean(L, v->prop.allocFlags.gpuDirectRDMACapable);
  else if (strcmp(key, "devices") == 0) {
    Spread sp = v->spread;      /* copied: the table's allocation may run a finalizer */
    lua_createtable(L, sp.n, 0);
    for (int k = 0; k < sp.n; k++) {
      lua_pushinteger(L, sp.ordinal[k]);
      lua_rawseti(L, -2, k + 1);
    }
  }
  else
    return 0;
  return 1;
}

static int push_field(lua_State *L, const cl_MemoryResource *mr, const char *key)
{
  return push_setting(L, mr->vmm, key);
}

/* cuda.virtual_memory_info(vmr) -> {granularity, granularity_type,
 * location (= location_type), location_id, numa_id, access (=
 * self_access), allocation_type, handle_type, gpu_direct_rdma}: the
 * resource's fields (vmr.handle_type ...) as one table. */
static int cuda_vmm_info(lua_State *L)
{
  static const char *const keys[] = {
    "granularity", "granularity_type", "location", "location_type", "location_id", "numa_id",
    "access", "self_access", "allocation_type", "handle_type", "gpu_direct_rdma", "devices", NULL
  };
  cl_MemoryResource *mr = cl_check_mr(L, 1);
  if (mr->vmm == NULL)
    return luaL_argerror(L, 1, "not a cuda.VirtualMemoryResource");
  const Vmm *v = mr->vmm;       /* plain data in the userdata at 1: a close leaves it */
  lua_createtable(L, 0, 12);
  for (int k = 0; keys[k]; k++)
    if (push_setting(L, v, keys[k]))
      lua_setfield(L, -2, keys[k]);
  return 1;
}


void cl_open_vmm(lua_State *L)
{
  cl_lifetimes_vmm_free(cl_vmm_free);
  static const luaL_Reg functions[] = {
    {"VirtualMemoryResource", cuda_vmm}, {"virtual_memory_info", cuda_vmm_info}, {NULL, NULL}
  };
  cl_setfuncs(L, functions);
  static const luaL_Reg methods[] = {{"grow", buffer_grow}, {NULL, NULL}};
  cl_add_methods(L, CL_BUFFER, methods);
}
