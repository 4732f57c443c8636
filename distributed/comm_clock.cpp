#include "distributed/comm_clock.h"

#include <ATen/cuda/CUDAEvent.h>

namespace fptrain::distributed {
namespace {

using Events = std::vector<std::pair<std::shared_ptr<at::cuda::CUDAEvent>, std::shared_ptr<at::cuda::CUDAEvent>>>;

class HostTiming : public CommTiming {
 public:
  explicit HostTiming(double s) : s_(s) {}
  double seconds() const override { return s_; }

 private:
  double s_;
};

class EventTiming : public CommTiming {
 public:
  explicit EventTiming(std::shared_ptr<Events> events) : events_(std::move(events)) {}
  double seconds() const override {
    double ms = 0;
    for (const auto& [a, b] : *events_) {
      b->synchronize();
      ms += a->elapsed_time(*b);
    }
    return ms / 1000.0;
  }

 private:
  std::shared_ptr<Events> events_;
};

}  // namespace

void CommClock::before_wait() {
  if (device_.is_cuda()) {
    if (!events_) events_ = std::make_shared<Events>();
    auto& ev = *std::static_pointer_cast<Events>(events_);
    ev.emplace_back(std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault), std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault));
    ev.back().first->record();
  } else {
    started_ = std::chrono::steady_clock::now();
  }
}

void CommClock::after_wait() {
  if (device_.is_cuda()) {
    std::static_pointer_cast<Events>(events_)->back().second->record();
  } else {
    host_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  }
}

std::shared_ptr<const CommTiming> CommClock::take() {
  std::shared_ptr<const CommTiming> t;
  if (device_.is_cuda())
    t = std::make_shared<EventTiming>(events_ ? std::static_pointer_cast<Events>(events_) : std::make_shared<Events>());
  else
    t = std::make_shared<HostTiming>(host_seconds_);
  events_.reset();
  host_seconds_ = 0;
  return t;
}

}  // namespace fptrain::distributed
