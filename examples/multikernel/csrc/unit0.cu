// Unit 0 of the multi-unit sample: a polynomial kernel unrolled for several degrees and
// types, so that each unit is a few seconds of nvcc, like one CUTLASS-heavy file of a real
// package. MULTIKERNEL_SALT is what the compile-cache tests change to edit one unit.
#include <cuda_runtime.h>
#include <stdint.h>

#include "multikernel.h"

#define MULTIKERNEL_UNIT 0
#define MULTIKERNEL_SALT 1

namespace {

template <typename T, int K>
__global__ void poly(T* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const T v = x[i];
  T acc = T(0);
#pragma unroll
  for (int k = 0; k < K; ++k) acc = acc * v + T((k * MULTIKERNEL_UNIT + MULTIKERNEL_SALT) % 7);
  x[i] = acc;
}

template <typename T>
void launch_all(T* x, int n, cudaStream_t stream) {
  const int blocks = (n + 255) / 256;
  poly<T, 32><<<blocks, 256, 0, stream>>>(x, n);
  poly<T, 64><<<blocks, 256, 0, stream>>>(x, n);
  poly<T, 96><<<blocks, 256, 0, stream>>>(x, n);
  poly<T, 128><<<blocks, 256, 0, stream>>>(x, n);
}

}  // namespace

extern "C" int multikernel_unit_0(void) { return MULTIKERNEL_UNIT * 1000 + MULTIKERNEL_SALT; }

extern "C" int multikernel_launch_0(float* x, int n, void* stream) {
  launch_all<float>(x, n, static_cast<cudaStream_t>(stream));
  launch_all<double>(reinterpret_cast<double*>(x), n / 2, static_cast<cudaStream_t>(stream));
  launch_all<int32_t>(reinterpret_cast<int32_t*>(x), n, static_cast<cudaStream_t>(stream));
  launch_all<int64_t>(reinterpret_cast<int64_t*>(x), n / 2, static_cast<cudaStream_t>(stream));
  return static_cast<int>(cudaGetLastError());
}
