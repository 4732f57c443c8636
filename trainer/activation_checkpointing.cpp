#include "trainer/activation_checkpointing.h"

#include "models/recompute_ops.h"

#include <ATen/Context.h>

#include <cstdio>
#include <mutex>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace fptrain::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the backward pass needs besides the saved input: the layer, its parameters, and the
// generator's state before the first run, so that the recomputation draws the same random
// numbers (an adapter's dropout mask), as torch.utils.checkpoint's preserve_rng_state.
struct LayerClosure : torch::CustomClassHolder {
  LayerFunction run;
  std::vector<at::Tensor> params;
  at::Tensor rng_state;  // undefined: nothing random to replay
};

at::Generator generator_of(const at::Tensor& t) { return at::globalContext().defaultGenerator(t.device()); }

// Runs f with the device generator set to `state`, then puts the generator's own state back.
template <typename F>
at::Tensor with_rng_state(const at::Tensor& like, const at::Tensor& state, F f) {
  at::Generator gen = generator_of(like);
  at::Tensor current;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    current = gen.get_state();
    gen.set_state(state);
  }
  at::Tensor out = f();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(current);
  return out;
}

struct RecomputeLayer : torch::autograd::Function<RecomputeLayer> {
  // Autograd is off inside forward(): run() builds no graph and keeps no activations.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, at::TensorList params,
                            c10::intrusive_ptr<LayerClosure> closure) {
    if (closure->rng_state.defined()) {  // asked for: the state to replay
      at::Generator gen = generator_of(hidden);
      std::lock_guard<std::mutex> lock(gen.mutex());
      closure->rng_state = gen.get_state();
    }
    at::Tensor out = closure->run(hidden);
    ctx->save_for_backward({hidden});
    ctx->saved_data["closure"] = c10::IValue::make_capsule(closure);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto closure = c10::static_intrusive_pointer_cast<LayerClosure>(ctx->saved_data["closure"].toCapsule());
    const at::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor out;
    {
      c10::AutoGradMode enable(true);
      out = closure->rng_state.defined()
                ? with_rng_state(input, closure->rng_state, [&] { return closure->run(input); })
                : closure->run(input);
    }
    variable_list inputs{input};
    inputs.insert(inputs.end(), closure->params.begin(), closure->params.end());
    variable_list grads = torch::autograd::grad({out}, inputs, {grad_outputs[0]}, /*retain_graph=*/false,
                                                /*create_graph=*/false, /*allow_unused=*/true);
    grads.emplace_back();  // the closure argument has no gradient
    return grads;
  }
};

}  // namespace

AutoCheckpointing::AutoCheckpointing(const ActivationShape& m, int64_t free_bytes)
    : free_(free_bytes), layers_(m.layers) {
  const double b = static_cast<double>(m.dtype_bytes), extra = static_cast<double>(m.extra_per_token);
  const double attention = b * static_cast<double>(3 * m.hidden + 3 * m.q + 4 * m.kv);
  const double mlp = b * static_cast<double>(2 * m.hidden + 3 * m.intermediate);
  none_ = attention + mlp + extra;
  selective_ = attention + b * static_cast<double>(m.hidden) + extra;
  recomputed_ = b * static_cast<double>(2 * m.hidden + m.q);
  budget_ = (static_cast<double>(free_bytes) - 2.0 * (1 << 30)) / 1.2;
  score_bytes_ = static_cast<double>(m.score_bytes);
  const double L = static_cast<double>(layers_);
  auto max_tokens = [&](double per_token) { return budget_ > 0 ? static_cast<int64_t>(budget_ / per_token) : 0; };
  none_max_ = max_tokens(L * none_);
  selective_max_ = max_tokens(L * selective_);
}

