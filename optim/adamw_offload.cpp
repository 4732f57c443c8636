// AdamW with optimizer.offload: cpu: what each range hands over, the step handed to the host
// worker (optim/offloaded_step.h) and the forward's per-bucket wait for its weights (either
// update place).
#include "optim/adamw.h"

#include <c10/core/GradMode.h>

namespace fptrain::optim {

int64_t AdamW::host_bytes() const {
  if (!offloaded()) return 0;
  return master_bytes() + moment_bytes() + (offload_ ? offload_->host_bytes() : 0);
}

// One input per range: its gradients (and fp32 sums) to read, the input holding a lazy
// bucket alive until then, and what to zero once they were read — a resident buffer's whole
// bucket (every rank's slice, as zero_grad() would) and the sums' — but only after that.
std::vector<OffloadedStep::Input> AdamW::offload_inputs() {
  const auto& buckets = flat_->layout().buckets();
  const bool resident = flat_->gradients().storage() == GradStorage::kResident;
  std::vector<OffloadedStep::Input> inputs;
  for (const Range& r : ranges_) {
    const FlatBucket& b = buckets[r.bucket];
    OffloadedStep::Input in;
    in.grads = grads_of(r, /*need=*/true);  // a bucket no backward reached: zeros
    in.accum = accumulated_slice(r.flat, r.numel);
    if (resident) in.zero_after.push_back(flat_->gradients().bucket(r.bucket));
    if (accum_active_) in.zero_after.push_back(accum_.narrow(0, b.offset, b.size));
    inputs.push_back(std::move(in));
  }
  return inputs;
}

void AdamW::launch_offloaded(const flat::AdamWHyper& h, const at::Tensor& coef) {
  offload_->launch(offload_inputs(), coef,
                   [this, h](size_t i, const at::Tensor& grads, const at::Tensor& accum, const at::Tensor& c) {
                     host_update(ranges_[i], grads, accum, c, h);
                   });
  offload_waited_ = 0;
}

// On the worker: the CPU reference step (bit for bit the CUDA kernel's) on the host state
// of range r; the host weights receive the model's copy.
void AdamW::host_update(const Range& r, const at::Tensor& grads, const at::Tensor& accum, const at::Tensor& coef,
                        const flat::AdamWHyper& h) {
  c10::NoGradGuard no_grad;  // grad mode is thread-local
  auto slice = [&](const at::Tensor& t) { return t.defined() ? t.narrow(0, r.local, r.numel) : t; };
  const at::Tensor weights = offload_->host_weights().narrow(0, r.local, r.numel);
  if (moments_8bit())
    flat::adamw8bit_step(weights, slice(master_), moments8(r.local, r.numel), grads, accum, coef, h);
  else
    flat::adamw_step(weights, slice(master_), slice(exp_avg_), slice(exp_avg_sq_), grads, accum, coef, h);
}

// The ranges of buckets that start before `end`, in order: the current stream waits for
// their weights and, sharded, their all-gathers start (every rank at the same point of
// its forward, so the collectives keep one order).
void AdamW::wait_offloaded(int64_t end) {
  const auto& buckets = flat_->layout().buckets();
  while (offload_waited_ < ranges_.size() && buckets[ranges_[offload_waited_].bucket].offset < end) {
    const Range& r = ranges_[offload_waited_];
    if (clock_) clock_->before_wait();
    if (offload_) offload_->wait(offload_waited_);
    else streamed_->wait(offload_waited_);
    if (clock_) clock_->after_wait();
    ++offload_waited_;
    if (!dp_.shard) continue;
    const FlatBucket& b = buckets[r.bucket];
    gathers_.push_back({b.offset, dp_.comm->all_gather(flat_->weights().narrow(0, r.flat, r.numel),
                                                       flat_->weights().narrow(0, b.offset, b.size))});
  }
}

}  // namespace fptrain::optim
