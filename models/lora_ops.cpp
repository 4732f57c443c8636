#include "models/lora_ops.h"

namespace fptrain::models {

LoraOps::LoraOps(std::shared_ptr<const DecoderOps> inner, std::shared_ptr<const LoraAdapter> adapter,
                 bool dropout_active)
    : ForwardingOps(std::move(inner)), adapter_(std::move(adapter)), dropout_active_(dropout_active) {}

at::Tensor LoraOps::add_adapter(at::Tensor y, const at::Tensor& x, const Projection& p) const {
  const LoraWeights* w = adapter_->weights(p.slot);
  if (w == nullptr) return y;
  // An activation checkpoint's recomputation draws the first run's mask again: it restores the
  // generator's state (trainer/activation_checkpointing.cpp).
  const double dropout = dropout_active_ ? adapter_->settings().dropout : 0.0;
  return lora_add(y, x, *w, adapter_->settings().scale(), dropout);
}

at::Tensor LoraOps::linear(const at::Tensor& x, const Projection& p) const {
  return add_adapter(inner_->linear(x, p), x, p);
}

std::vector<at::Tensor> LoraOps::linear_group(const at::Tensor& x, const std::vector<const Projection*>& ps) const {
  const bool dropout = dropout_active_ && adapter_->settings().dropout > 0;
  bool fusable = !dropout && x.dim() == 2;
  for (const Projection* p : ps)
    fusable = fusable && adapter_->weights(p->slot) && inner_->sink(*p) == nullptr && !p->weight->requires_grad();
  if (!fusable) return DecoderOps::linear_group(x, ps);  // one at a time, through linear()
  std::vector<LoraGroupMember> members;
  for (const Projection* p : ps) {
    // The inner set keeps the Projection's weight alive; the callback reads it (or dequantises) when asked.
    auto inner = inner_;
    const Projection proj = *p;
    members.push_back({[inner, proj] { return inner->base_weight(proj); }, p->bias ? *p->bias : at::Tensor(),
                       *adapter_->weights(p->slot)});
  }
  return lora_group(x, members, adapter_->settings().scale());
}

at::Tensor LoraOps::replayed_linear(const at::Tensor& x, const Projection& p) const {
  return add_adapter(inner_->replayed_linear(x, p), x, p);
}

}  // namespace fptrain::models
