// The model's parameters and their gradients in two flat buffers (layout:
// optim/flat_layout.h).
//
// Construction takes over the model's parameter tensors: their values move into
// one weight buffer and each tensor's data becomes a view of its segment
// (Tensor::set_data, as `p.data = view` in Python). The tensors stay the same
// objects (leaves, requires_grad), so the model's TensorMap and everything that
// captured them (activation checkpointing) keep working, and autograd still
// treats them as leaves. Each parameter's .grad is set to a view of one gradient
// buffer before the first backward: autograd's AccumulateGrad then adds into it
// in place (it replaces a defined .grad only under create_graph), so gradients of
// every micro-batch land in the flat buffer with no copy, and zeroing is one
// memset of it. .grad is never reset by the optimizer.
//
// A gradient that did not arrive through its view — a .grad assigned by hand, or
// created by autograd after someone reset .grad — is copied into the buffer by
// collect_grads() (the view is put back and the parameter remembered), and
// release_collected() sets those parameters' .grad to undefined again, as the old
// per-tensor optimizer did after a step. A .grad reset to undefined means "no
// gradient": its segment is zeroed.
#pragma once

#include "optim/flat_layout.h"

#include <ATen/ATen.h>

#include <vector>

namespace fptrain::optim {

class FlatParameters {
 public:
  // `params`: leaf tensors in the layout's order, of its shapes, one floating
  // dtype, one device. Their values are copied into the weight buffer.
  FlatParameters(FlatLayout layout, std::vector<at::Tensor> params);

  FlatParameters(const FlatParameters&) = delete;
  FlatParameters& operator=(const FlatParameters&) = delete;

  const FlatLayout& layout() const { return layout_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  const at::Tensor& weights() const { return weights_; }  // [total], model dtype
  const at::Tensor& grads() const { return grads_; }      // [total], model dtype
  at::ScalarType dtype() const { return weights_.scalar_type(); }

  // Parameter i's segment of a buffer of this layout ([total] elements), shaped like the parameter.
  at::Tensor segment(const at::Tensor& flat, size_t i) const;

  // Copies gradients that did not arrive through the views into the buffer (see
  // above); returns how many parameters needed it (0 in the trainer's loop).
  int64_t collect_grads();
  // Sets .grad undefined again for the parameters collect_grads() took a hand-set gradient from.
  void release_collected();
  // Zeroes the gradient buffer (one memset), except the parameters given to
  // keep_on_zero().
  void zero_grads();
  // Parameters (the same tensors as params()) whose gradients the next backward
  // overwrites rather than adds to (models/grad_sink_linear.h): zero_grads()
  // leaves their segments alone. Throws for a tensor that is not a parameter.
  void keep_on_zero(const std::vector<const at::Tensor*>& params);

 private:
  enum class GradState { kView, kReleased };

  FlatLayout layout_;
  std::vector<at::Tensor> params_;      // the model's tensors, now views of weights_
  std::vector<at::Tensor> grad_views_;  // segment views of grads_, installed as .grad
  std::vector<GradState> state_;
  std::vector<bool> collected_;
  std::vector<std::pair<int64_t, int64_t>> zero_ranges_;  // [begin, end) of grads_ that zero_grads() clears
  at::Tensor weights_, grads_;
};

}  // namespace fptrain::optim
