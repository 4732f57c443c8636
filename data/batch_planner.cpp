#include "data/batch_planner.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

#include "data/seeded_rng.h"

namespace fptrain::data {

std::vector<std::vector<size_t>> best_fit_decreasing(const std::vector<int64_t>& sizes, int64_t capacity) {
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<std::vector<size_t>> bins;
  std::multimap<int64_t, size_t> by_room;  // remaining capacity -> bin
  for (size_t i : order) {
    if (sizes[i] > capacity)
      throw std::invalid_argument("pack: an item of " + std::to_string(sizes[i]) + " tokens exceeds max_tokens " +
                                  std::to_string(capacity));
    auto it = by_room.lower_bound(sizes[i]);  // the tightest bin it fits
    size_t bin;
    int64_t room;
    if (it == by_room.end()) {
      bin = bins.size();
      bins.emplace_back();
      room = capacity;
    } else {
      bin = it->second;
      room = it->first;
      by_room.erase(it);
    }
    bins[bin].push_back(i);
    room -= sizes[i];
    if (room > 0) by_room.emplace(room, bin);
  }
  return bins;
}

std::vector<std::vector<size_t>> plan_pack_window(const std::vector<int64_t>& lengths, int64_t capacity,
                                                  uint64_t seed, int64_t epoch, int64_t window_start) {
  auto bins = best_fit_decreasing(lengths, capacity);
  SeededRng rng(derive_seed(seed, 3, static_cast<uint64_t>(epoch), static_cast<uint64_t>(window_start)));
  for (size_t i = bins.size(); i > 1; --i) std::swap(bins[i - 1], bins[rng.below(i)]);
  // Within a bin keep the stream order, which is the order examples were read.
  for (auto& bin : bins) std::sort(bin.begin(), bin.end());
  return bins;
}

std::vector<int> assign_ranks(const std::vector<int64_t>& tokens, int world_size, bool balance) {
  const size_t n = tokens.size();
  std::vector<int> rank(n, 0);
  if (!balance) {
    for (size_t j = 0; j < n; ++j) rank[j] = static_cast<int>(j % world_size);
    return rank;
  }
  const size_t per_rank = (n + world_size - 1) / world_size;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tokens[a] > tokens[b]; });
  std::vector<int64_t> load(world_size, 0);
  std::vector<size_t> count(world_size, 0);
  for (size_t j : order) {
    int best = -1;
    for (int r = 0; r < world_size; ++r)
      if (count[r] < per_rank && (best < 0 || load[r] < load[best])) best = r;
    rank[j] = best;
    load[best] += tokens[j];
    ++count[best];
  }
  return rank;
}

std::vector<DealtMicroBatch> deal_to_ranks(const std::vector<int64_t>& lengths, int world_size,
                                           int64_t per_micro_batch) {
  const std::vector<int> rank_of = assign_ranks(lengths, world_size, /*balance=*/true);
  std::vector<DealtMicroBatch> out;
  const size_t n = static_cast<size_t>(per_micro_batch);
  for (int r = 0; r < world_size; ++r) {
    DealtMicroBatch mb{r, {}};
    for (size_t i = 0; i < lengths.size(); ++i) {
      if (rank_of[i] != r) continue;
      mb.examples.push_back(i);
      if (mb.examples.size() == n) {
        out.push_back(std::move(mb));
        mb = DealtMicroBatch{r, {}};
      }
    }
    if (!mb.examples.empty()) out.push_back(std::move(mb));
  }
  return out;
}

}  // namespace fptrain::data
