// Equalities the loss definition promises: grad-accumulation k with N examples
// per micro-batch equals one micro-batch of k x N; flatten equals pad; a run
// stopped at step 10 and resumed to 20 equals 20 uninterrupted steps, bit for bit.
#include "models/safetensors.h"
#include "optim/flat_adamw.h"
#include "tests/trainer/trainer_test_util.h"
#include "trainer/checkpoint_store.h"

#include <cmath>

namespace fptrain::trainer {
namespace {

using namespace testing;

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-12); }

const std::string kTrain =
    "optimizer:\n  lr: 2.0e-3\n  weight_decay: 0.01\n  grad_clip: 1.0\n"
    "schedule:\n  warmup_steps: 3\n"
    "logging:\n  log_interval: 1\n";

std::vector<nlohmann::json> train(const TempDir& dir, const std::string& name, const std::string& data,
                                  const std::string& extra, const std::vector<std::string>& sets = {}) {
  const fs::path run = dir / name;
  const std::string cfg = dir.write(name + ".yaml", base_config(run, data, kTrain + extra));
  std::vector<std::string> args = {"train", cfg};
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  const CommandResult r = run_fptrain(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return train_records(run);
}

TEST(TrainEquivalence, GradAccumulationEqualsOneLargerMicroBatch) {
  TempDir dir;
  const auto a = train(dir, "accum", "tokens.jsonl",
                       "batching:\n  examples_per_micro_batch: 2\n  grad_accumulation: 4\n"
                       "training:\n  max_steps: 12\n");
  const auto b = train(dir, "single", "tokens.jsonl",
                       "batching:\n  examples_per_micro_batch: 8\n  grad_accumulation: 1\n"
                       "training:\n  max_steps: 12\n");
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["supervised_tokens"], b[i]["supervised_tokens"]);
    EXPECT_LE(rel(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()), 1e-5) << "step " << i + 1;
    EXPECT_LE(rel(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()), 1e-5) << "step " << i + 1;
  }
  const auto wa = models::read_safetensors(dir / "accum/checkpoints/step-00000012/model.safetensors");
  const auto wb = models::read_safetensors(dir / "single/checkpoints/step-00000012/model.safetensors");
  const auto w0 = models::read_safetensors(fixture("llama") / "model.safetensors");
  ASSERT_EQ(wa.size(), wb.size());
  // The runs round differently (sums in another order), and AdamW divides by
  // sqrt(v), which magnifies rounding where gradients are tiny: the final weights
  // agree to 0.1% of how far training moved them.
  for (const auto& [name, t] : wa) {
    const double moved = (t - w0.at(name)).abs().max().item<double>();
    const double diff = (t - wb.at(name)).abs().max().item<double>();
    EXPECT_GT(moved, 0.0) << name;
    EXPECT_LE(diff, 1e-3 * moved) << name;
  }
}

TEST(TrainEquivalence, FlattenAndPadGiveTheSameLoss) {
  TempDir dir;
  const std::string common = "training:\n  max_steps: 8\n";
  const auto flat = train(dir, "flatten", "chat.jsonl",
                          "batching:\n  mode: flatten\n  examples_per_micro_batch: 4\n" + common);
  const auto pad = train(dir, "pad", "chat.jsonl", "batching:\n  mode: pad\n  examples_per_micro_batch: 4\n" + common);
  ASSERT_EQ(flat.size(), 8u);
  ASSERT_EQ(pad.size(), 8u);
  for (size_t i = 0; i < flat.size(); ++i) {
    EXPECT_EQ(flat[i]["supervised_tokens"], pad[i]["supervised_tokens"]);
    EXPECT_EQ(flat[i]["tokens"], pad[i]["tokens"]);  // non-padding tokens
    EXPECT_DOUBLE_EQ(flat[i]["padding_fraction"].get<double>(), 0.0);
    EXPECT_LE(rel(flat[i]["loss"].get<double>(), pad[i]["loss"].get<double>()), 1e-5) << "step " << i + 1;
  }
  double padding = 0;
  for (const auto& p : pad) padding += p["padding_fraction"].get<double>();
  EXPECT_GT(padding, 0.0);  // the pad run really computed padding
}

