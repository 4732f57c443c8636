#include "models/lora_adapter.h"

#include "common/strings.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>
#include <stdexcept>

namespace fptrain::models {
namespace {

// PEFT's check for a listed name (peft.tuners.tuners_utils.check_target_module_exists).
bool matches(const std::string& module, const std::string& target) {
  return module == target || common::ends_with(module, "." + target);
}

std::string short_name(const std::string& module) { return module.substr(module.rfind('.') + 1); }

std::string join(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

std::string lora_a_name(const std::string& module) { return "base_model.model." + module + ".lora_A.weight"; }
std::string lora_b_name(const std::string& module) { return "base_model.model." + module + ".lora_B.weight"; }

std::vector<Projection> select_lora_targets(const LoraSettings& s, const std::vector<Projection>& projections) {
  std::set<std::string> valid;
  for (const Projection& p : projections) valid.insert(short_name(p.module));
  const bool all = std::find(s.target_modules.begin(), s.target_modules.end(), "all-linear") != s.target_modules.end();
  std::vector<Projection> out;
  if (!s.target_regex.empty()) {
    const std::regex re(s.target_regex);
    for (const Projection& p : projections)
      if (std::regex_match(p.module, re)) out.push_back(p);
  } else {
    for (const std::string& t : s.target_modules) {
      if (t == "all-linear") continue;
      const bool found = std::any_of(projections.begin(), projections.end(),
                                     [&](const Projection& p) { return matches(p.module, t); });
      if (!found)
        throw std::invalid_argument("adapter target module '" + t + "' is not a projection of this model; its " +
                                    "projections are " + join(valid) + " (or all-linear)");
    }
    for (const Projection& p : projections) {
      const bool hit = all || std::any_of(s.target_modules.begin(), s.target_modules.end(),
                                          [&](const std::string& t) { return matches(p.module, t); });
      if (hit) out.push_back(p);
    }
  }
  if (out.empty())
    throw std::invalid_argument("the adapter targets no projection of this model (target_modules " +
                                (s.target_regex.empty() ? std::string("empty") : "'" + s.target_regex + "'") +
                                "); its projections are " + join(valid));
  return out;
}

LoraAdapter::LoraAdapter(LoraSettings settings, const std::vector<Projection>& targets, TensorMap tensors,
                         int64_t num_slots)
    : settings_(std::move(settings)), tensors_(std::move(tensors)), weights_(static_cast<size_t>(num_slots)) {
  if (settings_.r <= 0) throw std::invalid_argument("LoRA rank r must be positive");
  std::vector<std::string> problems;
  auto take = [&](const std::string& name, std::vector<int64_t> shape) -> at::Tensor {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      problems.push_back("missing '" + name + "'");
      return {};
    }
    if (it->second.sizes() != at::IntArrayRef(shape)) {
      problems.push_back("'" + name + "' has shape " + c10::str(it->second.sizes()) + ", expected " +
                         c10::str(at::IntArrayRef(shape)));
      return {};
    }
    names_.push_back(name);
    return it->second;
  };
  for (const Projection& p : targets) {
    const int64_t out = p.weight->size(0), in = p.weight->size(1);
    LoraWeights w{take(lora_a_name(p.module), {settings_.r, in}), take(lora_b_name(p.module), {out, settings_.r})};
    if (p.slot < 0 || p.slot >= num_slots) throw std::logic_error("LoraAdapter: projection slot out of range");
    weights_[static_cast<size_t>(p.slot)] = w;
    modules_.push_back(p.module);
  }
  const std::set<std::string> used(names_.begin(), names_.end());
  for (const auto& [name, t] : tensors_) {
    if (used.count(name)) continue;
    const bool lora = common::ends_with(name, ".lora_A.weight") || common::ends_with(name, ".lora_B.weight");
    problems.push_back("unexpected '" + name + "' (" +
                       (lora ? "not a targeted projection of this model" : "fptrain adapts projections with lora_A and lora_B only") +
                       ")");
  }
  if (problems.empty()) {
    const at::ScalarType dtype = tensors_.begin()->second.scalar_type();
    for (const auto& [name, t] : tensors_)
      if (!at::isFloatingType(t.scalar_type()) || t.scalar_type() != dtype)
        problems.push_back("'" + name + "' is " + c10::toString(t.scalar_type()) + "; the adapter's tensors must share one floating dtype");
  }
  if (problems.empty()) return;
  std::string msg = "the LoRA adapter does not fit the model";
  for (const auto& p : problems) msg += "\n  " + p;
  throw std::invalid_argument(msg);
}

const LoraWeights* LoraAdapter::weights(int64_t slot) const {
  if (slot < 0 || slot >= static_cast<int64_t>(weights_.size())) return nullptr;
  const auto& w = weights_[static_cast<size_t>(slot)];
  return w ? &*w : nullptr;
}

std::vector<std::string> LoraAdapter::target_module_names() const {
  std::set<std::string> names;
  for (const auto& m : modules_) names.insert(short_name(m));
  return {names.begin(), names.end()};
}

std::unique_ptr<LoraAdapter> init_lora_adapter(const LoraSettings& settings, const std::vector<Projection>& projections,
                                               at::ScalarType dtype, const at::Device& device, uint64_t seed) {
  const std::vector<Projection> targets = select_lora_targets(settings, projections);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  TensorMap tensors;
  for (const Projection& p : targets) {
    const int64_t out = p.weight->size(0), in = p.weight->size(1);
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));  // kaiming_uniform_(a=sqrt(5))
    at::Tensor a = at::empty({settings.r, in}, at::kFloat).uniform_(-bound, bound, gen);
    tensors[lora_a_name(p.module)] = a.to(device, dtype);
    tensors[lora_b_name(p.module)] = at::zeros({out, settings.r}, at::TensorOptions().dtype(dtype).device(device));
  }
  return std::make_unique<LoraAdapter>(settings, targets, std::move(tensors), static_cast<int64_t>(projections.size()));
}

TensorMap merge_lora(const TensorMap& base, const LoraAdapter& adapter) {
  TensorMap out = base;
  const double scale = adapter.settings().scale();
  for (const std::string& module : adapter.modules()) {
    const std::string name = module + ".weight";
    const at::Tensor& w = base.at(name);
    const at::Tensor a = adapter.tensors().at(lora_a_name(module)).to(at::kFloat);
    const at::Tensor b = adapter.tensors().at(lora_b_name(module)).to(at::kFloat);
    out[name] = at::addmm(w.to(at::kFloat), b, a, /*beta=*/1, /*alpha=*/scale).to(w.scalar_type());
  }
  return out;
}

}  // namespace fptrain::models
