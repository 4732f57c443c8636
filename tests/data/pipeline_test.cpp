// Data parallelism, exact resume from a cursor, worker determinism, epochs.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "data/batch_builder.h"
#include "data/batch_planner.h"
#include "data/epoch_plan.h"
#include "tests/data/test_util.h"

namespace fptrain::data {
namespace {

using testing::TempDir;

// Examples whose text starts with their id ("#<i>:"), of random lengths: two
// thirds in a text file, one third in a prompt/completion file.
std::vector<std::filesystem::path> corpus(const TempDir& dir, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> text, pc;
  for (size_t i = 0; i < n; ++i) {
    std::string t = "#" + std::to_string(i) + ":" + std::string(5 + rng() % 200, 'a' + static_cast<char>(i % 26));
    if (i % 3 == 0)
      pc.push_back(nlohmann::json{{"prompt", t}, {"completion", "ok" + std::to_string(i)}}.dump());
    else
      text.push_back(nlohmann::json{{"text", t}}.dump());
  }
  return {dir.write_lines("text.jsonl", text), dir.write_lines("pc.jsonl", pc)};
}

void expect_same(const PackedBatch& a, const PackedBatch& b) {
  EXPECT_EQ(a.input_ids, b.input_ids);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.position_ids, b.position_ids);
  EXPECT_EQ(a.cu_seqlens, b.cu_seqlens);
  EXPECT_EQ(a.max_seqlen, b.max_seqlen);
  EXPECT_EQ(a.num_padding_tokens, b.num_padding_tokens);
  EXPECT_EQ(a.num_supervised, b.num_supervised);
}

void expect_same(const std::vector<TrainStep>& a, const std::vector<TrainStep>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, b[i].step);
    EXPECT_EQ(a[i].epoch, b[i].epoch);
    EXPECT_EQ(a[i].global_supervised, b[i].global_supervised);
    ASSERT_EQ(a[i].micro_batches.size(), b[i].micro_batches.size());
    for (size_t j = 0; j < a[i].micro_batches.size(); ++j) expect_same(a[i].micro_batches[j], b[i].micro_batches[j]);
  }
}

// The multiset of example ids ("#<i>:") in a batch.
std::multiset<std::string> example_keys(const PackedBatch& b) {
  std::multiset<std::string> keys;
  for (size_t s = 0; s + 1 < b.cu_seqlens.size(); ++s) {
    std::string key;
    for (int32_t t = b.cu_seqlens[s]; t < b.cu_seqlens[s + 1] && key.size() < 12; ++t) {
      const int32_t id = b.input_ids[t];
      if (id >= testing::ByteTokenizer::kByteOffset) key += static_cast<char>(id - testing::ByteTokenizer::kByteOffset);
      if (key.back() == ':') break;
    }
    keys.insert(key);
  }
  return keys;
}

class Modes : public ::testing::TestWithParam<BatchMode> {
 protected:
  DataOptions base(const std::vector<std::filesystem::path>& f) {
    auto o = testing::options_for(f);
    o.batching = GetParam();
    o.examples_per_micro_batch = 3;
    o.max_length = 256;
    o.max_tokens = 600;
    o.row_tokens = 200;
    o.rows_per_micro_batch = 2;
    o.shuffle_window = 50;
    o.shuffle = true;
    o.seed = 99;
    return o;
  }
  TempDir dir_;
};

TEST_P(Modes, RanksGetEqualMicroBatchCountsAndTogetherTheWholeStep) {
  const auto f = corpus(dir_, 157, 1);
  auto single = base(f);
  single.micro_batches_per_step = 6;
  DataPipeline one(single, testing::byte_tokenizer());
  const auto reference = testing::drain(one);

  const int W = 3;
  std::vector<std::vector<TrainStep>> per_rank;
  for (int r = 0; r < W; ++r) {
    auto o = base(f);
    o.world_size = W;
    o.rank = r;
    o.micro_batches_per_step = 2;
    o.workers = r;  // worker count must not matter
    DataPipeline p(o, testing::byte_tokenizer());
    per_rank.push_back(testing::drain(p));
  }
  ASSERT_EQ(per_rank[0].size(), reference.size());
  double worst = 0;
  for (size_t s = 0; s < reference.size(); ++s) {
    std::multiset<std::string> all, expected;
    for (const auto& mb : reference[s].micro_batches) {
      auto k = example_keys(mb);
      expected.insert(k.begin(), k.end());
    }
    int64_t supervised = 0, tokens = 0;
    for (int r = 0; r < W; ++r) {
      const TrainStep& st = per_rank[r][s];
      EXPECT_EQ(st.micro_batches.size(), per_rank[0][s].micro_batches.size()) << "step " << s << " rank " << r;
      EXPECT_EQ(st.global_supervised, reference[s].global_supervised);
      EXPECT_EQ(st.global_tokens, reference[s].global_tokens);
      EXPECT_EQ(st.cursor.to_json(), per_rank[0][s].cursor.to_json());  // identical on every rank
      int64_t mine = 0;
      for (const auto& mb : st.micro_batches) {
        EXPECT_EQ(check_batch(mb), "");
        supervised += mb.num_supervised;
        tokens += mb.num_tokens;
        mine += mb.num_tokens;
        auto k = example_keys(mb);
        all.insert(k.begin(), k.end());
      }
      EXPECT_EQ(mine, st.rank_tokens[r]);
    }
    EXPECT_EQ(supervised, reference[s].global_supervised);
    EXPECT_EQ(tokens, reference[s].global_tokens);
    EXPECT_EQ(all, expected) << "step " << s;
    if (s + 1 < reference.size()) worst = std::max(worst, per_rank[0][s].rank_imbalance);
  }
  if (GetParam() == BatchMode::kPack) EXPECT_LT(worst, 0.25) << "token imbalance between ranks";
}

