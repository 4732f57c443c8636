// The fused lm_head + cross-entropy (models/linear_cross_entropy.h) equals the
// materialised reference path on the CPU in fp32: the summed loss and the
// gradients of hidden and weight, for chunk sizes that cut the tokens anywhere,
// for any pattern of ignored tokens (none supervised included), for Granite's
// logits divisor and for grad_output != 1; and CausalLM::loss, fused against
// reference, gives the same loss and parameter gradients on tiny Llama and
// Granite models with tied and untied embeddings.
#include "models/causal_lm.h"
#include "models/init.h"
#include "models/linear_cross_entropy.h"
#include "models/model_config.h"
#include "tests/models/loss_test_models.h"
#include "tests/models/model_test_util.h"

#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fptrain::models {
namespace {

using testing::make_batch;
using testing::make_model;
using testing::rel_err;
using testing::TinyModel;

constexpr double kTolerance = 1e-6;  // ||fused - reference|| / ||reference||, fp32

struct Result {
  at::Tensor loss, grad_hidden, grad_weight;
};

// Runs one path on fresh leaves and back-propagates grad_output (as the trainer
// does with loss_sum / count).
Result run(bool fused, const at::Tensor& hidden0, const at::Tensor& weight0, const at::Tensor& targets,
           double divisor, int64_t chunk, double grad_output) {
  const at::Tensor hidden = hidden0.detach().clone().requires_grad_(true);
  const at::Tensor weight = weight0.detach().clone().requires_grad_(true);
  const at::Tensor loss = fused ? linear_cross_entropy(hidden, weight, targets, divisor, chunk)
                                : reference_linear_cross_entropy(hidden, weight, targets, divisor);
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  EXPECT_EQ(loss.dim(), 0);
  (loss * grad_output).backward();
  return {loss.detach(), hidden.grad(), weight.grad()};
}

// The materialised computation entirely in fp64 (the cross-entropy too).
Result exact_fp64(const at::Tensor& hidden0, const at::Tensor& weight0, const at::Tensor& targets, double divisor,
                  double grad_output) {
  const at::Tensor hidden = hidden0.detach().to(at::kDouble).requires_grad_(true);
  const at::Tensor weight = weight0.detach().to(at::kDouble).requires_grad_(true);
  const at::Tensor loss = at::cross_entropy_loss(at::linear(hidden, weight) / divisor, targets, {},
                                                 at::Reduction::Sum, kIgnoreIndex);
  (loss * grad_output).backward();
  return {loss.detach(), hidden.grad(), weight.grad()};
}

struct Inputs {
  at::Tensor hidden, weight;
};

Inputs make_inputs(int64_t T, int64_t H, int64_t V, at::ScalarType dtype = at::kFloat, uint64_t seed = 7) {
  at::manual_seed(seed);
  // Logits with a spread of a few units, so softmax is neither flat nor one-hot.
  return {at::randn({T, H}).to(dtype), (0.3 * at::randn({V, H})).to(dtype)};
}

// Targets with every third token and the last two ignored, and a run in the middle.
at::Tensor mixed_targets(int64_t T, int64_t V) {
  at::manual_seed(11);
  at::Tensor t = at::randint(V, {T}, at::kLong);
  for (int64_t i = 0; i < T; ++i) {
    if (i % 3 == 0 || (i >= T / 2 && i < T / 2 + 4) || i >= T - 2) t[i] = kIgnoreIndex;
  }
  return t;
}

void expect_same(const Result& fused, const Result& ref, const std::string& label) {
  SCOPED_TRACE(label);
  EXPECT_LE(rel_err(fused.loss, ref.loss), kTolerance) << fused.loss.item<double>() << " vs " << ref.loss.item<double>();
  ASSERT_TRUE(fused.grad_hidden.defined() && fused.grad_weight.defined());
  EXPECT_EQ(fused.grad_hidden.scalar_type(), ref.grad_hidden.scalar_type());
  EXPECT_EQ(fused.grad_weight.scalar_type(), ref.grad_weight.scalar_type());
  EXPECT_LE(rel_err(fused.grad_hidden, ref.grad_hidden), kTolerance);
  EXPECT_LE(rel_err(fused.grad_weight, ref.grad_weight), kTolerance);
}

TEST(LinearCrossEntropy, EqualsReferenceForAnyChunkingAndDivisor) {
  const int64_t T = 29, H = 48, V = 173;
  const Inputs in = make_inputs(T, H, V);
  struct Pattern {
    const char* name;
    at::Tensor targets;
  };
  at::Tensor all = at::randint(V, {T}, at::kLong);
  at::Tensor run_only = at::full({T}, kIgnoreIndex, at::kLong);  // one run of supervised tokens
  run_only.narrow(0, 5, 13).copy_(all.narrow(0, 5, 13));
  at::Tensor single = at::full({T}, kIgnoreIndex, at::kLong);
  single[T - 1] = 3;
  const std::vector<Pattern> patterns = {
      {"all supervised", all}, {"mixed", mixed_targets(T, V)}, {"one run", run_only}, {"one token", single}};
  double worst = 0, worst_exact_fused = 0, worst_exact_ref = 0;
  for (const Pattern& p : patterns) {
    for (double divisor : {1.0, 4.0}) {
      const Result ref = run(false, in.hidden, in.weight, p.targets, divisor, 0, 1.0 / 37);
      const Result exact = exact_fp64(in.hidden, in.weight, p.targets, divisor, 1.0 / 37);
      for (int64_t chunk : {int64_t{1}, int64_t{7}, T, T + 5, int64_t{0}}) {
        const Result fused = run(true, in.hidden, in.weight, p.targets, divisor, chunk, 1.0 / 37);
        expect_same(fused, ref, std::string(p.name) + ", divisor " + std::to_string(divisor) + ", chunk " +
                                    std::to_string(chunk));
        worst = std::max({worst, rel_err(fused.loss, ref.loss), rel_err(fused.grad_hidden, ref.grad_hidden),
                          rel_err(fused.grad_weight, ref.grad_weight)});
        worst_exact_fused = std::max({worst_exact_fused, rel_err(fused.grad_hidden, exact.grad_hidden),
                                      rel_err(fused.grad_weight, exact.grad_weight)});
      }
      worst_exact_ref = std::max({worst_exact_ref, rel_err(ref.grad_hidden, exact.grad_hidden),
                                  rel_err(ref.grad_weight, exact.grad_weight)});
    }
  }
  // The differences are fp32 rounding: both paths are as far from an fp64 computation.
  std::printf("[linear_cross_entropy fp32 cpu] max rel err vs materialised: %.3g; gradients vs fp64: fused %.3g, "
              "materialised %.3g\n", worst, worst_exact_fused, worst_exact_ref);
}

TEST(LinearCrossEntropy, IgnoredTokensGetZeroGradientRows) {
  const int64_t T = 20, H = 16, V = 40;
  const Inputs in = make_inputs(T, H, V);
  const at::Tensor targets = mixed_targets(T, V);
  const Result fused = run(true, in.hidden, in.weight, targets, 1.0, 3, 1.0);
  for (int64_t i = 0; i < T; ++i) {
    if (targets[i].item<int64_t>() == kIgnoreIndex) {
      EXPECT_TRUE(at::equal(fused.grad_hidden[i], at::zeros({H}))) << "row " << i;
    } else {
      EXPECT_GT(fused.grad_hidden[i].abs().sum().item<double>(), 0) << "row " << i;
    }
  }
}

TEST(LinearCrossEntropy, NothingSupervisedGivesZeroLossAndZeroGradients) {
  const int64_t T = 12, H = 16, V = 40;
  const Inputs in = make_inputs(T, H, V);
  const at::Tensor targets = at::full({T}, kIgnoreIndex, at::kLong);
  for (double grad_output : {1.0, 0.25}) {
    for (int64_t chunk : {int64_t{1}, int64_t{0}}) {
      const Result fused = run(true, in.hidden, in.weight, targets, 4.0, chunk, grad_output);
      const Result ref = run(false, in.hidden, in.weight, targets, 4.0, chunk, grad_output);
      EXPECT_EQ(fused.loss.item<float>(), 0.0f);
      EXPECT_EQ(ref.loss.item<float>(), 0.0f);
      ASSERT_TRUE(fused.grad_hidden.defined() && fused.grad_weight.defined());
      EXPECT_TRUE(at::equal(fused.grad_hidden, at::zeros_like(in.hidden)));
      EXPECT_TRUE(at::equal(fused.grad_weight, at::zeros_like(in.weight)));
      EXPECT_TRUE(at::equal(ref.grad_hidden, fused.grad_hidden));
    }
  }
}

TEST(LinearCrossEntropy, GradientsScaleWithGradOutput) {
  const int64_t T = 15, H = 16, V = 40;
  const Inputs in = make_inputs(T, H, V);
  const at::Tensor targets = mixed_targets(T, V);
  const Result one = run(true, in.hidden, in.weight, targets, 1.0, 4, 1.0);
  for (double g : {2.5, -0.125, 1.0 / 16384}) {
    const Result scaled = run(true, in.hidden, in.weight, targets, 1.0, 4, g);
    const Result ref = run(false, in.hidden, in.weight, targets, 1.0, 4, g);
    expect_same(scaled, ref, "grad_output " + std::to_string(g));
    EXPECT_LE(rel_err(scaled.grad_hidden, one.grad_hidden * g), kTolerance);
    EXPECT_LE(rel_err(scaled.grad_weight, one.grad_weight * g), kTolerance);
  }
}

TEST(LinearCrossEntropy, OnlyWhatRequiresGradGetsAGradient) {
  const int64_t T = 10, H = 16, V = 40;
  const Inputs in = make_inputs(T, H, V);
  const at::Tensor targets = mixed_targets(T, V);
  const Result ref = run(false, in.hidden, in.weight, targets, 1.0, 0, 1.0);
  {
    const at::Tensor weight = in.weight.clone().requires_grad_(true);
    linear_cross_entropy(in.hidden, weight, targets, 1.0, 3).backward();
    EXPECT_LE(rel_err(weight.grad(), ref.grad_weight), kTolerance);
  }
  {
    const at::Tensor hidden = in.hidden.clone().requires_grad_(true);
    linear_cross_entropy(hidden, in.weight, targets, 1.0, 3).backward();
    EXPECT_LE(rel_err(hidden.grad(), ref.grad_hidden), kTolerance);
  }
  {
    // No grad mode (evaluation): the same loss and no graph.
    const at::Tensor hidden = in.hidden.clone().requires_grad_(true);
    c10::NoGradGuard no_grad;
    const at::Tensor loss = linear_cross_entropy(hidden, in.weight, targets, 1.0, 3);
    EXPECT_FALSE(loss.requires_grad());
    EXPECT_LE(rel_err(loss, ref.loss), kTolerance);
  }
}

TEST(LinearCrossEntropy, HostCopyOfTargetsGivesTheSameResult) {
  const int64_t T = 18, H = 16, V = 40;
  const Inputs in = make_inputs(T, H, V);
  const at::Tensor targets = mixed_targets(T, V);
  const at::Tensor a = linear_cross_entropy(in.hidden, in.weight, targets, 1.0, 4);
  const at::Tensor b = linear_cross_entropy(in.hidden, in.weight, targets, 1.0, 4, targets.clone());
  EXPECT_TRUE(at::equal(a, b));
}

// Gemma 2's final soft-cap, cap * tanh(logits / cap): the fused path runs the
// materialised path's operations and their backward op by op, for any chunking,
// in fp32 and bf16, and both follow an fp64 computation.
TEST(LinearCrossEntropy, FinalSoftcapEqualsTheMaterialisedPath) {
  const int64_t T = 31, H = 40, V = 157;
  const at::Tensor targets = mixed_targets(T, V);
  const double cap = 2.0;  // bites: the logits spread a few units
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const Inputs in = make_inputs(T, H, V, dtype);
    auto capped = [&](bool fused, int64_t chunk) {
      const at::Tensor hidden = in.hidden.detach().clone().requires_grad_(true);
      const at::Tensor weight = in.weight.detach().clone().requires_grad_(true);
      const at::Tensor loss = fused ? linear_cross_entropy(hidden, weight, targets, 1.0, chunk, {}, cap)
                                    : reference_linear_cross_entropy(hidden, weight, targets, 1.0, cap);
      (loss * 0.25).backward();
      return Result{loss.detach(), hidden.grad(), weight.grad()};
    };
    const at::Tensor h64 = in.hidden.to(at::kDouble).requires_grad_(true);
    const at::Tensor w64 = in.weight.to(at::kDouble).requires_grad_(true);
    const at::Tensor loss64 = at::cross_entropy_loss(at::tanh(at::linear(h64, w64) / cap) * cap, targets, {},
                                                     at::Reduction::Sum, kIgnoreIndex);
    (loss64 * 0.25).backward();
    const Result ref = capped(false, 0);
    const double tol = dtype == at::kBFloat16 ? 1e-2 : kTolerance;
    for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{0}}) {
      const Result fused = capped(true, chunk);
      EXPECT_LE(rel_err(fused.loss, ref.loss), tol) << "chunk " << chunk;
      EXPECT_LE(rel_err(fused.grad_hidden, ref.grad_hidden), tol) << "chunk " << chunk;
      EXPECT_LE(rel_err(fused.grad_weight, ref.grad_weight), tol) << "chunk " << chunk;
    }
    const double exact_tol = dtype == at::kBFloat16 ? 3e-2 : 1e-5;
    EXPECT_LE(rel_err(ref.loss, loss64.detach()), exact_tol);
    EXPECT_LE(rel_err(ref.grad_hidden, h64.grad()), exact_tol);
    EXPECT_LE(rel_err(ref.grad_weight, w64.grad()), exact_tol);
    // The cap changes the loss: it is not silently dropped.
    EXPECT_GT(rel_err(ref.loss, run(false, in.hidden, in.weight, targets, 1.0, 0, 0.25).loss), 1e-2);
  }
}

