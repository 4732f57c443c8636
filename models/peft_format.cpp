#include "models/peft_format.h"

#include "common/files.h"
#include "models/safetensors.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>

namespace fptrain::models {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw std::invalid_argument(file.string() + ": " + what);
}

// A key that must be absent or hold its neutral value: a setting fptrain does not train with.
void refuse_unless(const json& j, const std::filesystem::path& file, const char* key, const std::string& why) {
  if (!j.contains(key)) return;
  const json& v = j.at(key);
  const bool neutral = v.is_null() || v == false || v == "none" || (v.is_object() && v.empty()) ||
                       (v.is_array() && v.empty());
  if (!neutral) fail(file, std::string("'") + key + "': " + v.dump() + " is not supported (" + why + ")");
}

template <typename T>
T get(const json& j, const std::filesystem::path& file, const char* key, const char* type) {
  if (!j.contains(key)) fail(file, std::string("'") + key + "' is missing");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    fail(file, std::string("'") + key + "' must be " + type + "; got " + j.at(key).dump());
  }
}

}  // namespace

bool is_peft_adapter_folder(const std::filesystem::path& dir) {
  return std::filesystem::is_regular_file(dir / kAdapterConfigFile);
}

LoraSettings read_peft_settings(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / kAdapterConfigFile;
  std::ifstream in(file);
  if (!in) fail(file, "cannot be read (an adapter folder needs adapter_config.json)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail(file, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) fail(file, "must hold a JSON object");
  const std::string type = j.value("peft_type", std::string());
  if (type != "LORA") fail(file, "'peft_type' is '" + type + "'; fptrain reads LoRA adapters (LORA)");
  refuse_unless(j, file, "use_dora", "DoRA");
  refuse_unless(j, file, "bias", "adapted biases; PEFT's default is \"none\"");
  refuse_unless(j, file, "lora_bias", "a bias on lora_B");
  refuse_unless(j, file, "rank_pattern", "per-module ranks");
  refuse_unless(j, file, "alpha_pattern", "per-module alphas");
  refuse_unless(j, file, "modules_to_save", "fully trained extra modules");
  refuse_unless(j, file, "layers_to_transform", "a subset of layers");
  refuse_unless(j, file, "fan_in_fan_out", "transposed base weights");
  refuse_unless(j, file, "target_parameters", "adapted parameters that are not linear modules");
  refuse_unless(j, file, "exclude_modules", "excluded modules");
  refuse_unless(j, file, "use_qalora", "QALoRA");
  refuse_unless(j, file, "layer_replication", "replicated layers");
  refuse_unless(j, file, "trainable_token_indices", "trained embedding rows");
  refuse_unless(j, file, "alora_invocation_tokens", "activated LoRA");
  refuse_unless(j, file, "use_bdlora", "block-diagonal LoRA");
  LoraSettings s;
  s.r = get<int64_t>(j, file, "r", "a positive integer");
  if (s.r <= 0) fail(file, "'r' must be positive; got " + std::to_string(s.r));
  s.alpha = j.contains("lora_alpha") ? get<double>(j, file, "lora_alpha", "a number") : 8.0;  // PEFT's default
  s.dropout = j.contains("lora_dropout") && !j.at("lora_dropout").is_null() ? get<double>(j, file, "lora_dropout", "a number") : 0.0;
  if (s.dropout < 0 || s.dropout >= 1) fail(file, "'lora_dropout' must be in [0, 1)");
  s.rslora = j.contains("use_rslora") && get<bool>(j, file, "use_rslora", "true or false");
  const json& t = j.contains("target_modules") ? j.at("target_modules") : json();
  if (t.is_string()) {
    s.target_regex = t.get<std::string>();
    s.target_modules.clear();
  } else if (t.is_array()) {
    s.target_modules = get<std::vector<std::string>>(j, file, "target_modules", "a list of module names or a string");
  } else {
    fail(file, "'target_modules' must be a list of module names or a regular expression; got " + t.dump());
  }
  return s;
}

std::unique_ptr<LoraAdapter> read_peft_adapter(const std::filesystem::path& dir,
                                               const std::vector<Projection>& projections, at::ScalarType dtype,
                                               const at::Device& device) {
  const LoraSettings settings = read_peft_settings(dir);
  const std::filesystem::path weights = dir / kAdapterWeightsFile;
  if (!std::filesystem::is_regular_file(weights))
    fail(weights, "missing (fptrain reads adapter weights from adapter_model.safetensors)");
  std::vector<Projection> targets;
  try {
    targets = select_lora_targets(settings, projections);
  } catch (const std::invalid_argument& e) {
    fail(dir / kAdapterConfigFile, e.what());
  }
  TensorMap tensors;
  for (auto& [name, t] : read_safetensors(weights)) {
    if (!at::isFloatingType(t.scalar_type())) fail(weights, "'" + name + "' is not a floating-point tensor");
    tensors[name] = t.to(device, dtype);
  }
  try {
    return std::make_unique<LoraAdapter>(settings, targets, std::move(tensors),
                                         static_cast<int64_t>(projections.size()));
  } catch (const std::invalid_argument& e) {
    fail(weights, e.what());
  }
}

void write_peft_adapter(const std::filesystem::path& dir, const LoraAdapter& adapter, const std::string& base_model) {
  const LoraSettings& s = adapter.settings();
  const json config = {{"peft_type", "LORA"},
                       {"task_type", "CAUSAL_LM"},
                       {"base_model_name_or_path", base_model},
                       {"r", s.r},
                       {"lora_alpha", s.alpha},
                       {"lora_dropout", s.dropout},
                       {"use_rslora", s.rslora},
                       {"target_modules", adapter.target_module_names()},
                       {"bias", "none"},
                       {"use_dora", false},
                       {"fan_in_fan_out", false},
                       {"init_lora_weights", true},
                       {"inference_mode", true},
                       {"modules_to_save", nullptr},
                       {"layers_to_transform", nullptr},
                       {"layers_pattern", nullptr},
                       {"rank_pattern", json::object()},
                       {"alpha_pattern", json::object()}};
  TensorMap tensors;
  for (const auto& [name, t] : adapter.tensors()) tensors[name] = t.detach();
  write_safetensors(dir / kAdapterWeightsFile, tensors);
  common::write_file_atomically(dir / kAdapterConfigFile, config.dump(2) + "\n");
}

}  // namespace fptrain::models
