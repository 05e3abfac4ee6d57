/* SPDX-License-Identifier: MIT */
/* memory.c: the memory resources. allocate(nbytes, stream) -> Buffer.
 *
 *   device   a device memory pool: the device's default pool
 *            (dev.memory_resource) or an explicit one
 *            (cuda.DeviceMemoryResource); stream-ordered.
 *   pinned   page-locked host memory. By default from cuMemHostAlloc,
 *            because it feeds the copy engines at their full rate (55 GB/s
 *            on an H200); {pool = true} gives the pool-backed kind, a
 *            host-located pool. cuda.core's pooled pinned memory copied at
 *            7.5-13 GB/s there; ours, with device access granted, measured
 *            50-55 GB/s, but pools depend more on the driver and system.
 *   managed  cuMemAllocManaged, never more than the device has free.
 *   host     pageable, aligned malloc memory; needs no GPU.
 *
 * A resource's live buffers and bytes are counted here alone: up in
 * allocate, down in cl_mr_release, which a buffer calls when it closes.
 */
#include <stdlib.h>
#include <string.h>

#include "device.h"

#define HOST_ALIGNMENT 4096     /* page-aligned: registrable, vector-friendly */
#define DEFAULT_POOL_KEY "cuda.default_pools"   /* registry: ordinal -> MR */

const char *const cl_mr_kind_names[] = {"device", "pinned", "managed", "host", NULL};
static const char *const type_names[] = {
  "DeviceMemoryResource", "PinnedMemoryResource", "ManagedMemoryResource", "HostMemoryResource"
};

cl_MemoryResource *cl_check_mr(lua_State *L, int i)
{
  return cl_check_open(L, i, CL_MR);
}

/* A new resource with nuv user values; its device (at devi, an absolute
 * index, 0 for none) is kept alive in the first. */
static cl_MemoryResource *push_mr_uv(lua_State *L, cl_MRKind kind, int devi, int nuv)
{
  cl_MemoryResource *mr = lua_newuserdatauv(L, sizeof *mr, nuv);
  memset(mr, 0, sizeof *mr);
  mr->kind = kind;
  luaL_setmetatable(L, CL_MR);
  if (devi) {
    mr->dev = cl_check_device(L, devi);
    lua_pushvalue(L, devi);
    lua_setiuservalue(L, -2, 1);
  }
  return mr;
}

static cl_MemoryResource *push_mr(lua_State *L, cl_MRKind kind, int devi)
{
  return push_mr_uv(L, kind, devi, 1);
}

/* The device at i, an argument or an option's value pushed there: a
 * cuda.Device, an id, or (none) the current; pushed, its index. Unlike
 * cl_push_device_arg, a bad id is named without an argument number, as
 * an option's value has none, and a negative one is no device. */
static int device_arg(lua_State *L, int i)
{
  if (lua_type(L, i) == LUA_TNUMBER)
    cl_push_device(L, (int)cl_to_integer_range(L, i, INT32_MIN, INT32_MAX, "device id"));
  else if (lua_isnoneornil(L, i))
    cl_push_current_device(L);
  else {
    cl_check_device(L, i);
    lua_pushvalue(L, i);
  }
  return lua_gettop(L);
}

static void set_threshold(lua_State *L, CUmemoryPool pool, cuuint64_t bytes)
{
  CL_TRY(L, cuMemPoolSetAttribute, (pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &bytes));
}

/* dev.memory_resource: the default pool, one object per device. Its release
 * threshold is raised so freed memory stays in the pool across syncs:
 * otherwise every synchronization hands it back and the next allocation
 * pays for a fresh mapping. */
