// Collectives between GPUs through LibTorch's ProcessGroupNCCL. Each call is
// enqueued on the group's NCCL stream after the work already queued on the
// current stream; Pending::wait() makes the current stream wait for it. The
// host never blocks. Built only with FPTRAIN_CUDA.
#pragma once

#include "distributed/communicator.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>

namespace c10d {
class ProcessGroupNCCL;
}

namespace fptrain::distributed {

class NcclCommunicator : public Communicator {
 public:
  // The current CUDA device must be this rank's. Connects eagerly (one
  // all-reduce), so that a bad launch fails here and not in the first step.
  NcclCommunicator(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, int device_index,
                   std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string kind() const override { return "nccl"; }
  Pending all_reduce_sum(at::Tensor t) override;
  Pending all_reduce_max(at::Tensor t) override;
  Pending reduce_scatter_sum(at::Tensor full, at::Tensor out) override;
  Pending all_gather(at::Tensor shard, at::Tensor full) override;
  Pending broadcast(at::Tensor t, int root) override;

 private:
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group_;
  int rank_, world_;
};

// Whether this build can make an NcclCommunicator.
bool nccl_available();

}  // namespace fptrain::distributed
