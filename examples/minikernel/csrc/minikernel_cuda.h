// The C interface between the nvcc-compiled objects and the torch extension.
// Plain C types only: the .cu files never see torch headers (they need -std=c++20 since
// torch 2.13, and a CPU-only torch has no CUDA headers), so the two sides share no C++ ABI.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Adds 1 to n floats in place on `stream`; returns a cudaError_t value (0 = success).
int minikernel_add_one_f32(float* data, int64_t n, void* stream);

// cudaGetDeviceCount; returns a cudaError_t value, *count = 0 on error.
int minikernel_device_count(int* count);

// cudaRuntimeGetVersion of the cudart linked in (e.g. 13000).
int minikernel_runtime_version(void);

// cudaGetErrorString.
const char* minikernel_error_string(int code);

#ifdef __cplusplus
}
#endif
