// Helpers for the data-parallel tests: several fptrain processes at once,
// launched by hand (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or by torchrun,
// each under a hard time limit, and nothing left running afterwards.
//
// The runs use the trainer area's fixtures (tests/CMakeLists.txt: FIXTURES trainer)
// and its helpers (temporary folders, the base configuration, metrics.jsonl).
#pragma once

#include "models/safetensors.h"
#include "tests/trainer/trainer_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <thread>

namespace fptrain::distributed::testing {

namespace fs = std::filesystem;
using trainer::testing::base_config;
using trainer::testing::fixture;
using trainer::testing::read_file;
using trainer::testing::TempDir;
using trainer::testing::train_records;
using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;
using Json = nlohmann::json;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-12); }

// torchrun of the project's Python environment (next to FPTRAIN_PYTHON).
inline fs::path torchrun() { return fs::path(FPTRAIN_PYTHON).parent_path() / "torchrun"; }

// A TCP port nobody listens on now: the kernel picks one for a socket bound to
// port 0 of the loopback address. Tests running in parallel get different ones.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// Variables that make a process a rank of a group (ours, torchrun's, Slurm's
// MASTER_*): never inherited from the test's own environment.
inline bool is_launch_variable(const std::string& name) {
  static const std::set<std::string> names = {"RANK",        "LOCAL_RANK",  "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                              "GROUP_RANK",  "ROLE_RANK",   "ROLE_WORLD_SIZE",
                                              "MASTER_ADDR", "MASTER_PORT", "GROUP_WORLD_SIZE"};
  return names.count(name) > 0 || name.rfind("TORCHELASTIC_", 0) == 0;
}

// Live processes (zombies have an empty command line) whose command line
// mentions `text`: the test's own children and grandchildren, found by the
// unique temporary folder their arguments name.
inline std::vector<pid_t> processes_mentioning(const std::string& text) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == ::getpid()) continue;
    std::string cmdline = read_file(e.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(text) != std::string::npos) out.push_back(pid);
  }
  return out;
}

// One child process in its own process group, stdout and stderr into `log`.
// The destructor kills it (and its group) if it still runs.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const Env& env, fs::path log) : log_(std::move(log)) {
    std::vector<std::string> vars;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      if (!is_launch_variable(key) && env.count(key) == 0) vars.push_back(kv);
    }
    for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (auto& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (auto& a : argv_copy) args.push_back(a.data());
    args.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);  // its own group: killed with everything it started in it
    const int rc = posix_spawn(&pid_, argv_copy[0].c_str(), &actions, &attr, args.data(), envp.data());
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      pid_ = -1;
      ADD_FAILURE() << "cannot start " << argv[0] << ": " << std::strerror(rc);
    }
  }
  ~Process() {
    if (running()) kill_hard();
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Whether it still runs (reaps it once it has ended).
  bool running() {
    if (pid_ <= 0 || reaped_) return false;
    const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) reaped_ = true;
    return !reaped_;
  }
  // Waits until it ends or `limit` passes; true if it ended.
  bool wait_for(std::chrono::duration<double> limit) {
    const auto deadline = Clock::now() + limit;
    while (running()) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
  void signal(int sig) {
    if (running()) ::kill(pid_, sig);
  }
  // SIGKILL to its whole process group, then reaps it.
  void kill_hard() {
    if (pid_ <= 0 || reaped_) return;
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
    reaped_ = true;
  }
  // Its exit status; 128 + N when signal N ended it; -1 while it runs.
  int exit_code() const {
    if (!reaped_) return -1;
    if (WIFEXITED(status_)) return WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
    return -1;
  }
  std::string output() const { return read_file(log_); }
  const fs::path& log() const { return log_; }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

// A temporary folder for one test whose destructor first kills every process
// still naming it (a torchrun worker lives in its own session, out of reach of
// its launcher's process group), then removes it.
class WorkDir {
 public:
  WorkDir() = default;
  ~WorkDir() {
    for (pid_t pid : leftovers()) ::kill(pid, SIGKILL);
  }
  const fs::path& path() const { return dir_.path(); }
  fs::path operator/(const std::string& name) const { return dir_ / name; }
  fs::path write(const std::string& name, const std::string& content) const { return dir_.write(name, content); }
  // The processes of this test that still run (zombies excluded).
  // (Matched with the trailing slash: every such process names a file inside it,
  // and another folder's name may begin with this one's.)
  std::vector<pid_t> leftovers() const { return processes_mentioning(dir_.path().string() + "/"); }

 private:
  TempDir dir_;
};

// What the processes of one launch did.
struct Outcome {
  std::vector<int> exit_codes;       // per process (rank, or torchrun invocation)
  std::vector<std::string> outputs;  // stdout and stderr of each
  bool timed_out = false;
  double seconds = 0;

  bool all_succeeded() const {
    return !timed_out && std::all_of(exit_codes.begin(), exit_codes.end(), [](int c) { return c == 0; });
  }
  std::string describe() const {
    std::string s = timed_out ? "TIMED OUT (killed)\n" : "";
    for (size_t i = 0; i < outputs.size(); ++i)
      s += "---- process " + std::to_string(i) + " exit " + std::to_string(exit_codes[i]) + "\n" + outputs[i];
    return s;
  }
};

// Starts every process, waits for all of them up to `limit` in total; on a
// timeout kills them all. `outputs` come from their logs.
inline Outcome run_processes(std::vector<std::unique_ptr<Process>>& procs, std::chrono::duration<double> limit) {
  Outcome o;
  const auto start = Clock::now();
  for (auto& p : procs)
    if (!p->wait_for(limit - (Clock::now() - start))) o.timed_out = true;
  if (o.timed_out)
    for (auto& p : procs) p->kill_hard();
  o.seconds = seconds_since(start);
  for (auto& p : procs) {
    o.exit_codes.push_back(p->exit_code());
    o.outputs.push_back(p->output());
  }
  return o;
}

inline constexpr std::chrono::seconds kRunLimit{120};  // any one launch of these tests; normal runs take seconds

// `fptrain ARGS` as one process without any launch variable.
inline Outcome run_single(const WorkDir& dir, const std::string& name, const std::vector<std::string>& args,
                          const Env& env = {}, std::chrono::duration<double> limit = kRunLimit) {
  std::vector<std::string> argv = {FPTRAIN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::unique_ptr<Process>> procs;
  procs.push_back(std::make_unique<Process>(argv, env, dir / (name + ".log")));
  return run_processes(procs, limit);
}

// The environment of rank `rank` of `world` launched by hand.
inline Env rank_env(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)}};
}

