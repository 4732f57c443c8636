// A fixed set of threads that run the iterations of a parallel loop; results
// go to the slot of their index, so the outcome never depends on timing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fptrain::data {

class WorkerPool {
 public:
  explicit WorkerPool(int threads);  // 0: everything runs on the caller
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn(i) for every i in [0, n) on the pool and the calling thread;
  // returns when all are done. fn must not throw.
  void parallel_for(size_t n, const std::function<void(size_t)>& fn);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void run_items();
  void worker_loop();

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t job_size_ = 0;
  uint64_t generation_ = 0;
  std::atomic<size_t> next_{0};
  size_t active_ = 0;  // pool threads still working on the current job
  bool stop_ = false;
};

}  // namespace fptrain::data
