// The residual add of an activation checkpoint's recomputation, replayed from
// the value its first pass kept (models/recompute_ops.h).
#pragma once

#include <ATen/ATen.h>

namespace fptrain::models {

// Returns `kept` (= residual + update * update_scale from the first pass)
// without computing it; the backward is the add's: the residual gets the
// gradient, the update the gradient times update_scale (the same bits as the
// add and its product under autograd, and as fused_add_rms_norm's backward).
at::Tensor replayed_residual_add(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& kept,
                                 double update_scale);

}  // namespace fptrain::models
