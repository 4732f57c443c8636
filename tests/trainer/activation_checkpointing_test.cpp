// Activation checkpointing recomputes layers during backward; the gradients of
// every parameter must equal those of the plain forward/backward.
#include "models/causal_lm.h"
#include "tests/models/model_test_util.h"
#include "models/init.h"
#include "trainer/activation_checkpointing.h"
#include "trainer/model_setup.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string_view>

namespace fptrain::trainer {
namespace {

// granite: projection biases (the MLP's down bias goes through the replayed
// projection) and a residual multiplier.
models::ModelConfig tiny_config(bool granite = false) {
  nlohmann::json j = {{"architectures", {granite ? "GraniteForCausalLM" : "LlamaForCausalLM"}},
                      {"model_type", granite ? "granite" : "llama"},
                      {"vocab_size", 64},     {"hidden_size", 32},
                      {"intermediate_size", 48}, {"num_hidden_layers", 4},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-5},
                      {"rope_theta", 10000.0}, {"tie_word_embeddings", false},
                      {"torch_dtype", "float32"}};
  if (granite) {
    j["attention_bias"] = true;
    j["mlp_bias"] = true;
    j["residual_multiplier"] = 0.5;
    j["attention_multiplier"] = 0.25;
  }
  return models::parse_model_config(j, "tiny");
}

struct Grads {
  at::Tensor loss;
  std::map<std::string, at::Tensor> grads;
};

// The loss of one packed micro-batch (4 sequences, the first token of each unsupervised).
at::Tensor packed_loss(const models::CausalLM& model) {
  at::manual_seed(1);
  const std::vector<int64_t> lengths = {7, 1, 12, 5};
  std::vector<int32_t> cu = {0};
  std::vector<int64_t> pos;
  for (int64_t l : lengths) {
    cu.push_back(cu.back() + static_cast<int32_t>(l));
    for (int64_t i = 0; i < l; ++i) pos.push_back(i);
  }
  const int64_t T = cu.back();
  models::PackedInput in;
  in.input_ids = at::randint(0, 64, {T}, at::kLong);
  in.position_ids = at::tensor(pos, at::kLong);
  in.cu_seqlens = at::tensor(std::vector<int32_t>(cu.begin(), cu.end()), at::kInt);
  in.max_seqlen = 12;
  at::Tensor labels = in.input_ids.clone();
  for (size_t i = 0; i + 1 < cu.size(); ++i) labels[cu[i]] = -100;

  return model.loss(in, labels).loss_sum;
}

Grads run(const Checkpointing& setting, bool granite = false) {
  at::set_num_threads(1);  // tiny tensors: threads only add contention when tests run in parallel
  const models::ModelConfig config = tiny_config(granite);
  models::TensorMap params = models::init_parameters(config, 5);
  for (auto& [n, t] : params) t.requires_grad_(true);
  models::CausalLM model(config, params, attention::Backend::kReference);
  set_activation_checkpointing(model, setting, models::testing::trained_parameters(model));
  const at::Tensor loss = packed_loss(model);
  loss.backward();
  Grads g;
  g.loss = loss.detach();
  for (const auto& [n, t] : model.parameters()) g.grads[n] = t.grad().clone();
  return g;
}

// The recomputation replays the projections that feed a residual add (o, down)
// without their products, from the residual the first pass kept (and, with the
// hopper backend, the attention without its forward): the gradients are the
// very bits of the plain backward, biases and the residual multiplier included.
TEST(TrainActivationCheckpointing, GradientsEqualThePlainBackward) {
  for (bool granite : {false, true}) {
    const Grads plain = run(Checkpointing::none(), granite);
    for (const Checkpointing& k :
         {Checkpointing::every(1), Checkpointing::every(2), Checkpointing::every(3), Checkpointing::selective()}) {
      const Grads ckpt = run(k, granite);
      EXPECT_TRUE(at::equal(plain.loss, ckpt.loss)) << k.name();
      ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
      for (const auto& [name, g] : plain.grads) {
        const at::Tensor& h = ckpt.grads.at(name);
        const double scale = g.abs().max().item<double>() + 1e-30;
        const double diff = (g - h).abs().max().item<double>();
        EXPECT_EQ(diff, 0.0) << name << " " << k.name() << (granite ? " granite" : "");
      }
    }
  }
}

std::atomic<int> g_linear_calls{0};
std::unique_ptr<at::ObserverContext> count_linear(const at::RecordFunction& fn) {
  if (std::string_view(fn.name()) == "aten::linear") ++g_linear_calls;
  return nullptr;
}

// How many aten::linear calls the backward of `loss` makes (the recomputed projections).
int linear_calls_in_backward(const at::Tensor& loss) {
  g_linear_calls = 0;
  const at::CallbackHandle handle =
      at::addGlobalCallback(at::RecordFunctionCallback(count_linear).scopes({at::RecordScope::FUNCTION}));
  loss.backward();
  at::removeCallback(handle);
  return g_linear_calls.load();
}

// The saving itself (the gradients above would match without it): the
// recomputation in the backward runs 5 of a layer's 7 projections (q, k, v,
// gate, up; o and down are replayed without their products), selective's MLP
// recomputation 2 of its 3.
TEST(TrainActivationCheckpointing, RecomputationSkipsTheReplayedProjections) {
  at::set_num_threads(1);
  const models::ModelConfig config = tiny_config();
  const std::vector<std::pair<Checkpointing, int>> cases = {
      {Checkpointing::every(1), 5}, {Checkpointing::every(2), 5}, {Checkpointing::selective(), 2}};
  for (const auto& [setting, per_layer] : cases) {
    models::TensorMap params = models::init_parameters(config, 5);
    for (auto& [n, t] : params) t.requires_grad_(true);
    models::CausalLM model(config, params, attention::Backend::kReference);
    set_activation_checkpointing(model, setting, models::testing::trained_parameters(model));
    const at::Tensor loss = packed_loss(model);
    const int calls = linear_calls_in_backward(loss);
    const int64_t k = setting.every_k;
    const int64_t recomputed = setting == Checkpointing::selective() ? config.num_hidden_layers
                                                                     : (config.num_hidden_layers + k - 1) / k;
    EXPECT_EQ(calls, per_layer * recomputed) << setting.name();
  }
}

// auto starts as none and picks, per micro-batch and layer by layer, the cheapest plan that
// fits: MLPs recomputed in as few layers as needed, then whole layers.
TEST(TrainActivationCheckpointing, AutoPicksTheCheapestPlanThatFits) {
  const Grads plain = run(Checkpointing::none());
  const Grads automatic = run(Checkpointing::automatic());  // starts as none: the very same computation
  EXPECT_TRUE(at::equal(plain.loss, automatic.loss));
  for (const auto& [name, g] : plain.grads) EXPECT_TRUE(at::equal(g, automatic.grads.at(name))) << name;
  const ActivationShape llama{32, 4096, 4096, 1024, 14336, 2};
  const AutoCheckpointing a(llama, int64_t{40} << 30);
  const int64_t none_max = a.none_max_tokens(), selective_max = a.selective_max_tokens();
  EXPECT_GT(none_max, 0);
  EXPECT_GT(selective_max, none_max);
  EXPECT_EQ(a.plan(none_max), (LayerPlan{0, 0}));
  const LayerPlan just_over = a.plan(none_max + 1);  // one layer's MLP recomputed is enough
  EXPECT_EQ(just_over, (LayerPlan{0, 1}));
  const LayerPlan between = a.plan((none_max + selective_max) / 2);
  EXPECT_EQ(between.recomputed, 0);
  EXPECT_GT(between.selective, 1);
  EXPECT_LT(between.selective, 32);
  EXPECT_EQ(a.plan(selective_max), (LayerPlan{0, 32}));
  const LayerPlan beyond = a.plan(selective_max + selective_max / 4);  // some whole layers, the rest selective
  EXPECT_GT(beyond.recomputed, 0);
  EXPECT_EQ(beyond.recomputed + beyond.selective, 32);
  int64_t last = 0;  // more tokens never recompute less
  for (int64_t t = 1024; t < 4 * selective_max; t += 1024) {
    const LayerPlan p = a.plan(t);
    const int64_t work = 2 * p.recomputed + p.selective;
    EXPECT_GE(work, last) << t;
    last = work;
  }
  EXPECT_EQ(AutoCheckpointing(llama, int64_t{1} << 30).plan(1), (LayerPlan{32, 0}));  // nothing fits
  // The flash kernels keep no scores: long documents cost what short ones do.
  EXPECT_EQ(a.plan(none_max, int64_t{1} << 40), (LayerPlan{0, 0}));
}

// A plan of the first layers recomputed whole and the next ones' MLPs: the same gradients
// as the plain backward, and exactly those blocks recomputed (5 projections for a whole
// layer, 2 for an MLP).
TEST(TrainActivationCheckpointing, ALayerPlanRecomputesExactlyItsLayers) {
  at::set_num_threads(1);
  const models::ModelConfig config = tiny_config();  // 4 layers
  const Grads plain = run(Checkpointing::none());
  for (const LayerPlan plan : {LayerPlan{0, 1}, LayerPlan{0, 3}, LayerPlan{1, 2}, LayerPlan{2, 2}, LayerPlan{4, 0}}) {
    models::TensorMap params = models::init_parameters(config, 5);
    for (auto& [n, t] : params) t.requires_grad_(true);
    models::CausalLM model(config, params, attention::Backend::kReference);
    auto control = set_activation_checkpointing(model, Checkpointing::automatic(),
                                                models::testing::trained_parameters(model));
    control->set_plan(plan.recomputed, plan.selective);
    const at::Tensor loss = packed_loss(model);
    EXPECT_EQ(linear_calls_in_backward(loss), 5 * plan.recomputed + 2 * plan.selective)
        << plan.recomputed << " whole, " << plan.selective << " MLPs";
    EXPECT_TRUE(at::equal(plain.loss, loss.detach()));
    for (const auto& [name, t] : model.parameters())
      EXPECT_TRUE(at::equal(plain.grads.at(name), t.grad())) << name;
  }
}

// A backend that materialises the scores (the reference, Gemma 2's at head_dim 256) keeps
// sum(L_i^2) of them per layer: long documents move auto to more recomputation at equal tokens.
TEST(TrainActivationCheckpointing, AutoCountsAMaterialisedAttentionsScores) {
  models::ModelConfig gemma2 = tiny_config();
  gemma2.num_hidden_layers = 42;
  gemma2.hidden_size = 3584;
  gemma2.num_attention_heads = 16;
  gemma2.num_key_value_heads = 8;
  gemma2.head_dim = 256;
  gemma2.intermediate_size = 14336;
  gemma2.gemma = true;
  gemma2.attn_logit_softcap = 50.0;
  const ActivationShape flash = activation_shape(gemma2, at::kBFloat16, attention::Backend::kTorchFA2);
  const ActivationShape ref = activation_shape(gemma2, at::kBFloat16, attention::Backend::kReference);
  EXPECT_EQ(flash.score_bytes, 0);
  EXPECT_EQ(ref.score_bytes, 16 * (4 + 2 + 2) + 1);  // fp32 softmax, its bf16 copy, the tanh; the mask
  EXPECT_EQ(ref.extra_per_token, 2 * 2 * 3584);       // the norms after attention and MLP
  const AutoCheckpointing a(ref, int64_t{19} << 29);  // 9.5 GiB free, as a 9B leaves on an 80 GB card
  const LayerPlan short_docs = a.plan(1500, 1500);   // 1500 one-token documents
  const LayerPlan long_docs = a.plan(1500, 4 * 375 * 375);  // four documents of 375
  EXPECT_EQ(short_docs, a.plan(1500, 0));
  EXPECT_GT(2 * long_docs.recomputed + long_docs.selective, 2 * short_docs.recomputed + short_docs.selective);
  EXPECT_GT(long_docs.recomputed, 0);
  EXPECT_EQ(attention_scores({0, 3, 3, 7}), 9 + 0 + 16);
}

TEST(TrainActivationCheckpointing, NoGradForwardIsUnaffected) {
  const models::ModelConfig config = tiny_config();
  models::TensorMap params = models::init_parameters(config, 5);
  models::CausalLM model(config, params, attention::Backend::kReference);
  set_activation_checkpointing(model, Checkpointing::every(1), models::testing::trained_parameters(model));
  models::PackedInput in;
  in.input_ids = at::arange(10, at::kLong);
  in.position_ids = at::arange(10, at::kLong);
  in.cu_seqlens = at::tensor(std::vector<int32_t>{0, 10}, at::kInt);
  in.max_seqlen = 10;
  const at::Tensor a = model.logits(in);
  set_activation_checkpointing(model, Checkpointing::none(), models::testing::trained_parameters(model));
  EXPECT_TRUE(at::equal(a, model.logits(in)));
}

}  // namespace
}  // namespace fptrain::trainer
