#include "optim/offloaded_step.h"

#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

namespace fptrain::optim {
namespace {

constexpr size_t kPage = 4096;

// Pinned host memory of `bytes`: page-aligned, registered with CUDA, unregistered and freed
// with the tensor.
at::Tensor pinned_empty(int64_t numel, at::ScalarType dtype) {
  const size_t bytes = std::max<size_t>(kPage, (static_cast<size_t>(numel) * c10::elementSize(dtype) + kPage - 1) /
                                                   kPage * kPage);
  void* p = std::aligned_alloc(kPage, bytes);
  if (!p) throw std::bad_alloc();
  if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    std::free(p);
    throw std::runtime_error("optimizer.offload: cannot pin " + std::to_string(bytes >> 20) +
                             " MiB of host memory (cudaHostRegister failed; is the host memory or the "
                             "locked-memory limit, ulimit -l, too small?)");
  }
  return at::from_blob(
      p, {numel},
      [](void* q) {
        (void)cudaHostUnregister(q);
        std::free(q);
      },
      at::TensorOptions().dtype(dtype));
}

}  // namespace

at::Tensor host_state_zeros(int64_t numel, at::ScalarType dtype, const at::Device& device) {
  if (!device.is_cuda()) return at::zeros({numel}, at::TensorOptions().dtype(dtype));
  at::Tensor t = pinned_empty(numel, dtype);
  t.zero_();
  return t;
}

// The side streams and events of a CUDA device.
struct OffloadedStep::CudaState {
  explicit CudaState(const at::Device& d, size_t ranges)
      : device(d),
        to_host(c10::cuda::getStreamFromPool(false, d.index())),
        to_device(c10::cuda::getStreamFromPool(false, d.index())),
        ready(ranges) {}
  at::Device device;
  c10::cuda::CUDAStream to_host, to_device;
  at::cuda::CUDAEvent launched;   // the gradients and the coefficient are final
  at::cuda::CUDAEvent copied[2];  // a staging slot filled
  std::vector<at::cuda::CUDAEvent> ready;  // a range's weights back on the device
};

struct OffloadedStep::Job {
  std::vector<Input> inputs;
  Update update;
  at::Tensor coef;  // on the device
  bool clip = false;
};

OffloadedStep::OffloadedStep(std::vector<Range> ranges, at::Tensor device_weights, int64_t local_numel, int threads)
    : ranges_(std::move(ranges)), device_weights_(std::move(device_weights)),
      threads_(threads > 0 ? threads : at::get_num_threads()) {
  const at::Device device = device_weights_.device();
  host_weights_ = host_state_zeros(local_numel, device_weights_.scalar_type(), device);
  int64_t largest = 0;
  for (const Range& r : ranges_) largest = std::max(largest, r.numel);
  for (int s = 0; s < 2; ++s) grad_slots_.push_back(host_state_zeros(largest, device_weights_.scalar_type(), device));
  host_coef_ = host_state_zeros(1, at::kFloat, device);
  if (device.is_cuda()) cuda_ = std::make_unique<CudaState>(device, ranges_.size());
  worker_ = std::thread([this] { run(); });
}

OffloadedStep::~OffloadedStep() {
  stopping_ = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

int64_t OffloadedStep::host_bytes() const {
  int64_t n = host_weights_.nbytes() + host_coef_.nbytes();
  for (const auto& t : grad_slots_) n += t.nbytes();
  for (const auto& t : accum_slots_) n += t.nbytes();
  return n;
}

void OffloadedStep::pull_weights() {
  for (const Range& r : ranges_)
    host_weights_.narrow(0, r.local, r.numel).copy_(device_weights_.narrow(0, r.flat, r.numel));
}

void OffloadedStep::launch(std::vector<Input> inputs, const at::Tensor& coef, Update update) {
  if (inputs.size() != ranges_.size()) throw std::logic_error("OffloadedStep: one input per range expected");
  wait_host();
  if (weights_stale_) pull_weights();
  weights_stale_ = false;
  const bool accum = std::any_of(inputs.begin(), inputs.end(), [](const Input& in) { return in.accum.defined(); });
  if (accum && accum_slots_.empty())
    for (int s = 0; s < 2; ++s) accum_slots_.push_back(host_state_zeros(grad_slots_[0].numel(), at::kFloat, device_weights_.device()));
  auto job = std::make_unique<Job>();
  job->inputs = std::move(inputs);
  job->update = std::move(update);
  job->coef = coef;
  job->clip = coef.defined();
  if (cuda_) cuda_->launched.record(c10::cuda::getCurrentCUDAStream(cuda_->device.index()));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = std::move(job);
    done_ = 0;
    running_ = true;
  }
  cv_.notify_all();
}