TEST(TrainEquivalence, StopAndResumeIsBitIdentical) {
  TempDir dir;
  const std::string extra =
      "batching:\n  examples_per_micro_batch: 3\n  grad_accumulation: 2\n"
      "training:\n  max_steps: 20\n  seed: 7\n";
  const std::vector<std::string> shuffled = {"data.shuffle=true"};
  const auto straight = train(dir, "straight", "chat.jsonl", extra, shuffled);
  ASSERT_EQ(straight.size(), 20u);

  // Stop at step 10 (as SIGTERM would: finish, save, exit 0), then the same command resumes.
  const fs::path run = dir / "resumed";
  const std::string cfg = dir.write("resumed.yaml", base_config(run, "chat.jsonl", kTrain + extra));
  const CommandResult first = run_fptrain({"train", cfg, "--set", "data.shuffle=true", "--set", "training.stop_at_step=10"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("stopped by training.stop_at_step after step 10"), std::string::npos) << first.output;
  ASSERT_EQ(train_records(run).size(), 10u);
  const CommandResult second = run_fptrain({"train", cfg, "--set", "data.shuffle=true"});
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from"), std::string::npos) << second.output;
  const auto resumed = train_records(run);
  ASSERT_EQ(resumed.size(), 20u);
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(resumed[i]["step"], straight[i]["step"]);
    EXPECT_EQ(resumed[i]["loss"].get<double>(), straight[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(resumed[i]["grad_norm"].get<double>(), straight[i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
  // Weights, AdamW moments and masters: identical bytes.
  for (const char* file : {"model.safetensors", "training_state.safetensors"}) {
    const auto a = read_file(dir / "straight/checkpoints/step-00000020" / file);
    const auto b = read_file(run / "checkpoints/step-00000020" / file);
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << file << " differs between the straight and the resumed run";
  }
}

TEST(TrainEquivalence, ActivationCheckpointingTrainsIdentically) {
  TempDir dir;
  const std::string extra = "batching:\n  examples_per_micro_batch: 4\n  grad_accumulation: 2\ntraining:\n  max_steps: 6\n";
  const auto plain = train(dir, "plain", "chat.jsonl", extra);
  const auto replayed = train(dir, "ckpt", "chat.jsonl", extra, {"model.activation_checkpointing=every_layer"});
  // model.recompute: plain, each layer recomputed whole from its input alone.
  const auto recomputed_plain = train(dir, "ckpt_plain", "chat.jsonl", extra,
                                      {"model.activation_checkpointing=every_layer", "model.recompute=plain"});
  ASSERT_EQ(plain.size(), 6u);
  for (const auto* ckpt : {&replayed, &recomputed_plain}) {
    ASSERT_EQ(ckpt->size(), 6u);
    for (size_t i = 0; i < plain.size(); ++i) {
      const auto& r = (*ckpt)[i];
      EXPECT_LE(rel(r["loss"].get<double>(), plain[i]["loss"].get<double>()), 1e-6) << "step " << i + 1;
      EXPECT_LE(rel(r["grad_norm"].get<double>(), plain[i]["grad_norm"].get<double>()), 1e-6) << "step " << i + 1;
    }
  }
}

TEST(TrainEquivalence, PackModeEpochTrainsOnEveryExampleOnce) {
  TempDir dir;
  // training.epochs instead of max_steps: the steps are counted from the data first.
  const auto rec = train(dir, "pack", "chat.jsonl",
                         "batching:\n  mode: pack\n  max_tokens: 512\n  grad_accumulation: 2\ntraining:\n  epochs: 1\n");
  ASSERT_FALSE(rec.empty());
  int64_t examples = 0;
  for (const auto& r : rec) {
    examples += r["examples"].get<int64_t>();
    EXPECT_DOUBLE_EQ(r["padding_fraction"].get<double>(), 0.0);
    EXPECT_LE(r["tokens"].get<int64_t>(), 2 * 512);
  }
  EXPECT_EQ(examples, 96);  // every line of chat.jsonl, once
  const auto summary = nlohmann::json::parse(read_file(dir / "pack" / "summary.json"));
  EXPECT_EQ(summary["steps_completed"].get<int64_t>(), static_cast<int64_t>(rec.size()));
  EXPECT_EQ(summary["total_steps"].get<int64_t>(), static_cast<int64_t>(rec.size()));
}

TEST(TrainEquivalence, Bf16WithFp32MasterWeightsFollowsFp32) {
  TempDir dir;
  const std::string extra = "batching:\n  examples_per_micro_batch: 4\n  grad_accumulation: 2\ntraining:\n  max_steps: 8\n";
  const auto fp32 = train(dir, "fp32", "tokens.jsonl", extra);
  const auto bf16 = train(dir, "bf16", "tokens.jsonl", extra, {"model.dtype=bfloat16"});
  ASSERT_EQ(fp32.size(), 8u);
  ASSERT_EQ(bf16.size(), 8u);
  for (size_t i = 0; i < fp32.size(); ++i)
    EXPECT_LE(rel(bf16[i]["loss"].get<double>(), fp32[i]["loss"].get<double>()), 2e-2) << "step " << i + 1;
  // The checkpoint holds bf16 weights: the fp32 masters of the training state, rounded to nearest
  // with ties away from zero (optim/flat_adamw_math.h: ties occur, two tensors here have one).
  const fs::path ckpt = dir / "bf16/checkpoints/step-00000008";
  const auto model = models::read_safetensors(ckpt / "model.safetensors");
  const TrainingState state = load_training_state(ckpt);
  int masters = 0;
  for (const auto& [key, t] : state.optimizer) {
    EXPECT_EQ(t.scalar_type(), at::kFloat) << key;
    if (key.rfind("weight.", 0) != 0) continue;
    const at::Tensor& w = model.at(key.substr(7));
    EXPECT_EQ(w.scalar_type(), at::kBFloat16);
    at::Tensor rounded = at::empty({t.numel()}, at::kBFloat16);
    optim::flat::copy_masters_to_model(t.reshape({-1}), rounded);
    EXPECT_TRUE(at::equal(w, rounded.view(t.sizes()))) << key;
    ++masters;
  }
  EXPECT_EQ(masters, static_cast<int>(model.size()));
}

}  // namespace
}  // namespace fptrain::trainer
