#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include <limits>
#include <stdexcept>

#include "common/json_input.h"
#include "tokenizer/tokenizer_json_util.h"

namespace fptrain::tokenizer {
namespace {

class TemplateProcessor : public PostProcessor {
 public:
  TemplateProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void process(std::vector<int32_t>& ids) const override {
    if (!prefix_.empty()) ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

// Post-processors that only adjust offsets (ByteLevel) leave ids alone.
class IdentityProcessor : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& s : steps_) s->process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

// TemplateProcessing's "single" template: [SpecialToken..., Sequence A, SpecialToken...].
std::unique_ptr<PostProcessor> make_template(const JsonNode& spec) {
  const JsonNode single = spec.required("single");
  const JsonNode specials = spec.required("special_tokens");
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (const JsonNode& piece : single.elements()) {
    if (piece.has("Sequence")) {
      if (piece["Sequence"].string_or("id", "A") != "A" || seen_sequence) {
        piece.fail("the TemplateProcessing single template must hold sequence A once");
      }
      seen_sequence = true;
    } else if (piece.has("SpecialToken")) {
      const std::string name = piece["SpecialToken"].required("id").string();
      const JsonNode special = specials.entry(name);
      if (special.is_null()) {
        piece.fail("TemplateProcessing uses special token " + common::quoted_excerpt(name) +
                   " missing from special_tokens");
      }
      auto& target = seen_sequence ? suffix : prefix;
      for (const JsonNode& id : special.required("ids").elements())
        target.push_back(static_cast<int32_t>(id.integer_in(0, std::numeric_limits<int32_t>::max())));
    } else {
      piece.fail("TemplateProcessing has an unknown template piece " + common::json_excerpt(piece.json()));
    }
  }
  if (!seen_sequence) single.fail("the TemplateProcessing single template lacks $A");
  return std::make_unique<TemplateProcessor>(std::move(prefix), std::move(suffix));
}

}  // namespace

std::unique_ptr<PostProcessor> make_template_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
  return std::make_unique<TemplateProcessor>(std::move(prefix), std::move(suffix));
}

std::unique_ptr<PostProcessor> make_post_processor(const JsonNode& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.type();
  if (type == "TemplateProcessing") return make_template(spec);
  if (type == "ByteLevel") return std::make_unique<IdentityProcessor>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const JsonNode& step : spec.required("processors").elements()) {
      if (auto p = make_post_processor(step)) steps.push_back(std::move(p));
    }
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  throw std::runtime_error(spec.file() + ": unsupported post_processor type '" + common::cut_text(type) + "'");
}

}  // namespace fptrain::tokenizer
