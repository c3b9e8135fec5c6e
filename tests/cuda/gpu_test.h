// gpu_test.h — what the GPU tests share: they skip, saying why, without a device.
#ifndef GCCL_TESTS_CUDA_GPU_TEST_H
#define GCCL_TESTS_CUDA_GPU_TEST_H

#include <gtest/gtest.h>

extern "C" {
#include "cuda/gpu_compressor.h"
}

#define SKIP_WITHOUT_GPU()                                               \
  do {                                                                   \
    const char* why = nullptr;                                           \
    if (!gpu_available(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

#endif
