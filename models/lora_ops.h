// LoRA as a decorator of any op set: every projection the adapter covers
// computes base + scale * B A dropout(x) (models/lora_linear.h), the rest of
// the layer is the inner set's. Applied from outside (the trainer, evaluation),
// under the family's own decorator and over the mechanism's set; in an
// activation checkpoint's recomputation the adapter's part is added to the
// inner set's replayed product, so the adapter's gradients flow there too.
#pragma once

#include "models/decoder_ops.h"
#include "models/lora_adapter.h"

#include <memory>

namespace fptrain::models {

class LoraOps : public DecoderOps {
 public:
  // `dropout_active`: apply the adapter's dropout (training); off for evaluation.
  LoraOps(std::shared_ptr<const DecoderOps> inner, std::shared_ptr<const LoraAdapter> adapter, bool dropout_active);

  at::Tensor norm(const at::Tensor& x, const at::Tensor& weight, double eps) const override {
    return inner_->norm(x, weight, eps);
  }
  AddRmsNormOutput add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                            double eps, double scale) const override {
    return inner_->add_norm(residual, update, weight, eps, scale);
  }
  at::Tensor linear(const at::Tensor& x, const Projection& p) const override;
  at::Tensor replayed_linear(const at::Tensor& x, const Projection& p) const override;
  // With every projection of the group adapted, a frozen base and no dropout: lora_group
  // (models/lora_linear.h); else one projection at a time.
  std::vector<at::Tensor> linear_group(const at::Tensor& x, const std::vector<const Projection*>& ps) const override;
  RotaryOutput rotary(const at::Tensor& q, const at::Tensor& k, const RotaryTables& tables) const override {
    return inner_->rotary(q, k, tables);
  }
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const attention::VarlenSpec& spec) const override {
    return inner_->attention(q, k, v, spec);
  }
  at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up) const override {
    return inner_->gated_activation(gate, up);
  }
  at::Tensor gated_activation_packed(const at::Tensor& gate_up) const override {
    return inner_->gated_activation_packed(gate_up);
  }

  at::Tensor base_weight(const Projection& p) const override { return inner_->base_weight(p); }
  attention::Backend backend() const override { return inner_->backend(); }
  GradSink* sink(const Projection& p) const override { return inner_->sink(p); }

 private:
  at::Tensor add_adapter(at::Tensor y, const at::Tensor& x, const Projection& p) const;

  std::shared_ptr<const DecoderOps> inner_;
  std::shared_ptr<const LoraAdapter> adapter_;
  bool dropout_active_;
};

}  // namespace fptrain::models
