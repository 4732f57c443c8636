// Collectives between GPUs through LibTorch's ProcessGroupNCCL. Each call is
// enqueued on the group's NCCL stream after the work already queued on the
// current stream; Pending::wait() makes the current stream wait for it. The
// host never blocks. Built only with FPTRAIN_CUDA.
//
// With copy-engine transfers on, reduce-scatters and all-gathers on shared
// buffers (share_buffer) move by copy engines instead
// (distributed/copy_engine_transfers.h); everything else stays on NCCL.
#pragma once

#include "distributed/communicator.h"
#include "distributed/copy_engine_transfers.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>

namespace c10d {
class ProcessGroupNCCL;
}

namespace fptrain::distributed {

class NcclCommunicator : public Communicator {
 public:
  // How reduce-scatters and all-gathers on shared buffers move.
  enum class Transfers {
    kAuto,        // copy engines when every rank is on this node and they can map each other's memory, else NCCL
    kCopyEngine,  // copy engines, or an error saying why not
    kNccl,        // NCCL's kernels
  };

  // The current CUDA device must be this rank's. Connects eagerly (one
  // all-reduce), so that a bad launch fails here and not in the first step.
  NcclCommunicator(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size, int device_index,
                   std::chrono::milliseconds timeout, Transfers transfers = Transfers::kNccl);
  ~NcclCommunicator() override;
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string kind() const override { return "nccl"; }
  Pending all_reduce_sum(at::Tensor t) override;
  Pending all_reduce_max(at::Tensor t) override;
  Pending reduce_scatter_sum(at::Tensor full, at::Tensor out) override;
  Pending all_gather(at::Tensor shard, at::Tensor full) override;
  Pending broadcast(at::Tensor t, int root) override;
  bool share_buffer(const at::Tensor& buffer) override;
  bool take_reduce_scatters(int64_t largest_bytes) override;
  std::string transfers() const override { return transfers_note_; }

 private:
  // Every rank learns whether any rank failed (a host sync: start-up only).
  bool all_succeeded(bool mine);
  void give_up_copy_engines(const std::string& why);
  // Runs `collective` (a CopyEngineTransfers set-up step) on every rank; false, with the
  // copy engines given up, when it failed on any.
  template <typename Fn>
  bool all_set_up(Fn&& collective, const std::string& other_rank_failed);

  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group_;
  int rank_, world_;
  int device_index_;
  Transfers requested_;
  std::unique_ptr<CopyEngineTransfers> copies_;
  std::string transfers_note_ = "nccl";
};

// Whether this build can make an NcclCommunicator.
bool nccl_available();

}  // namespace fptrain::distributed
