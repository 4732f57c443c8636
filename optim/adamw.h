// AdamW over flat buffers (optim/flat_layout.h, optim/flat_parameters.h).
//
// The model's parameters become views of one weight buffer and their gradients
// views of the gradient buckets (optim/flat_gradients.h: allocated when the
// backward reaches them and freed after the step, or one resident buffer), into
// which autograd accumulates every micro-batch in place. With master weights (a bf16/fp16 model and
// optimizer.master_weights) the optimizer keeps fp32 master weights and fp32
// moments, each one buffer; without them (an fp32 model, or master_weights:
// false) it updates the weight buffer in place with moments of the model dtype.
// With split masters (a bf16 model, optimizer.split_masters) each master is the
// model's bf16 weight and a 16-bit remainder: the same fp32 values, 2 bytes less
// per parameter. With 8-bit moments (optimizer.state_dtype: int8) each moment is a uint8
// code per element and an fp32 absmax per 256 (optim/blockwise8_math.h), and the
// step is bitsandbytes' AdamW8bit arithmetic; the layout's alignment is then a
// multiple of 256, so that blocks never straddle two parameters or two shards.
//
// A step is a few launches whatever the parameter count:
//   grad_norm    one reduction over the gradient buckets (fp32 sums, in the order of
//                one buffer): the norm and,
//                on the device, the clip coefficient min(1, max_norm/(norm+1e-6))
//   step         one pass: g = gradient × coefficient; AdamW on the fp32 master
//                (or the weights) and moments exactly as at::_fused_adamw_
//                computes it; the rounded weight written into the model
//   zero         the gradient buckets freed (lazy) or one memset (resident)
// plus, with fp32 gradient accumulation, one pass per extra micro-batch
// (accumulate_gradients). Nothing synchronizes with the host.
//
// With optimizer.offload: cpu the masters and moments live in pinned host memory and
// step() hands the update to a host worker (optim/offloaded_step.h), bucket by bucket
// in flat order; wait_for_weights() then also waits for each bucket's new weights
// (and, sharded, starts its all-gather), so the next forward overlaps the update. With
// optimizer.offload_update: device the host only stores the state: each bucket's state is
// streamed through the device and updated there by the step kernel of offload none
// (optim/streamed_step.h), the same waits handing back the weights.
#pragma once

#include "distributed/communicator.h"
#include "distributed/comm_clock.h"
#include "optim/flat_adamw.h"
#include "optim/offloaded_step.h"
#include "optim/optimizer_section.h"
#include "optim/flat_parameters.h"
#include "optim/streamed_step.h"

#include <ATen/ATen.h>

#include <deque>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace fptrain::optim {

// How the optimizer takes part in data parallelism.
struct DataParallelSpec {
  distributed::Communicator* comm = nullptr;  // null: one process
  // ZeRO-1/2: this rank keeps masters and moments for its shard of the layout
  // only; the trainer reduce-scatters the gradients into it (GradReducer), the
  // norm is all-reduced over shards, and step() all-gathers the updated weights.
  // Off: every rank holds everything and steps on all-reduced gradients.
  bool shard = false;
  int64_t bucket_elements = 0;  // the layout's gradient buckets (0: one)
  // Empty, or per parameter the backward op producing its gradient (FlatLayout's gradient
  // groups: a bucket half full closes where the op changes). The trainer sets them in one
  // process only, where buckets are just allocation; with ranks they are the collectives.
  std::vector<int64_t> gradient_groups;
};

class AdamW {
 public:
  // `params` are the model's leaf tensors (requires_grad), in a fixed order (the
  // model order in the trainer). They become views of the flat weight buffer and
  // their .grad views of the flat gradient buffer (see FlatParameters).
  AdamW(std::vector<std::string> names, std::vector<at::Tensor> params, const OptimizerSection& options,
        int64_t alignment = FlatLayout::kDefaultAlignment, DataParallelSpec dp = {});

  // With master weights: adds what backward accumulated in the (model-dtype)
  // gradient buffer since the last call into an fp32 accumulator (allocated on
  // first use) and zeroes the buffer, in one pass, so that the micro-batches of a
  // step are summed in fp32. The trainer calls it between micro-batches when
  // optimizer.fp32_grad_accumulation is set. A no-op without master weights.
  void accumulate_gradients();
  // With data parallelism and master weights: starts reducing the fp32 sums
  // (zeros on a rank that made none) across ranks, bucket by bucket in the
  // layout's order, reduce-scattered into this rank's slices when sharded, else
  // all-reduced, in fp32. Every rank calls it once in a step that sums in fp32,
  // before the GradReducer's first bucket; the reduction overlaps the last
  // micro-batch, and grad_norm()/step() wait for it. The step then adds the
  // reduced fp32 sums to the reduced last micro-batch.
  void reduce_accumulated();

