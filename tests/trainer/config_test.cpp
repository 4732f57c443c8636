// The YAML configuration: values land in the struct, every value is validated,
// unknown keys name the file, line and nearest valid key, --set behaves the
// same, every key is documented and every example config is valid.
#include "trainer/config.h"

#include "tests/trainer/trainer_test_util.h"

#include <gtest/gtest.h>

#include <regex>

namespace fptrain::trainer {
namespace {

using testing::read_file;
using testing::source_file;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

const char* kFull = R"(# a complete configuration
model:
  path: /models/llama
  dtype: bfloat16
  attention: torch-fa2
  activation_checkpointing: every_2
data:
  train:
    - /data/a.jsonl
    - {path: /data/b.jsonl, weight: 0.5, format: messages}
  eval: /data/eval.jsonl
  max_length: 1024
  overlong: drop
  bad_lines: skip
  chat_template: llama3
  loss_mask: last_assistant
  pad_id: 7
  shuffle: false
  workers: 3
batching:
  mode: pack
  max_tokens: 8192
  grad_accumulation: 4
optimizer:
  lr: 1.0e-4
  betas: [0.9, 0.95]
  eps: 1.0e-6
  weight_decay: 0.1
  master_weights: false
  grad_clip: 0.5
schedule:
  warmup_steps: 10
  decay: linear
  min_lr: 1.0e-5
training:
  max_steps: 100
  seed: 42
logging:
  log_interval: 5
  eval_interval: 50
checkpoint:
  interval: 25
  keep_last: 3
output_dir: runs/x
resume: none
device: cuda:1
)";

TEST(TrainConfig, EveryValueLandsInTheStruct) {
  const TrainConfig c = parse_config(kFull, "full.yaml");
  EXPECT_EQ(c.model.path, "/models/llama");
  EXPECT_EQ(c.model.dtype, ModelDtype::kBFloat16);
  EXPECT_EQ(c.model.attention, AttentionChoice::kTorchFA2);
  EXPECT_EQ(c.model.activation_checkpointing, Checkpointing::every(2));
  ASSERT_EQ(c.data.train.size(), 2u);
  EXPECT_EQ(c.data.train[1].path, "/data/b.jsonl");
  EXPECT_DOUBLE_EQ(c.data.train[1].weight, 0.5);
  EXPECT_EQ(c.data.train[1].format, data::ExampleFormat::kMessages);
  ASSERT_EQ(c.data.eval.size(), 1u);
  EXPECT_EQ(c.data.max_length, 1024);
  EXPECT_EQ(c.data.overlong, data::OverlongPolicy::kDrop);
  EXPECT_EQ(c.data.bad_lines, data::BadLinePolicy::kSkip);
  EXPECT_EQ(c.data.chat_template, data::ChatTemplateKind::kLlama3);
  EXPECT_EQ(c.data.loss_mask, data::ChatLossMask::kLastAssistant);
  EXPECT_EQ(c.data.pad_id.value_or(-1), 7);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.data.workers, 3);
  EXPECT_EQ(c.batching.mode, data::BatchMode::kPack);
  EXPECT_EQ(c.batching.max_tokens, 8192);
  EXPECT_EQ(c.batching.grad_accumulation, 4);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_FALSE(c.optimizer.master_weights);
  EXPECT_DOUBLE_EQ(c.optimizer.grad_clip, 0.5);
  EXPECT_EQ(c.schedule.warmup_steps, 10);
  EXPECT_EQ(c.schedule.decay, LrDecay::kLinear);
  EXPECT_DOUBLE_EQ(c.schedule.min_lr, 1e-5);
  EXPECT_EQ(c.training.max_steps, 100);
  EXPECT_EQ(c.training.seed, 42u);
  EXPECT_EQ(c.logging.log_interval, 5);
  EXPECT_EQ(c.logging.eval_interval, 50);
  EXPECT_EQ(c.checkpoint.interval, 25);
  EXPECT_EQ(c.checkpoint.keep_last, 3);
  EXPECT_EQ(c.output_dir, "runs/x");
  EXPECT_EQ(c.resume, "none");
  EXPECT_EQ(c.device, "cuda:1");
  EXPECT_NO_THROW(validate(c));
}

TEST(TrainConfig, ResolvedYamlReadsBackIdentically) {
  const TrainConfig c = parse_config(kFull, "full.yaml");
  const std::string yaml = to_yaml(c);
  const TrainConfig again = parse_config(yaml, "resolved.yaml");
  EXPECT_EQ(to_yaml(again), yaml);
}

