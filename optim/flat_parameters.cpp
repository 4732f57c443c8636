#include "optim/flat_parameters.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fptrain::optim {

FlatParameters::FlatParameters(FlatLayout layout, std::vector<at::Tensor> params)
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
  grads_ = at::zeros({layout_.total()}, options);
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor w = segment(weights_, i);
    w.copy_(params_[i].detach());
    // The same tensor object, its data now the segment: the old storage is freed
    // once nothing else holds it. requires_grad and leaf-ness are untouched.
    params_[i].set_data(w);
    grad_views_.push_back(segment(grads_, i));
    params_[i].mutable_grad() = grad_views_.back();
  }
  state_.assign(params_.size(), GradState::kView);
  collected_.assign(params_.size(), false);
  zero_ranges_ = {{0, layout_.total()}};
}

at::Tensor FlatParameters::segment(const at::Tensor& flat, size_t i) const {
  const FlatSegment& s = layout_.segments().at(i);
  return flat.narrow(0, s.offset, s.numel).view(s.shape);
}

int64_t FlatParameters::collect_grads() {
  c10::NoGradGuard no_grad;
  int64_t taken = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const at::Tensor& g = params_[i].grad();
    if (g.defined() && g.is_same(grad_views_[i])) continue;  // the usual case: autograd added into the view
    if (!g.defined()) {
      if (state_[i] == GradState::kView) {  // reset by someone: no gradient
        grad_views_[i].zero_();
        state_[i] = GradState::kReleased;
      }
      continue;
    }
    grad_views_[i].copy_(g);
    params_[i].mutable_grad() = grad_views_[i];
    state_[i] = GradState::kView;
    collected_[i] = true;
    ++taken;
  }
  return taken;
}

void FlatParameters::release_collected() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!collected_[i]) continue;
    params_[i].mutable_grad() = at::Tensor();
    state_[i] = GradState::kReleased;
    collected_[i] = false;
  }
}

void FlatParameters::zero_grads() {
  c10::NoGradGuard no_grad;
  for (const auto& [begin, end] : zero_ranges_) grads_.narrow(0, begin, end - begin).zero_();
}

void FlatParameters::keep_on_zero(const std::vector<const at::Tensor*>& kept) {
  std::vector<bool> keep(params_.size(), false);
  for (const at::Tensor* t : kept) {
    size_t i = 0;
    while (i < params_.size() && !params_[i].is_same(*t)) ++i;
    if (i == params_.size()) throw std::invalid_argument("FlatParameters::keep_on_zero: not one of the parameters");
    keep[i] = true;
  }
  // The buffer minus the kept segments, as few ranges as possible (the padding between segments is zero anyway).
  std::vector<size_t> order(params_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto& segs = layout_.segments();
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return segs[a].offset < segs[b].offset; });
  zero_ranges_.clear();
  int64_t begin = 0;
  for (size_t i : order) {
    if (!keep[i]) continue;
    if (segs[i].offset > begin) zero_ranges_.emplace_back(begin, segs[i].offset);
    begin = segs[i].offset + segs[i].numel;
  }
  if (layout_.total() > begin) zero_ranges_.emplace_back(begin, layout_.total());
}

}  // namespace fptrain::optim
