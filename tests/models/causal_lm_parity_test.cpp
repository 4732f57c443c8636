// The decoder equals Hugging Face (CPU, fp32): for tiny Llama (llama3 RoPE, GQA,
// sharded checkpoint), Mistral (sliding window shorter than the examples) and
// Granite (multipliers, tied embeddings) checkpoints made by transformers, the
// logits, summed loss and the gradient of every parameter agree with HF's, HF
// running each example alone; and one pack of all the examples gives the same
// loss and gradients as the examples one by one.
#include "tests/models/model_test_util.h"

#include "models/rope.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace fptrain::models {
namespace {

using testing::Example;
using testing::Golden;
using testing::rel_err;

constexpr double kTolerance = 1e-5;  // ||ours - HF|| / ||HF||

struct Fixture {
  std::filesystem::path checkpoint;
  Golden golden;
  explicit Fixture(const std::string& name)
      : checkpoint(testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / name),
        golden(testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / (name + "-golden.safetensors")) {}
};

struct OneExampleResult {
  at::Tensor logits, loss_sum, num_supervised;
  TensorMap grads;
};

OneExampleResult run(CausalLM& model, const std::vector<Example>& examples) {
  const testing::Packed p = testing::pack(examples, at::kCPU);
  testing::zero_grads(model);
  const LossOutput loss = model.loss(p.input, p.labels);
  loss.loss_sum.backward();
  return {model.logits(p.input).detach(), loss.loss_sum.detach(), loss.num_supervised,
          testing::grads_of(model)};
}

class DecoderParity : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderParity, RopeInverseFrequenciesAreBitIdentical) {
  const Fixture f(GetParam());
  const ModelConfig config = load_model_config(f.checkpoint / "config.json");
  const at::Tensor ours = rope_inv_freq(config.rope, config.head_dim);
  EXPECT_TRUE(at::equal(ours, f.golden.rope_inv_freq())) << ours << f.golden.rope_inv_freq();
}

TEST_P(DecoderParity, EachExampleMatchesTransformers) {
  const Fixture f(GetParam());
  CausalLM model = testing::load_model(f.checkpoint, at::kFloat, at::kCPU, attention::Backend::kReference);
  ASSERT_GE(f.golden.num_examples(), 5);
  double worst_logits = 0, worst_loss = 0, worst_grad = 0;
  std::string worst_grad_name;
  for (int i = 0; i < f.golden.num_examples(); ++i) {
    SCOPED_TRACE("example " + std::to_string(i));
    const Example e = f.golden.example(i);
    const OneExampleResult r = run(model, {e});

    const double logits_err = rel_err(r.logits, f.golden.logits(i));
    EXPECT_LE(logits_err, kTolerance);
    const double loss_err = rel_err(r.loss_sum, f.golden.loss_sum(i));
    EXPECT_LE(loss_err, kTolerance) << r.loss_sum.item<double>() << " vs "
                                    << f.golden.loss_sum(i).item<double>();
    EXPECT_EQ(r.num_supervised.item<int64_t>(),
              (e.labels.narrow(0, 1, e.labels.size(0) - 1) != -100).sum().item<int64_t>());
    worst_logits = std::max(worst_logits, logits_err);
    worst_loss = std::max(worst_loss, loss_err);
    for (const auto& [name, grad] : r.grads) {
      const double err = rel_err(grad, f.golden.grad(i, name));
      EXPECT_LE(err, kTolerance) << "gradient of " << name;
      if (err > worst_grad) worst_grad = err, worst_grad_name = name;
    }
  }
  std::printf("[parity %s fp32 cpu] max rel err vs transformers: logits %.3g, loss %.3g, grads %.3g (%s)\n",
              GetParam().c_str(), worst_logits, worst_loss, worst_grad, worst_grad_name.c_str());
}

TEST_P(DecoderParity, PackEqualsExamplesOneByOne) {
  const Fixture f(GetParam());
  CausalLM model = testing::load_model(f.checkpoint, at::kFloat, at::kCPU, attention::Backend::kReference);
  // LongRoPE picks its factors from the batch's longest example, in transformers
  // too: a short example packed with a long one is rotated with the long factors.
  // Packing equals transformers' packed row instead (Packing.MatchesTransformers...).
  if (model.config().rope.type == RopeType::kLongRope) GTEST_SKIP() << "LongRoPE depends on the batch by design";
  std::vector<Example> examples;
  for (int i = 0; i < f.golden.num_examples(); ++i) examples.push_back(f.golden.example(i));

  // One by one through our model, summed.
  at::Tensor loss_sum = at::zeros({}, at::kFloat);
  int64_t supervised = 0;
  TensorMap grad_sum, hf_grad_sum;
  std::vector<at::Tensor> logits;
  for (int i = 0; i < static_cast<int>(examples.size()); ++i) {
    const OneExampleResult r = run(model, {examples[i]});
    loss_sum += r.loss_sum;
    supervised += r.num_supervised.item<int64_t>();
    logits.push_back(r.logits);
    for (const auto& [name, g] : r.grads) {
      grad_sum[name] = grad_sum.count(name) ? grad_sum[name] + g : g;
      const at::Tensor hf = f.golden.grad(i, name);
      hf_grad_sum[name] = hf_grad_sum.count(name) ? hf_grad_sum[name] + hf : hf;
    }
  }

  const OneExampleResult packed = run(model, examples);
  EXPECT_EQ(packed.num_supervised.item<int64_t>(), supervised);
  const double loss_err = rel_err(packed.loss_sum, loss_sum);
  EXPECT_LE(loss_err, kTolerance) << packed.loss_sum.item<double>() << " vs " << loss_sum.item<double>();
  const double logits_err = rel_err(packed.logits, at::cat(logits));
  EXPECT_LE(logits_err, kTolerance);
  double worst_grad = 0, worst_hf_grad = 0;
  for (const auto& [name, g] : packed.grads) {
    const double err = rel_err(g, grad_sum.at(name)), hf_err = rel_err(g, hf_grad_sum.at(name));
    EXPECT_LE(err, kTolerance) << "gradient of " << name << " (pack vs one by one)";
    EXPECT_LE(hf_err, kTolerance) << "gradient of " << name << " (pack vs transformers one by one)";
    worst_grad = std::max(worst_grad, err);
    worst_hf_grad = std::max(worst_hf_grad, hf_err);
  }
  std::printf("[pack %s fp32 cpu] max rel err pack vs one-by-one: loss %.3g, logits %.3g, grads %.3g; "
              "grads vs transformers %.3g\n",
              GetParam().c_str(), loss_err, logits_err, worst_grad, worst_hf_grad);
}

TEST_P(DecoderParity, PackOrderDoesNotMatter) {
  const Fixture f(GetParam());
  CausalLM model = testing::load_model(f.checkpoint, at::kFloat, at::kCPU, attention::Backend::kReference);
  std::vector<Example> forward, backward;
  for (int i = 0; i < f.golden.num_examples(); ++i) forward.push_back(f.golden.example(i));
  backward.assign(forward.rbegin(), forward.rend());
  const OneExampleResult a = run(model, forward), b = run(model, backward);
  EXPECT_LE(rel_err(a.loss_sum, b.loss_sum), kTolerance);
  for (const auto& [name, g] : a.grads) EXPECT_LE(rel_err(g, b.grads.at(name)), kTolerance) << name;
}

INSTANTIATE_TEST_SUITE_P(Families, DecoderParity,
                         ::testing::Values("llama", "mistral", "granite", "qwen2", "qwen3", "phi3", "phi3_longrope",
                                           "phi3_partial", "gemma2", "gemma3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace fptrain::models
