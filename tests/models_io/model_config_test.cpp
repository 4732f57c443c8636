// config.json parsing against what transformers itself makes of the same files
// (make_fixtures.py dumps it from the config object and the instantiated model).
#include "models/checkpoint.h"
#include "models/model_config.h"
#include "models/rope.h"
#include "tests/models_io/io_test_util.h"

#include <gtest/gtest.h>

namespace fptrain::models {
namespace {

using nlohmann::json;
using namespace fptrain::models::testing;

std::string rope_type_name(RopeType t) { return common::enum_name(t); }

// Every field of `c` against transformers' reading `want` of the same file.
void expect_matches(const ModelConfig& c, const json& want, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(c.architecture, want["architecture"].get<std::string>());
  EXPECT_EQ(c.vocab_size, want["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.hidden_size, want["hidden_size"].get<int64_t>());
  EXPECT_EQ(c.intermediate_size, want["intermediate_size"].get<int64_t>());
  EXPECT_EQ(c.num_hidden_layers, want["num_hidden_layers"].get<int64_t>());
  EXPECT_EQ(c.num_attention_heads, want["num_attention_heads"].get<int64_t>());
  EXPECT_EQ(c.num_key_value_heads, want["num_key_value_heads"].get<int64_t>());
  EXPECT_EQ(c.head_dim, want["head_dim"].get<int64_t>());
  EXPECT_EQ(c.max_position_embeddings, want["max_position_embeddings"].get<int64_t>());
  EXPECT_EQ(c.rms_norm_eps, want["rms_norm_eps"].get<double>());
  EXPECT_EQ(c.tie_word_embeddings, want["tie_word_embeddings"].get<bool>());
  EXPECT_EQ(c.qkv_bias, want["attention_bias"].get<bool>());  // q_proj's bias
  EXPECT_EQ(c.attention_bias, want["o_proj_bias"].get<bool>());
  EXPECT_EQ(c.qk_norm, want["qk_norm"].get<bool>());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const json& w = want["layer_windows"][static_cast<size_t>(l)];
    EXPECT_EQ(c.window(l), w.is_null() ? 0 : w.get<int64_t>()) << "layer " << l;
  }
  EXPECT_EQ(c.mlp_bias, want["mlp_bias"].get<bool>());
  EXPECT_EQ(c.attention_dropout, want["attention_dropout"].get<double>());
  if (want["sliding_window"].is_null()) {
    EXPECT_FALSE(c.sliding_window.has_value());
  } else {
    ASSERT_TRUE(c.sliding_window.has_value());
    EXPECT_EQ(*c.sliding_window, want["sliding_window"].get<int64_t>());
  }
  EXPECT_DOUBLE_EQ(c.softmax_scale(), want["softmax_scale"].get<double>());
  EXPECT_EQ(c.embedding_multiplier, want["embedding_multiplier"].get<double>());
  EXPECT_EQ(c.residual_multiplier, want["residual_multiplier"].get<double>());
  EXPECT_EQ(c.logits_scaling, want["logits_scaling"].get<double>());
  const json& attn_cap = want["attn_logit_softcapping"];
  const json& final_cap = want["final_logit_softcapping"];
  // Gemma 3 keeps attn_logit_softcapping in its config but never applies it.
  if (c.family != Family::kGemma3) EXPECT_EQ(c.attn_logit_softcap, attn_cap.is_null() ? 0.0 : attn_cap.get<double>());
  if (want["rope_local_theta"].is_null()) {
    EXPECT_FALSE(c.rope_local.has_value());
  } else {
    ASSERT_TRUE(c.rope_local.has_value());
    EXPECT_EQ(c.rope_local->theta, want["rope_local_theta"].get<double>());
  }
  EXPECT_EQ(c.final_logit_softcap, final_cap.is_null() ? 0.0 : final_cap.get<double>());

  EXPECT_EQ(rope_type_name(c.rope.type), want["rope_type"].get<std::string>());
  EXPECT_EQ(c.rope.theta, want["rope_theta"].get<double>());
  if (!want["rope_factor"].is_null()) EXPECT_EQ(c.rope.factor, want["rope_factor"].get<double>());
  if (c.rope.type == RopeType::kLlama3) {
    EXPECT_EQ(c.rope.low_freq_factor, want["rope_low_freq_factor"].get<double>());
    EXPECT_EQ(c.rope.high_freq_factor, want["rope_high_freq_factor"].get<double>());
    EXPECT_EQ(c.rope.original_max_position_embeddings,
              want["rope_original_max_position_embeddings"].get<int64_t>());
  }

  EXPECT_EQ(c.dtype, want["dtype"].is_null() ? "float32" : want["dtype"].get<std::string>());
  if (want["bos_token_id"].is_null()) {
    EXPECT_FALSE(c.bos_token_id.has_value());
  } else {
    EXPECT_EQ(c.bos_token_id.value_or(-1), want["bos_token_id"].get<int64_t>());
  }
  EXPECT_EQ(c.eos_token_ids, want["eos_token_ids"].get<std::vector<int64_t>>());
  if (want["pad_token_id"].is_null()) {
    EXPECT_FALSE(c.pad_token_id.has_value());
  } else {
    EXPECT_EQ(c.pad_token_id.value_or(-1), want["pad_token_id"].get<int64_t>());
  }
  EXPECT_EQ(c.num_parameters(), want["num_parameters"].get<int64_t>());
}

class ConfigFromTransformers : public ::testing::TestWithParam<std::string> {};

TEST_P(ConfigFromTransformers, V5FormAsSavedMatchesTransformers) {
  const std::string name = GetParam();
  const json expected = read_json(fixture(name + "_ref/expected.json"));
  const json doc = read_json(fixture(name + "/config.json"));
  ASSERT_TRUE(doc.contains("rope_parameters")) << "fixture is not in the v5 form";
  expect_matches(load_model_config(fixture(name + "/config.json")), expected["v5"], name + " v5");
}

TEST_P(ConfigFromTransformers, V4FormMatchesTransformers) {
  const std::string name = GetParam();
  const json expected = read_json(fixture(name + "_ref/expected.json"));
  const json doc = read_json(fixture(name + "_v4/config.json"));
  ASSERT_TRUE(doc.contains("rope_theta") && !doc.contains("rope_parameters")) << "fixture is not in the v4 form";
  expect_matches(load_model_config(fixture(name + "_v4/config.json")), expected["v4"], name + " v4");
}

TEST_P(ConfigFromTransformers, WrittenConfigParsesBackIdenticallyInTheSameForm) {
  const std::string name = GetParam();
  const json expected = read_json(fixture(name + "_ref/expected.json"));
  for (const std::string form : {"v5", "v4"}) {
    const std::string folder = form == "v5" ? name : name + "_v4";
    const ModelConfig c = load_model_config(fixture(folder + "/config.json"));
    const json written = model_config_to_json(c);
    EXPECT_EQ(written.contains("rope_parameters"), form == "v5");
    EXPECT_EQ(written.contains("torch_dtype"), form == "v4");
    expect_matches(parse_model_config(written, "written"), expected[form], name + " rewritten " + form);
  }
}

// The RoPE parameters as parsed give transformers' inverse frequencies exactly.
TEST_P(ConfigFromTransformers, RopeFrequenciesMatchTransformers) {
  const std::string name = GetParam();
  const json expected = read_json(fixture(name + "_ref/expected.json"));
  for (const std::string form : {"v5", "v4"}) {
    SCOPED_TRACE(form);
    const ModelConfig c = load_model_config(fixture((form == "v5" ? name : name + "_v4") + "/config.json"));
    const auto want_values = expected[form]["inv_freq"].get<std::vector<double>>();
    const at::Tensor want = at::tensor(want_values, at::kDouble).to(at::kFloat);
    const at::Tensor got = rope_inv_freq(c.rope, c.head_dim);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_TRUE(at::equal(got, want)) << "max abs diff " << (got - want).abs().max().item<float>();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ConfigFromTransformers,
                         ::testing::Values("llama", "llama_linear", "mistral", "mistral_nowindow", "granite", "qwen2",
                                           "qwen3", "phi3", "phi4_mini", "gemma2", "gemma3"));

class ConfigDefaults : public ::testing::TestWithParam<std::string> {};

TEST_P(ConfigDefaults, OnlySizesGivenDefaultsMatchTransformers) {
  const std::string folder = GetParam() + "_minimal";
  const json expected = read_json(fixture(folder + "/expected.json"));
  expect_matches(load_model_config(fixture(folder + "/config.json")), expected["v5"], folder);
}

INSTANTIATE_TEST_SUITE_P(Families, ConfigDefaults,
                         ::testing::Values("llama", "mistral", "granite", "qwen2", "qwen3", "gemma2", "gemma3_text"));

TEST(ConfigParse, FamilyFromModelTypeWhenArchitecturesAbsent) {
  json doc = read_json(fixture("mistral/config.json"));
  doc.erase("architectures");
  const ModelConfig c = parse_model_config(doc, "mem");
  EXPECT_EQ(c.family, Family::kMistral);
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
}

// ---- unsupported or malformed configs: the error names file, key and value ----

class ConfigErrors : public ::testing::Test {
 protected:
  // Writes `doc` as a config.json and expects loading it to fail naming the file and `needles`.
  void expect_rejected(const json& doc, std::initializer_list<std::string> needles) {
    ScratchDir dir("cfg");
    const auto path = dir / "config.json";
    write_json(path, doc);
    expect_error([&] { load_model_config(path); }, {path.string()});
    expect_error([&] { load_model_config(path); }, needles);
  }
  json llama_v5 = read_json(fixture("llama/config.json"));
  json llama_v4 = read_json(fixture("llama_v4/config.json"));
  json mistral = read_json(fixture("mistral/config.json"));
};

TEST_F(ConfigErrors, UnsupportedArchitecture) {
  json doc = llama_v5;
  doc["architectures"] = {"GPTNeoXForCausalLM"};
  expect_rejected(doc, {"'architectures'", "GPTNeoXForCausalLM", "unsupported architecture"});
  doc.erase("architectures");
  doc["model_type"] = "gpt2";
  expect_rejected(doc, {"'model_type'", "gpt2", "unsupported"});
}

// Pre-quantised checkpoints: bitsandbytes' 4-bit NF4 with double quantisation is read (QLoRA's
// base, models/nf4_checkpoint.h); every other scheme is refused naming the key.
TEST_F(ConfigErrors, PreQuantisedCheckpointsOtherThanNf4AreRefused) {
  json doc = read_json(fixture("llama/config.json"));
  doc["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_4bit", true}};  // FP4 by default
  expect_rejected(doc, {"'quantization_config.bnb_4bit_quant_type'", "NF4", "adapter.type: qlora"});
  doc["quantization_config"]["bnb_4bit_quant_type"] = "nf4";
  expect_rejected(doc, {"'quantization_config.bnb_4bit_use_double_quant'", "double-quantised"});
  doc["quantization_config"]["bnb_4bit_use_double_quant"] = true;
  EXPECT_TRUE(parse_model_config(doc, "config.json").bnb_nf4);
  doc["quantization_config"] = {{"quant_method", "bitsandbytes"}, {"load_in_8bit", true}};
  expect_rejected(doc, {"'quantization_config.load_in_8bit'", "8-bit"});
  doc["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  expect_rejected(doc, {"'quantization_config.quant_method'", "gptq"});
  doc["quantization_config"] = "nf4";
  expect_rejected(doc, {"'quantization_config'", "expected an object"});
  doc["quantization_config"] = nullptr;  // present but null: nothing quantised
  EXPECT_FALSE(parse_model_config(doc, "config.json").bnb_nf4);
}

TEST_F(ConfigErrors, GemmaOptionsFptrainDoesNotTrain) {
  const json gemma = read_json(fixture("gemma2/config.json"));
  json doc = gemma;
  doc["use_bidirectional_attention"] = true;
  expect_rejected(doc, {"'use_bidirectional_attention'", "bidirectional attention is not supported"});
  doc = gemma;
  doc["hidden_activation"] = "gelu";
  expect_rejected(doc, {"'hidden_activation'", "gelu_pytorch_tanh"});
  doc = gemma;
  doc["sliding_window"] = nullptr;  // layer_types still name sliding layers
  expect_rejected(doc, {"'layer_types'", "no window"});
  doc = gemma;
  doc["attn_logit_softcapping"] = -1.0;
  expect_rejected(doc, {"'attn_logit_softcapping'", "must be positive"});
  doc = gemma;
  doc["final_logit_softcapping"] = nullptr;  // null: no cap, accepted
  EXPECT_EQ(parse_model_config(doc, "mem").final_logit_softcap, 0.0);
}

TEST_F(ConfigErrors, UnsupportedRopeTypes) {
  json doc = llama_v5;
  doc["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 10000.0}, {"factor", 4.0},
                            {"original_max_position_embeddings", 64}};
  expect_rejected(doc, {"'rope_parameters.rope_type'", "yarn", "unsupported RoPE type"});
  doc = llama_v4;
  doc["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  expect_rejected(doc, {"'rope_scaling.type'", "dynamic"});
  doc = llama_v5;
  doc["rope_parameters"]["partial_rotary_factor"] = 0.5;
  expect_rejected(doc, {"partial_rotary_factor", "0.5"});
}

TEST_F(ConfigErrors, Llama3WithoutItsFactorsIsRejected) {
  json doc = llama_v5;
  doc["rope_parameters"].erase("low_freq_factor");
  expect_rejected(doc, {"'rope_parameters.low_freq_factor'", "missing"});
  doc = llama_v4;
  doc["rope_scaling"]["factor"] = "eight";
  expect_rejected(doc, {"'rope_scaling.factor'", "\"eight\"", "number"});
}

TEST_F(ConfigErrors, UnsupportedActivation) {
  json doc = llama_v5;
  doc["hidden_act"] = "gelu";
  expect_rejected(doc, {"'hidden_act'", "gelu", "silu"});
}

TEST_F(ConfigErrors, MissingRequiredKey) {
  json doc = llama_v5;
  doc.erase("hidden_size");
  expect_rejected(doc, {"'hidden_size'", "missing"});
}

TEST_F(ConfigErrors, WrongTypes) {
  json doc = llama_v5;
  doc["num_hidden_layers"] = "2";
  expect_rejected(doc, {"'num_hidden_layers'", "\"2\"", "integer"});
  doc = llama_v5;
  doc["tie_word_embeddings"] = 1;
  expect_rejected(doc, {"'tie_word_embeddings'", "true or false"});
  doc = llama_v5;
  doc["eos_token_id"] = {2, "x"};
  expect_rejected(doc, {"'eos_token_id'"});
  doc = llama_v5;
  doc["architectures"] = "LlamaForCausalLM";
  expect_rejected(doc, {"'architectures'", "list"});
}

TEST_F(ConfigErrors, InconsistentSizes) {
  json doc = llama_v5;
  doc["num_key_value_heads"] = 3;
  expect_rejected(doc, {"'num_key_value_heads'", "3", "divide"});
  doc = llama_v5;
  doc.erase("head_dim");
  doc["hidden_size"] = 30;
  expect_rejected(doc, {"'hidden_size'", "30", "multiple"});
  doc = llama_v5;
  doc["vocab_size"] = 0;
  expect_rejected(doc, {"'vocab_size'", "positive"});
}

TEST_F(ConfigErrors, UnsupportedDtype) {
  json doc = llama_v5;
  doc["dtype"] = "float8_e4m3fn";
  expect_rejected(doc, {"'dtype'", "float8_e4m3fn"});
  doc = llama_v4;
  doc["torch_dtype"] = "int8";
  expect_rejected(doc, {"'torch_dtype'", "int8"});
}

TEST_F(ConfigErrors, MistralBiasesAreRejected) {
  json doc = mistral;
  doc["attention_bias"] = true;
  expect_rejected(doc, {"'attention_bias'", "MistralForCausalLM"});
}

TEST_F(ConfigErrors, InvalidJsonNamesTheFile) {
  ScratchDir dir("cfg");
  write_bytes(dir / "config.json", "{\"vocab_size\": 3,");
  expect_error([&] { load_model_config(dir / "config.json"); }, {(dir / "config.json").string(), "invalid JSON"});
  expect_error([&] { load_model_config(dir / "absent.json"); }, {"absent.json", "cannot open"});
}

}  // namespace
}  // namespace fptrain::models
