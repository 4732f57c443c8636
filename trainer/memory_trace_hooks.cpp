#include "trainer/memory_trace_hooks.h"

#include "trainer/memory_phase.h"

#include <string>
#include <utility>
#include <vector>

namespace fptrain::trainer {
namespace mp = memory_phase;
using models::CausalLM;
using models::DecoderOps;
using models::Projection;
using models::ProjectionRole;

namespace {

const char* kind_of(const Projection& p) {
  switch (p.role) {
    case ProjectionRole::kGate:
    case ProjectionRole::kUp:
    case ProjectionRole::kGateUp:
    case ProjectionRole::kDown: return "mlp";
    default: return "attention";
  }
}

// Every op of the inner set under its kind's label.
class PhaseLabelOps : public models::ForwardingOps {
 public:
  using ForwardingOps::ForwardingOps;
  at::Tensor embed(const at::Tensor& w, const at::Tensor& ids, int64_t pad) const override {
    mp::OpScope s("embedding");
    return inner_->embed(w, ids, pad);
  }
  at::Tensor norm(const at::Tensor& x, const at::Tensor& w, double eps) const override {
    mp::OpScope s("norm");
    return inner_->norm(x, w, eps);
  }
  models::AddRmsNormOutput add_norm(const at::Tensor& r, const at::Tensor& u, const at::Tensor& w, double eps,
                                    double scale) const override {
    mp::OpScope s("norm");
    return inner_->add_norm(r, u, w, eps, scale);
  }
  at::Tensor linear(const at::Tensor& x, const Projection& p) const override {
    mp::OpScope s(kind_of(p));
    return inner_->linear(x, p);
  }
  at::Tensor replayed_linear(const at::Tensor& x, const Projection& p) const override {
    mp::OpScope s(kind_of(p));
    return inner_->replayed_linear(x, p);
  }
  std::vector<at::Tensor> linear_group(const at::Tensor& x, const std::vector<const Projection*>& ps) const override {
    mp::OpScope s(kind_of(*ps.front()));
    return inner_->linear_group(x, ps);
  }
  models::RotaryOutput rotary(const at::Tensor& q, const at::Tensor& k, const models::RotaryTables& t) const override {
    mp::OpScope s("attention");
    return inner_->rotary(q, k, t);
  }
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const attention::VarlenSpec& spec) const override {
    mp::OpScope s("attention");
    return inner_->attention(q, k, v, spec);
  }
  at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up) const override {
    mp::OpScope s("mlp");
    return inner_->gated_activation(gate, up);
  }
  at::Tensor gated_activation_packed(const at::Tensor& gate_up) const override {
    mp::OpScope s("mlp");
    return inner_->gated_activation_packed(gate_up);
  }
};

// A block's function that, run again from the backward (an activation checkpoint's
// recomputation), says so.
CausalLM::BlockFn recompute_labelled(CausalLM::BlockFn run, std::string layer) {
  return [run = std::move(run), layer = std::move(layer)](const at::Tensor& h, const DecoderOps& ops) {
    if (!mp::in_backward()) return run(h, ops);
    mp::StageScope s("recompute " + layer);
    return run(h, ops);
  };
}

CausalLM::BlockRunner labelled_layers(CausalLM::BlockRunner inner, int64_t layers) {
  return [inner = std::move(inner), layers](int64_t layer, const at::Tensor& hidden, const DecoderOps& ops,
                                            const CausalLM::BlockFn& run) {
    const std::string name = "L" + std::to_string(layer);
    if (layer == 0) label_backward_at(hidden, "backward embedding");  // after layer 0's backward
    const CausalLM::BlockFn labelled = recompute_labelled(run, name);
    at::Tensor out;
    {
      mp::StageScope s("forward " + name);
      out = inner ? inner(layer, hidden, ops, labelled) : labelled(hidden, ops);
    }
    if (layer == layers - 1) mp::set_stage("forward head/loss");  // the final norm, the head and the loss
    label_backward_at(out, "backward " + name);
    return out;
  };
}

CausalLM::BlockRunner labelled_mlps(CausalLM::BlockRunner inner) {
  return [inner = std::move(inner)](int64_t layer, const at::Tensor& normed, const DecoderOps& ops,
                                    const CausalLM::BlockFn& run) {
    // The MLP's input gradient is ready when its backward is done: the attention's comes next.
    label_backward_at(normed, "attention", /*op_only=*/true);
    const CausalLM::BlockFn labelled = recompute_labelled(run, "L" + std::to_string(layer));
    at::Tensor out = inner ? inner(layer, normed, ops, labelled) : labelled(normed, ops);
    label_backward_at(out, "mlp", /*op_only=*/true);
    return out;
  };
}

}  // namespace

void label_backward_at(const at::Tensor& t, const std::string& stage, bool op_only) {
  if (!t.defined() || !t.requires_grad()) return;
  t.register_hook([stage, op_only](const at::Tensor&) {
    if (op_only)
      mp::set_op(stage);
    else
      mp::set_stage(stage);
  });
}

ModelPhaseLabels::ModelPhaseLabels(CausalLM& model)
    : model_(model), ops_(model.ops()), layer_runner_(model.layer_runner()), mlp_runner_(model.mlp_runner()) {
  model_.set_decorated_ops(std::make_shared<PhaseLabelOps>(ops_));
  model_.set_layer_runner(labelled_layers(layer_runner_, model.config().num_hidden_layers));
  model_.set_mlp_runner(labelled_mlps(mlp_runner_));
}

ModelPhaseLabels::~ModelPhaseLabels() {
  model_.set_decorated_ops(ops_);
  model_.set_layer_runner(layer_runner_);
  model_.set_mlp_runner(mlp_runner_);
}

}  // namespace fptrain::trainer
