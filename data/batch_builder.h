// Micro-batch assembly: examples -> PackedBatch, in the two layouts.
#pragma once

#include <string>
#include <vector>

#include "data/example_source.h"
#include "data/packed_batch.h"

namespace fptrain::data {

// Concatenated without padding (flatten and pack modes): exactly Hugging
// Face's DataCollatorWithFlattening: labels of each example with its first
// label replaced by kIgnoreLabel, positions restarting at 0.
PackedBatch build_flat_batch(const std::vector<const ProcessedExample*>& examples);

// Each example right-padded to the longest with `pad_id` (label kIgnoreLabel,
// positions continuing), every padded row its own sequence in cu_seqlens, so
// attention really computes the pads, as a padded batch does.
PackedBatch build_padded_batch(const std::vector<const ProcessedExample*>& examples, int32_t pad_id);

// A run of tokens [begin, end) of one example inside a fixed-length row.
struct RowPiece {
  const ProcessedExample* example = nullptr;
  int64_t begin = 0;
  int64_t end = 0;
};
using Row = std::vector<RowPiece>;

// Rows of fixed mode. Each piece its own sequence (positions from 0, first
// label ignored: a continued example is not trained to predict across the
// cut), or with `cross_example_attention` each row one sequence (positions
// 0..len-1; only the row's first label ignored, a piece starting an example
// keeps its first label as that example has it).
PackedBatch build_row_batch(const std::vector<Row>& rows, bool cross_example_attention);
// The supervised labels build_row_batch keeps of one piece.
int64_t row_piece_supervised(const RowPiece& piece, bool first_of_sequence);

// Checks the invariants every consumer relies on (sizes, cu_seqlens monotone
// from 0 to T, positions restarting per sequence, max_seqlen, counts); returns
// the first problem found, or an empty string.
std::string check_batch(const PackedBatch& batch);

}  // namespace fptrain::data