// Kept bytes of a plan: each layer's share, the scores of the layers not recomputed
// whole, and while a whole layer is recomputed in the backward its full activations.
double AutoCheckpointing::cost(const LayerPlan& p, int64_t tokens, int64_t scores) const {
  const double T = static_cast<double>(tokens), S = static_cast<double>(scores) * score_bytes_;
  const double plain = static_cast<double>(layers_ - p.recomputed - p.selective);
  double bytes = T * (static_cast<double>(p.recomputed) * recomputed_ + static_cast<double>(p.selective) * selective_ +
                      plain * none_);
  bytes += static_cast<double>(layers_ - p.recomputed) * S;
  if (p.recomputed > 0) bytes += T * none_ + S;
  return bytes;
}

// Candidates from fastest to slowest: MLPs recomputed in 0..L layers, then whole layers
// 1..L with every other layer's MLP recomputed; the first that fits.
LayerPlan AutoCheckpointing::plan(int64_t tokens, int64_t scores) const {
  for (int64_t s = 0; s <= layers_; ++s)
    if (cost({0, s}, tokens, scores) <= budget_) return {0, s};
  for (int64_t r = 1; r < layers_; ++r)
    if (cost({r, layers_ - r}, tokens, scores) <= budget_) return {r, layers_ - r};
  return {layers_, 0};
}

ActivationShape activation_shape(const models::ModelConfig& c, at::ScalarType dtype, attention::Backend backend) {
  ActivationShape m;
  m.layers = c.num_hidden_layers;
  m.hidden = c.hidden_size;
  m.q = c.num_attention_heads * c.head_dim;
  m.kv = c.num_key_value_heads * c.head_dim;
  m.intermediate = c.intermediate_size;
  m.dtype_bytes = static_cast<int64_t>(c10::elementSize(dtype));
  m.extra_per_token = m.dtype_bytes * ((c.gemma ? 2 * m.hidden : 0) + (c.qk_norm ? m.q + m.kv : 0));
  if (backend == attention::Backend::kReference) {
    const int64_t per_head = 4 + m.dtype_bytes + (c.attn_logit_softcap > 0 ? m.dtype_bytes : 0);
    m.score_bytes = c.num_attention_heads * per_head + 1;
  }
  return m;
}

int64_t attention_scores(const std::vector<int32_t>& cu_seqlens) {
  int64_t sum = 0;
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    const int64_t len = cu_seqlens[i] - cu_seqlens[i - 1];
    sum += len * len;
  }
  return sum;
}

std::string AutoCheckpointing::describe() const {
  char buf[384];
  std::snprintf(buf, sizeof buf,
                "activation checkpointing auto: %.1f GiB free after set-up; micro-batches of up to %lld tokens run "
                "without it, up to %lld with the MLPs of as few layers recomputed as fit, larger ones recompute "
                "as few whole layers as fit%s",
                static_cast<double>(free_) / (1 << 30), static_cast<long long>(none_max_),
                static_cast<long long>(selective_max_),
                score_bytes_ > 0 ? " (fewer with long documents: the attention backend keeps its scores)" : "");
  return buf;
}

at::Tensor checkpointed_layer(const at::Tensor& hidden, LayerFunction run, const std::vector<at::Tensor>& params,
                              bool preserve_rng) {
  auto closure = c10::make_intrusive<LayerClosure>();
  closure->run = std::move(run);
  closure->params = params;
  if (preserve_rng) closure->rng_state = at::empty({0}, at::kByte);  // replaced by the forward
  return RecomputeLayer::apply(hidden, at::TensorList(params), closure);
}

at::Tensor recomputed_block(const at::Tensor& hidden, const models::DecoderOps& ops,
                            const models::CausalLM::BlockFn& run, const std::vector<at::Tensor>& params,
                            bool preserve_rng) {
  auto recompute = std::make_shared<models::RecomputeOps>(ops.shared_from_this());
  return checkpointed_layer(
      hidden,
      [recompute, run](const at::Tensor& h) {
        recompute->begin_run();
        return run(h, *recompute);
      },
      params, preserve_rng);
}

}  // namespace fptrain::trainer
