#include "models/nf4_ops.h"

#include "common/strings.h"
#include "models/parameter_layout.h"

#include <torch/autograd.h>

#include <stdexcept>

namespace fptrain::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Nf4Linear : public torch::autograd::Function<Nf4Linear> {
  // The weight travels by address (the Nf4Weights outlive the step); the bias is frozen.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t weight_address,
                            const at::Tensor& bias, bool replayed) {
    ctx->saved_data["weight"] = weight_address;
    const auto* q = reinterpret_cast<const Nf4Tensor*>(weight_address);
    if (replayed) return at::zeros({x.size(0), q->shape[0]}, x.options());
    return at::linear(x, dequantize_nf4(*q), bias.defined() && bias.numel() ? bias : at::Tensor());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto* q = reinterpret_cast<const Nf4Tensor*>(ctx->saved_data["weight"].toInt());
    at::Tensor dx;
    if (ctx->needs_input_grad(0)) dx = grads[0].mm(dequantize_nf4(*q));
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The shape alone: a one-element storage with stride 0.
at::Tensor shape_only(const at::Tensor& w) {
  return at::zeros({1}, w.options()).as_strided(w.sizes(), std::vector<int64_t>(static_cast<size_t>(w.dim()), 0));
}

}  // namespace

at::Tensor nf4_linear(const at::Tensor& x, const Nf4Tensor& q, const at::Tensor& bias, bool replayed) {
  if (x.dim() != 2 || q.shape.size() != 2 || x.size(1) != q.shape[1])
    throw std::invalid_argument("nf4_linear: x [T, " + std::to_string(q.shape.size() == 2 ? q.shape[1] : -1) +
                                "] expected, got " + c10::str(x.sizes()));
  if (bias.defined() && bias.requires_grad())
    throw std::invalid_argument("nf4_linear: the bias of a quantised base is frozen");
  const at::Tensor b = bias.defined() ? bias : at::empty({0}, x.options());
  return Nf4Linear::apply(x, reinterpret_cast<int64_t>(&q), b, replayed);
}

at::Tensor Nf4Loader::keep(const std::string& name, const at::Tensor& tensor) {
  if (!is_projection_weight(name)) return tensor;
  quantized_.emplace(name, quantize_nf4(tensor));
  return shape_only(tensor);
}

at::Tensor Nf4Loader::keep_quantized(const std::string& name, Nf4Tensor q) {
  const at::Tensor placeholder = shape_only(at::empty({1}, q.codes.options().dtype(q.dtype)).expand(q.shape));
  quantized_.insert_or_assign(name, std::move(q));
  return placeholder;
}

std::shared_ptr<Nf4Weights> Nf4Weights::from(std::map<std::string, Nf4Tensor> by_name,
                                            const std::vector<Projection>& projections) {
  auto w = std::make_shared<Nf4Weights>();
  w->by_slot_.resize(projections.size());
  for (const Projection& p : projections) {
    auto it = by_name.find(p.module + ".weight");
    if (it == by_name.end()) throw std::logic_error("Nf4Weights: no quantised weight for " + p.module);
    w->by_slot_[static_cast<size_t>(p.slot)] = std::move(it->second);
  }
  return w;
}

const Nf4Tensor* Nf4Weights::at(int64_t slot) const {
  if (slot < 0 || slot >= static_cast<int64_t>(by_slot_.size())) return nullptr;
  const auto& q = by_slot_[static_cast<size_t>(slot)];
  return q ? &*q : nullptr;
}

int64_t Nf4Weights::nbytes() const {
  int64_t n = 0;
  for (const auto& q : by_slot_)
    if (q) n += q->nbytes();
  return n;
}

TensorMap Nf4Weights::dequantized(const TensorMap& params, const std::vector<Projection>& projections) const {
  TensorMap out = params;
  for (const Projection& p : projections)
    if (const Nf4Tensor* q = at(p.slot)) out[p.module + ".weight"] = dequantize_nf4(*q);
  return out;
}

Nf4Ops::Nf4Ops(std::shared_ptr<const DecoderOps> inner, std::shared_ptr<const Nf4Weights> weights)
    : ForwardingOps(std::move(inner)), weights_(std::move(weights)) {}

at::Tensor Nf4Ops::linear(const at::Tensor& x, const Projection& p) const {
  const Nf4Tensor* q = weights_->at(p.slot);
  return q ? nf4_linear(x, *q, p.bias ? *p.bias : at::Tensor()) : inner_->linear(x, p);
}

at::Tensor Nf4Ops::base_weight(const Projection& p) const {
  const Nf4Tensor* q = weights_->at(p.slot);
  return q ? dequantize_nf4(*q) : inner_->base_weight(p);
}

at::Tensor Nf4Ops::replayed_linear(const at::Tensor& x, const Projection& p) const {
  const Nf4Tensor* q = weights_->at(p.slot);
  return q ? nf4_linear(x, *q, p.bias ? *p.bias : at::Tensor(), /*replayed=*/true) : inner_->replayed_linear(x, p);
}

}  // namespace fptrain::models
