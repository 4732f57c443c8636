// Normalizers of a tokenizer.json ("normalizer" key), applied to each piece of
// text between added tokens, before pre-tokenization.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace fptrain::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Builds the normalizer described by `spec` (null gives nullptr). `file` names
// the tokenizer file in errors, e.g. for an unsupported "type".
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& file);

}  // namespace fptrain::tokenizer
