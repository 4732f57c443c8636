// fptrain's training loop against a reference written with transformers and
// torch.optim.AdamW (reference_train.py), run live on the same examples:
// 30 steps of AdamW with warmup + cosine, clipping and grad-accumulation 2.
#include "tests/trainer/trainer_test_util.h"

#include <cmath>

namespace fptrain::trainer {
namespace {

using namespace testing;

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-12); }

void expect_every_step_matches_reference(const std::string& model) {
  TempDir dir;
  const fs::path run = dir / "run";
  std::string yaml = base_config(run, "tokens.jsonl",
      "batching:\n  mode: flatten\n  examples_per_micro_batch: 4\n  grad_accumulation: 2\n"
      "optimizer:\n  lr: 3.0e-3\n  betas: [0.9, 0.95]\n  eps: 1.0e-8\n  weight_decay: 0.1\n  grad_clip: 1.0\n"
      "schedule:\n  warmup_steps: 5\n  decay: cosine\n  min_lr: 3.0e-4\n"
      "training:\n  max_steps: 30\n"
      "logging:\n  log_interval: 1\n"
      "checkpoint:\n  save_final: false\n");
  const std::string llama = fixture("llama").string();
  yaml.replace(yaml.find(llama), llama.size(), fixture(model).string());
  const std::string cfg = dir.write("train.yaml", yaml);
  const CommandResult r = run_fptrain({"train", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto records = train_records(run);
  ASSERT_EQ(records.size(), 30u) << r.output;

  const nlohmann::json ref = run_python("reference_train.py",
      {"--model", fixture(model).string(), "--data", fixture("tokens.jsonl").string(),
       "--examples-per-micro-batch", "4", "--grad-accum", "2", "--steps", "30", "--lr", "3e-3",
       "--beta1", "0.9", "--beta2", "0.95", "--eps", "1e-8", "--weight-decay", "0.1", "--warmup", "5",
       "--decay", "cosine", "--min-lr", "3e-4", "--clip", "1.0"});
  ASSERT_EQ(ref["loss"].size(), 30u);

  double worst_loss = 0, worst_norm = 0;
  int clipped = 0;
  for (size_t i = 0; i < 30; ++i) {
    const auto& m = records[i];
    EXPECT_EQ(m["step"].get<int64_t>(), static_cast<int64_t>(i + 1));
    // Same examples: the supervised-token count of every step agrees.
    EXPECT_EQ(m["supervised_tokens"].get<int64_t>(), ref["supervised"][i].get<int64_t>()) << "step " << i + 1;
    EXPECT_NEAR(m["lr"].get<double>(), ref["lr"][i].get<double>(), 1e-15);
    const double dl = rel(m["loss"].get<double>(), ref["loss"][i].get<double>());
    const double dn = rel(m["grad_norm"].get<double>(), ref["grad_norm"][i].get<double>());
    EXPECT_LE(dl, 1e-4) << "step " << i + 1 << ": fptrain " << m["loss"] << " reference " << ref["loss"][i];
    EXPECT_LE(dn, 1e-4) << "step " << i + 1 << ": grad norm fptrain " << m["grad_norm"] << " reference "
                        << ref["grad_norm"][i];
    worst_loss = std::max(worst_loss, dl);
    worst_norm = std::max(worst_norm, dn);
    clipped += ref["grad_norm"][i].get<double>() > 1.0;
  }
  // The comparison exercised clipping and the loss went down.
  EXPECT_GT(clipped, 0);
  EXPECT_LT(records.back()["loss"].get<double>(), 0.9 * records.front()["loss"].get<double>());
  std::printf("%s: max relative difference over 30 steps: loss %.3g, grad norm %.3g (%d steps clipped)\n",
              model.c_str(), worst_loss, worst_norm, clipped);
}

TEST(TrainReferenceLoop, EveryStepMatchesTransformersWithTorchAdamW) { expect_every_step_matches_reference("llama"); }

// Qwen3: q/k norms, attention biases, a sliding window layer, tied embeddings.
TEST(TrainReferenceLoop, Qwen3EveryStepMatchesTransformersWithTorchAdamW) {
  expect_every_step_matches_reference("qwen3");
}

// Gemma 2: (1 + w) norms around both blocks, GELU-tanh, soft-capped scores and
// logits, a sliding window layer, scaled tied embeddings.
TEST(TrainReferenceLoop, Gemma2EveryStepMatchesTransformersWithTorchAdamW) {
  expect_every_step_matches_reference("gemma2");
}

// Gemma 3 text: q/k norms, a RoPE per layer type, a final soft-cap.
TEST(TrainReferenceLoop, Gemma3EveryStepMatchesTransformersWithTorchAdamW) {
  expect_every_step_matches_reference("gemma3");
}

}  // namespace
}  // namespace fptrain::trainer
