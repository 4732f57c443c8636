#include "models/aten_ops.h"

#include "models/grad_sink_embedding.h"
#include "models/grad_sinks.h"
#include "models/rms_norm.h"

namespace fptrain::models {

AtenOps::AtenOps(attention::Backend backend, std::shared_ptr<GradSinks> sinks)
    : backend_(backend), sinks_(std::move(sinks)) {}

at::Tensor AtenOps::embed(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx) const {
  return sink_embedding(weight, ids, padding_idx, sinks_ ? sinks_->embedding() : nullptr);
}

at::Tensor AtenOps::norm(const at::Tensor& x, const at::Tensor& weight, double eps) const {
  return rms_norm(x, weight, eps);
}

AddRmsNormOutput AtenOps::add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                                   double eps, double scale) const {
  return add_then_norm(*this, residual, update, weight, eps, scale);
}

at::Tensor AtenOps::linear(const at::Tensor& x, const Projection& p) const {
  return sink_linear(x, *p.weight, p.bias ? *p.bias : at::Tensor(), sink(p));
}

RotaryOutput AtenOps::rotary(const at::Tensor& q, const at::Tensor& k, const RotaryTables& tables) const {
  return {apply_rotary(q, tables), apply_rotary(k, tables)};
}

at::Tensor AtenOps::attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const attention::VarlenSpec& spec) const {
  return attention::varlen_attention(q, k, v, spec, backend_);
}

at::Tensor AtenOps::gated_activation(const at::Tensor& gate, const at::Tensor& up) const {
  return at::silu(gate) * up;
}

GradSink* AtenOps::sink(const Projection& p) const { return sinks_ ? sinks_->at(p.slot) : nullptr; }

}  // namespace fptrain::models
