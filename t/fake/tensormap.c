/* SPDX-License-Identifier: MIT */
/* tensormap.c: TMA descriptors. The fake checks what the driver documents
 * (cuda.h) and returns CUDA_ERROR_INVALID_VALUE where the driver would,
 * then writes a descriptor a test can read back with string.unpack:
 *
 *   0   "FAKETMAP"
 *   8   u64 global address
 *   16  u8 kind (0 tiled, 1 im2col), dtype, rank, interleave, swizzle,
 *       l2 promotion, oob fill, 0
 *   24  u32 x 5  globalDim - 1
 *   44  4 zero bytes
 *   48  u64 x 4  globalStrides
 *   80  u8 x 5   boxDim - 1 (tiled; zero for im2col)
 *   85  u8 x 5   elementStrides
 *   90  u8       channelsPerPixel - 1 (im2col)
 *   91  0
 *   92  u16      pixelsPerColumn - 1 (im2col)
 *   94  i16 x 3  pixelBoxLowerCorner, then i16 x 3 upper (im2col)
 *   106 zeros to 128 */
#include <stdint.h>
#include <string.h>

#include "fake.h"

static const unsigned sizes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
#define NTYPES (sizeof sizes / sizeof sizes[0])

/* The rules both encodes share; inner is boxDim[0] or channelsPerPixel. */
static int common_ok(const CUtensorMap *tm, CUtensorMapDataType type, cuuint32_t rank,
                     const void *addr, const cuuint64_t *dims, const cuuint64_t *strides,
                     unsigned inner, const cuuint32_t *es, CUtensorMapInterleave il,
                     CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
  if (!tm || (uintptr_t)tm % 64 || (unsigned)type >= NTYPES || !addr || !dims || !es ||
      (rank > 1 && !strides))
    return 0;
  if ((unsigned)il > CU_TENSOR_MAP_INTERLEAVE_32B || (unsigned)sw > CU_TENSOR_MAP_SWIZZLE_128B ||
      (unsigned)l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B ||
      (unsigned)oob > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
    return 0;
  uintptr_t align = il == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
  if ((uintptr_t)addr % align)
    return 0;
  for (unsigned k = 0; k < rank; k++)
    if (dims[k] == 0 || dims[k] > (uint64_t)1 << 32 || es[k] == 0 || es[k] > 8)
      return 0;
  for (unsigned k = 0; k + 1 < rank; k++)
    if (strides[k] % align || strides[k] >= (uint64_t)1 << 40)
      return 0;
  unsigned bytes = inner * sizes[type];
  if (il == CU_TENSOR_MAP_INTERLEAVE_NONE && bytes % 16)
    return 0;
  if (il == CU_TENSOR_MAP_INTERLEAVE_32B && sw != CU_TENSOR_MAP_SWIZZLE_32B)
    return 0;
  if (il == CU_TENSOR_MAP_INTERLEAVE_NONE && sw != CU_TENSOR_MAP_SWIZZLE_NONE && bytes > (16u << sw))
    return 0;
  if (oob && type < CU_TENSOR_MAP_DATA_TYPE_FLOAT16)
    return 0;
  return 1;
}

static unsigned char *header(CUtensorMap *tm, int kind, CUtensorMapDataType type, cuuint32_t rank,
                             void *addr, const cuuint64_t *dims, const cuuint64_t *strides,
                             const cuuint32_t *es, int il, int sw, int l2, int oob)
{
  unsigned char *p = (unsigned char *)tm;
  memset(p, 0, sizeof *tm);
  memcpy(p, "FAKETMAP", 8);
  uint64_t a = (uint64_t)(uintptr_t)addr;
  memcpy(p + 8, &a, 8);
  unsigned char small[7] = {(unsigned char)kind, (unsigned char)type, (unsigned char)rank,
                            (unsigned char)il, (unsigned char)sw, (unsigned char)l2,
                            (unsigned char)oob};
  memcpy(p + 16, small, 7);
  for (unsigned k = 0; k < rank; k++) {
    uint32_t d = (uint32_t)(dims[k] - 1);
    memcpy(p + 24 + 4 * k, &d, 4);
    p[85 + k] = (unsigned char)es[k];
  }
  for (unsigned k = 0; k + 1 < rank; k++)
    memcpy(p + 48 + 8 * k, &strides[k], 8);
  return p;
}

CUresult fake_cuTensorMapEncodeTiled(CUtensorMap *tm, CUtensorMapDataType type, cuuint32_t rank,
                                     void *addr, const cuuint64_t *dims, const cuuint64_t *strides,
                                     const cuuint32_t *box, const cuuint32_t *es,
                                     CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                     CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
  FAKE_ENTER(cuTensorMapEncodeTiled);
  if (rank == 0 || rank > 5 || (il != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3) || !box ||
      !common_ok(tm, type, rank, addr, dims, strides, box[0], es, il, sw, l2, oob))
    return CUDA_ERROR_INVALID_VALUE;
  for (unsigned k = 0; k < rank; k++)
    if (box[k] == 0 || box[k] > 256)
      return CUDA_ERROR_INVALID_VALUE;
  unsigned char *p = header(tm, 0, type, rank, addr, dims, strides, es, il, sw, l2, oob);
  for (unsigned k = 0; k < rank; k++)
    p[80 + k] = (unsigned char)(box[k] - 1);
  return CUDA_SUCCESS;
}

CUresult fake_cuTensorMapEncodeIm2col(CUtensorMap *tm, CUtensorMapDataType type, cuuint32_t rank,
                                      void *addr, const cuuint64_t *dims,
                                      const cuuint64_t *strides, const int *lower,
                                      const int *upper, cuuint32_t channels, cuuint32_t pixels,
                                      const cuuint32_t *es, CUtensorMapInterleave il,
                                      CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                                      CUtensorMapFloatOOBfill oob)
{
  FAKE_ENTER(cuTensorMapEncodeIm2col);
  if (rank < 3 || rank > 5 || !lower || !upper || channels == 0 || channels > 256 ||
      pixels == 0 || pixels > 1024 ||
      !common_ok(tm, type, rank, addr, dims, strides, channels, es, il, sw, l2, oob))
    return CUDA_ERROR_INVALID_VALUE;
  const int lim = rank == 3 ? 1 << 15 : rank == 4 ? 1 << 7 : 1 << 4;
  for (unsigned k = 0; k + 2 < rank; k++)
    if (lower[k] < -lim || lower[k] >= lim || upper[k] < -lim || upper[k] >= lim)
      return CUDA_ERROR_INVALID_VALUE;
  unsigned char *p = header(tm, 1, type, rank, addr, dims, strides, es, il, sw, l2, oob);
  p[90] = (unsigned char)(channels - 1);
  uint16_t px = (uint16_t)(pixels - 1);
  memcpy(p + 92, &px, 2);
  for (unsigned k = 0; k + 2 < rank; k++) {
    int16_t lo = (int16_t)lower[k], up = (int16_t)upper[k];
    memcpy(p + 94 + 2 * k, &lo, 2);
    memcpy(p + 100 + 2 * k, &up, 2);
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuTensorMapReplaceAddress(CUtensorMap *tm, void *addr)
{
  FAKE_ENTER(cuTensorMapReplaceAddress);
  unsigned char *p = (unsigned char *)tm;
  if (!tm || (uintptr_t)tm % 64 || memcmp(p, "FAKETMAP", 8) != 0 || !addr)
    return CUDA_ERROR_INVALID_VALUE;
  uintptr_t align = p[19] == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
  if ((uintptr_t)addr % align)
    return CUDA_ERROR_INVALID_VALUE;
  uint64_t a = (uint64_t)(uintptr_t)addr;
  memcpy(p + 8, &a, 8);
  return CUDA_SUCCESS;
}
