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

class LoraOps : public ForwardingOps {
 public:
  // `dropout_active`: apply the adapter's dropout (training); off for evaluation.
  LoraOps(std::shared_ptr<const DecoderOps> inner, std::shared_ptr<const LoraAdapter> adapter, bool dropout_active);

  at::Tensor linear(const at::Tensor& x, const Projection& p) const override;
  at::Tensor replayed_linear(const at::Tensor& x, const Projection& p) const override;
  // With every projection of the group adapted, a frozen base and no dropout: lora_group
  // (models/lora_linear.h); else one projection at a time.
  std::vector<at::Tensor> linear_group(const at::Tensor& x, const std::vector<const Projection*>& ps) const override;

 private:
  at::Tensor add_adapter(at::Tensor y, const at::Tensor& x, const Projection& p) const;

  std::shared_ptr<const LoraAdapter> adapter_;
  bool dropout_active_;
};

}  // namespace fptrain::models
