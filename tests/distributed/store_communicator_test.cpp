// StoreCommunicator between threads standing in for ranks, sharing one
// c10d::HashStore: every collective gives the right values, bit-identical on
// every rank (sums in rank order), leaves no key behind, and a rank that never
// posts makes the others throw within the timeout, naming it.
#include "distributed/store_communicator.h"
#include "tests/distributed/rank_threads.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace fptrain::distributed {
namespace {

using Clock = std::chrono::steady_clock;
using fptrain::distributed::testing::expect_no_errors;
using fptrain::distributed::testing::on_ranks;

// Deterministic random values for rank r, made on the main thread.
at::Tensor values(int64_t n, uint64_t seed, at::ScalarType dtype = at::kFloat) {
  auto gen = at::detail::createCPUGenerator(seed);
  at::Tensor t = at::randn({n}, gen, at::TensorOptions().dtype(at::kFloat));
  if (dtype == at::kLong) return (t * 1000).to(at::kLong);
  return t.to(dtype);
}

// The rank-order sum every rank must hold: ((x0 + x1) + x2) ...
at::Tensor rank_order_sum(const std::vector<at::Tensor>& xs) {
  at::Tensor acc = xs[0].clone();
  for (size_t r = 1; r < xs.size(); ++r) acc = acc + xs[r];
  return acc;
}

void expect_store_empty(c10d::HashStore& store) {
  std::string keys;
  for (const auto& k : store.listKeys()) keys += " " + k;
  EXPECT_EQ(store.getNumKeys(), 0) << "keys left behind:" << keys;
}

class StoreCommunicatorTest : public ::testing::TestWithParam<int> {};  // the world size

TEST_P(StoreCommunicatorTest, AllReduceSumIsTheRankOrderSumOnEveryRank) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kLong}) {
    for (int64_t n : {1, 1000, 4099}) {
      std::vector<at::Tensor> in, out(world);
      for (int r = 0; r < world; ++r) in.push_back(values(n, 100 + r, dtype));
      expect_no_errors(on_ranks(store, world, [&](int r, StoreCommunicator& c) {
        at::Tensor t = in[r].clone();
        EXPECT_TRUE(c.all_reduce_sum(t).empty());  // the store path is done when it returns
        out[r] = t;
      }));
      const at::Tensor expected = rank_order_sum(in);
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(out[r].scalar_type(), dtype);
        EXPECT_TRUE(at::equal(out[r], expected)) << "rank " << r << " dtype " << dtype << " n " << n;
      }
      // The order matters: with more than 2 ranks some float sum in another order differs.
      if (world > 2 && dtype == at::kFloat && n > 1000) {
        const at::Tensor reversed = rank_order_sum(std::vector<at::Tensor>(in.rbegin(), in.rend()));
        EXPECT_FALSE(at::equal(reversed, expected)) << "the test cannot tell the summation order apart";
      }
    }
  }
  expect_store_empty(*store);
}

TEST_P(StoreCommunicatorTest, AllReduceMaxIsTheElementwiseMaximum) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<at::Tensor> in, out(world);
  for (int r = 0; r < world; ++r) in.push_back(values(777, 200 + r));
  expect_no_errors(on_ranks(store, world, [&](int r, StoreCommunicator& c) {
    at::Tensor t = in[r].clone();
    c.all_reduce_max(t).wait();
    out[r] = t;
  }));
  at::Tensor expected = in[0];
  for (int r = 1; r < world; ++r) expected = at::maximum(expected, in[r]);
  for (int r = 0; r < world; ++r) EXPECT_TRUE(at::equal(out[r], expected)) << "rank " << r;
  expect_store_empty(*store);
}

