// LoRA training (adapter.type: lora) against Hugging Face PEFT + torch AdamW
// (reference_train.py --adapter), run live from the same PEFT-written adapter:
// every step's loss and gradient norm, and the trained adapter's tensors. Then
// what a run of adapters must keep: the base frozen, checkpoints that hold
// PEFT adapter folders PeftModel loads, a merged model equal to PEFT's merge,
// activation checkpointing and resume without changing a bit, and errors that
// name the key.
#include "tests/trainer/trainer_test_util.h"

#include "models/safetensors.h"

#include <cmath>

namespace fptrain::trainer {
namespace {

using namespace testing;

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-12); }

std::string lora_config(const fs::path& run, const std::string& model, const std::string& adapter_yaml,
                        const std::string& extra = "") {
  std::string yaml = base_config(run, "tokens.jsonl",
      "batching:\n  mode: flatten\n  examples_per_micro_batch: 4\n  grad_accumulation: 2\n"
      "optimizer:\n  lr: 1.0e-2\n  betas: [0.9, 0.95]\n  eps: 1.0e-8\n  weight_decay: 0.1\n  grad_clip: 0.5\n"
      "schedule:\n  warmup_steps: 5\n  decay: cosine\n  min_lr: 1.0e-3\n"
      "logging:\n  log_interval: 1\n" + adapter_yaml + extra);
  const std::string llama = fixture("llama").string();
  yaml.replace(yaml.find(llama), llama.size(), fixture(model).string());
  return yaml;
}

fs::path final_checkpoint(const fs::path& run, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return run / "checkpoints" / name;
}