static void cl_push_default_mr(lua_State *L, int devi)
{
  cl_Device *d = cl_check_device(L, devi);
  devi = lua_absindex(L, devi);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, DEFAULT_POOL_KEY);
  if (lua_rawgeti(L, -1, d->ordinal) != LUA_TNIL) {
    lua_remove(L, -2);
    return;
  }
  lua_pop(L, 1);
  if (!d->memory_pools)
    luaL_error(L, "device %d does not support memory pools", d->ordinal);
  cl_MemoryResource *mr = push_mr(L, CL_MR_DEVICE, devi);
  cl_device_activate(L, d);
  CL_TRY(L, cuDeviceGetDefaultMemPool, (&mr->pool, d->handle));
  set_threshold(L, mr->pool, UINT64_MAX);
  lua_pushvalue(L, -1);
  lua_rawseti(L, -3, d->ordinal);
  lua_remove(L, -2);
}

/* dev.memory_resource (a field of Device, from here) */
static int device_memory_resource(lua_State *L)
{
  cl_push_default_mr(L, 1);
  return 1;
}

/* --- this process's shared pools ------------------------------------------------
 *
 * The H200's driver imports a pool of the importing process itself, and a
 * resource over it would destroy the pool its owner still uses (the
 * driver may hand back the very same pool). A descriptor cannot tell whose
 * pool it is (they are anonymous files), so cuda.ipc_pool_open compares
 * the pool it got with the shared pools this process made, and refuses. */
typedef struct OwnPool {
  struct OwnPool *next;
  CUmemoryPool pool;
} OwnPool;

static OwnPool *own_pools;

static void shared_pool_created(CUmemoryPool pool)
{
  OwnPool *o = malloc(sizeof *o);
  if (o == NULL)
    return;                     /* unknown, so not refused: the driver decides */
  *o = (OwnPool){own_pools, pool};
  own_pools = o;
}

static void shared_pool_destroyed(CUmemoryPool pool)
{
  for (OwnPool **o = &own_pools; *o;)
    if ((*o)->pool == pool) {
      OwnPool *gone = *o;
      *o = gone->next;
      free(gone);
    } else
      o = &(*o)->next;
}

int cl_shared_pool_is_own(CUmemoryPool pool)
{
  for (OwnPool *o = own_pools; o; o = o->next)
    if (o->pool == pool)
      return 1;
  return 0;
}

/* A pool at where/id; exportable: other processes can import it through a
 * POSIX file descriptor (cuMemPoolExportToShareableHandle). */
static CUmemoryPool create_pool(lua_State *L, CUmemLocationType where, int id, int exportable)
{
  CUmemPoolProps props;
  CUmemoryPool pool;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = where;
  props.location.id = id;
  CL_TRY(L, cuMemPoolCreate, (&pool, &props));
  return pool;
}

/* cuda.DeviceMemoryResource(dev [, {release_threshold = n, pool = true,
 * ipc = false}]): a new pool; pool = false: plain cuMemAlloc allocations,
 * which other processes can map (cuIpcGetMemHandle); ipc = true: a pool
 * other processes can import (ipc.c), so cuda.mpi sends its buffers
 * without staging. */
static int cuda_device_mr(lua_State *L)
{
  static const char *const options[] = {"release_threshold", "pool", "ipc", NULL};
  cl_check_options(L, 2, options);
  lua_Integer threshold = cl_opt_integer(L, 2, "release_threshold", 0);
  luaL_argcheck(L, threshold >= 0, 2, "release_threshold must be >= 0");
  int pooled = cl_opt_boolean(L, 2, "pool", 1);
  int exportable = cl_opt_boolean(L, 2, "ipc", 0);
  if (exportable && !pooled)
    luaL_argerror(L, 2, "ipc = true is a pool's option: plain allocations (pool = false) are exported as they are");
  int devi = device_arg(L, 1);
  cl_Device *d = cl_check_device(L, devi);
  cl_MemoryResource *mr = push_mr(L, CL_MR_DEVICE, devi);
  cl_device_activate(L, d);     /* after allocating: a finalizer may switch contexts */
  if (!pooled)
    return 1;
  mr->closed = 1;  /* until the pool exists */
  mr->pool = create_pool(L, CU_MEM_LOCATION_TYPE_DEVICE, d->ordinal, exportable);
  mr->owns_pool = 1;
  mr->ipc_pool = exportable;
  if (exportable)
    shared_pool_created(mr->pool);
  mr->closed = 0;
  set_threshold(L, mr->pool, (cuuint64_t)threshold);
  return 1;
}

