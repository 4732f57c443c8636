#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

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
std::unique_ptr<PostProcessor> make_template(const nlohmann::json& spec, const std::string& file) {
  const auto& single = json_field(spec, "single", file, "post_processor TemplateProcessing");
  const auto& specials = json_field(spec, "special_tokens", file, "post_processor TemplateProcessing");
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (const auto& piece : single) {
    if (piece.contains("Sequence")) {
      if (piece["Sequence"].value("id", std::string("A")) != "A" || seen_sequence) {
        throw std::runtime_error(file + ": TemplateProcessing single template must hold sequence A once");
      }
      seen_sequence = true;
    } else if (piece.contains("SpecialToken")) {
      const std::string name = json_string(piece["SpecialToken"], "id", file, "TemplateProcessing SpecialToken");
      if (!specials.contains(name)) {
        throw std::runtime_error(file + ": TemplateProcessing uses special token '" + name +
                                 "' missing from special_tokens");
      }
      auto& target = seen_sequence ? suffix : prefix;
      for (const auto& id : json_field(specials[name], "ids", file, "TemplateProcessing special token " + name)) {
        target.push_back(id.get<int32_t>());
      }
    } else {
      throw std::runtime_error(file + ": TemplateProcessing has an unknown template piece " + piece.dump());
    }
  }
  if (!seen_sequence) throw std::runtime_error(file + ": TemplateProcessing single template lacks $A");
  return std::make_unique<TemplateProcessor>(std::move(prefix), std::move(suffix));
}

}  // namespace

std::unique_ptr<PostProcessor> make_template_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
  return std::make_unique<TemplateProcessor>(std::move(prefix), std::move(suffix));
}

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& spec, const std::string& file) {
  if (spec.is_null()) return nullptr;
  const std::string type = json_type(spec, file, "post_processor");
  if (type == "TemplateProcessing") return make_template(spec, file);
  if (type == "ByteLevel") return std::make_unique<IdentityProcessor>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const auto& step : json_field(spec, "processors", file, "post_processor Sequence")) {
      if (auto p = make_post_processor(step, file)) steps.push_back(std::move(p));
    }
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  throw std::runtime_error(file + ": unsupported post_processor type '" + type + "'");
}

}  // namespace fptrain::tokenizer