  // The global L2 norm of the gradients (a device fp32 scalar, no host sync), as
  // torch.nn.utils.clip_grad_norm_ defines it; when max_norm > 0 the clip
  // coefficient min(1, max_norm / (norm + 1e-6)) is kept on the device and the
  // next step() applies it inside its kernel. The gradients are not touched.
  at::Tensor grad_norm(double max_norm);

  // As grad_norm(), then the gradients themselves are scaled by the coefficient
  // (one more pass over the buffer), like torch.nn.utils.clip_grad_norm_; the next
  // step() applies no further scaling. The trainer uses grad_norm().
  at::Tensor clip_grad_norm(double max_norm);

  // One update with learning rate `lr`, then zero_grad(). With sharding, each
  // bucket's slice is all-gathered as soon as it is updated and nothing waits
  // for the gathers here: the next forward waits for each bucket just before it
  // reads it (wait_for_weights), so the gathers overlap the remaining updates and
  // the next step's first layers. Waits are bracketed by `clock` when given.
  void step(double lr, distributed::CommClock* clock = nullptr);
  // Makes the current stream wait for the pending all-gathers of every bucket
  // that starts before flat element `end` (all of them: wait_for_all_weights).
  // Anything that reads the weights after step() must call one of them.
  void wait_for_weights(int64_t end);
  void wait_for_all_weights() { wait_for_weights(std::numeric_limits<int64_t>::max()); }
  // Frees the gradient buckets (lazy; .grad undefined until the next backward) or
  // zeroes the one buffer (resident; the .grad views stay), zeroes the fp32
  // accumulator if in use, and forgets a pending clip coefficient.
  void zero_grad();

  // optimizer.offload: cpu: masters and moments in host memory, the update on the host or
  // (offload_update: device) streamed through the device.
  bool offloaded() const { return offload_ != nullptr || streamed_ != nullptr; }
  // Host bytes of the offloaded state and its copies (0 without offload).
  int64_t host_bytes() const;
  // Device bytes of the device update's staging slots (0 without it).
  int64_t staging_bytes() const { return streamed_ ? streamed_->device_bytes() : 0; }
  // The host update (tests: failure injection); null without offload or with the device update.
  OffloadedStep* offload() { return offload_.get(); }
  const OffloadedStep* offload() const { return offload_.get(); }
  // The device update of offloaded state; null without offload or with the host update.
  const StreamedStep* streamed() const { return streamed_.get(); }

  int64_t steps_taken() const { return steps_taken_; }
  bool has_master_weights() const { return master_weights_; }

