#include "models/replayed_residual.h"

#include <torch/autograd.h>

#include <stdexcept>

namespace fptrain::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct ReplayedResidualAdd : public torch::autograd::Function<ReplayedResidualAdd> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& /*residual*/, const at::Tensor& /*update*/,
                            const at::Tensor& kept, double update_scale) {
    ctx->saved_data["update_scale"] = update_scale;
    return kept.view_as(kept);  // a new tensor object: `kept` itself stays out of this graph
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const double scale = ctx->saved_data["update_scale"].toDouble();
    at::Tensor d_update;
    if (ctx->needs_input_grad(1)) d_update = scale != 1.0 ? grads[0] * scale : grads[0];
    return {grads[0], d_update, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor replayed_residual_add(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& kept,
                                 double update_scale) {
  if (kept.sizes() != residual.sizes() || update.sizes() != residual.sizes())
    throw std::logic_error("replayed_residual_add: the kept sum is of another call");
  return ReplayedResidualAdd::apply(residual, update, kept, update_scale);
}

}  // namespace fptrain::models