void expect_every_step_matches_peft(const std::string& model) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string adapter = fixture(model + "-lora").string();
  const std::string cfg = dir.write("train.yaml", lora_config(run, model,
      "adapter:\n  type: lora\n  from: " + adapter + "\n  save_merged: true\n", "training:\n  max_steps: 30\n"));
  const CommandResult r = run_fptrain({"train", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto records = train_records(run);
  ASSERT_EQ(records.size(), 30u) << r.output;
  const fs::path ref_adapter = dir / "reference-adapter";
  const nlohmann::json ref = run_python("reference_train.py",
      {"--model", fixture(model).string(), "--adapter", adapter, "--save-adapter", ref_adapter.string(),
       "--data", fixture("tokens.jsonl").string(), "--examples-per-micro-batch", "4", "--grad-accum", "2",
       "--steps", "30", "--lr", "1e-2", "--beta1", "0.9", "--beta2", "0.95", "--eps", "1e-8",
       "--weight-decay", "0.1", "--warmup", "5", "--decay", "cosine", "--min-lr", "1e-3", "--clip", "0.5"});
  ASSERT_EQ(ref["loss"].size(), 30u);
  double worst_loss = 0, worst_norm = 0;
  int clipped = 0;
  for (size_t i = 0; i < 30; ++i) {
    const auto& m = records[i];
    EXPECT_EQ(m["supervised_tokens"].get<int64_t>(), ref["supervised"][i].get<int64_t>()) << "step " << i + 1;
    const double dl = rel(m["loss"].get<double>(), ref["loss"][i].get<double>());
    const double dn = rel(m["grad_norm"].get<double>(), ref["grad_norm"][i].get<double>());
    EXPECT_LE(dl, 1e-5) << "step " << i + 1 << ": fptrain " << m["loss"] << " PEFT " << ref["loss"][i];
    EXPECT_LE(dn, 1e-5) << "step " << i + 1 << ": grad norm fptrain " << m["grad_norm"] << " PEFT "
                        << ref["grad_norm"][i];
    worst_loss = std::max(worst_loss, dl);
    worst_norm = std::max(worst_norm, dn);
    clipped += ref["grad_norm"][i].get<double>() > 0.5;
  }
  EXPECT_GT(clipped, 0);
  // The adapters learn: the last five steps' mean loss is below the first five's.
  double first = 0, last = 0;
  for (size_t i = 0; i < 5; ++i) first += records[i]["loss"].get<double>(), last += records[25 + i]["loss"].get<double>();
  EXPECT_LT(last, 0.99 * first);
  // The checkpoint is a PEFT folder PeftModel loads; the trained adapters equal PEFT's, and the
  // merged model equals PEFT's merge of them.
  const fs::path ckpt = final_checkpoint(run, 30);
  EXPECT_TRUE(fs::is_regular_file(ckpt / "adapter_config.json"));
  EXPECT_FALSE(fs::exists(ckpt / "model.safetensors")) << "a LoRA checkpoint holds the adapters, not the base";
  const nlohmann::json check = run_python("check_adapter.py",
      {"--base", fixture(model).string(), "--adapter", ckpt.string(), "--merged", (run / "merged").string(),
       "--other-adapter", ref_adapter.string()});
  EXPECT_LE(check["merged_max_rel"].get<double>(), 1e-6) << check;
  EXPECT_LE(check["adapter_max_rel"].get<double>(), 1e-5) << check;
  std::printf("%s LoRA: over 30 steps loss %.3g, grad norm %.3g (%d clipped); final adapter %.3g; merged %.3g\n",
              model.c_str(), worst_loss, worst_norm, clipped, check["adapter_max_rel"].get<double>(),
              check["merged_max_rel"].get<double>());
}

// All seven projections of a Llama with GQA.
TEST(LoraTraining, EveryStepMatchesPeftWithTorchAdamW) { expect_every_step_matches_peft("llama"); }

// A subset (q, o, up) with rsLoRA on a Qwen3: q/k norms, attention biases, a sliding layer, tied.
TEST(LoraTraining, Qwen3SubsetRsloraMatchesPeft) { expect_every_step_matches_peft("qwen3"); }

// The largest relative differences of 20 QLoRA steps from the same PEFT adapter: fptrain on the
// fixture `model` (its log must say `log_line`) against PEFT + torch AdamW on reference_train.py's
// `reference` arguments (the model and how it is quantised).
struct PeftDifference {
  double loss = 0, grad_norm = 0, adapter = 0;
};

PeftDifference qlora_against_peft(const std::string& model, const std::string& log_line,
                                  const std::vector<std::string>& reference) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string adapter = fixture("llama-lora").string();
  const std::string cfg = dir.write("train.yaml", lora_config(run, model,
      "adapter:\n  type: qlora\n  from: " + adapter + "\n", "training:\n  max_steps: 20\n"));
  const CommandResult r = run_fptrain({"train", cfg});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(log_line), std::string::npos) << r.output;
  const auto records = train_records(run);
  const fs::path ref_adapter = dir / "reference-adapter";
  std::vector<std::string> args = reference;
  const std::vector<std::string> common = {
      "--adapter", adapter, "--save-adapter", ref_adapter.string(), "--data", fixture("tokens.jsonl").string(),
      "--examples-per-micro-batch", "4", "--grad-accum", "2", "--steps", "20", "--lr", "1e-2", "--beta1", "0.9",
      "--beta2", "0.95", "--eps", "1e-8", "--weight-decay", "0.1", "--warmup", "5", "--decay", "cosine", "--min-lr",
      "1e-3", "--clip", "0.5"};
  args.insert(args.end(), common.begin(), common.end());
  const nlohmann::json ref = run_python("reference_train.py", args);
  PeftDifference d;
  if (records.size() != 20u || ref["loss"].size() != 20u) {
    ADD_FAILURE() << records.size() << " fptrain and " << ref["loss"].size() << " PEFT steps, 20 expected";
    return {1, 1, 1};
  }
  for (size_t i = 0; i < 20; ++i) {
    d.loss = std::max(d.loss, rel(records[i]["loss"].get<double>(), ref["loss"][i].get<double>()));
    d.grad_norm = std::max(d.grad_norm, rel(records[i]["grad_norm"].get<double>(), ref["grad_norm"][i].get<double>()));
  }
  const nlohmann::json check = run_python("check_adapter.py",
      {"--base", fixture("llama").string(), "--adapter", final_checkpoint(run, 20).string(), "--other-adapter",
       ref_adapter.string()});
  d.adapter = check["adapter_max_rel"].get<double>();
  std::printf("%s QLoRA: over 20 steps loss %.3g, grad norm %.3g; final adapter %.3g\n", model.c_str(), d.loss,
              d.grad_norm, d.adapter);
  return d;
}

