// scale_and_bias: data[i] = data[i] * scale + bias, in place, grid-stride.
// SPDX-License-Identifier: MIT
extern "C" __global__ void scale_and_bias(float *data, float scale, float bias,
                                          unsigned long long n)
{
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += stride)
    data[i] = data[i] * scale + bias;
}
