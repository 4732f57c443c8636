// What a suite of the fused CUDA kernels needs before it runs: a CUDA device (a
// failure: the _gpu areas run only where one is), and kernels built for it (a skip).
#pragma once

#include "models/fused_ops.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#define REQUIRE_FUSED_KERNELS()                                                                              \
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";                                            \
  if (!fptrain::models::fused_cuda_kernels_available(at::Device(at::kCUDA, 0))) {                            \
    GTEST_SKIP() << "the fused kernels are "                                                                 \
                 << (fptrain::models::fused_cuda_kernels_built() ? "built but this GPU is not sm_90"          \
                                                                 : "not in this build");                     \
  }
