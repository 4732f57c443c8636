// flatten mode against transformers' DataCollatorWithFlattening on the same
// examples (batches computed live by make_fixtures.py).
#include <gtest/gtest.h>

#include "data/batch_builder.h"
#include "tests/data/test_util.h"

namespace fptrain::data {
namespace {

using testing::fixture;

void expect_matches_collator(const std::vector<TrainStep>& steps, const nlohmann::json& golden) {
  ASSERT_EQ(steps.size(), golden.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_EQ(steps[i].micro_batches.size(), 1u);
    const PackedBatch& b = steps[i].micro_batches[0];
    const auto& g = golden[i];
    EXPECT_EQ(b.input_ids, g["input_ids"].get<std::vector<int32_t>>()) << "batch " << i;
    EXPECT_EQ(b.labels, g["labels"].get<std::vector<int32_t>>()) << "batch " << i;
    EXPECT_EQ(b.position_ids, g["position_ids"].get<std::vector<int32_t>>()) << "batch " << i;
    EXPECT_EQ(b.cu_seqlens, g["cu_seqlens"].get<std::vector<int32_t>>()) << "batch " << i;
    EXPECT_EQ(b.max_seqlen, g["max_seqlen"].get<int32_t>()) << "batch " << i;
    EXPECT_EQ(check_batch(b), "");
    int64_t supervised = 0;
    for (int32_t l : g["labels"].get<std::vector<int32_t>>()) supervised += l != kIgnoreLabel;
    EXPECT_EQ(b.num_supervised, supervised);
  }
}

TEST(CollatorParity, PreTokenizedExamplesMatchDataCollatorWithFlattening) {
  const auto golden = testing::read_json(fixture("flatten_golden.json"));
  for (const char* name : {"flatten_labels.jsonl", "flatten_ids.jsonl"}) {
    DataOptions o = testing::options_for({fixture(name)});
    o.examples_per_micro_batch = golden["examples_per_micro_batch"].get<int64_t>();
    DataPipeline p(o, nullptr);  // pre-tokenized: no tokenizer needed
    expect_matches_collator(testing::drain(p), golden["files"][name]);
  }
}

}  // namespace
}  // namespace fptrain::data
