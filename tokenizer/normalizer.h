// Normalizers of a tokenizer.json ("normalizer" key), applied to each piece of
// text between added tokens, before pre-tokenization.
#pragma once

#include <memory>
#include <string>

namespace fptrain::tokenizer {

class JsonNode;

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Builds the normalizer described by `spec` (null gives nullptr). Errors name
// the tokenizer file and the key path, e.g. for an unsupported "type".
std::unique_ptr<Normalizer> make_normalizer(const JsonNode& spec);

}  // namespace fptrain::tokenizer
