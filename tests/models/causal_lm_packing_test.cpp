// Packing against transformers' own packed path: transformers runs all examples
// as one row and finds the boundaries where position_ids restart; our model gets
// them as cu_seqlens. Both must agree, and the boundaries and the sliding window
// must really be in effect (not satisfied by accident).
#include "tests/models/model_test_util.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace fptrain::models {
namespace {

using testing::rel_err;

constexpr double kTolerance = 1e-5;

std::filesystem::path checkpoint(const std::string& name) {
  return testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / name;
}
testing::Golden golden(const std::string& name) {
  return testing::Golden(testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / (name + "-golden.safetensors"));
}

class Packing : public ::testing::TestWithParam<std::string> {};

TEST_P(Packing, MatchesTransformersOnOnePackedRowWithRestartingPositions) {
  const testing::Golden g = golden(GetParam());
  CausalLM model = testing::load_model(checkpoint(GetParam()), at::kFloat, at::kCPU,
                                       attention::Backend::kReference);
  const testing::Packed p = testing::pack(g.examples(), at::kCPU);
  ASSERT_TRUE(at::equal(p.input.position_ids, g.pack_position_ids()))
      << "our packing must restart positions exactly where transformers expects";

  const LossOutput loss = model.loss(p.input, p.labels);
  loss.loss_sum.backward();
  const double logits_err = rel_err(model.logits(p.input), g.pack_logits());
  const double loss_err = rel_err(loss.loss_sum, g.pack_loss_sum());
  EXPECT_LE(logits_err, kTolerance);
  EXPECT_LE(loss_err, kTolerance);
  double worst_grad = 0;
  for (const auto& [name, param] : model.parameters()) {
    const double err = rel_err(param.grad(), g.pack_grad(name));
    EXPECT_LE(err, kTolerance) << "gradient of " << name;
    worst_grad = std::max(worst_grad, err);
  }
  std::printf("[pack %s fp32 cpu] vs transformers' packed row: logits %.3g, loss %.3g, grads %.3g\n",
              GetParam().c_str(), logits_err, loss_err, worst_grad);
}

TEST_P(Packing, BoundariesAreHonoured) {
  // The same tokens and positions, but cu_seqlens claiming one long sequence:
  // attention now crosses examples, so the logits must move well away from HF's.
  const testing::Golden g = golden(GetParam());
  CausalLM model = testing::load_model(checkpoint(GetParam()), at::kFloat, at::kCPU,
                                       attention::Backend::kReference);
  testing::Packed p = testing::pack(g.examples(), at::kCPU);
  const int32_t T = static_cast<int32_t>(p.input.input_ids.size(0));
  p.input.cu_seqlens = p.input.cu_seqlens_cpu = at::tensor({0, T}, at::kInt);
  p.input.max_seqlen = T;
  EXPECT_GT(rel_err(model.logits(p.input), g.pack_logits()), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Families, Packing,
                         ::testing::Values("llama", "mistral", "granite", "qwen2", "qwen3", "phi3", "phi3_longrope",
                                           "phi3_partial", "gemma2", "gemma3"),
                         [](const auto& info) { return info.param; });

TEST(SlidingWindow, IsInEffectInTheMistralFixture) {
  // Without the window our logits must differ from HF's on the longest example,
  // which proves the fixture exercises it (and that we apply the same window).
  const testing::Golden g = golden("mistral");
  ModelConfig config = load_model_config(checkpoint("mistral") / "config.json");
  ASSERT_TRUE(config.sliding_window.has_value());
  int longest = 0;
  for (int i = 0; i < g.num_examples(); ++i) {
    if (g.example(i).input_ids.size(0) > g.example(longest).input_ids.size(0)) longest = i;
  }
  ASSERT_GT(g.example(longest).input_ids.size(0), *config.sliding_window);
  const testing::Packed p = testing::pack({g.example(longest)}, at::kCPU);

  const TensorMap params = load_pretrained_weights(checkpoint("mistral"), config, at::kFloat);
  const CausalLM windowed(config, params, attention::Backend::kReference);
  EXPECT_LE(rel_err(windowed.logits(p.input), g.logits(longest)), kTolerance);
  config.sliding_window.reset();
  const CausalLM unwindowed(config, params, attention::Backend::kReference);
  EXPECT_GT(rel_err(unwindowed.logits(p.input), g.logits(longest)), 1e-3);
}

}  // namespace
}  // namespace fptrain::models
