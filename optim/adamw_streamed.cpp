// AdamW with optimizer.offload_update: device: the host state streamed through the device
// (optim/streamed_step.h) and updated there by the step of offload none, piece by piece.
#include "optim/adamw.h"

#include "optim/blockwise8.h"

namespace fptrain::optim {

// The host buffers the update streams, in the order device_update() reads them: the masters
// (fp32, or the split remainders; none without master weights), the moments (8-bit: their
// codes, then the absmax, one per block).
std::vector<StreamedStep::State> AdamW::streamed_states() const {
  std::vector<StreamedStep::State> states;
  if (master_.defined()) states.push_back({master_, 1});
  states.push_back({exp_avg_, 1});
  states.push_back({exp_avg_sq_, 1});
  if (moments_8bit()) {
    states.push_back({exp_avg_absmax_, blockwise8::kBlock});
    states.push_back({exp_avg_sq_absmax_, blockwise8::kBlock});
  }
  return states;
}

void AdamW::make_streamed() {
  std::vector<StreamedStep::Range> ranges;
  for (const Range& r : ranges_) ranges.push_back({r.flat, r.local, r.numel});
  const int64_t chunk = options_.stream_chunk > 0 ? options_.stream_chunk : kStreamChunk;
  streamed_ = std::make_unique<StreamedStep>(std::move(ranges), streamed_states(), flat_->weights().device(), chunk);
}

void AdamW::launch_streamed(const flat::AdamWHyper& h, const at::Tensor& coef) {
  streamed_->launch(offload_inputs(),
                    [this, h, coef](const StreamedStep::Piece& p, const at::Tensor& grads, const at::Tensor& accum,
                                    const std::vector<at::Tensor>& staged) {
                      device_update(p, grads, accum, staged, coef, h);
                    });
  offload_waited_ = 0;
}

// The step of offload none on piece p: the model's weights in place on the device, the state
// staged. A piece is whole blocks, and both steps work element by element (8-bit: block by
// block), so the pieces give the bits of one range.
void AdamW::device_update(const StreamedStep::Piece& p, const at::Tensor& grads, const at::Tensor& accum,
                          const std::vector<at::Tensor>& staged, const at::Tensor& coef, const flat::AdamWHyper& h) {
  const at::Tensor weights = flat_->weights().narrow(0, p.flat, p.numel);
  size_t j = 0;
  const at::Tensor master = master_.defined() ? staged[j++] : at::Tensor();
  const at::Tensor& m = staged[j];
  const at::Tensor& v = staged[j + 1];
  if (moments_8bit())
    flat::adamw8bit_step(weights, master, {m, v, staged[j + 2], staged[j + 3]}, grads, accum, coef, h);
  else
    flat::adamw_step(weights, master, m, v, grads, accum, coef, h);
}

}  // namespace fptrain::optim