TEST(LinearCrossEntropy, Bf16AndFp64OnTheCpu) {
  // The 16-bit path widens the chunk operands to sum the weight gradient in
  // fp32; fp64 keeps the cross-entropy in fp32 like the reference.
  const int64_t T = 33, H = 32, V = 150;
  const at::Tensor targets = mixed_targets(T, V);
  for (at::ScalarType dtype : {at::kBFloat16, at::kDouble}) {
    const Inputs in = make_inputs(T, H, V, dtype);
    const Result ref = run(false, in.hidden, in.weight, targets, 4.0, 0, 0.5);
    const Result fused = run(true, in.hidden, in.weight, targets, 4.0, 5, 0.5);
    const double tol = dtype == at::kBFloat16 ? 1e-2 : kTolerance;
    SCOPED_TRACE(c10::toString(dtype));
    EXPECT_EQ(fused.grad_hidden.scalar_type(), dtype);
    EXPECT_EQ(fused.grad_weight.scalar_type(), dtype);
    EXPECT_LE(rel_err(fused.loss, ref.loss), tol);
    EXPECT_LE(rel_err(fused.grad_hidden, ref.grad_hidden), tol);
    EXPECT_LE(rel_err(fused.grad_weight, ref.grad_weight), tol);
    std::printf("[linear_cross_entropy %s cpu] rel err vs materialised: loss %.3g, grad hidden %.3g, grad weight %.3g\n",
                c10::toString(dtype), rel_err(fused.loss, ref.loss), rel_err(fused.grad_hidden, ref.grad_hidden),
                rel_err(fused.grad_weight, ref.grad_weight));
  }
}