/* cuda.PinnedMemoryResource([{pool = false, device = dev}]) */
static int cuda_pinned_mr(lua_State *L)
{
  static const char *const options[] = {"pool", "device", "numa_id", NULL};
  cl_check_options(L, 1, options);
  int pooled = cl_opt_boolean(L, 1, "pool", 0);
  /* a pool on a host NUMA node */
  int numa = cl_numa_option(L, 1, &pooled);
  if (!lua_isnoneornil(L, 1))
    lua_getfield(L, 1, "device");
  else
    lua_pushnil(L);
  int devi = device_arg(L, lua_gettop(L));
  cl_Device *d = cl_check_device(L, devi);
  cl_MemoryResource *mr = push_mr(L, CL_MR_PINNED, devi);
  cl_device_activate(L, d);
  if (pooled) {
    mr->closed = 1;
    mr->pool = create_pool(L, numa >= 0 ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_HOST,
                           numa >= 0 ? numa : 0, 0);
    if (numa >= 0)              /* mr.numa_id reads it back */
      mr->location = (CUmemLocation){CU_MEM_LOCATION_TYPE_HOST_NUMA, numa};
    mr->owns_pool = 1;
    mr->closed = 0;
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, d->ordinal},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CL_TRY(L, cuMemPoolSetAccess, (mr->pool, &access, 1));
    set_threshold(L, mr->pool, UINT64_MAX);
  }
  return 1;
}

/* A managed resource's preferred location, as cuda.core's
 * ManagedMemoryResourceOptions give it: preferred_location (at li) read
 * by preferred_location_type (at ti). Without a type, a device (or its
 * ordinal >= 0), -1 or "host" for the host, nil for none; "device": a
 * device or ordinal; "host": no location; "host_numa": a node id >= 0, or
 * nil for the device's own (at devi). Type 0 (invalid): no preference. */
static CUmemLocation preferred_location(lua_State *L, int li, int ti, int devi)
{
  static const char *const types[] = {"device", "host", "host_numa", NULL};
  CUmemLocation loc = {CU_MEM_LOCATION_TYPE_INVALID, 0};
  int type = lua_isnil(L, ti) ? -1 : luaL_checkoption(L, ti, NULL, types);
  int is_host = lua_type(L, li) == LUA_TSTRING && strcmp(lua_tostring(L, li), "host") == 0;
  int is_dev = luaL_testudata(L, li, CL_DEVICE) != NULL;
  if (lua_isnil(L, li) && type < 0)
    return loc;
  if (type == 1 || (type < 0 && is_host)) {
    if (type == 1 && !lua_isnil(L, li))
      luaL_error(L, "preferred_location_type = \"host\" takes no preferred_location");
    loc.type = CU_MEM_LOCATION_TYPE_HOST;
    return loc;
  }
  if (type == 2 && lua_isnil(L, li)) {   /* the device's own node */
    int node = -1;
    CL_TRY(L, cuDeviceGetAttribute, (&node, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID,
                                     cl_check_device(L, devi)->handle));
    if (node < 0)
      luaL_error(L, "preferred_location_type = \"host_numa\": the device has no host NUMA node "
                    "(dev.host_numa_id is -1): give preferred_location");
    loc = (CUmemLocation){CU_MEM_LOCATION_TYPE_HOST_NUMA, node};
    return loc;
  }
  if (is_dev && type != 2) {
    loc = (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, ((cl_Device *)lua_touserdata(L, li))->ordinal};
    return loc;
  }
  if (lua_type(L, li) != LUA_TNUMBER)
    luaL_error(L, "preferred_location must be %s, got %s",
               type == 2 ? "a host NUMA node id" : "a cuda.Device, a device id, -1 or \"host\"",
               luaL_typename(L, li));
  lua_Integer id = cl_to_integer_range(L, li, type < 0 ? -1 : 0, INT32_MAX, "preferred_location");
  if (type == 2)
    loc = (CUmemLocation){CU_MEM_LOCATION_TYPE_HOST_NUMA, (int)id};
  else if (id < 0)
    loc.type = CU_MEM_LOCATION_TYPE_HOST;
  else {
    cl_push_device(L, (int)id);   /* an ordinal the system lacks raises here */
    lua_pop(L, 1);
    loc = (CUmemLocation){CU_MEM_LOCATION_TYPE_DEVICE, (int)id};
  }
  return loc;
}

