// Fused element-wise operations of the decoder, each an autograd Function with
// a CUDA implementation (models/cuda/, sm_90a, built with FPTRAIN_CUDA) and a
// reference implementation in ATen (any device and dtype):
//
//   fused_rms_norm       RMSNorm                    = rms_norm(x, weight, eps)
//   fused_add_rms_norm   residual add, then RMSNorm:  sum = residual + update * scale,
//                                                     normed = rms_norm(sum, weight, eps)
//   fused_rotary         RoPE on q and k at once    = apply_rotary(q, tables), apply_rotary(k, tables)
//   fused_swiglu         SwiGLU                     = silu(gate) * up (separate, or the halves of one projection)
//
// and Gemma's forms of the norm and the gating (models/gemma_ops.h), variants of the same kernels:
//   fused_gemma_rms_norm, fused_add_gemma_rms_norm   gemma_rms_norm: (1 + w) in fp32, one rounding
//   fused_geglu          gelu(gate, approximate='tanh') * up (gelu_pytorch_tanh)
//
// Forward: both implementations compute what the model's ATen code computes
// (models/rms_norm.cpp, models/rope.cpp, CausalLM::mlp, models/gemma_ops.cpp)
// with its casts in the same places: the reference path runs exactly those
// ATen operations (equal bit for bit); the kernels compute in fp32 and round to
// the dtype where each ATen op rounds, so 16-bit results agree to the dtype's
// rounding (RoPE and SwiGLU bit for bit; RMSNorm's sum of squares is summed in
// another order).
// Backward: the gradients autograd would form through those operations, with
// the same roundings to the dtype, written out as formulas (ATen in the
// reference path, one kernel in the CUDA path). What the Functions save for the
// backward is leaner than autograd's graph of the ATen ops: RMSNorm keeps its
// input (the residual sum, an output anyway) and one fp32 per row instead of an
// fp32 copy of the input plus the normalised value; SwiGLU keeps gate and up,
// not silu(gate) as well, and on CUDA writes their gradients over them when they
// are intermediates of the graph (Liger's saving; a leaf is never written);
// RoPE keeps only the tables. First derivatives only (no double backward, no
// second backward through a SwiGLU that wrote over its inputs).
#pragma once

#include "models/rope.h"

#include <ATen/ATen.h>

#include <string>

namespace fptrain::models {

// Which implementation an op runs.
enum class FusedPath {
  kAuto,       // the CUDA kernels where they apply, else the reference
  kCuda,       // the CUDA kernels; std::invalid_argument saying why where they do not apply
  kReference,  // ATen operations (the CPU, builds without FPTRAIN_CUDA, other GPUs)
};

// The kernels are in this build (FPTRAIN_CUDA).
bool fused_cuda_kernels_built();
// Built, and `device` is a CUDA device they run on (sm_90: H100, H200).
bool fused_cuda_kernels_available(const at::Device& device);

// Where the CUDA kernels apply: CUDA tensors on a supported device, all of one
// dtype (fp32, bf16 or fp16), and for RMSNorm rows of at most 49152 elements;
// for RoPE an even head_dim and tables of the tensors' dtype. Any layout is
// taken (non-contiguous inputs are copied once); 16-byte vector loads and
// stores are used where sizes and alignment allow (hidden sizes and head_dim/2
// multiples of 8 in 16-bit, of 4 in fp32), single elements elsewhere.

// RMSNorm of x [..., H] with weight [H]: rms_norm(x, weight, eps).
at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps,
                          FusedPath path = FusedPath::kAuto);

struct AddRmsNormOutput {
  at::Tensor sum;     // residual + update * update_scale, the new residual stream [..., H]
  at::Tensor normed;  // rms_norm(sum, weight, eps) [..., H]
};
// The residual add and the RMSNorm that follows it, in one pass: `sum` is
// rounded exactly as `residual + update * update_scale` (`residual + update`
// when the scale is 1, as CausalLM writes it). Backward: the gradient of sum
// (through both outputs) goes to residual, times update_scale to update.
AddRmsNormOutput fused_add_rms_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                                    double eps, double update_scale = 1.0, FusedPath path = FusedPath::kAuto);

// Gemma's RMSNorm (Gemma2RMSNorm, models/gemma_ops.h's gemma_rms_norm):
// dtype(x32 * rsqrt(mean(x32^2) + eps) * (1 + float(weight))), the product by
// (1 + w) in fp32 and one rounding; its backward is autograd's through that
// fp32 chain (no rounding before the input gradient's cast to the dtype).
at::Tensor fused_gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps,
                                FusedPath path = FusedPath::kAuto);
// The residual add (as fused_add_rms_norm's) and Gemma's RMSNorm of the sum.
AddRmsNormOutput fused_add_gemma_rms_norm(const at::Tensor& residual, const at::Tensor& update,
                                          const at::Tensor& weight, double eps, double update_scale = 1.0,
                                          FusedPath path = FusedPath::kAuto);

struct RotaryOutput {
  at::Tensor q, k;  // contiguous, shapes of the inputs
};
// apply_rotary(q, tables) and apply_rotary(k, tables) in one launch: q [T, Hq, D],
// k [T, Hk, D], tables from rotary_tables(inv_freq, position_ids, dtype) (per
// token, so positions restarting per packed example are just rows). Out of
// place (see models/cuda/README.md for why not in place).
RotaryOutput fused_rotary(const at::Tensor& q, const at::Tensor& k, const RotaryTables& tables,
                          FusedPath path = FusedPath::kAuto);

// silu(gate) * up, gate and up [..., I] (the model's gate_proj and up_proj outputs).
at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up, FusedPath path = FusedPath::kAuto);
// The same for one projection gate_up [..., 2I] whose first half is the gate
// and second half the up projection; its gradient is one [..., 2I] tensor.
at::Tensor fused_swiglu_packed(const at::Tensor& gate_up, FusedPath path = FusedPath::kAuto);

// Gemma's gated MLP activation: gelu(gate, approximate='tanh') * up, gate and up
// [..., I]; and the same for one [..., 2I] gate_up projection (halves as above).
at::Tensor fused_geglu(const at::Tensor& gate, const at::Tensor& up, FusedPath path = FusedPath::kAuto);
at::Tensor fused_geglu_packed(const at::Tensor& gate_up, FusedPath path = FusedPath::kAuto);

}  // namespace fptrain::models
