// The C interface of the nvcc-compiled units (plain C types: the Python module needs no CUDA
// or torch headers). unit N defines multikernel_unit_N and multikernel_launch_N.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MULTIKERNEL_DECLARE(n)             \
  int multikernel_unit_##n(void);          \
  int multikernel_launch_##n(float* x, int n_elems, void* stream);

MULTIKERNEL_DECLARE(0)
MULTIKERNEL_DECLARE(1)
MULTIKERNEL_DECLARE(2)
MULTIKERNEL_DECLARE(3)
MULTIKERNEL_DECLARE(4)
MULTIKERNEL_DECLARE(5)
MULTIKERNEL_DECLARE(6)
MULTIKERNEL_DECLARE(7)

#ifdef __cplusplus
}
#endif