// QLoRA: the base in NF4 with double quantisation, against PEFT on bitsandbytes' 4-bit Llama
// (Linear4bit, fp32 compute) from the same adapter. The two quantise the block maxima with
// different roundings in rare cases (tests/models/nf4_test.cpp), hence a looser bound.
TEST(LoraTraining, QloraMatchesPeftOnBitsandbytes) {
  const PeftDifference d = qlora_against_peft("llama", "qlora: the base's 14 projections in NF4",
                                              {"--model", fixture("llama").string(), "--qlora"});
  EXPECT_LE(d.loss, 1e-4);
  EXPECT_LE(d.grad_norm, 1e-3);
  EXPECT_LE(d.adapter, 1e-3);
}

// QLoRA on a checkpoint bitsandbytes saved in 4 bits (transformers' save_pretrained of a load_in_4bit
// model): read as stored, so both sides train on the same quantised weights, against PEFT on that
// checkpoint; a bf16 LoRA or full fine-tuning of it is refused naming the setting.
TEST(LoraTraining, QloraOnAFourBitCheckpointMatchesPeft) {
  const PeftDifference d = qlora_against_peft("llama-nf4", "read as the checkpoint stores them",
                                              {"--model", fixture("llama-nf4").string()});
  EXPECT_LE(d.loss, 1e-5);
  EXPECT_LE(d.grad_norm, 1e-5);
  EXPECT_LE(d.adapter, 1e-5);
  TempDir dir;
  for (const std::string& type : {"lora", "none"}) {
    const std::string bad = dir.write("bad.yaml", lora_config(dir / ("bad-" + type), "llama-nf4",
        "adapter:\n  type: " + type + "\n", "training:\n  max_steps: 10\n"));
    const CommandResult refused = run_fptrain({"train", bad});
    EXPECT_NE(refused.exit_code, 0) << type;
    EXPECT_NE(refused.output.find("set adapter.type: qlora"), std::string::npos) << refused.output;
  }
}

