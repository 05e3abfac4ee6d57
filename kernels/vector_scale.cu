// vector_scale: the cuda.core streaming-overlap sample's compute kernel (launch with 256 threads per block).
// SPDX-License-Identifier: MIT
extern "C" __global__ void vector_scale(const float *input, float *output, float scale,
                                        unsigned long long n)
{
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float val = input[i] * scale;
    // Busy work: enough arithmetic per element that compute can overlap copies.
    for (int k = 0; k < 50; k++)
      val = sqrtf(val * val + 1.0f);
    output[i] = val;
  }
}
