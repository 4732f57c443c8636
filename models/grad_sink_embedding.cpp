#include "models/grad_sink_embedding.h"

#include <torch/autograd.h>

namespace fptrain::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The tokens renumbered 0..U-1 in increasing id order without a device read:
// `rank` [T] (each token's number) and `rows` [T] (number -> id; the unused tail
// points at row 0 and carries zero gradients there). Renumbering keeps the order
// of ids, so ATen's embedding backward sorts and sums the tokens exactly as it
// would with the original ids.
std::pair<at::Tensor, at::Tensor> renumber(const at::Tensor& ids, int64_t vocab) {
  const at::Tensor flat = ids.reshape({-1});
  const at::Tensor present = at::zeros({vocab}, flat.options());
  present.index_fill_(0, flat, 1);
  const at::Tensor rank = present.cumsum(0).sub_(1).index_select(0, flat);
  const at::Tensor rows = at::zeros({flat.numel()}, flat.options());
  rows.index_put_({rank}, flat);  // duplicates write the same id
  return {rank, rows};
}

struct SinkEmbedding : public torch::autograd::Function<SinkEmbedding> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& weight, const at::Tensor& ids,
                            int64_t padding_idx, int64_t sink_address) {
    ctx->save_for_backward({ids});
    ctx->saved_data["vocab"] = weight.size(0);
    ctx->saved_data["padding_idx"] = padding_idx;
    ctx->saved_data["sink"] = sink_address;
    return at::embedding(weight, ids, padding_idx);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor ids = ctx->get_saved_variables()[0].reshape({-1});
    const int64_t vocab = ctx->saved_data["vocab"].toInt(), padding_idx = ctx->saved_data["padding_idx"].toInt();
    auto* sink = reinterpret_cast<GradSink*>(ctx->saved_data["sink"].toInt());
    at::Tensor dy = grads[0].reshape({ids.numel(), -1});
    // The pad token's row gets no gradient (nn.Embedding's padding_idx).
    if (padding_idx >= 0) dy = dy.masked_fill(ids.eq(padding_idx).unsqueeze(1), 0);
    const auto [rank, rows] = renumber(ids, vocab);
    const at::Tensor sums = at::embedding_dense_backward(dy, rank, ids.numel(), /*padding_idx=*/-1,
                                                         /*scale_grad_by_freq=*/false);
    at::Tensor slot = sink->grad(/*need=*/true);
    if (!sink->written) slot.zero_();
    sink->written = true;
    slot.index_add_(0, rows, sums);
    // The undefined gradient still reaches the weight's AccumulateGrad, whose hooks run.
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor sink_embedding(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx, GradSink* sink) {
  if (sink == nullptr || !sink->grad || !weight.requires_grad() || !c10::GradMode::is_enabled())
    return at::embedding(weight, ids, padding_idx);
  return SinkEmbedding::apply(weight, ids, padding_idx, reinterpret_cast<int64_t>(sink));
}

}  // namespace fptrain::models
