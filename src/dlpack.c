/* SPDX-License-Identifier: MIT */
/* dlpack.c: tensors handed between cudalua and C libraries as DLPack.
 *
 *   v = cuda.from_dlpack(addr [, {versioned = false}])
 *   addr = v:to_dlpack([{versioned = false}])
 *
 * addr is the address of a DLManagedTensor, or with versioned = true of a
 * DLManagedTensorVersioned (DLPack 1.x), as a light userdata (an integer
 * is accepted by from_dlpack too). The two structs cannot be told apart
 * from their bytes, so the caller says which it has.
 *
 * from_dlpack takes the tensor over when it returns: the view's buffer,
 * released (closed, or collected), calls the tensor's deleter once, after
 * the device's work is done for memory the GPU can use. When it raises,
 * the caller still owns the tensor.
 *
 * to_dlpack hands out a struct that keeps the view alive (a registry
 * reference) and holds its buffer as a pending operation does
 * (cl_buffer_hold: buf:close() then closes it for Lua only) until its
 * deleter is called. The deleter uses the Lua state: call it on the thread
 * that runs the state, while that thread is in C code (not from another
 * thread while Lua runs), as any Lua API call. After lua_close it only
 * frees the struct: the memory went with the state.
 *
 * The structs are written here from the DLPack specification
 * (dlpack.h, version 1.1); the layout is its ABI. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cudalua_dlpack.h"
#include "view.h"

/* --- DLPack's C structs ------------------------------------------------------ */

enum { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 };
enum { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBool = 6 };
#define DLPACK_FLAG_BITMASK_READ_ONLY ((uint64_t)1 << 0)
#define DLPACK_MAJOR 1          /* the major version this file reads and writes */
#define DLPACK_MINOR 0          /* nothing here needs a later minor's additions */

typedef struct {
  uint32_t major, minor;
} DLPackVersion;

typedef struct {
  int32_t device_type;          /* an enum in C: int-sized */
  int32_t device_id;
} DLDevice;

typedef struct {
  uint8_t code, bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;             /* NULL: compact, C order */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

_Static_assert(sizeof(DLTensor) == 48 || sizeof(void *) != 8, "DLTensor is 48 bytes on 64-bit");
_Static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) == 32 || sizeof(void *) != 8,
               "DLManagedTensorVersioned's tensor at 32");

/* --- element types and devices ----------------------------------------------- */

static const struct { uint8_t code, bits; } dl_types[CL_NDTYPES] = {
  [CL_F32] = {kDLFloat, 32}, [CL_F64] = {kDLFloat, 64},
  [CL_I8] = {kDLInt, 8}, [CL_I16] = {kDLInt, 16}, [CL_I32] = {kDLInt, 32}, [CL_I64] = {kDLInt, 64},
  [CL_U8] = {kDLUInt, 8}, [CL_U16] = {kDLUInt, 16}, [CL_U32] = {kDLUInt, 32},
  [CL_U64] = {kDLUInt, 64},
};

/* The cudalua type of a DLPack one; bool (one byte) reads as uint8. */
static cl_DType import_type(lua_State *L, DLDataType t)
{
  if (t.lanes != 1)
    luaL_error(L, "from_dlpack: vector types (lanes = %d) are not supported", (int)t.lanes);
  uint8_t code = t.code == kDLBool && t.bits == 8 ? kDLUInt : t.code;
  for (int k = 0; k < CL_NDTYPES; k++)
    if (dl_types[k].code == code && dl_types[k].bits == t.bits)
      return (cl_DType)k;
  return (cl_DType)luaL_error(L, "from_dlpack: no cudalua dtype for DLPack type code %d, %d bits",
                              (int)t.code, (int)t.bits);
}

static cl_MRKind import_device(lua_State *L, DLDevice d, int *ordinal)
{
  *ordinal = d.device_id;
  switch (d.device_type) {
  case kDLCPU:
    *ordinal = -1;
    return CL_MR_HOST;
  case kDLCUDA:
  case kDLCUDAHost:             /* pinned: its device id is the GPU it was registered with */
  case kDLCUDAManaged:
    if (d.device_id < 0)
      luaL_error(L, "from_dlpack: device id %d", (int)d.device_id);
    return d.device_type == kDLCUDA ? CL_MR_DEVICE
         : d.device_type == kDLCUDAHost ? CL_MR_PINNED : CL_MR_MANAGED;
  default:
    return (cl_MRKind)luaL_error(L, "from_dlpack: DLPack device type %d is not CPU or CUDA memory",
                                 (int)d.device_type);
  }
}

