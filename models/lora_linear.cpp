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

// What the group's backward needs besides the saved tensors: the base weights and biases.
struct GroupClosure : torch::CustomClassHolder {
  std::vector<LoraGroupMember> members;
  double scale = 1.0;
};

struct LoraGroup : public torch::autograd::Function<LoraGroup> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList a, at::TensorList b,
                               c10::intrusive_ptr<GroupClosure> closure) {
    const at::Tensor a_all = at::cat(a);   // [n r, in]
    const at::Tensor xa = x.mm(a_all.t());  // [T, n r]
    variable_list out;
    int64_t col = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      const LoraGroupMember& m = closure->members[i];
      at::Tensor y = at::linear(x, m.weight(), m.bias);
      const int64_t r = a[i].size(0);
      y.addmm_(xa.narrow(1, col, r), b[i].t(), /*beta=*/1, /*alpha=*/closure->scale);
      col += r;
      out.push_back(std::move(y));
    }
    ctx->save_for_backward({x, xa, a_all});
    ctx->saved_data["closure"] = c10::IValue::make_capsule(closure);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list dys) {
    auto closure = c10::static_intrusive_pointer_cast<GroupClosure>(ctx->saved_data["closure"].toCapsule());
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &xa = saved[1], &a_all = saved[2];
    const size_t n = closure->members.size();
    const double scale = closure->scale;
    variable_list da(n), db(n);
    std::vector<at::Tensor> dxa_parts;
    int64_t col = 0;
    for (size_t i = 0; i < n; ++i) {
      const at::Tensor& b = closure->members[i].lora.b;
      const int64_t r = b.size(1);
      db[i] = dys[i].t().mm(xa.narrow(1, col, r)).mul_(scale);
      dxa_parts.push_back(dys[i].mm(b).mul_(scale));
      col += r;
    }
    const at::Tensor dxa = at::cat(dxa_parts, 1);  // [T, n r]
    const at::Tensor da_all = dxa.t().mm(x);       // [n r, in]
    col = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t r = closure->members[i].lora.a.size(0);
      da[i] = da_all.narrow(0, col, r);
      col += r;
    }
    at::Tensor dx;
    if (ctx->needs_input_grad(0)) {
      dx = dys[0].mm(closure->members[0].weight());
      for (size_t i = 1; i < n; ++i) dx.addmm_(dys[i], closure->members[i].weight());
      dx.addmm_(dxa, a_all);
    }
    variable_list grads{dx};
    grads.insert(grads.end(), da.begin(), da.end());
    grads.insert(grads.end(), db.begin(), db.end());
    grads.emplace_back();  // the closure
    return grads;
  }
};

}  // namespace

std::vector<at::Tensor> lora_group(const at::Tensor& x, const std::vector<LoraGroupMember>& members, double scale) {
  if (x.dim() != 2 || members.empty()) throw std::invalid_argument("lora_group: x [T, in] and members expected");
  auto closure = c10::make_intrusive<GroupClosure>();
  closure->members = members;
  closure->scale = scale;
  std::vector<at::Tensor> a, b;
  for (const LoraGroupMember& m : members) {
    if (m.lora.a.size(1) != x.size(1) || m.lora.a.size(0) != m.lora.b.size(1))
      throw std::invalid_argument("lora_group: A " + c10::str(m.lora.a.sizes()) + " and B " +
                                  c10::str(m.lora.b.sizes()) + " do not fit x " + c10::str(x.sizes()));
    if (m.bias.defined() && m.bias.requires_grad()) throw std::invalid_argument("lora_group: the base is frozen");
    a.push_back(m.lora.a);
    b.push_back(m.lora.b);
  }
  return LoraGroup::apply(x, at::TensorList(a), at::TensorList(b), closure);
}

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