TEST_P(StoreCommunicatorTest, ReduceScatterSumGivesEachRankTheSumOfItsChunk) {
  const int world = GetParam();
  const int64_t n = 384;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<at::Tensor> full(world), separate(world), in_place(world);
  for (int r = 0; r < world; ++r) full[r] = values(n * world, 300 + r);
  expect_no_errors(on_ranks(store, world, [&](int r, StoreCommunicator& c) {
    // Into a separate tensor; the input stays as it was.
    at::Tensor f = full[r].clone(), out = at::full({n}, -7.0f);
    c.reduce_scatter_sum(f, out).wait();
    EXPECT_TRUE(at::equal(f, full[r])) << "rank " << r << ": the input changed";
    separate[r] = out;
    // In place: the output is the rank's own chunk of the input (as GradReducer does).
    at::Tensor g = full[r].clone();
    c.reduce_scatter_sum(g, g.narrow(0, r * n, n)).wait();
    in_place[r] = g;
  }));
  for (int r = 0; r < world; ++r) {
    std::vector<at::Tensor> chunks;
    for (int s = 0; s < world; ++s) chunks.push_back(full[s].narrow(0, r * n, n));
    const at::Tensor expected = rank_order_sum(chunks);
    EXPECT_TRUE(at::equal(separate[r], expected)) << "rank " << r;
    EXPECT_TRUE(at::equal(in_place[r].narrow(0, r * n, n), expected)) << "rank " << r << " in place";
    // The other chunks of the in-place buffer are left alone.
    for (int s = 0; s < world; ++s) {
      if (s != r) {
        EXPECT_TRUE(at::equal(in_place[r].narrow(0, s * n, n), full[r].narrow(0, s * n, n)));
      }
    }
  }
  expect_store_empty(*store);
}

TEST_P(StoreCommunicatorTest, AllGatherConcatenatesTheShardsInRankOrder) {
  const int world = GetParam();
  const int64_t n = 256;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<at::Tensor> shard(world), separate(world), in_place(world);
  for (int r = 0; r < world; ++r) shard[r] = values(n, 400 + r);
  expect_no_errors(on_ranks(store, world, [&](int r, StoreCommunicator& c) {
    at::Tensor full = at::full({n * world}, std::nanf(""));
    c.all_gather(shard[r].clone(), full).wait();
    separate[r] = full;
    // In place: the shard is the rank's own chunk of the output (as AdamW::step does).
    at::Tensor g = at::full({n * world}, std::nanf(""));
    g.narrow(0, r * n, n).copy_(shard[r]);
    c.all_gather(g.narrow(0, r * n, n), g).wait();
    in_place[r] = g;
  }));
  const at::Tensor expected = at::cat(shard);
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(at::equal(separate[r], expected)) << "rank " << r;
    EXPECT_TRUE(at::equal(in_place[r], expected)) << "rank " << r << " in place";
  }
  expect_store_empty(*store);
}

TEST_P(StoreCommunicatorTest, BroadcastCopiesTheRootsTensorToEveryRank) {
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  for (int root = 0; root < world; ++root) {
    std::vector<at::Tensor> in, out(world);
    for (int r = 0; r < world; ++r) in.push_back(values(100, 500 + 10 * root + r, at::kDouble));
    expect_no_errors(on_ranks(store, world, [&](int r, StoreCommunicator& c) {
      at::Tensor t = in[r].clone();
      c.broadcast(t, root).wait();
      out[r] = t;
    }));
    for (int r = 0; r < world; ++r) EXPECT_TRUE(at::equal(out[r], in[root])) << "root " << root << " rank " << r;
  }
  expect_store_empty(*store);
}

