// Tensor collectives of a data-parallel group, one interface for both kinds of
// process: NCCL (ProcessGroupNCCL) between GPUs, and a reduction over the TCP
// store between CPU processes (slow, but the same trainer code path; CI's
// multi-rank tests run on it).
//
// Every rank calls the same collectives in the same order. Sums are summed in
// rank order by the store implementation, so every rank gets bit-identical
// results; NCCL's are deterministic for a fixed topology.
#pragma once

#include <ATen/ATen.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <functional>
#include <string>

namespace fptrain::distributed {

// A collective in flight. wait() makes the current CUDA stream wait for it (no
// host synchronization); on the store path the work is already done.
class Pending {
 public:
  Pending() = default;
  explicit Pending(c10::intrusive_ptr<c10d::Work> work) : work_(std::move(work)) {}
  explicit Pending(std::function<void()> wait) : wait_(std::move(wait)) {}
  void wait();
  bool empty() const { return !work_ && !wait_; }
  // Whether the collective's input may be freed as soon as it was issued: its
  // device reads were made known to the caching allocator (recordStream), which
  // reuses the memory only after them. Otherwise the caller keeps it until wait().
  bool input_may_be_freed() const { return static_cast<bool>(wait_for_input_reads_); }
  // `wait_for_reads` blocks the host until those reads are done (the memory is then
  // the allocator's to hand out again).
  Pending& input_recorded(std::function<void()> wait_for_reads) {
    wait_for_input_reads_ = std::move(wait_for_reads);
    return *this;
  }
  // The host waits for the recorded reads of the input (input_may_be_freed() only).
  void wait_for_input_reads() const {
    if (wait_for_input_reads_) wait_for_input_reads_();
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> wait_;
  std::function<void()> wait_for_input_reads_;  // set: the input's reads were recorded
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string kind() const = 0;  // "nccl", "store"

  // In place: t = sum over ranks of t.
  virtual Pending all_reduce_sum(at::Tensor t) = 0;
  // In place: t = max over ranks of t.
  virtual Pending all_reduce_max(at::Tensor t) = 0;
  // full: [world × n] on every rank; out ([n]) = sum over ranks of full's chunk
  // `rank`. out may be that chunk of full itself (in place).
  virtual Pending reduce_scatter_sum(at::Tensor full, at::Tensor out) = 0;
  // shard ([n]) of every rank into full ([world × n]), rank order. shard may be
  // full's own chunk `rank` (in place).
  virtual Pending all_gather(at::Tensor shard, at::Tensor full) = 0;
  // t = root's t on every rank.
  virtual Pending broadcast(at::Tensor t, int root) = 0;

  // Collective: offers a buffer that has the same layout on every rank (the
  // flat weights, the flat gradients) to a faster path for the collectives on
  // tensors inside it (between GPUs of one node: copy engines). Returns whether
  // it took it; the collectives behave the same either way.
  virtual bool share_buffer(const at::Tensor& /*buffer*/) { return false; }
  // Collective: offers the reduce-scatters of buffers that are not shared (the gradient
  // buckets that lazy storage allocates step by step), whose `full` holds at most
  // `largest_bytes`, to a faster path (between GPUs of one node: copy engines pushing each
  // slice into its owner's receive window). Returns whether it took them; the
  // collectives behave the same either way.
  virtual bool take_reduce_scatters(int64_t /*largest_bytes*/) { return false; }
  // How the tensor collectives move their bytes, for the log.
  virtual std::string transfers() const { return kind(); }
};

}  // namespace fptrain::distributed
