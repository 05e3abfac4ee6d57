// copy_bytes: an SM copy, for cudalua bandwidth's "sm" engine (launch with 256 threads per block).
// SPDX-License-Identifier: MIT
// A grid-stride loop over 16-byte vectors when both pointers allow it (one
// load and one store per 16 bytes keeps the memory system busy with few
// instructions), then the bytes left over one at a time.
extern "C" __global__ void copy_bytes(const unsigned char *src, unsigned char *dst,
                                      unsigned long long n)
{
  unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  bool aligned = (((unsigned long long)src | (unsigned long long)dst) & 15) == 0;
  unsigned long long vectors = aligned ? n / 16 : 0;
  const uint4 *src4 = (const uint4 *)src;
  uint4 *dst4 = (uint4 *)dst;
  for (unsigned long long i = first; i < vectors; i += stride)
    dst4[i] = src4[i];
  for (unsigned long long i = vectors * 16 + first; i < n; i += stride)
    dst[i] = src[i];
}
