#include "attention/varlen_attention.h"

#include <stdexcept>

namespace fptrain::attention {

Backend parse_backend(std::string_view name) {
  if (name == "reference") return Backend::kReference;
  if (name == "torch-fa2") return Backend::kTorchFA2;
  if (name == "hopper" || name == "fptrain") return Backend::kHopper;  // "fptrain": its old name
  throw std::invalid_argument("unknown attention backend '" + std::string(name) +
                              "' (expected hopper (alias fptrain), torch-fa2, reference)");
}

std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::kReference: return "reference";
    case Backend::kTorchFA2: return "torch-fa2";
    case Backend::kHopper: return "hopper";
  }
  return "?";
}

}  // namespace fptrain::attention
