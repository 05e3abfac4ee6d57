/* SPDX-License-Identifier: MIT */
/* array.c: CUDA arrays, 3-D copies, texture and surface objects, graph
 * memory attributes.
 *
 * An array is a malloc'd block of packed rows (pitch = width * element
 * size); a 3-D copy is one memcpy work item per row, so a captured copy
 * replays as a GPU's would. Texture and surface objects are descriptors
 * kept in a table, their handle the slot's index + 1; the emulated kernels
 * (launch.c) read and write through them (fake_object_data). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake.h"

#define ARRAY_MAGIC 0x41525259u

struct CUarray_st {
  unsigned magic;
  CUDA_ARRAY3D_DESCRIPTOR d;
  size_t elem, pitch, rows;     /* bytes of an element; of a row; rows of all slices */
  unsigned char *data;
};

static size_t format_size(CUarray_format f)
{
  switch (f) {
  case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
  case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF:
    return 2;
  case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT:
    return 4;
  default: return 0;
  }
}

static int array_valid(CUarray a)
{
  return a != NULL && a->magic == ARRAY_MAGIC;
}

CUresult fake_cuArray3DCreate(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
  FAKE_ENTER(cuArray3DCreate);
  CUresult usable = fake_ctx_usable();
  if (usable != CUDA_SUCCESS)
    return usable;
  if (!out || !d)
    return CUDA_ERROR_INVALID_VALUE;
  size_t elem = format_size(d->Format) * d->NumChannels;
  int layered = (d->Flags & CUDA_ARRAY3D_LAYERED) != 0;
  int cubemap = (d->Flags & CUDA_ARRAY3D_CUBEMAP) != 0;
  if (elem == 0 || d->NumChannels == 3 || d->NumChannels > 4 || d->Width == 0 ||
      d->Width > 65536 || d->Height > 65536 || d->Depth > 4096 ||
      (d->Flags & ~(unsigned)(CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST |
                              CUDA_ARRAY3D_CUBEMAP)) ||
      (layered && d->Depth == 0) || (!layered && d->Depth > 0 && d->Height == 0))
    return CUDA_ERROR_INVALID_VALUE;
  /* a cubemap: six square faces, six a layer when layered; its faces are
   * slices, laid out as a 3-D array's */
  if (cubemap && (d->Width != d->Height || (layered ? d->Depth % 6 : d->Depth != 6)))
    return CUDA_ERROR_INVALID_VALUE;
  size_t rows = (d->Height ? d->Height : 1) * (d->Depth ? d->Depth : 1);
  size_t bytes = rows * d->Width * elem;   /* below 2^48: the limits above */
  /* an array takes device memory: one larger than what is left is refused
   * (a fuzzed 11 GB array and its 11 GB staging buffer exhausted the host) */
  if (!fake_reserve_device_bytes(bytes))
    return CUDA_ERROR_OUT_OF_MEMORY;
  CUarray a = calloc(1, sizeof *a);
  if (a)
    a->data = malloc(bytes);
  if (!a || !a->data) {
    free(a);
    fake_release_device_bytes(bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *a = (struct CUarray_st){ARRAY_MAGIC, *d, elem, d->Width * elem, rows, a->data};
  fake_keep(a);
  fake_live[FAKE_ARRAY]++;
  *out = a;
  return CUDA_SUCCESS;
}

CUresult fake_cuArrayDestroy(CUarray a)
{
  FAKE_ENTER(cuArrayDestroy);
  fake_capture_unsafe();
  fake_host_wait();              /* a free may wait for the device, so for host functions */
  if (!array_valid(a))
    return CUDA_ERROR_INVALID_HANDLE;
  a->magic = 0;
  fake_unkeep(a);
  fake_live[FAKE_ARRAY]--;
  fake_release_device_bytes(a->pitch * a->rows);
  free(a->data);
  free(a);
  return CUDA_SUCCESS;
}

/* --- cuMemcpy3DAsync --------------------------------------------------------- */

struct Side {
  unsigned char *base;          /* the first byte of the copy */
  size_t pitch, slice;          /* bytes between rows, between slices */
};

/* One side of a copy, its extent checked where it is an array. */
static CUresult side(struct Side *out, CUmemorytype type, const void *host, CUdeviceptr dev,
                     CUarray a, size_t x, size_t y, size_t z, size_t pitch, size_t height,
                     const CUDA_MEMCPY3D *c)
{
  switch (type) {
  case CU_MEMORYTYPE_ARRAY:
    if (!array_valid(a))
      return CUDA_ERROR_INVALID_HANDLE;
    {
      size_t h = a->d.Height ? a->d.Height : 1, d = a->d.Depth ? a->d.Depth : 1;
      if (x + c->WidthInBytes > a->pitch || y + c->Height > h || z + c->Depth > d ||
          x % a->elem || c->WidthInBytes % a->elem)
        return CUDA_ERROR_INVALID_VALUE;
      out->pitch = a->pitch;
      out->slice = a->pitch * h;
      out->base = a->data + z * out->slice + y * a->pitch + x;
    }
    return CUDA_SUCCESS;
  case CU_MEMORYTYPE_HOST:
  case CU_MEMORYTYPE_DEVICE:
  case CU_MEMORYTYPE_UNIFIED: {
    uintptr_t p = type == CU_MEMORYTYPE_HOST ? (uintptr_t)host : (uintptr_t)dev;
    if (!p || pitch < c->WidthInBytes || (c->Depth > 1 && height < c->Height))
      return CUDA_ERROR_INVALID_VALUE;
    out->pitch = pitch;
    out->slice = pitch * height;
    out->base = (unsigned char *)p + z * out->slice + y * pitch + x;
    return CUDA_SUCCESS;
  }
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult fake_cuMemcpy3DAsync(const CUDA_MEMCPY3D *c, CUstream s)
{
  FAKE_ENTER(cuMemcpy3DAsync);
  if (!c || c->reserved0 || c->reserved1 || c->srcLOD || c->dstLOD || !c->WidthInBytes ||
      !c->Height || !c->Depth)
    return CUDA_ERROR_INVALID_VALUE;
  if (!fake_stream_valid(s))
    return CUDA_ERROR_INVALID_HANDLE;
  struct Side src, dst;
  CUresult r = side(&src, c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray,
                    c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch, c->srcHeight, c);
  if (r == CUDA_SUCCESS)
    r = side(&dst, c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes,
             c->dstY, c->dstZ, c->dstPitch, c->dstHeight, c);
  for (size_t z = 0; r == CUDA_SUCCESS && z < c->Depth; z++)
    for (size_t y = 0; r == CUDA_SUCCESS && y < c->Height; y++) {
      struct fake_Work w;
      if (fake_vmm_faults((uintptr_t)(dst.base + z * dst.slice + y * dst.pitch), c->WidthInBytes, 1) ||
          fake_vmm_faults((uintptr_t)(src.base + z * src.slice + y * src.pitch), c->WidthInBytes, 0))
        return CUDA_ERROR_ILLEGAL_ADDRESS;   /* a GPU faults: see vmm.c */
      fake_memcpy_item(&w, (CUdeviceptr)(uintptr_t)(dst.base + z * dst.slice + y * dst.pitch),
                       (CUdeviceptr)(uintptr_t)(src.base + z * src.slice + y * src.pitch),
                       c->WidthInBytes);
      r = fake_submit(s, &w);
    }
  return r;
}

/* --- texture and surface objects ------------------------------------------ */

struct Object {
  int surface;
  CUDA_RESOURCE_DESC res;
  CUDA_TEXTURE_DESC tex;
};

#define MAX_OBJECTS 4096
static struct Object *objects[MAX_OBJECTS];

static CUresult check_resource(const CUDA_RESOURCE_DESC *r, int surface)
{
  if (!r || r->flags)
    return CUDA_ERROR_INVALID_VALUE;
  switch (r->resType) {
  case CU_RESOURCE_TYPE_ARRAY:
    if (!array_valid(r->res.array.hArray))
      return CUDA_ERROR_INVALID_HANDLE;
    if (surface && !(r->res.array.hArray->d.Flags & CUDA_ARRAY3D_SURFACE_LDST))
      return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
  case CU_RESOURCE_TYPE_LINEAR:
    if (surface || !r->res.linear.devPtr || !format_size(r->res.linear.format) ||
        r->res.linear.numChannels == 3 || r->res.linear.numChannels > 4)
      return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
  case CU_RESOURCE_TYPE_PITCH2D: {
    size_t elem = format_size(r->res.pitch2D.format) * r->res.pitch2D.numChannels;
    if (surface || !r->res.pitch2D.devPtr || !elem || r->res.pitch2D.numChannels == 3 ||
        r->res.pitch2D.numChannels > 4 || !r->res.pitch2D.width || !r->res.pitch2D.height ||
        r->res.pitch2D.pitchInBytes < r->res.pitch2D.width * elem ||
        r->res.pitch2D.pitchInBytes % 32)
      return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
  }
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult object_new(unsigned long long *out, const CUDA_RESOURCE_DESC *r,
                           const CUDA_TEXTURE_DESC *t, int surface)
{
  if (!out)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult e = check_resource(r, surface);
  if (e != CUDA_SUCCESS)
    return e;
  for (size_t i = 0; i < MAX_OBJECTS; i++)
    if (!objects[i]) {
      struct Object *o = calloc(1, sizeof *o);
      if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
      o->surface = surface;
      o->res = *r;
      if (t)
        o->tex = *t;
      objects[i] = o;
      fake_keep(o);
      fake_live[FAKE_TEXTURE]++;
      *out = i + 1;
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_OUT_OF_MEMORY;
}

static struct Object *object_at(unsigned long long h, int surface)
{
  return h >= 1 && h <= MAX_OBJECTS && objects[h - 1] && objects[h - 1]->surface == surface
    ? objects[h - 1] : NULL;
}

static CUresult object_destroy(unsigned long long h, int surface)
{
  struct Object *o = object_at(h, surface);
  if (!o)
    return CUDA_ERROR_INVALID_HANDLE;
  objects[h - 1] = NULL;
  fake_unkeep(o);
  fake_live[FAKE_TEXTURE]--;
  free(o);
  return CUDA_SUCCESS;
}

CUresult fake_cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *r,
                                const CUDA_TEXTURE_DESC *t, const CUDA_RESOURCE_VIEW_DESC *v)
{
  FAKE_ENTER(cuTexObjectCreate);
  if (!t || v)
    return CUDA_ERROR_INVALID_VALUE;
  for (int k = 0; k < 3; k++)
    if ((unsigned)t->addressMode[k] > CU_TR_ADDRESS_MODE_BORDER)
      return CUDA_ERROR_INVALID_VALUE;
  if ((unsigned)t->filterMode > CU_TR_FILTER_MODE_LINEAR || t->maxAnisotropy > 16)
    return CUDA_ERROR_INVALID_VALUE;
  return object_new(out, r, t, 0);
}

CUresult fake_cuTexObjectDestroy(CUtexObject h)
{
  FAKE_ENTER(cuTexObjectDestroy);
  return object_destroy(h, 0);
}

CUresult fake_cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *r)
{
  FAKE_ENTER(cuSurfObjectCreate);
  return object_new(out, r, NULL, 1);
}

CUresult fake_cuSurfObjectDestroy(CUsurfObject h)
{
  FAKE_ENTER(cuSurfObjectDestroy);
  return object_destroy(h, 1);
}

void *fake_object_data(unsigned long long h, int surface, size_t *bytes, size_t *pitch)
{
  const struct Object *o = object_at(h, surface);
  if (!o)
    return NULL;
  switch (o->res.resType) {
  case CU_RESOURCE_TYPE_ARRAY: {
    CUarray a = o->res.res.array.hArray;
    if (!array_valid(a))
      return NULL;              /* destroyed under the object: a use after free on a GPU */
    *bytes = a->pitch * a->rows;
    *pitch = a->pitch;
    return a->data;
  }
  case CU_RESOURCE_TYPE_LINEAR:
    *bytes = *pitch = o->res.res.linear.sizeInBytes;
    return (void *)(uintptr_t)o->res.res.linear.devPtr;
  default:
    *pitch = o->res.res.pitch2D.pitchInBytes;
    *bytes = *pitch * o->res.res.pitch2D.height;
    return (void *)(uintptr_t)o->res.res.pitch2D.devPtr;
  }
}

/* fakecuda.texture(handle)'s array fields: the array a live one reads */
int fake_array_desc(CUarray a, CUDA_ARRAY3D_DESCRIPTOR *d)
{
  if (!array_valid(a))
    return 0;
  *d = a->d;
  return 1;
}

/* fakecuda.texture(handle): what the texture was made with (lua.c) */
int fake_texture_desc(unsigned long long h, CUDA_RESOURCE_DESC *r, CUDA_TEXTURE_DESC *t)
{
  const struct Object *o = object_at(h, 0);
  if (!o)
    return 0;
  *r = o->res;
  *t = o->tex;
  return 1;
}

/* --- graph memory: the fake makes no graph allocations ----------------------- */

CUresult fake_cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
  FAKE_ENTER(cuDeviceGetGraphMemAttribute);
  if (fake_bad_device(dev))
    return CUDA_ERROR_INVALID_DEVICE;
  if (!value || (unsigned)attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
    return CUDA_ERROR_INVALID_VALUE;
  *(cuuint64_t *)value = 0;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGraphMemTrim(CUdevice dev)
{
  FAKE_ENTER(cuDeviceGraphMemTrim);
  return fake_bad_device(dev) ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}
