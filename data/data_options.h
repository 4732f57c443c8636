// Everything the data pipeline is configured by: a plain struct the trainer
// fills from the `data:` section of its YAML config, and the one place its
// defaults are set. Enum names are the YAML's (EnumNames below).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/enum_names.h"

namespace fptrain::data {

// How one JSONL line is read. kAuto: detected per file from its first lines.
enum class ExampleFormat { kAuto, kMessages, kPromptCompletion, kAlpaca, kText, kTokens };
// What a malformed line does: stop with file:line and the problem, or skip it (counted).
enum class BadLinePolicy { kError, kSkip };
// What an example longer than max_length does.
enum class OverlongPolicy { kTruncate, kDrop };
// Which chat template renders `messages`: kAuto = the tokenizer folder's own (tokenizer_config.json,
// chat_template.jinja), kNone = none, else one we ship (data/chat_templates/). See data/chat_template.h.
enum class ChatTemplateKind { kAuto, kNone, kLlama3, kLlama2, kMistral, kGranite3 };
// Which tokens of a `messages` example are supervised.
enum class ChatLossMask { kAssistant, kLastAssistant, kAll };
// flatten: N examples per micro-batch, concatenated (HF DataCollatorWithFlattening).
// pad: N examples, each padded to the longest (the baseline; pads are computed).
// pack: best-fit-decreasing into a token budget per micro-batch.
// fixed: offline fixed-length packing, as the packing paper's baseline: the
//   examples concatenated in order and cut into rows of exactly row_tokens
//   (an example may continue in the next row), rows_per_micro_batch rows a
//   micro-batch; each piece of an example its own sequence, or each row one
//   sequence with cross_example_attention.
enum class BatchMode { kFlatten, kPad, kPack, kFixed };

struct DataFile {
  std::filesystem::path path;
  // Examples of this file per epoch = round(weight x lines): 2.0 = every line
  // twice, 0.5 = a seeded half (a different half each epoch).
  double weight = 1.0;
  ExampleFormat format = ExampleFormat::kAuto;
};

struct DataOptions {
  std::vector<DataFile> files;

  // Examples and labels.
  int64_t max_length = 4096;  // tokens per example
  OverlongPolicy overlong = OverlongPolicy::kTruncate;
  BadLinePolicy bad_lines = BadLinePolicy::kError;
  // Examples with no supervised token are skipped; above this fraction of the
  // examples seen the pipeline stops with an error (checked from 1000 examples
  // on, and at the end of every epoch).
  double max_zero_supervised_fraction = 0.01;
  ChatTemplateKind chat_template = ChatTemplateKind::kAuto;
  std::filesystem::path tokenizer_dir;  // where kAuto reads tokenizer_config.json
  ChatLossMask loss_mask = ChatLossMask::kAssistant;
  // Padding id for `pad` mode. Unset: chosen by choose_pad_id() (never EOS).
  std::optional<int32_t> pad_id;

  // Batching.
  BatchMode batching = BatchMode::kFlatten;
  int64_t examples_per_micro_batch = 8;  // flatten, pad
  // flatten with several ranks: deal the step's examples to the ranks so that
  // their compute matches (deal_to_ranks: equal cost, any number of examples
  // each). The step's examples, and so its loss and gradient, do not change;
  // only which rank computes which. false: consecutive groups.
  bool balance_ranks = true;
  // The length at which an example's attention costs as much per token as the
  // rest of the model (set from the model's shape; 0: balance tokens only).
  int64_t balance_attention_length = 0;
  int64_t max_tokens = 0;                // pack: token budget per micro-batch (required there)
  int64_t shuffle_window = 4096;         // pack, fixed: examples planned at once
  int64_t row_tokens = 0;                // fixed: tokens per row (required there)
  int64_t rows_per_micro_batch = 4;      // fixed
  // fixed: every row one sequence, positions 0..row_tokens-1 and attention
  // across the examples in it (the paper's packing "without position ids").
  bool cross_example_attention = false;
  bool shuffle = true;                   // a seeded permutation of the epoch
  uint64_t seed = 0;
  int64_t epochs = 1;

  // Data parallelism and gradient accumulation: one optimizer step consumes
  // world_size x micro_batches_per_step micro-batches.
  int world_size = 1;
  int rank = 0;
  int64_t micro_batches_per_step = 1;

  // Tokenization runs on this many threads besides the producer (0: inline);
  // finished steps wait in a queue of prefetch_steps.
  int workers = 2;
  int prefetch_steps = 4;
};

// Throws std::invalid_argument naming the option and the problem.
void validate_options(const DataOptions& options);

}  // namespace fptrain::data

// The YAML names of the enums above (common::parse_enum / enum_name).
namespace fptrain::common {
template <>
struct EnumNames<data::ExampleFormat> {
  static constexpr std::array<EnumEntry<data::ExampleFormat>, 6> table = {{
      {data::ExampleFormat::kAuto, "auto"},
      {data::ExampleFormat::kMessages, "messages"},
      {data::ExampleFormat::kPromptCompletion, "prompt_completion"},
      {data::ExampleFormat::kAlpaca, "alpaca"},
      {data::ExampleFormat::kText, "text"},
      {data::ExampleFormat::kTokens, "tokens"}}};
};
template <>
struct EnumNames<data::BadLinePolicy> {
  static constexpr std::array<EnumEntry<data::BadLinePolicy>, 2> table = {
      {{data::BadLinePolicy::kError, "error"}, {data::BadLinePolicy::kSkip, "skip"}}};
};
template <>
struct EnumNames<data::OverlongPolicy> {
  static constexpr std::array<EnumEntry<data::OverlongPolicy>, 2> table = {
      {{data::OverlongPolicy::kTruncate, "truncate"}, {data::OverlongPolicy::kDrop, "drop"}}};
};
template <>
struct EnumNames<data::ChatTemplateKind> {
  static constexpr std::array<EnumEntry<data::ChatTemplateKind>, 6> table = {{
      {data::ChatTemplateKind::kAuto, "auto"},
      {data::ChatTemplateKind::kNone, "none"},
      {data::ChatTemplateKind::kLlama3, "llama3"},
      {data::ChatTemplateKind::kLlama2, "llama2"},
      {data::ChatTemplateKind::kMistral, "mistral"},
      {data::ChatTemplateKind::kGranite3, "granite3"}}};
};
template <>
struct EnumNames<data::ChatLossMask> {
  static constexpr std::array<EnumEntry<data::ChatLossMask>, 3> table = {{
      {data::ChatLossMask::kAssistant, "assistant"},
      {data::ChatLossMask::kLastAssistant, "last_assistant"},
      {data::ChatLossMask::kAll, "all"}}};
};
template <>
struct EnumNames<data::BatchMode> {
  static constexpr std::array<EnumEntry<data::BatchMode>, 4> table = {{{data::BatchMode::kFlatten, "flatten"},
                                                                      {data::BatchMode::kPad, "pad"},
                                                                      {data::BatchMode::kPack, "pack"},
                                                                      {data::BatchMode::kFixed, "fixed"}}};
};
}  // namespace fptrain::common
