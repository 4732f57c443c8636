#include "data/example_inspector.h"

#include <algorithm>
#include <stdexcept>

#include "data/packed_batch.h"

namespace fptrain::data {

const char* status_name(ExampleStatus status) { return common::enum_name(status); }

std::vector<TokenSpan> supervision_spans(const std::vector<int32_t>& ids, const std::vector<int32_t>& labels,
                                         const tokenizer::Tokenizer& tokenizer) {
  if (ids.size() != labels.size()) throw std::invalid_argument("supervision_spans: ids and labels differ in length");
  std::vector<TokenSpan> spans;
  std::string before;  // decode(ids[0, start))
  size_t start = 0;
  while (start < ids.size()) {
    const bool supervised = labels[start] != kIgnoreLabel;
    size_t end = start + 1;
    while (end < ids.size() && (labels[end] != kIgnoreLabel) == supervised) ++end;
    std::string upto = tokenizer.decode(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(end)));
    TokenSpan span;
    span.supervised = supervised;
    span.first_token = static_cast<int64_t>(start);
    span.num_tokens = static_cast<int64_t>(end - start);
    if (upto.compare(0, before.size(), before) == 0)
      span.text = upto.substr(before.size());
    else
      span.text = tokenizer.decode(std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(start),
                                                        ids.begin() + static_cast<std::ptrdiff_t>(end)));
    spans.push_back(std::move(span));
    before = std::move(upto);
    start = end;
  }
  return spans;
}

std::string token_piece(const tokenizer::Tokenizer& tokenizer, const std::vector<int32_t>& ids, size_t t) {
  std::string alone = tokenizer.decode({ids.at(t)});
  if (t == 0) return alone;
  const std::string previous = tokenizer.decode({ids[t - 1]});
  const std::string both = tokenizer.decode({ids[t - 1], ids[t]});
  if (both.compare(0, previous.size(), previous) == 0) return both.substr(previous.size());
  return alone;
}

ExampleInspector::ExampleInspector(const DataOptions& options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer)
    : options_(options), tokenizer_(std::move(tokenizer)) {
  if (options_.files.empty()) throw std::invalid_argument("data: no data files to show");
  source_ = std::make_unique<ExampleSource>(options_, tokenizer_.get());
  for (uint64_t n : source_->lines_per_file()) {
    first_index_.push_back(total_);
    total_ += n;
  }
}

InspectedExample ExampleInspector::inspect(uint64_t index) const {
  if (index >= total_)
    throw std::out_of_range("example " + std::to_string(index) + " of " + std::to_string(total_));
  // The file holding `index`: the last whose first index is <= index.
  const auto it = std::upper_bound(first_index_.begin(), first_index_.end(), index) - 1;
  const auto f = static_cast<uint32_t>(it - first_index_.begin());
  ProcessedExample ex = source_->process(ExampleRef::make(f, index - *it), /*keep_rejected=*/true);

  InspectedExample out;
  out.index = index;
  out.file = source_->file(f).path().string();
  out.line = ex.line;
  out.format = source_->format(f);
  out.chat_template = ex.chat_template ? source_->chat_template_label() : "none";
  out.status = ex.status;
  out.reason = ex.reason;
  out.problem = ex.problem;
  out.stops_training = ex.status == ExampleStatus::kSkipped && is_bad_line(ex.reason) &&
                       options_.bad_lines == BadLinePolicy::kError;
  out.supervised = ex.supervised;
  out.original_length = ex.original_length;
  out.input_ids = std::move(ex.input_ids);
  out.labels = std::move(ex.labels);
  if (tokenizer_) out.spans = supervision_spans(out.input_ids, out.labels, *tokenizer_);
  return out;
}

std::vector<InspectedExample> ExampleInspector::inspect(uint64_t skip, uint64_t count) const {
  std::vector<InspectedExample> out;
  for (uint64_t i = skip; i < total_ && i - skip < count; ++i) out.push_back(inspect(i));
  return out;
}

}  // namespace fptrain::data
