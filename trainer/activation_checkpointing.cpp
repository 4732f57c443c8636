#include "trainer/activation_checkpointing.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace fptrain::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the backward pass needs besides the saved input: the layer and its parameters.
struct LayerClosure : torch::CustomClassHolder {
  LayerFunction run;
  std::vector<at::Tensor> params;
};

struct RecomputeLayer : torch::autograd::Function<RecomputeLayer> {
  // Autograd is off inside forward(): run() builds no graph and keeps no activations.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, at::TensorList params,
                            c10::intrusive_ptr<LayerClosure> closure) {
    at::Tensor out = closure->run(hidden);
    ctx->save_for_backward({hidden});
    ctx->saved_data["closure"] = c10::IValue::make_capsule(closure);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto closure = c10::static_intrusive_pointer_cast<LayerClosure>(ctx->saved_data["closure"].toCapsule());
    const at::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor out;
    {
      c10::AutoGradMode enable(true);
      out = closure->run(input);
    }
    variable_list inputs{input};
    inputs.insert(inputs.end(), closure->params.begin(), closure->params.end());
    variable_list grads = torch::autograd::grad({out}, inputs, {grad_outputs[0]}, /*retain_graph=*/false,
                                                /*create_graph=*/false, /*allow_unused=*/true);
    grads.emplace_back();  // the closure argument has no gradient
    return grads;
  }
};

}  // namespace

at::Tensor checkpointed_layer(const at::Tensor& hidden, LayerFunction run, const std::vector<at::Tensor>& params) {
  auto closure = c10::make_intrusive<LayerClosure>();
  closure->run = std::move(run);
  closure->params = params;
  return RecomputeLayer::apply(hidden, at::TensorList(params), closure);
}

}  // namespace fptrain::trainer
