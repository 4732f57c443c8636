// The fused loss with a sink for the weight's gradient (WeightGradSink) against
// the same loss without one, in fp32 on the CPU: one chunk, several chunks, two
// micro-batches adding into the slot, nothing supervised, the tied embedding
// (whose backward adds into the slot the loss wrote), and a grad_output other
// than the announced one. The slot starts as NaN: the step's first write must
// overwrite it, never read it.
#include "models/grad_sinks.h"
#include "models/linear_cross_entropy.h"
#include "tests/models/loss_test_models.h"
#include "tests/models/model_test_util.h"

#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace fptrain::models {
namespace {

using testing::rel_err;

// Sink and no sink differ only in where grad_output is applied (per chunk in the
// GEMM, against once on the fp32 sum): fp32 rounding.
constexpr double kTolerance = 1e-6;

struct MicroBatch {
  at::Tensor hidden, targets;
};

struct Grads {
  std::vector<at::Tensor> hidden;  // per micro-batch
  at::Tensor weight;
};

std::vector<MicroBatch> micro_batches(int64_t count, int64_t T, int64_t H, int64_t V, bool supervised) {
  at::manual_seed(21);
  std::vector<MicroBatch> out;
  for (int64_t m = 0; m < count; ++m) {
    at::Tensor targets = at::randint(V, {T}, at::kLong);
    targets.narrow(0, 0, 3).fill_(kIgnoreIndex);  // a prompt
    if (!supervised) targets.fill_(kIgnoreIndex);
    out.push_back({at::randn({T, H}), targets});
  }
  return out;
}

at::Tensor nan_like(const at::Tensor& t) { return at::full(t.sizes(), std::numeric_limits<float>::quiet_NaN()); }

// Every micro-batch's loss back-propagated with `scale`, as the trainer does with
// loss_sum / denominator; with a sink its slot holds the weight's gradient.
Grads run(const std::vector<MicroBatch>& mbs, const at::Tensor& weight0, int64_t chunk, double scale, bool sink) {
  const at::Tensor weight = weight0.detach().clone().requires_grad_(true);
  const at::Tensor slot = nan_like(weight);
  WeightGradSink s;
  s.sink = GradSink{&weight, [slot](bool) { return slot; }, false};
  s.grad_scale = scale;
  Grads g;
  for (const MicroBatch& mb : mbs) {
    const at::Tensor hidden = mb.hidden.clone().requires_grad_(true);
    const at::Tensor loss = linear_cross_entropy(hidden, weight, mb.targets, 1.0, chunk, {}, 0.0, sink ? &s : nullptr);
    (loss * scale).backward();
    g.hidden.push_back(hidden.grad());
  }
  if (sink) EXPECT_FALSE(weight.grad().defined()) << "the sink's weight gradient is not returned to autograd";
  g.weight = sink ? slot : weight.grad();
  return g;
}

void expect_sink_equals_plain(int64_t micro, int64_t chunk, bool supervised, const std::string& label) {
  SCOPED_TRACE(label);
  const int64_t T = 23, H = 16, V = 37;
  const std::vector<MicroBatch> mbs = micro_batches(micro, T, H, V, supervised);
  at::manual_seed(3);
  const at::Tensor weight = 0.3 * at::randn({V, H});
  const double scale = 1.0 / 37.0;
  const Grads plain = run(mbs, weight, chunk, scale, false), sunk = run(mbs, weight, chunk, scale, true);
  for (size_t m = 0; m < mbs.size(); ++m) EXPECT_TRUE(sunk.hidden[m].equal(plain.hidden[m])) << "micro-batch " << m;
  ASSERT_TRUE(at::isfinite(sunk.weight).all().item<bool>()) << "the slot's stale values were read";
  if (!supervised) {
    EXPECT_EQ(sunk.weight.abs().max().item<float>(), 0.0f);
    return;
  }
  EXPECT_LE(rel_err(sunk.weight, plain.weight), kTolerance);
}

TEST(LinearCrossEntropySink, OneChunkEqualsTheReturnedGradient) { expect_sink_equals_plain(1, 0, true, "one chunk"); }

TEST(LinearCrossEntropySink, SeveralChunksAddIntoTheSlot) { expect_sink_equals_plain(1, 4, true, "chunks of 4"); }

TEST(LinearCrossEntropySink, MicroBatchesAddIntoTheSlot) {
  expect_sink_equals_plain(2, 0, true, "2 micro-batches, one chunk each");
  expect_sink_equals_plain(3, 5, true, "3 micro-batches, chunks of 5");
}

TEST(LinearCrossEntropySink, NothingSupervisedWritesZeros) {
  expect_sink_equals_plain(1, 4, false, "nothing supervised");
  expect_sink_equals_plain(2, 4, false, "nothing supervised, 2 micro-batches");
}

TEST(LinearCrossEntropySink, AnotherGradOutputIsALogicError) {
  const std::vector<MicroBatch> mbs = micro_batches(1, 9, 8, 11, true);
  const at::Tensor weight = at::randn({11, 8}).requires_grad_(true);
  const at::Tensor slot = nan_like(weight);
  WeightGradSink s;
  s.sink = GradSink{&weight, [slot](bool) { return slot; }, false};
  s.grad_scale = 0.25;
  const at::Tensor loss = linear_cross_entropy(mbs[0].hidden, weight, mbs[0].targets, 1.0, 0, {}, 0.0, &s);
  EXPECT_THROW((loss * 0.5).backward(), std::logic_error);
  // The scale the trainer forms in fp32 from its double passes.
  const at::Tensor again = linear_cross_entropy(mbs[0].hidden, weight, mbs[0].targets, 1.0, 0, {}, 0.0, &s);
  s.grad_scale = 1.0 / 3.0;
  EXPECT_NO_THROW((again / 3.0).backward());
}

// ---- CausalLM::loss with the head's sink (GradSinks::head()) ----

struct ModelGrads {
  at::Tensor loss;
  TensorMap grads;
};

// Two micro-batches (the second without its first example) back-propagated with
// 1 / their supervised total, as the trainer's step; with the sink the head's
// .grad starts as NaN (a kept slot is not zeroed).
ModelGrads model_step(CausalLM& model, const std::vector<testing::Packed>& mbs, int64_t chunk, bool sink) {
  testing::zero_grads(model);
  int64_t supervised = 0;
  for (const auto& mb : mbs) supervised += (mb.labels.narrow(0, 1, mb.labels.size(0) - 1) != kIgnoreIndex).sum().item<int64_t>();
  const double scale = 1.0 / static_cast<double>(std::max<int64_t>(supervised, 1));
  const at::Tensor* head = &model.head_weight();
  if (sink) head->mutable_grad() = nan_like(*head);
  GradSinks sinks({}, sink ? head : nullptr);
  sinks.begin_step(scale);
  model.set_loss_options({/*fused=*/true, chunk, sinks.head()});
  at::Tensor loss = at::zeros({});
  for (const auto& mb : mbs) {
    const LossOutput out = model.loss(mb.input, mb.labels);
    (out.loss_sum * scale).backward();
    loss += out.loss_sum.detach();
  }
  sinks.finish_step();
  model.set_loss_options({});
  return {loss, testing::grads_of(model)};
}

class HeadSink : public ::testing::TestWithParam<testing::TinyModel> {};

TEST_P(HeadSink, CausalLMGradientsEqualThePlainPath) {
  CausalLM model = testing::make_model(GetParam());
  const testing::Packed whole = testing::make_batch(model.config().vocab_size);
  for (int64_t chunk : {int64_t{0}, int64_t{7}}) {
    for (bool supervised : {true, false}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + (supervised ? "" : ", nothing supervised"));
      testing::Packed second = testing::make_batch(model.config().vocab_size);
      second.labels.narrow(0, 0, 13).fill_(kIgnoreIndex);
      std::vector<testing::Packed> mbs = {whole, second};
      if (!supervised)
        for (auto& mb : mbs) mb.labels = at::full_like(mb.labels, kIgnoreIndex);
      const ModelGrads plain = model_step(model, mbs, chunk, false), sunk = model_step(model, mbs, chunk, true);
      EXPECT_TRUE(sunk.loss.equal(plain.loss));
      for (const auto& [name, g] : plain.grads) {
        ASSERT_TRUE(at::isfinite(sunk.grads.at(name)).all().item<bool>()) << name;
        if (!supervised) EXPECT_EQ(sunk.grads.at(name).abs().max().item<float>(), 0.0f) << name;
        else EXPECT_LE(rel_err(sunk.grads.at(name), g), kTolerance) << "gradient of " << name;
      }
    }
  }
}

TEST_P(HeadSink, TheMaterialisedLossRefusesASink) {
  CausalLM model = testing::make_model(GetParam());
  const testing::Packed batch = testing::make_batch(model.config().vocab_size);
  model.head_weight().mutable_grad() = at::zeros_like(model.head_weight());
  GradSinks sinks({}, &model.head_weight());
  model.set_loss_options({/*fused=*/false, 0, sinks.head()});
  EXPECT_THROW(model.loss(batch.input, batch.labels), std::logic_error);
}

INSTANTIATE_TEST_SUITE_P(Models, HeadSink,
                         ::testing::Values(testing::TinyModel{"llama_untied", "LlamaForCausalLM", false, 1.0},
                                           testing::TinyModel{"llama_tied", "LlamaForCausalLM", true, 1.0},
                                           testing::TinyModel{"granite_tied", "GraniteForCausalLM", true, 4.0}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fptrain::models
