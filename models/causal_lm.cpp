// The decoder, top-down. Every step mirrors Hugging Face's LlamaForCausalLM
// (Mistral adds a sliding window, Granite four multipliers, Qwen2 q/k/v biases
// and windows by layer, Qwen3 an RMSNorm of each q and k head, Phi-3 fused
// projections and LongRoPE), in the same operation order and precision, so
// logits and gradients agree to rounding:
//
//   x = embed(ids) * embedding_multiplier
//   per layer:  x = x + attn(rms_norm(x)) * residual_multiplier
//               x = x + mlp(rms_norm(x))  * residual_multiplier
//   logits = lm_head(rms_norm(x)) / logits_scaling
//
// Gemma 2 (GemmaOps: its norm and GELU-tanh gating) scales the embeddings by
// sqrt(hidden) in the model dtype, wraps both blocks in norms and soft-caps
// the attention scores and the logits:
//
//   per layer:  x = x + norm(attn(norm(x)));  x = x + norm(mlp(norm(x)))
//   logits = cap * tanh(lm_head(norm(x)) / cap)
#include "models/causal_lm.h"

#include "models/gemma_ops.h"
#include "models/parameter_layout.h"

#include <cmath>
#include <stdexcept>
#include <vector>

namespace fptrain::models {
namespace {

// The parameters must be exactly the ones the config implies, one dtype, one device.
void check_parameters(const ModelConfig& config, const TensorMap& params) {
  const auto expected = expected_parameter_shapes(config);
  std::vector<std::string> problems;
  for (const auto& [name, shape] : expected) {
    auto it = params.find(name);
    if (it == params.end() || !it->second.defined()) {
      problems.push_back("missing parameter '" + name + "'");
    } else if (it->second.sizes() != at::IntArrayRef(shape)) {
      problems.push_back("parameter '" + name + "' has shape " + c10::str(at::IntArrayRef(it->second.sizes())) +
                         " but the config implies " + c10::str(at::IntArrayRef(shape)));
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
  inv_freq_ = rope_inv_freq(config_.rope, config_.head_dim).to(parameters_device());
  ops_ = family_ops(make_decoder_ops(parameters_device(), /*fused=*/true, backend_));
  auto optional = [this](const std::string& name, bool present) { return present ? &weight(name) : nullptr; };
  auto projection = [&](const std::string& prefix, bool bias, ProjectionRole role) {
    // o and down feed the residual stream directly, except through Gemma's post-norms.
    const bool residual_only = (role == ProjectionRole::kO || role == ProjectionRole::kDown) && !config_.gemma;
    projections_.push_back(Projection{&weight(prefix + ".weight"), optional(prefix + ".bias", bias),
                                      static_cast<int64_t>(projections_.size()), role, residual_only, prefix});
    return projections_.back();
  };
  using R = ProjectionRole;
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.", m = p + "mlp.";
    const bool qkv = config_.qkv_bias, ob = config_.attention_bias, mb = config_.mlp_bias;
    LayerWeights w{&weight(p + "input_layernorm.weight"), &weight(p + "post_attention_layernorm.weight")};
    if (config_.fused_projections) {
      w.qkv = projection(a + "qkv_proj", false, R::kQkv);
      w.o = projection(a + "o_proj", false, R::kO);
      w.gate_up = projection(m + "gate_up_proj", false, R::kGateUp);
      w.down = projection(m + "down_proj", false, R::kDown);
    } else {
      w.q = projection(a + "q_proj", qkv, R::kQ);
      w.k = projection(a + "k_proj", qkv, R::kK);
      w.v = projection(a + "v_proj", qkv, R::kV);
      w.o = projection(a + "o_proj", ob, R::kO);
      w.gate = projection(m + "gate_proj", mb, R::kGate);
      w.up = projection(m + "up_proj", mb, R::kUp);
      w.down = projection(m + "down_proj", mb, R::kDown);
    }
    w.q_norm = optional(a + "q_norm.weight", config_.qk_norm);
    w.k_norm = optional(a + "k_norm.weight", config_.qk_norm);
    w.pre_mlp_norm = optional(p + "pre_feedforward_layernorm.weight", config_.gemma);
    w.post_mlp_norm = optional(p + "post_feedforward_layernorm.weight", config_.gemma);
    layers_.push_back(w);
  }
  if (config_.rope_local) inv_freq_local_ = rope_inv_freq(*config_.rope_local, config_.head_dim).to(parameters_device());
  if (config_.rope.type == RopeType::kLongRope)
    inv_freq_long_ = rope_inv_freq(config_.rope, config_.head_dim, /*long_context=*/true).to(parameters_device());
}

void CausalLM::set_ops(std::shared_ptr<const DecoderOps> ops) {
  if (!ops) throw std::invalid_argument("CausalLM::set_ops: no op set");
  ops_ = family_ops(std::move(ops));
}

void CausalLM::set_decorated_ops(std::shared_ptr<const DecoderOps> ops) {
  if (!ops) throw std::invalid_argument("CausalLM::set_decorated_ops: no op set");
  ops_ = std::move(ops);
}

// The family's own arithmetic over the mechanism's set (Gemma's norms and gating).
std::shared_ptr<const DecoderOps> CausalLM::family_ops(std::shared_ptr<const DecoderOps> ops) const {
  if (config_.gemma) return std::make_shared<GemmaOps>(std::move(ops));
  return ops;
}

std::vector<Projection> CausalLM::projections() const { return projections_; }

const at::Tensor& CausalLM::weight(const std::string& name) const {
  auto it = params_.find(name);
  if (it == params_.end()) throw std::invalid_argument("CausalLM: no parameter '" + name + "'");
  return it->second;
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
  spec.window = 0;  // per layer: decoder_layer sets the layer's window
  spec.softmax_scale = config_.softmax_scale();
  spec.softcap = config_.attn_logit_softcap;
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
  // longrope switches to its long factors when a position reaches past the
  // original context (transformers: max(position_ids) + 1; positions restart
  // per example, so that is the longest example, max_seqlen, known on the host).
  const bool long_context = inv_freq_long_.defined() && in.max_seqlen > config_.rope.original_max_position_embeddings;
  const RotaryTables rope = rotary_tables(long_context ? inv_freq_long_ : inv_freq_, in.position_ids,
                                          embed.scalar_type(), config_.rope.attention_factor);
  // Gemma 3's sliding layers rotate with their own base.
  const RotaryTables local_rope = inv_freq_local_.defined()
                                      ? rotary_tables(inv_freq_local_, in.position_ids, embed.scalar_type(),
                                                      config_.rope_local->attention_factor)
                                      : rope;
  const DecoderOps& ops = *ops_;

  if (before_stage_) before_stage_(-1);
  // padding_idx as transformers' nn.Embedding(vocab, hidden, pad_token_id): the
  // pad token's row gets no gradient where the text holds that token.
  at::Tensor x = ops.embed(embed, in.input_ids, config_.pad_token_id.value_or(-1));  // [T, hidden]
  if (config_.embedding_multiplier != 1.0) x = x * config_.embedding_multiplier;
  // Gemma: sqrt(hidden) as an fp32 scalar, rounded to the model dtype, then the product.
  if (config_.gemma)
    x = x * at::scalar_tensor(std::sqrt(static_cast<double>(config_.hidden_size)), x.options().dtype(at::kFloat))
                .to(x.scalar_type());
  for (int64_t layer = 0; layer < config_.num_hidden_layers; ++layer) {
    if (before_stage_) before_stage_(layer);
    attention::VarlenSpec layer_spec = spec;
    layer_spec.window = config_.window(layer);
    const RotaryTables& layer_rope = config_.sliding_layers[static_cast<size_t>(layer)] ? local_rope : rope;
    // Captures by value: a recomputing runner calls it again during the backward.
    const BlockFn run = [this, layer, layer_rope, layer_spec](const at::Tensor& h, const DecoderOps& o) {
      return config_.gemma ? sandwich_decoder_layer(layer, h, layer_rope, layer_spec, o)
                           : decoder_layer(layer, h, layer_rope, layer_spec, o);
    };
    x = layer_runner_ ? layer_runner_(layer, x, ops, run) : run(x, ops);
  }
  if (before_stage_) before_stage_(config_.num_hidden_layers);
  return ops.norm(x, weight("model.norm.weight"), config_.rms_norm_eps);
}

at::Device CausalLM::parameters_device() const { return weight("model.embed_tokens.weight").device(); }

at::Tensor CausalLM::decoder_layer(int64_t layer, const at::Tensor& x, const RotaryTables& rope,
                                   const attention::VarlenSpec& spec, const DecoderOps& ops) const {
  const LayerWeights& w = layers_[static_cast<size_t>(layer)];
  const double eps = config_.rms_norm_eps, scale = config_.residual_multiplier;
  const at::Tensor attended = self_attention(w, ops.norm(x, *w.input_norm, eps), rope, spec, ops);
  const AddRmsNormOutput post = ops.add_norm(x, attended, *w.post_norm, eps, scale);
  return residual_add(post.sum, mlp_block(layer, post.normed, ops), scale);
}

// Gemma: each block's output is normed before its residual add.
at::Tensor CausalLM::sandwich_decoder_layer(int64_t layer, const at::Tensor& x, const RotaryTables& rope,
                                            const attention::VarlenSpec& spec, const DecoderOps& ops) const {
  const LayerWeights& w = layers_[static_cast<size_t>(layer)];
  const double eps = config_.rms_norm_eps;
  const at::Tensor attended = self_attention(w, ops.norm(x, *w.input_norm, eps), rope, spec, ops);
  const AddRmsNormOutput pre_mlp = ops.add_norm(x, ops.norm(attended, *w.post_norm, eps), *w.pre_mlp_norm, eps, 1.0);
  return residual_add(pre_mlp.sum, ops.norm(mlp_block(layer, pre_mlp.normed, ops), *w.post_mlp_norm, eps), 1.0);
}

at::Tensor CausalLM::self_attention(const LayerWeights& w, const at::Tensor& x, const RotaryTables& rope,
                                    const attention::VarlenSpec& spec, const DecoderOps& ops) const {
  const int64_t T = x.size(0), D = config_.head_dim;
  const int64_t Hq = config_.num_attention_heads, Hkv = config_.num_key_value_heads;
  at::Tensor q, k, v;
  if (w.fused()) {  // Phi-3: one GEMM, then q, k and v side by side in its output
    const at::Tensor qkv = ops.linear(x, w.qkv);
    q = qkv.narrow(1, 0, Hq * D).view({T, Hq, D});
    k = qkv.narrow(1, Hq * D, Hkv * D).view({T, Hkv, D});
    v = qkv.narrow(1, (Hq + Hkv) * D, Hkv * D).contiguous().view({T, Hkv, D});
  } else {
    const std::vector<at::Tensor> qkv = ops.linear_group(x, {&w.q, &w.k, &w.v});
    q = qkv[0].view({T, Hq, D});
    k = qkv[1].view({T, Hkv, D});
    v = qkv[2].view({T, Hkv, D});
  }
  if (w.q_norm) {  // Qwen3: each head's RMSNorm before RoPE
    q = ops.norm(q, *w.q_norm, config_.rms_norm_eps);
    k = ops.norm(k, *w.k_norm, config_.rms_norm_eps);
  }
  const RotaryOutput qk = ops.rotary(q, k, rope);
  const at::Tensor out = ops.attention(qk.q, qk.k, v, spec);  // [T, Hq, D]
  return ops.linear(out.reshape({T, Hq * D}), w.o);
}

at::Tensor CausalLM::mlp_block(int64_t layer, const at::Tensor& x, const DecoderOps& ops) const {
  const BlockFn run = [this, layer](const at::Tensor& h, const DecoderOps& o) {
    return mlp(layers_[static_cast<size_t>(layer)], h, o);
  };
  return mlp_runner_ ? mlp_runner_(layer, x, ops, run) : run(x, ops);
}

// SwiGLU: down(silu(gate(x)) * up(x)).
at::Tensor CausalLM::mlp(const LayerWeights& w, const at::Tensor& x, const DecoderOps& ops) const {
  if (w.fused()) return ops.linear(ops.gated_activation_packed(ops.linear(x, w.gate_up)), w.down);  // Phi-3
  const std::vector<at::Tensor> gate_up = ops.linear_group(x, {&w.gate, &w.up});
  return ops.linear(ops.gated_activation(gate_up[0], gate_up[1]), w.down);
}

const at::Tensor& CausalLM::embedding_weight() const { return weight("model.embed_tokens.weight"); }

const at::Tensor& CausalLM::head_weight() const {
  return weight(config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
}

at::Tensor CausalLM::logits(const PackedInput& input) const {
  return lm_head_logits(hidden_states(input), head_weight(), config_.logits_scaling,
                        config_.final_logit_softcap);  // [T, vocab]
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
    // A sink's slot is left for its writer to overwrite: autograd would add into stale values.
    if (loss_options_.head_grad_sink != nullptr)
      throw std::logic_error("CausalLM::loss: a head gradient sink needs the fused loss");
    out.loss_sum = reference_linear_cross_entropy(hidden_states(input), head_weight(), targets,
                                                  config_.logits_scaling, config_.final_logit_softcap);
    return out;
  }
  // The host copy of the targets first: a copy from the device here waits only
  // for what was queued before this forward pass.
  const at::Tensor targets_cpu = labels_cpu.defined() ? shift(labels_cpu)
                                 : targets.is_cpu()   ? targets
                                                      : targets.to(at::kCPU);
  out.loss_sum = linear_cross_entropy(hidden_states(input), head_weight(), targets, config_.logits_scaling,
                                      loss_options_.chunk_tokens, targets_cpu,
                                      config_.final_logit_softcap,
                                      loss_options_.head_grad_sink);  // also checks the input
  return out;
}

}  // namespace fptrain::models
