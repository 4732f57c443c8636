// Llama model configs of real sizes, for tests that count bytes and buckets without weights.
#pragma once

#include "models/model_config.h"

#include <cstdint>

namespace fptrain::models::testing {

// Hidden 4096, 32 layers, 32 heads of 128 (Llama-2-7B: vocab 32000, intermediate 11008, 32 kv
// heads; Llama-3-8B: 128256, 14336, 8).
inline ModelConfig llama_4096_shape(int64_t vocab, int64_t intermediate, int64_t kv_heads) {
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.vocab_size = vocab;
  c.hidden_size = 4096;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 128;
  return c;
}

}  // namespace fptrain::models::testing
