/* SPDX-License-Identifier: MIT */
/* ipc.c: device memory shared between processes of one node (CUDA IPC).
 *
 *   exp = buf:ipc_export()      the allocation under buf, for another process
 *   exp.handle, exp.offset, exp.size, exp.buffer_closed; exp:close()
 *   b = cuda.ipc_open(handle, size [, dev])   that allocation, mapped here
 *
 * cuIpcGetMemHandle exports plain allocations (cuda.DeviceMemoryResource(dev,
 * {pool = false})); pool memory is refused with a cuda.Error saying so.
 * Freeing exported memory while another process has it open is undefined
 * behaviour, so an export holds its buffer the way a graph does
 * (graph_refs): buf:close() then closes it for Lua, and its memory goes
 * back with exp:close(), once the other process has closed its mapping.
 * cuda.mpi uses these to send device buffers between ranks of a node. */
#include <string.h>

#include "cl.h"

#define CL_IPCEXPORT "cuda.IpcExport"

typedef struct IpcExport {
  int closed;
  cl_Buffer *buf;               /* the owning buffer (user value 1) */
  CUipcMemHandle handle;
  size_t offset, size;          /* of the exported buffer in its allocation; the allocation's size */
} IpcExport;

/* buf:ipc_export() -> cuda.IpcExport */
static int buffer_ipc_export(lua_State *L)
{
  lua_settop(L, 1);
  IpcExport *e = lua_newuserdatauv(L, sizeof *e, 1);
  memset(e, 0, sizeof *e);
  e->closed = 1;                /* until it holds the buffer */
  luaL_setmetatable(L, CL_IPCEXPORT);
  cl_Buffer *b = cl_check_buffer(L, 1);
  if (b->mr->kind != CL_MR_DEVICE || b->mr->pool != NULL || b->mr->ipc_opened)
    return cl_raise_detail(L, CUDA_ERROR_NOT_SUPPORTED, "cuIpcGetMemHandle",
                           "only plain device allocations can be exported: this buffer is %s%s memory; "
                           "allocate from cuda.DeviceMemoryResource(dev, {pool = false})",
                           b->mr->pool ? "pool " : "", b->mr->ipc_opened ? "opened" : cl_mr_kind_names[b->mr->kind]);
  cl_device_activate(L, b->mr->dev);
  CUdeviceptr base = 0;
  size_t size = 0;
  CL_TRY(L, cuMemGetAddressRange, (&base, &size, b->ptr));
  CL_TRY(L, cuIpcGetMemHandle, (&e->handle, base));
  cl_Buffer *owner = b->owner ? b->owner : b;
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
    lua_pushlstring(L, (const char *)&e->handle, sizeof e->handle);
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
  lua_pushfstring(L, CL_IPCEXPORT "(%I bytes at offset %I)", (lua_Integer)e->size,
                  (lua_Integer)e->offset);
  return 1;
}

/* cuda.ipc_open(handle, size [, dev]) -> Buffer: the allocation of size
 * bytes another process exported, mapped for dev (peer access enabled as
 * needed); buf:close() unmaps it. */
static int cuda_ipc_open(lua_State *L)
{
  size_t len = 0;
  const char *handle = luaL_checklstring(L, 1, &len);
  luaL_argcheck(L, len == sizeof(CUipcMemHandle), 1, "not a CUDA IPC handle (64 bytes)");
  lua_Integer size = cl_check_integer_range(L, 2, 1, LUA_MAXINTEGER, "size");
  lua_settop(L, 3);
  if (lua_isnil(L, 3))
    cl_push_current_device(L);
  else if (lua_type(L, 3) == LUA_TNUMBER)
    cl_push_device(L, (int)cl_check_integer_range(L, 3, 0, INT32_MAX, "device id"));
  else
    lua_pushvalue(L, 3);
  cl_MemoryResource *mr = cl_push_ipc_mr(L, 4);
  cl_Buffer *b = cl_push_buffer(L, 0, (size_t)size, 5, NULL, 0);
  b->closed = 1;
  CUipcMemHandle h;
  memcpy(&h, handle, sizeof h);
  cl_device_activate(L, mr->dev);
  CUdeviceptr p = 0;
  CL_TRY(L, cuIpcOpenMemHandle, (&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  b->ptr = p;
  b->closed = 0;
  mr->live_bytes += (size_t)size;
  mr->live_buffers++;
  return 1;
}

void cl_open_ipc(lua_State *L)
{
  static const luaL_Reg meta[] = {
    {"__gc", export_close}, {"__close", export_close}, {"__tostring", export_tostring},
    {NULL, NULL}
  };
  static const luaL_Reg methods[] = {{"close", export_close}, {NULL, NULL}};
  static const luaL_Reg buffer_methods[] = {{"ipc_export", buffer_ipc_export}, {NULL, NULL}};
  static const luaL_Reg functions[] = {{"ipc_open", cuda_ipc_open}, {NULL, NULL}};
  cl_new_type(L, CL_IPCEXPORT, meta, methods, export_fields);
  cl_add_methods(L, CL_BUFFER, buffer_methods);
  cl_setfuncs(L, functions);
}
