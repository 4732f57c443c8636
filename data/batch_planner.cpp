#include "data/batch_planner.h"

#include <algorithm>
#include <cmath>
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

namespace {

// Largest first onto the least loaded of `bins` (ties: the lowest index), then
// single moves and swaps between the heaviest and the lightest bin while they
// lower the heavier of the two. Counts are free; with n >= bins no bin is left
// empty. Returns the bin of each item.
std::vector<int> balance_loads(const std::vector<double>& cost, int bins) {
  const size_t n = cost.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<int> bin(n, 0);
  std::vector<double> load(bins, 0.0);
  std::vector<size_t> count(bins, 0);
  for (size_t i : order) {
    const int b = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    bin[i] = b;
    load[b] += cost[i];
    ++count[b];
  }
  for (size_t round = 0; round < 4 * n; ++round) {
    const int hi = static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin());
    const int lo = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    // Moving d from hi to lo leaves max(hi - d, lo + d): best at d = gap / 2.
    const double gap = load[hi] - load[lo];
    double best_d = 0.0;
    size_t best_i = n, best_j = n;
    auto consider = [&](double d, size_t i, size_t j) {
      if (d > 0 && d < gap && std::abs(gap / 2 - d) < std::abs(gap / 2 - best_d) - 1e-9) {
        best_d = d;
        best_i = i;
        best_j = j;
      }
    };
    for (size_t i = 0; i < n; ++i) {
      if (bin[i] != hi) continue;
      if (count[hi] > 1) consider(cost[i], i, n);
      for (size_t j = 0; j < n; ++j)
        if (bin[j] == lo) consider(cost[i] - cost[j], i, j);
    }
    if (best_i == n) break;
    bin[best_i] = lo;
    load[hi] -= cost[best_i];
    load[lo] += cost[best_i];
    if (best_j == n) {
      --count[hi];
      ++count[lo];
    } else {
      bin[best_j] = hi;
      load[lo] -= cost[best_j];
      load[hi] += cost[best_j];
    }
  }
  return bin;
}

}  // namespace

double example_cost(int64_t length, int64_t attention_length) {
  const double l = static_cast<double>(length);
  return attention_length > 0 ? l * (1.0 + l / static_cast<double>(attention_length)) : l;
}

std::vector<DealtMicroBatch> deal_to_ranks(const std::vector<int64_t>& lengths, int world_size,
                                           int64_t per_micro_batch, int64_t attention_length) {
  const size_t n = lengths.size();
  const size_t per_rank = static_cast<size_t>(per_micro_batch) * static_cast<size_t>(world_size);
  const int k = static_cast<int>(std::max<size_t>(1, (n + per_rank - 1) / per_rank));
  std::vector<double> cost(n);
  for (size_t i = 0; i < n; ++i) cost[i] = example_cost(lengths[i], attention_length);
  const std::vector<int> rank_of = balance_loads(cost, world_size);
  std::vector<DealtMicroBatch> out;
  for (int r = 0; r < world_size; ++r) {
    // This rank's examples into k micro-batches of equal tokens (what memory follows).
    std::vector<size_t> mine;
    std::vector<double> tokens;
    for (size_t i = 0; i < n; ++i)
      if (rank_of[i] == r) {
        mine.push_back(i);
        tokens.push_back(static_cast<double>(lengths[i]));
      }
    const std::vector<int> part = balance_loads(tokens, k);
    std::vector<DealtMicroBatch> mbs(k, DealtMicroBatch{r, {}});
    for (size_t q = 0; q < mine.size(); ++q) mbs[part[q]].examples.push_back(mine[q]);
    // Non-empty micro-batches first, each in stream order, ordered by their first example.
    std::stable_sort(mbs.begin(), mbs.end(), [](const DealtMicroBatch& a, const DealtMicroBatch& b) {
      if (a.examples.empty() != b.examples.empty()) return b.examples.empty();
      return !a.examples.empty() && a.examples.front() < b.examples.front();
    });
    for (auto& mb : mbs) out.push_back(std::move(mb));
  }
  return out;
}

}  // namespace fptrain::data
