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
// Releasing the buckets a rank does not own (ZeRO-2, `release_unowned`: sharded
// and lazy gradients only): the reduce-scatter writes this rank's slice into a
// shard of its own (FlatGradients::make_shard) and the whole bucket is given up
// (drop_bucket), so that from the end of the backward to the step a rank holds
// 1/N of the gradients. The same sums in the same order: the same bits.
// Where the collective recorded its reads of a dropped bucket with the caching
// allocator (pushed by the copy engines), the memory returns to the allocator
// only once those reads are done; a host far ahead of the device would meanwhile
// allocate the next buckets anew, up to the whole gradients reserved beside the
// shards. So beyond `max_recorded_reads` such buckets the host waits for the
// oldest one's reads (0: never).
//
// Gradients are reduced in the gradient buffer's dtype (the model's): for a
// bf16 model that is one more bf16 rounding of the same kind as accumulating a
// micro-batch in place (see trainer/README.md for the measurement).
#pragma once

#include "distributed/communicator.h"
#include "optim/flat_parameters.h"

#include <cstdint>
#include <deque>
#include <vector>

namespace fptrain::optim {

// Starts the reduction of one bucket's storage (`bucket`: [its size], laid out
// as the layout's bucket) across ranks, in place: reduce-scattered so that each
// rank receives the sum of its own slice (`scatter`, ZeRO-2), else all-reduced.
// The one cut of the buffers the reducer and the optimizer's fp32 sums share.
distributed::Pending reduce_bucket(distributed::Communicator& comm, const at::Tensor& bucket, bool scatter);

class GradReducer {
 public:
  // `release_unowned` applies with `scatter` and lazy gradient storage only (see above).
  GradReducer(FlatParameters& flat, distributed::Communicator& comm, bool scatter, bool release_unowned = false,
              int64_t max_recorded_reads = 0);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Before the backward of the step's last micro-batch on this rank: from now
  // on, finished buckets are reduced.
  void arm();
  // After it (or instead of it, for a rank with no work left): reduces every
  // bucket not yet reduced, in order, and makes the current stream wait for all.
  void finish();
  // Whether the buckets a rank does not own go after their reduce-scatter.
  bool releases() const;
  // Called by the hook of parameter `index` (public for the hook object).
  void gradient_ready(size_t index);

 private:
  void launch(size_t bucket);
  distributed::Pending scatter_and_release(size_t bucket);
  void limit_recorded_reads(const distributed::Pending& work);

  FlatParameters& flat_;
  distributed::Communicator& comm_;
  bool scatter_;
  bool release_unowned_;
  std::vector<size_t> bucket_of_param_;
  std::vector<int64_t> params_in_bucket_;
  std::vector<int64_t> waiting_;  // parameters of each bucket still to come in this backward
  std::vector<bool> launched_;
  int64_t next_ = -1;  // the next bucket to launch (they go from last to first)
  bool armed_ = false;
  std::vector<distributed::Pending> pending_;
  std::vector<at::Tensor> released_in_flight_;  // dropped buckets their collectives still read
  int64_t max_recorded_reads_;
  std::deque<distributed::Pending> recorded_reads_;  // of dropped buckets, oldest first (see above)
};

}  // namespace fptrain::optim
