// The decoder runs every operation of its layers through its op set
// (models/decoder_ops.h): a decorator sees each one, once per layer, and
// changes nothing; an op set with gradient sinks writes the projections'
// weight gradients into their .grad views with the same bits as autograd; and
// the recomputation decorator's second run gives the first run's gradients.
#include "models/aten_ops.h"
#include "models/grad_sinks.h"
#include "models/recompute_ops.h"
#include "tests/models/model_test_util.h"

#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

namespace fptrain::models {
namespace {

std::filesystem::path llama_dir() { return testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "llama"; }

// Forwards to an inner set and counts the calls per operation.
class CountingOps : public DecoderOps {
 public:
  explicit CountingOps(std::shared_ptr<const DecoderOps> inner) : inner_(std::move(inner)) {}
  mutable std::map<std::string, int> calls;

  at::Tensor norm(const at::Tensor& x, const at::Tensor& w, double eps) const override {
    ++calls["norm"];
    return inner_->norm(x, w, eps);
  }
  AddRmsNormOutput add_norm(const at::Tensor& r, const at::Tensor& u, const at::Tensor& w, double eps,
                            double scale) const override {
    ++calls["add_norm"];
    return inner_->add_norm(r, u, w, eps, scale);
  }
  at::Tensor linear(const at::Tensor& x, const Projection& p) const override {
    ++calls["linear"];
    return inner_->linear(x, p);
  }
  RotaryOutput rotary(const at::Tensor& q, const at::Tensor& k, const RotaryTables& t) const override {
    ++calls["rotary"];
    return inner_->rotary(q, k, t);
  }
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const attention::VarlenSpec& spec) const override {
    ++calls["attention"];
    return inner_->attention(q, k, v, spec);
  }
  at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up) const override {
    ++calls["gated_activation"];
    return inner_->gated_activation(gate, up);
  }
  at::Tensor gated_activation_packed(const at::Tensor& gate_up) const override {
    ++calls["gated_activation"];
    return inner_->gated_activation_packed(gate_up);
  }
  attention::Backend backend() const override { return inner_->backend(); }
  GradSink* sink(const Projection& p) const override { return inner_->sink(p); }

 private:
  std::shared_ptr<const DecoderOps> inner_;
};

class DecoderOpSets : public ::testing::Test {
 protected:
  void SetUp() override {
    const testing::Golden g(testing::fixture_dir(FPTRAIN_FIXTURE_DIR) / "llama-golden.safetensors");
    packed_ = testing::pack({g.example(0), g.example(2), g.example(3)}, at::kCPU);
  }
  at::Tensor step_loss(CausalLM& model) {
    const LossOutput out = model.loss(packed_.input, packed_.labels);
    return out.loss_sum / out.num_supervised.to(at::kFloat);
  }
  CausalLM model_ = testing::load_model(llama_dir(), at::kFloat, at::kCPU, attention::Backend::kReference);
  testing::Packed packed_;
};

TEST_F(DecoderOpSets, EveryLayerOperationGoesThroughTheSet) {
  const at::Tensor plain = model_.logits(packed_.input);
  auto counting = std::make_shared<CountingOps>(model_.ops());
  model_.set_ops(counting);
  const at::Tensor seen = model_.logits(packed_.input);
  EXPECT_TRUE(at::equal(plain, seen));
  const int L = static_cast<int>(model_.config().num_hidden_layers);
  EXPECT_EQ(counting->calls, (std::map<std::string, int>{{"add_norm", L},
                                                         {"attention", L},
                                                         {"gated_activation", L},
                                                         {"linear", 7 * L},
                                                         {"norm", L + 1},  // and the final norm
                                                         {"rotary", L}}));
  EXPECT_THROW(model_.set_ops(nullptr), std::invalid_argument);
}

TEST_F(DecoderOpSets, GradientSinksGiveAutogradsBits) {
  step_loss(model_).backward();
  const TensorMap want = testing::grads_of(model_);

  // The trainer's arrangement: contiguous .grad views holding stale values,
  // overwritten by the sinks in the step's first backward.
  for (auto& [name, p] : model_.parameters()) p.mutable_grad() = at::full_like(p, 7.0);
  auto sinks = std::make_shared<GradSinks>(model_.projections());
  model_.set_ops(std::make_shared<AtenOps>(model_.backend(), sinks));
  EXPECT_EQ(sinks->params().size(), 7u * static_cast<size_t>(model_.config().num_hidden_layers));
  sinks->begin_step();
  step_loss(model_).backward();
  sinks->finish_step();
  for (const at::Tensor* p : sinks->params()) {
    const auto it = std::find_if(model_.parameters().begin(), model_.parameters().end(),
                                 [&](const auto& kv) { return kv.second.is_same(*p); });
    ASSERT_NE(it, model_.parameters().end());
    EXPECT_TRUE(at::equal(p->grad(), want.at(it->first))) << it->first;
  }

  // A step whose backward reaches no projection leaves zeros, not last step's values.
  sinks->begin_step();
  sinks->finish_step();
  for (const at::Tensor* p : sinks->params()) EXPECT_EQ(p->grad().abs().max().item<float>(), 0.0f);
}

TEST_F(DecoderOpSets, ARecomputationReplaysTheFirstRunsGradients) {
  // One layer run as a checkpoint runs it: first without autograd (recording),
  // then with autograd (replaying the residual add and skipping o's and down's products).
  const CausalLM::BlockFn* layer0 = nullptr;
  at::Tensor plain_out, plain_grad, replay_grad;
  auto capture = [&](int64_t layer, const at::Tensor& h, const DecoderOps& ops, const CausalLM::BlockFn& run) {
    if (layer != 0) return run(h, ops);
    layer0 = &run;
    const at::Tensor in = h.detach().requires_grad_(true);
    plain_out = run(in, ops);
    plain_out.sum().backward();
    plain_grad = in.grad().clone();

    auto recompute = std::make_shared<RecomputeOps>(ops.shared_from_this());
    {
      c10::NoGradGuard no_grad;
      recompute->begin_run();
      EXPECT_TRUE(at::equal(run(h.detach(), *recompute), plain_out));
    }
    const at::Tensor again = h.detach().requires_grad_(true);
    recompute->begin_run();
    run(again, *recompute).sum().backward();
    replay_grad = again.grad().clone();
    return run(h, ops);
  };
  model_.set_layer_runner(capture);
  model_.logits(packed_.input);
  ASSERT_NE(layer0, nullptr);
  EXPECT_TRUE(at::equal(replay_grad, plain_grad));
}

}  // namespace
}  // namespace fptrain::models
