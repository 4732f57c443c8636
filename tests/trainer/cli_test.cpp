// The command line: --version/--help, bad configurations exit 2 with the key
// and a suggestion, SIGTERM finishes the step, saves and exits 0, `fptrain init`
// writes a model and tokenizer that transformers and our tokenizer agree on,
// `fptrain eval` and `fptrain data` run on a configuration, `fptrain data --show`
// prints examples as training encodes them.
#include "tokenizer/tokenizer.h"
#include "tests/trainer/trainer_test_util.h"
#include "trainer/checkpoint_store.h"

#include <algorithm>
#include <csignal>
#include <fcntl.h>
#include <thread>

extern char** environ;

namespace fptrain::trainer {
namespace {

using namespace testing;

TEST(TrainCli, VersionAndHelp) {
  const CommandResult v = run_fptrain({"--version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_NE(v.output.find("fptrain "), std::string::npos) << v.output;
  const CommandResult h = run_fptrain({"--help"});
  EXPECT_EQ(h.exit_code, 0);
  for (const char* cmd : {"train", "eval", "data", "init"}) EXPECT_NE(h.output.find(cmd), std::string::npos);
  const CommandResult th = run_fptrain({"train", "--help"});
  EXPECT_NE(th.output.find("--set"), std::string::npos) << th.output;
  // --set takes one value each, before or after the configuration file.
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", base_config(dir / "run", "chat.jsonl", "training:\n  max_steps: 2\n"));
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"train", "--set", "optimizer.lr=0.25", "--set", "training.seed=9", cfg, "--print-config"},
           {"train", cfg, "--set", "optimizer.lr=0.25", "--set", "training.seed=9", "--print-config"}}) {
    const CommandResult p = run_fptrain(args);
    ASSERT_EQ(p.exit_code, 0) << p.output;
    EXPECT_NE(p.output.find("lr: 0.25"), std::string::npos) << p.output;
    EXPECT_NE(p.output.find("seed: 9"), std::string::npos) << p.output;
  }
  EXPECT_NE(run_fptrain({}).exit_code, 0);
}

TEST(TrainCli, UnknownKeyExitsWithSuggestion) {
  TempDir dir;
  const std::string text = base_config(dir / "run", "chat.jsonl", "training:\n  max_steps: 2\noptimizer:\n  weight_decy: 1\n");
  const std::string cfg = dir.write("bad.yaml", text);
  const auto line = std::count(text.begin(), text.end(), '\n');  // the last line holds the typo
  const CommandResult r = run_fptrain({"train", cfg});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.yaml:" + std::to_string(line) + ": unknown key 'optimizer.weight_decy'; did you mean 'optimizer.weight_decay'?"),
            std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "run" / "metrics.jsonl"));  // nothing started
}

