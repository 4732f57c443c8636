// The ATen side of the fused kernels (models/cuda/fused_kernels.h): the current
// stream and device, outputs and workspaces, dtype mapping. Called by
// models/fused_ops.cpp on tensors it has checked: CUDA, one dtype (fp32, bf16,
// fp16), one device, 2-D or 3-D as stated, last dimension contiguous.
// Compiled only with FPTRAIN_CUDA.
#pragma once

#include <utility>

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace fptrain::models::cuda {

// The kernels are compiled for sm_90a: true when `device` is an sm_90 GPU.
// False in a build without FPTRAIN_CUDA (fused_ops_cuda_stub.cpp), whose other
// functions are never called then.
bool kernels_built();
bool device_supported(const at::Device& device);

// The longest row the RMSNorm kernels take.
int64_t rms_norm_max_cols();

struct RmsNormForwardResult {
  at::Tensor sum;   // x + update * scale, when update is given
  at::Tensor y;     // the normalised, weighted output
  at::Tensor rstd;  // fp32 [rows]
};
// x, update (optional): contiguous [rows, cols]; weight: contiguous [cols].
// one_plus_weight: Gemma's form, dtype(s * rstd * (1 + float(weight))).
RmsNormForwardResult rms_norm_forward(const at::Tensor& x, const at::Tensor& update, const at::Tensor& weight,
                                      double eps, double update_scale, bool one_plus_weight);

struct RmsNormBackwardResult {
  at::Tensor grad_x, grad_update, grad_weight;  // grad_update is grad_x itself when the scale is 1
};
// s (the normalised input), grad_y, grad_sum (optional): contiguous [rows, cols].
RmsNormBackwardResult rms_norm_backward(const at::Tensor& s, const at::Tensor& weight, const at::Tensor& rstd,
                                        const at::Tensor& grad_y, const at::Tensor& grad_sum, bool want_update,
                                        double update_scale, bool want_weight, bool one_plus_weight);

// q [T, Hq, D], k [T, Hk, D] (either may be undefined; last dim contiguous),
// cos/sin [T, D] rows (last dim contiguous). Returns contiguous rotated copies
// (undefined for an undefined input); inverse = the transposed rotation.
std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                         const at::Tensor& sin, bool inverse);

// act(gate) * up, act silu or (gelu_tanh) gelu(approximate='tanh').
// gate, up: [rows, cols] with unit column stride (any row stride). Returns contiguous out.
at::Tensor swiglu_forward(const at::Tensor& gate, const at::Tensor& up, bool gelu_tanh);
// Writes grad_gate and grad_up ([rows, cols], unit column stride, any row
// stride: they may be the two halves of one [rows, 2 * cols] tensor).
void swiglu_backward(const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& grad_gate,
                     const at::Tensor& grad_up, bool gelu_tanh);

// Per row of the final logits [rows, cols] (fp32, bf16 or fp16; contiguous rows,
// any row stride): loss[row] = -log_softmax(logits.float())[row, targets[row]]
// into loss (fp32 [rows]), and with write_grad the logits overwritten by the
// loss's gradient, softmax - onehot rounded once to their dtype (fused_kernels.h's
// CrossEntropyArgs). targets: int64 [rows], each in [0, cols).
void cross_entropy_inplace(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& loss,
                           bool write_grad);

// The first level of NF4 (models/nf4.h's quantize_nf4 on CUDA): {codes [numel / 2] uint8, block
// maxima [ceil(numel / 64)] fp32} of a weight on the GPU (any floating dtype, numel a multiple of 8);
// the levels [16] fp32 on the CPU.
std::pair<at::Tensor, at::Tensor> nf4_quantize(const at::Tensor& weight, const at::Tensor& levels);

// NF4 back to `dtype` (models/nf4.h's dequantize_nf4 on CUDA): codes, absmax codes, scales and the
// offset ([] or [1]) contiguous on one device; the dynamic map [256] and the levels [16] fp32 on the
// CPU (they travel with the launch); numel a multiple of 8.
at::Tensor nf4_dequantize(const at::Tensor& codes, const at::Tensor& absmax_codes, const at::Tensor& absmax_scales,
                          const at::Tensor& absmax_offset, const at::Tensor& dynamic_map, const at::Tensor& levels,
                          int64_t numel, at::ScalarType dtype);

}  // namespace fptrain::models::cuda
