// Data parallelism trains what one process trains: N ranks x k examples per
// micro-batch take the same steps as one rank with N x k (flatten), the same
// bins in pack mode, the same evaluation; only the order in which gradients are
// summed changes. Ranks are CPU processes launched by hand (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT) communicating through the TCP store.
#include "tests/distributed/dist_test_util.h"
#include "trainer/checkpoint_store.h"

namespace fptrain::distributed {
namespace {

using namespace testing;

const std::string kTokens = "tokens.jsonl";  // 240 pre-tokenized examples
const std::string kChat = "chat.jsonl";      // 96 conversations

// 10 steps, shuffled data.
const std::vector<std::string> kTen = {"training.max_steps=10", "data.shuffle=true"};

// The optimizer state of a checkpoint (whole, or in the pieces of sharded ranks)
// as whole flattened parameters: "<kind>.<name>" -> tensor. Fails on gaps.
std::map<std::string, at::Tensor> whole_state(const fs::path& ckpt, const std::map<std::string, int64_t>& numel) {
  const trainer::TrainingState s = trainer::load_training_state(ckpt, 0, 1);
  std::map<std::string, at::Tensor> out;
  std::map<std::string, int64_t> covered;
  for (const auto& [key, t] : s.optimizer) {
    const size_t at = key.rfind('@');
    const std::string base = at == std::string::npos ? key : key.substr(0, at);
    const int64_t first = at == std::string::npos ? 0 : std::stoll(key.substr(at + 1));
    if (!numel.count(base)) {
      ADD_FAILURE() << "unexpected optimizer tensor " << key;
      continue;
    }
    if (!out.count(base)) out[base] = at::full({numel.at(base)}, std::nanf(""), t.options());
    out[base].narrow(0, first, t.numel()).copy_(t.reshape({-1}));
    covered[base] += t.numel();
  }
  for (const auto& [base, n] : numel) EXPECT_EQ(covered[base], n) << base << " in " << ckpt;
  return out;
}

TEST(DataParallel, TwoRanksOfFourEqualOneRankOfEightWithShardedOptimizer) {
  WorkDir dir;
  const auto one = train_run(dir, "one", 1, kTokens, "", with(kTen, {"batching.examples_per_micro_batch=8"}));
  const auto two = train_run(dir, "two", 2, kTokens, "",
                             with(kTen, {"batching.examples_per_micro_batch=4", "distributed.shard_optimizer=true"}));
  ASSERT_EQ(one.records.size(), 10u);
  expect_same_steps(two.records, one.records, 1e-5);
  for (const auto& r : two.records) EXPECT_EQ(r.value("world_size", 0), 2);
  EXPECT_NE(two.outcome.outputs[0].find("data parallel: 2 ranks (store), optimizer sharded"), std::string::npos)
      << two.outcome.outputs[0];
  // Every rank wrote its shard of the optimizer into the one checkpoint.
  const fs::path ckpt = checkpoint_of(two.dir, 10);
  EXPECT_TRUE(fs::exists(ckpt / "training_state.rank0.safetensors"));
  EXPECT_TRUE(fs::exists(ckpt / "training_state.rank1.safetensors"));
  expect_weights_close(ckpt, checkpoint_of(one.dir, 10));
  EXPECT_TRUE(dir.leftovers().empty());
}

// LoRA: the adapters' gradients are what the ranks reduce (the frozen base has none); the
// checkpoint is one PEFT adapter folder with each rank's shard of the adapters' optimizer state.
TEST(DataParallel, TwoRanksTrainingAdaptersEqualOneRank) {
  WorkDir dir;
  const std::vector<std::string> lora = {"adapter.type=lora", "adapter.r=4", "adapter.target_modules=all-linear"};
  const auto one = train_run(dir, "one", 1, kTokens, "", with(with(kTen, lora), {"batching.examples_per_micro_batch=8"}));
  const auto two = train_run(dir, "two", 2, kTokens, "", with(with(kTen, lora), {"batching.examples_per_micro_batch=4"}));
  ASSERT_EQ(one.records.size(), 10u);
  expect_same_steps(two.records, one.records, 1e-5);
  const fs::path ckpt = checkpoint_of(two.dir, 10);
  EXPECT_TRUE(fs::exists(ckpt / "training_state.rank1.safetensors"));
  EXPECT_FALSE(fs::exists(ckpt / "model.safetensors"));
  const auto got = models::read_safetensors(ckpt / "adapter_model.safetensors");
  const auto want = models::read_safetensors(checkpoint_of(one.dir, 10) / "adapter_model.safetensors");
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.size(), 2u * 7 * 2);  // A and B of seven projections in two layers
  for (const auto& [name, t] : want) {
    const double err = ((got.at(name) - t).norm() / t.norm()).item<double>();
    EXPECT_LT(err, 1e-5) << name;
  }
}

// Split masters (bf16 weights + 16-bit remainders) sharded over 2 ranks: the same steps and the same
// checkpoint bytes as fp32 masters sharded the same way, each rank saving its shard as fp32 masters.
TEST(DataParallel, SplitMastersOverTwoRanksAreTheFp32MastersBitForBit) {
  WorkDir dir;
  const std::vector<std::string> bf16 = with(kTen, {"model.dtype=bfloat16", "batching.examples_per_micro_batch=4",
                                                    "distributed.shard_optimizer=true", "training.max_steps=6"});
  const auto fp32 = train_run(dir, "fp32", 2, kTokens, "", with(bf16, {"optimizer.master_weights=true"}));
  const auto split = train_run(dir, "split", 2, kTokens, "", with(bf16, {"optimizer.master_weights=split"}));
  ASSERT_EQ(fp32.records.size(), 6u) << fp32.outcome.describe();
  expect_same_steps(split.records, fp32.records, 0.0);
  for (const char* file : {"model.safetensors", "training_state.rank0.safetensors", "training_state.rank1.safetensors"})
    EXPECT_TRUE(read_file(checkpoint_of(split.dir, 6) / file) ==
                read_file(checkpoint_of(fp32.dir, 6) / file))
        << file;
}

TEST(DataParallel, TwoRanksOfFourEqualOneRankOfEightWithReplicatedOptimizer) {
  WorkDir dir;
  const auto one = train_run(dir, "one", 1, kTokens, "", with(kTen, {"batching.examples_per_micro_batch=8"}));
  const auto two = train_run(dir, "two", 2, kTokens, "",
                             with(kTen, {"batching.examples_per_micro_batch=4", "distributed.shard_optimizer=false"}));
  ASSERT_EQ(one.records.size(), 10u);
  expect_same_steps(two.records, one.records, 1e-5);
  EXPECT_NE(two.outcome.outputs[0].find("optimizer replicated"), std::string::npos) << two.outcome.outputs[0];
  const fs::path ckpt = checkpoint_of(two.dir, 10);
  EXPECT_TRUE(fs::exists(ckpt / "training_state.safetensors"));
  EXPECT_FALSE(fs::exists(ckpt / "training_state.rank1.safetensors"));
  expect_weights_close(ckpt, checkpoint_of(one.dir, 10));
}

TEST(DataParallel, TwoRanksAccumulatingTwoMicroBatchesEqualOneRankAccumulatingTwo) {
  // 2 ranks x 2 examples x 2 micro-batches = 1 rank x 4 examples x 2.
  WorkDir dir;
  const auto one = train_run(dir, "one", 1, kTokens, "",
                             with(kTen, {"batching.examples_per_micro_batch=4", "batching.grad_accumulation=2"}));
  const auto two = train_run(dir, "two", 2, kTokens, "",
                             with(kTen, {"batching.examples_per_micro_batch=2", "batching.grad_accumulation=2"}));
  ASSERT_EQ(one.records.size(), 10u);
  expect_same_steps(two.records, one.records, 1e-5);
  for (const auto& r : two.records) EXPECT_EQ(r["examples"], 8);
  expect_weights_close(checkpoint_of(two.dir, 10), checkpoint_of(one.dir, 10));
}

TEST(DataParallel, ReplicatedTwoRanksEqualOneRankAccumulatingTheirMicroBatchesBitForBit) {
  // Rank r runs what micro-batch r of a 2-step accumulation runs, and the
  // all-reduce adds rank 1's gradient to rank 0's as backward adds micro-batch 1's
  // to micro-batch 0's: summed, never averaged, in rank order. The norm is taken
  // over the whole reduced buffer in both, so not a bit may differ.
  WorkDir dir;
  const auto one = train_run(dir, "one", 1, kTokens, "",
                             with(kTen, {"batching.examples_per_micro_batch=4", "batching.grad_accumulation=2"}));
  const auto two = train_run(dir, "two", 2, kTokens, "",
                             with(kTen, {"batching.examples_per_micro_batch=4", "distributed.shard_optimizer=false",
                                         "batching.balance_ranks=false"}));
  ASSERT_EQ(one.records.size(), 10u);
  expect_same_steps(two.records, one.records, 0.0);  // loss and grad_norm equal
  EXPECT_TRUE(read_file(checkpoint_of(two.dir, 10) / "model.safetensors") ==
              read_file(checkpoint_of(one.dir, 10) / "model.safetensors"))
      << "the final weights differ";
}

TEST(DataParallel, ShardedTwoRanksWithoutClippingEqualOneRankAccumulatingTheirMicroBatchesBitForBit) {
  // ZeRO without its one inexact part: gradients reduce-scattered in rank order,
  // AdamW on each rank's slices, the slices gathered. Without clipping the norm
  // (summed per shard, then across ranks) does not enter the update, so weights
  // and every moment must equal the one-process accumulation bit for bit.
  WorkDir dir;
  const std::vector<std::string> sets = with(kTen, {"optimizer.grad_clip=0"});
  const auto one = train_run(dir, "one", 1, kTokens, "",
                             with(sets, {"batching.examples_per_micro_batch=4", "batching.grad_accumulation=2"}));
  const auto two = train_run(dir, "two", 2, kTokens, "",
                             with(sets, {"batching.examples_per_micro_batch=4", "distributed.shard_optimizer=true",
                                         "batching.balance_ranks=false"}));
  ASSERT_EQ(one.records.size(), 10u);
  ASSERT_EQ(two.records.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(two.records[i]["loss"].get<double>(), one.records[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_LE(rel(two.records[i]["grad_norm"].get<double>(), one.records[i]["grad_norm"].get<double>()), 1e-6);
  }
  const fs::path c1 = checkpoint_of(one.dir, 10), c2 = checkpoint_of(two.dir, 10);
  EXPECT_TRUE(read_file(c2 / "model.safetensors") == read_file(c1 / "model.safetensors")) << "the final weights differ";
  std::map<std::string, int64_t> numel;
  for (const auto& [key, t] : trainer::load_training_state(c1).optimizer) numel[key] = t.numel();
  ASSERT_EQ(numel.size(), 3 * models::read_safetensors(c1 / "model.safetensors").size());
  const auto whole = whole_state(c1, numel), sharded = whole_state(c2, numel);
  for (const auto& [key, t] : whole) {
    ASSERT_TRUE(sharded.count(key)) << key;
    EXPECT_TRUE(at::equal(sharded.at(key), t)) << key << " differs between the shards and the one process";
  }
}

TEST(DataParallel, ThreeRanksWithShardedOptimizerEqualOneRank) {
  // An odd world size: every bucket padded to a multiple of 128 x 3, shards
  // that split parameters at other places.
  WorkDir dir;
  const auto one = train_run(dir, "one", 1, kTokens, "", with(kTen, {"batching.examples_per_micro_batch=6"}));
  const auto three = train_run(dir, "three", 3, kTokens, "",
                               with(kTen, {"batching.examples_per_micro_batch=2", "distributed.shard_optimizer=true"}));
  ASSERT_EQ(one.records.size(), 10u);
  expect_same_steps(three.records, one.records, 1e-5);
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(fs::exists(checkpoint_of(three.dir, 10) / ("training_state.rank" + std::to_string(r) + ".safetensors")));
  expect_weights_close(checkpoint_of(three.dir, 10), checkpoint_of(one.dir, 10));
}

TEST(DataParallel, AnEpochEndingWithAnIdleRankEqualsOneRank) {
  // One epoch of 240 examples in steps of 14: the last step has 2 examples, one
  // micro-batch, so rank 1 has nothing to compute and still reduces with rank 0.
  WorkDir dir;
  const std::vector<std::string> epoch = {"training.max_steps=0", "training.epochs=1"};
  const auto one = train_run(dir, "one", 1, kTokens, "", with(epoch, {"batching.examples_per_micro_batch=14"}));
  const auto two = train_run(dir, "two", 2, kTokens, "", with(epoch, {"batching.examples_per_micro_batch=7"}));
  ASSERT_EQ(one.records.size(), 18u);
  expect_same_steps(two.records, one.records, 1e-5);
  EXPECT_EQ(two.records.back()["examples"], 2);
  int64_t examples = 0;
  for (const auto& r : two.records) examples += r["examples"].get<int64_t>();
  EXPECT_EQ(examples, 240);
  expect_weights_close(checkpoint_of(two.dir, 18), checkpoint_of(one.dir, 18));
}

// optimizer.fp32_grad_accumulation with data parallelism: each rank sums its
// micro-batches but the last in fp32, the sums are reduced across ranks in fp32
// and added to the reduced last micro-batch. Against one rank summing the same
// micro-batches in fp32 only the last micro-batch's reduction rounds
// differently (bf16), sharded or not, with a rank that has one micro-batch in
// the last step (its fp32 sums are zeros) and where a step has one slot.
TEST(DataParallel, Fp32SumsOfTwoRanksEqualOneRankSummingInFp32) {
  WorkDir dir;
  const std::vector<std::string> bf16 = {"model.dtype=bfloat16", "optimizer.fp32_grad_accumulation=true",
                                         "batching.balance_ranks=false", "training.max_steps=0",
                                         "training.epochs=1", "batching.examples_per_micro_batch=7"};
  const auto one = train_run(dir, "one", 1, kTokens, "", with(bf16, {"batching.grad_accumulation=4"}));
  ASSERT_EQ(one.records.size(), 9u);  // 8 steps of 28 examples, then 16 (micro-batches of 7, 7, 2)
  for (const char* shard : {"true", "false"}) {
    SCOPED_TRACE(std::string("shard_optimizer=") + shard);
    const auto two = train_run(dir, std::string("two-") + shard, 2, kTokens, "",
                               with(bf16, {"batching.grad_accumulation=2",
                                           std::string("distributed.shard_optimizer=") + shard}));
    expect_same_steps(two.records, one.records, 5e-3);
    EXPECT_EQ(two.records.back()["examples"], 16);
    // The fp32 masters (the bf16 weights are their rounding: an ulp there is as
    // large as nine steps' movement), relative to how far training moved them:
    // measured 1.1e-2, below the bf16 floor of this tiny model (one rank summing
    // in bf16 is 1.5e-2 from one rank summing in fp32; two ranks in bf16, 1.3e-2).
    const fs::path c1 = checkpoint_of(one.dir, 9), c2 = checkpoint_of(two.dir, 9);
    std::map<std::string, int64_t> numel;
    for (const auto& [key, t] : trainer::load_training_state(c1).optimizer) numel[key] = t.numel();
    const auto want = whole_state(c1, numel), got = whole_state(c2, numel);
    const auto start = models::read_safetensors(fixture("llama") / "model.safetensors");
    double diff_sq = 0, moved_sq = 0;
    for (const auto& [name, t0] : start) {
      const at::Tensor w = want.at("weight." + name), g = got.at("weight." + name);
      const at::Tensor t = t0.to(at::kBFloat16).to(at::kFloat).reshape({-1});
      diff_sq += (g - w).pow(2).sum().item<double>();
      moved_sq += (w - t).pow(2).sum().item<double>();
    }
    EXPECT_LE(std::sqrt(diff_sq), 1.25e-2 * std::sqrt(moved_sq)) << "relative L2 " << std::sqrt(diff_sq / moved_sq);
  }
}

TEST(DataParallel, PackModeTwoRanksTrainTheSameBinsAsOneRankAccumulatingTwo) {
  // Pack mode plans bins of max_tokens from windows that depend on max_tokens
  // and shuffle_window only; a step takes world x grad_accumulation bins. So 2
  // ranks x 1 and 1 rank x 2 train the same bins per step (the ranks split them
  // by tokens): the same examples, tokens and supervised tokens, step by step.
  WorkDir dir;
  const std::vector<std::string> pack = {"batching.mode=pack", "batching.max_tokens=256", "training.max_steps=5",
                                         "data.shuffle=true"};
  const auto one = train_run(dir, "one", 1, kChat, "", with(pack, {"batching.grad_accumulation=2"}));
  const auto two = train_run(dir, "two", 2, kChat, "", with(pack, {"batching.grad_accumulation=1"}));
  ASSERT_EQ(one.records.size(), 5u);
  expect_same_steps(two.records, one.records, 1e-5);
  for (const auto& r : two.records) {
    EXPECT_LE(r["tokens"].get<int64_t>(), 2 * 256);
    EXPECT_GT(r["tokens"].get<int64_t>(), 256) << "two bins per step";
    EXPECT_DOUBLE_EQ(r["padding_fraction"].get<double>(), 0.0);
  }
}

TEST(DataParallel, EvalLossOfTwoRanksEqualsOneRank) {
  // Evaluation on 240 examples, 7 per rank's micro-batch: 35 micro-batches, so the
  // last round has one and rank 1 none; the ranks' sums are gathered in rank order.
  WorkDir dir;
  const std::vector<std::string> sets = {"training.max_steps=10", "logging.eval_interval=5",
                                         "data.eval=" + fixture(kTokens).string()};
  const auto one = train_run(dir, "one", 1, kChat, "", with(sets, {"batching.examples_per_micro_batch=14"}));
  const auto two = train_run(dir, "two", 2, kChat, "", with(sets, {"batching.examples_per_micro_batch=7"}));
  expect_same_steps(two.records, one.records, 1e-5);
  const auto e1 = events(one.dir, "eval"), e2 = events(two.dir, "eval");
  ASSERT_EQ(e1.size(), 2u);  // at step 5 and at the end
  ASSERT_EQ(e2.size(), e1.size());
  for (size_t i = 0; i < e1.size(); ++i) {
    EXPECT_EQ(e2[i]["step"], e1[i]["step"]);
    EXPECT_EQ(e2[i]["eval_supervised_tokens"], e1[i]["eval_supervised_tokens"]);
    EXPECT_LE(rel(e2[i]["eval_loss"].get<double>(), e1[i]["eval_loss"].get<double>()), 1e-6)
        << e2[i]["eval_loss"] << " vs " << e1[i]["eval_loss"];
  }
  EXPECT_EQ(e1.back()["step"], 10);
}

}  // namespace
}  // namespace fptrain::distributed