/* cuda.ManagedMemoryResource([{device = dev, preferred_location = p,
 * preferred_location_type = t}]) */
static int cuda_managed_mr(lua_State *L)
{
  static const char *const options[] = {
    "device", "preferred_location", "preferred_location_type", NULL
  };
  lua_settop(L, 1);
  cl_check_options(L, 1, options);
  int has = !lua_isnil(L, 1);
  for (int k = 0; k < 3; k++)   /* 2: device, 3: location, 4: its type */
    has ? (void)lua_getfield(L, 1, options[k]) : lua_pushnil(L);
  int devi = device_arg(L, 2);
  CUmemLocation loc = preferred_location(L, 3, 4, devi);
  cl_device_activate(L, cl_check_device(L, devi));
  cl_MemoryResource *mr = push_mr(L, CL_MR_MANAGED, devi);
  mr->location = loc;
  return 1;
}

/* cuda.HostMemoryResource(): needs no driver. */
static int cuda_host_mr(lua_State *L)
{
  push_mr(L, CL_MR_HOST, 0);
  return 1;
}

/* --- allocate and release ------------------------------------------------- */

static int raise_oom(lua_State *L, CUresult r, const char *api, size_t n)
{
  return cl_raise_detail(L, r, api, "asked for %I bytes", (lua_Integer)n);
}

static CUdeviceptr allocate_managed(lua_State *L, size_t n)
{
  size_t free_bytes = 0, total = 0;
  CUdeviceptr p = 0;
  CL_TRY(L, cuMemGetInfo, (&free_bytes, &total));
  /* Asking for more managed memory than the device has can hang the GPU. */
  if (n > free_bytes)
    return raise_oom(L, CUDA_ERROR_OUT_OF_MEMORY, "cuMemAllocManaged", n);
  CUresult r = CL_CALL(cuMemAllocManaged, (&p, n, CU_MEM_ATTACH_GLOBAL));
  if (r != CUDA_SUCCESS)
    raise_oom(L, r, "cuMemAllocManaged", n);
  return p;
}

int cl_numa_option(lua_State *L, int idx, int *pooled)
{
  if (lua_isnoneornil(L, idx))
    return -1;
  int explicit_pool = lua_getfield(L, idx, "pool") != LUA_TNIL;
  lua_pop(L, 1);
  lua_Integer numa = cl_opt_integer_range(L, idx, "numa_id", -1, 0, INT32_MAX);
  if (numa < 0)
    return -1;
  luaL_argcheck(L, *pooled || !explicit_pool, idx, "numa_id makes a pool: pool = false contradicts it");
  *pooled = 1;
  return (int)numa;
}

/* A managed resource's preferred location, advised on a new allocation;
 * freed again when the driver refuses (a node the system lacks). */
static void advise_preferred(lua_State *L, const cl_MemoryResource *mr, CUdeviceptr p, size_t n)
{
  if (mr->location.type == CU_MEM_LOCATION_TYPE_INVALID)
    return;
  CUresult r = CL_CALL(cuMemAdvise, (p, n, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, mr->location));
  if (r != CUDA_SUCCESS) {
    /* cuMemFree may wait for the device (so for host functions outstanding)
     * and is unsafe during a capture: deferred as any release */
    cl_release(CL_FREE_MANAGED, NULL, p, NULL);
    cl_raise_detail(L, r, "cuMemAdvise", " (the resource's preferred_location)");
  }
}