static DLDevice export_device(const cl_MemoryResource *mr)
{
  static const int32_t types[] = {
    [CL_MR_DEVICE] = kDLCUDA, [CL_MR_PINNED] = kDLCUDAHost,
    [CL_MR_MANAGED] = kDLCUDAManaged, [CL_MR_HOST] = kDLCPU
  };
  DLDevice d = {types[mr->kind], 0};
  if (mr->kind == CL_MR_DEVICE || mr->kind == CL_MR_MANAGED)
    d.device_id = mr->dev ? mr->dev->ordinal : 0;
  return d;
}

/* --- cuda.from_dlpack ---------------------------------------------------------- */

typedef struct Import {
  cl_Foreign base;              /* first: memory.c sees a cl_Foreign */
  void *tensor;
  int versioned;
  struct Import *next;
} Import;

/* The tensors views own now, in every state of the process: a second
 * from_dlpack of one would call its deleter twice. A list: a program
 * holds few at once. */
static pthread_mutex_t imports_lock = PTHREAD_MUTEX_INITIALIZER;
static Import *imports;

static int is_imported(const void *tensor)
{
  pthread_mutex_lock(&imports_lock);
  const Import *im = imports;
  while (im && im->tensor != tensor)
    im = im->next;
  pthread_mutex_unlock(&imports_lock);
  return im != NULL;
}

/* Add im to the list unless its tensor is there already (a finalizer that
 * ran while its view was made may have taken it): whether it was added. */
static int claim_import(Import *im)
{
  pthread_mutex_lock(&imports_lock);
  const Import *other = imports;
  while (other && other->tensor != im->tensor)
    other = other->next;
  if (other == NULL) {
    im->next = imports;
    imports = im;
  }
  pthread_mutex_unlock(&imports_lock);
  return other == NULL;
}

static void drop_import(Import *im)
{
  pthread_mutex_lock(&imports_lock);
  for (Import **p = &imports; *p; p = &(*p)->next)
    if (*p == im) {
      *p = im->next;
      break;
    }
  pthread_mutex_unlock(&imports_lock);
}

/* The release of a view that did not get its tensor: nothing to delete. */
static void import_abandoned(cl_Foreign *f)
{
  free(f);
}

static void import_release(cl_Foreign *f)
{
  Import *im = (Import *)f;
  drop_import(im);              /* before the deleter: the address may be reused */
  if (im->versioned) {
    DLManagedTensorVersioned *t = im->tensor;
    if (t->deleter)
      t->deleter(t);
  } else {
    DLManagedTensor *t = im->tensor;
    if (t->deleter)
      t->deleter(t);
  }
  free(im);
}

/* The tensor t read into f, every field checked. */
static void read_tensor(lua_State *L, const DLTensor *t, ViewForeign *f)
{
  f->kind = import_device(L, t->device, &f->device);
  f->layout.type = import_type(L, t->dtype);
  if (t->ndim < 0 || t->ndim > VIEW_MAX_DIMS)
    luaL_error(L, "from_dlpack: ndim must be 0 to %d, got %d", VIEW_MAX_DIMS, (int)t->ndim);
  if (t->ndim > 0 && t->shape == NULL)
    luaL_error(L, "from_dlpack: a null shape with ndim %d", (int)t->ndim);
  f->layout.ndim = t->ndim > 0 ? t->ndim : 1;   /* a 0-d tensor: one element */
  f->layout.shape[0] = 1;
  f->layout.strides[0] = 1;
  for (int d = 0; d < t->ndim; d++) {
    int64_t n = t->shape[d], s = t->strides ? t->strides[d] : 0;
    if (n < 0)
      luaL_error(L, "from_dlpack: shape[%d] is %I", d + 1, (lua_Integer)n);
    if (s < 0 && n > 1)
      luaL_error(L, "from_dlpack: strides[%d] is %I: negative strides are not supported", d + 1,
                 (lua_Integer)s);
    f->layout.shape[d] = (size_t)n;
    f->layout.strides[d] = s > 0 ? (size_t)s : 0;
  }
  if (t->ndim > 0 && t->strides == NULL) {      /* compact, C order */
    size_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
      f->layout.strides[d] = expect;
      if (__builtin_mul_overflow(expect, f->layout.shape[d], &expect))
        expect = 0;                             /* view_check_layout reports the overflow */
    }
  }
  uintptr_t data = (uintptr_t)t->data;
  if (t->byte_offset > UINTPTR_MAX - data)
    luaL_error(L, "from_dlpack: data + byte_offset overflows");
  f->ptr = data + (uintptr_t)t->byte_offset;
}

