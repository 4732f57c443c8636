// The decoder's operations in ATen, as transformers computes them: the
// reference every other op set is measured against (any device, any dtype).
#pragma once

#include "models/decoder_ops.h"

namespace fptrain::models {

class AtenOps : public DecoderOps {
 public:
  AtenOps(attention::Backend backend, std::shared_ptr<GradSinks> sinks);

  at::Tensor embed(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx) const override;
  at::Tensor norm(const at::Tensor& x, const at::Tensor& weight, double eps) const override;
  AddRmsNormOutput add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                            double eps, double scale) const override;
  at::Tensor linear(const at::Tensor& x, const Projection& p) const override;
  RotaryOutput rotary(const at::Tensor& q, const at::Tensor& k, const RotaryTables& tables) const override;
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const attention::VarlenSpec& spec) const override;
  at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up) const override;

  attention::Backend backend() const override { return backend_; }
  GradSink* sink(const Projection& p) const override;

 private:
  attention::Backend backend_;
  std::shared_ptr<GradSinks> sinks_;
};

}  // namespace fptrain::models