TEST(TrainCli, BadValueAndBadOverrideExitWithTheKey) {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", base_config(dir / "run", "chat.jsonl", "training:\n  max_steps: 2\n"));
  CommandResult r = run_fptrain({"train", cfg, "--set", "batching.mode=padded"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("batching.mode: 'padded' is not one of flatten | pad | pack"), std::string::npos) << r.output;
  r = run_fptrain({"train", cfg, "--set", "optimizer.wd=0.1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("did you mean"), std::string::npos) << r.output;
  r = run_fptrain({"train", cfg, "--set", "model.path=" + (dir / "no_model").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("no_model: no config.json"), std::string::npos) << r.output;
  r = run_fptrain({"train", (dir / "missing.yaml").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("cannot open"), std::string::npos) << r.output;
}

TEST(TrainCli, SigtermFinishesTheStepSavesAndExitsZero) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string cfg = dir.write("c.yaml", base_config(run, "chat.jsonl",
      "batching:\n  examples_per_micro_batch: 2\ntraining:\n  max_steps: 1000000\nlogging:\n  log_interval: 1\n"));
  const std::string log = (dir / "out.log").string();
  const pid_t pid = testing::spawn_fptrain({"train", cfg}, log);
  ASSERT_GT(pid, 0);

  // Wait until it trains (a few steps logged), then ask it to stop.
  for (int i = 0; i < 1200 && train_records(run).size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GE(train_records(run).size(), 3u) << read_file(log);
  // A second run into the same output_dir is refused while this one lives.
  const CommandResult second = run_fptrain({"train", cfg});
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_NE(second.output.find("in use by another fptrain run"), std::string::npos) << second.output;
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string out = read_file(log);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("stopped by SIGTERM"), std::string::npos) << out;

  const auto records = train_records(run);
  const auto latest = latest_checkpoint(run);
  ASSERT_TRUE(latest.has_value()) << out;
  const TrainingState state = load_training_state(*latest);
  EXPECT_EQ(state.step, records.back()["step"].get<int64_t>());
  EXPECT_EQ(latest->filename(), checkpoint_name(state.step));
}

TEST(TrainCli, InitWritesAModelAndTokenizerTransformersLoads) {
  TempDir dir;
  const fs::path model = dir / "tiny";
  const CommandResult r = run_fptrain({"init", model.string(), "--preset", "test", "--seed", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json hf = run_python("check_init.py", {"--model", model.string()});
  ASSERT_FALSE(hf.is_null());
  EXPECT_EQ(hf["spm_mismatches"].get<int>(), 0);
  EXPECT_NE(hf["chat"].get<std::string>().find("[INST] Hi [/INST] Hello</s>"), std::string::npos) << hf["chat"];
  // Our tokenizer (what training uses) gives transformers' ids.
  const auto tok = tokenizer::load_tokenizer(model);
  EXPECT_LE(tok->vocab_size(), hf["vocab_size"].get<int64_t>());
  for (size_t i = 0; i < hf["texts"].size(); ++i) {
    const std::string text = hf["texts"][i].get<std::string>();
    const auto ids = tok->encode(text, /*add_special_tokens=*/true);
    EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.end()), hf["ids"][i].get<std::vector<int64_t>>()) << text;
  }
  // A second init into the same folder refuses to overwrite it.
  const CommandResult again = run_fptrain({"init", model.string()});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.output.find("not empty"), std::string::npos) << again.output;
  EXPECT_EQ(run_fptrain({"init", (dir / "x").string(), "--preset", "huge"}).exit_code, 2);
}

TEST(TrainCli, EvalAndDataReportRun) {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", base_config(dir / "run", "chat.jsonl", "training:\n  max_steps: 2\n"));
  const CommandResult e = run_fptrain({"eval", cfg, "--json"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto j = nlohmann::json::parse(e.output.substr(e.output.find('{')));
  EXPECT_GT(j["loss"].get<double>(), 0.0);
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(j["loss"].get<double>()), 1e-6 * j["perplexity"].get<double>());
  EXPECT_EQ(j["examples"].get<int64_t>(), 96);
  const CommandResult d = run_fptrain({"data", cfg});
  EXPECT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("pad"), std::string::npos) << d.output;
}

TEST(TrainCli, DataShowPrintsTheFirstExamplesAsTrained) {
  TempDir dir;
  const std::string cfg = dir.write("c.yaml", base_config(dir / "run", "chat.jsonl", "training:\n  max_steps: 2\n"));
  // Text: stdout is a pipe here, so supervised spans are marked [[ ]], not coloured.
  const CommandResult t = run_fptrain({"data", cfg, "--show", "2", "--max-tokens-shown", "4"});
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const std::vector<std::string> expected = {
      "data.train: examples 1-2 of 96", "=== example 1: " + fixture("chat.jsonl").string() + ":1", "=== example 2: ",
      "format messages, chat template llama2", "used: ", "[[", "]]", "</s>]]", "label", "tokens not shown",
      "        2        2  \"</s>\"\n"};  // the last rows are shown too: the supervised EOS
  for (const std::string& s : expected)
    EXPECT_NE(t.output.find(s), std::string::npos) << s << "\n" << t.output;
  EXPECT_EQ(t.output.find("=== example 3"), std::string::npos) << t.output;
  EXPECT_EQ(t.output.find('\x1b'), std::string::npos) << t.output;
  const CommandResult c = run_fptrain({"data", cfg, "--show", "1", "--color", "always"});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("\x1b[1;32m"), std::string::npos) << c.output;

  // JSON: the same examples with ids, labels and spans; --skip starts later.
  const CommandResult j = run_fptrain({"data", cfg, "--show", "2", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.output;
  const auto doc = nlohmann::json::parse(j.output.substr(j.output.find('{')));
  ASSERT_EQ(doc["examples"].size(), 2u);
  EXPECT_EQ(doc["total"].get<int64_t>(), 96);
  for (const auto& ex : doc["examples"]) {
    EXPECT_EQ(ex["status"], "used");
    EXPECT_EQ(ex["format"], "messages");
    EXPECT_EQ(ex["chat_template"], "llama2");
    const auto ids = ex["input_ids"].get<std::vector<int32_t>>();
    const auto labels = ex["labels"].get<std::vector<int32_t>>();
    ASSERT_EQ(ids.size(), ex["tokens"].get<size_t>());
    ASSERT_EQ(labels.size(), ids.size());
    int64_t supervised = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (labels[i] != -100) EXPECT_EQ(labels[i], ids[i]);
      supervised += labels[i] != -100;
    }
    EXPECT_GT(supervised, 0);
    EXPECT_EQ(ex["supervised"].get<int64_t>(), supervised);
    std::string text;
    int64_t span_tokens = 0;
    for (const auto& sp : ex["spans"]) {
      text += sp["text"].get<std::string>();
      span_tokens += sp["tokens"].get<int64_t>();
    }
    EXPECT_EQ(text, ex["text"].get<std::string>());
    EXPECT_EQ(span_tokens, static_cast<int64_t>(ids.size()));
  }
  EXPECT_EQ(doc["examples"][1]["line"].get<int64_t>(), 2);
  const CommandResult k = run_fptrain({"data", cfg, "--show", "1", "--skip", "1", "--json"});
  ASSERT_EQ(k.exit_code, 0) << k.output;
  const auto second = nlohmann::json::parse(k.output.substr(k.output.find('{')));
  EXPECT_EQ(second["examples"][0]["input_ids"], doc["examples"][1]["input_ids"]);

  // Pre-tokenized data; data.eval unset; options that need --show.
  const std::string tokens_cfg = dir.write("t.yaml", base_config(dir / "run", "tokens.jsonl", "training:\n  max_steps: 2\n"));
  const CommandResult tk = run_fptrain({"data", tokens_cfg, "--show", "2"});
  ASSERT_EQ(tk.exit_code, 0) << tk.output;
  EXPECT_NE(tk.output.find("format tokens, chat template none"), std::string::npos) << tk.output;
  const CommandResult e = run_fptrain({"data", cfg, "--show", "2", "--eval"});
  EXPECT_EQ(e.exit_code, 2) << e.output;
  EXPECT_NE(e.output.find("data.eval is not set"), std::string::npos) << e.output;
  EXPECT_NE(run_fptrain({"data", cfg, "--skip", "3"}).exit_code, 0);
  EXPECT_NE(run_fptrain({"data", cfg, "--show", "2", "--color", "sometimes"}).exit_code, 0);
}

TEST(TrainCli, EvalOfTheFinalCheckpointMatchesTheRunsFinalEvaluation) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string cfg = dir.write("c.yaml", base_config(run, "chat.jsonl",
      "batching:\n  examples_per_micro_batch: 4\noptimizer:\n  lr: 3.0e-3\ntraining:\n  max_steps: 6\n"
      "logging:\n  log_interval: 2\n  eval_interval: 3\n"));
  const CommandResult r = run_fptrain({"train", cfg, "--set", "data.eval=" + fixture("chat.jsonl").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<nlohmann::json> evals;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == "eval") evals.push_back(j);
  }
  ASSERT_EQ(evals.size(), 2u);  // step 3 and the end
  EXPECT_EQ(evals[1]["step"].get<int64_t>(), 6);
  EXPECT_LT(evals[1]["eval_loss"].get<double>(), evals[0]["eval_loss"].get<double>());
  const fs::path ckpt = run / "checkpoints" / checkpoint_name(6);
  const CommandResult e = run_fptrain(
      {"eval", cfg, "--json", "--checkpoint", ckpt.string(), "--set", "data.eval=" + fixture("chat.jsonl").string()});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  const auto j = nlohmann::json::parse(e.output.substr(e.output.find('{')));
  EXPECT_NEAR(j["loss"].get<double>(), evals[1]["eval_loss"].get<double>(), 1e-6 * j["loss"].get<double>());
}

}  // namespace
}  // namespace fptrain::trainer
