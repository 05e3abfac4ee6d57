/* SPDX-License-Identifier: MIT */
/* ipc.c: device memory shared between processes of one node (CUDA IPC).
 *
 *   exp = buf:ipc_export()      the allocation under buf, for another process
 *   exp.handle, exp.pool, exp.offset, exp.size, exp.buffer_closed; exp:close()
 *   b = cuda.ipc_open(handle, size [, dev | pool])   that allocation, mapped here
 *
 * Two kinds of memory can be exported. Plain allocations
 * (cuda.DeviceMemoryResource(dev, {pool = false})) go through
 * cuIpcGetMemHandle: the handle alone maps them. Pool memory needs a pool
 * made to be shared (cuda.DeviceMemoryResource(dev, {ipc = true})): the
 * other process first imports the pool, from a file descriptor that only
 * a Unix socket can carry between processes (cuda.mpi does that), then
 * each allocation from its export data (cuMemPoolExportPointer):
 *
 *   h = mr:ipc_pool_handle()          h.fd: the pool's descriptor; h:close()
 *   pool = cuda.ipc_pool_open(fd [, dev])   the other process's pool here
 *
 * Freeing exported memory while another process has it open is undefined
 * behaviour, so an export holds its buffer the way a graph does
 * (graph_refs): buf:close() then closes it for Lua, and its memory goes
 * back with exp:close(), once the other process has closed its mapping. */
#include <string.h>
#include <unistd.h>

#include "device.h"

#define CL_IPCEXPORT "cuda.IpcExport"
#define CL_IPCPOOLHANDLE "cuda.IpcPoolHandle"
#define HANDLE_BYTES 64

_Static_assert(sizeof(CUipcMemHandle) == HANDLE_BYTES, "a CUDA IPC handle is 64 bytes");
_Static_assert(sizeof(CUmemPoolPtrExportData) == HANDLE_BYTES, "pool export data is 64 bytes");

typedef struct IpcExport {
  int closed;
  int pool;                     /* the handle is cuMemPoolExportPointer's, else cuIpcGetMemHandle's */
  cl_Buffer *buf;               /* the owning buffer (user value 1) */
  unsigned char handle[HANDLE_BYTES];
  size_t offset, size;          /* of the exported buffer in its allocation; the allocation's size */
} IpcExport;

typedef struct IpcPoolHandle {
  int closed;
  int fd;
} IpcPoolHandle;

