// Collectives through the TCP store, for CPU processes (LibTorch's wheel ships
// no gloo). Each rank posts its bytes under a key of the collective's sequence
// number and reads the others'; sums run in rank order, so all ranks hold
// bit-identical results. A rank that does not post within the store's timeout
// is named in the error.
#pragma once

#include "distributed/communicator.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>

namespace fptrain::distributed {

class StoreCommunicator : public Communicator {
 public:
  StoreCommunicator(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, std::chrono::milliseconds timeout);
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string kind() const override { return "store"; }
  Pending all_reduce_sum(at::Tensor t) override;
  Pending all_reduce_max(at::Tensor t) override;
  Pending reduce_scatter_sum(at::Tensor full, at::Tensor out) override;
  Pending all_gather(at::Tensor shard, at::Tensor full) override;
  Pending broadcast(at::Tensor t, int root) override;

 private:
  enum class Reduce { kSum, kMax };
  void all_reduce(at::Tensor t, Reduce op, const char* what);
  void reduce_scatter(const at::Tensor& full, const at::Tensor& out);
  void gather(const at::Tensor& shard, const at::Tensor& full);
  void broadcast_from(const at::Tensor& t, int root);
  std::string key(int64_t seq, int src, int dst = -1) const;
  std::vector<uint8_t> receive(const std::string& key, int src, const char* what, int64_t seq);
  void done_reading(int64_t seq, const std::vector<std::string>& keys, int readers);

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_;
  std::chrono::milliseconds timeout_;
  int64_t seq_ = 0;
};

}  // namespace fptrain::distributed
