// bf16 parity on a device: our decoder against an fp64 transformers reference,
// judged by transformers' own bf16 error against the same reference.
#pragma once

#include "tests/models/model_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace fptrain::models::testing {

// Ours may be at most this many times further from the reference than
// transformers' own bf16 run. Errors below a tenth of bf16's epsilon (2^-8) are
// under the type's resolution and always accepted: summed losses can land
// that close to the reference by luck, which would make a pure ratio flaky.
inline constexpr double kMaxErrorRatio = 2.0;
inline constexpr double kErrorFloor = 0.1 / 256;

struct Bf16Errors {
  double logits = 0, loss = 0, grads_all = 0;  // relative errors vs the reference
  double worst_grad_ratio = 0;                  // max over parameters of ours / transformers'
  std::string worst_grad_name;
};

inline at::Tensor flat_grads(const std::vector<std::string>& names,
                             const std::function<at::Tensor(const std::string&)>& grad) {
  std::vector<at::Tensor> parts;
  for (const auto& n : names) parts.push_back(grad(n).to(at::kCPU).to(at::kDouble).flatten());
  return at::cat(parts);
}

inline void expect_within(double ours, double theirs, const std::string& what) {
  EXPECT_LE(ours, kMaxErrorRatio * theirs + kErrorFloor)
      << what << ": ours " << ours << " vs transformers bf16 " << theirs;
}

// Runs the golden examples through `model` (bf16 on `device`) one by one
// (packed = false) or as one pack, and checks logits, loss and every gradient.
inline Bf16Errors check_bf16_parity(CausalLM& model, const Golden& ref, const Golden& hf, bool packed,
                                    const std::string& label) {
  const at::Device device = model.parameters().begin()->second.device();
  const std::vector<Example> examples = ref.examples();
  zero_grads(model);
  std::vector<at::Tensor> logits;
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  std::vector<at::Tensor> losses;
  if (packed) {
    const Packed p = pack(examples, device);
    const LossOutput loss = model.loss(p.input, p.labels);
    loss.loss_sum.backward();
    loss_sum = loss.loss_sum.detach();
    logits.push_back(model.logits(p.input).detach());
  } else {
    for (const Example& e : examples) {
      const Packed p = pack({e}, device);
      const LossOutput loss = model.loss(p.input, p.labels);
      loss.loss_sum.backward();  // gradients accumulate over the examples
      losses.push_back(loss.loss_sum.detach().reshape({1}));
      logits.push_back(model.logits(p.input).detach());
    }
  }

  std::vector<at::Tensor> ref_logits, hf_logits, ref_losses, hf_losses;
  for (int i = 0; i < ref.num_examples(); ++i) {
    ref_logits.push_back(ref.logits(i));
    hf_logits.push_back(hf.logits(i));
    ref_losses.push_back(ref.loss_sum(i).reshape({1}));
    hf_losses.push_back(hf.loss_sum(i).reshape({1}));
  }
  const at::Tensor ref_l = at::cat(ref_logits), hf_l = at::cat(hf_logits);
  const at::Tensor ref_loss = at::cat(ref_losses), hf_loss = at::cat(hf_losses);

  Bf16Errors e;
  const double hf_logits_err = rel_err(hf_l, ref_l);
  e.logits = rel_err(at::cat(logits), ref_l);
  expect_within(e.logits, hf_logits_err, label + " logits");
  // Packed runs give one loss for all examples; compare sums then.
  const double hf_loss_err = packed ? rel_err(hf_loss.sum(), ref_loss.sum()) : rel_err(hf_loss, ref_loss);
  e.loss = packed ? rel_err(loss_sum, ref_loss.sum()) : rel_err(at::cat(losses), ref_loss);
  expect_within(e.loss, hf_loss_err, label + " loss");

  std::vector<std::string> names;
  double hf_worst = 0;
  for (const auto& [name, p] : model.parameters()) {
    names.push_back(name);
    if (!p.grad().defined()) {
      ADD_FAILURE() << label << ": no gradient for " << name;
      continue;
    }
    const double ours = rel_err(p.grad(), ref.grad_sum(name));
    const double theirs = rel_err(hf.grad_sum(name), ref.grad_sum(name));
    expect_within(ours, theirs, label + " gradient of " + name);
    const double ratio = ours / std::max(theirs, 1e-30);
    if (ratio > e.worst_grad_ratio) e.worst_grad_ratio = ratio, e.worst_grad_name = name;
    hf_worst = std::max(hf_worst, theirs);
  }
  const auto& params = model.parameters();
  const at::Tensor ref_all = flat_grads(names, [&](const std::string& n) { return ref.grad_sum(n); });
  const double hf_all = rel_err(flat_grads(names, [&](const std::string& n) { return hf.grad_sum(n); }), ref_all);
  e.grads_all = rel_err(flat_grads(names, [&](const std::string& n) { return params.at(n).grad(); }), ref_all);
  expect_within(e.grads_all, hf_all, label + " all gradients");

  std::printf("[bf16 %-28s] rel err vs fp64 transformers: logits %.3g (transformers bf16 %.3g), "
              "loss %.3g (%.3g), all grads %.3g (%.3g); worst grad ratio %.2f (%s)\n",
              label.c_str(), e.logits, hf_logits_err, e.loss, hf_loss_err, e.grads_all, hf_all,
              e.worst_grad_ratio, e.worst_grad_name.c_str());
  return e;
}

}  // namespace fptrain::models::testing
