/* SPDX-License-Identifier: MIT */
/* device.c: cuda.Device, one object per device id, and primary contexts.
 *
 * A device's primary context is retained on first use and released when
 * the Lua state closes, by a sentinel created in luaopen_cuda before any
 * handle: Lua runs finalizers in reverse order of creation, so the sentinel
 * is finalized after every stream, buffer and kernel that used a context. */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "hostfunc.h"

#define DEVICES_KEY "cuda.devices"      /* registry: ordinal -> Device */
#define CURRENT_KEY "cuda.current"      /* registry: the current Device */
#define SENTINEL    "cuda.ContextSentinel"

static int attribute(lua_State *L, cl_Device *d, CUdevice_attribute a)
{
  int v = 0;
  CL_TRY(L, cuDeviceGetAttribute, (&v, a, d->handle));
  return v;
}

static void device_init(lua_State *L, cl_Device *d, int ordinal)
{
  memset(d, 0, sizeof *d);
  d->ordinal = ordinal;
  CL_TRY(L, cuDeviceGet, (&d->handle, ordinal));
  CL_TRY(L, cuDeviceGetName, (d->name, sizeof d->name, d->handle));
  d->cc_major = attribute(L, d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  d->cc_minor = attribute(L, d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  d->sm_count = attribute(L, d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  d->max_shmem_optin = attribute(L, d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  d->cluster_launch = attribute(L, d, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH);
  d->cooperative_launch = attribute(L, d, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
  d->concurrent_managed_access = attribute(L, d, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
  d->memory_pools = attribute(L, d, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
  d->pageable_memory_access = attribute(L, d, CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS);
}

cl_Device *cl_push_device(lua_State *L, int ordinal)
{
  lua_getfield(L, LUA_REGISTRYINDEX, DEVICES_KEY);
  if (lua_rawgeti(L, -1, ordinal) != LUA_TNIL) {
    lua_remove(L, -2);
    return lua_touserdata(L, -1);
  }
  lua_pop(L, 1);
  cl_driver_load(L);
  int count = 0;
  CL_TRY(L, cuDeviceGetCount, (&count));
  if (count == 0)
    cl_raise_unavailable(L, "no CUDA device found: the NVIDIA driver is loaded but reports no GPU");
  if (ordinal < 0 || ordinal >= count)
    luaL_error(L, "no CUDA device %d: this machine has %d (ids 0 to %d)", ordinal,
               count, count - 1);
  cl_Device *d = lua_newuserdatauv(L, sizeof *d, 1);
  device_init(L, d, ordinal);
  luaL_setmetatable(L, CL_DEVICE);
  lua_pushvalue(L, -1);
  lua_rawseti(L, -3, ordinal);
  lua_remove(L, -2);
  return d;
}

cl_Device *cl_check_device(lua_State *L, int i)
{
  return luaL_checkudata(L, i, CL_DEVICE);
}

/* --- the launcher's node-local rank ----------------------------------------- */

/* The variables launchers set to a process' rank among the job's processes
 * on its node, most specific first: SLURM_LOCALID comes last because every
 * rank that Open MPI's mpirun starts inside a Slurm job inherits the batch
 * step's SLURM_LOCALID (0) from the daemon srun started. */
static const char *const local_rank_variables[] = {
  "OMPI_COMM_WORLD_LOCAL_RANK",   /* Open MPI's mpirun and prterun */
  "MV2_COMM_WORLD_LOCAL_RANK",    /* MVAPICH */
  "MPI_LOCALRANKID",              /* Hydra: MPICH's and Intel MPI's mpiexec */
  "PMI_LOCAL_RANK",               /* PMI launchers that set it */
  "PALS_LOCAL_RANKID",            /* HPE Cray PALS */
  "SLURM_LOCALID",                /* srun */
  NULL
};

/* The first of those variables that holds a rank (a whole number >= 0)
 * and its name; -1 where none does: a malformed value is not a rank. */
static int launcher_local_rank(const char **variable)
{
  for (int k = 0; local_rank_variables[k]; k++) {
    const char *text = getenv(local_rank_variables[k]);
    char *end = NULL;
    if (!text || !isdigit((unsigned char)text[0]))
      continue;
    long rank = strtol(text, &end, 10);
    if (*end == '\0' && rank >= 0 && rank <= INT_MAX) {
      if (variable)
        *variable = local_rank_variables[k];
      return (int)rank;
    }
  }
  return -1;
}

/* The device a process uses when nobody chose one: under a launcher, the
 * node-local rank's GPU (ranks wrap around the node's devices), else 0. */
static int default_ordinal(lua_State *L)
{
  int rank = launcher_local_rank(NULL);
  if (rank <= 0)
    return 0;
  cl_driver_load(L);
  int count = 0;
  CL_TRY(L, cuDeviceGetCount, (&count));
  return count > 0 ? rank % count : 0;
}

/* cuda.launcher_local_rank() -> rank, variable | nil */
static int cuda_launcher_local_rank(lua_State *L)
{
  const char *variable = NULL;
  int rank = launcher_local_rank(&variable);
  if (rank < 0)
    return 0;
  lua_pushinteger(L, rank);
  lua_pushstring(L, variable);
  return 2;
}

cl_Device *cl_push_current_device(lua_State *L)
{
  if (lua_getfield(L, LUA_REGISTRYINDEX, CURRENT_KEY) != LUA_TNIL)
    return lua_touserdata(L, -1);
  lua_pop(L, 1);
  return cl_push_device(L, default_ordinal(L));
}

cl_Device *cl_push_device_arg(lua_State *L, int i)
{
  if (lua_isnoneornil(L, i))
    return cl_push_current_device(L);
  if (lua_type(L, i) == LUA_TNUMBER)
    return cl_push_device(L, (int)cl_check_integer_range(L, i, 0, INT32_MAX, "device id"));
  cl_Device *d = cl_check_device(L, i);
  lua_pushvalue(L, i);
  return d;
}

void cl_device_activate_slow(lua_State *L, cl_Device *d)
{
  if (d->ctx == NULL)
    CL_TRY(L, cuDevicePrimaryCtxRetain, (&d->ctx, d->handle));
  CL_TRY(L, cuCtxSetCurrent, (d->ctx));
  cl_current_ctx = d->ctx;
}

/* --- cuda.Device(id) and its methods -------------------------------------- */

static int cuda_device(lua_State *L)
{
  if (lua_isnoneornil(L, 1)) {
    cl_push_current_device(L);
    return 1;
  }
  lua_Integer id = luaL_checkinteger(L, 1);
  luaL_argcheck(L, id >= 0, 1, "device id must be >= 0");
  luaL_argcheck(L, id <= 0xffff, 1, "no CUDA device has an id that large");
  cl_push_device(L, (int)id);
  return 1;
}

static int device_set_current(lua_State *L)
{
  cl_Device *d = cl_check_device(L, 1);
  cl_device_activate(L, d);
  lua_pushvalue(L, 1);
  lua_setfield(L, LUA_REGISTRYINDEX, CURRENT_KEY);
  lua_settop(L, 1);
  return 1;
}

static int device_sync(lua_State *L)
{
  cl_Device *d = cl_check_device(L, 1);
  cl_device_activate(L, d);
  cl_sync(L, cl_device_wait, d, "cuCtxSynchronize");
  return 0;
}

/* dev:trim_graph_memory(): give the memory graphs cached and no longer
 * use back to the OS (cuDeviceGraphMemTrim) */
static int device_trim_graph_memory(lua_State *L)
{
  cl_Device *d = cl_check_device(L, 1);
  cl_device_activate(L, d);
  CL_TRY(L, cuDeviceGraphMemTrim, (d->handle));
  return 0;
}

/* dev.graph_mem_used, _reserved and their _high marks: bytes of graph
 * memory (allocation nodes) in use and held (cuDeviceGetGraphMemAttribute) */
static int push_graph_mem(lua_State *L, cl_Device *d, const char *key)
{
  static const char *const names[] = {
    "graph_mem_used", "graph_mem_used_high", "graph_mem_reserved", "graph_mem_reserved_high", NULL
  };
  static const CUgraphMem_attribute attrs[] = {
    CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
    CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH
  };
  for (int k = 0; names[k]; k++)
    if (strcmp(key, names[k]) == 0) {
      cuuint64_t v = 0;
      cl_device_activate(L, d);
      CL_TRY(L, cuDeviceGetGraphMemAttribute, (d->handle, attrs[k], &v));
      lua_pushinteger(L, v > (cuuint64_t)LUA_MAXINTEGER ? LUA_MAXINTEGER : (lua_Integer)v);
      return 1;
    }
  return 0;
}

/* dev:can_access_peer(other): whether kernels on dev can use other's
 * memory once granted (mr.peer_accessible_by); a device can its own. */
static int device_can_access_peer(lua_State *L)
{
  cl_Device *d = cl_check_device(L, 1);
  cl_Device *other = lua_type(L, 2) == LUA_TNUMBER
    ? cl_push_device(L, (int)cl_to_integer_range(L, 2, INT32_MIN, INT32_MAX, "device id"))
    : cl_check_device(L, 2);
  int can = 1;
  if (other != d)
    CL_TRY(L, cuDeviceCanAccessPeer, (&can, d->handle, other->handle));
  lua_pushboolean(L, can);
  return 1;
}

static int device_memory_info(lua_State *L)
{
  cl_Device *d = cl_check_device(L, 1);
  size_t free_bytes = 0, total = 0;
  cl_device_activate(L, d);
  CL_TRY(L, cuMemGetInfo, (&free_bytes, &total));
  lua_pushinteger(L, (lua_Integer)free_bytes);
  lua_pushinteger(L, (lua_Integer)total);
  return 2;
}

static int device_tostring(lua_State *L)
{
  cl_Device *d = cl_check_device(L, 1);
  lua_pushfstring(L, "cuda.Device(%d, %s, sm_%d%d)", d->ordinal, d->name, d->cc_major,
                  d->cc_minor);
  return 1;
}

static int device_eq(lua_State *L)
{
  cl_Device *a = luaL_testudata(L, 1, CL_DEVICE), *b = luaL_testudata(L, 2, CL_DEVICE);
  lua_pushboolean(L, a && b && a->ordinal == b->ordinal);
  return 1;
}

/* --- attributes ----------------------------------------------------------- */

static int cc_tostring(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "major");
  lua_getfield(L, 1, "minor");
  lua_pushfstring(L, "%d.%d", (int)lua_tointeger(L, -2), (int)lua_tointeger(L, -1));
  return 1;
}

static lua_Integer cc_value(lua_State *L, int i)
{
  luaL_checktype(L, i, LUA_TTABLE);
  lua_getfield(L, i, "major");
  lua_getfield(L, i, "minor");
  lua_Integer v = lua_tointeger(L, -2) * 100 + lua_tointeger(L, -1);
  lua_pop(L, 2);
  return v;
}

static int cc_eq(lua_State *L) { lua_pushboolean(L, cc_value(L, 1) == cc_value(L, 2)); return 1; }
static int cc_lt(lua_State *L) { lua_pushboolean(L, cc_value(L, 1) < cc_value(L, 2)); return 1; }
static int cc_le(lua_State *L) { lua_pushboolean(L, cc_value(L, 1) <= cc_value(L, 2)); return 1; }

static void push_compute_capability(lua_State *L, cl_Device *d)
{
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, d->cc_major);
  lua_setfield(L, -2, "major");
  lua_pushinteger(L, d->cc_minor);
  lua_setfield(L, -2, "minor");
  luaL_setmetatable(L, "cuda.ComputeCapability");
}

static void push_dim3(lua_State *L, cl_Device *d, CUdevice_attribute x)
{
  lua_createtable(L, 3, 0);
  for (int k = 0; k < 3; k++) {
    lua_pushinteger(L, attribute(L, d, (CUdevice_attribute)(x + k)));
    lua_rawseti(L, -2, k + 1);
  }
}

static void push_uuid(lua_State *L, cl_Device *d)
{
  CUuuid u;
  char s[48];
  size_t n = 0;
  CL_TRY(L, cuDeviceGetUuid, (&u, d->handle));
  for (int k = 0; k < 16; k++) {
    if (k == 4 || k == 6 || k == 8 || k == 10)
      s[n++] = '-';
    n += (size_t)snprintf(s + n, sizeof s - n, "%02x", (unsigned char)u.bytes[k]);
  }
  lua_pushfstring(L, "GPU-%s", s);
}

static void push_pci_bus_id(lua_State *L, cl_Device *d)
{
  char bus[32];
  CL_TRY(L, cuDeviceGetPCIBusId, (bus, sizeof bus, d->handle));
  lua_pushstring(L, bus);
}

static void push_total_memory(lua_State *L, cl_Device *d)
{
  size_t total = 0;
  CL_TRY(L, cuDeviceTotalMem, (&total, d->handle));
  lua_pushinteger(L, (lua_Integer)total);
}

static void push_max_block_dim(lua_State *L, cl_Device *d)
{
  push_dim3(L, d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
}

static void push_max_grid_dim(lua_State *L, cl_Device *d)
{
  push_dim3(L, d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
}

/* --- dev.properties: every attribute, read on first access --------------------
 *
 * A table whose __index asks cuDeviceGetAttribute for a name the first time
 * and caches the answer in the table; __pairs lists every name in a fixed
 * order: the attributes (device_props.c), the names cudalua had before it
 * served every attribute, then values that are not attributes. */

#define PROPERTY_POSITIONS "cuda.property_positions"   /* registry: name -> position */

static const cl_DeviceProperty property_aliases[] = {
  {"clock_rate_khz", CU_DEVICE_ATTRIBUTE_CLOCK_RATE},
  {"memory_clock_rate_khz", CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE},
  {"memory_bus_width", CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH},
  {"pci_bus_id", CU_DEVICE_ATTRIBUTE_PCI_BUS_ID},   /* cuda.core's name; the string is dev.pci_bus_id */
  {NULL, (CUdevice_attribute)0}
};

static const struct { const char *name; void (*push)(lua_State *L, cl_Device *d); } derived_properties[] = {
  {"total_memory", push_total_memory}, {"uuid", push_uuid},
  {"max_block_dim", push_max_block_dim}, {"max_grid_dim", push_max_grid_dim},
};

static int count_properties(const cl_DeviceProperty *p)
{
  int n = 0;
  while (p[n].name)
    n++;
  return n;
}

/* The attribute at position pos (1-based), or NULL past the attributes. */
static const cl_DeviceProperty *attribute_at(int pos, int nattr, int nalias)
{
  if (pos <= nattr)
    return &cl_device_properties[pos - 1];
  return pos <= nattr + nalias ? &property_aliases[pos - nattr - 1] : NULL;
}

static int property_count(int *nattr, int *nalias)
{
  *nattr = count_properties(cl_device_properties);
  *nalias = count_properties(property_aliases);
  return *nattr + *nalias + (int)(sizeof derived_properties / sizeof derived_properties[0]);
}

static const char *property_name(int pos)
{
  int nattr, nalias;
  property_count(&nattr, &nalias);
  const cl_DeviceProperty *p = attribute_at(pos, nattr, nalias);
  return p ? p->name : derived_properties[pos - nattr - nalias - 1].name;
}

/* Push the value at position pos; 0 (nothing pushed) for an attribute this
 * driver does not know. */
static int push_property(lua_State *L, cl_Device *d, int pos)
{
  int nattr, nalias, v = 0;
  property_count(&nattr, &nalias);
  const cl_DeviceProperty *p = attribute_at(pos, nattr, nalias);
  if (p == NULL) {
    derived_properties[pos - nattr - nalias - 1].push(L, d);
    return 1;
  }
  CUresult r = CL_CALL(cuDeviceGetAttribute, (&v, p->attr, d->handle));
  if (r == CUDA_ERROR_INVALID_VALUE)
    return 0;
  cl_check(L, r, "cuDeviceGetAttribute");
  lua_pushinteger(L, v);
  return 1;
}

/* The position of the string at i, or 0 for a name that is no property. */
static int property_position(lua_State *L, int i)
{
  if (lua_type(L, i) != LUA_TSTRING)
    return 0;
  lua_getfield(L, LUA_REGISTRYINDEX, PROPERTY_POSITIONS);
  lua_pushvalue(L, i);
  lua_rawget(L, -2);
  lua_Integer pos = lua_tointeger(L, -1);
  lua_pop(L, 2);
  int nattr, nalias;            /* the registry's table is a script's to change */
  return pos >= 1 && pos <= property_count(&nattr, &nalias) ? (int)pos : 0;
}

/* __index(props, name), the device is upvalue 1. It may be called by hand
 * (getmetatable(dev.properties).__index(5, "x")): props must be a table. */
static int properties_index(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  cl_Device *d = lua_touserdata(L, lua_upvalueindex(1));
  int pos = property_position(L, 2);
  if (pos == 0 || !push_property(L, d, pos))
    return 0;
  lua_pushvalue(L, 2);
  lua_pushvalue(L, -2);
  lua_rawset(L, 1);
  return 1;
}

/* next(props, name) in the fixed order, skipping what the driver lacks */
static int properties_next(lua_State *L)
{
  int nattr, nalias;
  int total = property_count(&nattr, &nalias);
  int pos = lua_isnil(L, 2) ? 0 : property_position(L, 2);
  if (pos == 0 && !lua_isnil(L, 2))
    return luaL_error(L, "invalid key to 'next' over device properties");
  while (++pos <= total) {
    const char *name = property_name(pos);
    lua_pushstring(L, name);
    if (lua_gettable(L, 1) != LUA_TNIL) {
      lua_pushstring(L, name);
      lua_insert(L, -2);
      return 2;
    }
    lua_pop(L, 1);
  }
  return 0;
}

static int properties_pairs(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_pushcfunction(L, properties_next);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

/* The properties table of the device at index i, made on first use. */
static void push_properties(lua_State *L, int i)
{
  if (lua_getiuservalue(L, i, 1) != LUA_TNIL)
    return;
  lua_pop(L, 1);
  lua_newtable(L);
  lua_createtable(L, 0, 2);
  lua_pushvalue(L, i);
  lua_pushcclosure(L, properties_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, properties_pairs);
  lua_setfield(L, -2, "__pairs");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_setiuservalue(L, i, 1);
}

static void create_property_positions(lua_State *L)
{
  int nattr, nalias;
  int total = property_count(&nattr, &nalias);
  lua_createtable(L, 0, total);
  for (int pos = 1; pos <= total; pos++) {
    lua_pushinteger(L, pos);
    lua_setfield(L, -2, property_name(pos));
  }
  lua_setfield(L, LUA_REGISTRYINDEX, PROPERTY_POSITIONS);
}

/* cuda.device_property_names(): the attribute names, in cuda.h's order */
static int cuda_device_property_names(lua_State *L)
{
  lua_newtable(L);
  for (int k = 0; cl_device_properties[k].name; k++) {
    lua_pushstring(L, cl_device_properties[k].name);
    lua_rawseti(L, -2, k + 1);
  }
  return 1;
}

/* cuda.devices(): every device, in id order */
static int cuda_devices(lua_State *L)
{
  int count = 0;
  cl_driver_load(L);
  CL_TRY(L, cuDeviceGetCount, (&count));
  lua_createtable(L, count, 0);
  for (int id = 0; id < count; id++) {
    cl_push_device(L, id);
    lua_rawseti(L, -2, id + 1);
  }
  return 1;
}

static int device_fields(lua_State *L)
{
  cl_Device *d = cl_check_device(L, 1);
  const char *key = luaL_checkstring(L, 2);
  if (strcmp(key, "id") == 0)
    lua_pushinteger(L, d->ordinal);
  else if (strcmp(key, "name") == 0)
    lua_pushstring(L, d->name);
  else if (strcmp(key, "arch") == 0)
    lua_pushfstring(L, "%d%d", d->cc_major, d->cc_minor);
  else if (strcmp(key, "compute_capability") == 0)
    push_compute_capability(L, d);
  else if (strcmp(key, "properties") == 0)
    push_properties(L, 1);   /* cached in the user value */
  else if (strcmp(key, "uuid") == 0)
    push_uuid(L, d);
  else if (strcmp(key, "pci_bus_id") == 0)
    push_pci_bus_id(L, d);
  else if (strncmp(key, "graph_mem_", 10) == 0 && push_graph_mem(L, d, key))
    ;
  else if (strcmp(key, "host_numa_id") == 0) {   /* -1: not a NUMA system */
    int v = -1;
    CL_TRY(L, cuDeviceGetAttribute, (&v, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, d->handle));
    lua_pushinteger(L, v);
  }
  else
    lua_pushnil(L);
  return 1;
}

/* --- the sentinel --------------------------------------------------------- */

static int sentinel_gc(lua_State *L)
{
  /* A script may call it on anything (debug.getregistry): only the
   * sentinel releases the contexts. */
  lua_getfield(L, LUA_REGISTRYINDEX, SENTINEL);
  int own = lua_type(L, 1) == LUA_TUSERDATA && lua_rawequal(L, 1, -1);
  lua_pop(L, 1);
  if (!own)
    return 0;
  /* Every holder of a host function was finalized before (they are
   * newer), so no call of this state is outstanding: the releases
   * deferred behind them can wait for the GPU now, in a live context. */
  cl_release_deferred();
  lua_getfield(L, LUA_REGISTRYINDEX, DEVICES_KEY);
  if (!lua_istable(L, -1))
    return 0;
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    cl_Device *d = lua_touserdata(L, -1);
    if (d && d->ctx) {
      CL_CALL(cuDevicePrimaryCtxRelease, (d->handle));
      if (cl_current_ctx == d->ctx)
        cl_current_ctx = NULL;
      d->ctx = NULL;
    }
    lua_pop(L, 1);
  }
  return 0;
}

static void create_sentinel(lua_State *L)
{
  lua_newuserdatauv(L, 1, 0);
  luaL_newmetatable(L, SENTINEL);
  lua_pushcfunction(L, sentinel_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, SENTINEL);
}

void cl_open_device(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__tostring", device_tostring},
    {"__eq", device_eq},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {
    {"set_current", device_set_current},
    {"sync", device_sync}, {"trim_graph_memory", device_trim_graph_memory},
    {"memory_info", device_memory_info},
    {"can_access_peer", device_can_access_peer},
    {NULL, NULL}
  };
  static const luaL_Reg cc_meta[] = {
    {"__tostring", cc_tostring}, {"__eq", cc_eq}, {"__lt", cc_lt}, {"__le", cc_le},
    {NULL, NULL}
  };
  if (lua_getfield(L, LUA_REGISTRYINDEX, SENTINEL) == LUA_TNIL)
    create_sentinel(L);
  lua_pop(L, 1);
  if (lua_getfield(L, LUA_REGISTRYINDEX, DEVICES_KEY) == LUA_TNIL) {
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, DEVICES_KEY);
  }
  lua_pop(L, 1);
  cl_new_type(L, CL_DEVICE, meta, methods, device_fields);
  luaL_newmetatable(L, "cuda.ComputeCapability");
  luaL_setfuncs(L, cc_meta, 0);
  lua_pop(L, 1);
  create_property_positions(L);
  lua_pushcfunction(L, cuda_device);
  lua_setfield(L, -2, "Device");
  lua_pushcfunction(L, cuda_devices);
  lua_setfield(L, -2, "devices");
  lua_pushcfunction(L, cuda_launcher_local_rank);
  lua_setfield(L, -2, "launcher_local_rank");
  lua_pushcfunction(L, cuda_device_property_names);
  lua_setfield(L, -2, "device_property_names");
}

void cl_hostfunc_drain(lua_State *L)
{
  if (cl_hostfunc_outstanding == 0)
    return;
  cl_Device *d = cl_push_current_device(L);
  lua_pop(L, 1);                /* the device objects live as long as the state */
  cl_sync(L, cl_device_wait, d, "cuCtxSynchronize");
}