// Starts rank r as `fptrain args[r]...` (the ranks' environments by hand, rank 0
// hosting the store on a free port) without waiting. Logs: <name>.rank<r>.log.
inline std::vector<std::unique_ptr<Process>> start_ranks(const WorkDir& dir, const std::string& name,
                                                         const std::vector<std::vector<std::string>>& args,
                                                         const Env& extra = {}) {
  const int world = static_cast<int>(args.size());
  const int port = free_port();
  std::vector<std::unique_ptr<Process>> procs;
  for (int r = 0; r < world; ++r) {
    Env env = rank_env(r, world, port);
    for (const auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv = {FPTRAIN_BINARY};
    argv.insert(argv.end(), args[r].begin(), args[r].end());
    procs.push_back(std::make_unique<Process>(argv, env, dir / (name + ".rank" + std::to_string(r) + ".log")));
  }
  return procs;
}

// `world` ranks of `fptrain ARGS` launched by hand, waited for. A launch whose
// store port was taken between free_port() and rank 0's bind is retried.
inline Outcome run_ranks(const WorkDir& dir, const std::string& name, int world, const std::vector<std::string>& args,
                         const Env& extra = {}, std::chrono::duration<double> limit = kRunLimit) {
  Outcome o;
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto procs = start_ranks(dir, name, std::vector<std::vector<std::string>>(world, args), extra);
    o = run_processes(procs, limit);
    if (o.outputs[0].find("is the port in use?") == std::string::npos) break;
  }
  return o;
}

// "train CFG --set A --set B ...".
inline std::vector<std::string> train_args(const fs::path& cfg, const std::vector<std::string>& sets = {}) {
  std::vector<std::string> args = {"train", cfg.string()};
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  return args;
}

// `sets` followed by `more`.
inline std::vector<std::string> with(std::vector<std::string> sets, const std::vector<std::string>& more) {
  sets.insert(sets.end(), more.begin(), more.end());
  return sets;
}

// The configuration of the data-parallel runs: the trainer tests' base (tiny
// model, CPU, fp32, reference attention, one thread) with AdamW at a rate that
// moves the weights visibly in a few steps, clipping, weight decay, and a metrics
// line every step; `extra` adds sections the base lacks.
inline std::string dp_config(const fs::path& run, const std::string& data, const std::string& extra = "") {
  return base_config(run, data,
                     "optimizer:\n  lr: 2.0e-3\n  weight_decay: 0.01\n  grad_clip: 1.0\n"
                     "logging:\n  log_interval: 1\n" +
                         extra);
}

// The error lines of a log ("[time] rank R error ..." or "[time] error ...").
inline std::vector<std::string> error_lines(const std::string& output) {
  std::vector<std::string> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.find(" error ") != std::string::npos) out.push_back(line);
  return out;
}

// Whether one of fptrain's error lines runs on into a LibTorch backtrace
// ("Exception raised from ..." on the next line) instead of being one message.
// (LibTorch's own warnings, "[W...] ...", carry backtraces too: not counted.)
inline bool error_runs_into_backtrace(const std::string& output) {
  std::istringstream in(output);
  std::string previous;
  for (std::string line; std::getline(in, line); previous = line)
    if (line.rfind("Exception raised from", 0) == 0 && previous.find(" error ") != std::string::npos) return true;
  return false;
}