static CUdeviceptr allocate(lua_State *L, cl_MemoryResource *mr, size_t n, cl_Stream *s)
{
  CUdeviceptr p = 0;
  CUresult r;
  if (mr->kind == CL_MR_HOST) {
    void *h = NULL;
    if (posix_memalign(&h, HOST_ALIGNMENT, n) != 0)
      raise_oom(L, CUDA_ERROR_OUT_OF_MEMORY, "posix_memalign", n);
    return (CUdeviceptr)(uintptr_t)h;
  }
  cl_device_activate(L, mr->dev);
  if (mr->ops && mr->ops->allocate)
    return mr->ops->allocate(L, mr, n);
  if (mr->pool) {
    r = CL_CALL(cuMemAllocFromPoolAsync, (&p, n, mr->pool, s ? s->handle : NULL));
    if (r != CUDA_SUCCESS)
      raise_oom(L, r, "cuMemAllocFromPoolAsync", n);
  } else if (mr->kind == CL_MR_PINNED) {
    void *h = NULL;
    r = CL_CALL(cuMemHostAlloc, (&h, n, CU_MEMHOSTALLOC_PORTABLE));
    if (r != CUDA_SUCCESS)
      raise_oom(L, r, "cuMemHostAlloc", n);
    p = (CUdeviceptr)(uintptr_t)h;
  } else if (mr->kind == CL_MR_DEVICE) {
    r = CL_CALL(cuMemAlloc, (&p, n));
    if (r != CUDA_SUCCESS)
      raise_oom(L, r, "cuMemAlloc", n);
  } else {
    p = allocate_managed(L, n);
    advise_preferred(L, mr, p, n);
  }
  return p;
}

CUdeviceptr cl_mr_allocate(lua_State *L, cl_MemoryResource *mr, size_t n, cl_Stream *s)
{
  CUdeviceptr p = allocate(L, mr, n, s);
  mr->live_bytes += n;
  mr->live_buffers++;
  return p;
}

/* A closed resource's pool is destroyed once no buffer needs it. */
static void destroy_pool(cl_MemoryResource *mr)
{
  if (mr->owns_pool)             /* a shared one stays own until made (shared_pool_destroyed) */
    cl_release(CL_DESTROY_POOL, mr->dev ? mr->dev->ctx : NULL, 0, mr->pool);
  mr->pool = NULL;
  mr->close_pending = 0;
}

static void free_memory(cl_MemoryResource *mr, CUdeviceptr p, CUstream s, int stream_known)
{
  CUcontext ctx = mr->dev ? mr->dev->ctx : NULL;
  if (mr->foreign) {            /* its owner frees it: tell the owner, once */
    if (mr->foreign->wait && ctx)
      cl_release(CL_RELEASE_FOREIGN, ctx, p, (CUmemoryPool)(void *)mr->foreign);
    else
      mr->foreign->release(mr->foreign);
    return;
  }
  switch (mr->kind) {
  case CL_MR_HOST:
    free((void *)(uintptr_t)p);
    return;
  case CL_MR_MANAGED:
    cl_release(CL_FREE_MANAGED, ctx, p, NULL);
    return;
  default:
    break;
  }
  if (mr->vmm) {
    cl_release(CL_FREE_VIRTUAL, ctx, p, NULL);
    return;
  }
  if (mr->ipc_opened == CL_IPC_MAPPED)
    cl_release(CL_CLOSE_IPC, ctx, p, NULL);
  else if (mr->ipc_opened == CL_IPC_POOL)   /* done before the exporter frees it, as the driver asks */
    cl_release(CL_FREE_SYNCED, ctx, p, NULL);
  else if (mr->pool && stream_known)
    CL_CALL(cuMemFreeAsync, (p, s));
  else if (mr->pool)
    cl_release(CL_FREE_SYNCED, ctx, p, NULL);
  else if (mr->kind == CL_MR_DEVICE)
    cl_release(CL_FREE_PLAIN, ctx, p, NULL);
  else
    cl_release(CL_FREE_PINNED, ctx, p, NULL);
}

