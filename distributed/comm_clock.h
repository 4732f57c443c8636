// How long a step waited for its collectives, i.e. the communication that
// nothing overlapped ("exposed"). On the CPU (store collectives) that is host
// time; on a GPU the host never waits: CUDA events on the compute stream,
// recorded before and after the stream waits for NCCL, measure the stream's
// idle gap, and are read only when the metrics read the loss anyway.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <vector>

namespace fptrain::distributed {

// The exposed time of one step, read when needed (may synchronize with the device).
class CommTiming {
 public:
  virtual ~CommTiming() = default;
  virtual double seconds() const = 0;
};

class CommClock {
 public:
  explicit CommClock(const at::Device& device) : device_(device) {}
  // Bracket each wait for a collective.
  void before_wait();
  void after_wait();
  // The step's timing; the clock starts over.
  std::shared_ptr<const CommTiming> take();

 private:
  at::Device device_;
  double host_seconds_ = 0;
  std::chrono::steady_clock::time_point started_;
  std::shared_ptr<void> events_;  // CUDA: the step's event pairs (comm_clock.cpp)
};

}  // namespace fptrain::distributed
