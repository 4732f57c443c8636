// LoRA's settings (PEFT's LoraConfig fields fptrain trains with), free of
// LibTorch so the trainer's configuration can hold them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace fptrain::models {

struct LoraSettings {
  int64_t r = 16;
  double alpha = 32;
  double dropout = 0.0;
  bool rslora = false;  // scale alpha / sqrt(r) instead of alpha / r
  // Module names as PEFT matches them: a module is targeted when its full name
  // ("model.layers.0.self_attn.q_proj") equals an entry or ends in "." + entry;
  // "all-linear" targets every projection of the decoder (never lm_head).
  std::vector<std::string> target_modules = {"q_proj", "k_proj", "v_proj", "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};
  // PEFT's other form (target_modules given as one string): a regular
  // expression the whole module name must match. Used when not empty.
  std::string target_regex;

  double scale() const { return rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r); }
};

}  // namespace fptrain::models