cl_MemoryResource *cl_push_ipc_mr(lua_State *L, int devi, int how)
{
  cl_MemoryResource *mr = push_mr(L, CL_MR_DEVICE, devi);
  mr->ipc_opened = how;
  return mr;
}

cl_MemoryResource *cl_push_foreign_mr(lua_State *L, cl_MRKind kind, int devi)
{
  return push_mr_uv(L, kind, devi ? lua_absindex(L, devi) : 0, 2);
}

void cl_mr_release(cl_MemoryResource *mr, CUdeviceptr p, size_t size, CUstream s,
                   int stream_known)
{
  mr->live_bytes -= size;
  mr->live_buffers--;
  free_memory(mr, p, s, stream_known);
  if (mr->close_pending && mr->live_buffers == 0)
    destroy_pool(mr);
}

void cl_mr_hold_for_graph(cl_MemoryResource *mr)
{
  mr->graph_held++;
}

void cl_mr_release_graph_held(cl_MemoryResource *mr, CUdeviceptr p, size_t size)
{
  mr->graph_held--;
  cl_mr_release(mr, p, size, NULL, 0);
}

/* --- peer access ------------------------------------------------------------- */

/* The bit of the device at i (a cuda.Device or an id) in a peer mask. */
static uint64_t peer_bit(lua_State *L, int i, const cl_Device *owner)
{
  const cl_Device *d = cl_check_device(L, device_arg(L, i));
  lua_pop(L, 1);
  if (d->ordinal >= 64)
    luaL_error(L, "peer_accessible_by: device %d: at most 64 devices are supported", d->ordinal);
  if (d == owner)
    return 0;   /* the owner always has access; cuMemPoolSetAccess cannot change it */
  int can = 0;
  CL_TRY(L, cuDeviceCanAccessPeer, (&can, d->handle, owner->handle));
  if (!can)
    luaL_error(L, "peer_accessible_by: device %d cannot access the memory of device %d "
                  "(dev:can_access_peer is false)", d->ordinal, owner->ordinal);
  return (uint64_t)1 << d->ordinal;
}

/* Grant read-write access to the devices of want that mr has not, and
 * revoke it from those mr has that want lacks, in one driver call. */
static void set_pool_access(lua_State *L, cl_MemoryResource *mr, uint64_t want)
{
  CUmemAccessDesc desc[64];
  size_t n = 0;
  uint64_t change = want ^ mr->peer_mask;
  for (int id = 0; id < 64; id++)
    if (change >> id & 1) {
      desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      desc[n].location.id = id;
      desc[n].flags = (want >> id & 1) ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                                       : CU_MEM_ACCESS_FLAGS_PROT_NONE;
      n++;
    }
  if (n > 0)
    CL_TRY(L, cuMemPoolSetAccess, (mr->pool, desc, n));
  mr->peer_mask = want;
}

/* mr.peer_accessible_by = {dev | id, ...}: the devices, besides the
 * pool's own, whose kernels may use its buffers; devices no longer listed
 * lose access. The owner in the list is accepted and not reported back. */
static int mr_newindex(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);
  cl_MemoryResource *mr = cl_check_mr(L, 1);
  if (strcmp(key, "peer_accessible_by") != 0)
    return luaL_error(L, "cannot set '%s' of a cuda.MemoryResource", key);
  if (mr->kind != CL_MR_DEVICE || mr->pool == NULL)
    return luaL_error(L, "peer_accessible_by: a cuda.%s is not a device memory pool; only "
                         "device pools grant access to other devices", type_names[mr->kind]);
  luaL_argexpected(L, lua_istable(L, 3), 3, "a list of devices or device ids");
  uint64_t want = 0;
  lua_Integer n = (lua_Integer)lua_rawlen(L, 3);
  for (lua_Integer k = 1; k <= n; k++) {
    lua_rawgeti(L, 3, k);
    want |= peer_bit(L, lua_gettop(L), mr->dev);
    lua_pop(L, 1);
  }
  mr = cl_check_mr(L, 1);   /* device lookups can run finalizers */
  cl_device_activate(L, mr->dev);
  set_pool_access(L, mr, want);
  return 0;
}

