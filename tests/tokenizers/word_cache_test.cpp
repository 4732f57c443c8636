// The per-thread word cache keeps answers right across generation swaps.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/word_cache.h"

namespace {

using fptrain::tokenizer::WordCache;

TEST(WordCache, HitsSurviveGenerationSwaps) {
  WordCache& cache = WordCache::for_thread(WordCache::new_owner());
  auto ids_of = [](size_t i) { return std::vector<int32_t>{static_cast<int32_t>(i), static_cast<int32_t>(i * 7)}; };
  const size_t n = WordCache::kCapacity * 3 + 17;
  std::vector<int32_t> out;
  for (size_t i = 0; i < n; ++i) {
    const std::string word = "w" + std::to_string(i);
    out.clear();
    ASSERT_FALSE(cache.lookup(word, out));
    out = {-1};
    const auto ids = ids_of(i);
    out.insert(out.end(), ids.begin(), ids.end());
    cache.store(out, 1);
    // Re-read a word stored earlier: it is either gone or exactly right.
    const size_t j = (i * 2654435761u) % (i + 1);
    out.clear();
    if (cache.lookup("w" + std::to_string(j), out)) ASSERT_EQ(out, ids_of(j)) << j;
  }
  // The most recent words are always kept.
  for (size_t i = n - 100; i < n; ++i) {
    out.clear();
    ASSERT_TRUE(cache.lookup("w" + std::to_string(i), out));
    EXPECT_EQ(out, ids_of(i));
  }
}

TEST(WordCache, OwnersAreSeparate) {
  const auto a = WordCache::new_owner(), b = WordCache::new_owner();
  std::vector<int32_t> out;
  WordCache::for_thread(a).lookup("x", out);
  WordCache::for_thread(a).store({5}, 0);
  out.clear();
  EXPECT_FALSE(WordCache::for_thread(b).lookup("x", out));
  EXPECT_TRUE(WordCache::for_thread(a).lookup("x", out));
  EXPECT_EQ(out, std::vector<int32_t>{5});
}

}  // namespace
