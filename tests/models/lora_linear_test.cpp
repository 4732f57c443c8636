// lora_add: the update and its gradients equal autograd through the plain
// operations (PEFT's lora_B(lora_A(dropout(x))) * scale added to the base
// output), with and without dropout; with dropout, the backward uses the
// forward's own mask and the update's expected value is the undropped one.
#include "models/lora_linear.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

namespace fptrain::models {
namespace {

double rel(const at::Tensor& a, const at::Tensor& b) {
  return ((a.to(at::kDouble) - b.to(at::kDouble)).norm() / b.to(at::kDouble).norm()).item<double>();
}

struct Case {
  at::Tensor y, x, a, b, dy;
};

Case make_case() {
  at::manual_seed(7);
  const int64_t T = 13, in = 24, out = 20, r = 4;
  return {at::randn({T, out}).requires_grad_(), at::randn({T, in}).requires_grad_(),
          (0.3 * at::randn({r, in})).requires_grad_(), (0.3 * at::randn({out, r})).requires_grad_(), at::randn({T, out})};
}

void expect_same_as_plain_ops(double dropout) {
  const double scale = 1.75;
  Case c = make_case();
  at::manual_seed(11);  // the dropout mask's draw
  const at::Tensor ours = lora_add(c.y, c.x, {c.a, c.b}, scale, dropout);
  const auto g = torch::autograd::grad({ours}, {c.y, c.x, c.a, c.b}, {c.dy});
  at::manual_seed(11);
  const at::Tensor dropped = dropout > 0 ? std::get<0>(at::native_dropout(c.x, dropout, true)) : c.x;
  const at::Tensor plain = c.y + dropped.mm(c.a.t()).mm(c.b.t()) * scale;
  const auto h = torch::autograd::grad({plain}, {c.y, c.x, c.a, c.b}, {c.dy});
  EXPECT_LT(rel(ours, plain), 1e-6);
  for (size_t i = 0; i < 4; ++i) EXPECT_LT(rel(g[i], h[i]), 1e-6) << "input " << i;
}

TEST(LoraAdd, EqualsPlainOperations) { expect_same_as_plain_ops(0.0); }

TEST(LoraAdd, DropoutBackwardUsesTheForwardsMask) { expect_same_as_plain_ops(0.3); }

TEST(LoraAdd, DropoutKeepsTheExpectedValue) {
  Case c = make_case();
  at::NoGradGuard no_grad;
  const at::Tensor undropped = lora_add(c.y, c.x, {c.a, c.b}, 2.0, 0.0) - c.y;
  at::Tensor sum = at::zeros_like(undropped);
  const int draws = 4000;
  for (int i = 0; i < draws; ++i) sum += lora_add(c.y, c.x, {c.a, c.b}, 2.0, 0.25) - c.y;
  // Each draw's relative deviation is about sqrt(p / (1 - p)) = 0.58; the mean's is 0.58 / sqrt(4000) ~ 0.01.
  EXPECT_LT(rel(sum / draws, undropped), 0.03);
}

TEST(LoraAdd, RefusesMismatchedShapes) {
  Case c = make_case();
  EXPECT_THROW(lora_add(c.y, c.x, {c.b, c.a}, 1.0, 0.0), std::invalid_argument);
  EXPECT_THROW(lora_add(c.y, c.x, {c.a, c.b}, 1.0, 1.0), std::invalid_argument);
}

}  // namespace
}  // namespace fptrain::models
