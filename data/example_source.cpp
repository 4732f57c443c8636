#include "data/example_source.h"

#include <stdexcept>

#include "data/example_parser.h"
#include "data/packed_batch.h"

namespace fptrain::data {

ExampleSource::ExampleSource(const DataOptions& options, const tokenizer::Tokenizer* tokenizer) : options_(options) {
  template_ = ChatTemplate::resolve(options.chat_template, options.tokenizer_dir, tokenizer);
  bool needs_tokenizer = false;
  for (const DataFile& f : options.files) {
    files_.push_back(std::make_unique<JsonlFile>(f.path));
    const ExampleFormat format = f.format == ExampleFormat::kAuto ? detect_format(*files_.back()) : f.format;
    formats_.push_back(format);
    needs_tokenizer |= format != ExampleFormat::kTokens;
    if (format == ExampleFormat::kMessages && !template_)
      throw std::runtime_error(f.path.string() + ": 'messages' examples need a chat template; set "
                               "data.chat_template (llama3, llama2, mistral, granite3)" +
                               (options.tokenizer_dir.empty()
                                    ? std::string()
                                    : " or give the tokenizer one (" +
                                          (options.tokenizer_dir / "tokenizer_config.json").string() +
                                          "'s chat_template, or chat_template.jinja)"));
  }
  if (needs_tokenizer && !tokenizer)
    throw std::invalid_argument("data: text examples need a tokenizer (only 'tokens' files work without)");
  encoder_ = std::make_unique<ExampleEncoder>(tokenizer, template_, options.loss_mask);
}

std::vector<uint64_t> ExampleSource::lines_per_file() const {
  std::vector<uint64_t> out;
  for (const auto& f : files_) out.push_back(f->num_lines());
  return out;
}

std::string ExampleSource::where(uint32_t file, int64_t line) const {
  return files_[file]->path().string() + ":" + std::to_string(line);
}

ProcessedExample ExampleSource::process(ExampleRef ref, bool keep_rejected) const {
  ProcessedExample out;
  out.file = ref.file();
  const JsonlFile& file = *files_[out.file];
  out.line = file.line_number(ref.line());
  try {
    const RawExample raw = parse_example(file.read_line(ref.line()), formats_[out.file]);
    out.chat_template = encoder_->uses_chat_template(raw);
    EncodedExample enc = encoder_->encode(raw);
    out.input_ids = std::move(enc.input_ids);
    out.labels = std::move(enc.labels);
  } catch (const BadLine& e) {
    out.status = ExampleStatus::kSkipped;
    out.reason = e.reason();
    out.problem = e.what();
    return out;
  } catch (const std::exception& e) {
    throw std::runtime_error(where(out.file, out.line) + ": " + e.what());
  }
  out.original_length = out.length();
  if (out.length() > options_.max_length) {
    if (options_.overlong == OverlongPolicy::kDrop) {
      out.status = ExampleStatus::kDropped;
      out.problem = std::to_string(out.length()) + " tokens > max_length " + std::to_string(options_.max_length);
      if (keep_rejected) {
        for (int32_t l : out.labels) out.supervised += l != kIgnoreLabel;
      } else {
        out.input_ids.clear();
        out.labels.clear();
      }
      return out;
    }
    out.status = ExampleStatus::kTruncated;
    out.input_ids.resize(options_.max_length);
    out.labels.resize(options_.max_length);
  }
  for (int32_t l : out.labels) out.supervised += l != kIgnoreLabel;
  if (out.supervised == 0) {
    out.status = ExampleStatus::kSkipped;
    out.reason = SkipReason::kZeroSupervised;
    out.problem = out.original_length > out.length() ? "no supervised token left after truncation to " +
                                                           std::to_string(options_.max_length) + " tokens"
                                                     : "no supervised token";
    if (!keep_rejected) {
      out.input_ids.clear();
      out.labels.clear();
    }
  }
  return out;
}

void account_example(DataStats& s, const ProcessedExample& ex, const ExampleSource& source) {
  ++s.seen;
  switch (ex.status) {
    case ExampleStatus::kUsed:
    case ExampleStatus::kTruncated:
      (ex.status == ExampleStatus::kUsed ? s.used : s.truncated) += 1;
      s.tokens += ex.length();
      s.supervised_tokens += ex.supervised;
      s.truncated_tokens += ex.original_length - ex.length();
      break;
    case ExampleStatus::kDropped:
      ++s.dropped;
      if (s.first_dropped.size() < DataStats::kFirstLinesKept) s.first_dropped.push_back(source.where(ex.file, ex.line));
      break;
    case ExampleStatus::kSkipped: {
      const int r = static_cast<int>(ex.reason);
      ++s.skipped[r];
      if (s.first_skipped[r].size() < DataStats::kFirstLinesKept)
        s.first_skipped[r].push_back(source.where(ex.file, ex.line));
      break;
    }
  }
}

}  // namespace fptrain::data
