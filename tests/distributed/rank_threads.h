// Helpers of the in-process data-parallel tests: ranks as threads of one test,
// each with its own StoreCommunicator over one c10d store, and what those tests
// compare of an optimizer afterwards.
#pragma once

#include "distributed/store_communicator.h"
#include "optim/adamw.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace fptrain::distributed::testing {

using RankFn = std::function<void(int rank, StoreCommunicator& comm)>;

// Runs `fn` on `world` threads (one per rank present, each with its own communicator
// over `store`); returns each rank's exception message ("" if none).
inline std::vector<std::string> on_ranks(const c10::intrusive_ptr<c10d::Store>& store, int world, const RankFn& fn,
                                         std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                         const std::vector<int>& ranks_present = {}) {
  std::vector<int> ranks = ranks_present;
  if (ranks.empty())
    for (int r = 0; r < world; ++r) ranks.push_back(r);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r : ranks)
    threads.emplace_back([&, r] {
      try {
        StoreCommunicator comm(store, r, world, timeout);
        fn(r, comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

inline void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// The optimizer's parameters, flattened into one tensor (a copy).
inline at::Tensor model_weights(const optim::AdamW& opt) {
  std::vector<at::Tensor> parts;
  for (const auto& p : opt.flat().params()) parts.push_back(p.detach().reshape({-1}).clone());
  return at::cat(parts);
}

// A copy of the optimizer's checkpoint state.
inline std::vector<std::pair<std::string, at::Tensor>> cloned_state(const optim::AdamW& opt) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [k, t] : opt.state()) out.emplace_back(k, t.clone());
  return out;
}

}  // namespace fptrain::distributed::testing
