#include "models/model_dtype.h"

#include <stdexcept>

namespace fptrain::models {

at::ScalarType dtype_from_name(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw std::invalid_argument("unsupported dtype '" + name + "' (expected float32, bfloat16 or float16)");
}

std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: throw std::invalid_argument(std::string("unsupported model dtype ") + c10::toString(dtype));
  }
}

}  // namespace fptrain::models