static void push_peer_list(lua_State *L, uint64_t mask)
{
  lua_newtable(L);
  for (int id = 0; id < 64; id++)
    if (mask >> id & 1) {
      lua_pushinteger(L, id);
      lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    }
}

/* --- the resource itself --------------------------------------------------- */

static int is_default_pool(const cl_MemoryResource *mr)
{
  return mr->kind == CL_MR_DEVICE && mr->pool && !mr->owns_pool;
}

static int mr_close(lua_State *L)
{
  cl_MemoryResource *mr = luaL_checkudata(L, 1, CL_MR);
  if (mr->closed)
    return 0;
  if (is_default_pool(mr))
    return luaL_error(L, "the device's default pool (dev.memory_resource) cannot be closed");
  if (mr->live_buffers > mr->graph_held)
    return luaL_error(L, "cannot close %s: %I of its buffers are still open",
                      type_names[mr->kind], (lua_Integer)(mr->live_buffers - mr->graph_held));
  mr->closed = 1;
  if (mr->live_buffers > 0)
    mr->close_pending = 1;      /* graphs still use buffers closed for Lua */
  else
    destroy_pool(mr);
  return 0;
}

/* Finalizer. Buffers keep their resource alive, so the collector finds none
 * open here; a resource that still has open buffers is being finalized by
 * hand (getmetatable(mr).__gc(mr)), and keeps its memory for them. Buffers
 * closed for Lua that a graph (or an export, or a pending MPI request)
 * still holds do not keep it open: a graph made before the resource is
 * finalized after it (finalizers run newest first, at exit and in one
 * cycle alike), and the pool then goes with that graph's last buffer
 * (close_pending), as after mr:close(). The driver owns a device's
 * default pool: it is never closed. */
static int mr_gc(lua_State *L)
{
  cl_MemoryResource *mr = luaL_checkudata(L, 1, CL_MR);
  if (mr->closed || mr->live_buffers > mr->graph_held || is_default_pool(mr))
    return 0;
  return mr_close(L);
}

/* mr:trim([keep_bytes]): give unused pool memory back to the system. */
static int mr_trim(lua_State *L)
{
  cl_MemoryResource *mr = cl_check_mr(L, 1);
  lua_Integer keep = lua_isnoneornil(L, 2) ? 0
                   : cl_check_integer_range(L, 2, 0, LUA_MAXINTEGER, "bytes to keep");
  if (mr->pool)
    CL_TRY(L, cuMemPoolTrimTo, (mr->pool, (size_t)keep));
  return 0;
}

/* Push a cuuint64_t pool attribute: an integer up to 2^63 - 1; above it a
 * float, and UINT64_MAX ("no limit", the release threshold cudalua raises
 * default pools to) math.huge. */
static void push_pool_attribute(lua_State *L, cl_MemoryResource *mr, CUmemPool_attribute a)
{
  cuuint64_t v = 0;
  CL_TRY(L, cuMemPoolGetAttribute, (mr->pool, a, &v));
  if (v <= (cuuint64_t)LUA_MAXINTEGER)
    lua_pushinteger(L, (lua_Integer)v);
  else
    lua_pushnumber(L, v == UINT64_MAX ? (lua_Number)HUGE_VAL : (lua_Number)v);
}

static int mr_tostring(lua_State *L)
{
  cl_MemoryResource *mr = luaL_checkudata(L, 1, CL_MR);
  if (mr->closed)
    return cl_push_closed_name(L, "cuda.MemoryResource");
  if (mr->dev)
    lua_pushfstring(L, "cuda.%s(device %d%s, %I live buffers)", type_names[mr->kind],
                    mr->dev->ordinal, mr->pool ? ", pool" : "", (lua_Integer)mr->live_buffers);
  else
    lua_pushfstring(L, "cuda.%s(%I live buffers)", type_names[mr->kind],
                    (lua_Integer)mr->live_buffers);
  return 1;
}

