#include "trainer/model_setup.h"

#include "attention/fptrain_backend.h"
#include "models/checkpoint.h"
#include "trainer/activation_checkpointing.h"

#include <stdexcept>

namespace fptrain::trainer {

at::ScalarType resolve_dtype(const std::string& name, const at::Device& device) {
  if (name == "auto") return device.is_cuda() ? at::kBFloat16 : at::kFloat;
  return models::dtype_from_name(name);
}

attention::Backend resolve_backend(const std::string& name, const at::Device& device, int64_t head_dim,
                                   at::ScalarType dtype) {
  const bool half = dtype == at::kBFloat16 || dtype == at::kHalf;
  if (name == "auto") {
    if (!device.is_cuda()) return attention::Backend::Reference;
    if (attention::fptrain_kernels_support(head_dim, dtype)) return attention::Backend::Fptrain;
    return half ? attention::Backend::TorchFA2 : attention::Backend::Reference;
  }
  const attention::Backend b = attention::parse_backend(name);
  if (b == attention::Backend::Reference) return b;
  const std::string what = "model.attention: '" + name + "' ";
  if (!device.is_cuda())
    throw std::invalid_argument(what + "needs a CUDA device; the run is on " + device.str() + " (use reference or auto)");
  if (!half)
    throw std::invalid_argument(what + "needs bfloat16 or float16 weights; model.dtype is " + models::dtype_name(dtype));
  if (b == attention::Backend::Fptrain && !attention::fptrain_kernels_support(head_dim, dtype))
    throw std::invalid_argument(what + "kernels do not run here (they need an sm_90 GPU and head_dim 64 or 128; "
                                "this model has head_dim " + std::to_string(head_dim) + "); use torch-fa2 or auto");
  return b;
}

LoadedModel load_model(const std::filesystem::path& dir, at::ScalarType dtype, const at::Device& device,
                       attention::Backend backend, bool trainable) {
  if (!std::filesystem::is_regular_file(dir / "config.json"))
    throw std::invalid_argument(dir.string() + ": no config.json (model.path must be a Hugging Face model folder)");
  LoadedModel m;
  m.config = models::load_model_config(dir / "config.json");
  m.dtype = dtype;
  models::TensorMap params = models::load_pretrained_weights(dir, m.config, dtype, device);
  if (trainable)
    for (auto& [name, t] : params) t.requires_grad_(true);
  m.model = std::make_unique<models::CausalLM>(m.config, std::move(params), backend);
  return m;
}

std::shared_ptr<const data::Tokenizer> load_checked_tokenizer(const std::filesystem::path& dir,
                                                              const models::ModelConfig& config) {
  std::shared_ptr<const data::Tokenizer> tok = data::load_tokenizer(dir);
  if (tok->vocab_size() > config.vocab_size)
    throw std::invalid_argument(dir.string() + ": the tokenizer has " + std::to_string(tok->vocab_size()) +
                                " ids but the model's vocab_size is " + std::to_string(config.vocab_size) +
                                " (tokenizer and model do not belong together)");
  return tok;
}

data::DataOptions make_data_options(const TrainConfig& c, bool eval) {
  data::DataOptions o;
  for (const auto& f : eval ? c.data.eval : c.data.train) {
    data::DataFile df;
    df.path = f.path;
    df.weight = f.weight;
    df.format = data::parse_example_format(f.format, "data.train.format");
    o.files.push_back(df);
  }
  o.max_length = c.data.max_length;
  o.overlong = data::parse_overlong_policy(c.data.overlong, "data.overlong");
  o.bad_lines = data::parse_bad_line_policy(c.data.bad_lines, "data.bad_lines");
  o.max_zero_supervised_fraction = c.data.max_zero_supervised_fraction;
  o.chat_template = data::parse_chat_template(c.data.chat_template, "data.chat_template");
  o.tokenizer_dir = c.model.path;
  o.loss_mask = data::parse_chat_loss_mask(c.data.loss_mask, "data.loss_mask");
  if (c.data.pad_id) o.pad_id = static_cast<int32_t>(*c.data.pad_id);
  o.batching = data::parse_batch_mode(c.batching.mode, "batching.mode");
  o.examples_per_micro_batch = c.batching.examples_per_micro_batch;
  if (c.batching.max_tokens > 0) o.max_tokens = c.batching.max_tokens;
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

void set_activation_checkpointing(models::CausalLM& model, int64_t every_k) {
  if (every_k <= 0) {
    model.set_layer_runner(nullptr);
    return;
  }
  // Each checkpointed layer needs its parameters as autograd inputs.
  std::vector<std::vector<at::Tensor>> layer_params(static_cast<size_t>(model.config().num_hidden_layers));
  for (const auto& [name, t] : model.parameters()) {
    const std::string prefix = "model.layers.";
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t layer = std::stoul(name.substr(prefix.size()));
    if (layer < layer_params.size()) layer_params[layer].push_back(t);
  }
  model.set_layer_runner([layer_params, every_k](int64_t layer, const at::Tensor& hidden,
                                                 const models::CausalLM::LayerFn& run) {
    if (!is_checkpointed_layer(layer, every_k) || !hidden.requires_grad()) return run(hidden);
    return checkpointed_layer(hidden, run, layer_params[static_cast<size_t>(layer)]);
  });
}

}  // namespace fptrain::trainer