/* cuda.from_dlpack(addr [, {versioned = false}]) -> cuda.View */
static int cuda_from_dlpack(lua_State *L)
{
  static const char *const known[] = {"versioned", NULL};
  cl_check_options(L, 2, known);
  int versioned = cl_opt_boolean(L, 2, "versioned", 0);
  cl_check_nargs(L, 2);
  void *addr = (void *)view_check_address(L, 1, "the tensor's address");
  if (addr == NULL)
    luaL_argerror(L, 1, "a null tensor");
  if (is_imported(addr))
    luaL_argerror(L, 1, "a view owns this tensor already (from_dlpack takes a tensor over once)");
  ViewForeign f;
  memset(&f, 0, sizeof f);
  if (versioned) {
    const DLManagedTensorVersioned *t = addr;
    if (t->version.major != DLPACK_MAJOR)
      luaL_error(L, "from_dlpack: DLPack version %d.%d: this cudalua reads 1.x", (int)t->version.major,
                 (int)t->version.minor);
    read_tensor(L, &t->dl_tensor, &f);
    f.readonly = (t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  } else
    read_tensor(L, &((const DLManagedTensor *)addr)->dl_tensor, &f);
  Import *im = (Import *)view_push_foreign(L, &f, 0, sizeof *im);
  im->base.release = import_release;
  im->tensor = addr;
  im->versioned = versioned;
  if (!claim_import(im)) {
    im->base.release = import_abandoned;
    return luaL_argerror(L, 1, "a view owns this tensor already (from_dlpack takes a tensor over once)");
  }
  return 1;
}

/* --- v:to_dlpack ------------------------------------------------------------- */

/* The exports of one Lua state. Its sentinel (made when the module opens,
 * so finalized after every view at lua_close) marks it closed; the last of
 * the sentinel and the exports frees it. */
typedef struct Hub {
  lua_State *L;                 /* the main thread */
  int closed;
  size_t live;                  /* exports not yet deleted */
} Hub;

typedef struct Export {
  union {                       /* first: the address handed out is the record's */
    DLManagedTensor legacy;
    DLManagedTensorVersioned versioned;
  } t;
  int64_t shape[VIEW_MAX_DIMS], strides[VIEW_MAX_DIMS];
  Hub *hub;
  cl_Buffer *buf;               /* held (cl_buffer_hold) until the deleter */
  int ref;                      /* the view, in the registry */
} Export;

static char hub_key;            /* registry[&hub_key]: the sentinel */

static void hub_drop(Hub *hub)
{
  if (hub->closed && hub->live == 0)
    free(hub);
}

static void export_delete(Export *e)
{
  Hub *hub = e->hub;
  if (!hub->closed) {           /* the buffer and the reference still exist */
    cl_buffer_graph_release(e->buf);
    lua_State *L = hub->L;
    if (lua_checkstack(L, 4))
      luaL_unref(L, LUA_REGISTRYINDEX, e->ref);
  }
  hub->live--;
  free(e);
  hub_drop(hub);
}

static void delete_legacy(DLManagedTensor *self)
{
  export_delete(self->manager_ctx);
}

static void delete_versioned(DLManagedTensorVersioned *self)
{
  export_delete(self->manager_ctx);
}

/* The sentinel's finalizer; a script may reach it (debug.getregistry):
 * on anything but the sentinel it does nothing. */
static int hub_gc(lua_State *L)
{
  lua_rawgetp(L, LUA_REGISTRYINDEX, &hub_key);
  Hub **hp = lua_type(L, 1) == LUA_TUSERDATA && lua_rawequal(L, 1, -1) ? lua_touserdata(L, 1) : NULL;
  if (hp && *hp) {
    (*hp)->closed = 1;
    hub_drop(*hp);
    *hp = NULL;
  }
  return 0;
}

/* Why v's memory cannot be handed out, or NULL. */
static const char *not_exportable(const View *v, int versioned)
{
  const cl_MemoryResource *mr = v->buf->mr;
  if (mr->graph_memory)
    return "a graph's memory is freed by the graph, whoever still uses it";
  if (mr->foreign && mr->foreign->readonly && !versioned)
    return "it is read-only, which only a versioned tensor can say ({versioned = true})";
  return NULL;
}

/* v:to_dlpack([{versioned = false}]) -> light userdata */
static int view_to_dlpack(lua_State *L)
{
  static const char *const known[] = {"versioned", NULL};
  cl_check_options(L, 2, known);
  int versioned = cl_opt_boolean(L, 2, "versioned", 0);
  cl_check_nargs(L, 2);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &hub_key);
  Hub **hp = lua_touserdata(L, -1);
  cl_gc_hold(L);                /* the reference and the record, made after the checks */
  View *v = view_check(L, 1);
  const char *why = not_exportable(v, versioned);
  if (why)
    return luaL_error(L, "to_dlpack: cannot hand out this %s: %s", CL_VIEW, why);
  if (hp == NULL || *hp == NULL)
    return luaL_error(L, "to_dlpack: the module's state is closing");
  lua_pushvalue(L, 1);
  int ref = luaL_ref(L, LUA_REGISTRYINDEX);
  Export *e = calloc(1, sizeof *e);
  if (e == NULL) {
    luaL_unref(L, LUA_REGISTRYINDEX, ref);
    return luaL_error(L, "to_dlpack: out of memory");
  }
  DLTensor *t = versioned ? &e->t.versioned.dl_tensor : &e->t.legacy.dl_tensor;
  t->data = v->base;
  t->device = export_device(v->buf->mr);
  t->ndim = v->ndim;
  t->dtype = (DLDataType){dl_types[v->type].code, dl_types[v->type].bits, 1};
  for (int d = 0; d < v->ndim; d++) {
    e->shape[d] = (int64_t)v->shape[d];
    e->strides[d] = (int64_t)v->strides[d];
  }
  t->shape = e->shape;
  t->strides = e->strides;
  if (versioned) {
    e->t.versioned.version = (DLPackVersion){DLPACK_MAJOR, DLPACK_MINOR};
    e->t.versioned.manager_ctx = e;
    e->t.versioned.deleter = delete_versioned;
    if (v->buf->mr->foreign && v->buf->mr->foreign->readonly)
      e->t.versioned.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  } else {
    e->t.legacy.manager_ctx = e;
    e->t.legacy.deleter = delete_legacy;
  }
  e->hub = *hp;
  e->buf = v->buf;
  e->ref = ref;
  cl_buffer_hold(v->buf);
  (*hp)->live++;
  lua_pushlightuserdata(L, e);
  return 1;
}

