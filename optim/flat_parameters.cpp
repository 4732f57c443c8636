#include "optim/flat_parameters.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fptrain::optim {

FlatParameters::FlatParameters(FlatLayout layout, std::vector<at::Tensor> params, GradStorage storage)
    : layout_(std::move(layout)), params_(std::move(params)) {
  const auto& segs = layout_.segments();
  if (params_.size() != segs.size() || params_.empty())
    throw std::invalid_argument("FlatParameters: " + std::to_string(params_.size()) + " tensors for a layout of " +
                                std::to_string(segs.size()) + " parameters");
  const at::TensorOptions options = params_[0].options().requires_grad(false);
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& p = params_[i];
    if (!p.defined() || !p.is_leaf() || !at::isFloatingType(p.scalar_type()))
      throw std::invalid_argument("FlatParameters: '" + segs[i].name + "' must be a floating-point leaf tensor");
    if (p.scalar_type() != options.dtype().toScalarType() || p.device() != options.device())
      throw std::invalid_argument("FlatParameters: all parameters must share one dtype and device ('" + segs[i].name +
                                  "' differs)");
    if (p.sizes() != at::IntArrayRef(segs[i].shape))
      throw std::invalid_argument("FlatParameters: '" + segs[i].name + "' has shape " + c10::str(at::IntArrayRef(p.sizes())) +
                                  ", the layout says " + c10::str(at::IntArrayRef(segs[i].shape)));
  }
  c10::NoGradGuard no_grad;
  // Zeros: the padding between and after segments stays zero for good.
  weights_ = at::zeros({layout_.total()}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor w = segment(weights_, i);
    w.copy_(params_[i].detach());
    // The same tensor object, its data now the segment: the old storage is freed
    // once nothing else holds it. requires_grad and leaf-ness are untouched.
    params_[i].set_data(w);
  }
  collected_.assign(params_.size(), false);
  grads_ = std::make_unique<FlatGradients>(layout_, params_, options, storage);
}

at::Tensor FlatParameters::segment(const at::Tensor& flat, size_t i) const {
  const FlatSegment& s = layout_.segments().at(i);
  return flat.narrow(0, s.offset, s.numel).view(s.shape);
}

size_t FlatParameters::index_of(const at::Tensor& param) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].is_same(param)) return i;
  throw std::invalid_argument("FlatParameters: not one of the parameters");
}

int64_t FlatParameters::collect_grads() {
  c10::NoGradGuard no_grad;
  int64_t taken = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (grads_->holds_view(i)) continue;  // the usual case: autograd added into the view
    const at::Tensor g = params_[i].grad();  // a handle: installing the view replaces .grad
    if (!g.defined()) {
      grads_->forget(i);  // reset by someone: no gradient
      continue;
    }
    grads_->acquire_view(i, FlatGradients::Fill::kZeros).copy_(g);
    collected_[i] = true;
    ++taken;
  }
  return taken;
}

void FlatParameters::release_collected() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!collected_[i]) continue;
    grads_->forget_view(i);
    params_[i].mutable_grad() = at::Tensor();
    collected_[i] = false;
  }
}

void FlatParameters::zero_grads() { grads_->release(); }

void FlatParameters::keep_on_zero(const std::vector<const at::Tensor*>& kept) {
  std::vector<bool> keep(params_.size(), false);
  for (const at::Tensor* t : kept) {
    size_t i = 0;
    while (i < params_.size() && !params_[i].is_same(*t)) ++i;
    if (i == params_.size()) throw std::invalid_argument("FlatParameters::keep_on_zero: not one of the parameters");
    keep[i] = true;
  }
  grads_->keep_on_zero(keep);
}

}  // namespace fptrain::optim
