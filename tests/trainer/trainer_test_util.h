// Helpers for the trainer tests: temporary run folders, the fixtures, running
// the fptrain binary and the Python reference scripts, reading metrics.
#pragma once

#include "common/files.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <vector>

namespace fptrain::trainer::testing {

namespace fs = std::filesystem;

inline fs::path fixture(const std::string& name) { return fs::path(FPTRAIN_FIXTURE_DIR) / name; }
inline fs::path source_file(const std::string& name) { return fs::path(FPTRAIN_SOURCE_DIR) / name; }

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("fptrain_trainer_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    common::remove_tree(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { common::remove_tree(path_); }
  fs::path write(const std::string& name, const std::string& content) const {
    const fs::path p = path_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// fptrain with arguments (each quoted).
inline CommandResult run_fptrain(const std::vector<std::string>& args) {
  std::string cmd = quote(FPTRAIN_BINARY);
  for (const auto& a : args) cmd += " " + quote(a);
  return run_command(cmd);
}

// A Python script of this test folder; returns the last line of its stdout parsed
// as JSON (fails the test otherwise). Its stderr (progress bars, warnings) is kept apart.
// Starts `fptrain ARGS...` in the background with stdout and stderr going to
// `log_path`; returns its pid (-1 if it could not start). For signal tests.
inline pid_t spawn_fptrain(const std::vector<std::string>& args, const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<std::string> all = {FPTRAIN_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, FPTRAIN_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

inline nlohmann::json run_python(const std::string& script, const std::vector<std::string>& args) {
  std::string cmd = quote(FPTRAIN_PYTHON) + " " + quote(source_file("tests/trainer/" + script).string());
  for (const auto& a : args) cmd += " " + quote(a);
  const std::string base = fs::temp_directory_path() / ("fptrain_py_" + std::to_string(::getpid()));
  const int status = std::system((cmd + " > " + quote(base + ".out") + " 2> " + quote(base + ".err")).c_str());
  std::ifstream in(base + ".out"), err_in(base + ".err");
  std::string line, last, err((std::istreambuf_iterator<char>(err_in)), {});
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  fs::remove(base + ".out");
  fs::remove(base + ".err");
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && !last.empty();
  if (!ok) ADD_FAILURE() << script << " failed:\n" << err;
  return ok ? nlohmann::json::parse(last) : nlohmann::json();
}

// The per-step training records of <run>/metrics.jsonl (eval/checkpoint events excluded).
inline std::vector<nlohmann::json> train_records(const fs::path& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run_dir / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    // A record being written while a test polls the file may be incomplete: skip it.
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && !j.contains("event")) out.push_back(j);
  }
  return out;
}

inline std::vector<double> losses(const std::vector<nlohmann::json>& records) {
  std::vector<double> out;
  for (const auto& r : records) out.push_back(r.at("loss").get<double>());
  return out;
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Two runs of `steps` steps trained alike: every step's logged loss and gradient norm equal,
// and their final checkpoints' weights and training state byte for byte.
inline void expect_same_training(const fs::path& a_dir, const fs::path& b_dir, size_t steps) {
  const auto a = train_records(a_dir), b = train_records(b_dir);
  ASSERT_EQ(a.size(), steps);
  ASSERT_EQ(b.size(), steps);
  for (size_t i = 0; i < steps; ++i) {
    EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
  char step_dir[32];
  std::snprintf(step_dir, sizeof step_dir, "checkpoints/step-%08zu", steps);
  for (const char* file : {"model.safetensors", "training_state.safetensors"})
    EXPECT_TRUE(read_file(a_dir / step_dir / file) == read_file(b_dir / step_dir / file)) << file;
}

// A training configuration on the tiny fixture model, CPU, fp32, logging every step.
// `extra` is appended (later keys of a YAML mapping may not repeat earlier ones, so
// tests pass sections the base does not set, or use --set).
inline std::string base_config(const fs::path& output_dir, const std::string& data_file,
                               const std::string& extra = "") {
  return "model:\n  path: " + fixture("llama").string() +
         "\n  dtype: float32\n  attention: reference\n"
         "device: cpu\ncpu_threads: 1\n"
         "output_dir: " + output_dir.string() + "\n"
         "data:\n  train: " + fixture(data_file).string() + "\n  max_length: 256\n  shuffle: false\n  workers: 1\n  chat_template: llama2\n" +
         extra;
}

}  // namespace fptrain::trainer::testing
