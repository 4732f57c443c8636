#include "models/grad_scale_check.h"

#include <c10/core/GradMode.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cfloat>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace fptrain::models {
namespace {

// The trainer forms grad_output in fp32 (loss_sum / denominator): a few fp32 ulps
// of difference from the double it announced are that rounding, anything more a bug.
void check_value(double got, double expected) {
  if (std::abs(got - expected) <= 4 * FLT_EPSILON * std::abs(expected)) return;
  std::ostringstream what;
  what.precision(9);
  what << "linear_cross_entropy: the backward received grad_output " << got
       << " but the forward already wrote the weight's gradient into its sink scaled by " << expected
       << " (WeightGradSink::grad_scale): backpropagate the loss with exactly that scale, once";
  throw std::logic_error(what.str());
}

}  // namespace

void GradScaleCheck::expect(const at::Tensor& grad_output, double expected) {
  if (!grad_output.defined()) return check_value(0.0, expected);
  if (grad_output.numel() != 1) throw std::logic_error("GradScaleCheck: grad_output must have one element");
  c10::NoGradGuard no_grad;
  const at::Tensor g = grad_output.detach().reshape({1});
  if (g.is_cpu()) return check_value(g.to(at::kDouble).item<double>(), expected);
  Pending p;
  p.value = at::empty({1}, g.options().device(at::kCPU).pinned_memory(true));
  p.value.copy_(g, /*non_blocking=*/true);
  p.expected = expected;
  c10::impl::VirtualGuardImpl guard(g.device().type());
  p.copied = std::make_unique<c10::Event>(g.device().type());
  p.copied->record(guard.getStream(g.device()));
  pending_.push_back(std::move(p));
}

void GradScaleCheck::verify() {
  std::vector<Pending> pending = std::move(pending_);
  pending_.clear();
  for (Pending& p : pending) {
    p.copied->synchronize();
    check_value(p.value.to(at::kDouble).item<double>(), p.expected);
  }
}

}  // namespace fptrain::models
