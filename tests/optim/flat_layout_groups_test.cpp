// FlatLayout's gradient groups (optim/flat_layout.h): a bucket half full or more closes where
// the backward op changes, so one process's lazy buckets hold no memory ahead of a later op's
// gradients; small numbers first, then the Llama-2-7B and Llama-3-8B layouts that an H200's
// allocator trace measured (a [v, o] bucket holding v's 32 MiB through the attention core's
// backward, the step's peak).
#include "models/model_config.h"
#include "models/parameter_layout.h"
#include "optim/flat_layout.h"
#include "tests/models/llama_shapes.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace fptrain::optim {
namespace {

using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// Each bucket as its parameters' names joined by spaces.
std::vector<std::string> buckets_of(const FlatLayout& layout) {
  std::vector<std::string> out;
  for (const FlatBucket& b : layout.buckets()) {
    std::string names;
    for (size_t i = b.first_segment; i < b.end_segment; ++i) names += (names.empty() ? "" : " ") + layout.segments()[i].name;
    out.push_back(names);
  }
  return out;
}

// Two layers of a Llama-2-7B in miniature: q, k, v, o of 4 elements, gate, up, down of 11,
// norms of 1. The attention's inputs are one op, gate and up another, the rest one each.
Shapes two_small_layers() {
  Shapes out;
  for (const std::string l : {"0", "1"})
    for (const auto& [name, numel] : std::vector<std::pair<std::string, int64_t>>{
             {"q", 4}, {"k", 4}, {"v", 4}, {"o", 4}, {"gate", 11}, {"up", 11}, {"down", 11}, {"norm1", 1}, {"norm2", 1}})
      out.push_back({name + l, {numel}});
  return out;
}
const std::vector<int64_t> kSmallGroups = {0, 0, 0, 1, 2, 2, 3, 4, 5, 6, 6, 6, 7, 8, 8, 9, 10, 11};

TEST(FlatLayoutGroups, ABucketHalfFullClosesWhereTheBackwardOpChanges) {
  const FlatLayout grouped(two_small_layers(), 1, 1, 8, kSmallGroups);
  EXPECT_EQ(buckets_of(grouped), (std::vector<std::string>{"q0 k0", "v0", "o0", "gate0", "up0", "down0",
                                                           "norm10 norm20 q1 k1", "v1", "o1", "gate1", "up1", "down1",
                                                           "norm11 norm21"}));
  // Without groups: today's buckets, v beside o.
  const std::vector<std::string> by_size = {"q0 k0", "v0 o0", "gate0", "up0", "down0", "norm10 norm20 q1 k1",
                                            "v1 o1", "gate1", "up1", "down1", "norm11 norm21"};
  EXPECT_EQ(buckets_of(FlatLayout(two_small_layers(), 1, 1, 8)), by_size);
  EXPECT_EQ(buckets_of(FlatLayout(two_small_layers(), 1, 1, 8, {})), by_size);
  // The segments stay where they were (one shard: buckets add no padding).
  const FlatLayout plain(two_small_layers(), 1, 1, 8);
  for (size_t i = 0; i < plain.segments().size(); ++i)
    EXPECT_EQ(grouped.segments()[i].offset, plain.segments()[i].offset) << plain.segments()[i].name;
  EXPECT_EQ(grouped.total(), plain.total());
}

// Half a bucket is the line: below it a change of op keeps the bucket open (tiny parameters
// join their neighbours); from it on the bucket closes. An odd size rounds the half up.
TEST(FlatLayoutGroups, BelowHalfABucketAChangeOfOpDoesNotClose) {
  const Shapes three = {{"a", {3}}, {"b", {3}}, {"c", {3}}};
  EXPECT_EQ(buckets_of(FlatLayout(three, 1, 1, 8, {0, 1, 2})), (std::vector<std::string>{"a b", "c"}));
  EXPECT_EQ(buckets_of(FlatLayout(three, 1, 1, 6, {0, 1, 2})), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(buckets_of(FlatLayout(three, 1, 1, 7, {0, 1, 2})), (std::vector<std::string>{"a b", "c"}));
  EXPECT_EQ(buckets_of(FlatLayout(three, 1, 1, 8, {0, 0, 0})), (std::vector<std::string>{"a b c"}));
  // The alignment counts as held: a segment of 3 aligned to 4 fills half of 8.
  EXPECT_EQ(buckets_of(FlatLayout(three, 4, 1, 8, {0, 1, 2})), (std::vector<std::string>{"a", "b", "c"}));
  // No buckets (0): groups change nothing.
  EXPECT_EQ(buckets_of(FlatLayout(three, 1, 1, 0, {0, 1, 2})), (std::vector<std::string>{"a b c"}));
}

TEST(FlatLayoutGroups, GroupsMustNameEveryParameter) {
  try {
    FlatLayout(two_small_layers(), 1, 1, 8, {0, 1, 2});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("3 gradient groups for 18 parameters"), std::string::npos) << e.what();
  }
}

// The buckets holding layer 1's parameters, each named by its modules without the layer prefix,
// in the trainer's one-process layout: 64 MiB of bf16, with groups or without.
std::vector<std::string> layer_one_buckets(const models::ModelConfig& config, bool grouped) {
  Shapes params;
  std::vector<std::string> names;
  for (const models::ParameterInfo& p : models::parameter_layout(config)) {
    params.push_back({p.name, p.shape});
    names.push_back(p.name);
  }
  const int64_t bucket = (int64_t{64} << 20) / 2;
  const FlatLayout layout(params, FlatLayout::kDefaultAlignment, 1, bucket,
                          grouped ? models::backward_op_groups(names) : std::vector<int64_t>{});
  std::vector<std::string> out;
  for (const FlatBucket& b : layout.buckets()) {
    std::string modules;
    bool layer_one = false;
    for (size_t i = b.first_segment; i < b.end_segment; ++i) {
      const std::string& name = layout.segments()[i].name;
      layer_one = layer_one || models::layer_of_name(name) == 1;
      const std::string module = name.substr(0, name.rfind('.'));
      modules += (modules.empty() ? "" : " ") + module.substr(module.rfind('.') + 1) +
                 (models::layer_of_name(name) == 1 ? "" : "'");
    }
    if (layer_one) out.push_back(modules);
  }
  return out;
}

TEST(FlatLayoutGroups, Llama2And3LayersGetNoBucketAcrossTheAttentionCore) {
  // Llama-2-7B: q, k, v, o of 32 MiB each, gate, up, down of 86 MiB; ' marks layer 0's norms.
  const models::ModelConfig llama2 = models::testing::llama_4096_shape(32000, 11008, 32);
  EXPECT_EQ(layer_one_buckets(llama2, false),
            (std::vector<std::string>{"input_layernorm' post_attention_layernorm' q_proj k_proj", "v_proj o_proj",
                                      "gate_proj", "up_proj", "down_proj",
                                      "input_layernorm post_attention_layernorm q_proj' k_proj'"}));
  EXPECT_EQ(layer_one_buckets(llama2, true),
            (std::vector<std::string>{"input_layernorm' post_attention_layernorm' q_proj k_proj", "v_proj", "o_proj",
                                      "gate_proj", "up_proj", "down_proj",
                                      "input_layernorm post_attention_layernorm q_proj' k_proj'"}));
  // Llama-3-8B (GQA: k and v of 8 MiB): the norms, q, k and v; o alone.
  const models::ModelConfig llama3 = models::testing::llama_4096_shape(128256, 14336, 8);
  EXPECT_EQ(layer_one_buckets(llama3, false),
            (std::vector<std::string>{"input_layernorm' post_attention_layernorm' q_proj k_proj v_proj o_proj",
                                      "gate_proj", "up_proj", "down_proj",
                                      "input_layernorm post_attention_layernorm q_proj' k_proj' v_proj' o_proj'"}));
  EXPECT_EQ(layer_one_buckets(llama3, true),
            (std::vector<std::string>{"input_layernorm' post_attention_layernorm' q_proj k_proj v_proj", "o_proj",
                                      "gate_proj", "up_proj", "down_proj",
                                      "input_layernorm post_attention_layernorm q_proj' k_proj' v_proj'"}));
}

}  // namespace
}  // namespace fptrain::optim
