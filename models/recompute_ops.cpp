#include "models/recompute_ops.h"

#include "models/replayed_residual.h"

#include <c10/core/GradMode.h>

#include <stdexcept>

namespace fptrain::models {

RecomputeOps::RecomputeOps(std::shared_ptr<const DecoderOps> inner) : ForwardingOps(std::move(inner)) {}

void RecomputeOps::begin_run() {
  if (!at::GradMode::is_enabled()) {
    recorded_ = true;
    pass_ = Pass::kRecord;
  } else {
    pass_ = recorded_ ? Pass::kReplay : Pass::kPlain;
  }
}

AddRmsNormOutput RecomputeOps::add_norm(const at::Tensor& residual, const at::Tensor& update,
                                        const at::Tensor& weight, double eps, double scale) const {
  if (pass_ == Pass::kReplay) {
    // update is o's replay (no product): the sum comes from the first run.
    if (!attention_residual_.defined())
      throw std::logic_error("RecomputeOps: a replayed residual add without its first run's record");
    at::Tensor sum = replayed_residual_add(residual, update, attention_residual_, scale);
    attention_residual_.reset();
    at::Tensor normed = inner_->norm(sum, weight, eps);
    return {std::move(sum), std::move(normed)};
  }
  AddRmsNormOutput out = inner_->add_norm(residual, update, weight, eps, scale);
  if (pass_ == Pass::kRecord) attention_residual_ = out.sum;
  return out;
}

at::Tensor RecomputeOps::linear(const at::Tensor& x, const Projection& p) const {
  if (pass_ == Pass::kReplay && p.residual_only) return inner_->replayed_linear(x, p);
  return inner_->linear(x, p);
}

at::Tensor RecomputeOps::attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const attention::VarlenSpec& spec) const {
  if (pass_ == Pass::kRecord) return attention::varlen_attention_recorded(q, k, v, spec, backend(), attention_);
  if (pass_ == Pass::kReplay && attention_.replayable()) {
    at::Tensor out = attention::varlen_attention_replayed(q, k, v, spec, backend(), attention_);
    attention_ = {};  // the replay's autograd node holds them now, until its backward
    return out;
  }
  return inner_->attention(q, k, v, spec);
}

}  // namespace fptrain::models
