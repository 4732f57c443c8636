// A thread per rank that keeps the group honest about who is alive, through its
// own connection to the store:
//   - every second it bumps this rank's heartbeat (with the step it is at);
//   - a peer whose heartbeat has not moved for `heartbeat_timeout` is lost
//     (killed, frozen, its machine gone): this rank says which, tells the
//     others (the "abort" key) and exits non-zero;
//   - a peer that failed (Group::report_failure) makes every rank exit
//     non-zero at once, quoting its message;
//   - the store itself gone (rank 0, its host, died) for a few seconds (at
//     most `timeout`): exit too.
// So no rank waits forever for a dead one, with or without torchrun (srun does
// not stop the siblings of a failed task by itself).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace fptrain::distributed {

class LivenessMonitor {
 public:
  // `fatal` logs a message before the process exits (it must not throw).
  LivenessMonitor(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                  std::chrono::milliseconds heartbeat_timeout, std::chrono::milliseconds timeout,
                  std::function<void(const std::string&)> fatal,
                  std::chrono::milliseconds period = std::chrono::milliseconds(1000));
  ~LivenessMonitor();  // stops the thread
  void stop();
  void set_step(int64_t step) { step_.store(step); }

 private:
  void run();
  [[noreturn]] void lose(const std::string& message);

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, world_;
  std::chrono::milliseconds heartbeat_timeout_, timeout_, period_;
  std::function<void(const std::string&)> fatal_;
  std::atomic<int64_t> step_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

// The key a failing rank sets so that the others stop at once.
inline constexpr const char* kAbortKey = "abort";
// The heartbeat key of `rank`.
std::string heartbeat_key(int rank);

}  // namespace fptrain::distributed
