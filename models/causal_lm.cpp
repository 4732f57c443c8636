// The decoder, top-down. Every step mirrors Hugging Face's LlamaForCausalLM
// (Mistral adds a sliding window, Granite four multipliers), in the same
// operation order and precision, so logits and gradients agree to rounding:
//
//   x = embed(ids) * embedding_multiplier
//   per layer:  x = x + attn(rms_norm(x)) * residual_multiplier
//               x = x + mlp(rms_norm(x))  * residual_multiplier
//   logits = lm_head(rms_norm(x)) / logits_scaling
#include "models/causal_lm.h"

#include "models/parameter_layout.h"
#include "models/replayed_residual.h"
#include "models/rms_norm.h"

#include <c10/core/GradMode.h>

#include <sstream>
#include <stdexcept>
#include <vector>

namespace fptrain::models {
namespace {

std::string shape_text(at::IntArrayRef shape) {
  std::ostringstream os;
  os << shape;
  return os.str();
}

// The parameters must be exactly the ones the config implies, one dtype, one device.
void check_parameters(const ModelConfig& config, const TensorMap& params) {
  const auto expected = expected_parameter_shapes(config);
  std::vector<std::string> problems;
  for (const auto& [name, shape] : expected) {
    auto it = params.find(name);
    if (it == params.end() || !it->second.defined()) {
      problems.push_back("missing parameter '" + name + "'");
    } else if (it->second.sizes() != at::IntArrayRef(shape)) {
      problems.push_back("parameter '" + name + "' has shape " + shape_text(it->second.sizes()) +
                         " but the config implies " + shape_text(shape));
    }
  }
  for (const auto& [name, tensor] : params) {
    if (!expected.count(name)) problems.push_back("unexpected parameter '" + name + "'");
  }
  if (problems.empty()) {
    const at::Tensor& first = params.begin()->second;
    if (!at::isFloatingType(first.scalar_type())) {
      problems.push_back(std::string("parameters must be floating point; got ") +
                         c10::toString(first.scalar_type()));
    }
    for (const auto& [name, tensor] : params) {
      if (tensor.scalar_type() != first.scalar_type() || tensor.device() != first.device()) {
        problems.push_back("parameter '" + name + "' is " + c10::toString(tensor.scalar_type()) +
                           " on " + tensor.device().str() + " but '" + params.begin()->first + "' is " +
                           c10::toString(first.scalar_type()) + " on " + first.device().str());
        break;
      }
    }
  }
  if (problems.empty()) return;
  std::string msg = "CausalLM(" + config.architecture + "): parameters do not match the config";
  for (const auto& p : problems) msg += "\n  " + p;
  throw std::invalid_argument(msg);
}

void check_input(const PackedInput& in, const at::Device& device) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("CausalLM input: " + what); };
  if (!in.input_ids.defined() || in.input_ids.dim() != 1 || in.input_ids.scalar_type() != at::kLong) {
    fail("input_ids must be int64 [T]");
  }
  const int64_t T = in.input_ids.size(0);
  if (T == 0) fail("no tokens");
  if (!in.position_ids.defined() || in.position_ids.sizes() != in.input_ids.sizes() ||
      in.position_ids.scalar_type() != at::kLong) {
    fail("position_ids must be int64 [T] with T = " + std::to_string(T));
  }
  if (in.input_ids.device() != device || in.position_ids.device() != device) {
    fail("input_ids and position_ids must be on the model's device " + device.str());
  }
  if (!in.cu_seqlens.defined()) fail("cu_seqlens is missing (boundaries must come from the batcher)");
}

}  // namespace

CausalLM::CausalLM(ModelConfig config, TensorMap parameters, attention::Backend backend)
    : config_(std::move(config)), params_(std::move(parameters)), backend_(backend) {
  check_parameters(config_, params_);
  inv_freq_ = rope_inv_freq(config_.rope, config_.head_dim).to(weight("model.embed_tokens.weight").device());
  fused_ops_ = fused_cuda_kernels_available(parameters_device());
  auto optional = [this](const std::string& name, bool present) { return present ? &weight(name) : nullptr; };
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.", m = p + "mlp.";
    const bool ab = config_.attention_bias, mb = config_.mlp_bias;
    layers_.push_back({&weight(p + "input_layernorm.weight"), &weight(p + "post_attention_layernorm.weight"),
                       &weight(a + "q_proj.weight"), &weight(a + "k_proj.weight"), &weight(a + "v_proj.weight"),
                       &weight(a + "o_proj.weight"), optional(a + "q_proj.bias", ab), optional(a + "k_proj.bias", ab),
                       optional(a + "v_proj.bias", ab), optional(a + "o_proj.bias", ab), &weight(m + "gate_proj.weight"),
                       &weight(m + "up_proj.weight"), &weight(m + "down_proj.weight"),
                       optional(m + "gate_proj.bias", mb), optional(m + "up_proj.bias", mb),
                       optional(m + "down_proj.bias", mb)});
  }
}