TEST(LinearCrossEntropy, BadArgumentsAreClearErrors) {
  const Inputs in = make_inputs(6, 8, 10);
  const at::Tensor ok = at::tensor({1, 2, -100, 3, 4, -100}, at::kLong);
  auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << "no error (expected one mentioning '" << needle << "')";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { linear_cross_entropy(in.hidden, in.weight, at::tensor({1, 2, -100, 10, 4, -100}, at::kLong)); },
               "target 10 at position 3");
  expect_error([&] { linear_cross_entropy(in.hidden, in.weight, at::tensor({1, 2, -1, 3, 4, -100}, at::kLong)); },
               "target -1 at position 2");
  expect_error([&] { linear_cross_entropy(in.hidden, in.weight, ok.narrow(0, 0, 5)); }, "targets must be int64 [T]");
  expect_error([&] { linear_cross_entropy(in.hidden, in.weight.narrow(1, 0, 7), ok); }, "weight must be [V, H]");
  expect_error([&] { linear_cross_entropy(in.hidden, in.weight.to(at::kDouble), ok); }, "weight is Double");
  expect_error([&] { linear_cross_entropy(in.hidden, in.weight, ok, 0.0); }, "logits_scale_divisor");
  expect_error([&] { linear_cross_entropy(in.hidden, in.weight, ok, 1.0, 0, ok.narrow(0, 0, 4)); }, "targets_cpu");
}

