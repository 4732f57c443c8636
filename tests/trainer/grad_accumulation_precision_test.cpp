// What summing micro-batch gradients in place in a bf16 buffer (autograd adding
// into the flat gradient views) loses against fp32 sums (AdamW::accumulate_gradients),
// measured on a small Llama-shaped model on the CPU, and whether it shows in
// training. The numbers are printed (trainer/README.md quotes them); the
// assertions only keep them from drifting far.
#include "models/causal_lm.h"
#include "models/init.h"
#include "models/parameter_layout.h"
#include "optim/adamw.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

namespace fptrain::trainer {
namespace {

using optim::AdamW;
using optim::OptimizerSection;

models::ModelConfig small_config() {
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                      {"vocab_size", 512},    {"hidden_size", 64},
                      {"intermediate_size", 176}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                      {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-5},
                      {"rope_theta", 10000.0}, {"tie_word_embeddings", false},
                      {"torch_dtype", "float32"}};
  return models::parse_model_config(j, "small");
}

// Micro-batch j: 4 sequences of 48 tokens, each an arithmetic progression mod the
// vocabulary (something a model can learn), packed.
struct MicroBatch {
  models::PackedInput input;
  at::Tensor labels;
};

MicroBatch micro_batch(int64_t j, int64_t vocab) {
  at::manual_seed(1000 + static_cast<uint64_t>(j));
  const int64_t seqs = 4, len = 48;
  const at::Tensor start = at::randint(3, vocab, {seqs, 1}, at::kLong);
  const at::Tensor stride = at::randint(1, 9, {seqs, 1}, at::kLong);
  const at::Tensor ids = (start + stride * at::arange(len, at::kLong).unsqueeze(0)).remainder(vocab - 3) + 3;
  MicroBatch mb;
  mb.input.input_ids = ids.reshape({-1});
  mb.input.position_ids = at::arange(len, at::kLong).repeat({seqs});
  std::vector<int32_t> cu;
  for (int64_t s = 0; s <= seqs; ++s) cu.push_back(static_cast<int32_t>(s * len));
  mb.input.cu_seqlens = at::tensor(cu, at::kInt);
  mb.input.cu_seqlens_cpu = mb.input.cu_seqlens;
  mb.input.max_seqlen = len;
  mb.labels = mb.input.input_ids.clone();
  return mb;
}

struct SmallModel {
  models::ModelConfig config = small_config();
  std::vector<std::string> names = models::parameter_names_in_model_order(config);
  models::TensorMap init = models::init_parameters(config, 7);  // fp32
};

// A model of `dtype` (weights: the init rounded to bf16 first, so fp32 and bf16
// models start from identical values) and its optimizer.
struct Trainee {
  std::unique_ptr<models::CausalLM> model;
  std::unique_ptr<AdamW> opt;
};

Trainee make(const SmallModel& s, at::ScalarType dtype, bool fp32_sums) {
  models::TensorMap params;
  for (const auto& [n, t] : s.init) params[n] = t.to(at::kBFloat16).to(dtype).requires_grad_(true);
  Trainee t;
  t.model = std::make_unique<models::CausalLM>(s.config, params, attention::Backend::kReference);
  std::vector<at::Tensor> list;
  for (const auto& n : s.names) list.push_back(t.model->parameters().at(n));
  OptimizerSection o;
  o.lr = 1e-3;
  o.fp32_grad_accumulation = fp32_sums;
  t.opt = std::make_unique<AdamW>(s.names, list, o);
  return t;
}

void backward(Trainee& t, const MicroBatch& mb, double denominator) {
  const models::LossOutput out = t.model->loss(mb.input, mb.labels);
  (out.loss_sum / denominator).backward();
}

double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).norm().item<double>() / b.to(at::kDouble).norm().item<double>();
}

