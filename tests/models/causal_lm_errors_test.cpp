// Bad inputs and bad parameters reach the caller as clear errors, and the model
// runs in bf16 and fp16 as well.
#include "tests/models/model_test_util.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>

namespace fptrain::models {
namespace {

std::filesystem::path llama_dir() { return testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "llama"; }

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << needle << "'";
    return;
  }
  ADD_FAILURE() << "no error (expected one mentioning '" << needle << "')";
}

class ModelErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    const testing::Golden g(testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "llama-golden.safetensors");
    packed_ = testing::pack({g.example(0), g.example(2), g.example(3)}, at::kCPU);
  }
  CausalLM model_ = testing::load_model(llama_dir(), at::kFloat, at::kCPU, attention::Backend::kReference);
  testing::Packed packed_;
};

TEST_F(ModelErrors, CuSeqlensViolationsSurface) {
  const int32_t T = static_cast<int32_t>(packed_.input.input_ids.size(0));
  auto with_cu = [&](std::vector<int32_t> cu, int64_t max_seqlen, bool host_copy) {
    PackedInput in = packed_.input;
    in.cu_seqlens = at::tensor(cu, at::kInt);
    in.cu_seqlens_cpu = host_copy ? in.cu_seqlens : at::Tensor();
    in.max_seqlen = max_seqlen;
    return in;
  };
  for (bool host_copy : {true, false}) {
    SCOPED_TRACE(host_copy ? "with host copy" : "CPU cu_seqlens only");
    expect_error([&] { model_.logits(with_cu({0, 9, T - 1}, 14, host_copy)); },
                 "must end at the token count " + std::to_string(T));
    expect_error([&] { model_.logits(with_cu({0, 14, 9, T}, 14, host_copy)); }, "non-decreasing");
    expect_error([&] { model_.logits(with_cu({2, 9, T}, 14, host_copy)); }, "must start at 0");
    expect_error([&] { model_.logits(with_cu({0, 9, 23, T}, 10, host_copy)); },
                 "max_seqlen is 10 but the longest sequence has 14 tokens");
    expect_error([&] { model_.loss(with_cu({0, 9, T - 1}, 14, host_copy), packed_.labels); },
                 "must end at the token count");
  }
  PackedInput in = packed_.input;
  in.cu_seqlens = in.cu_seqlens.to(at::kLong);
  in.cu_seqlens_cpu = at::Tensor();
  expect_error([&] { model_.logits(in); }, "must be int32");
  in.cu_seqlens = at::Tensor();
  expect_error([&] { model_.logits(in); }, "cu_seqlens is missing");
}

TEST_F(ModelErrors, BadTokensAndLabels) {
  PackedInput in = packed_.input;
  in.input_ids = in.input_ids.to(at::kInt);
  expect_error([&] { model_.logits(in); }, "input_ids must be int64 [T]");
  in = packed_.input;
  in.position_ids = in.position_ids.narrow(0, 0, 3);
  expect_error([&] { model_.logits(in); }, "position_ids must be int64 [T]");
  in = packed_.input;
  in.input_ids = at::zeros({0}, at::kLong);
  in.position_ids = at::zeros({0}, at::kLong);
  expect_error([&] { model_.logits(in); }, "no tokens");
  expect_error([&] { model_.loss(packed_.input, packed_.labels.narrow(0, 0, 4)); },
               "labels must be int64 [T]");
}

TEST(ModelParameters, MustMatchTheConfig) {
  const ModelConfig config = load_model_config(llama_dir() / "config.json");
  const TensorMap good = load_pretrained_weights(llama_dir(), config, at::kFloat);
  auto build = [&](TensorMap params) { CausalLM(config, std::move(params), attention::Backend::kReference); };
  {
    TensorMap p = good;
    p.erase("model.layers.1.mlp.up_proj.weight");
    expect_error([&] { build(p); }, "missing parameter 'model.layers.1.mlp.up_proj.weight'");
  }
  {
    TensorMap p = good;
    p["model.layers.0.self_attn.k_proj.weight"] = at::zeros({8, 64});
    expect_error([&] { build(p); }, "'model.layers.0.self_attn.k_proj.weight' has shape [8, 64]");
  }
  {
    TensorMap p = good;
    p["model.layers.9.mlp.up_proj.weight"] = at::zeros({4});
    expect_error([&] { build(p); }, "unexpected parameter 'model.layers.9.mlp.up_proj.weight'");
  }
  {
    TensorMap p = good;
    p["model.norm.weight"] = p["model.norm.weight"].to(at::kDouble);
    expect_error([&] { build(p); }, "'model.norm.weight' is Double");
  }
}

// bf16 and fp16 weights on the CPU: the model runs and stays close to HF's fp32
// logits (rounding of 16-bit activations only).
TEST(LowPrecision, Bf16AndFp16RunOnCpu) {
  const testing::Golden g(testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "llama-golden.safetensors");
  const testing::Packed p = testing::pack(g.examples(), at::kCPU);
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf}) {
    CausalLM model = testing::load_model(llama_dir(), dtype, at::kCPU, attention::Backend::kReference);
    const at::Tensor logits = model.logits(p.input);
    EXPECT_EQ(logits.scalar_type(), dtype);
    const double err = testing::rel_err(logits, g.pack_logits());
    EXPECT_LT(err, 5e-2) << c10::toString(dtype);
    const LossOutput loss = model.loss(p.input, p.labels);
    EXPECT_EQ(loss.loss_sum.scalar_type(), at::kFloat);
    loss.loss_sum.backward();
    for (const auto& [name, param] : model.parameters()) {
      ASSERT_TRUE(param.grad().defined()) << name;
      EXPECT_EQ(param.grad().scalar_type(), dtype) << name;
      EXPECT_TRUE(at::isfinite(param.grad()).all().item<bool>()) << name;
    }
    std::printf("[%s cpu] logits rel err vs transformers fp32: %.3g\n", c10::toString(dtype), err);
  }
}

}  // namespace
}  // namespace fptrain::models
