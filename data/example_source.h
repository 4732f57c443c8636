// The data files of a run and the per-example work: read a line, parse it,
// render and tokenize it, apply the length policy. process() is a pure
// function of the example's position, safe to call from many threads, which
// is what makes the worker threads deterministic.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/data_options.h"
#include "data/data_stats.h"
#include "data/epoch_order.h"
#include "data/example_encoder.h"
#include "data/jsonl_file.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::data {

enum class ExampleStatus : uint8_t { kUsed, kTruncated, kDropped, kSkipped };

}  // namespace fptrain::data

namespace fptrain::common {
template <>
struct EnumNames<data::ExampleStatus> {
  static constexpr std::array<EnumEntry<data::ExampleStatus>, 4> table = {{{data::ExampleStatus::kUsed, "used"},
                                                                          {data::ExampleStatus::kTruncated, "truncated"},
                                                                          {data::ExampleStatus::kDropped, "dropped"},
                                                                          {data::ExampleStatus::kSkipped, "skipped"}}};
};
}  // namespace fptrain::common

namespace fptrain::data {

struct ProcessedExample {
  ExampleStatus status = ExampleStatus::kUsed;
  SkipReason reason = SkipReason::kMalformedJson;  // when skipped
  std::string problem;                             // when skipped or dropped
  uint32_t file = 0;
  int64_t line = 0;  // 1-based line number in the file
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;
  int64_t supervised = 0;       // labels != kIgnoreLabel
  int64_t original_length = 0;  // before truncation
  bool chat_template = false;   // rendered with the chat template (see ExampleEncoder::uses_chat_template)
  int64_t length() const { return static_cast<int64_t>(input_ids.size()); }
  bool trained() const { return status == ExampleStatus::kUsed || status == ExampleStatus::kTruncated; }
};

class ExampleSource;

// Adds one example to the accounting (kept first line numbers name the file).
void account_example(DataStats& stats, const ProcessedExample& ex, const ExampleSource& source);

class ExampleSource {
 public:
  // Indexes every file (one streaming pass each) and detects formats.
  ExampleSource(const DataOptions& options, const tokenizer::Tokenizer* tokenizer);

  size_t num_files() const { return files_.size(); }
  const JsonlFile& file(size_t i) const { return *files_[i]; }
  ExampleFormat format(size_t i) const { return formats_[i]; }
  std::vector<uint64_t> lines_per_file() const;
  // The chat template's name ("llama3", "<dir>/tokenizer_config.json", ...) or "none".
  std::string chat_template_label() const { return template_ ? template_->label() : "none"; }
  const ChatTemplate* chat_template() const { return template_.get(); }
  const ExampleEncoder& encoder() const { return *encoder_; }

  // With keep_rejected, a dropped or zero-supervised example keeps its ids and
  // labels (dropped: all of them; zero-supervised: after truncation) for
  // inspection; training never asks for them.
  ProcessedExample process(ExampleRef ref, bool keep_rejected = false) const;
  // "path:line" of an example, for messages.
  std::string where(uint32_t file, int64_t line) const;

 private:
  const DataOptions& options_;
  std::vector<std::unique_ptr<JsonlFile>> files_;
  std::vector<ExampleFormat> formats_;
  std::shared_ptr<const ChatTemplate> template_;
  std::unique_ptr<ExampleEncoder> encoder_;
};

}  // namespace fptrain::data
