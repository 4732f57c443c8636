// Ways to start a group, and bad ways: torchrun on one node and as two "nodes"
// on this machine (c10d rendezvous, the agent's store), torchrun restarting a
// group that lost a rank, and launches that must fail fast with a message that
// says what is wrong.
#include "tests/distributed/dist_test_util.h"

namespace fptrain::distributed {
namespace {

using namespace testing;

const std::vector<std::string> kTen = {"training.max_steps=10", "data.shuffle=true"};

// `torchrun LAUNCH... --no-python fptrain train CFG --set SETS...` as a process.
std::unique_ptr<Process> start_torchrun(const WorkDir& dir, const std::string& log,
                                        const std::vector<std::string>& launch, const fs::path& cfg,
                                        const std::vector<std::string>& sets) {
  std::vector<std::string> argv = {torchrun().string()};
  argv.insert(argv.end(), launch.begin(), launch.end());
  argv.push_back("--no-python");
  argv.push_back(FPTRAIN_BINARY);
  for (const auto& a : train_args(cfg, sets)) argv.push_back(a);
  return std::make_unique<Process>(argv, Env{}, dir / (log + ".log"));
}

TEST(DataParallelLaunch, TorchrunOnOneNodeMatchesOneRank) {
  ASSERT_TRUE(fs::exists(torchrun())) << torchrun();
  WorkDir dir;
  const auto one = train_run(dir, "one", 1, "tokens.jsonl", "", with(kTen, {"batching.examples_per_micro_batch=8"}));
  const fs::path run = dir / "torchrun";
  const fs::path cfg = dir.write("torchrun.yaml", dp_config(run, "tokens.jsonl"));
  std::vector<std::unique_ptr<Process>> procs;
  procs.push_back(start_torchrun(dir, "torchrun", {"--standalone", "--nproc_per_node=2", "--max-restarts=0"}, cfg,
                                 with(kTen, {"batching.examples_per_micro_batch=4"})));
  const Outcome o = run_processes(procs, std::chrono::seconds(180));
  ASSERT_TRUE(o.all_succeeded()) << o.describe();
  EXPECT_NE(o.outputs[0].find("joined the group as rank 0/2 (local 0/2)"), std::string::npos) << o.outputs[0];
  EXPECT_NE(o.outputs[0].find("(torchrun's agent store)"), std::string::npos) << o.outputs[0];
  const auto records = train_records(run);
  expect_same_steps(records, one.records, 1e-5);
  // The ranks' balance (the mean rank's work over the busiest's) in every record, the summary and the log.
  for (const auto& r : records) {
    ASSERT_TRUE(r.contains("rank_balance")) << r.dump();
    EXPECT_GT(r["rank_balance"].get<double>(), 0.0);
    EXPECT_LE(r["rank_balance"].get<double>(), 1.0);
  }
  const Json summary = Json::parse(read_file(run / "summary.json"));
  EXPECT_GT(summary.value("rank_balance", 0.0), 0.0) << summary.dump();
  EXPECT_NE(o.outputs[0].find("ranks' balance: "), std::string::npos) << o.outputs[0];
  EXPECT_TRUE(dir.leftovers().empty());
}

TEST(DataParallelLaunch, TwoTorchrunNodesOnOneMachineMatchOneRank) {
  // Two torchrun invocations meeting through a c10d rendezvous, one process
  // each: what two machines do, with 127.0.0.1 standing in for the network.
  ASSERT_TRUE(fs::exists(torchrun())) << torchrun();
  WorkDir dir;
  const auto one = train_run(dir, "one", 1, "tokens.jsonl", "", with(kTen, {"batching.examples_per_micro_batch=8"}));
  const fs::path run = dir / "nodes";
  const fs::path cfg = dir.write("nodes.yaml", dp_config(run, "tokens.jsonl"));
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  const std::string id = "fptrain-test-" + std::to_string(::getpid()) + "-" + dir.path().filename().string();
  std::vector<std::unique_ptr<Process>> procs;
  for (int node = 0; node < 2; ++node)
    procs.push_back(start_torchrun(dir, "node" + std::to_string(node),
                                   {"--nnodes=2", "--node_rank=" + std::to_string(node), "--nproc_per_node=1",
                                    "--rdzv-backend=c10d", "--rdzv-endpoint=" + endpoint, "--rdzv-id=" + id,
                                    "--max-restarts=0"},
                                   cfg, with(kTen, {"batching.examples_per_micro_batch=4"})));
  const Outcome o = run_processes(procs, std::chrono::seconds(180));
  ASSERT_TRUE(o.all_succeeded()) << o.describe();
  // One of the nodes got rank 0 (the rendezvous decides): one process per node.
  const std::string both = o.outputs[0] + o.outputs[1];
  EXPECT_NE(both.find("joined the group as rank 0/2 (local 0/1)"), std::string::npos) << both;
  EXPECT_NE(both.find("(torchrun's agent store)"), std::string::npos) << both;
  const auto records = train_records(run);
  expect_same_steps(records, one.records, 1e-5);
  expect_weights_close(checkpoint_of(run, 10), checkpoint_of(one.dir, 10));
  EXPECT_TRUE(dir.leftovers().empty());
}

// The fptrain worker that torchrun started as global rank `rank` (from its
// environment), or -1.
pid_t torchrun_worker(const WorkDir& dir, int rank) {
  for (pid_t pid : dir.leftovers()) {
    const fs::path proc = fs::path("/proc") / std::to_string(pid);
    if (read_file(proc / "cmdline").rfind(FPTRAIN_BINARY, 0) != 0) continue;  // torchrun itself
    // NUL-separated NAME=VALUE entries, with a NUL in front so that each starts after one.
    const std::string environ_text = std::string(1, '\0') + read_file(proc / "environ");
    const std::string entry = std::string(1, '\0') + "RANK=" + std::to_string(rank) + std::string(1, '\0');
    if (environ_text.find(entry) != std::string::npos) return pid;
  }
  return -1;
}

TEST(DataParallelLaunch, TorchrunRestartsAGroupWhoseRankWasKilledFromItsLastCheckpoint) {
  // torchrun's agent store: a restarted group meets under a new prefix
  // (/worker/attempt_1), so nothing of the dead attempt's collectives is in its
  // way, and it resumes from the latest checkpoint.
  ASSERT_TRUE(fs::exists(torchrun())) << torchrun();
  WorkDir dir;
  const fs::path run = dir / "run";
  const fs::path cfg = dir.write("run.yaml", dp_config(run, "tokens.jsonl"));
  std::vector<std::unique_ptr<Process>> procs;
  procs.push_back(start_torchrun(dir, "torchrun", {"--standalone", "--nproc_per_node=2", "--max-restarts=1"}, cfg,
                                 {"training.max_steps=300", "checkpoint.interval=20",
                                  "batching.examples_per_micro_batch=4", "distributed.timeout=3"}));
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  while (!fs::exists(checkpoint_of(run, 20)) && procs[0]->running() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const pid_t victim = torchrun_worker(dir, 1);
  ASSERT_GT(victim, 0) << "no worker of rank 1 found\n" << procs[0]->output();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const Outcome o = run_processes(procs, std::chrono::seconds(120));
  ASSERT_TRUE(o.all_succeeded()) << o.describe();
  // The first attempt's rank 0 lost rank 1 (torchrun's SIGTERM only asks for a
  // stop; it ends when its wait for rank 1 times out).
  EXPECT_TRUE(some_error_matches(o.outputs[0], R"(rank 0: .*rank 1\b)")) << o.outputs[0];
  const std::regex resumed(R"(resumed from \S+/step-(\d+) at step (\d+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(o.outputs[0], m, resumed)) << o.outputs[0];
  EXPECT_GE(std::stoi(m[2]), 20);
  EXPECT_EQ(std::stoi(m[1]), std::stoi(m[2]));
  // Every step once in the metrics (the dead attempt's steps after its checkpoint are dropped).
  const auto records = train_records(run);
  ASSERT_EQ(records.size(), 300u);
  for (size_t i = 0; i < records.size(); ++i) EXPECT_EQ(records[i]["step"], static_cast<int64_t>(i + 1));
  const Json summary = Json::parse(read_file(run / "summary.json"));
  EXPECT_EQ(summary["steps_completed"], 300);
  EXPECT_TRUE(dir.leftovers().empty());
}

// ---- bad launches ------------------------------------------------------------

constexpr double kFast = 30.0;  // seconds: a bad launch is refused at once, not after some timeout

TEST(DataParallelLaunch, WorldSizeWithoutMasterAddrIsRefused) {
  WorkDir dir;
  const fs::path cfg = dir.write("c.yaml", dp_config(dir / "run", "tokens.jsonl"));
  const Outcome o = run_single(dir, "run", train_args(cfg, kTen), {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(o.exit_codes[0], 0) << o.describe();
  EXPECT_LT(o.seconds, kFast);
  EXPECT_TRUE(some_error_matches(o.outputs[0], "WORLD_SIZE=2 but MASTER_ADDR is not set")) << o.outputs[0];
  EXPECT_TRUE(checkpoint_folders(dir / "run").empty());
}

TEST(DataParallelLaunch, RankNotBelowWorldSizeIsRefused) {
  WorkDir dir;
  const fs::path cfg = dir.write("c.yaml", dp_config(dir / "run", "tokens.jsonl"));
  const Outcome o = run_single(dir, "run", train_args(cfg, kTen), rank_env(2, 2, free_port()));
  EXPECT_NE(o.exit_codes[0], 0) << o.describe();
  EXPECT_LT(o.seconds, kFast);
  EXPECT_TRUE(some_error_matches(o.outputs[0], R"(RANK='2' must be an integer in \[0, 1\])")) << o.outputs[0];
}

TEST(DataParallelLaunch, RanksWithDifferentConfigurationsAreRefusedNamingTheRank) {
  WorkDir dir;
  const fs::path cfg = dir.write("c.yaml", dp_config(dir / "run", "tokens.jsonl"));
  const auto args = train_args(cfg, kTen);
  auto odd = args;
  odd.insert(odd.end(), {"--set", "optimizer.lr=1e-3"});
  auto procs = start_ranks(dir, "run", {args, odd});
  const Outcome o = run_processes(procs, std::chrono::seconds(120));
  ASSERT_FALSE(o.timed_out) << o.describe();
  EXPECT_LT(o.seconds, kFast);
  EXPECT_NE(o.exit_codes[0], 0) << o.describe();
  EXPECT_NE(o.exit_codes[1], 0) << o.describe();
  EXPECT_TRUE(some_error_matches(o.outputs[0], R"(the configuration .* of rank\(s\) 1 differs from rank 0's)"))
      << o.outputs[0];
  EXPECT_TRUE(train_records(dir / "run").empty());
  EXPECT_TRUE(checkpoint_folders(dir / "run").empty());
}

// DISABLED: fails about one run in six to twelve (see the report). Every rank of a group
// whose configurations differ detects it (Group::check_same), and each should
// say so. Rank 0 does; rank 1 sometimes prints "Connection reset by peer" and a
// LibTorch backtrace instead: rank 0 throws and exits, taking the store it hosts
// with it, while rank 1 is still in the clean-up of Group::all_gather_text (its
// add/deleteKey are outside the wrapped wait).
TEST(DataParallelLaunch, EveryRankOfMismatchedConfigurationsSaysWhy) {
  WorkDir dir;
  const fs::path cfg = dir.write("c.yaml", dp_config(dir / "run", "tokens.jsonl"));
  const auto args = train_args(cfg, kTen);
  auto odd = args;
  odd.insert(odd.end(), {"--set", "optimizer.lr=1e-3"});
  for (int attempt = 0; attempt < 6; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    auto procs = start_ranks(dir, "run" + std::to_string(attempt), {args, odd});
    const Outcome o = run_processes(procs, std::chrono::seconds(120));
    ASSERT_FALSE(o.timed_out) << o.describe();
    EXPECT_TRUE(some_error_matches(o.outputs[1], R"(rank 1: the configuration .* differs from rank 0's)"))
        << o.outputs[1];
    EXPECT_FALSE(error_runs_into_backtrace(o.outputs[1])) << o.outputs[1];
  }
}

// Two ranks launched with `set` both exit non-zero, fast (before they
// connect), with an error matching `error`.
void expect_both_ranks_refuse(const std::string& set, const std::string& error) {
  WorkDir dir;
  const fs::path cfg = dir.write("c.yaml", dp_config(dir / "run", "tokens.jsonl"));
  const Outcome o = run_ranks(dir, "run", 2, train_args(cfg, with(kTen, {set})));
  ASSERT_FALSE(o.timed_out) << o.describe();
  EXPECT_LT(o.seconds, kFast);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(o.exit_codes[r], 0) << o.describe();
    EXPECT_TRUE(some_error_matches(o.outputs[r], error)) << o.outputs[r];
  }
}

TEST(DataParallelLaunch, OneNamedGpuForEveryRankIsRefused) {
  // device: cuda:0 would put every rank on one GPU. The refusal (or, on a
  // machine without a GPU, the report of that) comes before any connection.
  expect_both_ranks_refuse("device=cuda:0", R"(cuda:LOCAL_RANK|no CUDA GPU|GPU\(s\) are visible)");
}

TEST(DataParallelLaunch, CopyEngineTransfersBetweenCpuProcessesAreRefused) {
  // distributed.transfers: copy_engine promises copies between GPUs or an
  // error; CPU ranks say so before they connect.
  expect_both_ranks_refuse("distributed.transfers=copy_engine", R"(distributed\.transfers: copy_engine)");
}

TEST(DataParallelLaunch, ARankWhosePeerNeverComesNamesIt) {
  // Rank 0 alone: it hosts the store and waits for rank 1 at the first barrier.
  WorkDir dir;
  const fs::path cfg = dir.write("c.yaml", dp_config(dir / "run", "tokens.jsonl"));
  const std::vector<std::string> args = train_args(cfg, with(kTen, {"distributed.timeout=3"}));
  std::vector<std::unique_ptr<Process>> procs;
  std::vector<std::string> argv = {FPTRAIN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  procs.push_back(std::make_unique<Process>(argv, rank_env(0, 2, free_port()), dir / "rank0.log"));
  Outcome o = run_processes(procs, std::chrono::seconds(60));
  ASSERT_FALSE(o.timed_out) << o.describe();
  EXPECT_NE(o.exit_codes[0], 0);
  EXPECT_LT(o.seconds, 3 + 10.0);
  EXPECT_TRUE(some_error_matches(o.outputs[0], R"(rank 1 did not arrive at .* within 3 s \(distributed.timeout\))"))
      << o.outputs[0];
  // Rank 1 alone: nobody hosts the store.
  procs.clear();
  procs.push_back(std::make_unique<Process>(argv, rank_env(1, 2, free_port()), dir / "rank1.log"));
  o = run_processes(procs, std::chrono::seconds(60));
  ASSERT_FALSE(o.timed_out) << o.describe();
  EXPECT_NE(o.exit_codes[0], 0);
  EXPECT_LT(o.seconds, 3 + 10.0);
  EXPECT_TRUE(some_error_matches(o.outputs[0], R"(rank 1: cannot reach the store at 127\.0\.0\.1:\d+)")) << o.outputs[0];
  EXPECT_TRUE(dir.leftovers().empty());
}

}  // namespace
}  // namespace fptrain::distributed
