// The model's parameters as views of one flat weight buffer, and their gradients
// (optim/flat_gradients.h: per bucket, lazily allocated or one resident buffer).
//
// Construction takes over the model's parameter tensors: their values move into
// one weight buffer and each tensor's data becomes a view of its segment
// (Tensor::set_data, as `p.data = view` in Python). The tensors stay the same
// objects (leaves, requires_grad), so the model's TensorMap and everything that
// captured them (activation checkpointing) keep working, and autograd still
// treats them as leaves. Each parameter's .grad is a view of its gradient bucket,
// installed before AccumulateGrad runs, which then adds into it in place.
//
// A gradient that did not arrive through its view — a .grad assigned by hand, or
// created by autograd out of place — is copied into the gradients by
// collect_grads() (the view is put back and the parameter remembered), and
// release_collected() sets those parameters' .grad to undefined again, as the old
// per-tensor optimizer did after a step. A .grad reset to undefined means "no
// gradient": its segment is zeroed.
#pragma once

#include "optim/flat_gradients.h"
#include "optim/flat_layout.h"

#include <ATen/ATen.h>

#include <memory>
#include <vector>

namespace fptrain::optim {

class FlatParameters {
 public:
  // `params`: leaf tensors in the layout's order, of its shapes, one floating
  // dtype, one device. Their values are copied into the weight buffer.
  FlatParameters(FlatLayout layout, std::vector<at::Tensor> params, GradStorage storage = GradStorage::kLazy);

  FlatParameters(const FlatParameters&) = delete;
  FlatParameters& operator=(const FlatParameters&) = delete;

  const FlatLayout& layout() const { return layout_; }
  const std::vector<at::Tensor>& params() const { return params_; }
  const at::Tensor& weights() const { return weights_; }  // [total], model dtype
  at::ScalarType dtype() const { return weights_.scalar_type(); }
  // The gradients, bucket by bucket (model dtype).
  const FlatGradients& gradients() const { return *grads_; }
  FlatGradients& gradients() { return *grads_; }

  // Parameter i's segment of a buffer of this layout ([total] elements), shaped like the parameter.
  at::Tensor segment(const at::Tensor& flat, size_t i) const;
  // The index of `param` (one of params(), the same tensor); throws otherwise.
  size_t index_of(const at::Tensor& param) const;

  // Copies gradients that did not arrive through the views into the buckets (see
  // above); returns how many parameters needed it (0 in the trainer's loop).
  int64_t collect_grads();
  // Sets .grad undefined again for the parameters collect_grads() took a hand-set gradient from.
  void release_collected();
  // After a step: frees the gradient buckets (lazy) or zeroes the buffer (resident),
  // except the parameters given to keep_on_zero().
  void zero_grads();
  // Parameters (the same tensors as params()) whose gradients the next backward
  // overwrites rather than adds to (models/grad_sink_linear.h): their segments are
  // neither zeroed nor, in a bucket the backward allocates, initialised.
  void keep_on_zero(const std::vector<const at::Tensor*>& params);

 private:
  FlatLayout layout_;
  std::vector<at::Tensor> params_;  // the model's tensors, now views of weights_
  std::vector<bool> collected_;
  at::Tensor weights_;
  std::unique_ptr<FlatGradients> grads_;
};

}  // namespace fptrain::optim