TEST(TrainConfig, UnknownKeyNamesFileLineAndNearestKey) {
  const std::string text = "model:\n  path: m\noptimizer:\n  lr: 1.0e-3\n  weight_decy: 0.1\n";
  const std::string e = error_of([&] { parse_config(text, "run.yaml"); });
  EXPECT_NE(e.find("run.yaml:5"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'optimizer.weight_decy'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'optimizer.weight_decay'"), std::string::npos) << e;
}

TEST(TrainConfig, KeyInTheWrongSectionSuggestsWhereItLives) {
  const std::string e = error_of([] { parse_config("training:\n  lr: 0.1\n", "c.yaml"); });
  EXPECT_NE(e.find("did you mean 'optimizer.lr'"), std::string::npos) << e;
  const std::string s = error_of([] { parse_config("optimiser:\n  lr: 0.1\n", "c.yaml"); });
  EXPECT_NE(s.find("did you mean 'optimizer'"), std::string::npos) << s;
}

TEST(TrainConfig, UnrelatedUnknownKeyPointsToTheDocs) {
  const std::string e = error_of([] { parse_config("flux_capacitor: 1\n", "c.yaml"); });
  EXPECT_NE(e.find("unknown key 'flux_capacitor'"), std::string::npos) << e;
  EXPECT_NE(e.find("docs/configuration.md"), std::string::npos) << e;
}

TEST(TrainConfig, BadValuesNameTheKeyAndTheProblem) {
  struct Case {
    std::string yaml, expect;
  };
  const std::vector<Case> cases = {
      {"optimizer:\n  lr: -1\n", "optimizer.lr: -1 is out of range"},
      {"optimizer:\n  lr: fast\n", "optimizer.lr: expected a number, got 'fast'"},
      {"optimizer:\n  betas: [0.9]\n", "optimizer.betas: expected [beta1, beta2]"},
      {"optimizer:\n  betas: [0.9, 1.0]\n", "betas must be < 1"},
      {"batching:\n  mode: packed\n", "batching.mode: 'packed' is not one of flatten | pad | pack"},
      {"batching:\n  grad_accumulation: 0\n", "batching.grad_accumulation: 0 must be >= 1"},
      {"batching:\n  examples_per_micro_batch: 2.5\n", "expected an integer, got '2.5'"},
      {"data:\n  shuffle: maybe\n", "data.shuffle: expected true or false"},
      {"distributed:\n  release_unowned_gradients: some\n",
       "distributed.release_unowned_gradients: expected true or false, got 'some'"},
      {"data:\n  train: [{path: a.jsonl, wieght: 2}]\n", "did you mean 'weight'"},
      {"data:\n  train: [{path: a.jsonl, format: csv}]\n", "data.train[0].format: 'csv' is not one of"},
      {"model:\n  activation_checkpointing: sometimes\n", "model.activation_checkpointing: expected auto, none"},
      {"model:\n  recompute: lazy\n", "model.recompute: 'lazy' is not one of auto | replay | plain"},
      {"model: big\n", "model: is a section"},
      {"device: tpu\n", "device: 'tpu' is not one of"},
      {"schedule:\n  decay: exponential\n", "schedule.decay: 'exponential' is not one of"},
      {"optimizer:\n  lr:\n", "optimizer.lr: has no value"},
      {"model: [unclosed\n", "invalid YAML"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of([&] { parse_config(c.yaml, "bad.yaml"); });
    EXPECT_NE(e.find(c.expect), std::string::npos) << "config:\n" << c.yaml << "error: " << e;
    EXPECT_EQ(e.rfind("bad.yaml", 0), 0u) << e;
  }
}

TEST(TrainConfig, OptimizerStateDtype) {
  EXPECT_EQ(parse_config("model:\n  path: m\n", "c.yaml").optimizer.moments, optim::Moments::kFull);
  for (const char* masters : {"true", "split", "false"}) {  // 8-bit moments go with any master weights
    TrainConfig c = parse_config(kFull, "full.yaml");
    apply_override(c, std::string("optimizer.master_weights=") + masters);
    apply_override(c, "optimizer.state_dtype=int8");
    EXPECT_EQ(c.optimizer.moments, optim::Moments::k8bit);
    EXPECT_NE(to_yaml(c).find("state_dtype: int8"), std::string::npos) << to_yaml(c);
    EXPECT_EQ(to_yaml(parse_config(to_yaml(c), "resolved.yaml")), to_yaml(c));
  }
  TrainConfig c = parse_config("model:\n  path: m\n", "c.yaml");
  apply_override(c, "optimizer.state_dtype=int8");
  EXPECT_EQ(c.optimizer.moments, optim::Moments::k8bit);
  for (const std::string bad : {"4bit", "fp32", "8"}) {
    const std::string e = error_of([&] { parse_config("optimizer:\n  state_dtype: " + bad + "\n", "bad.yaml"); });
    EXPECT_NE(e.find("optimizer.state_dtype: '" + bad + "' is not one of auto | int8"), std::string::npos) << e;
    EXPECT_EQ(e.rfind("bad.yaml", 0), 0u) << e;
  }
  const std::string e = error_of([&] { apply_override(c, "optimizer.state_dtype=int16"); });
  EXPECT_NE(e.find("optimizer.state_dtype: 'int16' is not one of auto | int8"), std::string::npos) << e;
}

// optimizer.offload_update: auto by default (device with 8-bit moments, else host); host or
// device with offload: cpu; anything else, or device without offload, an error naming the key.
TEST(TrainConfig, OffloadUpdatePlace) {
  TrainConfig d = parse_config("model:\n  path: m\n", "c.yaml");
  EXPECT_EQ(d.optimizer.offload_update, optim::OffloadUpdate::kAuto);
  EXPECT_EQ(optim::resolved_offload_update(d.optimizer), optim::OffloadUpdate::kHost);
  apply_override(d, "optimizer.state_dtype=int8");
  EXPECT_EQ(optim::resolved_offload_update(d.optimizer), optim::OffloadUpdate::kDevice);
  apply_override(d, "optimizer.offload_update=host");
  EXPECT_EQ(optim::resolved_offload_update(d.optimizer), optim::OffloadUpdate::kHost);
  TrainConfig c = parse_config(kFull, "full.yaml");
  apply_override(c, "optimizer.offload=cpu");
  apply_override(c, "optimizer.offload_update=device");
  EXPECT_EQ(c.optimizer.offload_update, optim::OffloadUpdate::kDevice);
  EXPECT_NE(to_yaml(c).find("offload_update: device"), std::string::npos) << to_yaml(c);
  EXPECT_EQ(to_yaml(parse_config(to_yaml(c), "resolved.yaml")), to_yaml(c));
  validate(c);
  for (const std::string bad : {"gpu", "cpu", "true"}) {
    const std::string e = error_of([&] { parse_config("optimizer:\n  offload_update: " + bad + "\n", "bad.yaml"); });
    EXPECT_NE(e.find("optimizer.offload_update: '" + bad + "' is not one of auto | host | device"), std::string::npos) << e;
    EXPECT_EQ(e.rfind("bad.yaml", 0), 0u) << e;
  }
  apply_override(c, "optimizer.offload=none");
  const std::string e = error_of([&] { validate(c); });
  EXPECT_NE(e.find("optimizer.offload_update: device needs optimizer.offload: cpu"), std::string::npos) << e;
}

TEST(TrainConfig, GradientBucketsAreAutoOrMiB) {
  TrainConfig c = parse_config(kFull, "full.yaml");
  apply_override(c, "distributed.bucket_mb=auto");
  EXPECT_EQ(c.distributed.bucket_mb, kAutoBucketMb);
  EXPECT_EQ(c.distributed.bucket_mb_for(1), kOneProcessBucketMb);
  EXPECT_EQ(c.distributed.bucket_mb_for(2), kRanksBucketMb);
  EXPECT_NE(to_yaml(c).find("bucket_mb: auto"), std::string::npos) << to_yaml(c);
  apply_override(c, "distributed.bucket_mb=128");
  EXPECT_EQ(c.distributed.bucket_mb_for(1), 128);
  EXPECT_EQ(c.distributed.bucket_mb_for(8), 128);
  EXPECT_EQ(to_yaml(parse_config(to_yaml(c), "resolved.yaml")), to_yaml(c));
  apply_override(c, "distributed.bucket_mb=auto");
  EXPECT_EQ(c.distributed.bucket_mb, kAutoBucketMb);
  for (const std::string bad : {"big", "0", "-5"}) {
    const std::string e = error_of([&] { parse_config("distributed:\n  bucket_mb: " + bad + "\n", "bad.yaml"); });
    EXPECT_NE(e.find("distributed.bucket_mb: "), std::string::npos) << e;
    EXPECT_EQ(e.rfind("bad.yaml", 0), 0u) << e;
  }
}

TEST(TrainConfig, OverridesAreValidatedLikeTheFile) {
  TrainConfig c = parse_config("model:\n  path: m\n", "c.yaml");
  apply_override(c, "optimizer.lr=3e-4");
  apply_override(c, "optimizer.betas=[0.8, 0.9]");
  apply_override(c, "data.train=/x.jsonl");
  apply_override(c, "model.activation_checkpointing=every_layer");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.8);
  EXPECT_EQ(c.data.train.at(0).path, "/x.jsonl");
  EXPECT_EQ(c.model.activation_checkpointing, Checkpointing::every(1));
  EXPECT_EQ(c.model.recompute, Recompute::kAuto);  // the default
  apply_override(c, "model.recompute=plain");
  EXPECT_EQ(c.model.recompute, Recompute::kPlain);
  apply_override(c, "model.recompute=replay");
  EXPECT_EQ(c.model.recompute, Recompute::kReplay);

  std::string e = error_of([&] { apply_override(c, "optimizer.lrr=1"); });
  EXPECT_NE(e.find("--set optimizer.lrr=1"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'optimizer.lr'"), std::string::npos) << e;
  e = error_of([&] { apply_override(c, "optimizer.lr=abc"); });
  EXPECT_NE(e.find("optimizer.lr: expected a number, got 'abc'"), std::string::npos) << e;
  e = error_of([&] { apply_override(c, "optimizer=1"); });
  EXPECT_NE(e.find("is a section"), std::string::npos) << e;
  e = error_of([&] { apply_override(c, "no_equals_sign"); });
  EXPECT_NE(e.find("expected key.path=value"), std::string::npos) << e;
}

TEST(TrainConfig, CrossFieldChecks) {
  auto check = [](const std::string& yaml, const std::string& expect) {
    const std::string e = error_of([&] { validate(parse_config(yaml, "c.yaml")); });
    EXPECT_NE(e.find(expect), std::string::npos) << yaml << "\n" << e;
  };
  const std::string ok = "model:\n  path: m\ndata:\n  train: d.jsonl\n";
  check("data:\n  train: d.jsonl\ntraining:\n  max_steps: 1\n", "model.path: is required");
  check("model:\n  path: m\ntraining:\n  max_steps: 1\n", "data.train: is required");
  check(ok, "set training.max_steps or training.epochs");
  check(ok + "training:\n  max_steps: 5\nschedule:\n  warmup_steps: 6\n", "schedule.warmup_steps: 6 exceeds");
  check(ok + "training:\n  max_steps: 5\nbatching:\n  mode: pack\n", "batching.max_tokens: is required in pack mode");
  check(ok + "training:\n  max_steps: 5\nbatching:\n  mode: pack\n  max_tokens: 100\n",
        "smaller than data.max_length");
  check(ok + "training:\n  max_steps: 5\noptimizer:\n  lr: 1.0e-4\nschedule:\n  min_lr: 1.0e-3\n",
        "schedule.min_lr: exceeds optimizer.lr");
  check(ok + "training:\n  max_steps: 5\nlogging:\n  eval_interval: 2\n", "data.eval is not");
  EXPECT_NO_THROW(validate(parse_config(ok + "training:\n  epochs: 2\n", "c.yaml")));
}

TEST(TrainConfig, SuggestionUsesEditDistance) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("lr", "lr"), 0u);
}

TEST(TrainConfig, EveryKeyIsDocumented) {
  const std::string doc = read_file(source_file("docs/configuration.md"));
  ASSERT_FALSE(doc.empty()) << "docs/configuration.md is missing";
  for (const auto& k : config_keys())
    EXPECT_NE(doc.find("`" + k.path + "`"), std::string::npos) << "key not documented: " << k.path;
}

TEST(TrainConfig, EveryExampleConfigIsValid) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(source_file("configs"))) {
    if (e.path().extension() != ".yaml") continue;
    ++n;
    EXPECT_NO_THROW(validate(load_config(e.path()))) << e.path();
  }
  EXPECT_GE(n, 5);
}

}  // namespace
}  // namespace fptrain::trainer
