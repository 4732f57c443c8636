// models::backward_op_groups: which parameters' gradients one backward op produces, on the
// names parameter_layout gives for transformers' own configs (Llama, Qwen2 and Qwen3 with
// biases and q/k norms, Phi-3's fused projections, Gemma's four norms) and on PEFT's names
// of LoRA adapters.
#include "models/lora_adapter.h"
#include "models/model_config.h"
#include "models/parameter_layout.h"
#include "common/strings.h"
#include "tests/models_io/io_test_util.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fptrain::models {
namespace {

using namespace fptrain::models::testing;

std::vector<std::string> names_of(const std::string& folder) {
  return parameter_names_in_model_order(load_model_config(fixture(folder + "/config.json")));
}

// A name as the expectations spell it: "0.q_proj.bias" for "model.layers.0.self_attn.q_proj.bias".
std::string short_name(std::string name) {
  for (const std::string drop : {"base_model.model.", "model.layers.", "self_attn.", "mlp.", ".weight"}) {
    const size_t at = name.find(drop);
    if (at != std::string::npos) name.erase(at, drop.size());
  }
  return name;
}

// The runs of equal group ids, each as its short names joined by spaces; neighbouring runs
// must have different ids.
std::vector<std::string> runs_of(const std::vector<std::string>& names) {
  const std::vector<int64_t> ids = backward_op_groups(names);
  EXPECT_EQ(ids.size(), names.size());
  std::vector<std::string> runs;
  for (size_t i = 0; i < names.size() && i < ids.size(); ++i) {
    if (i > 0 && ids[i] == ids[i - 1]) {
      runs.back() += " " + short_name(names[i]);
    } else {
      runs.push_back(short_name(names[i]));
    }
  }
  return runs;
}

// `head`, then `layer` for layers 0 and 1 ('L' standing for the index), then `tail`.
std::vector<std::string> two_layers(std::vector<std::string> head, const std::vector<std::string>& layer,
                                    const std::vector<std::string>& tail) {
  for (const char l : {'0', '1'})
    for (std::string run : layer) {
      for (size_t at = run.find('L'); at != std::string::npos; at = run.find('L', at + 1)) run[at] = l;
      head.push_back(run);
    }
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

TEST(BackwardOpGroups, LlamaAttentionInputsAndMlpInputsGoTogether) {
  // This fixture has attention_bias: biases on q, k, v and o.
  EXPECT_EQ(runs_of(names_of("llama")),
            two_layers({"model.embed_tokens"},
                       {"L.q_proj L.q_proj.bias L.k_proj L.k_proj.bias L.v_proj L.v_proj.bias", "L.o_proj L.o_proj.bias",
                        "L.gate_proj L.up_proj", "L.down_proj", "L.input_layernorm", "L.post_attention_layernorm"},
                       {"model.norm", "lm_head"}));
}

TEST(BackwardOpGroups, QwenBiasesAndQkNormsJoinTheirProjections) {
  EXPECT_EQ(runs_of(names_of("qwen2")),  // q, k, v biases, no o bias; tied embeddings
            two_layers({"model.embed_tokens"},
                       {"L.q_proj L.q_proj.bias L.k_proj L.k_proj.bias L.v_proj L.v_proj.bias", "L.o_proj",
                        "L.gate_proj L.up_proj", "L.down_proj", "L.input_layernorm", "L.post_attention_layernorm"},
                       {"model.norm"}));
  // attention_bias: all four; q_norm and k_norm, laid out after o, one run of their own.
  EXPECT_EQ(runs_of(names_of("qwen3")),
            two_layers({"model.embed_tokens"},
                       {"L.q_proj L.q_proj.bias L.k_proj L.k_proj.bias L.v_proj L.v_proj.bias", "L.o_proj L.o_proj.bias",
                        "L.q_norm L.k_norm", "L.gate_proj L.up_proj", "L.down_proj", "L.input_layernorm",
                        "L.post_attention_layernorm"},
                       {"model.norm", "lm_head"}));
  // Beside their projections (another order), the norms join them.
  EXPECT_EQ(runs_of({"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_norm.weight",
                     "model.layers.0.self_attn.k_norm.weight", "model.layers.0.self_attn.o_proj.weight"}),
            (std::vector<std::string>{"0.q_proj 0.q_norm 0.k_norm", "0.o_proj"}));
}

TEST(BackwardOpGroups, FusedProjectionsAndGemmaNormsAreOpsOfTheirOwn) {
  EXPECT_EQ(runs_of(names_of("phi3")),
            two_layers({"model.embed_tokens"},
                       {"L.qkv_proj", "L.o_proj", "L.gate_up_proj", "L.down_proj", "L.input_layernorm",
                        "L.post_attention_layernorm"},
                       {"model.norm", "lm_head"}));
  EXPECT_EQ(runs_of(names_of("gemma2")),
            two_layers({"model.embed_tokens"},
                       {"L.q_proj L.k_proj L.v_proj", "L.o_proj", "L.gate_proj L.up_proj", "L.down_proj",
                        "L.input_layernorm", "L.post_attention_layernorm", "L.pre_feedforward_layernorm",
                        "L.post_feedforward_layernorm"},
                       {"model.norm"}));
}

// The same projection in neighbouring layers, or a name outside any layer, is another op.
TEST(BackwardOpGroups, LayersAndOtherNamesNeverShareAnOp) {
  EXPECT_EQ(runs_of({"model.layers.0.self_attn.v_proj.weight", "model.layers.1.self_attn.q_proj.weight",
                     "model.layers.1.self_attn.k_proj.weight", "model.layers.12.mlp.up_proj.weight",
                     "model.layers.13.mlp.gate_proj.weight"}),
            (std::vector<std::string>{"0.v_proj", "1.q_proj 1.k_proj", "12.up_proj", "13.gate_proj"}));
  EXPECT_EQ(runs_of({"a", "b", "b", "q_proj.weight", "k_proj.weight"}),
            (std::vector<std::string>{"a", "b b", "q_proj", "k_proj"}));
  EXPECT_TRUE(backward_op_groups({}).empty());
}

// The trained tensors of a LoRA run (LoraAdapter::names: by projection, lora_A before lora_B)
// fall into their modules' ops, whatever the targets.
TEST(BackwardOpGroups, LoraAdaptersFollowTheirModules) {
  std::vector<std::string> all, q_and_v;
  for (const std::string& name : names_of("llama")) {
    if (!common::ends_with(name, "_proj.weight")) continue;
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    for (const std::string& adapter : {lora_a_name(module), lora_b_name(module)}) {
      all.push_back(adapter);
      if (common::ends_with(module, "q_proj") || common::ends_with(module, "v_proj")) q_and_v.push_back(adapter);
    }
  }
  ASSERT_EQ(all.front(), "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(runs_of(all), two_layers({},
                                     {"L.q_proj.lora_A L.q_proj.lora_B L.k_proj.lora_A L.k_proj.lora_B "
                                      "L.v_proj.lora_A L.v_proj.lora_B",
                                      "L.o_proj.lora_A L.o_proj.lora_B",
                                      "L.gate_proj.lora_A L.gate_proj.lora_B L.up_proj.lora_A L.up_proj.lora_B",
                                      "L.down_proj.lora_A L.down_proj.lora_B"},
                                     {}));
  EXPECT_EQ(runs_of(q_and_v),
            two_layers({}, {"L.q_proj.lora_A L.q_proj.lora_B L.v_proj.lora_A L.v_proj.lora_B"}, {}));
}

}  // namespace
}  // namespace fptrain::models