/* --- the C API (cudalua_dlpack.h): the Lua functions, in protected mode ------- */

/* (tensor, versioned) -> the view: cuda.from_dlpack's arguments made. */
/* Leaves (arg 1, {versioned = arg 2}) on the stack: the options both
 * Lua functions take. */
static void api_versioned_options(lua_State *L)
{
  int versioned = lua_toboolean(L, 2);
  lua_settop(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushboolean(L, versioned);
  lua_setfield(L, -2, "versioned");
}

static int api_push_call(lua_State *L)
{
  api_versioned_options(L);
  return cuda_from_dlpack(L);
}

static int api_push_any(lua_State *L, void *t, int versioned)
{
  if (!lua_checkstack(L, 4))
    return LUA_ERRMEM;
  lua_pushcfunction(L, api_push_call);
  lua_pushlightuserdata(L, t);
  lua_pushboolean(L, versioned);
  return lua_pcall(L, 2, 1, 0);
}

static int api_push(lua_State *L, struct DLManagedTensorVersioned *t)
{
  return api_push_any(L, t, 1);
}

static int api_push_legacy(lua_State *L, struct DLManagedTensor *t)
{
  return api_push_any(L, t, 0);
}

/* (view, versioned) -> the tensor. Called without the metatables as
 * upvalues, its view check falls back to the lookup by name. */
static int api_to_call(lua_State *L)
{
  api_versioned_options(L);
  return view_to_dlpack(L);
}

static void *api_to_any(lua_State *L, int idx, int versioned)
{
  idx = lua_absindex(L, idx);
  if (!lua_checkstack(L, 4))
    return NULL;
  lua_pushcfunction(L, api_to_call);
  lua_pushvalue(L, idx);
  lua_pushboolean(L, versioned);
  if (lua_pcall(L, 2, 1, 0) != LUA_OK)
    return NULL;                /* the message stays pushed */
  void *t = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return t;
}

static struct DLManagedTensorVersioned *api_to(lua_State *L, int idx)
{
  return api_to_any(L, idx, 1);
}

static struct DLManagedTensor *api_to_legacy(lua_State *L, int idx)
{
  return api_to_any(L, idx, 0);
}

void cl_open_dlpack(lua_State *L)
{
  static const cudalua_DLPackAPI api = {
    CUDALUA_DLPACK_API_VERSION, api_push, api_push_legacy, api_to, api_to_legacy
  };
  lua_pushlightuserdata(L, (void *)&api);
  lua_setfield(L, LUA_REGISTRYINDEX, CUDALUA_DLPACK_API);
  static const luaL_Reg methods[] = {{"to_dlpack", view_to_dlpack}, {NULL, NULL}};
  static const luaL_Reg functions[] = {{"from_dlpack", cuda_from_dlpack}, {NULL, NULL}};
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &hub_key) == LUA_TNIL) {   /* once per state */
    Hub **hp = lua_newuserdatauv(L, sizeof *hp, 0);
    *hp = NULL;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, hub_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    Hub *hub = calloc(1, sizeof *hub);
    if (hub == NULL)
      luaL_error(L, "cuda: out of memory");
    lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
    hub->L = lua_tothread(L, -1);
    lua_pop(L, 1);
    *hp = hub;
    lua_rawsetp(L, LUA_REGISTRYINDEX, &hub_key);
  }
  lua_pop(L, 1);
  cl_add_methods(L, CL_VIEW, methods);
  cl_setfuncs(L, functions);
}
