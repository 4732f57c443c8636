// Fuzz target config_json: a model's config.json. Parsing must give a
// ModelConfig or std::runtime_error naming the key; an accepted config must
// survive being written back (model_config_to_json) and read again unchanged,
// and its parameter shapes (what the checkpoint loader checks first) must be
// computable.
#include "common/json_input.h"
#include "fuzz/fuzz_util.h"
#include "models/model_config.h"
#include "models/parameter_layout.h"

#include <cstdio>
#include <cstdlib>

using namespace fptrain;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "config_json: %s\n", what.c_str());
  std::abort();
}

bool same(const models::ModelConfig& a, const models::ModelConfig& b) {
  return a.architecture == b.architecture && a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size &&
         a.intermediate_size == b.intermediate_size && a.num_hidden_layers == b.num_hidden_layers &&
         a.num_attention_heads == b.num_attention_heads && a.num_key_value_heads == b.num_key_value_heads &&
         a.head_dim == b.head_dim && a.max_position_embeddings == b.max_position_embeddings &&
         a.rms_norm_eps == b.rms_norm_eps && a.tie_word_embeddings == b.tie_word_embeddings &&
         a.attention_bias == b.attention_bias && a.mlp_bias == b.mlp_bias && a.sliding_window == b.sliding_window &&
         a.rope.type == b.rope.type && a.rope.theta == b.rope.theta && a.rope.factor == b.rope.factor &&
         a.dtype == b.dtype && a.bos_token_id == b.bos_token_id && a.eos_token_ids == b.eos_token_ids &&
         a.pad_token_id == b.pad_token_id;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json doc;
  try {
    doc = common::parse_json(fuzz::as_text(data, size), "config.json");
  } catch (const std::invalid_argument&) {
    return 0;
  }
  models::ModelConfig config;
  try {
    config = models::parse_model_config(doc, "config.json");
  } catch (const std::runtime_error&) {
    return 0;
  }
  const nlohmann::json written = models::model_config_to_json(config);
  models::ModelConfig again;
  try {
    again = models::parse_model_config(written, "config.json (written back)");
  } catch (const std::exception& e) {
    fail(std::string("an accepted config does not read back: ") + e.what());
  }
  if (!same(config, again)) fail("an accepted config reads back differently: " + written.dump());
  (void)models::expected_parameter_shapes(config);
  return 0;
}
