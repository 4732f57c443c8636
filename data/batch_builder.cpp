#include "data/batch_builder.h"

#include <algorithm>

namespace fptrain::data {
namespace {

void reserve(PackedBatch& b, size_t tokens, size_t sequences) {
  b.input_ids.reserve(tokens);
  b.labels.reserve(tokens);
  b.position_ids.reserve(tokens);
  b.cu_seqlens.reserve(sequences + 1);
  b.cu_seqlens.push_back(0);
}

void append_example(PackedBatch& b, const ProcessedExample& ex) {
  const size_t n = ex.input_ids.size();
  b.input_ids.insert(b.input_ids.end(), ex.input_ids.begin(), ex.input_ids.end());
  b.labels.push_back(kIgnoreLabel);
  b.labels.insert(b.labels.end(), ex.labels.begin() + 1, ex.labels.end());
  for (size_t t = 0; t < n; ++t) b.position_ids.push_back(static_cast<int32_t>(t));
  b.num_supervised += ex.supervised;
  b.num_examples += 1;
}

}  // namespace

PackedBatch build_flat_batch(const std::vector<const ProcessedExample*>& examples) {
  PackedBatch b;
  size_t total = 0;
  for (const auto* ex : examples) total += ex->input_ids.size();
  reserve(b, total, examples.size());
  for (const auto* ex : examples) {
    append_example(b, *ex);
    b.cu_seqlens.push_back(static_cast<int32_t>(b.input_ids.size()));
    b.max_seqlen = std::max<int32_t>(b.max_seqlen, static_cast<int32_t>(ex->input_ids.size()));
  }
  b.num_tokens = static_cast<int64_t>(b.input_ids.size());
  return b;
}

PackedBatch build_padded_batch(const std::vector<const ProcessedExample*>& examples, int32_t pad_id) {
  PackedBatch b;
  size_t longest = 0;
  for (const auto* ex : examples) longest = std::max(longest, ex->input_ids.size());
  reserve(b, longest * examples.size(), examples.size());
  for (const auto* ex : examples) {
    append_example(b, *ex);
    for (size_t t = ex->input_ids.size(); t < longest; ++t) {
      b.input_ids.push_back(pad_id);
      b.labels.push_back(kIgnoreLabel);
      b.position_ids.push_back(static_cast<int32_t>(t));
    }
    b.num_padding_tokens += static_cast<int64_t>(longest - ex->input_ids.size());
    b.cu_seqlens.push_back(static_cast<int32_t>(b.input_ids.size()));
  }
  b.max_seqlen = static_cast<int32_t>(longest);
  b.num_tokens = static_cast<int64_t>(b.input_ids.size());
  return b;
}

int64_t row_piece_supervised(const RowPiece& piece, bool first_of_sequence) {
  int64_t n = 0;
  for (int64_t t = piece.begin + (first_of_sequence ? 1 : 0); t < piece.end; ++t)
    n += piece.example->labels[static_cast<size_t>(t)] != kIgnoreLabel;
  return n;
}

PackedBatch build_row_batch(const std::vector<Row>& rows, bool cross_example_attention) {
  PackedBatch b;
  size_t total = 0, pieces = 0;
  for (const Row& row : rows)
    for (const RowPiece& p : row) {
      total += static_cast<size_t>(p.end - p.begin);
      ++pieces;
    }
  reserve(b, total, cross_example_attention ? rows.size() : pieces);
  auto close_sequence = [&](int64_t start) {
    const auto end = static_cast<int32_t>(b.input_ids.size());
    if (end == start) return;
    b.cu_seqlens.push_back(end);
    b.max_seqlen = std::max<int32_t>(b.max_seqlen, end - static_cast<int32_t>(start));
  };
  for (const Row& row : rows) {
    int64_t seq_start = static_cast<int64_t>(b.input_ids.size());
    for (size_t q = 0; q < row.size(); ++q) {
      const RowPiece& p = row[q];
      const bool first = !cross_example_attention || q == 0;
      if (!cross_example_attention) seq_start = static_cast<int64_t>(b.input_ids.size());
      const auto& ids = p.example->input_ids;
      const auto& labels = p.example->labels;
      const int64_t base = static_cast<int64_t>(b.input_ids.size());
      b.input_ids.insert(b.input_ids.end(), ids.begin() + p.begin, ids.begin() + p.end);
      for (int64_t t = p.begin; t < p.end; ++t) {
        b.labels.push_back(t == p.begin && first ? kIgnoreLabel : labels[static_cast<size_t>(t)]);
        b.position_ids.push_back(static_cast<int32_t>(base + (t - p.begin) - seq_start));
      }
      b.num_supervised += row_piece_supervised(p, first);
      if (p.begin == 0) b.num_examples += 1;  // examples are counted where they start
      if (!cross_example_attention) close_sequence(seq_start);
    }
    if (cross_example_attention) close_sequence(seq_start);
  }
  b.num_tokens = static_cast<int64_t>(b.input_ids.size());
  return b;
}

std::string check_batch(const PackedBatch& b) {
  const size_t T = b.input_ids.size();
  if (b.labels.size() != T || b.position_ids.size() != T) return "input_ids, labels, position_ids differ in size";
  if (b.num_tokens != static_cast<int64_t>(T)) return "num_tokens != T";
  if (b.cu_seqlens.empty() || b.cu_seqlens.front() != 0) return "cu_seqlens must start at 0";
  if (b.cu_seqlens.back() != static_cast<int32_t>(T)) return "cu_seqlens must end at T";
  int32_t longest = 0;
  int64_t supervised = 0;
  for (size_t s = 0; s + 1 < b.cu_seqlens.size(); ++s) {
    const int32_t lo = b.cu_seqlens[s], hi = b.cu_seqlens[s + 1];
    // The rule of attention::validate_cu_seqlens: non-decreasing (the batcher
    // itself never emits an empty sequence, but an empty one is well-formed).
    if (hi < lo) return "cu_seqlens must be non-decreasing (at " + std::to_string(s) + ")";
    if (hi == lo) continue;
    longest = std::max(longest, hi - lo);
    if (b.labels[lo] != kIgnoreLabel) return "first label of sequence " + std::to_string(s) + " is not ignored";
    for (int32_t t = lo; t < hi; ++t) {
      if (b.position_ids[t] != t - lo) return "position_ids do not restart at sequence " + std::to_string(s);
      supervised += b.labels[t] != kIgnoreLabel;
    }
  }
  if (longest != b.max_seqlen) return "max_seqlen is not the longest sequence";
  if (supervised != b.num_supervised) return "num_supervised does not match labels";
  return {};
}

}  // namespace fptrain::data