TEST(TrainGradAccumulationPrecision, Bf16InPlaceSumsAgainstFp32Sums) {
  at::set_num_threads(2);
  const SmallModel s;
  const int64_t kMax = 16;
  const double denominator = 4.0 * 48 * kMax;  // as the trainer: the step's supervised count

  // Each micro-batch's own gradient from the bf16 model and from an fp32 model of the same weights.
  std::vector<at::Tensor> per_mb_bf16, per_mb_fp32;
  {
    Trainee b = make(s, at::kBFloat16, false), f = make(s, at::kFloat, false);
    for (int64_t j = 0; j < kMax; ++j) {
      const MicroBatch mb = micro_batch(j, s.config.vocab_size);
      backward(b, mb, denominator);
      backward(f, mb, denominator);
      per_mb_bf16.push_back(b.opt->flat().gradients().gathered().to(at::kDouble));
      per_mb_fp32.push_back(f.opt->flat().gradients().gathered().to(at::kDouble));
      b.opt->zero_grad();
      f.opt->zero_grad();
    }
  }
  // The same micro-batches accumulated in place (bf16) and in fp32 sums, snapshot after k.
  Trainee inplace = make(s, at::kBFloat16, false), sums = make(s, at::kBFloat16, true);
  at::Tensor exact = at::zeros_like(per_mb_bf16[0]), reference = at::zeros_like(per_mb_bf16[0]);
  std::printf("k   | bf16 in place vs exact sum | fp32 sums vs exact sum | bf16 backward vs fp32 model | "
              "bf16 in place vs fp32 model | fp32 sums vs fp32 model\n");
  for (int64_t j = 0; j < kMax; ++j) {
    const MicroBatch mb = micro_batch(j, s.config.vocab_size);
    backward(inplace, mb, denominator);
    backward(sums, mb, denominator);
    sums.opt->accumulate_gradients();
    exact += per_mb_bf16[static_cast<size_t>(j)];
    reference += per_mb_fp32[static_cast<size_t>(j)];
    const int64_t k = j + 1;
    if ((k & (k - 1)) != 0 || k == 1) continue;  // report k = 2, 4, 8, 16
    const double e_inplace = rel(inplace.opt->flat().gradients().gathered(), exact);
    const double e_sums = rel(sums.opt->accumulator(), exact);
    const double e_backward = rel(exact, reference);
    const double e_inplace_ref = rel(inplace.opt->flat().gradients().gathered(), reference);
    const double e_sums_ref = rel(sums.opt->accumulator(), reference);
    std::printf("%-3lld | %26.2e | %22.2e | %27.2e | %27.2e | %23.2e\n", (long long)k, e_inplace, e_sums, e_backward,
                e_inplace_ref, e_sums_ref);
    EXPECT_LT(e_sums, 1e-6) << k;           // fp32 sums of bf16 values: exact to fp32 rounding
    EXPECT_LT(e_inplace, 2e-2) << k;        // bf16 rounding at every add
    EXPECT_LT(e_inplace_ref, 5e-2) << k;
  }
}

// 20 steps of 8 micro-batches each: the loss of a bf16 model with masters, its
// gradients summed in place in bf16 or in fp32, against an fp32 model.
TEST(TrainGradAccumulationPrecision, TrainingWithBf16SumsFollowsFp32Sums) {
  at::set_num_threads(2);
  const SmallModel s;
  const int64_t steps = 20, k = 8;
  Trainee runs[3] = {make(s, at::kFloat, false), make(s, at::kBFloat16, false), make(s, at::kBFloat16, true)};
  const char* labels[3] = {"fp32 model", "bf16, sums in bf16", "bf16, sums in fp32"};
  std::vector<double> losses[3];
  for (int r = 0; r < 3; ++r) {
    Trainee& t = runs[r];
    const bool fp32_sums = r == 2;
    for (int64_t step = 0; step < steps; ++step) {
      double loss = 0;
      for (int64_t j = 0; j < k; ++j) {
        const MicroBatch mb = micro_batch(step * k + j, s.config.vocab_size);
        const models::LossOutput out = t.model->loss(mb.input, mb.labels);
        (out.loss_sum / (4.0 * 48 * k)).backward();
        if (fp32_sums && j + 1 < k) t.opt->accumulate_gradients();
        loss += out.loss_sum.item<double>();
      }
      t.opt->grad_norm(1.0);
      t.opt->step(3e-3);
      losses[r].push_back(loss / (4.0 * 48 * k));
    }
  }
  double worst[3] = {0, 0, 0};
  for (int r = 1; r < 3; ++r)
    for (int64_t i = 0; i < steps; ++i)
      worst[r] = std::max(worst[r], std::fabs(losses[r][i] - losses[0][i]) / losses[0][i]);
  const double between = [&] {
    double w = 0;
    for (int64_t i = 0; i < steps; ++i) w = std::max(w, std::fabs(losses[1][i] - losses[2][i]) / losses[2][i]);
    return w;
  }();
  for (int r = 0; r < 3; ++r)
    std::printf("%-20s loss %.4f -> %.4f%s\n", labels[r], losses[r].front(), losses[r].back(),
                r ? ("; max relative difference to the fp32 model " + std::to_string(worst[r])).c_str() : "");
  std::printf("bf16 sums vs fp32 sums: max relative loss difference %.2e over %lld steps of %lld micro-batches\n",
              between, (long long)steps, (long long)k);
  EXPECT_LT(losses[0].back(), 0.8 * losses[0].front());  // it trains
  EXPECT_LT(worst[1], 3e-2);
  EXPECT_LT(worst[2], 3e-2);
}

}  // namespace
}  // namespace fptrain::trainer