// Whether some error line matches `pattern` (ECMAScript regex).
inline bool some_error_matches(const std::string& output, const std::string& pattern) {
  const std::regex re(pattern);
  for (const auto& line : error_lines(output))
    if (std::regex_search(line, re)) return true;
  return false;
}

// The events of <run>/metrics.jsonl named `event` ("eval", "checkpoint").
inline std::vector<Json> events(const fs::path& run, const std::string& event) {
  std::vector<Json> out;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded() && j.value("event", "") == event) out.push_back(j);
  }
  return out;
}

// The step-* folders under <run>/checkpoints, sorted.
inline std::vector<fs::path> checkpoint_folders(const fs::path& run) {
  std::vector<fs::path> out;
  if (!fs::is_directory(run / "checkpoints")) return out;
  for (const auto& e : fs::directory_iterator(run / "checkpoints"))
    if (e.path().filename().string().rfind("step-", 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

inline fs::path checkpoint_of(const fs::path& run, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return run / "checkpoints" / name;
}

// One training run: its folder, its per-step records, how its processes ended.
struct TrainRun {
  fs::path dir;
  std::vector<Json> records;
  Outcome outcome;
};

// Trains `name` (configuration dp_config(<dir>/<name>, data, extra), --set `sets`)
// on `world` ranks launched by hand, or as one plain process when world is 1.
inline TrainRun train_run(const WorkDir& dir, const std::string& name, int world, const std::string& data,
                          const std::string& extra, const std::vector<std::string>& sets = {}) {
  TrainRun t;
  t.dir = dir / name;
  const fs::path cfg = dir.write(name + ".yaml", dp_config(t.dir, data, extra));
  t.outcome = world == 1 ? run_single(dir, name, train_args(cfg, sets)) : run_ranks(dir, name, world, train_args(cfg, sets));
  EXPECT_TRUE(t.outcome.all_succeeded()) << name << ":\n" << t.outcome.describe();
  t.records = train_records(t.dir);
  return t;
}

// Step by step: the same step numbers and batch (examples, tokens, supervised
// tokens: the data of the step is the same), loss and grad_norm within `tol` (relative).
inline void expect_same_steps(const std::vector<Json>& got, const std::vector<Json>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("record " + std::to_string(i) + " (step " + want[i]["step"].dump() + ")");
    EXPECT_EQ(got[i]["step"], want[i]["step"]);
    EXPECT_EQ(got[i]["examples"], want[i]["examples"]);
    EXPECT_EQ(got[i]["tokens"], want[i]["tokens"]);
    EXPECT_EQ(got[i]["supervised_tokens"], want[i]["supervised_tokens"]);
    EXPECT_LE(rel(got[i]["loss"].get<double>(), want[i]["loss"].get<double>()), tol)
        << got[i]["loss"] << " vs " << want[i]["loss"];
    EXPECT_LE(rel(got[i]["grad_norm"].get<double>(), want[i]["grad_norm"].get<double>()), tol)
        << got[i]["grad_norm"] << " vs " << want[i]["grad_norm"];
  }
}

// The final weights of two runs, relative to how far training moved them from
// the fixture model. Over the whole model: the L2 distance at most 1e-5 of the L2
// movement (measured: at most 1.5e-6 in these runs). Per element only to 1e-3 of
// the tensor's largest move (measured: at most 2.2e-4): another rank split sums
// the gradients in another order, and where an element's gradient is the small
// difference of larger terms its rounding is large relative to it, which AdamW's
// g / sqrt(v) passes on undamped; 1 x 8 and 1 x 4 x 2 in one process differ the
// same way. The bit-exact tests of data_parallel_equivalence_test.cpp pin the
// reductions themselves down. Callers whose runs differ in the first steps'
// summation order (where AdamW's update is nearly sign(g)) pass looser bounds.
inline void expect_weights_close(const fs::path& got_ckpt, const fs::path& want_ckpt, double l2_tol = 1e-5,
                                 double element_tol = 1e-3) {
  const auto got = models::read_safetensors(got_ckpt / "model.safetensors");
  const auto want = models::read_safetensors(want_ckpt / "model.safetensors");
  const auto start = models::read_safetensors(fixture("llama") / "model.safetensors");
  ASSERT_EQ(got.size(), want.size());
  double diff_sq = 0, moved_sq = 0;
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    const at::Tensor& g = got.at(name);
    ASSERT_EQ(g.sizes(), t.sizes()) << name;
    const at::Tensor moved = (t - start.at(name)).to(at::kDouble), diff = (g - t).to(at::kDouble);
    ASSERT_GT(moved.abs().max().item<double>(), 0.0) << name << " did not train";
    EXPECT_LE(diff.abs().max().item<double>(), element_tol * moved.abs().max().item<double>()) << name;
    diff_sq += diff.square().sum().item<double>();
    moved_sq += moved.square().sum().item<double>();
  }
  EXPECT_LE(std::sqrt(diff_sq), l2_tol * std::sqrt(moved_sq))
      << "relative L2 distance " << std::sqrt(diff_sq / moved_sq);
}

}  // namespace fptrain::distributed::testing
