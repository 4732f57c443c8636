#include "trainer/model_setup.h"

#include "attention/hopper_backend.h"
#include "models/checkpoint.h"
#include "models/lora_ops.h"
#include "models/peft_format.h"
#include "common/byte_units.h"
#include "models/model_config.h"
#include "models/parameter_layout.h"
#include "trainer/activation_checkpointing.h"
#include "trainer/log/log.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

namespace fptrain::trainer {

at::ScalarType resolve_dtype(ModelDtype choice, const at::Device& device) {
  switch (choice) {
    case ModelDtype::kAuto: return device.is_cuda() ? at::kBFloat16 : at::kFloat;
    case ModelDtype::kFloat32: return at::kFloat;
    case ModelDtype::kBFloat16: return at::kBFloat16;
    case ModelDtype::kFloat16: return at::kHalf;
  }
  throw std::logic_error("resolve_dtype: unknown ModelDtype");
}

attention::Backend resolve_backend(AttentionChoice choice, const at::Device& device, const models::ModelConfig& model,
                                   at::ScalarType dtype) {
  const int64_t head_dim = model.head_dim;
  const bool half = dtype == at::kBFloat16 || dtype == at::kHalf;
  if (choice == AttentionChoice::kAuto) {
    if (!device.is_cuda()) return attention::Backend::kReference;
    if (attention::hopper_kernels_support(head_dim, dtype)) return attention::Backend::kHopper;
    // torch-fa2 has no soft-capped scores (Gemma 2): those go to the reference.
    return half && model.attn_logit_softcap == 0 ? attention::Backend::kTorchFA2 : attention::Backend::kReference;
  }
  if (choice == AttentionChoice::kReference) return attention::Backend::kReference;
  const std::string what = std::string("model.attention: '") + common::enum_name(choice) + "' ";
  if (model.attn_logit_softcap > 0 && choice == AttentionChoice::kTorchFA2)
    throw std::invalid_argument(what + "has no attention logit soft-capping, which this model uses "
                                "(attn_logit_softcapping); use hopper, reference or auto");
  if (!device.is_cuda())
    throw std::invalid_argument(what + "needs a CUDA device; the run is on " + device.str() + " (use reference or auto)");
  if (!half)
    throw std::invalid_argument(what + "needs bfloat16 or float16 weights; model.dtype is " + models::dtype_name(dtype));
  if (choice == AttentionChoice::kHopper && !attention::hopper_kernels_support(head_dim, dtype))
    throw std::invalid_argument(what + "kernels do not run here (they need an sm_90 GPU and head_dim 64, 128 or 256; "
                                "this model has head_dim " + std::to_string(head_dim) + "); use torch-fa2 or auto");
  return choice == AttentionChoice::kHopper ? attention::Backend::kHopper : attention::Backend::kTorchFA2;
}

namespace {

// The adapters of a run: a checkpoint's, adapter.from's, or PEFT's initialisation.
std::shared_ptr<models::LoraAdapter> open_adapter(const TrainConfig& config, const LoadedModel& m,
                                                  const at::Device& device,
                                                  const std::optional<std::filesystem::path>& adapter_dir) {
  const std::filesystem::path from = adapter_dir ? *adapter_dir : std::filesystem::path(config.adapter.from);
  if (from.empty())
    return models::init_lora_adapter(config.adapter.lora, m.model->projections(), m.dtype, device, config.training.seed);
  std::shared_ptr<models::LoraAdapter> a = models::read_peft_adapter(from, m.model->projections(), m.dtype, device);
  if (!adapter_dir) {
    const models::LoraSettings& s = a->settings();
    log::info("adapter.from " + from.string() + ": r " + std::to_string(s.r) + ", alpha " + std::to_string(s.alpha) +
              (s.rslora ? " (rslora)" : "") + ", " + std::to_string(a->modules().size()) +
              " projections; its adapter_config.json's settings apply");
  }
  return a;
}

}  // namespace

NamedTensors LoadedModel::trained() const {
  NamedTensors out;
  if (adapter) {
    for (const auto& n : adapter->names()) out.emplace_back(n, adapter->tensors().at(n));
  } else {
    for (const auto& n : models::parameter_names_in_model_order(config)) out.emplace_back(n, model->parameters().at(n));
  }
  return out;
}

void set_model_ops(LoadedModel& m, const TrainConfig& config, const at::Device& device,
                   std::shared_ptr<models::GradSinks> sinks, bool dropout_active) {
  std::shared_ptr<const models::DecoderOps> ops =
      models::make_decoder_ops(device, config.model.fused_ops, m.backend, std::move(sinks));
  if (m.nf4) ops = std::make_shared<models::Nf4Ops>(std::move(ops), m.nf4);
  if (m.adapter) ops = std::make_shared<models::LoraOps>(std::move(ops), m.adapter, dropout_active);
  m.model->set_ops(std::move(ops));
}

LoadedModel open_model(const TrainConfig& config, const at::Device& device, const std::filesystem::path& weights_dir,
                       bool trainable, const std::optional<std::filesystem::path>& adapter_dir) {
  if (!std::filesystem::is_regular_file(weights_dir / "config.json"))
    throw std::invalid_argument(weights_dir.string() +
                                ": no config.json (model.path must be a Hugging Face model folder)");
  LoadedModel m;
  m.config = models::load_model_config(weights_dir / "config.json");
  m.dtype = resolve_dtype(config.model.dtype, device);
  m.backend = resolve_backend(config.model.attention, device, m.config, m.dtype);
  const bool adapted = config.adapter.type != AdapterType::kNone;
  // QLoRA: each projection is quantised as it loads (or read as a 4-bit checkpoint stores it);
  // the model's map keeps its shape.
  if (m.config.bnb_nf4 && trainable && config.adapter.type != AdapterType::kQlora)
    throw std::invalid_argument(weights_dir.string() + ": a 4-bit checkpoint (bitsandbytes NF4): its projections "
                                "stay 4-bit and frozen, so only adapters train on it: set adapter.type: qlora");
  const bool quantized = config.adapter.type == AdapterType::kQlora || m.config.bnb_nf4;
  models::Nf4Loader nf4;
  models::LoadOptions load;
  if (quantized) {
    load.keep = [&nf4](const std::string& name, const at::Tensor& t) { return nf4.keep(name, t); };
    load.keep_quantized = [&nf4](const std::string& name, models::Nf4Tensor q) {
      return nf4.keep_quantized(name, std::move(q));
    };
  }
  models::TensorMap params = models::load_pretrained_weights(weights_dir, m.config, m.dtype, device, load);
  if (trainable && !adapted)
    for (auto& [name, t] : params) t.requires_grad_(true);
  m.model = std::make_unique<models::CausalLM>(m.config, std::move(params), m.backend);
  if (quantized) {
    const int64_t before = static_cast<int64_t>(c10::elementSize(m.dtype)) * m.config.num_parameters();
    m.nf4 = models::Nf4Weights::from(nf4.take(), m.model->projections());
    log::info("qlora: the base's " + std::to_string(m.model->projections().size()) + " projections in NF4 (" +
              common::gib_text(m.nf4->nbytes()) + (m.config.bnb_nf4 ? ", read as the checkpoint stores them" : "") +
              "; the whole model would be " + common::gib_text(before) + " in " + models::dtype_name(m.dtype) +
              "), dequantised for each product");
  }
  if (adapted) {
    m.adapter = open_adapter(config, m, device, adapter_dir);
    if (trainable)
      for (const auto& [name, t] : m.adapter->tensors()) t.requires_grad_(true);
  }
  set_model_ops(m, config, device, nullptr, /*dropout_active=*/trainable);
  if (m.config.gemma)  // where its own norm, gating and soft-capped scores run
    log::info(std::string("Gemma: its RMSNorm ((1 + w) in fp32) and GELU-tanh gating run ") +
              (m.model->ops()->fused_kernels() ? "in the fused kernels' Gemma variants"
                                               : "in ATen (the fused kernels are off or not for this device)") +
              (m.config.attn_logit_softcap > 0 && m.backend == attention::Backend::kReference
                   ? "; soft-capped attention on the reference backend (our kernels take head_dim 64 and 128, "
                     "this model " + std::to_string(m.config.head_dim) + ")"
                   : ""));
  const bool random_blocks = trainable && m.adapter && m.adapter->settings().dropout > 0;
  m.checkpointing = set_activation_checkpointing(*m.model, config.model.activation_checkpointing,
                                                 trainable ? m.trained() : NamedTensors{}, random_blocks);
  m.checkpointing->all_plain = config.model.recompute == Recompute::kPlain;
  return m;
}

std::shared_ptr<const tokenizer::Tokenizer> load_checked_tokenizer(const std::filesystem::path& dir,
                                                              const models::ModelConfig& config) {
  std::shared_ptr<const tokenizer::Tokenizer> tok = tokenizer::load_tokenizer(dir);
  if (tok->vocab_size() > config.vocab_size)
    throw std::invalid_argument(dir.string() + ": the tokenizer has " + std::to_string(tok->vocab_size()) +
                                " ids but the model's vocab_size is " + std::to_string(config.vocab_size) +
                                " (tokenizer and model do not belong together)");
  return tok;
}

namespace {

// Our attention kernels' FLOP rate over the GEMMs' at FLAN-like lengths: ~280
// vs ~700 TFLOP/s on an H200 (benchmarks/attention and benchmarks/train, 2026-11).
constexpr double kAttentionRateOverGemmRate = 0.4;

}  // namespace

// The example length at which attention costs as much per token as the rest of
// the model, for balancing ranks by compute. Per token, fwd+bwd: 6 FLOPs per
// weight of the layers and the head; per example of L tokens, causal attention
// fwd+bwd as flash-attention counts it: 7 x layers x heads x head_dim x L^2,
// run at kAttentionRateOverGemmRate of the GEMMs' rate.
int64_t attention_cost_length(const models::ModelConfig& m) {
  const double d = static_cast<double>(m.hidden_size);
  const int64_t head_dim = m.head_dim > 0 ? m.head_dim : m.hidden_size / std::max<int64_t>(1, m.num_attention_heads);
  const double hd = static_cast<double>(head_dim);
  const double hq = static_cast<double>(m.num_attention_heads), hkv = static_cast<double>(m.num_key_value_heads);
  const double layers = static_cast<double>(m.num_hidden_layers);
  const double per_layer = d * (hq + 2 * hkv) * hd + hq * hd * d + 3 * d * static_cast<double>(m.intermediate_size);
  const double linear = 6 * (layers * per_layer + d * static_cast<double>(m.vocab_size));
  const double attention = 7 * layers * hq * hd / kAttentionRateOverGemmRate;
  return attention > 0 ? static_cast<int64_t>(linear / attention) : 0;
}

data::DataOptions make_data_options(const TrainConfig& c, bool eval, int rank, int world_size) {
  data::DataOptions o;
  o.rank = rank;
  o.world_size = world_size;
  o.files = eval ? c.data.eval : c.data.train;
  o.max_length = c.data.max_length;
  o.overlong = c.data.overlong;
  o.bad_lines = c.data.bad_lines;
  o.max_zero_supervised_fraction = c.data.max_zero_supervised_fraction;
  o.chat_template = c.data.chat_template;
  o.tokenizer_dir = c.model.path;
  o.loss_mask = c.data.loss_mask;
  o.pad_id = c.data.pad_id;
  o.batching = c.batching.mode;
  o.examples_per_micro_batch = c.batching.examples_per_micro_batch;
  o.balance_ranks = c.batching.balance_ranks;
  o.max_tokens = c.batching.max_tokens;
  o.row_tokens = c.batching.row_tokens > 0                       ? c.batching.row_tokens
                 : c.batching.mode == data::BatchMode::kFixed ? c.data.max_length
                                                               : 0;
  o.rows_per_micro_batch = c.batching.rows_per_micro_batch;
  o.cross_example_attention = c.batching.cross_example_attention;
  o.shuffle_window = c.data.shuffle_window;
  o.seed = c.training.seed;
  o.workers = static_cast<int>(c.data.workers);
  o.prefetch_steps = static_cast<int>(c.data.prefetch_steps);
  if (eval) {
    o.shuffle = false;
    o.epochs = 1;
    o.micro_batches_per_step = 1;
    o.bad_lines = data::BadLinePolicy::kError;
  } else {
    o.shuffle = c.data.shuffle;
    // With max_steps the stream cycles through epochs until the steps are done.
    o.epochs = c.training.epochs > 0 ? c.training.epochs : 1'000'000;
    o.micro_batches_per_step = c.batching.grad_accumulation;
  }
  return o;
}

void CheckpointSwitch::set(const Checkpointing& setting) {
  every_k = setting.mode == Checkpointing::Mode::kEveryK ? setting.every_k : 0;
  selective = setting.mode == Checkpointing::Mode::kSelective;
  recomputed = 0;
  mlps = 0;
  plain = 0;
}

bool CheckpointSwitch::whole_layer(int64_t layer) const {
  return is_checkpointed_layer(layer, every_k) || layer < recomputed;
}

// The plain layers are the first whole ones. At the start of the backward every
// layer's tape is alive, so the peak is the same whichever go plain; the first
// layers' tapes live longest (from their forward to the end of the backward), so
// making those the small ones lowers the memory held over most of the step.
bool CheckpointSwitch::plain_layer(int64_t layer) const {
  if (!whole_layer(layer)) return false;
  const int64_t k = every_k;
  const int64_t ordinal = k > 0 ? layer / k : layer;  // among the whole layers
  return all_plain || ordinal < plain;
}

bool CheckpointSwitch::mlp_only(int64_t layer) const {
  return !whole_layer(layer) && (selective || layer < recomputed + mlps);
}

void CheckpointSwitch::set_plan(int64_t recomputed_layers, int64_t mlp_layers, int64_t plain_layers) {
  every_k = 0;
  selective = false;
  recomputed = recomputed_layers;
  mlps = mlp_layers;
  plain = plain_layers;
}

std::shared_ptr<CheckpointSwitch> set_activation_checkpointing(models::CausalLM& model, const Checkpointing& setting,
                                                               const NamedTensors& trained, bool preserve_rng) {
  auto control = std::make_shared<CheckpointSwitch>();
  control->set(setting);
  // Each checkpointed block needs what trains in it as autograd inputs.
  const auto n = static_cast<size_t>(model.config().num_hidden_layers);
  std::vector<std::vector<at::Tensor>> layer_params(n), mlp_params(n);
  for (const auto& [name, t] : trained) {
    const int64_t layer = models::layer_of_name(name);
    if (layer < 0 || layer >= static_cast<int64_t>(n)) continue;
    layer_params[static_cast<size_t>(layer)].push_back(t);
    if (name.find(".mlp.") != std::string::npos) mlp_params[static_cast<size_t>(layer)].push_back(t);
  }
  // A block recomputes when anything in it trains: with a frozen base the first layer's
  // input needs no gradient, its adapters do.
  auto needs_grad = [](const at::Tensor& x, const std::vector<at::Tensor>& params) {
    return x.requires_grad() || (at::GradMode::is_enabled() && !params.empty());
  };
  model.set_layer_runner([layer_params, control, needs_grad, preserve_rng](int64_t layer, const at::Tensor& hidden,
                                                             const models::DecoderOps& ops,
                                                             const models::CausalLM::BlockFn& run) {
    const auto& params = layer_params[static_cast<size_t>(layer)];
    if (!control->whole_layer(layer) || !needs_grad(hidden, params)) return run(hidden, ops);
    const Recomputation how = control->plain_layer(layer) ? Recomputation::kPlain : Recomputation::kReplayed;
    return recomputed_block(hidden, ops, run, params, how, preserve_rng);
  });
  model.set_mlp_runner([mlp_params, control, needs_grad, preserve_rng](int64_t layer, const at::Tensor& normed,
                                                         const models::DecoderOps& ops,
                                                         const models::CausalLM::BlockFn& run) {
    // Inside a checkpointed layer the whole layer is recomputed already.
    const auto& params = mlp_params[static_cast<size_t>(layer)];
    if (!control->mlp_only(layer) || !needs_grad(normed, params)) return run(normed, ops);
    // Replayed: an MLP's tape is empty (its down product is skipped, nothing kept), so
    // plain would only add work.
    return recomputed_block(normed, ops, run, params, Recomputation::kReplayed, preserve_rng);
  });
  return control;
}

}  // namespace fptrain::trainer