static int mr_fields(lua_State *L)
{
  const char *key = luaL_checkstring(L, 2);
  cl_MemoryResource *mr = cl_check_mr(L, 1);
  if (strcmp(key, "kind") == 0)
    lua_pushstring(L, cl_mr_kind_names[mr->kind]);
  else if (strcmp(key, "is_device_accessible") == 0)
    lua_pushboolean(L, cl_mr_device_accessible(mr));
  else if (strcmp(key, "is_host_accessible") == 0)
    lua_pushboolean(L, cl_mr_host_accessible(mr));
  else if (strcmp(key, "device_id") == 0)
    mr->dev ? lua_pushinteger(L, mr->dev->ordinal) : lua_pushnil(L);
  else if (strcmp(key, "device") == 0)
    lua_getiuservalue(L, 1, 1);
  else if (strcmp(key, "is_pool") == 0)
    lua_pushboolean(L, mr->pool != NULL);
  else if (strcmp(key, "ipc") == 0)
    lua_pushboolean(L, mr->ipc_pool);
  else if (strcmp(key, "used") == 0)
    mr->pool ? push_pool_attribute(L, mr, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
             : lua_pushinteger(L, (lua_Integer)mr->live_bytes);
  else if (strcmp(key, "reserved") == 0)
    mr->pool ? push_pool_attribute(L, mr, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
             : lua_pushinteger(L, (lua_Integer)mr->live_bytes);
  else if (strcmp(key, "release_threshold") == 0 && mr->pool)
    push_pool_attribute(L, mr, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD);
  else if (strcmp(key, "live_buffers") == 0)
    lua_pushinteger(L, (lua_Integer)mr->live_buffers);
  else if (strcmp(key, "peer_accessible_by") == 0)
    push_peer_list(L, mr->peer_mask);
  else if (strcmp(key, "numa_id") == 0 && mr->kind == CL_MR_PINNED &&
           mr->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA)
    lua_pushinteger(L, mr->location.id);
  else if (strcmp(key, "preferred_location") == 0 && mr->kind == CL_MR_MANAGED &&
           mr->location.type != CU_MEM_LOCATION_TYPE_INVALID &&
           mr->location.type != CU_MEM_LOCATION_TYPE_HOST)
    lua_pushinteger(L, mr->location.id);
  else if (mr->ops && mr->ops->push_field && mr->ops->push_field(L, mr, key))
    ;                           /* a virtual-memory resource's settings (vmm.c) */
  else if (strcmp(key, "preferred_location_type") == 0 && mr->kind == CL_MR_MANAGED &&
           mr->location.type != CU_MEM_LOCATION_TYPE_INVALID)
    lua_pushstring(L, mr->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? "device"
                    : mr->location.type == CU_MEM_LOCATION_TYPE_HOST ? "host" : "host_numa");
  else
    lua_pushnil(L);
  return 1;
}

void cl_open_memory(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", mr_gc}, {"__close", mr_close}, {"__tostring", mr_tostring},
    {"__newindex", mr_newindex}, {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"close", mr_close}, {"trim", mr_trim}, {NULL, NULL}
  };
  static const luaL_Reg functions[] = {
    {"DeviceMemoryResource", cuda_device_mr}, {"PinnedMemoryResource", cuda_pinned_mr},
    {"ManagedMemoryResource", cuda_managed_mr}, {"HostMemoryResource", cuda_host_mr},
    {NULL, NULL}
  };
  cl_lifetimes_pool_destroyed(shared_pool_destroyed);
  static const luaL_Reg device_fields[] = {
    {"memory_resource", device_memory_resource}, {NULL, NULL}
  };
  cl_new_type(L, CL_MR, meta, methods, mr_fields);
  cl_add_fields(L, CL_DEVICE, device_fields);
  luaL_setfuncs(L, functions, 0);
}
