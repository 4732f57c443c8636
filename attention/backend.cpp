#include "attention/varlen_attention.h"

#include <stdexcept>

namespace fptrain::attention {

Backend parse_backend(std::string_view name) {
  try {
    return common::parse_enum<Backend>(name, "attention backend");
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("unknown attention backend '" + std::string(name) +
                                "' (expected hopper (alias fptrain), torch-fa2, reference)");
  }
}

std::string_view backend_name(Backend backend) { return common::enum_name(backend); }

}  // namespace fptrain::attention
