// flatten / pad / pack layouts and their invariants; best-fit-decreasing and
// the rank assignment.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <random>

#include "data/batch_builder.h"
#include "data/batch_planner.h"
#include "tests/data/test_util.h"

namespace fptrain::data {
namespace {

using testing::TempDir;

// Text examples of the given character counts (ByteTokenizer: tokens = chars + BOS + EOS).
std::filesystem::path text_file(const TempDir& dir, const std::vector<int>& chars, const std::string& name = "t.jsonl") {
  std::vector<std::string> lines;
  for (size_t i = 0; i < chars.size(); ++i) {
    std::string text(chars[i], 'a' + static_cast<char>(i % 26));
    lines.push_back(nlohmann::json{{"text", text}}.dump());
  }
  return dir.write_lines(name, lines);
}

std::vector<int> random_lengths(size_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> out;
  for (size_t i = 0; i < n; ++i) out.push_back(lo + static_cast<int>(rng() % (hi - lo + 1)));
  return out;
}

TEST(FlatBatch, ConcatenatesLikeTheFlatteningCollator) {
  ProcessedExample a, b;
  a.input_ids = {10, 11, 12};
  a.labels = {kIgnoreLabel, 11, 12};
  a.supervised = 2;
  b.input_ids = {20, 21};
  b.labels = {kIgnoreLabel, 21};
  b.supervised = 1;
  const PackedBatch p = build_flat_batch({&a, &b});
  EXPECT_EQ(p.input_ids, (std::vector<int32_t>{10, 11, 12, 20, 21}));
  EXPECT_EQ(p.labels, (std::vector<int32_t>{kIgnoreLabel, 11, 12, kIgnoreLabel, 21}));
  EXPECT_EQ(p.position_ids, (std::vector<int32_t>{0, 1, 2, 0, 1}));
  EXPECT_EQ(p.cu_seqlens, (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(p.max_seqlen, 3);
  EXPECT_EQ(p.num_supervised, 3);
  EXPECT_EQ(p.num_examples, 2);
  EXPECT_EQ(check_batch(p), "");
}

TEST(PadMode, RowsPaddedToTheLongestAreSequencesOfTheirOwn) {
  TempDir dir;
  const auto f = text_file(dir, {3, 8, 1, 5, 2, 2, 9});
  auto o = testing::options_for({f});
  o.batching = BatchMode::kPad;
  o.examples_per_micro_batch = 3;
  DataPipeline p(o, testing::byte_tokenizer());
  ASSERT_NE(p.pad_id(), 1);  // never EOS
  const auto batches = testing::all_micro_batches(testing::drain(p));
  ASSERT_EQ(batches.size(), 3u);
  const std::vector<std::vector<int>> rows = {{5, 10, 3}, {7, 4, 4}, {11}};
  for (size_t i = 0; i < batches.size(); ++i) {
    const PackedBatch& b = batches[i];
    EXPECT_EQ(check_batch(b), "");
    const int longest = *std::max_element(rows[i].begin(), rows[i].end());
    EXPECT_EQ(b.max_seqlen, longest);
    EXPECT_EQ(b.num_tokens, longest * static_cast<int64_t>(rows[i].size()));
    int64_t real = 0;
    for (size_t r = 0; r < rows[i].size(); ++r) {
      EXPECT_EQ(b.cu_seqlens[r + 1], longest * static_cast<int>(r + 1));
      real += rows[i][r];
      for (int t = rows[i][r]; t < longest; ++t) {  // the pads of row r
        EXPECT_EQ(b.input_ids[r * longest + t], p.pad_id());
        EXPECT_EQ(b.labels[r * longest + t], kIgnoreLabel);
        EXPECT_EQ(b.position_ids[r * longest + t], t);
      }
    }
    EXPECT_EQ(b.num_padding_tokens, b.num_tokens - real);
  }
}

TEST(PackMode, RespectsTheBudgetUsesEveryExampleOnceAndFillsWell) {
  TempDir dir;
  const auto lengths = random_lengths(600, 10, 300, 3);
  const auto f = text_file(dir, lengths);
  auto o = testing::options_for({f});
  o.batching = BatchMode::kPack;
  o.max_length = 512;
  o.max_tokens = 2048;
  o.shuffle_window = 200;
  DataPipeline p(o, testing::byte_tokenizer());
  const auto steps = testing::drain(p);
  int64_t tokens = 0, examples = 0, budget = 0;
  std::map<int32_t, int> first_ids;
  for (const auto& s : steps)
    for (const auto& b : s.micro_batches) {
      EXPECT_EQ(check_batch(b), "");
      EXPECT_LE(b.num_tokens, o.max_tokens);
      EXPECT_EQ(b.num_padding_tokens, 0);
      tokens += b.num_tokens;
      examples += b.num_examples;
      budget += o.max_tokens;
    }
  EXPECT_EQ(examples, 600);
  EXPECT_EQ(tokens, std::accumulate(lengths.begin(), lengths.end(), int64_t{0}) + 2 * 600);
  const double fill = static_cast<double>(tokens) / budget;
  EXPECT_GT(fill, 0.95) << "fill rate " << fill;
}

TEST(BestFitDecreasing, ValidPackingNearTheLowerBound) {
  std::vector<int64_t> sizes;
  for (int x : random_lengths(5000, 1, 1000, 11)) sizes.push_back(x);
  const int64_t cap = 4096;
  const auto bins = best_fit_decreasing(sizes, cap);
  std::vector<int> seen(sizes.size(), 0);
  int64_t total = 0;
  for (const auto& bin : bins) {
    int64_t sum = 0;
    for (size_t i : bin) {
      sum += sizes[i];
      ++seen[i];
    }
    EXPECT_LE(sum, cap);
    total += sum;
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  const int64_t lower = (total + cap - 1) / cap;
  EXPECT_LE(static_cast<int64_t>(bins.size()), lower + 1);
  EXPECT_THROW(best_fit_decreasing({5000}, cap), std::invalid_argument);
}

TEST(BestFitDecreasing, IsNLogN) {
  std::vector<int64_t> sizes;
  for (int x : random_lengths(1 << 20, 1, 4096, 5)) sizes.push_back(x);
  const auto t0 = std::chrono::steady_clock::now();
  const auto bins = best_fit_decreasing(sizes, 16384);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0) << "1M items took " << s << " s";  // quadratic would take hours
  EXPECT_GT(bins.size(), 0u);
}

TEST(AssignRanks, EqualCountsAndBalancedTokens) {
  std::vector<int64_t> tokens;
  for (int x : random_lengths(32, 1000, 16000, 9)) tokens.push_back(x);
  const auto rank = assign_ranks(tokens, 4, true);
  std::vector<int64_t> load(4, 0), count(4, 0);
  for (size_t j = 0; j < tokens.size(); ++j) {
    load[rank[j]] += tokens[j];
    ++count[rank[j]];
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(count[r], 8);
  const int64_t top = *std::max_element(load.begin(), load.end());
  const int64_t low = *std::min_element(load.begin(), load.end());
  EXPECT_LE(top - low, 16000);  // within one micro-batch
  // Round-robin without balancing; a partial step gives every rank <= ceil(n/W).
  EXPECT_EQ(assign_ranks({1, 2, 3, 4, 5}, 2, false), (std::vector<int>{0, 1, 0, 1, 0}));
  const auto partial = assign_ranks({5, 1, 4, 2, 3}, 2, true);
  EXPECT_LE(std::count(partial.begin(), partial.end(), 0), 3);
  EXPECT_LE(std::count(partial.begin(), partial.end(), 1), 3);
}

// Flatten's dealing balances cost, not counts: one long example may be a
// rank's whole share.
TEST(DealToRanks, OneLongExampleAgainstManyShortOnes) {
  const auto mbs = deal_to_ranks({100, 100, 4000, 100, 100, 100, 100, 100}, 2, 4);
  ASSERT_EQ(mbs.size(), 2u);
  EXPECT_EQ(mbs[0].rank, 0);
  EXPECT_EQ(mbs[0].examples, (std::vector<size_t>{2}));
  EXPECT_EQ(mbs[1].rank, 1);
  EXPECT_EQ(mbs[1].examples, (std::vector<size_t>{0, 1, 3, 4, 5, 6, 7}));
  EXPECT_DOUBLE_EQ(example_cost(1000, 0), 1000.0);
  EXPECT_DOUBLE_EQ(example_cost(1000, 500), 3000.0);  // attention doubles the per-token cost at 500
}

// Every example once; world x k micro-batches (k = the step's micro-batches per
// rank), empty ones last in their rank, each in stream order; rank loads within
// 2% of the best split (found by trying every subset) and never worse than
// equal counts per rank.
TEST(DealToRanks, NearTheBestSplitWithEqualMicroBatches) {
  double ours_total = 0, equal_counts_total = 0, best_total = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int64_t> len;
    for (int x : random_lengths(16, 24, 4096, 100 + trial)) len.push_back(x);
    const int64_t attention = trial % 2 ? 0 : 16000;
    const auto mbs = deal_to_ranks(len, 2, 4, attention);  // k = 2
    ASSERT_EQ(mbs.size(), 4u);
    std::vector<int> seen(len.size(), 0);
    std::vector<double> load(2, 0.0);
    for (size_t m = 0; m < mbs.size(); ++m) {
      EXPECT_EQ(mbs[m].rank, static_cast<int>(m / 2));
      EXPECT_TRUE(std::is_sorted(mbs[m].examples.begin(), mbs[m].examples.end()));
      for (size_t i : mbs[m].examples) {
        ++seen[i];
        load[mbs[m].rank] += example_cost(len[i], attention);
      }
    }
    for (int c : seen) EXPECT_EQ(c, 1);
    double best = 1e300, all = load[0] + load[1];
    for (uint32_t mask = 0; mask < (1u << 16); ++mask) {
      double a = 0;
      for (size_t i = 0; i < 16; ++i)
        if (mask >> i & 1) a += example_cost(len[i], attention);
      best = std::min(best, std::max(a, all - a));
    }
    const double ours = std::max(load[0], load[1]);
    EXPECT_LE(ours, best * 1.02) << "trial " << trial;
    const auto equal = assign_ranks(len, 2, true);  // 8 examples each
    double e0 = 0;
    for (size_t i = 0; i < len.size(); ++i)
      if (equal[i] == 0) e0 += example_cost(len[i], attention);
    ours_total += ours;
    best_total += best;
    equal_counts_total += std::max(e0, all - e0);
  }
  EXPECT_LT(ours_total, equal_counts_total);
  EXPECT_LE(ours_total, best_total * 1.005);
}

}  // namespace
}  // namespace fptrain::data