const at::Tensor& CausalLM::weight(const std::string& name) const {
  auto it = params_.find(name);
  if (it == params_.end()) throw std::invalid_argument("CausalLM: no parameter '" + name + "'");
  return it->second;
}

at::Tensor CausalLM::bias(const std::string& name, bool present) const {
  return present ? weight(name) : at::Tensor();
}

// The boundaries for every attention call of one forward pass. This is where
// they are validated, once per forward (the host copy the batch carries; the
// reference backend needs one and gets it with one copy per forward, not one
// per layer); the attention calls then skip their own check.
attention::VarlenSpec CausalLM::attention_spec(const PackedInput& in) const {
  attention::VarlenSpec spec;
  spec.cu_seqlens = in.cu_seqlens;
  spec.max_seqlen = in.max_seqlen;
  spec.causal = true;
  spec.window = config_.sliding_window.value_or(0);
  spec.softmax_scale = config_.softmax_scale();
  if (in.cu_seqlens_cpu.defined()) {
    spec.cu_seqlens_cpu = in.cu_seqlens_cpu;
  } else if (in.cu_seqlens.device().is_cpu()) {
    spec.cu_seqlens_cpu = in.cu_seqlens;
  } else if (backend_ == attention::Backend::kReference) {
    spec.cu_seqlens_cpu = in.cu_seqlens.to(at::kCPU);
  }
  if (spec.cu_seqlens_cpu.defined()) {
    attention::validate_cu_seqlens(spec.cu_seqlens_cpu, in.input_ids.size(0), in.max_seqlen);
    spec.boundaries_validated = true;
  }
  return spec;
}

at::Tensor CausalLM::hidden_states(const PackedInput& in) const {
  const at::Tensor& embed = weight("model.embed_tokens.weight");
  check_input(in, embed.device());
  const attention::VarlenSpec spec = attention_spec(in);
  const RotaryTables rope = rotary_tables(inv_freq_, in.position_ids, embed.scalar_type());

  if (before_stage_) before_stage_(-1);
  at::Tensor x = at::embedding(embed, in.input_ids);  // [T, hidden]
  if (config_.embedding_multiplier != 1.0) x = x * config_.embedding_multiplier;
  for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
    if (before_stage_) before_stage_(layer);
    if (layer_runner_) {
      auto tape = std::make_shared<LayerTape>();
      x = layer_runner_(layer, x, [this, layer, rope, spec, tape](const at::Tensor& h) {
        return decoder_layer(layer, h, rope, spec, tape.get());
      });
    } else {
      x = decoder_layer(layer, x, rope, spec, nullptr);
    }
  }
  if (before_stage_) before_stage_(config_.num_hidden_layers);
  if (fused_ops_) return fused_rms_norm(x, weight("model.norm.weight"), config_.rms_norm_eps, FusedPath::kCuda);
  return rms_norm(x, weight("model.norm.weight"), config_.rms_norm_eps);
}

at::Device CausalLM::parameters_device() const { return weight("model.embed_tokens.weight").device(); }

CausalLM::LayerTape::Pass CausalLM::LayerTape::next() {
  if (!at::GradMode::is_enabled()) {
    recorded = true;
    return Pass::kRecord;
  }
  return recorded ? Pass::kReplay : Pass::kPlain;
}

