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

// Checks the invariants every consumer relies on (sizes, cu_seqlens monotone
// from 0 to T, positions restarting per sequence, max_seqlen, counts); returns
// the first problem found, or an empty string.
std::string check_batch(const PackedBatch& batch);

}  // namespace fptrain::data
