#include "models/lora_linear.h"

#include <torch/autograd.h>

#include <stdexcept>

namespace fptrain::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct LoraAdd : public torch::autograd::Function<LoraAdd> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, const at::Tensor& x, const at::Tensor& a,
                            const at::Tensor& b, double scale, double dropout) {
    at::Tensor input = x, mask;
    if (dropout > 0) std::tie(input, mask) = at::native_dropout(x, dropout, /*train=*/true);
    const at::Tensor xa = input.mm(a.t());  // [T, r]
    ctx->save_for_backward({input, xa, a, b, mask});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dropout"] = dropout;
    return at::addmm(y, xa, b.t(), /*beta=*/1, /*alpha=*/scale);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &xa = saved[1], &a = saved[2], &b = saved[3], &mask = saved[4];
    const double scale = ctx->saved_data["scale"].toDouble();
    const at::Tensor& dy = grads[0];
    at::Tensor dx, da, db;
    if (ctx->needs_input_grad(3)) db = dy.t().mm(xa).mul_(scale);
    if (ctx->needs_input_grad(1) || ctx->needs_input_grad(2)) {
      const at::Tensor dxa = dy.mm(b).mul_(scale);  // [T, r]
      if (ctx->needs_input_grad(2)) da = dxa.t().mm(input);
      if (ctx->needs_input_grad(1)) {
        dx = dxa.mm(a);
        if (mask.defined()) dx = at::native_dropout_backward(dx, mask, 1.0 / (1.0 - ctx->saved_data["dropout"].toDouble()));
      }
    }
    return {ctx->needs_input_grad(0) ? dy : at::Tensor(), dx, da, db, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor lora_add(const at::Tensor& y, const at::Tensor& x, const LoraWeights& w, double scale, double dropout) {
  if (x.dim() != 2 || y.dim() != 2 || y.size(0) != x.size(0))
    throw std::invalid_argument("lora_add: x [T, in] and y [T, out] expected");
  if (w.a.size(1) != x.size(1) || w.b.size(0) != y.size(1) || w.a.size(0) != w.b.size(1))
    throw std::invalid_argument("lora_add: A " + c10::str(w.a.sizes()) + " and B " + c10::str(w.b.sizes()) +
                                " do not fit x " + c10::str(x.sizes()) + " and y " + c10::str(y.sizes()));
  if (dropout < 0 || dropout >= 1) throw std::invalid_argument("lora_add: dropout must be in [0, 1)");
  return LoraAdd::apply(y, x, w.a, w.b, scale, dropout);
}

}  // namespace fptrain::models