at::Tensor CausalLM::decoder_layer(int64_t layer, const at::Tensor& x, const RotaryTables& rope,
                                   const attention::VarlenSpec& spec, LayerTape* tape) const {
  const LayerWeights& w = layers_[static_cast<size_t>(layer)];
  const double eps = config_.rms_norm_eps;
  const LayerTape::Pass pass = tape ? tape->next() : LayerTape::Pass::kPlain;
  if (pass == LayerTape::Pass::kReplay && !tape->attention_residual.defined())
    throw std::logic_error("CausalLM::decoder_layer: a replay without its first run's record");
  auto residual_add = [&](const at::Tensor& residual, const at::Tensor& update) {
    return config_.residual_multiplier != 1.0 ? residual + update * config_.residual_multiplier
                                              : residual + update;
  };
  // Captures by value: a recomputing runner calls it again during the backward.
  // A layer's replay recomputes its MLP as part of it (the runner would pass it through).
  auto run_mlp = [this, layer, &w, pass](const at::Tensor& normed) {
    if (!mlp_runner_ || pass == LayerTape::Pass::kReplay) return mlp(w, normed, pass);
    const LayerWeights* lw = &w;  // layers_ lives as long as the model
    auto mlp_tape = std::make_shared<LayerTape>();
    return mlp_runner_(layer, normed,
                       [this, lw, mlp_tape](const at::Tensor& h) { return mlp(*lw, h, mlp_tape->next()); });
  };
  const at::Tensor attended = self_attention(
      w, fused_ops_ ? fused_rms_norm(x, *w.input_norm, eps, FusedPath::kCuda) : rms_norm(x, *w.input_norm, eps),
      rope, spec, tape, pass);
  if (pass == LayerTape::Pass::kReplay) {
    // attended is o's replay (no product): the residual comes from the first run.
    const at::Tensor h = replayed_residual_add(x, attended, tape->attention_residual, config_.residual_multiplier);
    tape->attention_residual.reset();
    const at::Tensor normed =
        fused_ops_ ? fused_rms_norm(h, *w.post_norm, eps, FusedPath::kCuda) : rms_norm(h, *w.post_norm, eps);
    return residual_add(h, run_mlp(normed));
  }
  if (fused_ops_) {
    // h = x + attended and its RMSNorm in one pass (h is saved for the backward: not modified).
    const AddRmsNormOutput post =
        fused_add_rms_norm(x, attended, *w.post_norm, eps, config_.residual_multiplier, FusedPath::kCuda);
    if (pass == LayerTape::Pass::kRecord) tape->attention_residual = post.sum;
    return residual_add(post.sum, run_mlp(post.normed));
  }
  const at::Tensor h = residual_add(x, attended);
  if (pass == LayerTape::Pass::kRecord) tape->attention_residual = h;
  return residual_add(h, run_mlp(rms_norm(h, *w.post_norm, eps)));
}

namespace {
at::Tensor or_none(const at::Tensor* t) { return t ? *t : at::Tensor(); }
}  // namespace

at::Tensor CausalLM::self_attention(const LayerWeights& w, const at::Tensor& x, const RotaryTables& rope,
                                    const attention::VarlenSpec& spec, LayerTape* tape,
                                    LayerTape::Pass pass) const {
  const int64_t T = x.size(0), D = config_.head_dim;
  const int64_t Hq = config_.num_attention_heads, Hkv = config_.num_key_value_heads;
  LayerSinks* s = w.sinks;
  auto project = [&](const at::Tensor* weight, const at::Tensor* bias, GradSink* sink, int64_t heads) {
    return sink_linear(x, *weight, or_none(bias), sink).view({T, heads, D});
  };
  at::Tensor q, k;
  if (fused_ops_) {
    RotaryOutput qk = fused_rotary(project(w.q, w.q_bias, s ? &s->q : nullptr, Hq),
                                   project(w.k, w.k_bias, s ? &s->k : nullptr, Hkv), rope, FusedPath::kCuda);
    q = std::move(qk.q);
    k = std::move(qk.k);
  } else {
    q = apply_rotary(project(w.q, w.q_bias, s ? &s->q : nullptr, Hq), rope);
    k = apply_rotary(project(w.k, w.k_bias, s ? &s->k : nullptr, Hkv), rope);
  }
  const at::Tensor v = project(w.v, w.v_bias, s ? &s->v : nullptr, Hkv);
  at::Tensor out;  // [T, Hq, D]
  if (pass == LayerTape::Pass::kRecord) {
    out = attention::varlen_attention_recorded(q, k, v, spec, backend_, tape->attention);
  } else if (pass == LayerTape::Pass::kReplay && tape->attention.replayable()) {
    out = attention::varlen_attention_replayed(q, k, v, spec, backend_, tape->attention);
    tape->attention = {};  // the replay's autograd node holds them now, until its backward
  } else {
    out = attention::varlen_attention(q, k, v, spec, backend_);
  }
  GradSink* o_sink = s ? &s->o : nullptr;
  const at::Tensor heads = out.reshape({T, Hq * D});
  if (pass == LayerTape::Pass::kReplay) return replayed_sink_linear(heads, *w.o, or_none(w.o_bias), o_sink);
  return sink_linear(heads, *w.o, or_none(w.o_bias), o_sink);
}

