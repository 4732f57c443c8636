// ATen's scalar types onto the kernels' Dtype (the host side of every CUDA op).
#pragma once

#include "common/cuda/dtype.h"

#include <c10/core/ScalarType.h>

#include <stdexcept>
#include <string>

namespace fptrain::common::cuda {

// `who` names the caller in the error for a type the kernels do not take.
inline Dtype dtype_of(c10::ScalarType t, const char* who) {
  switch (t) {
    case c10::kFloat: return Dtype::kFloat32;
    case c10::kBFloat16: return Dtype::kBFloat16;
    case c10::kHalf: return Dtype::kFloat16;
    default: throw std::invalid_argument(std::string(who) + ": unsupported dtype " + c10::toString(t));
  }
}

}  // namespace fptrain::common::cuda
