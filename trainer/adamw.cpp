#include "trainer/adamw.h"

#include "trainer/flat_adamw.h"

#include <c10/core/GradMode.h>

#include <stdexcept>
#include <unordered_map>

namespace fptrain::trainer {
namespace {

std::string describe(const at::Tensor& t) {
  std::string s = std::string(c10::toString(t.scalar_type())) + "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

FlatLayout make_layout(const std::vector<std::string>& names, const std::vector<at::Tensor>& params,
                       int64_t alignment) {
  if (names.size() != params.size() || params.empty())
    throw std::invalid_argument("AdamW: expected one name per parameter and at least one parameter");
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (size_t i = 0; i < names.size(); ++i) shapes.emplace_back(names[i], params[i].sizes().vec());
  return FlatLayout(shapes, alignment, /*shards=*/1);
}

}  // namespace

AdamW::AdamW(std::vector<std::string> names, std::vector<at::Tensor> params, const OptimizerSection& options,
             int64_t alignment)
    : names_(std::move(names)), options_(options) {
  const auto dtype = params.empty() ? at::kFloat : params[0].scalar_type();
  for (const auto& p : params)
    if (p.scalar_type() != dtype || p.device() != params[0].device())
      throw std::invalid_argument("AdamW: all parameters must share one dtype and device");
  FlatLayout layout = make_layout(names_, params, alignment);
  flat_ = std::make_unique<FlatParameters>(std::move(layout), std::move(params));
  master_weights_ = options.master_weights && dtype != at::kFloat;
  c10::NoGradGuard no_grad;
  const at::Tensor& w = flat_->weights();
  if (master_weights_) master_ = w.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  exp_avg_ = at::zeros_like(master_weights_ ? master_ : w);
  exp_avg_sq_ = at::zeros_like(master_weights_ ? master_ : w);
  coef_ = at::ones({}, w.options().dtype(at::kFloat));
}

void AdamW::accumulate_gradients() {
  if (!master_weights_) return;
  c10::NoGradGuard no_grad;
  flat_->collect_grads();
  if (!accum_.defined()) accum_ = at::zeros({flat_->layout().total()}, flat_->weights().options().dtype(at::kFloat));
  flat::accumulate(accum_, flat_->grads());
  accum_active_ = true;
  flat_->release_collected();
}

at::Tensor AdamW::grad_norm(double max_norm) {
  c10::NoGradGuard no_grad;
  flat_->collect_grads();
  at::Tensor norm = at::empty({}, coef_.options());  // fresh: the caller may hold it past the next step
  flat::grad_norm(flat_->grads(), accum_active_ ? accum_ : at::Tensor(), max_norm, norm, coef_);
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

void AdamW::step(double lr) {
  c10::NoGradGuard no_grad;
  flat_->collect_grads();
  ++steps_taken_;
  flat::AdamWHyper h;
  h.lr = lr;
  h.beta1 = options_.beta1;
  h.beta2 = options_.beta2;
  h.eps = options_.eps;
  h.weight_decay = options_.weight_decay;
  h.step = steps_taken_;
  flat::adamw_step(flat_->weights(), master_, exp_avg_, exp_avg_sq_, flat_->grads(),
                   accum_active_ ? accum_ : at::Tensor(), coef_pending_ ? coef_ : at::Tensor(), h);
  zero_grad();
}

void AdamW::zero_grad() {
  c10::NoGradGuard no_grad;
  flat_->zero_grads();
  if (accum_active_) accum_.zero_();
  accum_active_ = false;
  coef_pending_ = false;
  flat_->release_collected();
}

std::vector<std::pair<std::string, at::Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  const at::Tensor& weights = master_weights_ ? master_ : flat_->weights();
  for (size_t i = 0; i < names_.size(); ++i) {
    out.emplace_back("weight." + names_[i], flat_->segment(weights, i));
    out.emplace_back("exp_avg." + names_[i], flat_->segment(exp_avg_, i));
    out.emplace_back("exp_avg_sq." + names_[i], flat_->segment(exp_avg_sq_, i));
  }
  return out;
}

void AdamW::load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps_taken,
                       const std::string& source) {
  std::unordered_map<std::string, at::Tensor> by_name(tensors.begin(), tensors.end());
  c10::NoGradGuard no_grad;
  // Keys are saved as "optimizer.<key>" (checkpoint_store): named that way in messages.
  auto restore = [&](const std::string& key, const at::Tensor& dst) {
    auto it = by_name.find(key);
    if (it == by_name.end())
      throw std::runtime_error(source + ": missing tensor 'optimizer." + key + "' (" + std::to_string(tensors.size()) +
                               " optimizer tensors present, " + std::to_string(3 * names_.size()) +
                               " expected): the checkpoint is incomplete or was written for another model");
    if (it->second.sizes() != dst.sizes() || it->second.scalar_type() != dst.scalar_type())
      throw std::runtime_error(source + ": tensor 'optimizer." + key + "' does not match the model's parameter (" +
                               describe(it->second) + " vs " + describe(dst) +
                               "): the checkpoint was written for another model or configuration");
    dst.copy_(it->second);
  };
  const at::Tensor& weights = master_weights_ ? master_ : flat_->weights();
  for (size_t i = 0; i < names_.size(); ++i) {
    restore("weight." + names_[i], flat_->segment(weights, i));
    restore("exp_avg." + names_[i], flat_->segment(exp_avg_, i));
    restore("exp_avg_sq." + names_[i], flat_->segment(exp_avg_sq_, i));
  }
  if (master_weights_) flat_->weights().copy_(master_);  // the model: the masters, rounded
  steps_taken_ = steps_taken;
}

}  // namespace fptrain::trainer