// SwiGLU: down(silu(gate(x)) * up(x)). A replay skips down's product (its
// backward reads only act and the weight).
at::Tensor CausalLM::mlp(const LayerWeights& w, const at::Tensor& x, LayerTape::Pass pass) const {
  LayerSinks* s = w.sinks;
  const at::Tensor gate = sink_linear(x, *w.gate, or_none(w.gate_bias), s ? &s->gate : nullptr);
  const at::Tensor up = sink_linear(x, *w.up, or_none(w.up_bias), s ? &s->up : nullptr);
  const at::Tensor act = fused_ops_ ? fused_swiglu(gate, up, FusedPath::kCuda) : at::silu(gate) * up;
  GradSink* down_sink = s ? &s->down : nullptr;
  if (pass == LayerTape::Pass::kReplay) return replayed_sink_linear(act, *w.down, or_none(w.down_bias), down_sink);
  return sink_linear(act, *w.down, or_none(w.down_bias), down_sink);
}

void CausalLM::enable_grad_sinks() {
  sinks_.assign(layers_.size(), LayerSinks{});
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerWeights& w = layers_[l];
    LayerSinks& s = sinks_[l];
    const std::pair<GradSink*, const at::Tensor*> pairs[] = {
        {&s.q, w.q}, {&s.k, w.k}, {&s.v, w.v}, {&s.o, w.o}, {&s.gate, w.gate}, {&s.up, w.up}, {&s.down, w.down}};
    for (const auto& [sink, param] : pairs) {
      if (!param->grad().defined() || param->grad().sizes() != param->sizes() || !param->grad().is_contiguous())
        throw std::logic_error("CausalLM::enable_grad_sinks: a projection weight has no contiguous .grad view");
      *sink = GradSink{param, param->grad(), false};
    }
    w.sinks = &s;
  }
}

void CausalLM::begin_grad_sinks() {
  for (LayerSinks& s : sinks_)
    for (GradSink* g : {&s.q, &s.k, &s.v, &s.o, &s.gate, &s.up, &s.down}) g->written = false;
}

void CausalLM::finish_grad_sinks() {
  c10::NoGradGuard no_grad;
  for (LayerSinks& s : sinks_)
    for (GradSink* g : {&s.q, &s.k, &s.v, &s.o, &s.gate, &s.up, &s.down})
      if (!g->written) {
        g->grad.zero_();  // no backward reached it this step: its gradient is zero, not last step's
        g->written = true;
      }
}

std::vector<const at::Tensor*> CausalLM::grad_sink_params() const {
  std::vector<const at::Tensor*> out;
  for (const LayerSinks& s : sinks_)
    for (const GradSink* g : {&s.q, &s.k, &s.v, &s.o, &s.gate, &s.up, &s.down}) out.push_back(g->param);
  return out;
}

const at::Tensor& CausalLM::head_weight() const {
  return weight(config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
}

at::Tensor CausalLM::logits(const PackedInput& input) const {
  return lm_head_logits(hidden_states(input), head_weight(), config_.logits_scaling);  // [T, vocab]
}

// Position t predicts labels[t+1]; the last position predicts nothing. The
// cross-entropy is computed in fp32 and summed; the count stays on the device.
// The fused path never holds the [T, vocab] logits (models/linear_cross_entropy.h);
// the reference path is the materialised one it replaced.
LossOutput CausalLM::loss(const PackedInput& input, const at::Tensor& labels, const at::Tensor& labels_cpu) const {
  if (!labels.defined() || labels.dim() != 1 || labels.scalar_type() != at::kLong ||
      labels.sizes() != input.input_ids.sizes() || labels.device() != input.input_ids.device()) {
    throw std::invalid_argument("CausalLM::loss: labels must be int64 [T] like input_ids, on its device");
  }
  if (labels_cpu.defined() && (!labels_cpu.is_cpu() || labels_cpu.scalar_type() != at::kLong ||
                               labels_cpu.sizes() != labels.sizes())) {
    throw std::invalid_argument("CausalLM::loss: labels_cpu must be an int64 CPU copy of labels");
  }
  auto shift = [](const at::Tensor& l) {
    return at::cat({l.narrow(0, 1, l.size(0) - 1), at::full({1}, kIgnoreIndex, l.options())});
  };
  const at::Tensor targets = shift(labels);
  LossOutput out;
  out.num_supervised = (targets != kIgnoreIndex).sum();
  if (!loss_options_.fused) {
    out.loss_sum = reference_linear_cross_entropy(hidden_states(input), head_weight(), targets,
                                                  config_.logits_scaling);  // also checks the input
    return out;
  }
  // The host copy of the targets first: a copy from the device here waits only
  // for what was queued before this forward pass.
  const at::Tensor targets_cpu = labels_cpu.defined() ? shift(labels_cpu)
                                 : targets.is_cpu()   ? targets
                                                      : targets.to(at::kCPU);
  out.loss_sum = linear_cross_entropy(hidden_states(input), head_weight(), targets, config_.logits_scaling,
                                      loss_options_.chunk_tokens, targets_cpu);  // also checks the input
  return out;
}

}  // namespace fptrain::models
