// optimizer.offload: cpu. AdamW's state (masters or remainders, moments) lives in
// host memory (pinned for a CUDA device) and its update runs on a host worker thread,
// overlapped with the next step's forward; the device keeps the weights and gradients.
//
// A step, once the global norm and the clip coefficient are on the device (so clipping
// is the device's, as without offload), range by range in flat order (the layout's
// buckets, or this rank's slices of them: the forward needs the first ones first):
//
//   side stream   gradients of range k+1 -> a host staging slot (two slots: one
//                 range ahead of the update), the clip coefficient with the first
//   worker        waits for range k's copy, runs the CPU reference step on it
//                 (optim/flat_adamw.h: bit for bit the CUDA kernels), whose
//                 at::parallel_for spreads it over the intra-op threads
//   side stream   the host copy of range k's new weights -> the device, an event
//
// wait(k) blocks the caller until range k's copy is queued and makes its current
// stream wait for it: AdamW::wait_for_weights calls it bucket by bucket from the
// forward's stage hook, as it waits for the sharded all-gathers. Gradients the device
// must see zeroed again (a resident buffer) are zeroed on the side stream after their
// copy, so the next backward cannot overwrite them before they left.
//
// On a CPU device the "copies" are host copies done by the worker: the same code path.
// A failure of the worker (an exception, a CUDA error) is kept and rethrown by every
// later wait(), so nothing waits for a range that will never come.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace fptrain::optim {

// A 1-D host tensor of `numel` zeros for state of a run on `device`: pinned (page-locked,
// registered with CUDA) when it is a CUDA device, so that copies run asynchronously. Not
// from LibTorch's pinned allocator, which rounds every size up to a power of two.
at::Tensor host_state_zeros(int64_t numel, at::ScalarType dtype, const at::Device& device);

class OffloadedStep {
 public:
  // One range of the flat buffers: device elements [flat, flat + numel), host state
  // elements [local, local + numel) (the rank's local buffer).
  struct Range {
    int64_t flat = 0, local = 0, numel = 0;
  };
  // The host update of range i: `grads` (model dtype) and `accum` (fp32, may be undefined)
  // are host copies of its gradients, `coef` a host fp32 scalar or undefined (no clipping).
  using Update =
      std::function<void(size_t i, const at::Tensor& grads, const at::Tensor& accum, const at::Tensor& coef)>;
  // One step's device tensors of range i; `zero_after`: zeroed once the copy left.
  struct Input {
    at::Tensor grads, accum;
    std::vector<at::Tensor> zero_after;
  };

  // `device_weights`: the flat weight buffer; host_weights() is local-sized. `threads`: the
  // worker's intra-op threads (0: the constructing thread's at::get_num_threads()).
  OffloadedStep(std::vector<Range> ranges, at::Tensor device_weights, int64_t local_numel, int threads = 0);
  ~OffloadedStep();
  OffloadedStep(const OffloadedStep&) = delete;
  OffloadedStep& operator=(const OffloadedStep&) = delete;

  // This rank's weights on the host (model dtype, local layout): the update reads and writes
  // them (the split masters' upper halves; the weights themselves without masters) and they
  // are what goes back to the device. Copied from the device at the first launch after
  // mark_weights_stale() (construction, a restored checkpoint).
  const at::Tensor& host_weights() const { return host_weights_; }
  // The intra-op threads the host update runs on.
  int threads() const { return threads_; }
  void mark_weights_stale() { weights_stale_ = true; }
  // Pinned host bytes of the copies (the weights, two staging slots per input).
  int64_t host_bytes() const;

  // Starts a step after the current stream's work so far (gradients, coefficient):
  // one input per range; `update` is called on the worker for every range in order.
  void launch(std::vector<Input> inputs, const at::Tensor& coef, Update update);
  // Range i updated and copied back: the current stream waits for the copy. Ranges are
  // waited in order; a range of no launched step returns at once.
  void wait(size_t i);
  // Every range of the launched step (host side only: for readers of the host state).
  void wait_host();
  size_t ranges() const { return ranges_.size(); }
  // Test seam: the update of range `i` in the next launched step throws.
  void fail_at_for_testing(size_t i) { fail_at_ = static_cast<int64_t>(i); }

 private:
  struct Job;
  void run();  // the worker thread
  void run_job(Job& job);
  void copy_in(Job& job, size_t k);
  void copy_out(Job& job, size_t k);
  void pull_weights();
  void rethrow_failure();  // with mutex_ held

  std::vector<Range> ranges_;
  at::Tensor device_weights_, host_weights_;
  std::vector<at::Tensor> grad_slots_, accum_slots_;  // two each, the largest range's length
  at::Tensor host_coef_;
  bool weights_stale_ = true;
  int64_t fail_at_ = -1;
  struct CudaState;
  std::unique_ptr<CudaState> cuda_;  // streams and events; null on a CPU device

  std::mutex mutex_;
  std::condition_variable cv_;
  std::unique_ptr<Job> job_;  // the launched step, until the next launch
  size_t done_ = 0;           // ranges of job_ copied back (or queued to be)
  bool running_ = false;      // job_ handed to the worker and not finished
  bool stop_ = false;
  std::atomic<bool> stopping_{false};  // the destructor: a running step ends after its current range
  std::exception_ptr failure_;
  int threads_ = 1;
  std::thread worker_;
};

}  // namespace fptrain::optim
