#include "optim/streamed_step.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

namespace fptrain::optim {
namespace {

// The flat elements per element of the coarsest state: pieces are multiples of it.
int64_t granule_of(const std::vector<StreamedStep::State>& states) {
  int64_t g = 1;
  for (const auto& s : states) g = std::max(g, s.per);
  for (const auto& s : states)
    if (g % s.per != 0) throw std::logic_error("StreamedStep: state granules must divide each other");
  return g;
}

}  // namespace

// The three side streams and the events that order them.
struct StreamedStep::CudaState {
  CudaState(const at::Device& d, size_t ranges)
      : device(d),
        in(c10::cuda::getStreamFromPool(false, d.index())),
        update(c10::cuda::getStreamFromPool(false, d.index())),
        out(c10::cuda::getStreamFromPool(false, d.index())),
        ready(ranges) {}
  at::Device device;
  c10::cuda::CUDAStream in, update, out;
  at::cuda::CUDAEvent launched;     // the step's gradients and coefficient are final
  at::cuda::CUDAEvent staged[2];    // a slot holds its piece's state
  at::cuda::CUDAEvent updated[2];   // a slot holds its piece's new state
  at::cuda::CUDAEvent free[2];      // a slot's last copy-out left
  std::vector<at::cuda::CUDAEvent> ready;  // a range's weights final on the device
};

StreamedStep::StreamedStep(std::vector<Range> ranges, std::vector<State> states, const at::Device& device,
                           int64_t chunk)
    : ranges_(std::move(ranges)), states_(std::move(states)) {
  const int64_t granule = granule_of(states_);
  chunk = std::max(granule, chunk / granule * granule);
  int64_t largest = 0;
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const Range& r = ranges_[i];
    if (r.local % granule != 0 || r.numel % granule != 0)
      throw std::logic_error("StreamedStep: range " + std::to_string(i) + " [" + std::to_string(r.local) + ", +" +
                             std::to_string(r.numel) + ") cuts a block of " + std::to_string(granule) + " elements");
    for (int64_t at = 0; at < r.numel; at += chunk) {
      pieces_.push_back({i, r.flat + at, r.local + at, std::min(chunk, r.numel - at)});
      largest = std::max(largest, pieces_.back().numel);
    }
  }
  for (auto& slot : slots_)
    for (const State& s : states_) slot.push_back(at::empty({largest / s.per}, s.host.options().device(device)));
  if (device.is_cuda()) cuda_ = std::make_unique<CudaState>(device, ranges_.size());
}

StreamedStep::~StreamedStep() {
  try {  // a step still streaming writes host state and reads the slots: let it finish
    sync_host();
    if (cuda_) cuda_->update.synchronize();
  } catch (...) {  // a failed device: nothing left to wait for
  }
}

int64_t StreamedStep::device_bytes() const {
  int64_t n = 0;
  for (const auto& slot : slots_)
    for (const at::Tensor& t : slot) n += t.nbytes();
  return n;
}

std::vector<at::Tensor> StreamedStep::staged(const Piece& p, int slot) const {
  std::vector<at::Tensor> out;
  for (size_t j = 0; j < states_.size(); ++j) out.push_back(slots_[slot][j].narrow(0, 0, p.numel / states_[j].per));
  return out;
}

// Piece p's state into `slot`, once the slot's previous piece went out.
void StreamedStep::stage_in(const Piece& p, int slot) {
  std::optional<c10::cuda::CUDAStreamGuard> guard;
  if (cuda_) {
    guard.emplace(cuda_->in);
    cuda_->free[slot].block(cuda_->in);
  }
  const std::vector<at::Tensor> dst = staged(p, slot);
  for (size_t j = 0; j < states_.size(); ++j) {
    const int64_t per = states_[j].per;
    dst[j].copy_(states_[j].host.narrow(0, p.local / per, p.numel / per), /*non_blocking=*/true);
  }
  if (cuda_) cuda_->staged[slot].record(cuda_->in);
}

// `slot`'s new state back into the host buffers, once its update ran; the slot is then free.
void StreamedStep::stage_out(const Piece& p, int slot) {
  std::optional<c10::cuda::CUDAStreamGuard> guard;
  if (cuda_) {
    guard.emplace(cuda_->out);
    cuda_->updated[slot].block(cuda_->out);
  }
  const std::vector<at::Tensor> src = staged(p, slot);
  for (size_t j = 0; j < states_.size(); ++j) {
    const int64_t per = states_[j].per;
    states_[j].host.narrow(0, p.local / per, p.numel / per).copy_(src[j], /*non_blocking=*/true);
  }
  if (cuda_) cuda_->free[slot].record(cuda_->out);
}

void StreamedStep::launch(std::vector<Input> inputs, const Update& update) {
  if (inputs.size() != ranges_.size()) throw std::logic_error("StreamedStep: one input per range expected");
  std::optional<c10::cuda::CUDAGuard> device_guard;
  std::optional<c10::cuda::CUDAStreamGuard> update_guard;
  if (cuda_) {
    device_guard.emplace(cuda_->device);
    cuda_->launched.record(c10::cuda::getCurrentCUDAStream(cuda_->device.index()));
    cuda_->launched.block(cuda_->update);
    // The caller frees lazy gradient buckets after launch: not reused before the update read them.
    for (const Input& in : inputs)
      for (const at::Tensor& t : {in.grads, in.accum})
        if (t.defined()) t.record_stream(cuda_->update);
    update_guard.emplace(cuda_->update);  // the updates and zeroing run on the update stream
  }
  size_t k = 0;  // pieces in order, slot k % 2
  for (size_t i = 0; i < ranges_.size(); ++i) {
    for (; k < pieces_.size() && pieces_[k].range == i; ++k)
      run_piece(pieces_[k], static_cast<int>(k % 2), inputs[i], update);
    for (const at::Tensor& t : inputs[i].zero_after) t.zero_();
    if (cuda_) cuda_->ready[i].record(cuda_->update);
  }
}

// Piece p through `slot`: in, updated (on the current stream, the update stream), out.
void StreamedStep::run_piece(const Piece& p, int slot, const Input& in, const Update& update) {
  const int64_t at = p.local - ranges_[p.range].local;
  auto part = [&](const at::Tensor& t) { return t.defined() ? t.narrow(0, at, p.numel) : t; };
  stage_in(p, slot);
  if (cuda_) cuda_->staged[slot].block(cuda_->update);
  update(p, part(in.grads), part(in.accum), staged(p, slot));
  if (cuda_) cuda_->updated[slot].record(cuda_->update);
  stage_out(p, slot);
}

void StreamedStep::wait(size_t i) {
  if (cuda_) cuda_->ready.at(i).block(c10::cuda::getCurrentCUDAStream(cuda_->device.index()));
}

void StreamedStep::sync_host() const {
  if (!cuda_) return;
  cuda_->in.synchronize();
  cuda_->out.synchronize();
}

}  // namespace fptrain::optim
