// optimizer.offload_update: device. AdamW's state lives in pinned host memory as with the
// host update (optim/offloaded_step.h), but the host only stores it: each range's state is
// streamed to the device, updated there by the step kernel the run would use without
// offload, and streamed back. The weights and gradients never leave the device (the kernel
// updates the weights in place), so per element only the state crosses PCIe, each way
// (split masters and 8-bit moments: 4.03 bytes), and the host computes nothing.
//
// A range is streamed in pieces of at most `chunk` elements (whole blocks of every state:
// a piece never cuts an absmax block), through two staging slots on the device:
//
//   copy-in stream    piece p's state -> slot p % 2, once the slot's last copy-out left
//   update stream     after the step's gradients and clip coefficient (once) and the slot:
//                     the update (the kernel on the device weights and the staged state);
//                     after a range's last piece, what must be zeroed again, then the
//                     range's event
//   copy-out stream   slot p % 2 -> the host state; the slot is free again
//
// so piece p+1 comes in while p is updated and p-1 goes out. launch() queues the whole
// step and returns: nothing blocks the host. wait(i) makes the caller's stream wait for
// range i's event, as the forward does bucket by bucket (AdamW::wait_for_weights), so the
// next forward overlaps the streaming of the later ranges and reads no weight before its
// update. sync_host() waits for the copies, before the host reads or writes the state.
//
// On a CPU device the staging slots are host tensors and everything runs in launch(): the
// same code path, so the CPU tests run it.
#pragma once

#include "optim/offloaded_step.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace fptrain::optim {

class StreamedStep {
 public:
  // One range of the flat buffers: device elements [flat, flat + numel), host state
  // elements [local, local + numel) (the rank's local buffer).
  struct Range {
    int64_t flat = 0, local = 0, numel = 0;
  };
  // A host state buffer: one element per `per` elements of the flat buffers (1; an absmax:
  // blockwise8::kBlock), so range r's part of it is [r.local / per, (r.local + r.numel) / per).
  struct State {
    at::Tensor host;
    int64_t per = 1;
  };
  // One step's device tensors of range i, as for the host update; `zero_after`: zeroed once
  // the range's update ran.
  using Input = OffloadedStep::Input;
  // A piece of range `range`, with its flat and local first elements.
  struct Piece {
    size_t range = 0;
    int64_t flat = 0, local = 0, numel = 0;
  };
  // The update of a piece on the device, on the update stream: its gradients and fp32 sums
  // (undefined: none), and its part of every state, staged, in the order of the states.
  using Update = std::function<void(const Piece& p, const at::Tensor& grads, const at::Tensor& accum,
                                    const std::vector<at::Tensor>& staged)>;

  // `states`: host buffers on `device`'s host side (pinned for CUDA); each range starts and
  // ends on a whole element of every state (else std::logic_error). `chunk`: the most
  // elements of a piece, rounded down to whole elements of every state.
  StreamedStep(std::vector<Range> ranges, std::vector<State> states, const at::Device& device, int64_t chunk);
  ~StreamedStep();
  StreamedStep(const StreamedStep&) = delete;
  StreamedStep& operator=(const StreamedStep&) = delete;

  // The pieces of every range, in order.
  const std::vector<Piece>& pieces() const { return pieces_; }
  // Device bytes of the two staging slots (allocated at construction).
  int64_t device_bytes() const;

  // Queues a step after the current stream's work so far (gradients, coefficient): one
  // input per range; `update` is called for every piece in order, before launch returns.
  void launch(std::vector<Input> inputs, const Update& update);
  // The current stream waits for range i's update (its weights final on the device).
  void wait(size_t i);
  // The host state final and no copy reading it (before the host reads or writes it).
  void sync_host() const;
  size_t ranges() const { return ranges_.size(); }

 private:
  void run_piece(const Piece& p, int slot, const Input& in, const Update& update);
  void stage_in(const Piece& p, int slot);
  void stage_out(const Piece& p, int slot);
  std::vector<at::Tensor> staged(const Piece& p, int slot) const;

  std::vector<Range> ranges_;
  std::vector<State> states_;
  std::vector<Piece> pieces_;
  std::vector<at::Tensor> slots_[2];  // per state: the largest piece's part
  struct CudaState;
  std::unique_ptr<CudaState> cuda_;  // streams and events; null on a CPU device
};

}  // namespace fptrain::optim
