// LoRA equals Hugging Face PEFT (CPU, fp32): adapters written by
// PeftModel.save_pretrained on tiny checkpoints made by transformers (every
// projection of a Llama with biases and GQA; a subset with rsLoRA on a tied
// Qwen2; Phi-3's fused projections; Gemma 2's all-linear) give PEFT's logits,
// summed loss and adapter gradients on one packed row, the frozen base gets no
// gradient, a merged model equals PEFT's merge_and_unload, and an adapter
// written by fptrain reads back the same.
#include "tests/models/model_test_util.h"

#include "models/aten_ops.h"
#include "models/lora_ops.h"
#include "models/peft_format.h"
#include "common/files.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

namespace fptrain::models {
namespace {

using testing::rel_err;

constexpr double kTolerance = 1e-5;

std::filesystem::path fixtures() { return testing::fixture_dir(FPTRAIN_FIXTURE_DIR); }

struct Adapted {
  std::unique_ptr<CausalLM> model;
  std::shared_ptr<LoraAdapter> adapter;
};

Adapted load_adapted(const std::string& name) {
  const std::filesystem::path dir = fixtures() / name;
  ModelConfig config = load_model_config(dir / "config.json");
  TensorMap params = load_pretrained_weights(dir, config, at::kFloat, at::kCPU);
  Adapted a;
  a.model = std::make_unique<CausalLM>(std::move(config), std::move(params), attention::Backend::kReference);
  a.adapter = read_peft_adapter(fixtures() / (name + "-lora"), a.model->projections(), at::kFloat, at::kCPU);
  for (const auto& [n, t] : a.adapter->tensors()) t.requires_grad_(true);
  a.model->set_ops(std::make_shared<LoraOps>(make_decoder_ops(at::kCPU, true, attention::Backend::kReference),
                                             a.adapter, /*dropout_active=*/true));
  return a;
}

class LoraParity : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraParity, PackedRowMatchesPeft) {
  const std::string name = GetParam();
  Adapted a = load_adapted(name);
  const testing::Golden base(fixtures() / (name + "-golden.safetensors"));
  const TensorMap golden = read_safetensors(fixtures() / (name + "-lora-golden.safetensors"));
  const testing::Packed p = testing::pack(base.examples(), at::kCPU);
  const LossOutput loss = a.model->loss(p.input, p.labels);
  loss.loss_sum.backward();
  EXPECT_LT(rel_err(loss.loss_sum, golden.at("pack.loss_sum")), kTolerance);
  EXPECT_LT(rel_err(a.model->logits(p.input), golden.at("pack.logits")), kTolerance);
  int64_t compared = 0;
  for (const auto& [n, t] : a.adapter->tensors()) {
    ASSERT_TRUE(t.grad().defined()) << n;
    EXPECT_LT(rel_err(t.grad(), golden.at("pack.grad." + n)), kTolerance) << n;
    ++compared;
  }
  int64_t peft_trained = 0;
  for (const auto& [k, t] : golden) peft_trained += k.rfind("pack.grad.", 0) == 0;
  EXPECT_EQ(compared, peft_trained);  // the same tensors adapted as PEFT's
  for (const auto& [n, t] : a.model->parameters()) EXPECT_FALSE(t.grad().defined()) << n << " is frozen";
}

TEST_P(LoraParity, MergedWeightsMatchPeft) {
  const std::string name = GetParam();
  Adapted a = load_adapted(name);
  const TensorMap golden = read_safetensors(fixtures() / (name + "-lora-golden.safetensors"));
  const TensorMap merged = merge_lora(a.model->parameters(), *a.adapter);
  for (const auto& [n, t] : merged) EXPECT_LT(rel_err(t, golden.at("merged." + n)), kTolerance) << n;
}

TEST_P(LoraParity, WrittenAdapterReadsBackTheSame) {
  const std::string name = GetParam();
  Adapted a = load_adapted(name);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("fptrain-lora-" + name);
  common::remove_tree(dir);
  std::filesystem::create_directories(dir);
  write_peft_adapter(dir, *a.adapter, "base");
  const auto again = read_peft_adapter(dir, a.model->projections(), at::kFloat, at::kCPU);
  EXPECT_EQ(again->modules(), a.adapter->modules());
  EXPECT_DOUBLE_EQ(again->settings().scale(), a.adapter->settings().scale());
  for (const auto& [n, t] : a.adapter->tensors()) EXPECT_TRUE(at::equal(again->tensors().at(n), t.detach())) << n;
  common::remove_tree(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, LoraParity, ::testing::Values("llama", "qwen2", "phi3", "gemma2"));

// PEFT's folder with settings fptrain does not train with is refused by name.
TEST(PeftFormat, RefusesWhatItDoesNotTrain) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "fptrain-lora-refuse";
  common::remove_tree(dir);
  std::filesystem::create_directories(dir);
  const nlohmann::json good = {{"peft_type", "LORA"}, {"r", 4}, {"lora_alpha", 8}, {"target_modules", {"q_proj"}}};
  auto write = [&](nlohmann::json j) { std::ofstream(dir / kAdapterConfigFile) << j.dump(); };
  auto error_of = [&](nlohmann::json j) -> std::string {
    write(std::move(j));
    try {
      read_peft_settings(dir);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  write(good);
  EXPECT_EQ(read_peft_settings(dir).r, 4);
  EXPECT_NE(error_of({{"peft_type", "IA3"}, {"r", 4}}).find("peft_type"), std::string::npos);
  auto with = [&](const char* key, nlohmann::json v) { nlohmann::json j = good; j[key] = v; return error_of(j); };
  EXPECT_NE(with("use_dora", true).find("DoRA"), std::string::npos);
  EXPECT_NE(with("bias", "all").find("'bias'"), std::string::npos);
  EXPECT_NE(with("rank_pattern", {{"q_proj", 8}}).find("per-module ranks"), std::string::npos);
  EXPECT_NE(with("modules_to_save", {"lm_head"}).find("modules_to_save"), std::string::npos);
  EXPECT_NE(with("r", 0).find("'r' must be positive"), std::string::npos);
  EXPECT_NE(with("r", "four").find("'r' must be"), std::string::npos);
  EXPECT_NE(with("lora_dropout", 1.5).find("lora_dropout"), std::string::npos);
  EXPECT_EQ(with("loftq_config", nlohmann::json::object()), "");  // neutral values are fine
  std::ofstream(dir / kAdapterConfigFile) << "{not json";
  EXPECT_THROW(read_peft_settings(dir), std::invalid_argument);
  common::remove_tree(dir);
}

// A typo in target_modules names the model's projections.
TEST(LoraTargets, TypoNamesTheValidModules) {
  const std::filesystem::path dir = fixtures() / "llama";
  ModelConfig config = load_model_config(dir / "config.json");
  CausalLM model(config, load_pretrained_weights(dir, config, at::kFloat, at::kCPU), attention::Backend::kReference);
  LoraSettings s;
  s.target_modules = {"q_proj", "v_porj"};
  try {
    select_lora_targets(s, model.projections());
    FAIL() << "a typo was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'v_porj'"), std::string::npos) << m;
    EXPECT_NE(m.find("v_proj"), std::string::npos) << m;
  }
  s.target_modules = {"all-linear"};
  EXPECT_EQ(select_lora_targets(s, model.projections()).size(), model.projections().size());
  s.target_modules = {"model.layers.1.self_attn.q_proj"};  // a full name: that module only
  EXPECT_EQ(select_lora_targets(s, model.projections()).size(), 1u);
  s.target_regex = R"(.*layers\.0\..*(q|v)_proj)";
  EXPECT_EQ(select_lora_targets(s, model.projections()).size(), 2u);
}

}  // namespace
}  // namespace fptrain::models
