// What `fptrain data CONFIG.yaml --show N` prints: examples in file order
// (every file's non-blank lines, file after file, before weights and
// shuffling), each run through the training code itself (ExampleSource::
// process: read, parse, chat template, tokenization, length policy, labels),
// with the token ids decoded back to text in spans of equal supervision.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/data_options.h"
#include "data/example_source.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::data {

// Consecutive tokens with the same supervision, decoded together (so a
// character split over several byte tokens is not broken).
struct TokenSpan {
  std::string text;
  bool supervised = false;
  int64_t first_token = 0;  // index into input_ids
  int64_t num_tokens = 0;
};

struct InspectedExample {
  uint64_t index = 0;  // position in file order, 0-based across all files
  std::string file;    // path as configured
  int64_t line = 0;    // 1-based line number in the file
  ExampleFormat format = ExampleFormat::kAuto;  // the file's (detected) format
  // The chat template this example was rendered with; kNone for plain text,
  // plain prompt/completion, Alpaca without a template, tokens and bad lines.
  std::string chat_template = "none";  // the template it was rendered with (label), or "none"
  ExampleStatus status = ExampleStatus::kUsed;
  SkipReason reason = SkipReason::kMalformedJson;  // when skipped
  std::string problem;                             // when skipped or dropped
  // A bad line while bad_lines is `error`: training stops here.
  bool stops_training = false;
  // Ids and labels exactly as training gets them (after truncation). Dropped
  // and zero-supervised examples keep theirs for inspection (not trained);
  // bad lines have none.
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;
  int64_t supervised = 0;       // labels != kIgnoreLabel
  int64_t original_length = 0;  // tokens before truncation
  std::vector<TokenSpan> spans;

  int64_t tokens() const { return static_cast<int64_t>(input_ids.size()); }
  bool trained() const { return status == ExampleStatus::kUsed || status == ExampleStatus::kTruncated; }
};

// "used", "truncated", "dropped", "skipped".
const char* status_name(ExampleStatus status);

class ExampleInspector {
 public:
  // Indexes the files and detects their formats as training does; throws
  // std::invalid_argument when there are no files.
  ExampleInspector(const DataOptions& options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer);

  // Non-blank lines of all files.
  uint64_t size() const { return total_; }
  const ExampleSource& source() const { return *source_; }

  // The example at `index` (< size()) in file order.
  InspectedExample inspect(uint64_t index) const;
  // Up to `count` examples from `skip` on (fewer at the end of the data).
  std::vector<InspectedExample> inspect(uint64_t skip, uint64_t count) const;

 private:
  DataOptions options_;  // ExampleSource keeps a reference
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<ExampleSource> source_;
  std::vector<uint64_t> first_index_;  // per file: index of its first line
  uint64_t total_ = 0;
};

// Spans of consecutive tokens with the same supervision (labels != -100),
// each decoded with `decode` so that the concatenation of the span texts is
// the decoded example: a span's text is decode(ids[0, end)) minus
// decode(ids[0, start)) when the latter is a prefix of the former (decoders
// that strip a leading space or fuse bytes work on the whole prefix), else
// decode(ids[start, end)) alone.
std::vector<TokenSpan> supervision_spans(const std::vector<int32_t>& ids, const std::vector<int32_t>& labels,
                                         const tokenizer::Tokenizer& tokenizer);

// The text token t adds: decode(ids[t-1, t]) minus decode(ids[t-1]) when the
// latter is a prefix of the former, else decode(ids[t]) alone. The context
// keeps what a decoder does only at the start of a text (Metaspace dropping
// the space of "▁word") from hiding the token's space.
std::string token_piece(const tokenizer::Tokenizer& tokenizer, const std::vector<int32_t>& ids, size_t t);

}  // namespace fptrain::data
