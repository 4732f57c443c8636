// A linear layer with a gradient sink gives the same bits as at::linear under
// autograd (input, weight and bias gradients; the first micro-batch written;
// later ones added in the GEMM, equal up to rounding), leaves the weight's .grad the same view, and its
// post-accumulate hook fires once per backward, as the data-parallel reducer
// expects.
#include "models/grad_sink_linear.h"

#include "tests/models/counting_hook.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

namespace fptrain::models {
namespace {

using testing::CountingHook;

TEST(GradSinkLinear, SameBitsAsAutogradAndOneHookPerBackward) {
  for (const bool with_bias : {false, true}) {
    SCOPED_TRACE(with_bias ? "with bias" : "no bias");
    torch::manual_seed(3);
    const at::Tensor w0 = torch::randn({6, 5}), b0 = torch::randn({6});
    const std::vector<at::Tensor> xs = {torch::randn({7, 5}), torch::randn({4, 5})};  // two micro-batches

    // Reference: plain autograd into a zeroed .grad.
    at::Tensor w_ref = w0.clone().requires_grad_(true), b_ref = b0.clone().requires_grad_(with_bias);
    w_ref.mutable_grad() = torch::zeros_like(w0);
    std::vector<at::Tensor> dx_ref;
    at::Tensor w_ref_first;
    for (const at::Tensor& x : xs) {
      at::Tensor xr = x.clone().requires_grad_(true);
      at::linear(xr, w_ref, with_bias ? b_ref : at::Tensor()).sin().sum().backward();
      dx_ref.push_back(xr.grad());
      if (!w_ref_first.defined()) w_ref_first = w_ref.grad().clone();
    }

    // Sink: the .grad view holds garbage from "the last step"; the first backward overwrites it.
    at::Tensor buffer = torch::full({40}, 123.0);
    at::Tensor w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(with_bias);
    const at::Tensor view = buffer.narrow(0, 5, 30).view({6, 5});
    w.mutable_grad() = view;
    int fired = 0;
    torch::autograd::impl::set_post_acc_grad_hooks(w, std::make_unique<CountingHook>(&fired));
    GradSink sink{&w, [view](bool) { return view; }, false};
    for (size_t i = 0; i < xs.size(); ++i) {
      at::Tensor x = xs[i].clone().requires_grad_(true);
      sink_linear(x, w, with_bias ? b : at::Tensor(), &sink).sin().sum().backward();
      EXPECT_EQ(fired, static_cast<int>(i + 1)) << "the post-accumulate hook fires once per backward";
      EXPECT_TRUE(x.grad().equal(dx_ref[i]));
      if (i == 0) EXPECT_TRUE(view.equal(w_ref_first)) << "the first micro-batch's weight gradient is autograd's";
    }
    EXPECT_TRUE(sink.written);
    EXPECT_TRUE(w.grad().is_same(view));
    // Later micro-batches add in the GEMM (one rounding instead of two).
    EXPECT_TRUE(at::allclose(view, w_ref.grad(), 1e-6, 1e-6)) << "weight gradient differs from autograd's";
    EXPECT_EQ(buffer[0].item<double>(), 123.0);  // outside the view: untouched
    EXPECT_EQ(buffer[35].item<double>(), 123.0);
    if (with_bias) EXPECT_TRUE(b.grad().equal(b_ref.grad()));

    // Without a sink (or without a grad view) it is at::linear.
    at::Tensor w_plain = w0.clone().requires_grad_(true);
    sink_linear(xs[0], w_plain, at::Tensor(), nullptr).sum().backward();
    EXPECT_TRUE(w_plain.grad().defined());
  }
}

}  // namespace
}  // namespace fptrain::models
