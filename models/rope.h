// Rotary position embeddings (RoPE) as Hugging Face's Llama/Mistral/Granite
// apply them: rotate_half convention, cos/sin computed in fp32 from the
// position ids, then cast to the activations' dtype.
#pragma once

#include "models/model_config.h"

#include <ATen/ATen.h>

namespace fptrain::models {

// The inverse frequencies [head_dim / 2], fp32 on the CPU, computed with the
// same operations in the same order as transformers' modeling_rope_utils
// (default, linear and llama3 types), so they agree bit for bit.
// longrope: the short factors, or with `long_context` the long ones (transformers
// switches when a batch's positions reach past original_max_position_embeddings).
at::Tensor rope_inv_freq(const RopeConfig& rope, int64_t head_dim, bool long_context = false);

struct RotaryTables {
  at::Tensor cos;  // [T, 1, head_dim], broadcast over heads
  at::Tensor sin;
};

// cos/sin of position_ids[t] * inv_freq, duplicated to the full head_dim.
// cos and sin are multiplied by `scale` in fp32 before the cast (longrope's attention factor).
RotaryTables rotary_tables(const at::Tensor& inv_freq, const at::Tensor& position_ids,
                           at::ScalarType dtype, double scale = 1.0);

// x [T, heads, head_dim] -> x * cos + rotate_half(x) * sin. Tables narrower than
// head_dim (partial rotary) rotate the first dimensions and pass the rest.
at::Tensor apply_rotary(const at::Tensor& x, const RotaryTables& tables);

}  // namespace fptrain::models