void OffloadedStep::rethrow_failure() {
  if (!failure_) return;
  try {
    std::rethrow_exception(failure_);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("optimizer.offload: the host update of the optimizer failed: ") + e.what());
  }
}

void OffloadedStep::wait(size_t i) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!job_ || i >= job_->inputs.size()) return;
  cv_.wait(lock, [&] { return failure_ || done_ > i; });
  rethrow_failure();
  if (cuda_) cuda_->ready[i].block(c10::cuda::getCurrentCUDAStream(cuda_->device.index()));
}

void OffloadedStep::wait_host() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return failure_ || !running_; });
  rethrow_failure();
}

void OffloadedStep::run() {
  // An explicit count: left to itself a new thread's OpenMP team can be one thread (seen on
  // a 64-core GPU host, 2026-11-26: the 8B host update ran on one core, minutes a step).
  at::set_num_threads(threads_);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || running_; });
    if (stop_) return;
    lock.unlock();
    std::exception_ptr failure;
    try {
      run_job(*job_);
    } catch (...) {
      failure = std::current_exception();
    }
    try {  // the next step rewrites the host buffers; a failed or stopped one leaves no copy running
      if (cuda_) {
        cuda_->to_host.synchronize();
        cuda_->to_device.synchronize();
      }
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
    lock.lock();
    if (failure) failure_ = failure;
    running_ = false;
    cv_.notify_all();
  }
}

// Range k's gradients (and, with the first, the clip coefficient) into staging slot k % 2;
// then the device tensors that must be zeroed again.
void OffloadedStep::copy_in(Job& job, size_t k) {
  const Input& in = job.inputs[k];
  const int64_t n = ranges_[k].numel;
  std::optional<c10::cuda::CUDAStreamGuard> guard;
  if (cuda_) guard.emplace(cuda_->to_host);
  if (k == 0 && job.clip) host_coef_.copy_(job.coef.reshape({1}), /*non_blocking=*/true);
  grad_slots_[k % 2].narrow(0, 0, n).copy_(in.grads, /*non_blocking=*/true);
  if (in.accum.defined()) accum_slots_[k % 2].narrow(0, 0, n).copy_(in.accum, /*non_blocking=*/true);
  for (const at::Tensor& t : in.zero_after) t.zero_();
  if (cuda_) cuda_->copied[k % 2].record(cuda_->to_host);
}

// Range k's new weights back to the device, and the event its readers wait for.
void OffloadedStep::copy_out(Job&, size_t k) {
  const Range& r = ranges_[k];
  const at::Tensor dst = device_weights_.narrow(0, r.flat, r.numel), src = host_weights_.narrow(0, r.local, r.numel);
  if (!cuda_) {
    dst.copy_(src);
    return;
  }
  c10::cuda::CUDAStreamGuard guard(cuda_->to_device);
  dst.copy_(src, /*non_blocking=*/true);
  cuda_->ready[k].record(cuda_->to_device);
}

void OffloadedStep::run_job(Job& job) {
  std::optional<c10::cuda::CUDAGuard> device_guard;
  if (cuda_) {
    device_guard.emplace(cuda_->device);
    cuda_->launched.block(cuda_->to_host);
  }
  const size_t n = job.inputs.size();
  if (n > 0) copy_in(job, 0);
  for (size_t k = 0; k < n && !stopping_; ++k) {
    if (k + 1 < n) copy_in(job, k + 1);  // one range ahead: its copy overlaps this update
    if (cuda_) cuda_->copied[k % 2].synchronize();
    const bool accum = job.inputs[k].accum.defined();
    job.inputs[k] = Input{};  // the device gradients may go now (lazy storage frees them)
    if (fail_at_ == static_cast<int64_t>(k)) {
      fail_at_ = -1;
      throw std::runtime_error("failure injected at range " + std::to_string(k) + " (a test)");
    }
    const int64_t numel = ranges_[k].numel;
    job.update(k, grad_slots_[k % 2].narrow(0, 0, numel),
               accum ? accum_slots_[k % 2].narrow(0, 0, numel) : at::Tensor(), job.clip ? host_coef_ : at::Tensor());
    copy_out(job, k);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++done_;
    }
    cv_.notify_all();
  }

}

}  // namespace fptrain::optim