// The same run with every layer recomputed, and cut in two by a stop and a resume: bit-identical
// (with dropout, and with a 4-bit base too).
TEST(LoraTraining, CheckpointingAndResumeChangeNothing) {
  TempDir dir;
  const std::string adapter = "adapter:\n  type: lora\n  r: 4\n  alpha: 16\n  target_modules: all-linear\n";
  auto run_to = [&](const std::string& name, const std::vector<std::string>& sets) {
    const fs::path run = dir / name;
    const std::string cfg = dir.write(name + ".yaml", lora_config(run, "llama", adapter, "training:\n  max_steps: 8\n"));
    std::vector<std::string> args = {"train", cfg};
    for (const auto& s : sets) args.insert(args.end(), {"--set", s});
    const CommandResult r = run_fptrain(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return run;
  };
  const fs::path plain = run_to("plain", {});
  const fs::path recomputed = run_to("recomputed", {"model.activation_checkpointing=every_layer"});
  run_to("resumed", {"training.stop_at_step=3"});  // stops after step 3 with a checkpoint
  const fs::path resumed = run_to("resumed", {});
  // With adapter dropout the recomputation draws the first run's masks again (and leaves the
  // generator where the first run left it); a resume restores the generators.
  const fs::path dropped = run_to("dropped", {"adapter.dropout=0.2"});
  const fs::path dropped_recomputed =
      run_to("dropped_recomputed", {"adapter.dropout=0.2", "model.activation_checkpointing=every_layer"});
  // ... and so does a plain recomputation (model.recompute: plain: the whole layer run again).
  const fs::path dropped_plain = run_to(
      "dropped_plain", {"adapter.dropout=0.2", "model.activation_checkpointing=every_layer", "model.recompute=plain"});
  run_to("dropped_resumed", {"adapter.dropout=0.2", "training.stop_at_step=5"});
  const fs::path dropped_resumed = run_to("dropped_resumed", {"adapter.dropout=0.2"});
  EXPECT_NE(train_records(dropped).back()["loss"], train_records(plain).back()["loss"]) << "dropout did nothing";
  // QLoRA's 4-bit base through the recomputation (its replayed projections included).
  const fs::path quantized = run_to("quantized", {"adapter.type=qlora"});
  const fs::path quantized_recomputed =
      run_to("quantized_recomputed", {"adapter.type=qlora", "model.activation_checkpointing=every_layer"});
  const std::vector<std::pair<fs::path, fs::path>> pairs = {
      {plain, recomputed}, {plain, resumed}, {dropped, dropped_recomputed}, {dropped, dropped_plain},
      {dropped, dropped_resumed}, {quantized, quantized_recomputed}};
  for (const auto& [plain, other] : pairs) {
    const auto a = train_records(plain), b = train_records(other);
    ASSERT_EQ(a.size(), 8u);
    ASSERT_EQ(b.size(), 8u) << other;
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << other << " step " << i + 1;
    const auto x = models::read_safetensors(final_checkpoint(plain, 8) / "adapter_model.safetensors");
    const auto y = models::read_safetensors(final_checkpoint(other, 8) / "adapter_model.safetensors");
    ASSERT_EQ(x.size(), y.size());
    for (const auto& [name, t] : x) EXPECT_TRUE(at::equal(t, y.at(name))) << other << " " << name;
  }
  // fptrain eval --checkpoint <a LoRA checkpoint> evaluates the adapters on model.path: the same loss
  // as an evaluation of the same adapters through adapter.from.
  const std::string cfg = (dir / "plain.yaml").string();
  const CommandResult by_checkpoint = run_fptrain({"eval", cfg, "--json", "--checkpoint", final_checkpoint(plain, 8).string()});
  ASSERT_EQ(by_checkpoint.exit_code, 0) << by_checkpoint.output;
  const CommandResult base = run_fptrain({"eval", cfg, "--json"});  // adapter.type lora without from: B = 0, the base
  ASSERT_EQ(base.exit_code, 0) << base.output;
  auto loss_of = [](const std::string& out) {
    return nlohmann::json::parse(out.substr(out.rfind("{\""))).at("loss").get<double>();
  };
  EXPECT_LT(loss_of(by_checkpoint.output), loss_of(base.output)) << "the trained adapters lower the loss";
  // Fresh adapters (B = 0) leave the base as it is.
  const CommandResult full = run_fptrain({"eval", cfg, "--json", "--set", "adapter.type=none"});
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_NEAR(loss_of(base.output), loss_of(full.output), 1e-7 * loss_of(full.output));
}

TEST(LoraTraining, ErrorsNameTheKey) {
  TempDir dir;
  auto error_of = [&](const std::string& adapter, const std::string& model = "llama") {
    const std::string cfg = dir.write("bad.yaml", lora_config(dir / "run", model, adapter, "training:\n  max_steps: 6\n"));
    const CommandResult r = run_fptrain({"train", cfg});
    EXPECT_NE(r.exit_code, 0);
    return r.output;
  };
  std::string out = error_of("adapter:\n  type: lora\n  target_modules: [q_proj, v_porj]\n");
  EXPECT_NE(out.find("'v_porj'"), std::string::npos) << out;
  EXPECT_NE(out.find("gate_proj"), std::string::npos) << out;  // the valid names
  out = error_of("adapter:\n  type: lora\n  r: 0\n");
  EXPECT_NE(out.find("adapter.r"), std::string::npos) << out;
  out = error_of("adapter:\n  type: lora\n  dropout: 1.0\n");
  EXPECT_NE(out.find("adapter.dropout"), std::string::npos) << out;
  out = error_of("adapter:\n  type: lora\n  from: " + (dir / "nowhere").string() + "\n");
  EXPECT_NE(out.find("adapter_config.json"), std::string::npos) << out;
  out = error_of("adapter:\n  from: " + fixture("llama-lora").string() + "\n");
  EXPECT_NE(out.find("adapter.type"), std::string::npos) << out;
  out = error_of("adapter:\n  type: lora\n  from: " + fixture("llama-lora").string() + "\n", "llama64");  // another model's
  EXPECT_NE(out.find("does not fit"), std::string::npos) << out;
}

}  // namespace
}  // namespace fptrain::trainer
