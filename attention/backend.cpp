#include "attention/varlen_attention.h"

#include <stdexcept>

namespace fptrain::attention {

Backend parse_backend(std::string_view name) {
  if (name == "reference") return Backend::Reference;
  if (name == "torch-fa2") return Backend::TorchFA2;
  if (name == "fptrain") return Backend::Fptrain;
  throw std::invalid_argument("unknown attention backend '" + std::string(name) +
                              "' (expected fptrain, torch-fa2 or reference)");
}

std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::Reference: return "reference";
    case Backend::TorchFA2: return "torch-fa2";
    case Backend::Fptrain: return "fptrain";
  }
  return "?";
}

}  // namespace fptrain::attention
