#include "data/epoch_order.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "data/seeded_rng.h"

namespace fptrain::data {

std::vector<ExampleRef> make_epoch_order(const std::vector<uint64_t>& lines, const std::vector<double>& weights,
                                         bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<ExampleRef> order;
  for (size_t f = 0; f < lines.size(); ++f) {
    if (lines[f] >= (uint64_t(1) << 40) || f >= (size_t(1) << 24))
      throw std::invalid_argument("data: too many files or lines for the example index");
    const uint64_t n = lines[f];
    if (n == 0) continue;
    const auto count = static_cast<uint64_t>(std::llround(weights[f] * static_cast<double>(n)));
    for (uint64_t pass = 0; pass < count / n; ++pass)
      for (uint64_t i = 0; i < n; ++i) order.push_back(ExampleRef::make(static_cast<uint32_t>(f), i));
    const uint64_t rest = count % n;
    if (rest > 0) {
      // A seeded subset: the first `rest` of a partial Fisher-Yates shuffle, kept in file order.
      std::vector<uint64_t> idx(n);
      std::iota(idx.begin(), idx.end(), 0);
      SeededRng rng(derive_seed(seed, 1, static_cast<uint64_t>(epoch), f));
      for (uint64_t i = 0; i < rest; ++i) std::swap(idx[i], idx[i + rng.below(n - i)]);
      std::sort(idx.begin(), idx.begin() + rest);
      for (uint64_t i = 0; i < rest; ++i) order.push_back(ExampleRef::make(static_cast<uint32_t>(f), idx[i]));
    }
  }
  if (shuffle) {
    SeededRng rng(derive_seed(seed, 2, static_cast<uint64_t>(epoch)));
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  }
  return order;
}

}  // namespace fptrain::data
