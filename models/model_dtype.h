// The model dtypes config.json names ("float32" | "bfloat16" | "float16") and
// their LibTorch scalar types.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace fptrain::models {

// Throws std::invalid_argument naming the name and the supported ones.
at::ScalarType dtype_from_name(const std::string& name);
std::string dtype_name(at::ScalarType dtype);

}  // namespace fptrain::models
