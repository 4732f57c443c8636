// An embedding with a gradient sink gives autograd's weight gradient bit for bit
// (repeated tokens, the padding row, fp32 and bf16), overwrites a stale slot on
// the step's first write and adds on later ones (as AccumulateGrad adds), leaves
// the rows of absent tokens zero, and fires the post-accumulate hook once per
// backward, as the data-parallel reducer expects.
#include "models/grad_sink_embedding.h"

#include "tests/models/counting_hook.h"

#include <gtest/gtest.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

namespace fptrain::models {
namespace {

using testing::CountingHook;

// The weight gradients of plain autograd over the micro-batches (the first, then the sum).
std::pair<at::Tensor, at::Tensor> autograd_grads(const at::Tensor& w0, const std::vector<at::Tensor>& ids,
                                                 const std::vector<at::Tensor>& upstream, int64_t padding_idx) {
  at::Tensor w = w0.clone().requires_grad_(true), first;
  for (size_t i = 0; i < ids.size(); ++i) {
    at::embedding(w, ids[i], padding_idx).backward(upstream[i]);
    if (!first.defined()) first = w.grad().clone();
  }
  return {first, w.grad()};
}

TEST(GradSinkEmbedding, SameBitsAsAutogradAndOneHookPerBackward) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const int64_t padding_idx : {int64_t{-1}, int64_t{3}}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " padding_idx " + std::to_string(padding_idx));
      torch::manual_seed(5);
      const int64_t vocab = 50, hidden = 8;
      const at::Tensor w0 = torch::randn({vocab, hidden}).to(dtype);
      // Repeated tokens, the pad token, token 0 (where the renumbering's unused tail points).
      const std::vector<at::Tensor> ids = {torch::tensor({7, 3, 7, 0, 41, 7, 3, 12}, torch::kLong),
                                           torch::tensor({12, 12, 49, 5, 3}, torch::kLong)};
      std::vector<at::Tensor> upstream;
      for (const at::Tensor& t : ids) upstream.push_back(torch::randn({t.numel(), hidden}).to(dtype));
      const auto [first_ref, sum_ref] = autograd_grads(w0, ids, upstream, padding_idx);

      at::Tensor buffer = torch::full({vocab * hidden + 10}, 123.0).to(dtype);  // a stale step's values
      const at::Tensor view = buffer.narrow(0, 5, vocab * hidden).view({vocab, hidden});
      at::Tensor w = w0.clone().requires_grad_(true);
      w.mutable_grad() = view;
      int fired = 0;
      torch::autograd::impl::set_post_acc_grad_hooks(w, std::make_unique<CountingHook>(&fired));
      GradSink sink{&w, [view](bool) { return view; }, false};
      for (size_t i = 0; i < ids.size(); ++i) {
        const at::Tensor y = sink_embedding(w, ids[i], padding_idx, &sink);
        EXPECT_TRUE(y.equal(at::embedding(w0, ids[i], padding_idx)));
        y.backward(upstream[i]);
        EXPECT_EQ(fired, static_cast<int>(i + 1)) << "the post-accumulate hook fires once per backward";
        if (i == 0) EXPECT_TRUE(view.equal(first_ref)) << "the first micro-batch's gradient is autograd's";
      }
      EXPECT_TRUE(sink.written);
      EXPECT_TRUE(w.grad().is_same(view));
      EXPECT_TRUE(view.equal(sum_ref)) << "later micro-batches add as AccumulateGrad adds";
      EXPECT_EQ(buffer[0].item<double>(), 123.0);  // outside the view: untouched
      EXPECT_EQ(buffer[vocab * hidden + 7].item<double>(), 123.0);
    }
  }
}

TEST(GradSinkEmbedding, WithoutASinkOrAGradientItIsAtenEmbedding) {
  const at::Tensor w = torch::randn({10, 4}).requires_grad_(true), ids = torch::tensor({1, 2, 1}, torch::kLong);
  sink_embedding(w, ids, -1, nullptr).sum().backward();
  EXPECT_TRUE(w.grad().defined());
  GradSink empty;
  const at::Tensor frozen = torch::randn({10, 4});
  EXPECT_TRUE(sink_embedding(frozen, ids, -1, &empty).equal(at::embedding(frozen, ids)));
}

}  // namespace
}  // namespace fptrain::models
