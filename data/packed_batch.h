// One micro-batch, as every batching mode yields it: examples concatenated
// along the token axis with no batch dimension.
#pragma once

#include <cstdint>
#include <vector>

namespace fptrain::data {

inline constexpr int32_t kIgnoreLabel = -100;

struct PackedBatch {
  std::vector<int32_t> input_ids;     // [T]
  // [T], Hugging Face convention (unshifted): labels[t] is the target of the
  // prediction made at t-1. The first token of every example is kIgnoreLabel,
  // so after the shift no token is trained to predict the next example.
  std::vector<int32_t> labels;
  std::vector<int32_t> position_ids;  // [T], restart at 0 for every example
  std::vector<int32_t> cu_seqlens;    // [B+1], starts at 0, ends at T
  int32_t max_seqlen = 0;

  int64_t num_examples = 0;
  int64_t num_tokens = 0;          // T, padding included
  int64_t num_padding_tokens = 0;  // > 0 only in `pad` mode
  int64_t num_supervised = 0;      // labels != kIgnoreLabel
};

}  // namespace fptrain::data