TEST(LinearCrossEntropy, SecondBackwardIsAnError) {
  const Inputs in = make_inputs(6, 8, 10);
  const at::Tensor hidden = in.hidden.clone().requires_grad_(true);
  const at::Tensor loss = linear_cross_entropy(hidden, in.weight, at::tensor({1, 2, -100, 3, 4, -100}, at::kLong));
  loss.backward({}, /*retain_graph=*/true);
  EXPECT_ANY_THROW(loss.backward());
}

TEST(LinearCrossEntropy, DefaultChunkHoldsAbout512MiBOfFp32Logits) {
  EXPECT_EQ(default_chunk_tokens(128256), 1024);  // Llama 3
  EXPECT_EQ(default_chunk_tokens(32000), 4096);   // Llama 2, Mistral
  EXPECT_EQ(default_chunk_tokens(49152), 2688);   // Granite 3
  EXPECT_EQ(default_chunk_tokens(96), (int64_t{512} << 20) / (4 * 96) / 128 * 128);
  EXPECT_EQ(default_chunk_tokens(int64_t{1} << 30), 1);
  for (int64_t v : {32000, 49152, 128256, 256000}) {
    const double mib = 4.0 * static_cast<double>(default_chunk_tokens(v) * v) / (1 << 20);
    EXPECT_GE(mib, 256) << v;
    EXPECT_LE(mib, 512) << v;
  }
}

