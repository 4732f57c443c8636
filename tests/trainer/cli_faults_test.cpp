// Faults found by adversarial testing of the command line (issue 10): data that
// yields no step, configuration files with duplicate or far-off keys, a value
// fixed by --set, pruning that must never leave a half checkpoint, an output
// folder that cannot be written, and resuming from damaged checkpoints.
#include "models/safetensors.h"
#include "tests/trainer/trainer_test_util.h"
#include "trainer/checkpoint_store.h"

#include <chrono>
#include <csignal>
#include <fcntl.h>
#include <thread>

extern char** environ;

namespace fptrain::trainer {
namespace {

using namespace testing;
using Clock = std::chrono::steady_clock;

#define EXPECT_HAS(text, needle) EXPECT_NE((text).find(needle), std::string::npos) << (text)

// A configuration on the tiny fixture model whose training data is `data`
// (format given, so detection does not reject the file first) with bad lines skipped.
std::string config_for_data(const fs::path& run, const fs::path& data, const std::string& extra) {
  return "model:\n  path: " + fixture("llama").string() +
         "\n  dtype: float32\n  attention: reference\n"
         "device: cpu\ncpu_threads: 1\n"
         "output_dir: " + run.string() + "\n"
         "data:\n  train: [{path: " + data.string() + ", format: messages}]\n  max_length: 256\n"
         "  shuffle: false\n  workers: 1\n  chat_template: llama2\n  bad_lines: skip\n" + extra;
}

// fptrain under a two-minute `timeout` (exit 124 if it hangs), and how long it took.
CommandResult run_fptrain_bounded(const std::vector<std::string>& args, double* seconds) {
  std::string cmd = "timeout 120 " + quote(FPTRAIN_BINARY);
  for (const auto& a : args) cmd += " " + quote(a);
  const auto start = Clock::now();
  CommandResult r = run_command(cmd);
  *seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

// Every folder named step-* under the run's checkpoints/.
std::vector<fs::path> step_folders(const fs::path& run) {
  std::vector<fs::path> out;
  if (!fs::is_directory(checkpoints_dir(run))) return out;
  for (const auto& e : fs::directory_iterator(checkpoints_dir(run)))
    if (e.path().filename().string().rfind("step-", 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(TrainCliFaults, AllBadLinesWithMaxStepsFailsQuicklyWithoutACheckpoint) {
  TempDir dir;
  std::string lines;
  for (int i = 0; i < 50; ++i) lines += "{not json\n";
  const fs::path data = dir.write("bad.jsonl", lines);
  const fs::path run = dir / "run";
  const std::string cfg = dir.write("c.yaml", config_for_data(run, data, "training:\n  max_steps: 1000\n"));
  double seconds = 0;
  const CommandResult r = run_fptrain_bounded({"train", cfg}, &seconds);
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << r.exit_code << "\n" << r.output;
  EXPECT_HAS(r.output, "data.train yields no training step");
  EXPECT_HAS(r.output, "50 skipped");
  EXPECT_HAS(r.output, "malformed_json: 50 (first at " + data.string() + ":1)");
  EXPECT_HAS(r.output, "no checkpoint was written");
  EXPECT_LT(seconds, 60.0);
  EXPECT_TRUE(step_folders(run).empty());
}

TEST(TrainCliFaults, EmptyDataFileWithMaxStepsFailsQuicklyWithoutACheckpoint) {
  TempDir dir;
  const fs::path data = dir.write("empty.jsonl", "");
  const fs::path run = dir / "run";
  const std::string cfg = dir.write("c.yaml", config_for_data(run, data, "training:\n  max_steps: 1000\n"));
  double seconds = 0;
  CommandResult r = run_fptrain_bounded({"train", cfg}, &seconds);
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << r.exit_code << "\n" << r.output;
  EXPECT_HAS(r.output, "data.train yields no training step (0 examples seen");
  EXPECT_LT(seconds, 60.0);
  EXPECT_TRUE(step_folders(run).empty());
  // With format detection the empty file is named.
  r = run_fptrain_bounded({"train", cfg, "--set", "data.train=" + data.string()}, &seconds);
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << r.exit_code << "\n" << r.output;
  EXPECT_HAS(r.output, data.string() + ": cannot detect the data format");
  EXPECT_TRUE(step_folders(run).empty());
}

TEST(TrainCliFaults, SigtermStopsARunReadingThroughBadLines) {
  TempDir dir;
  // Two million skipped lines: reading through them takes many seconds, which
  // once delayed a stop request to the end of the epoch.
  std::string lines;
  lines.reserve(2000000 * 16);
  for (int i = 0; i < 2000000; ++i) lines += "{\"messages\": 1}\n";  // wrong type: every line skipped
  const fs::path data = dir.write("bad.jsonl", lines);
  lines.clear();
  const fs::path run = dir / "run";
  const std::string cfg = dir.write("c.yaml", config_for_data(run, data, "training:\n  max_steps: 1000000\n"));
  const std::string log = (dir / "out.log").string();
  const pid_t pid = testing::spawn_fptrain({"train", cfg}, log);
  ASSERT_GT(pid, 0);

  // Once the loop waits for its first step (the banner is logged), ask it to stop.
  for (int i = 0; i < 600 && read_file(log).find("| output ") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  const auto sent = Clock::now();
  int status = 0;
  pid_t done = 0;
  while (done == 0 && Clock::now() - sent < std::chrono::seconds(120)) {
    done = ::waitpid(pid, &status, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (done == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    FAIL() << "fptrain did not stop within 120 s of SIGTERM\n" << read_file(log);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - sent).count();
  const std::string out = read_file(log);
  EXPECT_LT(seconds, 5.0) << out;
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_HAS(out, "stopped by SIGTERM before the first step; nothing was trained and no checkpoint was written");
  EXPECT_TRUE(step_folders(run).empty());
}

TEST(TrainCliFaults, DuplicateKeysNameBothLines) {
  TempDir dir;
  const std::string base = base_config(dir / "run", "chat.jsonl");
  const auto base_lines = std::count(base.begin(), base.end(), '\n');
  const std::string cfg = dir.write("dup.yaml", base + "training:\n  max_steps: 2\n  max_steps: 3\n");
  CommandResult r = run_fptrain({"train", cfg});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "dup.yaml:" + std::to_string(base_lines + 3) + ": training.max_steps: is given twice (first on line " +
                           std::to_string(base_lines + 2) + ")");
  // A repeated section too.
  const std::string cfg2 = dir.write("dup2.yaml", base + "optimizer:\n  lr: 0.1\ntraining:\n  max_steps: 2\noptimizer:\n  eps: 1.0e-6\n");
  r = run_fptrain({"train", cfg2});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "dup2.yaml:" + std::to_string(base_lines + 5) + ": optimizer: is given twice (first on line " +
                           std::to_string(base_lines + 1) + ")");
  EXPECT_FALSE(fs::exists(dir / "run" / "metrics.jsonl"));
}

TEST(TrainCliFaults, AnInvalidValueFixedBySetIsAccepted) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string cfg =
      dir.write("c.yaml", base_config(run, "chat.jsonl", "optimizer:\n  lr: 0\nschedule:\n  decay: constant\ntraining:\n  max_steps: 1\n"));
  CommandResult r = run_fptrain({"train", cfg});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_HAS(r.output, "optimizer.lr: 0 is out of range");
  r = run_fptrain({"train", cfg, "--set", "optimizer.lr=1e-4"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto records = train_records(run);
  ASSERT_EQ(records.size(), 1u) << r.output;
  EXPECT_DOUBLE_EQ(records[0]["lr"].get<double>(), 1e-4);
}

// Gemma 2's soft-capped attention: torch-fa2 has none and is refused naming why; auto
// trains (on CPU through the reference).
TEST(TrainCliFaults, GemmaSoftCapsRefuseTorchFa2) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string cfg = dir.write("c.yaml", base_config(run, "tokens.jsonl", "training:\n  max_steps: 1\n"));
  const std::string gemma = "model.path=" + fixture("gemma2").string();
  CommandResult r = run_fptrain({"train", cfg, "--set", gemma, "--set", "model.attention=torch-fa2"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "attn_logit_softcapping");
  r = run_fptrain({"train", cfg, "--set", gemma, "--set", "model.attention=auto"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, "Gemma: its RMSNorm");
  EXPECT_EQ(train_records(run).size(), 1u);
}

TEST(TrainCliFaults, UnknownKeyFarFromEveryKeySuggestsNothing) {
  TempDir dir;
  const std::string base = base_config(dir / "run", "chat.jsonl", "training:\n  max_steps: 2\n");
  for (const std::string& extra : {std::string("optimizer:\n  zzqxjv: 1\n"), std::string("wibble_wobble_key: 1\n")}) {
    const std::string cfg = dir.write("c.yaml", base + extra);
    const CommandResult r = run_fptrain({"train", cfg});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_HAS(r.output, "no valid key is close to it");
    EXPECT_EQ(r.output.find("did you mean"), std::string::npos) << r.output;
  }
  // A near miss still gets its suggestion.
  const CommandResult r = run_fptrain({"train", dir.write("c.yaml", base + "optimizer:\n  eps_: 1\n").string()});
  EXPECT_HAS(r.output, "did you mean 'optimizer.eps'?");
}

// A fake but complete checkpoint folder for `step`.
void write_fake_checkpoint(const fs::path& run, int64_t step) {
  const fs::path d = checkpoints_dir(run) / checkpoint_name(step);
  fs::create_directories(d);
  for (const char* f : {"config.json", "model.safetensors", "training_state.safetensors", "trainer_state.json"})
    std::ofstream(d / f) << "{}";
}

bool is_complete(const fs::path& ckpt) {
  return fs::is_regular_file(ckpt / "trainer_state.json") && fs::is_regular_file(ckpt / "training_state.safetensors") &&
         (fs::is_regular_file(ckpt / "model.safetensors") || fs::is_regular_file(ckpt / "model.safetensors.index.json"));
}

TEST(TrainCliFaults, PruningNeverLeavesAHalfCheckpoint) {
  TempDir dir;
  const fs::path run = dir / "run";
  for (int64_t step : {1, 2, 3, 4, 5}) write_fake_checkpoint(run, step);
  // What a prune killed between its rename and its delete leaves, and a killed save.
  const fs::path deleting = checkpoints_dir(run) / ".step-00000000.deleting.4242";
  fs::create_directories(deleting);
  std::ofstream(deleting / "trainer_state.json") << "{}";
  fs::create_directories(checkpoints_dir(run) / ".step-00000006.tmp.4242");
  EXPECT_EQ(list_checkpoints(run).size(), 5u);  // the hidden folders are never checkpoints

  prune_checkpoints(run, 2);
  EXPECT_EQ(step_folders(run),
            (std::vector<fs::path>{checkpoints_dir(run) / checkpoint_name(4), checkpoints_dir(run) / checkpoint_name(5)}));
  for (const auto& e : fs::directory_iterator(checkpoints_dir(run))) {
    EXPECT_EQ(e.path().filename().string().rfind(".", 0), std::string::npos) << "leftover " << e.path();
    EXPECT_TRUE(is_complete(e.path())) << e.path();
  }
  EXPECT_EQ(latest_checkpoint(run), checkpoints_dir(run) / checkpoint_name(5));
}

TEST(TrainCliFaults, KeepLastOneLeavesOneCompleteCheckpoint) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string cfg = dir.write(
      "c.yaml", base_config(run, "chat.jsonl",
                            "batching:\n  examples_per_micro_batch: 4\ntraining:\n  max_steps: 4\n"
                            "checkpoint:\n  interval: 1\n  keep_last: 1\n"));
  const CommandResult r = run_fptrain({"train", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(step_folders(run), (std::vector<fs::path>{checkpoints_dir(run) / checkpoint_name(4)}));
  for (const auto& e : fs::directory_iterator(checkpoints_dir(run))) {
    EXPECT_EQ(e.path().filename().string().rfind(".", 0), std::string::npos) << "leftover " << e.path();
    EXPECT_TRUE(is_complete(e.path())) << e.path();
  }
}

TEST(TrainCliFaults, OutputDirThatCannotBeWrittenIsNamed) {
  TempDir dir;
  const fs::path file = dir.write("a_file", "x");
  const fs::path run = file / "run";  // a folder under a regular file: fails for root too
  const std::string cfg = dir.write("c.yaml", base_config(run, "chat.jsonl", "training:\n  max_steps: 2\n"));
  CommandResult r = run_fptrain({"train", cfg});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_HAS(r.output, run.string());
  EXPECT_HAS(r.output, "output_dir must be a writable folder");

  // An existing read-only folder (root ignores permissions: only checked otherwise).
  if (::geteuid() != 0) {
    const fs::path ro = dir / "read_only";
    fs::create_directories(ro);
    fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
    const std::string cfg2 = dir.write("c2.yaml", base_config(ro, "chat.jsonl", "training:\n  max_steps: 2\n"));
    r = run_fptrain({"train", cfg2});
    fs::permissions(ro, fs::perms::owner_all);
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_HAS(r.output, ro.string());
    EXPECT_HAS(r.output, "output_dir must be a writable folder");
  }
}

// ---- resuming from damaged checkpoints ------------------------------------------

// Trains 2 steps into `run` and returns the final checkpoint.
fs::path train_two_steps(const TempDir& dir, const fs::path& run, std::string* cfg) {
  *cfg = dir.write("c.yaml", base_config(run, "chat.jsonl",
                                         "batching:\n  examples_per_micro_batch: 4\ntraining:\n  max_steps: 2\n"))
             .string();
  const CommandResult r = run_fptrain({"train", *cfg});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return checkpoints_dir(run) / checkpoint_name(2);
}

TEST(TrainCliFaults, ResumeWithoutAnOptimizerTensorNamesTheFileAndTheTensor) {
  TempDir dir;
  const fs::path run = dir / "run";
  std::string cfg;
  const fs::path ckpt = train_two_steps(dir, run, &cfg);
  const fs::path state_file = ckpt / "training_state.safetensors";
  models::TensorMap tensors = models::read_safetensors(state_file);
  const std::string dropped = "optimizer.exp_avg.model.norm.weight";
  ASSERT_EQ(tensors.erase(dropped), 1u);
  models::write_safetensors(state_file, tensors);
  const CommandResult r = run_fptrain({"train", cfg, "--set", "training.max_steps=4"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, state_file.string() + ": missing tensor '" + dropped + "'");
  EXPECT_HAS(r.output, "the checkpoint is incomplete or was written for another model");
}

TEST(TrainCliFaults, ResumeFromStateWithoutOptimizerTensorsIsAnError) {
  TempDir dir;
  const fs::path run = dir / "run";
  std::string cfg;
  const fs::path ckpt = train_two_steps(dir, run, &cfg);
  const fs::path state_file = ckpt / "training_state.safetensors";
  models::TensorMap only_rng;
  for (auto& [name, t] : models::read_safetensors(state_file))
    if (name.rfind("rng.", 0) == 0) only_rng.emplace(name, t);
  models::write_safetensors(state_file, only_rng);
  std::string e;
  try {
    load_training_state(ckpt);
  } catch (const std::exception& ex) {
    e = ex.what();
  }
  EXPECT_HAS(e, state_file.string() + ": holds no optimizer state");
  EXPECT_HAS(e, "incomplete");
  const CommandResult r = run_fptrain({"train", cfg, "--set", "training.max_steps=4"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_HAS(r.output, state_file.string() + ": holds no optimizer state");

  fs::remove(state_file);
  try {
    load_training_state(ckpt);
  } catch (const std::exception& ex) {
    e = ex.what();
  }
  EXPECT_HAS(e, state_file.string() + ": missing; the checkpoint is incomplete");
}

TEST(TrainCliFaults, HostileTrainerStateJson) {
  TempDir dir;
  const fs::path ckpt = dir / "step-00000001";
  fs::create_directories(ckpt);
  const fs::path meta = ckpt / "trainer_state.json";
  auto error = [&] {
    try {
      load_training_state(ckpt);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  std::ofstream(meta) << "{\"format_version\": 1, \"x\": " << std::string(100000, '[') << std::string(100000, ']')
                      << "}";
  std::string e = error();
  EXPECT_HAS(e.substr(0, 500), meta.string() + ": invalid JSON: nested deeper than");
  std::ofstream(meta, std::ios::trunc) << "{\"format_version\": 1, \"step\": \"" << std::string(100000, '9')
                                       << "\", \"total_steps\": 2, \"data_cursor\": {}}";
  e = error();
  EXPECT_HAS(e.substr(0, 500), meta.string() + ": key 'step': expected an integer");
  EXPECT_LT(e.size(), 500u);
  std::ofstream(meta, std::ios::trunc) << R"({"format_version": 1, "step": 1, "total_steps": 2, "data_cursor": {},)"
                                       << R"( "counters": {"tokens": "many"}})";
  EXPECT_HAS(error(), meta.string() + ": counters.tokens: expected an integer");
  std::ofstream(meta, std::ios::trunc) << R"({"format_version": 7})";
  EXPECT_HAS(error(), meta.string() + ": unsupported format_version 7");
  std::ofstream(meta, std::ios::trunc) << R"([1])";
  EXPECT_HAS(error(), meta.string() + ": key 'format_version' is missing");
}

}  // namespace
}  // namespace fptrain::trainer
