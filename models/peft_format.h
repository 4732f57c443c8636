// Hugging Face PEFT's LoRA folder: adapter_config.json (peft_type LORA, r,
// lora_alpha, target_modules, use_rslora, ...) and adapter_model.safetensors
// (lora_A / lora_B under "base_model.model.<module>.lora_X.weight"), which
// PeftModel.from_pretrained loads onto the base model. Settings fptrain does
// not train with (DoRA, adapted biases, per-module ranks, extra trained
// modules, fan_in_fan_out, layer selections) are refused by name, never ignored.
#pragma once

#include "models/lora_adapter.h"

#include <filesystem>
#include <memory>
#include <string>

namespace fptrain::models {

inline constexpr const char* kAdapterConfigFile = "adapter_config.json";
inline constexpr const char* kAdapterWeightsFile = "adapter_model.safetensors";

// True when `dir` holds an adapter_config.json.
bool is_peft_adapter_folder(const std::filesystem::path& dir);

// The settings of dir/adapter_config.json. Throws std::invalid_argument naming
// the file and key of anything missing, mistyped or unsupported.
LoraSettings read_peft_settings(const std::filesystem::path& dir);

// The adapter of `dir` for a model with these projections (CausalLM::projections()),
// in `dtype` on `device`.
std::unique_ptr<LoraAdapter> read_peft_adapter(const std::filesystem::path& dir,
                                               const std::vector<Projection>& projections, at::ScalarType dtype,
                                               const at::Device& device);

// Writes adapter_config.json and adapter_model.safetensors into the existing
// folder `dir` (each file atomically). `base_model` goes to base_model_name_or_path.
void write_peft_adapter(const std::filesystem::path& dir, const LoraAdapter& adapter, const std::string& base_model);

}  // namespace fptrain::models
