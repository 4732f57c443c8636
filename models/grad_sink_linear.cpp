#include "models/grad_sink_linear.h"

#include <torch/autograd.h>

#include <stdexcept>

namespace fptrain::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Where the weight gradient goes; the input gradient is returned.
at::Tensor sink_backward(AutogradContext* ctx, const at::Tensor& dy, at::Tensor& dweight) {
  const variable_list saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& weight = saved[1];
  auto* sink = reinterpret_cast<GradSink*>(ctx->saved_data["sink"].toInt());
  at::Tensor dx;
  if (ctx->needs_input_grad(0)) dx = dy.mm(weight);
  if (!ctx->needs_input_grad(1)) return dx;
  if (sink == nullptr || !sink->grad) {
    dweight = dy.t().mm(x);
    return dx;
  }
  at::Tensor grad = sink->grad(/*need=*/true);
  if (!sink->written) {
    at::mm_out(grad, dy.t(), x);  // overwrites what the slot held: nothing to zero first
    sink->written = true;
  } else {
    // Later micro-batches add theirs in the GEMM's epilogue (beta = 1): no temporary, and the sum is rounded
    // once (AccumulateGrad rounds the product to the weight's dtype first, then the sum).
    grad.addmm_(dy.t(), x);
  }
  // The undefined gradient returned for the weight still reaches its AccumulateGrad node, which adds
  // nothing and runs its post-accumulate hooks (the data-parallel reducer counts on them) after this.
  return dx;
}

// The products are those of at::linear's own backward (dy W and dy^T x for a
// 2-D x, dy summed over tokens for the bias), so the values are the same bits.
// With and without a bias: an undefined tensor cannot be a Function's input.
// kReplayed: the forward skips the product and returns zeros of its shape
// (replayed_sink_linear); the backward is the same.
template <bool kReplayed>
at::Tensor sink_forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                        int64_t sink_address) {
  ctx->save_for_backward({x, weight});
  ctx->saved_data["sink"] = sink_address;
  if constexpr (kReplayed) return at::zeros({x.size(0), weight.size(0)}, x.options());
  return at::linear(x, weight, bias);
}

template <bool kReplayed>
struct SinkLinear : public torch::autograd::Function<SinkLinear<kReplayed>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            int64_t sink_address) {
    return sink_forward<kReplayed>(ctx, x, weight, at::Tensor(), sink_address);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor dweight;
    at::Tensor dx = sink_backward(ctx, grads[0], dweight);
    return {dx, dweight, at::Tensor()};
  }
};

template <bool kReplayed>
struct SinkLinearWithBias : public torch::autograd::Function<SinkLinearWithBias<kReplayed>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, int64_t sink_address) {
    return sink_forward<kReplayed>(ctx, x, weight, bias, sink_address);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    at::Tensor dweight, dbias;
    at::Tensor dx = sink_backward(ctx, grads[0], dweight);
    if (ctx->needs_input_grad(2)) dbias = grads[0].sum(0);
    return {dx, dweight, dbias, at::Tensor()};
  }
};

}  // namespace

at::Tensor replayed_sink_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                GradSink* sink) {
  if (x.dim() != 2) throw std::invalid_argument("replayed_sink_linear: x must be 2-D [tokens, features]");
  const auto address = reinterpret_cast<int64_t>(sink != nullptr && sink->grad ? sink : nullptr);
  return bias.defined() ? SinkLinearWithBias<true>::apply(x, weight, bias, address)
                        : SinkLinear<true>::apply(x, weight, address);
}

at::Tensor sink_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, GradSink* sink) {
  if (sink == nullptr || !sink->grad || x.dim() != 2) return at::linear(x, weight, bias);
  const auto address = reinterpret_cast<int64_t>(sink);
  return bias.defined() ? SinkLinearWithBias<false>::apply(x, weight, bias, address)
                        : SinkLinear<false>::apply(x, weight, address);
}

}  // namespace fptrain::models
