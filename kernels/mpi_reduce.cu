// mpi_reduce_<op>_<dtype>(acc, in, n): acc[i] = op(acc[i], in[i]) for i < n,
// the device side of cuda.mpi.allreduce on device buffers (sum, min, max of
// every cudalua dtype). A grid-stride loop: any grid covers any n.
// SPDX-License-Identifier: MIT
struct Sum { template <typename T> __device__ static T apply(T a, T b) { return (T)(a + b); } };
struct Min { template <typename T> __device__ static T apply(T a, T b) { return b < a ? b : a; } };
struct Max { template <typename T> __device__ static T apply(T a, T b) { return b > a ? b : a; } };

template <typename Op, typename T>
__device__ void reduce(T *acc, const T *in, unsigned long long n)
{
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    acc[i] = Op::apply(acc[i], in[i]);
}

extern "C" __global__ void mpi_reduce_sum_float32(float *acc, const float *in, unsigned long long n) { reduce<Sum>(acc, in, n); }
extern "C" __global__ void mpi_reduce_min_float32(float *acc, const float *in, unsigned long long n) { reduce<Min>(acc, in, n); }
extern "C" __global__ void mpi_reduce_max_float32(float *acc, const float *in, unsigned long long n) { reduce<Max>(acc, in, n); }
extern "C" __global__ void mpi_reduce_sum_float64(double *acc, const double *in, unsigned long long n) { reduce<Sum>(acc, in, n); }
extern "C" __global__ void mpi_reduce_min_float64(double *acc, const double *in, unsigned long long n) { reduce<Min>(acc, in, n); }
extern "C" __global__ void mpi_reduce_max_float64(double *acc, const double *in, unsigned long long n) { reduce<Max>(acc, in, n); }
extern "C" __global__ void mpi_reduce_sum_int8(signed char *acc, const signed char *in, unsigned long long n) { reduce<Sum>(acc, in, n); }
extern "C" __global__ void mpi_reduce_min_int8(signed char *acc, const signed char *in, unsigned long long n) { reduce<Min>(acc, in, n); }
extern "C" __global__ void mpi_reduce_max_int8(signed char *acc, const signed char *in, unsigned long long n) { reduce<Max>(acc, in, n); }
extern "C" __global__ void mpi_reduce_sum_int16(short *acc, const short *in, unsigned long long n) { reduce<Sum>(acc, in, n); }
extern "C" __global__ void mpi_reduce_min_int16(short *acc, const short *in, unsigned long long n) { reduce<Min>(acc, in, n); }
extern "C" __global__ void mpi_reduce_max_int16(short *acc, const short *in, unsigned long long n) { reduce<Max>(acc, in, n); }
extern "C" __global__ void mpi_reduce_sum_int32(int *acc, const int *in, unsigned long long n) { reduce<Sum>(acc, in, n); }
extern "C" __global__ void mpi_reduce_min_int32(int *acc, const int *in, unsigned long long n) { reduce<Min>(acc, in, n); }
extern "C" __global__ void mpi_reduce_max_int32(int *acc, const int *in, unsigned long long n) { reduce<Max>(acc, in, n); }
extern "C" __global__ void mpi_reduce_sum_int64(long long *acc, const long long *in, unsigned long long n) { reduce<Sum>(acc, in, n); }
extern "C" __global__ void mpi_reduce_min_int64(long long *acc, const long long *in, unsigned long long n) { reduce<Min>(acc, in, n); }
extern "C" __global__ void mpi_reduce_max_int64(long long *acc, const long long *in, unsigned long long n) { reduce<Max>(acc, in, n); }
extern "C" __global__ void mpi_reduce_sum_uint8(unsigned char *acc, const unsigned char *in, unsigned long long n) { reduce<Sum>(acc, in, n); }
extern "C" __global__ void mpi_reduce_min_uint8(unsigned char *acc, const unsigned char *in, unsigned long long n) { reduce<Min>(acc, in, n); }
extern "C" __global__ void mpi_reduce_max_uint8(unsigned char *acc, const unsigned char *in, unsigned long long n) { reduce<Max>(acc, in, n); }
extern "C" __global__ void mpi_reduce_sum_uint16(unsigned short *acc, const unsigned short *in, unsigned long long n) { reduce<Sum>(acc, in, n); }
extern "C" __global__ void mpi_reduce_min_uint16(unsigned short *acc, const unsigned short *in, unsigned long long n) { reduce<Min>(acc, in, n); }
extern "C" __global__ void mpi_reduce_max_uint16(unsigned short *acc, const unsigned short *in, unsigned long long n) { reduce<Max>(acc, in, n); }
extern "C" __global__ void mpi_reduce_sum_uint32(unsigned int *acc, const unsigned int *in, unsigned long long n) { reduce<Sum>(acc, in, n); }
extern "C" __global__ void mpi_reduce_min_uint32(unsigned int *acc, const unsigned int *in, unsigned long long n) { reduce<Min>(acc, in, n); }
extern "C" __global__ void mpi_reduce_max_uint32(unsigned int *acc, const unsigned int *in, unsigned long long n) { reduce<Max>(acc, in, n); }
extern "C" __global__ void mpi_reduce_sum_uint64(unsigned long long *acc, const unsigned long long *in, unsigned long long n) { reduce<Sum>(acc, in, n); }
extern "C" __global__ void mpi_reduce_min_uint64(unsigned long long *acc, const unsigned long long *in, unsigned long long n) { reduce<Min>(acc, in, n); }
extern "C" __global__ void mpi_reduce_max_uint64(unsigned long long *acc, const unsigned long long *in, unsigned long long n) { reduce<Max>(acc, in, n); }