  // Everything needed to continue bit-identically (after a step, with offload or
  // sharding, once wait_for_all_weights() ran): views of the buffers, keyed
  // "<kind>.<parameter name>" (the whole parameter, its shape) or, for a part
  // of a parameter that a shard holds, "<kind>.<parameter name>@<first element>"
  // (1-D, elements of the flattened parameter); kind in {weight, exp_avg,
  // exp_avg_sq}, with 8-bit moments {weight, exp_avg_codes, exp_avg_absmax,
  // exp_avg_sq_codes, exp_avg_sq_absmax} (codes uint8 per element; absmax fp32 per
  // 256 elements of the parameter, 1-D, the piece's blocks from first element / 256).
  // `weight` is the fp32 master (or the parameter itself without
  // master weights). One process (or no sharding) writes whole parameters only.
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  // Restores state() output of any sharding (tensors on any device; copied in
  // place): each element this rank needs is taken from whichever piece holds it,
  // so a checkpoint of N shards loads into M, and full and 8-bit moments load into
  // either form (quantised or dequantised as the step would). `source` names where
  // the tensors come from (the checkpoint file) in errors.
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps_taken,
                  const std::string& source = "optimizer state");
  bool sharded() const { return dp_.shard; }

  // The buffers, for tests and benchmarks: [layout total] each; master undefined
  // without master weights; accumulator undefined until accumulate_gradients().
  const FlatParameters& flat() const { return *flat_; }
  FlatParameters& flat() { return *flat_; }
  // Parameters whose gradients the backward overwrites (FlatParameters::keep_on_zero).
  void keep_on_zero(const std::vector<const at::Tensor*>& params) { flat_->keep_on_zero(params); }
  // With sharding, master / exp_avg / exp_avg_sq hold this rank's shard
  // (layout.shard_size() elements, FlatLayout::shard_ranges order).
  // The fp32 masters, or with split masters their 16-bit remainders (int16).
  const at::Tensor& master() const { return master_; }
  bool split_masters() const { return master_.defined() && master_.scalar_type() == at::kShort; }
  // The moments; with 8-bit moments their uint8 codes, and the fp32 absmax per 256 elements.
  const at::Tensor& exp_avg() const { return exp_avg_; }
  const at::Tensor& exp_avg_sq() const { return exp_avg_sq_; }
  bool moments_8bit() const { return exp_avg_absmax_.defined(); }
  const at::Tensor& exp_avg_absmax() const { return exp_avg_absmax_; }
  const at::Tensor& exp_avg_sq_absmax() const { return exp_avg_sq_absmax_; }
  // Bytes of the state buffers: masters (or remainders) and moments (with absmax); the fp32
  // gradient sums once allocated.
  int64_t master_bytes() const { return master_.defined() ? master_.nbytes() : 0; }
  int64_t moment_bytes() const;
  const at::Tensor& accumulator() const { return accum_; }

 private:
  // The flat ranges this rank updates, each with its offset in the state buffers.
  struct Range {
    size_t bucket;
    int64_t flat, local, numel;
  };
  void all_gather_weights(const std::vector<size_t>& buckets);
  // The 8-bit moments of local elements [local, local + numel), both block-aligned.
  flat::Moments8bit moments8(int64_t local, int64_t numel) const;
  // What this rank's state holds: its shard's pieces, or every parameter whole.
  std::vector<ShardPiece> held_pieces() const;
  // load_state's per-piece restores (optim/adamw_state.cpp).
  struct SavedIndex;
  void restore_moments(const SavedIndex& saved, const ShardPiece& piece);
  void wait_for_accumulated();
  at::Tensor accumulated_slice(int64_t flat, int64_t numel) const;
  at::Tensor grads_of(const Range& r, bool need);
  void accumulate_buckets();
  // optimizer.offload: cpu (optim/adamw_offload.cpp).
  void launch_offloaded(const flat::AdamWHyper& h, const at::Tensor& coef);
  void host_update(const Range& r, const at::Tensor& grads, const at::Tensor& accum, const at::Tensor& coef,
                   const flat::AdamWHyper& h);
  void wait_offloaded(int64_t end);
  std::vector<OffloadedStep::Input> offload_inputs();
  at::Tensor make_state(int64_t numel, at::ScalarType dtype) const;
  // optimizer.offload_update: device (optim/adamw_streamed.cpp).
  std::vector<StreamedStep::State> streamed_states() const;
  void make_streamed();
  void launch_streamed(const flat::AdamWHyper& h, const at::Tensor& coef);
  void device_update(const StreamedStep::Piece& p, const at::Tensor& grads, const at::Tensor& accum,
                     const std::vector<at::Tensor>& staged, const at::Tensor& coef, const flat::AdamWHyper& h);

  struct PendingGather {
    int64_t begin;  // the bucket's first flat element
    distributed::Pending work;
  };
  std::deque<PendingGather> gathers_;  // in flat order
  distributed::CommClock* clock_ = nullptr;

  std::vector<std::string> names_;
  OptimizerSection options_;
  DataParallelSpec dp_;
  std::vector<Range> ranges_;
  std::unique_ptr<FlatParameters> flat_;
  bool master_weights_ = false;
  at::Tensor master_;               // fp32 masters, or int16 remainders (split), with master weights only
  at::Tensor exp_avg_, exp_avg_sq_;  // fp32 with master weights, else the model dtype; 8-bit: uint8 codes
  at::Tensor exp_avg_absmax_, exp_avg_sq_absmax_;  // 8-bit moments: fp32 per blockwise8::kBlock
  at::Tensor accum_;                // fp32 gradient sums over micro-batches (accumulate_gradients)
  bool accum_active_ = false;       // accum_ holds gradients of the current step
  std::vector<distributed::Pending> accum_reductions_;  // reduce_accumulated() in flight
  std::unique_ptr<OffloadedStep> offload_;   // optimizer.offload: cpu, the update on the host
  std::unique_ptr<StreamedStep> streamed_;   // optimizer.offload: cpu, the update on the device
  size_t offload_waited_ = 0;       // ranges of the launched offloaded update the device waited for
  at::Tensor coef_;                 // the clip coefficient of the current step (device fp32 scalar)
  bool coef_pending_ = false;       // step() must apply coef_
  int64_t steps_taken_ = 0;
};

}  // namespace fptrain::optim
