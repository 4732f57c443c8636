#include "data/data_options.h"

#include <stdexcept>
#include <utility>

namespace fptrain::data {
namespace {

template <typename Enum, size_t N>
Enum parse_enum(std::string_view value, std::string_view key,
                const std::pair<const char*, Enum> (&names)[N]) {
  std::string choices;
  for (const auto& [name, v] : names) {
    if (value == name) return v;
    choices += choices.empty() ? "" : ", ";
    choices += name;
  }
  throw std::invalid_argument("data option '" + std::string(key) + "': unknown value '" +
                              std::string(value) + "' (expected one of: " + choices + ")");
}

template <typename Enum, size_t N>
const char* enum_name(Enum v, const std::pair<const char*, Enum> (&names)[N]) {
  for (const auto& [name, e] : names)
    if (e == v) return name;
  return "?";
}

const std::pair<const char*, ExampleFormat> kFormats[] = {
    {"auto", ExampleFormat::kAuto},   {"messages", ExampleFormat::kMessages},
    {"prompt_completion", ExampleFormat::kPromptCompletion},
    {"alpaca", ExampleFormat::kAlpaca}, {"text", ExampleFormat::kText},
    {"tokens", ExampleFormat::kTokens}};
const std::pair<const char*, BadLinePolicy> kBadLines[] = {{"error", BadLinePolicy::kError},
                                                           {"skip", BadLinePolicy::kSkip}};
const std::pair<const char*, OverlongPolicy> kOverlong[] = {{"truncate", OverlongPolicy::kTruncate},
                                                            {"drop", OverlongPolicy::kDrop}};
const std::pair<const char*, ChatTemplateKind> kTemplates[] = {
    {"auto", ChatTemplateKind::kAuto},       {"none", ChatTemplateKind::kNone},
    {"llama3", ChatTemplateKind::kLlama3},   {"llama2", ChatTemplateKind::kLlama2},
    {"mistral", ChatTemplateKind::kMistral}, {"granite3", ChatTemplateKind::kGranite3}};
const std::pair<const char*, ChatLossMask> kMasks[] = {{"assistant", ChatLossMask::kAssistant},
                                                       {"last_assistant", ChatLossMask::kLastAssistant},
                                                       {"all", ChatLossMask::kAll}};
const std::pair<const char*, BatchMode> kModes[] = {
    {"flatten", BatchMode::kFlatten}, {"pad", BatchMode::kPad}, {"pack", BatchMode::kPack}};

void require(bool ok, const std::string& key, const std::string& problem) {
  if (!ok) throw std::invalid_argument("data option '" + key + "': " + problem);
}

}  // namespace

ExampleFormat parse_example_format(std::string_view v, std::string_view k) { return parse_enum(v, k, kFormats); }
BadLinePolicy parse_bad_line_policy(std::string_view v, std::string_view k) { return parse_enum(v, k, kBadLines); }
OverlongPolicy parse_overlong_policy(std::string_view v, std::string_view k) { return parse_enum(v, k, kOverlong); }
ChatTemplateKind parse_chat_template(std::string_view v, std::string_view k) { return parse_enum(v, k, kTemplates); }
ChatLossMask parse_chat_loss_mask(std::string_view v, std::string_view k) { return parse_enum(v, k, kMasks); }
BatchMode parse_batch_mode(std::string_view v, std::string_view k) { return parse_enum(v, k, kModes); }

const char* to_string(ExampleFormat v) { return enum_name(v, kFormats); }
const char* to_string(BadLinePolicy v) { return enum_name(v, kBadLines); }
const char* to_string(OverlongPolicy v) { return enum_name(v, kOverlong); }
const char* to_string(ChatTemplateKind v) { return enum_name(v, kTemplates); }
const char* to_string(ChatLossMask v) { return enum_name(v, kMasks); }
const char* to_string(BatchMode v) { return enum_name(v, kModes); }

void validate_options(const DataOptions& o) {
  require(!o.files.empty(), "files", "no data file given");
  for (size_t i = 0; i < o.files.size(); ++i) {
    const std::string key = "files[" + std::to_string(i) + "]";
    require(!o.files[i].path.empty(), key + ".path", "empty path");
    require(o.files[i].weight >= 0.0, key + ".weight", "must be >= 0");
  }
  require(o.max_length >= 2, "max_length", "must be >= 2");
  require(o.max_zero_supervised_fraction >= 0.0 && o.max_zero_supervised_fraction <= 1.0,
          "max_zero_supervised_fraction", "must be in [0, 1]");
  require(o.examples_per_micro_batch >= 1, "examples_per_micro_batch", "must be >= 1");
  if (o.batching == BatchMode::kPack) {
    require(o.max_tokens >= o.max_length, "max_tokens",
            "must be >= max_length (" + std::to_string(o.max_length) + ") so every example fits");
    require(o.shuffle_window >= 1, "shuffle_window", "must be >= 1");
  }
  require(o.epochs >= 1, "epochs", "must be >= 1");
  require(o.world_size >= 1, "world_size", "must be >= 1");
  require(o.rank >= 0 && o.rank < o.world_size, "rank",
          "must be in [0, world_size=" + std::to_string(o.world_size) + ")");
  require(o.micro_batches_per_step >= 1, "micro_batches_per_step", "must be >= 1");
  require(o.workers >= 0, "workers", "must be >= 0");
  require(o.prefetch_steps >= 1, "prefetch_steps", "must be >= 1");
}

}  // namespace fptrain::data
