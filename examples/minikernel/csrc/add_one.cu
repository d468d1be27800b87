// The one kernel: x += 1 over a float buffer, grid-stride so any n fits one launch.
#include <cuda_runtime.h>

#include "minikernel_cuda.h"

namespace {

__global__ void add_one_kernel(float* data, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    data[i] += 1.0f;
  }
}

}  // namespace

extern "C" int minikernel_add_one_f32(float* data, int64_t n, void* stream) {
  if (n <= 0) {
    return 0;
  }
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535) {
    blocks = 65535;
  }
  add_one_kernel<<<static_cast<unsigned int>(blocks), threads, 0,
                   static_cast<cudaStream_t>(stream)>>>(data, n);
  return static_cast<int>(cudaGetLastError());
}