// ---- CausalLM::loss, fused against the materialised reference ----

struct ModelResult {
  at::Tensor loss;
  TensorMap grads;
};

ModelResult model_loss(CausalLM& model, const testing::Packed& batch, LossOptions options, double denominator,
                       bool host_labels) {
  model.set_loss_options(options);
  testing::zero_grads(model);
  const LossOutput out = model.loss(batch.input, batch.labels, host_labels ? batch.labels.clone() : at::Tensor());
  (out.loss_sum / denominator).backward();
  return {out.loss_sum.detach(), testing::grads_of(model)};
}

class FusedLoss : public ::testing::TestWithParam<TinyModel> {};

TEST_P(FusedLoss, CausalLMGradientsEqualTheMaterialisedPath) {
  CausalLM model = make_model(GetParam());
  const testing::Packed batch = make_batch(model.config().vocab_size);
  const int64_t supervised = (batch.labels != kIgnoreIndex).sum().item<int64_t>();
  const ModelResult ref = model_loss(model, batch, {/*fused=*/false, 0}, static_cast<double>(supervised), false);
  double worst_loss = 0, worst_grad = 0;
  std::string worst_name;
  for (int64_t chunk : {int64_t{1}, int64_t{7}, int64_t{0}}) {
    for (bool host_labels : {false, true}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + (host_labels ? ", host labels" : ""));
      const ModelResult fused = model_loss(model, batch, {/*fused=*/true, chunk}, static_cast<double>(supervised),
                                           host_labels);
      const double loss_err = rel_err(fused.loss, ref.loss);
      EXPECT_LE(loss_err, kTolerance);
      worst_loss = std::max(worst_loss, loss_err);
      for (const auto& [name, g] : ref.grads) {
        const double err = rel_err(fused.grads.at(name), g);
        EXPECT_LE(err, kTolerance) << "gradient of " << name;
        if (err > worst_grad) worst_grad = err, worst_name = name;
      }
    }
  }
  std::printf("[fused loss %s fp32 cpu] max rel err vs materialised: loss %.3g, grads %.3g (%s)\n", GetParam().name,
              worst_loss, worst_grad, worst_name.c_str());
}

TEST_P(FusedLoss, EvaluationWithoutGradients) {
  CausalLM model = make_model(GetParam());
  const testing::Packed batch = make_batch(model.config().vocab_size);
  c10::NoGradGuard no_grad;
  model.set_loss_options({/*fused=*/false, 0});
  const at::Tensor ref = model.loss(batch.input, batch.labels).loss_sum;
  model.set_loss_options({/*fused=*/true, 5});
  const LossOutput fused = model.loss(batch.input, batch.labels);
  EXPECT_FALSE(fused.loss_sum.requires_grad());
  EXPECT_LE(rel_err(fused.loss_sum, ref), kTolerance);
}

TEST_P(FusedLoss, NothingSupervisedInTheBatch) {
  CausalLM model = make_model(GetParam());
  testing::Packed batch = make_batch(model.config().vocab_size);
  batch.labels.fill_(kIgnoreIndex);
  const ModelResult fused = model_loss(model, batch, {/*fused=*/true, 4}, 3.0, false);
  EXPECT_EQ(fused.loss.item<float>(), 0.0f);
  for (const auto& [name, g] : fused.grads) {
    EXPECT_TRUE(at::isfinite(g).all().item<bool>()) << name;
    EXPECT_EQ(g.abs().max().item<float>(), 0.0f) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, FusedLoss,
                         ::testing::Values(TinyModel{"llama_untied", "LlamaForCausalLM", false, 1.0},
                                           TinyModel{"llama_tied", "LlamaForCausalLM", true, 1.0},
                                           TinyModel{"granite_tied", "GraniteForCausalLM", true, 4.0},
                                           TinyModel{"granite_untied", "GraniteForCausalLM", false, 2.5}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fptrain::models
