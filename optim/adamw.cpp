#include "optim/adamw.h"

#include "optim/grad_reducer.h"

#include "optim/blockwise8.h"
#include "optim/flat_adamw.h"

#include <ATen/record_function.h>
#include <c10/core/GradMode.h>

#include <numeric>
#include <stdexcept>

namespace fptrain::optim {
namespace {

FlatLayout make_layout(const std::vector<std::string>& names, const std::vector<at::Tensor>& params,
                       int64_t alignment, const DataParallelSpec& dp) {
  if (names.size() != params.size() || params.empty())
    throw std::invalid_argument("AdamW: expected one name per parameter and at least one parameter");
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (size_t i = 0; i < names.size(); ++i) shapes.emplace_back(names[i], params[i].sizes().vec());
  const int64_t shards = dp.comm && dp.shard ? dp.comm->world_size() : 1;
  // Buckets also in one process: the gradients are allocated bucket by bucket (FlatGradients).
  return FlatLayout(shapes, alignment, shards, dp.bucket_elements, dp.gradient_groups);
}

// 8-bit moments: segments and shard slices start on a block (a multiple of the alignment).
int64_t layout_alignment(int64_t alignment, const OptimizerSection& options) {
  return options.moments == Moments::k8bit ? std::lcm(alignment, blockwise8::kBlock) : alignment;
}

}  // namespace

AdamW::AdamW(std::vector<std::string> names, std::vector<at::Tensor> params, const OptimizerSection& options,
             int64_t alignment, DataParallelSpec dp)
    : names_(std::move(names)), options_(options), dp_(dp) {
  if (!dp_.comm || dp_.comm->world_size() == 1) dp_.shard = false;
  const auto dtype = params.empty() ? at::kFloat : params[0].scalar_type();
  for (const auto& p : params)
    if (p.scalar_type() != dtype || p.device() != params[0].device())
      throw std::invalid_argument("AdamW: all parameters must share one dtype and device");
  const bool offload = options.offload == Offload::kCpu;
  if (options.offload_update == OffloadUpdate::kDevice && !offload)
    throw std::invalid_argument("optimizer.offload_update: device needs optimizer.offload: cpu");
  const bool host_update = offload && resolved_offload_update(options) == OffloadUpdate::kHost;
  FlatLayout layout = make_layout(names_, params, layout_alignment(alignment, options), dp_);
  const GradStorage storage =
      options.gradient_storage == GradStorage::kResident ? GradStorage::kResident : GradStorage::kLazy;
  flat_ = std::make_unique<FlatParameters>(std::move(layout), std::move(params), storage);
  master_weights_ = options.master_weights && dtype != at::kFloat;
  c10::NoGradGuard no_grad;
  const at::Tensor& w = flat_->weights();
  const FlatLayout& l = flat_->layout();
  if (dp_.shard) {
    for (const ShardRange& r : l.shard_ranges(dp_.comm->rank())) ranges_.push_back({r.bucket, r.flat_offset, r.local_offset, r.numel});
  } else {  // every bucket whole: the step runs bucket by bucket, as the gradients live
    for (size_t b = 0; b < l.buckets().size(); ++b)
      ranges_.push_back({b, l.buckets()[b].offset, l.buckets()[b].offset, l.buckets()[b].size});
  }
  const int64_t local = dp_.shard ? l.shard_size() : l.total();
  if (host_update) {
    std::vector<OffloadedStep::Range> host;
    for (const Range& r : ranges_) host.push_back({r.flat, r.local, r.numel});
    offload_ = std::make_unique<OffloadedStep>(std::move(host), w, local, options.host_threads);
  }
  const at::ScalarType state_dtype = master_weights_ ? at::kFloat : w.scalar_type();
  if (master_weights_ && options.split_masters && dtype == at::kBFloat16) {
    master_ = make_state(local, at::kShort);  // a bf16 weight is its own master: remainder 0
  } else if (master_weights_) {
    master_ = make_state(local, at::kFloat);
    for (const Range& r : ranges_) master_.narrow(0, r.local, r.numel).copy_(w.narrow(0, r.flat, r.numel));
  }
  if (options.moments == Moments::k8bit) {
    // Zero codes and absmax, as bitsandbytes starts (every code then means 0).
    exp_avg_ = make_state(local, at::kByte);
    exp_avg_sq_ = make_state(local, at::kByte);
    exp_avg_absmax_ = make_state(local / blockwise8::kBlock, at::kFloat);
    exp_avg_sq_absmax_ = make_state(local / blockwise8::kBlock, at::kFloat);
  } else {
    exp_avg_ = make_state(local, state_dtype);
    exp_avg_sq_ = make_state(local, state_dtype);
  }
  if (offload && !host_update) make_streamed();  // after the state: it streams those buffers
  if (offloaded()) offload_waited_ = ranges_.size();
  coef_ = at::ones({}, w.options().dtype(at::kFloat));
}

// Zeros for a state buffer: on the weights' device, or offloaded on the host.
at::Tensor AdamW::make_state(int64_t numel, at::ScalarType dtype) const {
  const at::Tensor& w = flat_->weights();
  return options_.offload == Offload::kCpu ? host_state_zeros(numel, dtype, w.device())
                                           : at::zeros({numel}, w.options().dtype(dtype));
}

int64_t AdamW::moment_bytes() const {
  int64_t n = exp_avg_.nbytes() + exp_avg_sq_.nbytes();
  if (moments_8bit()) n += exp_avg_absmax_.nbytes() + exp_avg_sq_absmax_.nbytes();
  return n;
}

flat::Moments8bit AdamW::moments8(int64_t local, int64_t numel) const {
  const int64_t b = blockwise8::kBlock;
  return {exp_avg_.narrow(0, local, numel), exp_avg_sq_.narrow(0, local, numel),
          exp_avg_absmax_.narrow(0, local / b, numel / b), exp_avg_sq_absmax_.narrow(0, local / b, numel / b)};
}

void AdamW::accumulate_gradients() {
  if (!master_weights_) return;
  if (offloaded()) wait_for_all_weights();  // the host update has copied and zeroed the last step's
  RECORD_USER_SCOPE("fptrain::optimizer_accumulate");  // names the work in a step profile (trainer/step_profiler.h)
  c10::NoGradGuard no_grad;
  flat_->collect_grads();
  if (!accum_.defined()) accum_ = at::zeros({flat_->layout().total()}, flat_->weights().options().dtype(at::kFloat));
  accumulate_buckets();
  accum_active_ = true;
  flat_->release_collected();
}

void AdamW::reduce_accumulated() {
  if (!master_weights_ || !dp_.comm) return;
  if (offloaded()) wait_for_all_weights();
  c10::NoGradGuard no_grad;
  if (!accum_.defined()) accum_ = at::zeros({flat_->layout().total()}, flat_->weights().options().dtype(at::kFloat));
  accum_active_ = true;
  for (const FlatBucket& b : flat_->layout().buckets())  // as GradReducer cuts the gradients
    accum_reductions_.push_back(reduce_bucket(*dp_.comm, accum_.narrow(0, b.offset, b.size), dp_.shard));
}

void AdamW::wait_for_accumulated() {
  for (auto& p : accum_reductions_) p.wait();
  accum_reductions_.clear();
}

// The fp32 sums of flat elements [flat, flat + numel), undefined when none.
at::Tensor AdamW::accumulated_slice(int64_t flat, int64_t numel) const {
  return accum_active_ ? accum_.narrow(0, flat, numel) : at::Tensor();
}

// Range r of the gradients (from its bucket, or the shard it was reduced into):
// undefined where no backward reached its bucket (zeros), unless `need`: then the
// bucket is made to exist (zeros).
at::Tensor AdamW::grads_of(const Range& r, bool need) {
  return flat_->gradients().slice(r.bucket, r.flat, r.numel, need);
}

// accum (fp32) += every bucket or shard that holds gradients; those = 0.
void AdamW::accumulate_buckets() {
  for (const flat::GradPiece& p : flat_->gradients().pieces())
    if (p.grads.defined()) flat::accumulate(accum_.narrow(0, p.offset, p.numel), p.grads);
}

at::Tensor AdamW::grad_norm(double max_norm) {
  RECORD_USER_SCOPE("fptrain::clip_grad_norm");
  c10::NoGradGuard no_grad;
  if (offloaded()) wait_for_all_weights();
  wait_for_accumulated();
  // With data parallelism the buffer was reduced during the backward: a gradient
  // that arrived elsewhere (assigned by hand) would have missed the reduction.
  if (flat_->collect_grads() > 0 && dp_.comm)
    throw std::logic_error("AdamW: a gradient bypassed the flat gradient buffer and was not reduced across ranks");
  at::Tensor norm = at::empty({}, coef_.options());  // fresh: the caller may hold it past the next step
  if (!dp_.shard) {
    // Bucket by bucket, summed in the one-buffer order (the same bits as one buffer).
    flat::grad_norm(flat_->gradients().pieces(), accum_active_ ? accum_ : at::Tensor(), max_norm, norm, coef_);
  } else {
    // Each rank holds the reduced gradients of its shard: the sum of squares of
    // every slice, all-reduced, then torch's clip coefficient from the norm.
    at::Tensor part = at::empty({}, coef_.options()), unused = at::empty({}, coef_.options());
    at::Tensor sum_sq = at::zeros({}, coef_.options());
    for (const Range& r : ranges_) {
      const std::vector<flat::GradPiece> slice{{grads_of(r, false), 0, r.numel}};
      flat::grad_norm(slice, accumulated_slice(r.flat, r.numel), 0.0, part, unused);
      sum_sq.add_(part * part);
    }
    dp_.comm->all_reduce_sum(sum_sq).wait();
    norm.copy_(sum_sq.sqrt());
    if (max_norm > 0) coef_.copy_((max_norm / (norm + 1e-6)).clamp_max(1.0));
  }
  coef_pending_ = max_norm > 0;
  return norm;
}

at::Tensor AdamW::clip_grad_norm(double max_norm) {
  at::Tensor norm = grad_norm(max_norm);
  if (!coef_pending_) return norm;
  c10::NoGradGuard no_grad;
  if (accum_active_) {
    accumulate_buckets();  // one fp32 gradient, then scaled
    accum_.mul_(coef_);
  } else {
    const at::Tensor c = coef_.to(flat_->dtype());
    for (const flat::GradPiece& p : flat_->gradients().pieces())
      if (p.grads.defined()) p.grads.mul_(c);
  }
  coef_pending_ = false;
  return norm;
}

void AdamW::step(double lr, distributed::CommClock* clock) {
  RECORD_USER_SCOPE("fptrain::optimizer_step");
  c10::NoGradGuard no_grad;
  if (offloaded()) wait_for_all_weights();
  wait_for_accumulated();
  flat_->collect_grads();
  ++steps_taken_;
  flat::AdamWHyper h;
  h.lr = lr;
  h.beta1 = options_.beta1;
  h.beta2 = options_.beta2;
  h.eps = options_.eps;
  h.weight_decay = options_.weight_decay;
  h.step = steps_taken_;
  const at::Tensor coef = coef_pending_ ? coef_ : at::Tensor();
  if (offloaded()) {  // the update reads the gradients later: not zero_grad(), which would zero them first
    clock_ = clock;
    if (offload_) launch_offloaded(h, coef);
    else launch_streamed(h, coef);
    // Lazy buckets go now (each copy or device update holds its bucket until it read it); a
    // resident buffer (and the fp32 sums) the worker or the update stream zeroes after.
    if (flat_->gradients().storage() == GradStorage::kLazy) flat_->zero_grads();
    accum_active_ = false;
    coef_pending_ = false;
    flat_->release_collected();
    return;
  }
  // Range by range (a bucket, or this rank's slice of it): the step is elementwise, so
  // this is the one-buffer step. With sharding each slice is all-gathered as soon as
  // it is updated, so that the gathers overlap the remaining updates (and, waited for
  // bucket by bucket, the next forward).
  if (dp_.shard) wait_for_all_weights();
  clock_ = clock;
  const auto& buckets = flat_->layout().buckets();
  for (const Range& r : ranges_) {
    auto slice = [&](const at::Tensor& t, int64_t at) { return t.defined() ? t.narrow(0, at, r.numel) : t; };
    const at::Tensor grads = grads_of(r, /*need=*/true);  // a bucket no backward reached: zeros
    if (moments_8bit())
      flat::adamw8bit_step(slice(flat_->weights(), r.flat), slice(master_, r.local), moments8(r.local, r.numel), grads,
                           accumulated_slice(r.flat, r.numel), coef, h);
    else
      flat::adamw_step(slice(flat_->weights(), r.flat), slice(master_, r.local), slice(exp_avg_, r.local),
                       slice(exp_avg_sq_, r.local), grads, accumulated_slice(r.flat, r.numel), coef, h);
    if (!dp_.shard) continue;
    const FlatBucket& b = buckets[r.bucket];
    gathers_.push_back({b.offset, dp_.comm->all_gather(flat_->weights().narrow(0, r.flat, r.numel),
                                                       flat_->weights().narrow(0, b.offset, b.size))});
  }
  zero_grad();
}

void AdamW::wait_for_weights(int64_t end) {
  if (offloaded()) wait_offloaded(end);
  if (gathers_.empty() || gathers_.front().begin >= end) return;
  if (clock_) clock_->before_wait();
  while (!gathers_.empty() && gathers_.front().begin < end) {
    gathers_.front().work.wait();
    gathers_.pop_front();
  }
  if (clock_) clock_->after_wait();
}

void AdamW::zero_grad() {
  c10::NoGradGuard no_grad;
  if (offloaded()) wait_for_all_weights();
  wait_for_accumulated();
  flat_->zero_grads();
  if (accum_active_) accum_.zero_();
  accum_active_ = false;
  coef_pending_ = false;
  flat_->release_collected();
}

void AdamW::all_gather_weights(const std::vector<size_t>& buckets) {
  std::vector<distributed::Pending> gathers;
  for (size_t b : buckets) {
    const Range& r = ranges_.at(b);
    const FlatBucket& fb = flat_->layout().buckets()[b];
    gathers.push_back(dp_.comm->all_gather(flat_->weights().narrow(0, r.flat, r.numel),
                                           flat_->weights().narrow(0, fb.offset, fb.size)));
  }
  for (auto& g : gathers) g.wait();
}

}  // namespace fptrain::optim
