// Training on CUDA: bf16 weights with fp32 masters, torch-fa2 (and our kernels
// where they run) follow the fp32 CPU run of the same configuration; `auto`
// picks CUDA and bf16; activation checkpointing keeps the gradients.
#include "attention/hopper_backend.h"
#include "models/causal_lm.h"
#include "tests/models/model_test_util.h"
#include "models/checkpoint.h"
#include "tests/trainer/trainer_test_util.h"
#include "trainer/model_setup.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <cmath>
#include <cstdlib>

namespace fptrain::trainer {
namespace {

using namespace testing;

const std::string kTrain =
    "batching:\n  examples_per_micro_batch: 4\n  grad_accumulation: 2\n"
    "optimizer:\n  lr: 2.0e-3\n  grad_clip: 1.0\n"
    "schedule:\n  warmup_steps: 3\n"
    "training:\n  max_steps: 20\n"
    "logging:\n  log_interval: 1\n";

std::string gpu_config(const fs::path& run, const std::string& attention, const std::string& dtype) {
  return "model:\n  path: " + fixture("llama64").string() + "\n  dtype: " + dtype + "\n  attention: " + attention +
         "\ndevice: cuda\noutput_dir: " + run.string() + "\ndata:\n  train: " + fixture("tokens.jsonl").string() +
         "\n  max_length: 256\n  shuffle: false\n" + kTrain;
}

TEST(TrainGpu, Bf16WithMastersFollowsTheFp32CpuRun) {
  ASSERT_TRUE(at::hasCUDA());
  TempDir dir;
  const std::string cpu_cfg = dir.write("cpu.yaml", base_config(dir / "cpu", "tokens.jsonl", kTrain));
  const CommandResult c = run_fptrain({"train", cpu_cfg, "--set", "model.path=" + fixture("llama64").string()});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const auto cpu = train_records(dir / "cpu");
  std::vector<std::string> backends = {"torch-fa2"};
  if (attention::hopper_kernels_support(64, at::kBFloat16)) backends.push_back("hopper");
  for (const auto& backend : backends) {
    const std::string cfg = dir.write(backend + ".yaml", gpu_config(dir / backend, backend, "bfloat16"));
    const CommandResult r = run_fptrain({"train", cfg});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto gpu = train_records(dir / backend);
    ASSERT_EQ(gpu.size(), cpu.size());
    double worst = 0;
    for (size_t i = 0; i < gpu.size(); ++i) {
      EXPECT_EQ(gpu[i]["supervised_tokens"], cpu[i]["supervised_tokens"]);
      const double d = std::fabs(gpu[i]["loss"].get<double>() - cpu[i]["loss"].get<double>()) /
                       cpu[i]["loss"].get<double>();
      worst = std::max(worst, d);
      EXPECT_LE(d, 3e-2) << backend << " step " << i + 1;
    }
    EXPECT_LT(gpu.back()["loss"].get<double>(), gpu.front()["loss"].get<double>());
    EXPECT_TRUE(gpu.back().contains("peak_allocated_bytes"));
    std::printf("%s bf16 vs CPU fp32: max relative loss difference over %zu steps %.3g\n", backend.c_str(),
                gpu.size(), worst);
  }
}

// LoRA in bf16 on CUDA (rank-8 adapters on every projection, fresh PEFT init drawn on the CPU,
// so the same on both devices; every layer recomputed) follows the fp32 CPU run.
TEST(TrainGpu, LoraBf16FollowsTheFp32CpuRun) {
  ASSERT_TRUE(at::hasCUDA());
  TempDir dir;
  const std::string lora = "adapter:\n  type: lora\n  r: 8\n  alpha: 16\n  target_modules: all-linear\n";
  const std::vector<std::string> sets = {"--set", "optimizer.lr=2.0e-2"};
  const std::string cpu_cfg = dir.write("cpu.yaml", base_config(dir / "cpu", "tokens.jsonl", kTrain + lora));
  std::vector<std::string> args = {"train", cpu_cfg, "--set", "model.path=" + fixture("llama64").string()};
  args.insert(args.end(), sets.begin(), sets.end());
  const CommandResult c = run_fptrain(args);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const auto cpu = train_records(dir / "cpu");
  const std::string backend = attention::hopper_kernels_support(64, at::kBFloat16) ? "hopper" : "torch-fa2";
  const std::string cfg = dir.write("gpu.yaml", gpu_config(dir / "gpu", backend, "bfloat16") + lora);
  args = {"train", cfg, "--set", "model.activation_checkpointing=every_layer"};
  args.insert(args.end(), sets.begin(), sets.end());
  const CommandResult r = run_fptrain(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto gpu = train_records(dir / "gpu");
  ASSERT_EQ(gpu.size(), cpu.size());
  double worst = 0;
  for (size_t i = 0; i < gpu.size(); ++i) {
    const double d =
        std::fabs(gpu[i]["loss"].get<double>() - cpu[i]["loss"].get<double>()) / cpu[i]["loss"].get<double>();
    worst = std::max(worst, d);
    EXPECT_LE(d, 3e-2) << "step " << i + 1;
  }
  EXPECT_LT(gpu.back()["loss"].get<double>(), gpu.front()["loss"].get<double>());
  EXPECT_TRUE(fs::is_regular_file(dir / "gpu" / "checkpoints" / "step-00000020" / "adapter_model.safetensors"));
  std::printf("LoRA %s bf16 vs CPU fp32: max relative loss difference over %zu steps %.3g\n", backend.c_str(),
              gpu.size(), worst);
}

TEST(TrainGpu, AutoPicksCudaAndBf16) {
  TempDir dir;
  const std::string cfg = dir.write("auto.yaml", gpu_config(dir / "auto", "auto", "auto"));
  const CommandResult r = run_fptrain({"train", cfg, "--set", "device=auto", "--set", "training.max_steps=5"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto summary = nlohmann::json::parse(read_file(dir / "auto" / "summary.json"));
  EXPECT_EQ(summary["dtype"], "bfloat16");
  // head_dim 64: our kernels where they run (sm_90), else FlashAttention-2.
  EXPECT_EQ(summary["attention"], attention::hopper_kernels_support(64, at::kBFloat16) ? "hopper" : "torch-fa2");
  EXPECT_NE(summary["device"].get<std::string>().find("NVIDIA"), std::string::npos) << summary.dump();
  // One process: expandable segments, unless the environment configures the allocator.
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  if (conf == nullptr || conf[0] == '\0')
    EXPECT_NE(r.output.find("CUDA allocator: expandable segments"), std::string::npos) << r.output;
}

// Gradients of a checkpointed backward (every layer, every other, selective)
// against the plain one. The recomputation replays each block's last projection
// without its product and, with our kernels, the attention without its forward
// (from the output and statistics kept by the first pass): with the
// deterministic attention backward that is the same bits as the plain backward;
// FlashAttention-2's accumulates dQ with atomics, equal up to bf16 rounding.
std::map<std::string, at::Tensor> checkpointed_grads(attention::Backend backend, const Checkpointing& setting) {
  const models::ModelConfig config = models::load_model_config(fixture("llama64") / "config.json");
  models::TensorMap params =
      models::load_pretrained_weights(fixture("llama64"), config, at::kBFloat16, at::Device(at::kCUDA, 0));
  for (auto& [n, t] : params) t.requires_grad_(true);
  models::CausalLM model(config, params, backend);
  set_activation_checkpointing(model, setting, models::testing::trained_parameters(model));
  models::PackedInput in;
  const auto opts = at::TensorOptions().device(at::kCUDA);
  at::manual_seed(0);
  const std::vector<int32_t> cu = {0, 25, 40, 41, 170, 300};
  std::vector<at::Tensor> pos;
  for (size_t i = 0; i + 1 < cu.size(); ++i) pos.push_back(at::arange(cu[i + 1] - cu[i], opts.dtype(at::kLong)));
  in.input_ids = at::randint(3, config.vocab_size, {cu.back()}, opts.dtype(at::kLong));
  in.position_ids = at::cat(pos);
  in.cu_seqlens = at::tensor(cu, at::kInt).to(at::kCUDA);
  in.max_seqlen = 130;
  model.loss(in, in.input_ids).loss_sum.backward();
  std::map<std::string, at::Tensor> g;
  for (const auto& [n, t] : model.parameters()) g[n] = t.grad().to(at::kFloat);
  return g;
}

TEST(TrainGpu, ActivationCheckpointingKeepsTheGradients) {
  const auto plain = checkpointed_grads(attention::Backend::kTorchFA2, Checkpointing::none());
  for (const Checkpointing& k : {Checkpointing::every(1), Checkpointing::selective()}) {
    const auto ckpt = checkpointed_grads(attention::Backend::kTorchFA2, k);
    for (const auto& [name, g] : plain) {
      const double scale = g.abs().max().item<double>() + 1e-12;
      EXPECT_LE((g - ckpt.at(name)).abs().max().item<double>(), 2e-2 * scale) << name << " " << k.name();
    }
  }
}

TEST(TrainGpu, CheckpointReplayOfOurAttentionIsBitIdentical) {
  if (!attention::hopper_kernels_support(64, at::kBFloat16)) GTEST_SKIP() << "needs sm_90";
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  const auto plain = checkpointed_grads(attention::Backend::kHopper, Checkpointing::none());
  for (const Checkpointing& k : {Checkpointing::every(1), Checkpointing::every(2), Checkpointing::selective()}) {
    const auto ckpt = checkpointed_grads(attention::Backend::kHopper, k);
    for (const auto& [name, g] : plain)
      EXPECT_TRUE(at::equal(g, ckpt.at(name)))
          << name << " " << k.name() << ": max difference " << (g - ckpt.at(name)).abs().max().item<double>();
  }
  at::globalContext().setDeterministicAlgorithms(false, false);
}

// Plain recomputation (only each layer's input kept, the whole layer run again) on our
// kernels: the same bits as no checkpointing and as the replayed recomputation, with less
// memory at the peak (the replayed tape keeps T (2H + Q) per layer, the plain one T H).
struct RecomputedRun {
  std::map<std::string, at::Tensor> grads;
  int64_t kept_bytes = 0;  // for the backward, after the forward
  int64_t peak_bytes = 0;  // both above what was allocated before the forward
};

RecomputedRun recomputed_run(const Checkpointing& setting, bool all_plain) {
  const models::ModelConfig config = models::load_model_config(fixture("llama64") / "config.json");
  models::TensorMap params =
      models::load_pretrained_weights(fixture("llama64"), config, at::kBFloat16, at::Device(at::kCUDA, 0));
  for (auto& [n, t] : params) t.requires_grad_(true);
  models::CausalLM model(config, params, attention::Backend::kHopper);
  auto control = set_activation_checkpointing(model, setting, models::testing::trained_parameters(model));
  control->all_plain = all_plain;
  const auto opts = at::TensorOptions().device(at::kCUDA);
  at::manual_seed(0);
  std::vector<int32_t> cu = {0};  // 16 documents of 512: 8192 tokens, so the tapes dominate the peak
  for (int i = 0; i < 16; ++i) cu.push_back(cu.back() + 512);
  models::PackedInput in;
  in.input_ids = at::randint(3, config.vocab_size, {cu.back()}, opts.dtype(at::kLong));
  in.position_ids = at::arange(512, opts.dtype(at::kLong)).repeat({16});
  in.cu_seqlens = at::tensor(cu, at::kInt).to(at::kCUDA);
  in.max_seqlen = 512;
  c10::cuda::device_synchronize();
  const auto stats = [] {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(0)
        .allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  };
  const int64_t before = stats().current;
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  const at::Tensor loss = model.loss(in, in.input_ids).loss_sum;
  c10::cuda::device_synchronize();
  RecomputedRun r;
  r.kept_bytes = stats().current - before;
  loss.backward();
  c10::cuda::device_synchronize();
  r.peak_bytes = stats().peak - before;
  for (const auto& [n, t] : model.parameters()) r.grads[n] = t.grad().to(at::kFloat);
  return r;
}

TEST(TrainGpu, PlainRecomputationIsBitIdenticalWithLessMemory) {
  if (!attention::hopper_kernels_support(64, at::kBFloat16)) GTEST_SKIP() << "needs sm_90";
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
  const RecomputedRun none = recomputed_run(Checkpointing::none(), false);
  const RecomputedRun replayed = recomputed_run(Checkpointing::every(1), false);
  const RecomputedRun plain = recomputed_run(Checkpointing::every(1), true);
  const RecomputedRun plain_every_2 = recomputed_run(Checkpointing::every(2), true);
  for (const auto* run : {&replayed, &plain, &plain_every_2})
    for (const auto& [name, g] : none.grads)
      EXPECT_TRUE(at::equal(g, run->grads.at(name)))
          << name << ": max difference " << (g - run->grads.at(name)).abs().max().item<double>();
  for (const auto& [name, run] : {std::pair{"none", &none}, {"every_layer replayed", &replayed},
                                  {"every_layer plain", &plain}, {"every_2 plain", &plain_every_2}})
    std::printf("8192 tokens, %s: %.1f MiB kept after the forward, peak %.1f MiB\n", name,
                static_cast<double>(run->kept_bytes) / (1 << 20), static_cast<double>(run->peak_bytes) / (1 << 20));
  // After the forward the replayed layers keep, each, the residual after the attention and
  // the attention's output beyond the plain ones' input: T (H + Q) bf16 values a layer.
  EXPECT_LE(plain.kept_bytes + 2 * 8192 * (128 + 128) * 2, replayed.kept_bytes);
  // At the peak (the last layer's recomputation) layer 0's tape is still there; the plain
  // recomputation's o and down products are transient, half of it.
  EXPECT_LT(plain.peak_bytes, replayed.peak_bytes);
  at::globalContext().setDeterministicAlgorithms(false, false);
}

// The same through the program: 20 steps with every_layer plain, replayed and without
// checkpointing give the same loss and gradient norm at every step (deterministic kernels).
TEST(TrainGpu, TrainingWithPlainRecomputationMatchesReplayedAndNone) {
  if (!attention::hopper_kernels_support(64, at::kBFloat16)) GTEST_SKIP() << "needs sm_90";
  TempDir dir;
  const std::vector<std::pair<std::string, std::vector<std::string>>> runs = {
      {"none", {"model.activation_checkpointing=none"}},
      {"replayed", {"model.activation_checkpointing=every_layer", "model.recompute=replay"}},
      {"plain", {"model.activation_checkpointing=every_layer", "model.recompute=plain"}}};
  std::map<std::string, std::vector<nlohmann::json>> records;
  for (const auto& [name, sets] : runs) {
    const std::string cfg = dir.write(name + ".yaml", gpu_config(dir / name, "hopper", "bfloat16"));
    std::vector<std::string> args = {"train", cfg, "--set", "training.deterministic=true"};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    const CommandResult r = run_fptrain(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    records[name] = train_records(dir / name);
  }
  for (const char* name : {"replayed", "plain"}) {
    ASSERT_EQ(records[name].size(), records["none"].size()) << name;
    for (size_t i = 0; i < records["none"].size(); ++i) {
      EXPECT_EQ(records[name][i]["loss"], records["none"][i]["loss"]) << name << " step " << i + 1;
      EXPECT_EQ(records[name][i]["grad_norm"], records["none"][i]["grad_norm"]) << name << " step " << i + 1;
    }
  }
}

}  // namespace
}  // namespace fptrain::trainer
