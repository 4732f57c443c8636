// Reduces the gradients of a step across data-parallel ranks while the last
// micro-batch's backward is still running.
//
// The gradients are cut into buckets of whole parameters (FlatLayout,
// FlatGradients). A hook after each parameter's gradient accumulation counts the
// bucket down; a bucket whose parameters are all done is reduced at once, in
// place in its storage (a bucket no backward reached is made to exist as zeros): reduce-scattered (each rank receives the sum of its own
// slice: ZeRO-2; the optimizer steps that slice) or all-reduced (no sharding).
// Buckets are launched strictly from the last to the first, the order the
// backward finishes them, so every rank issues the same collectives in the
// same order even when one rank had nothing to compute (finish() launches what
// the hooks did not). On GPUs the reductions run on NCCL's stream and the
// compute stream waits for them only in finish(); the host never does.
//
// Gradients are reduced in the gradient buffer's dtype (the model's): for a
// bf16 model that is one more bf16 rounding of the same kind as accumulating a
// micro-batch in place (see trainer/README.md for the measurement).
#pragma once

#include "distributed/communicator.h"
#include "optim/flat_parameters.h"

#include <cstdint>
#include <vector>

namespace fptrain::optim {

// Starts the reduction of one bucket's storage (`bucket`: [its size], laid out
// as the layout's bucket) across ranks, in place: reduce-scattered so that each
// rank receives the sum of its own slice (`scatter`, ZeRO-2), else all-reduced.
// The one cut of the buffers the reducer and the optimizer's fp32 sums share.
distributed::Pending reduce_bucket(distributed::Communicator& comm, const at::Tensor& bucket, bool scatter);

class GradReducer {
 public:
  GradReducer(FlatParameters& flat, distributed::Communicator& comm, bool scatter);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Before the backward of the step's last micro-batch on this rank: from now
  // on, finished buckets are reduced.
  void arm();
  // After it (or instead of it, for a rank with no work left): reduces every
  // bucket not yet reduced, in order, and makes the current stream wait for all.
  void finish();
  // Called by the hook of parameter `index` (public for the hook object).
  void gradient_ready(size_t index);

 private:
  void launch(size_t bucket);

  FlatParameters& flat_;
  distributed::Communicator& comm_;
  bool scatter_;
  std::vector<size_t> bucket_of_param_;
  std::vector<int64_t> params_in_bucket_;
  std::vector<int64_t> waiting_;  // parameters of each bucket still to come in this backward
  std::vector<bool> launched_;
  int64_t next_ = -1;  // the next bucket to launch (they go from last to first)
  bool armed_ = false;
  std::vector<distributed::Pending> pending_;
};

}  // namespace fptrain::optim
