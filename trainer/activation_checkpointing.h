// Activation checkpointing: a decoder layer runs without keeping its
// activations in the forward pass and is recomputed, with autograd, when the
// backward pass reaches it. Gradients equal the non-checkpointed ones (the
// recomputation repeats the same operations on the same inputs).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace fptrain::trainer {

using LayerFunction = std::function<at::Tensor(const at::Tensor& hidden)>;

// Returns run(hidden), differentiable with respect to `hidden` and `params`
// (the leaf tensors `run` reads), storing only `hidden` for the backward pass.
// `run` is called again during backward, so it must capture what it needs by value.
at::Tensor checkpointed_layer(const at::Tensor& hidden, LayerFunction run, const std::vector<at::Tensor>& params);

// Layer i is checkpointed when every_k > 0 and i % every_k == 0.
inline bool is_checkpointed_layer(int64_t layer, int64_t every_k) { return every_k > 0 && layer % every_k == 0; }

}  // namespace fptrain::trainer
