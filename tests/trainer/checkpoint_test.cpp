// Checkpoints: transformers loads them and computes the same logits as fptrain;
// they hold the training state the run had; keep_last prunes; resume picks the latest.
#include "attention/varlen_attention.h"
#include "models/causal_lm.h"
#include "models/checkpoint.h"
#include "models/safetensors.h"
#include "tests/trainer/trainer_test_util.h"
#include "trainer/checkpoint_store.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

namespace fptrain::trainer {
namespace {

using namespace testing;

const std::string kShort =
    "batching:\n  examples_per_micro_batch: 4\n"
    "optimizer:\n  lr: 3.0e-3\n"
    "logging:\n  log_interval: 1\n";

TEST(TrainCheckpoint, TransformersLoadsItWithTheSameLogits) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string cfg = dir.write("c.yaml", base_config(run, "chat.jsonl", kShort + "training:\n  max_steps: 6\n"));
  const CommandResult r = run_fptrain({"train", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path ckpt = run / "checkpoints" / checkpoint_name(6);
  ASSERT_TRUE(fs::is_directory(ckpt)) << r.output;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json",
                        "training_state.safetensors", "trainer_state.json", "config.yaml"})
    EXPECT_TRUE(fs::is_regular_file(ckpt / f)) << f;

  // The saved weights are the trained ones (fp32 run: the optimizer's weights), not the initial ones.
  const auto saved = models::read_safetensors(ckpt / "model.safetensors");
  const TrainingState state = load_training_state(ckpt);
  EXPECT_EQ(state.step, 6);
  const auto initial = models::read_safetensors(fixture("llama") / "model.safetensors");
  int checked = 0;
  for (const auto& [key, t] : state.optimizer) {
    if (key.rfind("weight.", 0) != 0) continue;
    const std::string name = key.substr(7);
    ASSERT_TRUE(saved.count(name)) << name;
    EXPECT_TRUE(at::equal(saved.at(name), t)) << name;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(saved.size()));
  EXPECT_FALSE(at::equal(saved.at("model.layers.0.mlp.up_proj.weight"),
                         initial.at("model.layers.0.mlp.up_proj.weight")));

  // transformers' logits on the checkpoint == ours on the same checkpoint.
  const fs::path golden = dir / "hf_logits.safetensors";
  const nlohmann::json info = run_python("hf_logits.py", {"--model", ckpt.string(), "--out", golden.string()});
  ASSERT_FALSE(info.is_null());
  const auto hf = models::read_safetensors(golden);
  at::set_num_threads(1);
  const models::ModelConfig config = models::load_model_config(ckpt / "config.json");
  models::CausalLM model(config, models::load_pretrained_weights(ckpt, config, at::kFloat),
                         attention::Backend::kReference);
  c10::NoGradGuard no_grad;
  for (int i = 0; i < info["num_sequences"].get<int>(); ++i) {
    const at::Tensor ids = hf.at("seq." + std::to_string(i) + ".input_ids");
    const int64_t n = ids.size(0);
    models::PackedInput in;
    in.input_ids = ids;
    in.position_ids = at::arange(n, at::kLong);
    in.cu_seqlens = at::tensor(std::vector<int32_t>{0, static_cast<int32_t>(n)}, at::kInt);
    in.max_seqlen = n;
    const at::Tensor ours = model.logits(in);
    const at::Tensor theirs = hf.at("seq." + std::to_string(i) + ".logits");
    const double err = ((ours - theirs).abs().max() / theirs.abs().max()).item<double>();
    EXPECT_LE(err, 1e-5) << "sequence " << i;
  }
}

TEST(TrainCheckpoint, KeepLastPrunesAndResumePicksTheLatest) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string cfg = dir.write("c.yaml", base_config(run, "chat.jsonl",
      kShort + "training:\n  max_steps: 7\ncheckpoint:\n  interval: 2\n  keep_last: 2\n"));
  const CommandResult r = run_fptrain({"train", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto all = list_checkpoints(run);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].filename(), checkpoint_name(6));
  EXPECT_EQ(all[1].filename(), checkpoint_name(7));  // the final one
  for (const auto& e : fs::directory_iterator(checkpoints_dir(run)))
    EXPECT_NE(e.path().filename().string().front(), '.') << e.path();  // no staging or half-deleted folder

  // Asking for more steps continues from step 7.
  const CommandResult more = run_fptrain({"train", cfg, "--set", "training.max_steps=9"});
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("resumed from"), std::string::npos) << more.output;
  auto records = train_records(run);
  ASSERT_EQ(records.size(), 9u);
  EXPECT_EQ(records.back()["step"].get<int64_t>(), 9);
  // resume: none next to existing checkpoints refuses to mix two runs.
  const CommandResult fresh = run_fptrain({"train", cfg, "--set", "resume=none"});
  EXPECT_EQ(fresh.exit_code, 2) << fresh.output;
  EXPECT_NE(fresh.output.find("holds checkpoints (latest step-00000009)"), std::string::npos) << fresh.output;
  EXPECT_EQ(train_records(run).size(), 9u);
}

// A finished 4-step run in dir/run with checkpoints at steps 2 and 4; returns its config.
std::string train_four_steps_checkpointing_every_two(TempDir& dir) {
  const std::string cfg = dir.write("c.yaml", base_config(dir / "run", "chat.jsonl",
      kShort + "training:\n  max_steps: 4\ncheckpoint:\n  interval: 2\n  keep_last: 5\n"));
  const CommandResult r = run_fptrain({"train", cfg});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return cfg;
}

TEST(TrainCheckpoint, ResumeFromAnExplicitFolder) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string cfg = train_four_steps_checkpointing_every_two(dir);
  ASSERT_FALSE(HasFailure());
  const fs::path step2 = run / "checkpoints" / checkpoint_name(2);
  const CommandResult r = run_fptrain({"train", cfg, "--set", "resume=" + step2.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at step 2"), std::string::npos) << r.output;
  EXPECT_EQ(train_records(run).size(), 4u);
  const CommandResult bad = run_fptrain({"train", cfg, "--set", "resume=" + (dir / "nowhere").string()});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("not auto, none or an existing checkpoint folder"), std::string::npos) << bad.output;
}

TEST(TrainCheckpoint, ADamagedLatestCheckpointNamesTheOneBefore) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string cfg = train_four_steps_checkpointing_every_two(dir);
  ASSERT_FALSE(HasFailure());
  const fs::path step2 = run / "checkpoints" / checkpoint_name(2);
  const fs::path step4 = run / "checkpoints" / checkpoint_name(4);
  fs::resize_file(step4 / "model.safetensors", 100);  // damaged after it was written

  const CommandResult r = run_fptrain({"train", cfg, "--set", "training.max_steps=6"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("while resuming from " + step4.string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("set resume: " + step2.string()), std::string::npos) << r.output;
  EXPECT_EQ(train_records(run).size(), 4u);  // nothing trained, nothing written

  const CommandResult from2 =
      run_fptrain({"train", cfg, "--set", "training.max_steps=6", "--set", "resume=" + step2.string()});
  ASSERT_EQ(from2.exit_code, 0) << from2.output;
  EXPECT_NE(from2.output.find("at step 2"), std::string::npos) << from2.output;
}

}  // namespace
}  // namespace fptrain::trainer
