// Activation checkpointing recomputes layers during backward; the gradients of
// every parameter must equal those of the plain forward/backward.
#include "models/causal_lm.h"
#include "tests/models/model_test_util.h"
#include "models/init.h"
#include "trainer/activation_checkpointing.h"
#include "trainer/checkpoint_planner.h"
#include "trainer/model_setup.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <string_view>

namespace fptrain::trainer {
namespace {

// granite: projection biases (the MLP's down bias goes through the replayed
// projection) and a residual multiplier; gemma2: sandwich norms (o and down are
// not residual-only), soft-capped scores, a window; qwen3: q/k norms. All GQA 4/2.
enum class Family { kLlama, kGranite, kGemma2, kQwen3 };

models::ModelConfig tiny_config(Family family = Family::kLlama) {
  static const std::map<Family, std::pair<const char*, const char*>> kNames = {
      {Family::kLlama, {"LlamaForCausalLM", "llama"}},
      {Family::kGranite, {"GraniteForCausalLM", "granite"}},
      {Family::kGemma2, {"Gemma2ForCausalLM", "gemma2"}},
      {Family::kQwen3, {"Qwen3ForCausalLM", "qwen3"}}};
  const auto& [architecture, type] = kNames.at(family);
  nlohmann::json j = {{"architectures", {architecture}},
                      {"model_type", type},
                      {"vocab_size", 64},     {"hidden_size", 32},
                      {"intermediate_size", 48}, {"num_hidden_layers", 4},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-5},
                      {"rope_theta", 10000.0}, {"tie_word_embeddings", false},
                      {"torch_dtype", "float32"}};
  if (family == Family::kGranite) {
    j["attention_bias"] = true;
    j["mlp_bias"] = true;
    j["residual_multiplier"] = 0.5;
    j["attention_multiplier"] = 0.25;
  }
  if (family == Family::kGemma2) {
    j["head_dim"] = 8;
    j["attn_logit_softcapping"] = 1.5;
    j["final_logit_softcapping"] = 3.0;
    j["query_pre_attn_scalar"] = 8;
    j["sliding_window"] = 4;
  }
  if (family == Family::kQwen3) j["head_dim"] = 8;
  return models::parse_model_config(j, "tiny");
}

const char* family_name(Family f) {
  switch (f) {
    case Family::kLlama: return "llama";
    case Family::kGranite: return "granite";
    case Family::kGemma2: return "gemma2";
    case Family::kQwen3: return "qwen3";
  }
  return "?";
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

// A hook on the runners' switch before the forward (which layers go plain).
using Adjust = std::function<void(CheckpointSwitch&)>;

Grads run(const Checkpointing& setting, Family family = Family::kLlama, const Adjust& adjust = {}) {
  at::set_num_threads(1);  // tiny tensors: threads only add contention when tests run in parallel
  const models::ModelConfig config = tiny_config(family);
  models::TensorMap params = models::init_parameters(config, 5);
  for (auto& [n, t] : params) t.requires_grad_(true);
  models::CausalLM model(config, params, attention::Backend::kReference);
  auto control = set_activation_checkpointing(model, setting, models::testing::trained_parameters(model));
  if (adjust) adjust(*control);
  const at::Tensor loss = packed_loss(model);
  loss.backward();
  Grads g;
  g.loss = loss.detach();
  for (const auto& [n, t] : model.parameters()) g.grads[n] = t.grad().clone();
  return g;
}

void expect_same_bits(const Grads& expected, const Grads& actual, const std::string& what) {
  EXPECT_TRUE(at::equal(expected.loss, actual.loss)) << what;
  ASSERT_EQ(expected.grads.size(), actual.grads.size()) << what;
  for (const auto& [name, g] : expected.grads) {
    const double diff = (g - actual.grads.at(name)).abs().max().item<double>();
    EXPECT_EQ(diff, 0.0) << name << " " << what;
  }
}

// The recomputation replays the projections that feed a residual add (o, down)
// without their products, from the residual the first pass kept (and, with the
// hopper backend, the attention without its forward): the gradients are the
// very bits of the plain backward, biases and the residual multiplier included.
TEST(TrainActivationCheckpointing, GradientsEqualThePlainBackward) {
  for (Family family : {Family::kLlama, Family::kGranite}) {
    const Grads plain = run(Checkpointing::none(), family);
    for (const Checkpointing& k :
         {Checkpointing::every(1), Checkpointing::every(2), Checkpointing::every(3), Checkpointing::selective()})
      expect_same_bits(plain, run(k, family), k.name() + " " + family_name(family));
  }
}

// Plain recomputation keeps only a layer's input and runs it again whole: the same
// bits as no checkpointing and as the replayed recomputation, for every layer plain,
// every other, and a mix (the first layers plain, the rest replayed).
TEST(TrainActivationCheckpointing, PlainRecomputationEqualsReplayedAndNone) {
  const Adjust all_plain = [](CheckpointSwitch& c) { c.all_plain = true; };
  const Adjust first_plain = [](CheckpointSwitch& c) { c.plain = 1; };
  const Adjust half_plain = [](CheckpointSwitch& c) { c.set_plan(4, 0, 2); };
  for (Family family : {Family::kLlama, Family::kGranite, Family::kGemma2, Family::kQwen3}) {
    const std::string f = family_name(family);
    const Grads none = run(Checkpointing::none(), family);
    expect_same_bits(none, run(Checkpointing::every(1), family), "every_layer replayed " + f);
    for (const Checkpointing& k : {Checkpointing::every(1), Checkpointing::every(2), Checkpointing::every(3)}) {
      expect_same_bits(none, run(k, family, all_plain), k.name() + " plain " + f);
      expect_same_bits(none, run(k, family, first_plain), k.name() + " first plain " + f);
    }
    expect_same_bits(none, run(Checkpointing::automatic(), family, half_plain), "auto half plain " + f);
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

// Plain recomputation runs all 7 projections of a layer again; replayed 5; the plain
// layers are the first whole ones; an MLP block recomputes replayed (its tape is empty).
TEST(TrainActivationCheckpointing, PlainRecomputationRunsEveryProjection) {
  at::set_num_threads(1);
  const models::ModelConfig config = tiny_config();  // 4 layers
  struct Case {
    Checkpointing setting;
    Adjust adjust;
    int calls;
  };
  const std::vector<Case> cases = {
      {Checkpointing::every(1), [](CheckpointSwitch& c) { c.all_plain = true; }, 4 * 7},
      {Checkpointing::every(1), [](CheckpointSwitch& c) { c.plain = 1; }, 7 + 3 * 5},
      {Checkpointing::every(2), [](CheckpointSwitch& c) { c.plain = 1; }, 7 + 5},  // layer 0 plain, 2 replayed
      {Checkpointing::automatic(), [](CheckpointSwitch& c) { c.set_plan(3, 1, 2); }, 2 * 7 + 5 + 2},
      {Checkpointing::selective(), [](CheckpointSwitch& c) { c.all_plain = true; }, 4 * 2},
  };
  for (const Case& c : cases) {
    models::TensorMap params = models::init_parameters(config, 5);
    for (auto& [n, t] : params) t.requires_grad_(true);
    models::CausalLM model(config, params, attention::Backend::kReference);
    auto control = set_activation_checkpointing(model, c.setting, models::testing::trained_parameters(model));
    c.adjust(*control);
    EXPECT_EQ(linear_calls_in_backward(packed_loss(model)), c.calls) << c.setting.name();
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
  // Nothing fits: the least memory there is, every layer plain.
  EXPECT_EQ(AutoCheckpointing(llama, int64_t{1} << 30).plan(1), (LayerPlan{32, 0, 32}));
  // The flash kernels keep no scores: long documents cost what short ones do.
  EXPECT_EQ(a.plan(none_max, int64_t{1} << 40), (LayerPlan{0, 0}));
}

// Past every layer replayed, auto switches layers to plain, one by one, as tokens grow
// (Llama-2-7B's shape: H = Q = 4096, no GQA).
TEST(TrainActivationCheckpointing, AutoSwitchesLayersToPlainPastEveryLayerReplayed) {
  const ActivationShape llama2{32, 4096, 4096, 4096, 11008, 2};
  const AutoCheckpointing a(llama2, int64_t{30} << 30);
  const int64_t replayed_max = a.replayed_max_tokens(), plain_max = a.plain_max_tokens();
  EXPECT_GT(replayed_max, a.selective_max_tokens());
  EXPECT_GT(plain_max, replayed_max);
  EXPECT_EQ(a.plan(replayed_max), (LayerPlan{32, 0, 0}));
  EXPECT_EQ(a.plan(replayed_max + 1), (LayerPlan{32, 0, 1}));  // one plain layer is enough
  const LayerPlan between = a.plan((replayed_max + plain_max) / 2);
  EXPECT_EQ(between.recomputed, 32);
  EXPECT_GT(between.plain, 1);
  EXPECT_LT(between.plain, 32);
  EXPECT_EQ(a.plan(plain_max), (LayerPlan{32, 0, 32}));
  EXPECT_EQ(a.plan(plain_max + 1), (LayerPlan{32, 0, 32}));  // beyond: nothing fits, the least memory
  int64_t last = 0;  // more tokens never go plain on fewer layers
  for (int64_t t = replayed_max - 4096; t < plain_max + 4096; t += 512) {
    const LayerPlan p = a.plan(t);
    EXPECT_GE(p.plain, last) << t;
    last = p.plain;
  }
  EXPECT_NE(a.describe().find("above that as many layers as needed recompute plain"), std::string::npos)
      << a.describe();
  EXPECT_NE(a.describe().find(std::to_string(replayed_max)), std::string::npos) << a.describe();
}

// An explicit every_<k> keeps its layers; what grows with tokens is how many of them go plain,
// under the same budget: every_layer never keeps more than plain recomputation would need.
TEST(TrainActivationCheckpointing, EveryLayerGoesPlainWhereReplayedDoesNotFit) {
  const ActivationShape llama2{32, 4096, 4096, 4096, 11008, 2};
  const AutoCheckpointing a(llama2, int64_t{30} << 30);
  const int64_t replayed_max = a.replayed_max_tokens(), plain_max = a.plain_max_tokens();
  EXPECT_EQ(a.every_k_plan(1, 1024), (LayerPlan{32, 0, 0}));  // small batches replay every layer
  EXPECT_EQ(a.every_k_plan(1, replayed_max), (LayerPlan{32, 0, 0}));
  EXPECT_EQ(a.every_k_plan(1, replayed_max + 1), (LayerPlan{32, 0, 1}));
  EXPECT_EQ(a.every_k_plan(1, (replayed_max + plain_max) / 2), a.plan((replayed_max + plain_max) / 2));
  EXPECT_EQ(a.every_k_plan(1, plain_max), (LayerPlan{32, 0, 32}));
  // every_2: 16 layers checkpointed, the other 16 keep everything: plain sooner, and all 16 at most.
  EXPECT_EQ(a.every_k_plan(2, 1024), (LayerPlan{16, 0, 0}));
  const LayerPlan half = a.every_k_plan(2, replayed_max / 2);
  EXPECT_EQ(half.recomputed, 16);
  EXPECT_GT(half.plain, 0);
  EXPECT_EQ(a.every_k_plan(2, plain_max), (LayerPlan{16, 0, 16}));
  EXPECT_EQ(a.every_k_plan(3, 1024).recomputed, 11);
  EXPECT_NE(a.describe_every_k(1).find("every_1 (32 of 32 layers)"), std::string::npos) << a.describe_every_k(1);
}

// model.recompute: replay never goes plain (today's last resort), plain recomputes every whole
// layer plain; both as the planner's candidates, so the thresholds follow.
TEST(TrainActivationCheckpointing, RecomputeSettingFixesReplayedOrPlain) {
  const ActivationShape llama2{32, 4096, 4096, 4096, 11008, 2};
  const AutoCheckpointing replay(llama2, int64_t{30} << 30, Recompute::kReplay);
  const AutoCheckpointing plain(llama2, int64_t{30} << 30, Recompute::kPlain);
  const int64_t huge = 4 * replay.plain_max_tokens();
  EXPECT_EQ(replay.plan(huge), (LayerPlan{32, 0, 0}));
  EXPECT_EQ(replay.every_k_plan(1, huge), (LayerPlan{32, 0, 0}));
  EXPECT_EQ(replay.plain_max_tokens(), replay.replayed_max_tokens());
  EXPECT_EQ(plain.every_k_plan(1, 1), (LayerPlan{32, 0, 32}));
  EXPECT_EQ(plain.plan(1), (LayerPlan{0, 0, 0}));  // nothing recomputed: nothing plain
  const LayerPlan p = plain.plan(plain.selective_max_tokens() + 1);
  EXPECT_GT(p.recomputed, 0);
  EXPECT_EQ(p.plain, p.recomputed);
  // Plain whole layers keep less than replayed ones: fewer of them are needed.
  const AutoCheckpointing either(llama2, int64_t{30} << 30);
  EXPECT_LE(p.recomputed, either.plan(plain.selective_max_tokens() + 1).recomputed);
  EXPECT_GT(plain.plain_max_tokens(), replay.plain_max_tokens());
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
  // Only our kernels replay the attention: elsewhere a replayed layer's tape is b 2H, not b (2H + Q).
  EXPECT_FALSE(flash.attention_replayed);
  EXPECT_FALSE(ref.attention_replayed);
  EXPECT_TRUE(activation_shape(gemma2, at::kBFloat16, attention::Backend::kHopper).attention_replayed);
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

// The recomputed block's output is only the root of its backward: its memory is given back
// before that backward runs (the block's saved tensors are what it reads), unless another
// tensor shares it, and the gradients stay those of the plain expression.
TEST(TrainActivationCheckpointing, TheRecomputedOutputIsFreedBeforeItsBackward) {
  for (const bool shared : {false, true}) {
    const at::Tensor w = at::full({4}, 3.0).requires_grad_(true);
    const at::Tensor hidden = at::arange(4, at::kFloat).requires_grad_(true);
    const c10::StorageImpl* recomputed = nullptr;
    at::Tensor kept;  // shares the recomputed output when `shared`
    int64_t bytes_in_backward = -1;
    const LayerFunction run = [&](const at::Tensor& h) {
      at::Tensor mid = h * w;
      at::Tensor out = mid + h;
      if (at::GradMode::is_enabled()) {  // the recomputation
        recomputed = out.storage().unsafeGetStorageImpl();
        if (shared) kept = out;
        mid.register_hook([&](const at::Tensor& g) {
          bytes_in_backward = static_cast<int64_t>(recomputed->nbytes());
          return g;
        });
      }
      return out;
    };
    checkpointed_layer(hidden, run, {w}).sum().backward();
    const int64_t whole = 4 * static_cast<int64_t>(sizeof(float));
    EXPECT_EQ(bytes_in_backward, shared ? whole : 0) << (shared ? "shared" : "sole owner");
    if (shared) EXPECT_TRUE(at::equal(kept, at::arange(4, at::kFloat) * 4));
    EXPECT_TRUE(at::equal(w.grad(), at::arange(4, at::kFloat)));
    EXPECT_TRUE(at::equal(hidden.grad(), at::full({4}, 4.0)));
  }
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
