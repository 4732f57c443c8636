// Low-rank adapters of a model's projections (LoRA), as Hugging Face PEFT
// defines them: which projections a setting targets, the adapter tensors under
// PEFT's names, PEFT's default initialisation, and merging into the base
// weights. The arithmetic is models/lora_linear.h; the op set that applies it
// models/lora_ops.h; the folder format models/peft_format.h.
#pragma once

#include "models/decoder_ops.h"
#include "models/lora_linear.h"
#include "models/lora_settings.h"
#include "models/tensor_map.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fptrain::models {

// The projections `settings` targets, in model order. Throws std::invalid_argument
// naming the projection modules this model has when an entry matches none of them
// (a typo) or nothing is targeted.
std::vector<Projection> select_lora_targets(const LoraSettings& settings, const std::vector<Projection>& projections);

// PEFT's tensor names: "base_model.model.<module>.lora_A.weight" (and lora_B).
std::string lora_a_name(const std::string& module);
std::string lora_b_name(const std::string& module);

class LoraAdapter {
 public:
  // `targets` from select_lora_targets over a model's projections (slots below
  // `num_slots`); `tensors` holds exactly lora_A [r, in] and lora_B [out, r] of
  // each target, one floating dtype. Throws std::invalid_argument listing what is
  // missing, unexpected or misshapen.
  LoraAdapter(LoraSettings settings, const std::vector<Projection>& targets, TensorMap tensors, int64_t num_slots);
  LoraAdapter(const LoraAdapter&) = delete;  // weights_ points at tensors_'s own tensors
  LoraAdapter& operator=(const LoraAdapter&) = delete;

  const LoraSettings& settings() const { return settings_; }
  // The adapter of projection `slot`; null when it has none.
  const LoraWeights* weights(int64_t slot) const;
  const TensorMap& tensors() const { return tensors_; }
  // Tensor names in model order (by projection, A before B).
  const std::vector<std::string>& names() const { return names_; }
  // The adapted modules in model order.
  const std::vector<std::string>& modules() const { return modules_; }
  // Short module names targeted ("q_proj", ...): what adapter_config.json lists.
  std::vector<std::string> target_module_names() const;

 private:
  LoraSettings settings_;
  TensorMap tensors_;
  std::vector<std::optional<LoraWeights>> weights_;  // by slot
  std::vector<std::string> names_, modules_;
};

// PEFT's default initialisation (init_lora_weights=True): A Kaiming-uniform with
// a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), B zero, so the adapted model
// starts equal to the base. Drawn on the CPU from a generator seeded with `seed`
// (the same adapter on every device), then moved to `dtype` on `device`.
std::unique_ptr<LoraAdapter> init_lora_adapter(const LoraSettings& settings, const std::vector<Projection>& projections,
                                               at::ScalarType dtype, const at::Device& device, uint64_t seed);

// The base parameters with every adapted weight replaced by W + scale * B @ A,
// formed in fp32 and rounded once to W's dtype (PEFT's merge_and_unload). The
// other tensors are shared, not copied.
TensorMap merge_lora(const TensorMap& base, const LoraAdapter& adapter);

}  // namespace fptrain::models
