// Checks that a backward's grad_output is the scale its forward already applied.
//
// The fused loss with a weight-gradient sink (models/linear_cross_entropy.h) writes
// the weight's gradient during the forward, multiplied by the grad_output its
// backward is announced to receive; the backward only checks that announcement.
// On the CPU the check is immediate. On a device, reading the value at once would
// make the host wait for the device in the middle of queuing the backward, so the
// value is copied to pinned memory without waiting, and verify() (after the
// step's backward passes, before anything reads the gradients) reads it.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <memory>
#include <vector>

namespace fptrain::models {

class GradScaleCheck {
 public:
  // grad_output: a one-element tensor, or undefined (no gradient: read as 0). Throws
  // std::logic_error, now (CPU) or from verify() (device), unless it equals `expected`
  // to fp32 precision (the backward's values are fp32; `expected` is a double).
  void expect(const at::Tensor& grad_output, double expected);
  // Throws std::logic_error for the first queued value that did not match; waits only
  // until the device has made the last queued copy.
  void verify();

 private:
  struct Pending {
    at::Tensor value;  // [1] in grad_output's dtype, pinned host memory, filled by the device
    double expected = 0.0;
    std::unique_ptr<c10::Event> copied;
  };
  std::vector<Pending> pending_;
};

}  // namespace fptrain::models
