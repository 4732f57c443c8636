#include "models/grad_sinks.h"

#include <c10/core/GradMode.h>

#include <stdexcept>

namespace fptrain::models {

GradSinks::GradSinks(const std::vector<Projection>& projections,
                     const std::function<GradSlot(const at::Tensor&)>& slot_of, const at::Tensor* head,
                     const at::Tensor* embedding)
    : sinks_(projections.size()) {
  for (const Projection& p : projections) {
    if (p.slot < 0 || p.slot >= static_cast<int64_t>(sinks_.size()))
      throw std::logic_error("GradSinks: projection slots must be 0..n-1");
    sinks_[static_cast<size_t>(p.slot)] = GradSink{p.weight, slot_of(*p.weight), false};
  }
  if (head != nullptr) {
    head_ = std::make_unique<WeightGradSink>();
    head_->sink = GradSink{head, slot_of(*head), false};
  }
  if (embedding == nullptr) return;
  if (head != nullptr && embedding->is_same(*head)) {  // tied: one slot, one written flag
    embedding_ = &head_->sink;
    return;
  }
  own_embedding_ = std::make_unique<GradSink>(GradSink{embedding, slot_of(*embedding), false});
  embedding_ = own_embedding_.get();
}

GradSinks::GradSinks(const std::vector<Projection>& projections, const at::Tensor* head)
    : GradSinks(projections, [](const at::Tensor& w) -> GradSlot {
        if (!w.grad().defined() || w.grad().sizes() != w.sizes() || !w.grad().is_contiguous())
          throw std::logic_error("GradSinks: a projection weight has no contiguous .grad view");
        return [view = w.grad()](bool) { return view; };
      }, head) {}

void GradSinks::begin_step(double head_grad_scale) {
  for (GradSink& s : sinks_) s.written = false;
  if (own_embedding_) own_embedding_->written = false;
  if (!head_) return;
  head_->sink.written = false;
  head_->grad_scale = head_grad_scale;
}

namespace {

// Nothing wrote it this step: its gradient is zero, not what the slot held
// (nothing to do where its storage does not exist: that reads as zeros).
void zero_if_unwritten(GradSink& s) {
  if (s.written) return;
  const at::Tensor g = s.grad(/*need=*/false);
  if (g.defined()) g.zero_();
  s.written = true;
}

}  // namespace

void GradSinks::finish_step() {
  c10::NoGradGuard no_grad;
  if (head_) head_->check.verify();
  for (GradSink& s : sinks_) zero_if_unwritten(s);
  if (head_) zero_if_unwritten(head_->sink);
  if (own_embedding_) zero_if_unwritten(*own_embedding_);
}

std::vector<const at::Tensor*> GradSinks::params() const {
  std::vector<const at::Tensor*> out;
  for (const GradSink& s : sinks_) out.push_back(s.param);
  if (own_embedding_) out.push_back(own_embedding_->param);
  if (head_) out.push_back(head_->sink.param);
  return out;
}

}  // namespace fptrain::models
