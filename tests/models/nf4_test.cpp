// NF4 with double quantisation equals bitsandbytes (golden outputs made live by
// bitsandbytes.functional.quantize_4bit / dequantize_4bit on the CPU, QLoRA's
// storage): the dynamic map, the packed indices, the quantised block maxima,
// their scales and offset, and the dequantised weights, for fp32 and bf16
// weights, sizes that are not multiples of the block, several blocks of maxima
// and an all-zero block.
#include "models/nf4.h"
#include "models/nf4_checkpoint.h"
#include "models/nf4_ops.h"
#include "common/json_input.h"
#include "models/safetensors.h"
#include "tests/models/model_test_util.h"

#include <gtest/gtest.h>

namespace fptrain::models {
namespace {

TensorMap golden() { return read_safetensors(testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "nf4-golden.safetensors"); }

TEST(Nf4, DynamicMapIsBitsandbytesOwn) {
  EXPECT_TRUE(at::equal(dynamic_map_levels(at::kCPU), golden().at("dynamic_map")));
}

class Nf4Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Nf4Golden, QuantisesAndDequantisesAsBitsandbytes) {
  const TensorMap g = golden();
  const std::string n = GetParam();
  const Nf4Tensor q = quantize_nf4(g.at(n + ".weight"));
  // The packed indices: the same bits (bitsandbytes quantises the weights in the reference algorithm).
  EXPECT_TRUE(at::equal(q.codes, g.at(n + ".codes"))) << n;
  // bitsandbytes' CPU kernel quantises the maxima itself (its own rounding at midpoints).
  const at::Tensor code_step = (q.absmax_codes.to(at::kInt) - g.at(n + ".absmax_codes").to(at::kInt)).abs();
  EXPECT_LE(code_step.max().item<int>(), 1) << n;
  EXPECT_LE(code_step.ne(0).to(at::kDouble).mean().item<double>(), 0.01) << n;
  EXPECT_TRUE(at::allclose(q.absmax_scales, g.at(n + ".absmax_scales"), 0, 0)) << n;
  EXPECT_EQ(q.absmax_offset.item<float>(), g.at(n + ".absmax_offset").item<float>()) << n;
  const at::Tensor w = dequantize_nf4(q);
  EXPECT_EQ(w.scalar_type(), g.at(n + ".weight").scalar_type());
  EXPECT_EQ(w.sizes(), g.at(n + ".weight").sizes());
  const at::Tensor want = g.at(n + ".dequantized");
  // A maximum one dynamic level apart (above) moves its block's values by that level's step.
  const double differing = (w != want).to(at::kDouble).mean().item<double>();
  EXPECT_LE(differing, 0.01) << n << ": dequantised values that differ from bitsandbytes'";
  EXPECT_LT(((w.to(at::kDouble) - want.to(at::kDouble)).norm() / want.to(at::kDouble).norm()).item<double>(), 1e-3) << n;
  // Storage: 4 bits per weight plus 8 bits per 64 and 32 per 16384.
  EXPECT_LE(q.nbytes(), q.numel() / 2 + q.numel() / 64 + q.numel() / 4096 + 16);
  // And bitsandbytes' own packed state dequantises to its values here.
  Nf4Tensor theirs = q;
  theirs.codes = g.at(n + ".codes");
  theirs.absmax_codes = g.at(n + ".absmax_codes");
  theirs.absmax_scales = g.at(n + ".absmax_scales");
  theirs.absmax_offset = g.at(n + ".absmax_offset");
  EXPECT_TRUE(at::equal(dequantize_nf4(theirs), want)) << n;
}

INSTANTIATE_TEST_SUITE_P(Weights, Nf4Golden, ::testing::Values("a", "b", "c", "d"));

// A 4-bit base, quantised tensor by tensor while it loads: the model's map keeps only the
// projections' shapes, and the model computes exactly what its dequantised weights compute
// (logits, loss, and the gradient reaching the embeddings' output through every layer).
TEST(Nf4, QuantisedWhileLoadingAndComputesItsDequantisedWeights) {
  const std::filesystem::path dir = testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "qwen2";
  const ModelConfig config = load_model_config(dir / "config.json");
  Nf4Loader loader;
  LoadOptions options;
  options.keep = [&loader](const std::string& name, const at::Tensor& t) { return loader.keep(name, t); };
  CausalLM quantized(config, load_pretrained_weights(dir, config, at::kFloat, at::kCPU, options),
                     attention::Backend::kReference);
  const auto weights = Nf4Weights::from(loader.take(), quantized.projections());
  int64_t held = 0;
  for (const Projection& p : quantized.projections()) held += p.weight->storage().nbytes();
  EXPECT_EQ(held, static_cast<int64_t>(quantized.projections().size() * sizeof(float)));  // shapes only
  quantized.set_ops(std::make_shared<Nf4Ops>(make_decoder_ops(at::kCPU, true, attention::Backend::kReference), weights));
  CausalLM plain(config, weights->dequantized(quantized.parameters(), quantized.projections()),
                 attention::Backend::kReference);
  // The dequantised weights are near the originals (NF4's error), not equal.
  const TensorMap original = load_pretrained_weights(dir, config, at::kFloat, at::kCPU);
  const std::string q0 = "model.layers.0.self_attn.q_proj.weight";
  const double err = ((plain.parameters().at(q0) - original.at(q0)).norm() / original.at(q0).norm()).item<double>();
  EXPECT_GT(err, 1e-3);
  EXPECT_LT(err, 0.15);
  const testing::Golden golden(testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "qwen2-golden.safetensors");
  const testing::Packed p = testing::pack(golden.examples(), at::kCPU);
  EXPECT_TRUE(at::equal(quantized.logits(p.input), plain.logits(p.input)));
  auto input_grad = [&](CausalLM& m) {
    m.set_before_stage(nullptr);
    const at::Tensor embed = m.parameters().at("model.embed_tokens.weight");  // shared by both models
    embed.mutable_grad().reset();
    embed.requires_grad_(true);
    m.loss(p.input, p.labels).loss_sum.backward();
    at::Tensor g = embed.grad().clone();
    embed.requires_grad_(false);
    return g;
  };
  EXPECT_TRUE(at::allclose(input_grad(quantized), input_grad(plain), 1e-6, 1e-9));
}

// A 4-bit checkpoint as bitsandbytes stores it (transformers' save_pretrained of a load_in_4bit
// model, sharded so one weight's parts span files): read as stored, each projection dequantises
// to bitsandbytes' own values, the other tensors are the original's, and the packed row's logits
// are those of transformers' model with the dequantised weights.
TEST(Nf4, ReadsBitsandbytesFourBitCheckpoints) {
  const std::filesystem::path dir = testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "llama-nf4";
  const ModelConfig config = load_model_config(dir / "config.json");
  ASSERT_TRUE(config.bnb_nf4);
  EXPECT_FALSE(model_config_to_json(config).contains("quantization_config"));  // what fptrain saves is not 4-bit
  Nf4Loader loader;
  LoadOptions options;
  options.keep_quantized = [&loader](const std::string& name, Nf4Tensor q) {
    return loader.keep_quantized(name, std::move(q));
  };
  CausalLM model(config, load_pretrained_weights(dir, config, at::kFloat, at::kCPU, options),
                 attention::Backend::kReference);
  const auto weights = Nf4Weights::from(loader.take(), model.projections());
  const TensorMap want = read_safetensors(testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "llama-nf4-golden.safetensors");
  const TensorMap dequantized = weights->dequantized(model.parameters(), model.projections());
  const std::filesystem::path original_dir = testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "llama";
  const TensorMap original = load_pretrained_weights(original_dir, load_model_config(original_dir / "config.json"),
                                                     at::kFloat, at::kCPU);
  for (const auto& [name, t] : dequantized) {
    auto it = want.find(name + ".dequantized");
    if (it != want.end()) {
      EXPECT_TRUE(at::equal(t, it->second)) << name;
    } else {
      EXPECT_TRUE(at::equal(t, original.at(name))) << name;
    }
  }
  EXPECT_EQ(model.projections().size(), 14u);
  model.set_ops(std::make_shared<Nf4Ops>(make_decoder_ops(at::kCPU, true, attention::Backend::kReference), weights));
  const testing::Golden golden(testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "llama-golden.safetensors");
  const testing::Packed p = testing::pack(golden.examples(), at::kCPU);
  EXPECT_LT((model.logits(p.input) - want.at("pack.logits")).abs().max().item<double>(), 1e-5);
}

// What a 4-bit checkpoint needs and what it may not hold, each refused naming the tensor or key.
TEST(Nf4, RefusesFourBitCheckpointsItCannotRead) {
  const std::filesystem::path dir = testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "llama-nf4";
  const ModelConfig config = load_model_config(dir / "config.json");
  try {  // without the QLoRA hook: the weights cannot become ordinary parameters
    load_pretrained_weights(dir, config, at::kFloat, at::kCPU);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("adapter.type: qlora"), std::string::npos) << e.what();
  }
  const nlohmann::json doc = common::read_json_file((dir / "config.json").string());
  auto refused = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json changed = doc;
    changed["quantization_config"][key] = value;
    try {
      parse_model_config(changed, "config.json");
      return std::string("accepted");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(refused("bnb_4bit_quant_type", "fp4").find("quantization_config.bnb_4bit_quant_type"), std::string::npos);
  EXPECT_NE(refused("bnb_4bit_use_double_quant", false).find("double"), std::string::npos);
  EXPECT_NE(refused("load_in_4bit", false).find("load_in_4bit"), std::string::npos);
  EXPECT_NE(refused("quant_method", "gptq").find("gptq"), std::string::npos);
  EXPECT_NE(refused("llm_int8_skip_modules", nlohmann::json::array({"q_proj"})).find("llm_int8_skip_modules"),
            std::string::npos);
  EXPECT_EQ(refused("llm_int8_skip_modules", nlohmann::json::array({"lm_head"})), "accepted");

  // A part that disagrees with the format names the tensor.
  const std::string w = "model.layers.0.self_attn.q_proj.weight";
  const std::vector<int64_t> shape = {64, 64};
  std::map<std::string, at::Tensor> parts;
  for (const auto& [name, s] : nf4_checkpoint_parts(w, shape)) {
    const std::string suffix = name.substr(w.size());
    if (s == std::vector<int64_t>{-1}) continue;  // the JSON, below
    parts[suffix] = suffix == ".nested_absmax" ? at::ones(s) : at::zeros(s, at::kByte);
  }
  parts[".quant_map"] = nf4_levels(at::kCPU);
  parts[".nested_quant_map"] = dynamic_map_levels(at::kCPU);
  auto state = [](const std::string& text) {
    return at::tensor(std::vector<uint8_t>(text.begin(), text.end()), at::kByte);
  };
  parts[".quant_state.bitsandbytes__nf4"] = state(
      R"({"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [64, 64], "nested_blocksize": 256,)"
      R"( "nested_dtype": "float32", "nested_offset": 0.25})");
  const Nf4Tensor q = nf4_from_checkpoint(w, parts, shape, at::kFloat);
  EXPECT_EQ(q.absmax_offset.item<float>(), 0.25f);
  auto error = [&](std::map<std::string, at::Tensor> changed, const std::vector<int64_t>& s = {64, 64}) {
    try {
      nf4_from_checkpoint(w, changed, s, at::kFloat);
      return std::string("accepted");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_NE(error(parts, {64, 128}).find("shape"), std::string::npos);
  auto changed = parts;
  changed[".quant_map"] = nf4_levels(at::kCPU) * 2;
  EXPECT_NE(error(changed).find(w + ".quant_map"), std::string::npos);
  changed = parts;
  changed[".absmax"] = at::zeros({3}, at::kByte);
  EXPECT_NE(error(changed).find(w + ".absmax"), std::string::npos);
  changed = parts;
  changed[".quant_state.bitsandbytes__nf4"] = state("{\"quant_type\": \"fp4\"");
  EXPECT_NE(error(changed).find("invalid JSON"), std::string::npos);
  changed = parts;
  changed.erase(".nested_absmax");
  EXPECT_NE(error(changed).find(w + ".nested_absmax"), std::string::npos);
}

TEST(Nf4, RefusesWhatItCannotQuantise) {
  EXPECT_THROW(quantize_nf4(at::ones({4}, at::kLong)), std::invalid_argument);
  EXPECT_THROW(quantize_nf4(at::empty({0})), std::invalid_argument);
}

}  // namespace
}  // namespace fptrain::models
