#include "trainer/adamw.h"

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

}  // namespace

AdamW::AdamW(std::vector<std::string> names, std::vector<at::Tensor> params, const OptimizerSection& options)
    : names_(std::move(names)), params_(std::move(params)), options_(options) {
  if (names_.size() != params_.size() || params_.empty())
    throw std::invalid_argument("AdamW: expected one name per parameter and at least one parameter");
  const auto dtype = params_[0].scalar_type();
  for (const auto& p : params_)
    if (p.scalar_type() != dtype || p.device() != params_[0].device())
      throw std::invalid_argument("AdamW: all parameters must share one dtype and device");
  master_ = options.master_weights && dtype != at::kFloat;
  c10::NoGradGuard no_grad;
  for (const auto& p : params_) {
    at::Tensor w = master_ ? p.detach().to(at::kFloat).clone() : p.detach();
    weights_.push_back(w);
    exp_avg_.push_back(at::zeros_like(w));
    exp_avg_sq_.push_back(at::zeros_like(w));
  }
  step_tensor_ = at::zeros({}, weights_[0].options().dtype(at::kFloat));
}

void AdamW::accumulate_gradients() {
  if (!master_) return;
  c10::NoGradGuard no_grad;
  if (accumulators_.empty())
    for (const auto& w : weights_) accumulators_.push_back(at::zeros_like(w));
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& g = params_[i].grad();
    if (!g.defined()) continue;
    accumulators_[i].add_(g);
    params_[i].mutable_grad() = at::Tensor();
  }
}

void AdamW::gather_master_grads() {
  if (master_) accumulate_gradients();  // whatever backward left since the last call
  grads_.clear();
  grads_.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (master_) {
      grads_.push_back(accumulators_[i]);
      continue;
    }
    at::Tensor g = params_[i].grad();
    grads_.push_back(g.defined() ? g : at::zeros_like(weights_[i]));  // a parameter unused in this step
  }
}

at::Tensor AdamW::clip_grad_norm(double max_norm) {
  c10::NoGradGuard no_grad;
  gather_master_grads();
  std::vector<at::Tensor> norms = at::_foreach_norm(grads_, 2);
  at::Tensor total = at::linalg_vector_norm(at::stack(norms), 2).to(at::kFloat);
  if (max_norm > 0) {
    at::Tensor coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
    at::_foreach_mul_(grads_, coef.to(grads_[0].scalar_type()));
  }
  return total;
}

void AdamW::step(double lr) {
  c10::NoGradGuard no_grad;
  if (grads_.empty()) gather_master_grads();
  step_tensor_.add_(1);
  ++steps_taken_;
  std::vector<at::Tensor> steps(weights_.size(), step_tensor_);
  at::_fused_adamw_(weights_, grads_, exp_avg_, exp_avg_sq_, /*max_exp_avg_sqs=*/{}, steps, lr,
                    options_.beta1, options_.beta2, options_.weight_decay, options_.eps,
                    /*amsgrad=*/false, /*maximize=*/false);
  if (master_) {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].detach().copy_(weights_[i]);
    at::_foreach_zero_(accumulators_);
  }
  grads_.clear();
  zero_grad();
}

void AdamW::zero_grad() {
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
}

std::vector<std::pair<std::string, at::Tensor>> AdamW::state() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < names_.size(); ++i) {
    out.emplace_back("weight." + names_[i], weights_[i]);
    out.emplace_back("exp_avg." + names_[i], exp_avg_[i]);
    out.emplace_back("exp_avg_sq." + names_[i], exp_avg_sq_[i]);
  }
  return out;
}

void AdamW::load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps_taken,
                       const std::string& source) {
  std::unordered_map<std::string, at::Tensor> by_name(tensors.begin(), tensors.end());
  c10::NoGradGuard no_grad;
  // Keys are saved as "optimizer.<key>" (checkpoint_store): named that way in messages.
  auto restore = [&](const std::string& key, at::Tensor& dst) {
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
  for (size_t i = 0; i < names_.size(); ++i) {
    restore("weight." + names_[i], weights_[i]);
    restore("exp_avg." + names_[i], exp_avg_[i]);
    restore("exp_avg_sq." + names_[i], exp_avg_sq_[i]);
    if (master_) params_[i].detach().copy_(weights_[i]);
  }
  steps_taken_ = steps_taken;
  step_tensor_.fill_(static_cast<double>(steps_taken));
}

}  // namespace fptrain::trainer