TEST_P(Modes, CursorRestoresTheExactStream) {
  const auto f = corpus(dir_, 120, 2);
  auto o = base(f);
  o.epochs = 3;
  o.micro_batches_per_step = 2;
  o.shuffle_window = 40;  // several pack windows per epoch; cursors land mid-window
  DataPipeline full(o, testing::byte_tokenizer());
  const auto all = testing::drain(full);
  ASSERT_GT(all.size(), 10u);
  EXPECT_EQ(all.back().epoch, 2);
  for (size_t k : {size_t{1}, size_t{3}, all.size() / 2, all.size() - 1}) {
    DataPipeline first(o, testing::byte_tokenizer());
    const auto head = testing::drain(first, k);
    const std::string saved = head.back().cursor.to_json();
    DataPipeline resumed(o, testing::byte_tokenizer(), DataCursor::from_json(saved));
    const auto tail = testing::drain(resumed);
    expect_same(tail, std::vector<TrainStep>(all.begin() + k, all.end()));
    EXPECT_EQ(tail.empty() ? saved : tail.back().cursor.to_json(), all.back().cursor.to_json());
  }
}

TEST_P(Modes, WorkerThreadsDoNotChangeTheStream) {
  const auto f = corpus(dir_, 300, 3);
  auto o = base(f);
  o.workers = 0;
  DataPipeline inline_(o, testing::byte_tokenizer());
  const auto a = testing::drain(inline_);
  for (int workers : {1, 4}) {
    o.workers = workers;
    o.prefetch_steps = 2;
    DataPipeline threaded(o, testing::byte_tokenizer());
    expect_same(testing::drain(threaded), a);
  }
}

