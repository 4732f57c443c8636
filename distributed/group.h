// A data-parallel group as the trainer sees it: who this process is, the
// store every rank shares, the tensor collectives (NCCL between GPUs, the
// store between CPU processes), a liveness monitor, and the few host-level
// agreements the loop needs (same configuration, when to stop, checkpoint
// phases, a clean exit).
#pragma once

#include "distributed/communicator.h"
#include "distributed/launch_env.h"
#include "distributed/liveness_monitor.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fptrain::distributed {

struct GroupOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(600)};
  // A peer whose heartbeat stands still this long (capped by `timeout`) is lost.
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(60)};
  bool nccl = false;      // tensor collectives through NCCL (CUDA), else through the store
  int device_index = -1;  // the rank's CUDA device with nccl
  // With nccl: how reduce-scatters and all-gathers of shared buffers move
  // (NcclCommunicator::Transfers: "auto", "copy_engine", "nccl").
  std::string transfers = "nccl";
  std::function<void(const std::string&)> fatal;  // logs a message before the process exits
};

class Group {
 public:
  // Connects to (rank 0: hosts) the store, starts the monitor, makes the
  // communicator. Throws with the rank and the address on failure.
  static std::unique_ptr<Group> join(const LaunchEnv& env, const GroupOptions& options);
  ~Group();

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  int local_rank() const { return env_.local_rank; }
  const LaunchEnv& env() const { return env_; }
  Communicator& comm() { return *comm_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }

  // Host-level collectives through the store (small values; `name` must be
  // unique per call and the same on every rank). A rank that does not arrive
  // within the timeout is named in the error.
  std::vector<std::string> all_gather_text(const std::string& name, const std::string& value);
  void barrier(const std::string& name);
  // Throws, naming the ranks whose `value` differs from rank 0's.
  void check_same(const std::string& what, const std::string& value);

  // What a rank's work came to: a value, or the error it met.
  struct Outcome {
    bool ok = true;
    std::string value;  // the result where ok, else the error message
  };
  // Rank 0 runs `decide` (an exception becomes its error) and every rank gets its outcome.
  Outcome leader_decides(const std::string& name, const std::function<std::string()>& decide);
  // Every rank runs `work`; every rank gets all outcomes, in rank order.
  std::vector<Outcome> each_reports(const std::string& name, const std::function<std::string()>& work);
  // Element-wise sums (in rank order: the same bits on every rank) and maxima
  // of small host vectors, the same length on every rank. Every rank must make
  // the same sequence of these calls (each call gets the next name).
  std::vector<double> sum_over_ranks(const std::vector<double>& mine);
  std::vector<int64_t> max_over_ranks(const std::vector<int64_t>& mine);

  // Stopping together (a signal reached some ranks): at the end of step t
  // every rank posts whether it wants to stop and learns whether anyone
  // wanted to at step t - 1 (posted a step ago, so normally without waiting).
  // Every rank gets the same answer for the same t, so the group stops after
  // the same step.
  bool stop_vote(int64_t step, bool want_stop, int64_t first_step);

  void set_step(int64_t step) { monitor_->set_step(step); }
  // This rank failed: tell the others (their monitors exit at once).
  void report_failure(const std::string& message) noexcept;
  // A clean end: every rank arrives, the monitors stop, rank 0 (the store's
  // host) waits until the others have left.
  void finish();

 private:
  Group(LaunchEnv env, GroupOptions options);
  std::vector<uint8_t> wait_get(const std::string& key, int from, const std::string& what);
  bool stop_vote_unguarded(int64_t step, bool want_stop, int64_t first_step);

  LaunchEnv env_;
  GroupOptions options_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<LivenessMonitor> monitor_;
  std::unique_ptr<Communicator> comm_;
  bool finished_ = false;
  int64_t reductions_ = 0;  // names the host reductions
};

}  // namespace fptrain::distributed