/* A new descriptor of mr's pool (raises). */
static int export_pool(lua_State *L, cl_MemoryResource *mr)
{
  int fd = -1;
  CL_TRY(L, cuMemPoolExportToShareableHandle, (&fd, mr->pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  mr->pool_shared = 1;
  return fd;
}

/* Why buf's memory cannot be exported, or NULL. */
static const char *not_exportable(const cl_Buffer *b)
{
  const cl_MemoryResource *mr = b->mr;
  if (mr->ipc_opened)
    return "it is another process's memory, opened here";
  if (mr->kind != CL_MR_DEVICE || mr->vmm || mr->graph_memory)
    return "only device memory can be exported";
  if (mr->pool && !mr->ipc_pool)
    return "its pool was not made to be shared: allocate from cuda.DeviceMemoryResource(dev, {ipc = true}) "
           "or cuda.DeviceMemoryResource(dev, {pool = false})";
  return NULL;
}

/* buf:ipc_export() -> cuda.IpcExport */
static int buffer_ipc_export(lua_State *L)
{
  lua_settop(L, 1);
  IpcExport *e = lua_newuserdatauv(L, sizeof *e, 1);
  memset(e, 0, sizeof *e);
  e->closed = 1;                /* until it holds the buffer */
  luaL_setmetatable(L, CL_IPCEXPORT);
  cl_Buffer *b = cl_check_buffer(L, 1);
  const char *why = not_exportable(b);
  if (why)
    return cl_raise_detail(L, CUDA_ERROR_NOT_SUPPORTED, b->mr->pool ? "cuMemPoolExportPointer" : "cuIpcGetMemHandle",
                           "this %s buffer cannot be exported: %s", cl_mr_kind_names[b->mr->kind], why);
  cl_device_activate(L, b->mr->dev);
  cl_Buffer *owner = b->owner ? b->owner : b;
  CUdeviceptr base = owner->ptr;
  size_t size = owner->size;
  if (b->mr->pool) {
    if (!b->mr->pool_shared)    /* a pointer exports only from a pool already shared */
      close(export_pool(L, b->mr));
    CL_TRY(L, cuMemPoolExportPointer, ((CUmemPoolPtrExportData *)e->handle, base));
    e->pool = 1;
  } else {
    CL_TRY(L, cuMemGetAddressRange, (&base, &size, b->ptr));
    CL_TRY(L, cuIpcGetMemHandle, ((CUipcMemHandle *)e->handle, base));
  }
  owner->graph_refs++;
  e->buf = owner;
  e->offset = (size_t)(b->ptr - base);
  e->size = size;
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, 2, 1);
  e->closed = 0;
  return 1;
}

/* exp:close(): the other process no longer maps the memory. */
static int export_close(lua_State *L)
{
  IpcExport *e = luaL_checkudata(L, 1, CL_IPCEXPORT);
  if (e->closed)
    return 0;
  e->closed = 1;
  cl_buffer_graph_release(e->buf);
  return 0;
}

static int export_fields(lua_State *L)
{
  IpcExport *e = cl_check_open(L, 1, CL_IPCEXPORT);
  const char *key = luaL_checkstring(L, 2);
  if (strcmp(key, "handle") == 0)
    lua_pushlstring(L, (const char *)e->handle, sizeof e->handle);
  else if (strcmp(key, "pool") == 0)
    lua_pushboolean(L, e->pool);
  else if (strcmp(key, "offset") == 0)
    lua_pushinteger(L, (lua_Integer)e->offset);
  else if (strcmp(key, "size") == 0)
    lua_pushinteger(L, (lua_Integer)e->size);
  else if (strcmp(key, "buffer_closed") == 0)
    lua_pushboolean(L, e->buf->closed);
  else
    lua_pushnil(L);
  return 1;
}

static int export_tostring(lua_State *L)
{
  IpcExport *e = luaL_checkudata(L, 1, CL_IPCEXPORT);
  if (e->closed)
    return cl_push_closed_name(L, CL_IPCEXPORT);
  lua_pushfstring(L, CL_IPCEXPORT "(%s%I bytes at offset %I)", e->pool ? "pool, " : "",
                  (lua_Integer)e->size, (lua_Integer)e->offset);
  return 1;
}

/* The bytes mapped from p on, as the driver says (cuMemGetAddressRange):
 * 0 when it cannot say. */
static size_t mapped_bytes(CUdeviceptr p)
{
  CUdeviceptr base = 0;
  size_t range = 0;
  if (CL_CALL(cuMemGetAddressRange, (&base, &range, p)) != CUDA_SUCCESS || p < base ||
      p - base >= range)
    return 0;
  return range - (size_t)(p - base);
}

/* cuda.ipc_open(handle, size [, dev | pool]) -> Buffer: the allocation of
 * size bytes another process exported, mapped for dev (peer access
 * enabled as needed), or, for pool memory, imported through that process's
 * pool opened here (cuda.ipc_pool_open); buf:close() unmaps it. The
 * handle does not say the size: the driver's range of what it mapped does,
 * and a larger size is refused (the mapping closed first); a smaller one
 * is a buffer over the allocation's first size bytes. */
static int cuda_ipc_open(lua_State *L)
{
  size_t len = 0;
  const char *handle = luaL_checklstring(L, 1, &len);
  luaL_argcheck(L, len == HANDLE_BYTES, 1, "not a CUDA IPC handle (64 bytes)");
  lua_Integer size = cl_check_integer_range(L, 2, 1, LUA_MAXINTEGER, "size");
  lua_settop(L, 3);
  int pooled = luaL_testudata(L, 3, CL_MR) != NULL;
  if (pooled)
    lua_pushvalue(L, 3);        /* 4: the imported pool */
  else {
    cl_push_device_arg(L, 3);   /* 4: the device; 5: a resource of its mappings */
    cl_push_ipc_mr(L, 4, CL_IPC_MAPPED);
  }
  cl_Buffer *b = cl_push_buffer(L, 0, (size_t)size, -1, NULL, 0);
  b->closed = 1;
  cl_MemoryResource *mr = cl_check_mr(L, -2);
  if (pooled && mr->ipc_opened != CL_IPC_POOL)
    luaL_argerror(L, 3, "not a pool of another process (cuda.ipc_pool_open)");
  unsigned char h[HANDLE_BYTES];
  memcpy(h, handle, sizeof h);
  cl_device_activate(L, mr->dev);
  CUdeviceptr p = 0;
  if (pooled)
    CL_TRY(L, cuMemPoolImportPointer, (&p, mr->pool, (CUmemPoolPtrExportData *)h));
  else
    CL_TRY(L, cuIpcOpenMemHandle, (&p, *(CUipcMemHandle *)h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  mr->live_bytes += (size_t)size;
  mr->live_buffers++;
  size_t mapped = mapped_bytes(p);
  if (mapped < (size_t)size) {  /* given back as the buffer's close would, then told */
    cl_mr_release(mr, p, (size_t)size, NULL, 0);
    return luaL_argerror(L, 2, lua_pushfstring(L, "size %I is past the %I bytes the %s maps", size,
                                               (lua_Integer)mapped, pooled ? "imported pointer" : "handle"));
  }
  b->ptr = p;
  b->closed = 0;
  return 1;
}

/* --- pools shared between processes ------------------------------------------ */

/* mr:ipc_pool_handle() -> cuda.IpcPoolHandle: a file descriptor of the
 * pool, for another process (passed over a Unix socket, SCM_RIGHTS). */
static int mr_ipc_pool_handle(lua_State *L)
{
  IpcPoolHandle *h = lua_newuserdatauv(L, sizeof *h, 0);
  h->closed = 1;                /* until it has its descriptor */
  h->fd = -1;
  luaL_setmetatable(L, CL_IPCPOOLHANDLE);
  cl_MemoryResource *mr = cl_check_mr(L, 1);
  if (!mr->ipc_pool)
    return cl_raise_detail(L, CUDA_ERROR_NOT_SUPPORTED, "cuMemPoolExportToShareableHandle",
                           "only a pool made to be shared has a handle: cuda.DeviceMemoryResource(dev, {ipc = true})");
  cl_device_activate(L, mr->dev);
  h->fd = export_pool(L, mr);
  h->closed = 0;
  return 1;
}

static int pool_handle_close(lua_State *L)
{
  IpcPoolHandle *h = luaL_checkudata(L, 1, CL_IPCPOOLHANDLE);
  if (h->closed)
    return 0;
  h->closed = 1;
  close(h->fd);
  return 0;
}

static int pool_handle_fields(lua_State *L)
{
  IpcPoolHandle *h = cl_check_open(L, 1, CL_IPCPOOLHANDLE);
  const char *key = luaL_checkstring(L, 2);
  if (strcmp(key, "fd") == 0)
    lua_pushinteger(L, h->fd);
  else
    lua_pushnil(L);
  return 1;
}

static int pool_handle_tostring(lua_State *L)
{
  IpcPoolHandle *h = luaL_checkudata(L, 1, CL_IPCPOOLHANDLE);
  if (h->closed)
    return cl_push_closed_name(L, CL_IPCPOOLHANDLE);
  lua_pushfstring(L, CL_IPCPOOLHANDLE "(fd %d)", h->fd);
  return 1;
}

/* cuda.ipc_pool_open(fd [, dev]) -> a DeviceMemoryResource: the pool of
 * another process, whose descriptor fd came from its ipc_pool_handle();
 * it allocates nothing, cuda.ipc_open imports its buffers. fd stays the
 * caller's to close. */
static int cuda_ipc_pool_open(lua_State *L)
{
  int fd = (int)cl_check_integer_range(L, 1, 0, INT32_MAX, "file descriptor");
  lua_settop(L, 2);
  cl_push_device_arg(L, 2);
  cl_MemoryResource *mr = cl_push_ipc_mr(L, 3, CL_IPC_POOL);
  mr->closed = 1;               /* until it has its pool */
  cl_device_activate(L, mr->dev);
  CL_TRY(L, cuMemPoolImportFromShareableHandle,
         (&mr->pool, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  if (cl_shared_pool_is_own(mr->pool)) {
    mr->pool = NULL;            /* its owner's, never destroyed here */
    return luaL_argerror(L, 1, "a pool of this process: only another process imports it");
  }
  mr->owns_pool = 1;
  mr->closed = 0;
  /* Access is per process and not inherited from the exporter: only the
   * pool's own device has it. Another device of this process asks. */
  CUmemLocation here = {CU_MEM_LOCATION_TYPE_DEVICE, mr->dev->ordinal};
  CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
  CL_TRY(L, cuMemPoolGetAccess, (&flags, mr->pool, &here));
  if (flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
    CUmemAccessDesc access = {here, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CL_TRY(L, cuMemPoolSetAccess, (mr->pool, &access, 1));
  }
  return 1;
}

void cl_open_ipc(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", export_close}, {"__close", export_close}, {"__tostring", export_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {{"close", export_close}, {NULL, NULL}};
  static const luaL_Reg handle_meta[] = {
    {"__gc", pool_handle_close}, {"__close", pool_handle_close}, {"__tostring", pool_handle_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg handle_methods[] = {{"close", pool_handle_close}, {NULL, NULL}};
  static const luaL_Reg buffer_methods[] = {{"ipc_export", buffer_ipc_export}, {NULL, NULL}};
  static const luaL_Reg mr_methods[] = {{"ipc_pool_handle", mr_ipc_pool_handle}, {NULL, NULL}};
  static const luaL_Reg functions[] = {
    {"ipc_open", cuda_ipc_open}, {"ipc_pool_open", cuda_ipc_pool_open}, {NULL, NULL}
  };
  cl_new_type(L, CL_IPCEXPORT, meta, methods, export_fields);
  cl_new_type(L, CL_IPCPOOLHANDLE, handle_meta, handle_methods, pool_handle_fields);
  cl_add_methods(L, CL_BUFFER, buffer_methods);
  cl_add_methods(L, CL_MR, mr_methods);
  cl_setfuncs(L, functions);
}
