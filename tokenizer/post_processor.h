// Post-processors of a tokenizer.json ("post_processor" key): they add the
// special tokens (BOS/EOS) around a single sequence when add_special_tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fptrain::tokenizer {

class JsonNode;

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Rewrites the ids of one sequence (only called with add_special_tokens).
  virtual void process(std::vector<int32_t>& ids) const = 0;
};

// Builds the post-processor described by `spec` (null gives nullptr).
std::unique_ptr<PostProcessor> make_post_processor(const JsonNode& spec);

// TemplateProcessing for a single sequence: `prefix` ids, the sequence, `suffix` ids.
std::unique_ptr<PostProcessor> make_template_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix);

}  // namespace fptrain::tokenizer
