#include "trainer/activation_checkpointing.h"

#include "models/recompute_ops.h"

#include <ATen/Context.h>

#include <mutex>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace fptrain::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the backward pass needs besides the saved input: the layer, its parameters, and the
// generator's state before the first run, so that the recomputation draws the same random
// numbers (an adapter's dropout mask), as torch.utils.checkpoint's preserve_rng_state.
struct LayerClosure : torch::CustomClassHolder {
  LayerFunction run;
  std::vector<at::Tensor> params;
  at::Tensor rng_state;  // undefined: nothing random to replay
};

at::Generator generator_of(const at::Tensor& t) { return at::globalContext().defaultGenerator(t.device()); }

// Runs f with the device generator set to `state`, then puts the generator's own state back.
template <typename F>
at::Tensor with_rng_state(const at::Tensor& like, const at::Tensor& state, F f) {
  at::Generator gen = generator_of(like);
  at::Tensor current;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    current = gen.get_state();
    gen.set_state(state);
  }
  at::Tensor out = f();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(current);
  return out;
}

// The recomputed block's output is only the root of its gradients: no backward reads its values
// (the block ends in a residual add), yet it would stay alive, one tokens x hidden buffer, through
// the block's whole backward, where the step peaks (the 2026-11-27 allocator trace of a plain
// recomputation: 0.147 GiB above transformers + Liger at 19,186 tokens, this buffer). Freed here
// when no other tensor holds it or shares its storage; autograd needs only its metadata and graph edge.
void release_storage_if_sole_owner(const at::Tensor& out) {
  if (!out.defined() || !out.has_storage() || out.use_count() != 1 || out.storage().use_count() != 1) return;
  c10::StorageImpl* storage = out.storage().unsafeGetStorageImpl();
  if (storage->allocator() == nullptr) return;  // memory the tensor does not own
  storage->set_data_ptr_noswap(storage->allocator()->allocate(0));
  storage->set_nbytes(0);
}

struct RecomputeLayer : torch::autograd::Function<RecomputeLayer> {
  // Autograd is off inside forward(): run() builds no graph and keeps no activations.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, at::TensorList params,
                            c10::intrusive_ptr<LayerClosure> closure) {
    if (closure->rng_state.defined()) {  // asked for: the state to replay
      at::Generator gen = generator_of(hidden);
      std::lock_guard<std::mutex> lock(gen.mutex());
      closure->rng_state = gen.get_state();
    }
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
      out = closure->rng_state.defined()
                ? with_rng_state(input, closure->rng_state, [&] { return closure->run(input); })
                : closure->run(input);
    }
    release_storage_if_sole_owner(out);
    variable_list inputs{input};
    inputs.insert(inputs.end(), closure->params.begin(), closure->params.end());
    variable_list grads = torch::autograd::grad({out}, inputs, {grad_outputs[0]}, /*retain_graph=*/false,
                                                /*create_graph=*/false, /*allow_unused=*/true);
    grads.emplace_back();  // the closure argument has no gradient
    return grads;
  }
};

}  // namespace

at::Tensor checkpointed_layer(const at::Tensor& hidden, LayerFunction run, const std::vector<at::Tensor>& params,
                              bool preserve_rng) {
  auto closure = c10::make_intrusive<LayerClosure>();
  closure->run = std::move(run);
  closure->params = params;
  if (preserve_rng) closure->rng_state = at::empty({0}, at::kByte);  // replaced by the forward
  return RecomputeLayer::apply(hidden, at::TensorList(params), closure);
}

at::Tensor recomputed_block(const at::Tensor& hidden, const models::DecoderOps& ops,
                            const models::CausalLM::BlockFn& run, const std::vector<at::Tensor>& params,
                            Recomputation how, bool preserve_rng) {
  if (how == Recomputation::kPlain) {  // the same calls on the same ops, twice: the same bits
    std::shared_ptr<const models::DecoderOps> kept = ops.shared_from_this();
    return checkpointed_layer(
        hidden, [kept, run](const at::Tensor& h) { return run(h, *kept); }, params, preserve_rng);
  }
  auto recompute = std::make_shared<models::RecomputeOps>(ops.shared_from_this());
  return checkpointed_layer(
      hidden,
      [recompute, run](const at::Tensor& h) {
        recompute->begin_run();
        return run(h, *recompute);
      },
      params, preserve_rng);
}

}  // namespace fptrain::trainer
