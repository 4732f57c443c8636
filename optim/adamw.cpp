#include "optim/adamw.h"

#include "optim/grad_reducer.h"

#include "optim/flat_adamw.h"

#include <ATen/record_function.h>
#include <c10/core/GradMode.h>

#include <stdexcept>
#include <unordered_map>

namespace fptrain::optim {
namespace {

std::string describe(const at::Tensor& t) {
  std::string s = std::string(c10::toString(t.scalar_type())) + "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

FlatLayout make_layout(const std::vector<std::string>& names, const std::vector<at::Tensor>& params,
                       int64_t alignment, const DataParallelSpec& dp) {
  if (names.size() != params.size() || params.empty())
    throw std::invalid_argument("AdamW: expected one name per parameter and at least one parameter");
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (size_t i = 0; i < names.size(); ++i) shapes.emplace_back(names[i], params[i].sizes().vec());
  const int64_t shards = dp.comm && dp.shard ? dp.comm->world_size() : 1;
  return FlatLayout(shapes, alignment, shards, dp.comm ? dp.bucket_elements : 0);
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
  FlatLayout layout = make_layout(names_, params, alignment, dp_);
  flat_ = std::make_unique<FlatParameters>(std::move(layout), std::move(params));
  master_weights_ = options.master_weights && dtype != at::kFloat;
  c10::NoGradGuard no_grad;
  const at::Tensor& w = flat_->weights();
  const FlatLayout& l = flat_->layout();
  if (dp_.shard) {
    for (const ShardRange& r : l.shard_ranges(dp_.comm->rank())) ranges_.push_back({r.bucket, r.flat_offset, r.local_offset, r.numel});
  } else {
    ranges_.push_back({0, 0, 0, l.total()});
  }
  const int64_t local = dp_.shard ? l.shard_size() : l.total();
  const auto state_options = w.options().dtype(master_weights_ ? at::kFloat : w.scalar_type());
  if (master_weights_ && options.split_masters && dtype == at::kBFloat16) {
    master_ = at::zeros({local}, w.options().dtype(at::kShort));  // a bf16 weight is its own master: remainder 0
  } else if (master_weights_) {
    master_ = at::empty({local}, state_options);
    for (const Range& r : ranges_) master_.narrow(0, r.local, r.numel).copy_(w.narrow(0, r.flat, r.numel));
  }
  exp_avg_ = at::zeros({local}, state_options);
  exp_avg_sq_ = at::zeros({local}, state_options);
  coef_ = at::ones({}, w.options().dtype(at::kFloat));
}

void AdamW::accumulate_gradients() {
  if (!master_weights_) return;
  RECORD_USER_SCOPE("fptrain::optimizer_accumulate");  // names the work in a step profile (trainer/step_profiler.h)
  c10::NoGradGuard no_grad;
  flat_->collect_grads();
  if (!accum_.defined()) accum_ = at::zeros({flat_->layout().total()}, flat_->weights().options().dtype(at::kFloat));
  flat::accumulate(accum_, flat_->grads());
  accum_active_ = true;
  flat_->release_collected();
}

void AdamW::reduce_accumulated() {
  if (!master_weights_ || !dp_.comm) return;
  c10::NoGradGuard no_grad;
  if (!accum_.defined()) accum_ = at::zeros({flat_->layout().total()}, flat_->weights().options().dtype(at::kFloat));
  accum_active_ = true;
  for (size_t b = 0; b < flat_->layout().buckets().size(); ++b)  // as GradReducer cuts the gradients
    accum_reductions_.push_back(reduce_bucket(*dp_.comm, flat_->layout(), accum_, b, dp_.shard));
}

void AdamW::wait_for_accumulated() {
  for (auto& p : accum_reductions_) p.wait();
  accum_reductions_.clear();
}

// The fp32 sums of flat elements [flat, flat + numel), undefined when none.
at::Tensor AdamW::accumulated_slice(int64_t flat, int64_t numel) const {
  return accum_active_ ? accum_.narrow(0, flat, numel) : at::Tensor();
}

at::Tensor AdamW::grad_norm(double max_norm) {
  RECORD_USER_SCOPE("fptrain::clip_grad_norm");
  c10::NoGradGuard no_grad;
  wait_for_accumulated();
  // With data parallelism the buffer was reduced during the backward: a gradient
  // that arrived elsewhere (assigned by hand) would have missed the reduction.
  if (flat_->collect_grads() > 0 && dp_.comm)
    throw std::logic_error("AdamW: a gradient bypassed the flat gradient buffer and was not reduced across ranks");
  at::Tensor norm = at::empty({}, coef_.options());  // fresh: the caller may hold it past the next step
  if (!dp_.shard) {
    flat::grad_norm(flat_->grads(), accum_active_ ? accum_ : at::Tensor(), max_norm, norm, coef_);
  } else {
    // Each rank holds the reduced gradients of its shard: the sum of squares of
    // every slice, all-reduced, then torch's clip coefficient from the norm.
    at::Tensor part = at::empty({}, coef_.options()), unused = at::empty({}, coef_.options());
    at::Tensor sum_sq = at::zeros({}, coef_.options());
    for (const Range& r : ranges_) {
      flat::grad_norm(flat_->grads().narrow(0, r.flat, r.numel), accumulated_slice(r.flat, r.numel), 0.0, part,
                      unused);
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
    flat::accumulate(accum_, flat_->grads());  // one fp32 gradient, then scaled
    accum_.mul_(coef_);
  } else {
    flat_->grads().mul_(coef_.to(flat_->dtype()));
  }
  coef_pending_ = false;
  return norm;
}

void AdamW::step(double lr, distributed::CommClock* clock) {
  RECORD_USER_SCOPE("fptrain::optimizer_step");
  c10::NoGradGuard no_grad;
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
  if (!dp_.shard) {
    flat::adamw_step(flat_->weights(), master_, exp_avg_, exp_avg_sq_, flat_->grads(),
                     accum_active_ ? accum_ : at::Tensor(), coef_pending_ ? coef_ : at::Tensor(), h);
  } else {
    // Slice by slice (one per bucket), each all-gathered as soon as it is
    // updated, so that the gathers overlap the remaining updates (and, waited
    // for bucket by bucket, the next forward).
    wait_for_all_weights();
    clock_ = clock;
    const auto& buckets = flat_->layout().buckets();
    for (const Range& r : ranges_) {
      auto slice = [&](const at::Tensor& t, int64_t at) { return t.defined() ? t.narrow(0, at, r.numel) : t; };
      flat::adamw_step(slice(flat_->weights(), r.flat), slice(master_, r.local), slice(exp_avg_, r.local),
                       slice(exp_avg_sq_, r.local), slice(flat_->grads(), r.flat), accumulated_slice(r.flat, r.numel),
                       coef_pending_ ? coef_ : at::Tensor(), h);
      const FlatBucket& b = buckets[r.bucket];
      gathers_.push_back({b.offset, dp_.comm->all_gather(flat_->weights().narrow(0, r.flat, r.numel),
                                                         flat_->weights().narrow(0, b.offset, b.size))});
    }
  }
  zero_grad();
}

void AdamW::wait_for_weights(int64_t end) {
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
  wait_for_accumulated();
  flat_->zero_grads();
  if (accum_active_) accum_.zero_();
  accum_active_ = false;
  coef_pending_ = false;
  flat_->release_collected();
}

std::vector<std::pair<std::string, at::Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  const FlatLayout& l = flat_->layout();
  const at::Tensor& weights = master_weights_ ? master_ : flat_->weights();
  // Split masters are saved as the fp32 masters they are (a new tensor per parameter, on the CPU).
  auto joined = [&](int64_t flat, int64_t local, int64_t numel) {
    return flat::join_masters(flat_->weights().narrow(0, flat, numel).cpu(), master_.narrow(0, local, numel).cpu());
  };
  if (!dp_.shard) {
    for (size_t i = 0; i < names_.size(); ++i) {
      const FlatSegment& s = l.segments()[i];
      out.emplace_back("weight." + names_[i], split_masters() ? joined(s.offset, s.offset, s.numel).view(s.shape)
                                                              : flat_->segment(weights, i));
      out.emplace_back("exp_avg." + names_[i], flat_->segment(exp_avg_, i));
      out.emplace_back("exp_avg_sq." + names_[i], flat_->segment(exp_avg_sq_, i));
    }
    return out;
  }
  for (const ShardPiece& p : l.shard_pieces(dp_.comm->rank())) {
    const FlatSegment& s = l.segments()[p.segment];
    const bool whole = p.segment_offset == 0 && p.numel == s.numel;
    const std::string key = names_[p.segment] + (whole ? "" : "@" + std::to_string(p.segment_offset));
    auto piece = [&](const at::Tensor& t, int64_t at) {
      const at::Tensor v = t.narrow(0, at, p.numel);
      return whole ? v.view(s.shape) : v;
    };
    // Without master weights the weights are the model's, at their flat place.
    at::Tensor weight = split_masters()   ? joined(p.flat_offset, p.local_offset, p.numel)
                        : master_weights_ ? piece(master_, p.local_offset)
                                          : piece(flat_->weights(), p.flat_offset);
    if (split_masters() && whole) weight = weight.view(s.shape);
    out.emplace_back("weight." + key, weight);
    out.emplace_back("exp_avg." + key, piece(exp_avg_, p.local_offset));
    out.emplace_back("exp_avg_sq." + key, piece(exp_avg_sq_, p.local_offset));
  }
  return out;
}

void AdamW::load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps_taken,
                       const std::string& source) {
  // Index the saved pieces: "<kind>.<name>[@<first>]" -> (first element, flattened tensor).
  struct Saved {
    int64_t first;
    at::Tensor flat;
  };
  std::unordered_map<std::string, std::vector<Saved>> saved;
  for (const auto& [key, t] : tensors) {
    const size_t at = key.rfind('@');
    int64_t first = 0;
    std::string base = key;
    if (at != std::string::npos && key.find_first_not_of("0123456789", at + 1) == std::string::npos && at + 1 < key.size()) {
      first = std::stoll(key.substr(at + 1));
      base = key.substr(0, at);
    }
    saved[base].push_back({first, t.reshape({-1})});
  }
  c10::NoGradGuard no_grad;
  const FlatLayout& l = flat_->layout();
  // Copies elements [first, first + n) of the named parameter's state into dst.
  auto restore = [&](const std::string& key, const FlatSegment& seg, int64_t first, const at::Tensor& dst) {
    const int64_t n = dst.numel();
    auto it = saved.find(key);
    if (it == saved.end())
      throw std::runtime_error(source + ": missing tensor 'optimizer." + key + "' (" + std::to_string(tensors.size()) +
                               " optimizer tensors present): the checkpoint is incomplete or was written for "
                               "another model");
    int64_t covered = 0;
    for (const Saved& p : it->second) {
      if (p.flat.scalar_type() != dst.scalar_type() || p.first < 0 || p.first + p.flat.numel() > seg.numel)
        throw std::runtime_error(source + ": tensor 'optimizer." + key + "' does not match the model's parameter (" +
                                 describe(p.flat) + " at element " + std::to_string(p.first) + " vs " +
                                 std::string(c10::toString(dst.scalar_type())) + "[" + std::to_string(seg.numel) +
                                 "]): the checkpoint was written for another model or configuration");
      const int64_t lo = std::max(first, p.first), hi = std::min(first + n, p.first + p.flat.numel());
      if (lo >= hi) continue;
      dst.narrow(0, lo - first, hi - lo).copy_(p.flat.narrow(0, lo - p.first, hi - lo));
      covered += hi - lo;
    }
    if (covered != n)
      throw std::runtime_error(source + ": the optimizer state of '" + key + "' covers " + std::to_string(covered) +
                               " of the " + std::to_string(n) + " elements this rank needs: shard files are missing");
  };
  const at::Tensor& weights = master_weights_ ? master_ : flat_->weights();
  const std::vector<ShardPiece> pieces =
      dp_.shard ? l.shard_pieces(dp_.comm->rank()) : [&] {
        std::vector<ShardPiece> all;
        for (size_t i = 0; i < l.segments().size(); ++i) {
          const FlatSegment& s = l.segments()[i];
          all.push_back({i, 0, s.offset, s.numel, s.offset});
        }
        return all;
      }();
  for (const ShardPiece& p : pieces) {
    const FlatSegment& s = l.segments()[p.segment];
    if (p.numel == 0) continue;
    if (split_masters()) {  // the saved fp32 masters, split into the model's weights and the remainders
      const at::Tensor m = at::empty({p.numel}, master_.options().dtype(at::kFloat));
      restore("weight." + names_[p.segment], s, p.segment_offset, m);
      flat::split_masters(m, flat_->weights().narrow(0, p.flat_offset, p.numel),
                          master_.narrow(0, p.local_offset, p.numel));
    } else {
      const at::Tensor w = master_weights_ ? weights.narrow(0, p.local_offset, p.numel)
                                           : flat_->weights().narrow(0, p.flat_offset, p.numel);
      restore("weight." + names_[p.segment], s, p.segment_offset, w);
    }
    restore("exp_avg." + names_[p.segment], s, p.segment_offset, exp_avg_.narrow(0, p.local_offset, p.numel));
    restore("exp_avg_sq." + names_[p.segment], s, p.segment_offset, exp_avg_sq_.narrow(0, p.local_offset, p.numel));
  }
  // The model: the masters, rounded (every rank's slices, then gathered).
  if (master_weights_) {
    if (!split_masters())
      for (const Range& r : ranges_)
        flat::copy_masters_to_model(master_.narrow(0, r.local, r.numel), flat_->weights().narrow(0, r.flat, r.numel));
    if (dp_.shard) {
      std::vector<size_t> all;
      for (const Range& r : ranges_) all.push_back(r.bucket);
      all_gather_weights(all);
    }
  }
  steps_taken_ = steps_taken;
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