TEST_P(StoreCommunicatorTest, ASequenceOfMixedCollectivesStaysInStep) {
  // What a training step does, several times over: every rank issues the same
  // collectives in the same order, and each sees the values of its own round.
  const int world = GetParam();
  auto store = c10::make_intrusive<c10d::HashStore>();
  const int rounds = 20;
  std::vector<std::vector<double>> seen(world);
  expect_no_errors(on_ranks(store, world, [&](int r, StoreCommunicator& c) {
    for (int k = 0; k < rounds; ++k) {
      at::Tensor full = at::full({4 * world}, static_cast<float>(k * 10 + r));
      c.reduce_scatter_sum(full, full.narrow(0, r * 4, 4));
      at::Tensor s = at::full({}, static_cast<double>(k + r));
      c.all_reduce_sum(s);
      at::Tensor g = at::full({2 * world}, 0.0f);
      c.all_gather(at::full({2}, static_cast<float>(k * 100 + r)), g);
      at::Tensor b = at::full({1}, static_cast<int64_t>(r == k % world ? k : -1));
      c.broadcast(b, k % world);
      seen[r].push_back(full[r * 4].item<double>());
      seen[r].push_back(s.item<double>());
      seen[r].push_back(g[2 * (world - 1)].item<double>());
      seen[r].push_back(static_cast<double>(b.item<int64_t>()));
    }
  }));
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(seen[r].size(), static_cast<size_t>(4 * rounds));
    for (int k = 0; k < rounds; ++k) {
      const double ranks_sum = world * (world - 1) / 2.0;
      EXPECT_EQ(seen[r][4 * k], world * k * 10 + ranks_sum) << "round " << k;
      EXPECT_EQ(seen[r][4 * k + 1], world * k + ranks_sum) << "round " << k;
      EXPECT_EQ(seen[r][4 * k + 2], k * 100 + (world - 1)) << "round " << k;
      EXPECT_EQ(seen[r][4 * k + 3], k) << "round " << k;
    }
  }
  expect_store_empty(*store);
}

INSTANTIATE_TEST_SUITE_P(Worlds, StoreCommunicatorTest, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// ---- a rank that never posts ------------------------------------------------

struct Missing {
  std::string name;
  std::function<void(StoreCommunicator&)> call;
};

TEST(StoreCommunicatorMissingRank, EveryCollectiveThrowsWithinTheTimeoutNamingTheMissingRank) {
  const auto timeout = std::chrono::milliseconds(1500);
  const std::vector<Missing> calls = {
      {"all-reduce", [](StoreCommunicator& c) { c.all_reduce_sum(at::ones({8})); }},
      {"all-reduce (max)", [](StoreCommunicator& c) { c.all_reduce_max(at::ones({8})); }},
      {"reduce-scatter", [](StoreCommunicator& c) {
         at::Tensor f = at::ones({3 * 8});
         c.reduce_scatter_sum(f, f.narrow(0, c.rank() * 8, 8));
       }},
      {"all-gather", [](StoreCommunicator& c) {
         at::Tensor f = at::ones({3 * 8});
         c.all_gather(f.narrow(0, c.rank() * 8, 8), f);
       }},
      {"broadcast", [](StoreCommunicator& c) { c.broadcast(at::ones({8}), 2); }},
  };
  for (const auto& m : calls) {
    // Ranks 0 and 1 of 3 come; rank 2 never does.
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::vector<double> seconds(3, 0.0);
    const auto errors = on_ranks(
        store, 3,
        [&](int r, StoreCommunicator& c) {
          const auto start = Clock::now();
          try {
            m.call(c);
          } catch (...) {
            seconds[r] = std::chrono::duration<double>(Clock::now() - start).count();
            throw;
          }
        },
        timeout, {0, 1});
    for (int r : {0, 1}) {
      SCOPED_TRACE(m.name + ", rank " + std::to_string(r));
      const std::string& e = errors[r];
      ASSERT_NE(e, "") << "no error although rank 2 never came";
      EXPECT_NE(e.find("rank " + std::to_string(r) + ": no data from rank 2 in " + m.name + " #0"), std::string::npos)
          << e;
      EXPECT_NE(e.find("distributed.timeout"), std::string::npos) << e;
      EXPECT_EQ(e.find('\n'), std::string::npos) << "one line expected: " << e;
      EXPECT_GE(seconds[r], 0.9 * timeout.count() / 1000.0);
      EXPECT_LT(seconds[r], timeout.count() / 1000.0 + 5.0);
    }
  }
}

TEST(StoreCommunicatorMissingRank, TwoRanksOneAbsent) {
  // The smallest group: rank 1 is waited for by rank 0 only.
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto start = Clock::now();
  const auto errors = on_ranks(
      store, 2, [](int, StoreCommunicator& c) { c.all_reduce_sum(at::ones({4})); }, std::chrono::milliseconds(1000),
      {0});
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(errors[0].find("no data from rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("rank 1 died or hangs"), std::string::npos) << errors[0];
  EXPECT_LT(seconds, 6.0);
}

}  // namespace
}  // namespace fptrain::distributed
