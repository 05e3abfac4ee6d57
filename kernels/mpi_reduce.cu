// mpi_reduce_<op>_<dtype>(acc, in, n): acc[i] = op(acc[i], in[i]) for i < n,
// the device side of cuda.mpi.allreduce on device buffers (sum, min, max of
// every cudalua dtype). A grid-stride loop: any grid covers any n.
// SPDX-License-Identifier: MIT
#define MPI_REDUCE(OP, NAME, T, EXPR)                                                     \
  extern "C" __global__ void mpi_reduce_##OP##_##NAME(T *acc, const T *in,               \
                                                      unsigned long long n)              \
  {                                                                                      \
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;              \
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; \
         i < n; i += stride) {                                                           \
      T a = acc[i], b = in[i];                                                           \
      acc[i] = EXPR;                                                                     \
    }                                                                                    \
  }

#define MPI_REDUCE_ALL(NAME, T)                \
  MPI_REDUCE(sum, NAME, T, (T)(a + b))         \
  MPI_REDUCE(min, NAME, T, (b < a ? b : a))    \
  MPI_REDUCE(max, NAME, T, (b > a ? b : a))

MPI_REDUCE_ALL(float32, float)
MPI_REDUCE_ALL(float64, double)
MPI_REDUCE_ALL(int8, signed char)
MPI_REDUCE_ALL(int16, short)
MPI_REDUCE_ALL(int32, int)
MPI_REDUCE_ALL(int64, long long)
MPI_REDUCE_ALL(uint8, unsigned char)
MPI_REDUCE_ALL(uint16, unsigned short)
MPI_REDUCE_ALL(uint32, unsigned int)
MPI_REDUCE_ALL(uint64, unsigned long long)
