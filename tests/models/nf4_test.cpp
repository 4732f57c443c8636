// NF4 with double quantisation equals bitsandbytes (golden outputs made live by
// bitsandbytes.functional.quantize_4bit / dequantize_4bit on the CPU, QLoRA's
// storage): the dynamic map, the packed indices, the quantised block maxima,
// their scales and offset, and the dequantised weights, for fp32 and bf16
// weights, sizes that are not multiples of the block, several blocks of maxima
// and an all-zero block.
#include "models/nf4.h"
#include "models/nf4_ops.h"
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

TEST(Nf4, RefusesWhatItCannotQuantise) {
  EXPECT_THROW(quantize_nf4(at::ones({4}, at::kLong)), std::invalid_argument);
  EXPECT_THROW(quantize_nf4(at::empty({0})), std::invalid_argument);
}

}  // namespace
}  // namespace fptrain::models