// Every rank reports the same busiest and mean work of a step, and they are
// what the ranks' own batches cost: example_cost of each attention sequence
// (cu_seqlens), padding included.
TEST_P(Modes, RanksReportTheWorkTheirBatchesCost) {
  const auto f = corpus(dir_, 157, 4);
  const int W = 3;
  const int64_t attention_length = 64;  // short: the quadratic part counts
  std::vector<std::vector<TrainStep>> per_rank;
  for (int r = 0; r < W; ++r) {
    auto o = base(f);
    o.world_size = W;
    o.rank = r;
    o.balance_attention_length = attention_length;
    DataPipeline p(o, testing::byte_tokenizer());
    per_rank.push_back(testing::drain(p));
  }
  ASSERT_GT(per_rank[0].size(), 3u);
  for (size_t s = 0; s < per_rank[0].size(); ++s) {
    std::vector<double> work(W, 0.0);
    for (int r = 0; r < W; ++r)
      for (const auto& mb : per_rank[r][s].micro_batches)
        for (size_t q = 0; q + 1 < mb.cu_seqlens.size(); ++q)
          work[r] += example_cost(mb.cu_seqlens[q + 1] - mb.cu_seqlens[q], attention_length);
    const double busiest = *std::max_element(work.begin(), work.end());
    const double mean = std::accumulate(work.begin(), work.end(), 0.0) / W;
    for (int r = 0; r < W; ++r) {
      EXPECT_NEAR(per_rank[r][s].busiest_rank_work, busiest, 1e-9 * busiest) << "step " << s << " rank " << r;
      EXPECT_NEAR(per_rank[r][s].mean_rank_work, mean, 1e-9 * busiest) << "step " << s << " rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Data, Modes,
                         ::testing::Values(BatchMode::kFlatten, BatchMode::kPad, BatchMode::kPack, BatchMode::kFixed),
                         [](const auto& info) { return std::string(common::enum_name(info.param)); });

// Fixed rows are the stream's examples concatenated and cut: the same tokens
// in the same order as flatten's, rows of exactly row_tokens but each window's
// last, rows_per_micro_batch a micro-batch; a piece per sequence with its own
// positions, or a row per sequence with cross_example_attention; the step
// count planned for the data report is the stream's.
TEST(FixedRows, CutTheConcatenationIntoRowsOfExactLength) {
  TempDir dir;
  const auto f = corpus(dir, 90, 4);
  auto flat = testing::options_for(f);
  flat.examples_per_micro_batch = 5;
  flat.shuffle_window = 40;
  DataPipeline reference(flat, testing::byte_tokenizer());
  std::vector<int32_t> expected;
  int64_t examples = 0;
  for (const auto& mb : testing::all_micro_batches(testing::drain(reference))) {
    expected.insert(expected.end(), mb.input_ids.begin(), mb.input_ids.end());
    examples += mb.num_examples;
  }
  for (const bool cross : {false, true}) {
    SCOPED_TRACE(cross ? "cross_example_attention" : "positions per example");
    auto o = flat;
    o.batching = BatchMode::kFixed;
    o.row_tokens = 64;
    o.rows_per_micro_batch = 3;
    o.cross_example_attention = cross;
    o.micro_batches_per_step = 2;
    DataPipeline p(o, testing::byte_tokenizer());
    const auto steps = testing::drain(p);
    EXPECT_EQ(static_cast<int64_t>(steps.size()), count_steps(o, testing::byte_tokenizer()));
    std::vector<int32_t> got;
    int64_t counted = 0, short_rows = 0, short_micro_batches = 0;
    for (const auto& mb : testing::all_micro_batches(steps)) {
      EXPECT_EQ(check_batch(mb), "");
      got.insert(got.end(), mb.input_ids.begin(), mb.input_ids.end());
      counted += mb.num_examples;
      EXPECT_LE(mb.num_tokens, 3 * 64);
      short_micro_batches += mb.num_tokens != 3 * 64;
      if (cross) {
        for (size_t s = 0; s + 1 < mb.cu_seqlens.size(); ++s) short_rows += mb.cu_seqlens[s + 1] - mb.cu_seqlens[s] != 64;
      } else {
        EXPECT_GE(mb.cu_seqlens.size() - 1, static_cast<size_t>((mb.num_tokens + 63) / 64));  // pieces >= rows
      }
    }
    EXPECT_EQ(got, expected);
    EXPECT_EQ(counted, examples);
    // 90 examples in windows of 40: only the last row and micro-batch of each of the 3 windows may be short.
    EXPECT_LE(short_micro_batches, 3);
    EXPECT_LE(short_rows, 3);
  }
}

TEST(DataCursor, RefusesOtherOptionsOrData) {
  TempDir dir;
  const auto f = corpus(dir, 20, 4);
  auto o = testing::options_for(f);
  DataPipeline p(o, testing::byte_tokenizer());
  const auto steps = testing::drain(p, 1);
  auto other = o;
  other.seed = 5;
  try {
    DataPipeline q(other, testing::byte_tokenizer(), steps[0].cursor);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be resumed"), std::string::npos);
  }
  EXPECT_THROW(DataCursor::from_json("{\"version\": 1}"), std::runtime_error);
}

TEST(DataCursor, SurvivesMovingTheDataElsewhere) {
  TempDir a, b;
  const auto files = corpus(a, 30, 7);
  auto o = testing::options_for(files);
  o.examples_per_micro_batch = 2;
  DataPipeline p(o, testing::byte_tokenizer());
  const auto all = testing::drain(p);
  std::vector<std::filesystem::path> moved;
  for (const auto& f : files) {
    moved.push_back(b.path() / f.filename());
    std::filesystem::copy_file(f, moved.back());
  }
  auto mo = testing::options_for(moved);
  mo.examples_per_micro_batch = 2;
  DataPipeline q(mo, testing::byte_tokenizer(), all[2].cursor);
  expect_same(testing::drain(q), std::vector<TrainStep>(all.begin() + 3, all.end()));
}

TEST(DataEpochs, EveryExampleOncePerEpochInANewOrder) {
  TempDir dir;
  const auto f = corpus(dir, 40, 5);
  auto o = testing::options_for(f);
  o.shuffle = true;
  o.epochs = 2;
  o.examples_per_micro_batch = 4;
  DataPipeline p(o, testing::byte_tokenizer());
  const auto steps = testing::drain(p);
  std::vector<std::vector<std::string>> order(2);
  for (const auto& s : steps)
    for (const auto& mb : s.micro_batches)
      for (const auto& k : example_keys(mb)) order[s.epoch].push_back(k);
  ASSERT_EQ(order[0].size(), 40u);
  ASSERT_EQ(order[1].size(), 40u);
  EXPECT_EQ(std::set<std::string>(order[0].begin(), order[0].end()).size(), 40u);
  EXPECT_NE(order[0], order[1]);
  EXPECT_TRUE(steps[9].last_of_epoch);
  EXPECT_EQ(steps.back().cursor.stats.seen, 80);
}

TEST(DataEpochs, PartialLastStepGivesEveryRankTheSameCount) {
  TempDir dir;
  const auto f = corpus(dir, 10, 6);  // 10 micro-batches of 1; W=4, M=1: last step has 2
  for (int r = 0; r < 4; ++r) {
    auto o = testing::options_for(f);
    o.examples_per_micro_batch = 1;
    o.world_size = 4;
    o.rank = r;
    DataPipeline p(o, testing::byte_tokenizer());
    const auto steps = testing::drain(p);
    ASSERT_EQ(steps.size(), 3u);
    EXPECT_EQ(steps[2].global_micro_batches, 2);
    ASSERT_EQ(steps[2].micro_batches.size(), 1u);
    EXPECT_EQ(steps[2].micro_batches[0].num_tokens == 0, r >= 2);  // ranks 2, 3 get an empty one
    EXPECT_EQ(steps[2].micro_batches[0].num_examples, r < 2 ? 1 : 0);
    EXPECT_EQ(check_batch(steps[2].micro_batches[0]), "");  // an empty batch is a valid one
  }
}

// Flatten with several ranks deals each step's examples by length: the same
// examples make the step, every rank gets its micro-batches, and no rank
// carries more than the lightest one plus the longest example of the step.
TEST(DataParallelFlatten, RanksGetBalancedTokensAndTheSameExamples) {
  TempDir dir;
  const auto f = corpus(dir, 200, 7);
  for (const bool balance : {true, false}) {
    const int W = 4;
    std::vector<std::vector<TrainStep>> per_rank;
    for (int r = 0; r < W; ++r) {
      auto o = testing::options_for(f);
      o.examples_per_micro_batch = 3;
      o.micro_batches_per_step = 2;
      o.world_size = W;
      o.rank = r;
      o.balance_ranks = balance;
      o.shuffle = true;
      o.seed = 5;
      DataPipeline p(o, testing::byte_tokenizer());
      per_rank.push_back(testing::drain(p));
    }
    auto single = testing::options_for(f);
    single.examples_per_micro_batch = 3;
    single.micro_batches_per_step = 2 * W;
    single.shuffle = true;
    single.seed = 5;
    DataPipeline one(single, testing::byte_tokenizer());
    const auto reference = testing::drain(one);
    ASSERT_EQ(per_rank[0].size(), reference.size());
    double worst_balanced = 0;
    for (size_t s = 0; s < reference.size(); ++s) {
      std::multiset<std::string> expected, all;
      for (const auto& mb : reference[s].micro_batches) {
        auto k = example_keys(mb);
        expected.insert(k.begin(), k.end());
      }
      std::vector<int64_t> tokens(W, 0), examples(W, 0);
      int32_t longest = 0;
      for (int r = 0; r < W; ++r)
        for (const auto& mb : per_rank[r][s].micro_batches) {
          auto k = example_keys(mb);
          all.insert(k.begin(), k.end());
          tokens[r] += mb.num_tokens;
          examples[r] += mb.num_examples;
          if (!balance) EXPECT_LE(mb.num_examples, 3);  // balanced: any count, equal tokens
          for (size_t q = 0; q + 1 < mb.cu_seqlens.size(); ++q)
            longest = std::max(longest, mb.cu_seqlens[q + 1] - mb.cu_seqlens[q]);
        }
      EXPECT_EQ(all, expected) << "step " << s;
      EXPECT_EQ(per_rank[0][s].global_supervised, reference[s].global_supervised);
      const auto [lo, hi] = std::minmax_element(tokens.begin(), tokens.end());
      if (balance && expected.size() == static_cast<size_t>(2 * 3 * W)) {
        for (int r = 0; r < W; ++r) EXPECT_EQ(per_rank[r][s].micro_batches.size(), 2u) << "step " << s;
        EXPECT_LE(*hi - *lo, longest) << "step " << s;
        worst_balanced = std::max(worst_balanced, static_cast<double>(*hi - *lo) / *hi);
      }
    }
    if (balance) EXPECT_LT(worst_balanced, 0.5);
  }
}

}  // namespace
}  // namespace fptrain::data
