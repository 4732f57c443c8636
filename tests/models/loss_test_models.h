// Tiny decoder models and a packed batch with prompts, for the tests of
// CausalLM::loss (the fused loss against the materialised one, and with a sink
// for the head weight's gradient).
#pragma once

#include "models/causal_lm.h"
#include "models/init.h"
#include "models/linear_cross_entropy.h"
#include "models/model_config.h"
#include "tests/models/model_test_util.h"

#include <ostream>
#include <string>
#include <vector>

namespace fptrain::models::testing {

struct TinyModel {
  const char* name;
  const char* architecture;
  bool tied;
  double logits_scaling;
};
inline void PrintTo(const TinyModel& m, std::ostream* os) { *os << m.name; }  // test names in ctest

inline CausalLM make_model(const TinyModel& m) {
  nlohmann::json doc = {{"architectures", {m.architecture}},
                        {"vocab_size", 211},
                        {"hidden_size", 64},
                        {"intermediate_size", 96},
                        {"num_hidden_layers", 2},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},
                        {"max_position_embeddings", 128},
                        {"rms_norm_eps", 1e-5},
                        {"rope_theta", 10000.0},
                        {"initializer_range", 0.2},
                        {"tie_word_embeddings", m.tied}};
  if (std::string(m.architecture) == "GraniteForCausalLM") {
    doc["embedding_multiplier"] = 6.0;
    doc["residual_multiplier"] = 0.3;
    doc["attention_multiplier"] = 0.2;
    doc["logits_scaling"] = m.logits_scaling;
  }
  ModelConfig config = parse_model_config(doc, std::string(m.name) + " (test)");
  EXPECT_EQ(config.tie_word_embeddings, m.tied);
  EXPECT_EQ(config.logits_scaling, m.logits_scaling);
  TensorMap params = init_parameters(config, 1234);
  at::manual_seed(99);
  for (auto& [name, p] : params) {
    if (name.find("norm") != std::string::npos) p.copy_(1.0 + 0.2 * at::randn(p.sizes()));
    p.requires_grad_(true);
  }
  return CausalLM(std::move(config), std::move(params), attention::Backend::kReference);
}

inline Packed make_batch(int64_t vocab) {
  at::manual_seed(5);
  std::vector<Example> examples;
  const std::vector<int64_t> lengths = {13, 1, 22, 6, 17};
  for (size_t i = 0; i < lengths.size(); ++i) {
    const at::Tensor ids = at::randint(vocab, {lengths[i]}, at::kLong);
    at::Tensor labels = ids.clone();
    labels.narrow(0, 0, std::min<int64_t>(lengths[i], 2 + static_cast<int64_t>(i))).fill_(kIgnoreIndex);  // a prompt
    examples.push_back({ids, labels});
  }
  return pack(examples, at::kCPU);
}

}  // namespace fptrain::models::testing
