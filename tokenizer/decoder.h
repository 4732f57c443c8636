// Decoders of a tokenizer.json ("decoder" key): turn token strings back into
// text. Like tokenizers, each step rewrites the list of token strings and the
// result is their concatenation.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace fptrain::tokenizer {

class JsonNode;

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Builds the decoder described by `spec` (null gives nullptr).
std::unique_ptr<Decoder> make_decoder(const JsonNode& spec);

}  // namespace fptrain::tokenizer
