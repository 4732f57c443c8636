// Helpers shared by the decoder parity tests (tests/models, tests/models_gpu):
// packing examples into one PackedInput, reading the golden files that
// make_fixtures.py writes, and relative errors.
#pragma once

#include "models/causal_lm.h"
#include "models/checkpoint.h"
#include "models/model_config.h"
#include "models/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace fptrain::models::testing {

struct Example {
  at::Tensor input_ids;  // int64 [L], CPU
  at::Tensor labels;     // int64 [L], CPU, unshifted, -100 = ignored
};

struct Packed {
  PackedInput input;
  at::Tensor labels;
};

// Concatenates examples with positions restarting at 0, as the batcher does.
inline Packed pack(const std::vector<Example>& examples, at::Device device) {
  std::vector<at::Tensor> ids, labels, positions;
  std::vector<int32_t> cu{0};
  int64_t max_len = 0;
  for (const Example& e : examples) {
    const int64_t len = e.input_ids.size(0);
    ids.push_back(e.input_ids);
    labels.push_back(e.labels);
    positions.push_back(at::arange(len, at::kLong));
    cu.push_back(cu.back() + static_cast<int32_t>(len));
    max_len = std::max(max_len, len);
  }
  Packed p;
  p.input.input_ids = at::cat(ids).to(device);
  p.input.position_ids = at::cat(positions).to(device);
  p.input.cu_seqlens_cpu = at::tensor(cu, at::kInt);
  p.input.cu_seqlens = p.input.cu_seqlens_cpu.to(device);
  p.input.max_seqlen = max_len;
  p.labels = at::cat(labels).to(device);
  return p;
}

// ||got - want|| / ||want||, in fp64; 0 when both are zero, inf when only want is.
inline double rel_err(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.detach().to(at::kCPU).to(at::kDouble);
  const at::Tensor w = want.detach().to(at::kCPU).to(at::kDouble);
  const double diff = (g - w).norm().item<double>(), ref = w.norm().item<double>();
  if (ref == 0.0) return diff == 0.0 ? 0.0 : INFINITY;
  return diff / ref;
}

inline std::filesystem::path fixture_dir(const std::string& area_dir) {
  const std::filesystem::path dir(area_dir);
  if (!std::filesystem::exists(dir)) {
    throw std::runtime_error("fixture folder " + dir.string() +
                             " is missing; ctest makes it first with make_fixtures.py");
  }
  return dir;
}

// The golden outputs of one model: per example its input, logits, summed loss
// and the gradient of every parameter, as transformers computed them.
class Golden {
 public:
  explicit Golden(const std::filesystem::path& file) : tensors_(read_safetensors(file)), file_(file) {
    while (tensors_.count(key(num_examples_, "input_ids"))) ++num_examples_;
    if (num_examples_ == 0) throw std::runtime_error(file.string() + ": no examples");
  }
  int num_examples() const { return num_examples_; }
  Example example(int i) const { return {get(key(i, "input_ids")), get(key(i, "labels"))}; }
  at::Tensor logits(int i) const { return get(key(i, "logits")); }
  at::Tensor loss_sum(int i) const { return get(key(i, "loss_sum")); }
  at::Tensor grad(int i, const std::string& param) const { return get(key(i, "grad." + param)); }
  at::Tensor rope_inv_freq() const { return get("rope.inv_freq"); }
  // Gradient of the loss summed over all examples (tests/models_gpu fixtures).
  at::Tensor grad_sum(const std::string& param) const { return get("grad_sum." + param); }
  // All examples in one row (transformers found the boundaries from the positions).
  at::Tensor pack_position_ids() const { return get("pack.position_ids"); }
  at::Tensor pack_logits() const { return get("pack.logits"); }
  at::Tensor pack_loss_sum() const { return get("pack.loss_sum"); }
  at::Tensor pack_grad(const std::string& param) const { return get("pack.grad." + param); }
  std::vector<Example> examples() const {
    std::vector<Example> out;
    for (int i = 0; i < num_examples_; ++i) out.push_back(example(i));
    return out;
  }

 private:
  static std::string key(int i, const std::string& what) {
    return "example." + std::to_string(i) + "." + what;
  }
  at::Tensor get(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::runtime_error(file_.string() + ": no tensor '" + name + "'");
    return it->second;
  }
  TensorMap tensors_;
  std::filesystem::path file_;
  int num_examples_ = 0;
};

// Loads a checkpoint folder as trainable parameters.
inline CausalLM load_model(const std::filesystem::path& dir, at::ScalarType dtype, at::Device device,
                           attention::Backend backend) {
  ModelConfig config = load_model_config(dir / "config.json");
  TensorMap params = load_pretrained_weights(dir, config, dtype, device);
  for (auto& [name, p] : params) p.requires_grad_(true);
  return CausalLM(std::move(config), std::move(params), backend);
}

// RMSNorm entirely in fp64 (the model's ops compute in fp32 even for fp64 inputs, as
// transformers does): {x, w} -> {normed}, or with a residual {x, update, w} -> {x + scale update,
// normed sum} (scale != 0), as the fused norms' tests compare them.
inline std::vector<at::Tensor> exact_rms_norm(const std::vector<at::Tensor>& in, double scale, double eps) {
  auto norm = [eps](const at::Tensor& s, const at::Tensor& w) {
    return w * (s * at::rsqrt(s.pow(2).mean(-1, /*keepdim=*/true) + eps));
  };
  if (scale == 0) return {norm(in[0], in[1])};
  const at::Tensor sum = in[0] + in[1] * scale;
  return {sum, norm(sum, in[2])};
}

inline void zero_grads(CausalLM& model) {
  for (auto& [name, p] : model.parameters()) p.mutable_grad() = at::Tensor();
}

// Gradients by parameter name (zeros where autograd left none).
inline TensorMap grads_of(const CausalLM& model) {
  TensorMap out;
  for (const auto& [name, p] : model.parameters()) {
    out[name] = p.grad().defined() ? p.grad().detach().clone() : at::zeros_like(p).detach();
  }
  return out;
}

// The parameters that require grad, by name: what trains (activation checkpointing's runners).
inline std::vector<std::pair<std::string, at::Tensor>> trained_parameters(const CausalLM& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, p] : model.parameters())
    if (p.requires_grad()) out.emplace_back(name, p);
  return out;
}

}  // namespace fptrain::models::testing
