// Runtime queries; they prove the extension is linked against cudart (without it, importing
// fails with an undefined __cudaRegisterFatBinary / cudaGetDeviceCount).
#include <cuda_runtime.h>

#include "minikernel_cuda.h"

extern "C" int minikernel_device_count(int* count) {
  *count = 0;
  cudaError_t err = cudaGetDeviceCount(count);
  if (err != cudaSuccess) {
    *count = 0;
  }
  return static_cast<int>(err);
}

extern "C" int minikernel_runtime_version(void) {
  int version = 0;
  cudaRuntimeGetVersion(&version);
  return version;
}

extern "C" const char* minikernel_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}
