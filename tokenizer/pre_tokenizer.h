// Pre-tokenizers of a tokenizer.json ("pre_tokenizer" key): they cut normalized
// text into the pieces the model tokenizes one by one (and may rewrite them,
// e.g. ByteLevel maps bytes to printable characters).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace fptrain::tokenizer {

class JsonNode;

struct PreToken {
  std::string text;
  // True when the piece starts at offset 0 of the original input (Metaspace's
  // prepend_scheme "first" only prefixes such a piece).
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by its splits; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

// Builds the pre-tokenizer described by `spec` (null gives nullptr).
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& spec);

}  // namespace fptrain::tokenizer
