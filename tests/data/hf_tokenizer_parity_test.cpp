// With the real tokenizers (load_tokenizer on tokenizers made by the HF
// libraries): chat examples give the ids of transformers' apply_chat_template
// and supervise exactly its assistant mask; the whole text path through
// flatten equals apply_chat_template + DataCollatorWithFlattening.
#include <gtest/gtest.h>

#include "data/batch_builder.h"
#include "data/example_encoder.h"
#include "tests/data/test_util.h"

namespace fptrain::data {
namespace {

using testing::fixture;
using tokenizer::load_tokenizer;

TEST(ChatHfParity, ChatTemplateIdsAndAssistantMasks) {
  const auto golden = testing::read_json(fixture("chat_golden.json"));
  int checked = 0;
  for (const auto& entry : golden) {
   const std::string name = entry["template"];
   // SentencePiece conventions are checked from tokenizer.json and from tokenizer.model.
   std::vector<std::string> dirs = {entry["tokenizer_dir"].get<std::string>()};
   if (name == "llama2" || name == "mistral") dirs.push_back("spm_" + name);
   for (const auto& dir : dirs) {
    SCOPED_TRACE(dir);
    const auto tok = load_tokenizer(fixture(dir));
    ExampleEncoder enc(tok.get(),
                       ChatTemplate::resolve(common::parse_enum<ChatTemplateKind>(name, "template"), "", tok.get()),
                       ChatLossMask::kAssistant);
    EXPECT_TRUE(enc.turn_by_turn()) << name;
    for (const auto& c : entry["cases"]) {
      RawExample ex;
      ex.format = ExampleFormat::kMessages;
      for (const auto& m : c["messages"]) ex.messages.push_back({m["role"], m["content"], false});
      const EncodedExample e = enc.encode(ex);
      const auto ids = c["input_ids"].get<std::vector<int32_t>>();
      const auto mask = c["assistant_masks"].get<std::vector<int>>();
      EXPECT_EQ(e.input_ids, ids) << name << ": " << c["text"];
      ASSERT_EQ(e.labels.size(), mask.size()) << name;
      for (size_t t = 1; t < mask.size(); ++t)
        EXPECT_EQ(e.labels[t] != kIgnoreLabel, mask[t] == 1) << name << " token " << t << ": " << c["text"];
      ++checked;
    }
   }
  }
  EXPECT_EQ(checked, 30);
}

TEST(ChatHfParity, ChatThroughFlattenEqualsTransformers) {
  const auto golden = testing::read_json(fixture("flatten_golden.json"));
  DataOptions o = testing::options_for({fixture("chat_flatten.jsonl")});
  o.examples_per_micro_batch = golden["examples_per_micro_batch"].get<int64_t>();
  o.tokenizer_dir = fixture("tok_llama3");  // chat_template: auto, detected from the tokenizer
  std::shared_ptr<const tokenizer::Tokenizer> tok = load_tokenizer(o.tokenizer_dir);
  DataPipeline p(o, tok);
  EXPECT_NE(p.chat_template_label().find("tok_llama3"), std::string::npos);  // the tokenizer's own template
  const auto steps = testing::drain(p);
  const auto& batches = golden["files"]["chat_flatten.jsonl"];
  ASSERT_EQ(steps.size(), batches.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const PackedBatch& b = steps[i].micro_batches.at(0);
    EXPECT_EQ(b.input_ids, batches[i]["input_ids"].get<std::vector<int32_t>>()) << i;
    EXPECT_EQ(b.labels, batches[i]["labels"].get<std::vector<int32_t>>()) << i;
    EXPECT_EQ(b.position_ids, batches[i]["position_ids"].get<std::vector<int32_t>>()) << i;
    EXPECT_EQ(b.cu_seqlens, batches[i]["cu_seqlens"].get<std::vector<int32_t>>()) << i;
    EXPECT_EQ(check_batch(b), "");
  }
}

TEST(ChatHfParity, RealTokenizerOnWorkerThreadsGivesTheSameStream) {
  DataOptions o = testing::options_for({fixture("gen_flan_messages.jsonl")});
  o.tokenizer_dir = fixture("tok_llama3");
  o.batching = BatchMode::kPack;
  o.max_tokens = 32768;
  o.max_length = 32768;  // the fixture tokenizer's small vocabulary makes long examples
  o.shuffle = true;
  std::shared_ptr<const tokenizer::Tokenizer> tok = load_tokenizer(o.tokenizer_dir);
  DataPipeline one(o, tok);
  const auto a = testing::drain(one);
  ASSERT_FALSE(a.empty());
  o.workers = 4;
  DataPipeline many(o, tok);
  const auto b = testing::drain(many);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].micro_batches.size(), b[i].micro_batches.size());
    for (size_t j = 0; j < a[i].micro_batches.size(); ++j) {
      EXPECT_EQ(a[i].micro_batches[j].input_ids, b[i].micro_batches[j].input_ids);
      EXPECT_EQ(a[i].micro_batches[j].labels, b[i].micro_batches[j].labels);
    }
  }
  EXPECT_EQ(a.back().cursor.stats.used, 400);
}

}  // namespace
}  // namespace fptrain::data
