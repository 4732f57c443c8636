// Which examples go in which micro-batch (pack mode) and which micro-batch to
// which data-parallel rank. Works on lengths only, so the data report can plan
// a whole epoch without building batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fptrain::data {

// Best-fit-decreasing bin packing, O(n log n): items by decreasing size (ties
// by index), each into the fullest bin it still fits. Every size must be
// <= capacity. Returns bins of item indices.
std::vector<std::vector<size_t>> best_fit_decreasing(const std::vector<int64_t>& sizes, int64_t capacity);

// The bins of one pack window in the order they are emitted: best-fit-
// decreasing, then a seeded shuffle so long and short bins alternate.
std::vector<std::vector<size_t>> plan_pack_window(const std::vector<int64_t>& lengths, int64_t capacity,
                                                  uint64_t seed, int64_t epoch, int64_t window_start);

// Rank of each of the step's micro-batches. Every rank gets at most
// ceil(n / world) of them (all get exactly n / world when it divides). With
// `balance`, largest first onto the rank with the fewest tokens so far
// (token sums balanced); otherwise round-robin (micro-batch j -> rank j % W).
std::vector<int> assign_ranks(const std::vector<int64_t>& tokens, int world_size, bool balance);

// How long an example of `length` tokens keeps a GPU busy, in tokens: the
// length itself plus the attention's quadratic share, which equals the rest of
// the model's per-token cost at `attention_length` (0: tokens only).
double example_cost(int64_t length, int64_t attention_length);

// One step's examples (their lengths, in stream order) dealt to the ranks for
// flatten with balance_ranks. The ranks get equal cost (example_cost), not
// equal counts: largest first onto the least loaded rank, then moves and
// swaps between the heaviest and the lightest rank. Each rank's examples are
// cut into k = ceil(n / (world x per_micro_batch)) micro-batches of equal
// tokens, each in stream order; a rank may hold more or fewer examples than
// k x per_micro_batch. Returns exactly world x k micro-batches, rank by rank,
// the empty ones (a rank with fewer than k examples) last within their rank.
struct DealtMicroBatch {
  int rank = 0;
  std::vector<size_t> examples;  // indices into the step's examples
};
std::vector<DealtMicroBatch> deal_to_ranks(const std::vector<int64_t>& lengths, int world_size,
                                           int64_t per_micro_batch, int64_t attention_length = 0);

}  // namespace fptrain::data
