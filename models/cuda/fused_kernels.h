// The launch interface of the fused element-wise kernels of the decoder
// (RMSNorm with the residual add, rotary embeddings, SwiGLU; Gemma's forms of
// the norm and the gating as variants of the same kernels): raw pointers,
// sizes and a stream. models/cuda/fused_ops_cuda.cpp checks the tensors,
// allocates outputs and workspaces and calls these; models/fused_ops.cpp holds
// the autograd Functions. Free of LibTorch, so the .cu files compile fast.
//
// Every kernel computes in fp32 and rounds to the tensor dtype exactly where
// the ATen composition it replaces rounds (each ATen op on a 16-bit tensor
// computes in fp32 and rounds its result), so forward results agree with the
// reference to the tensor dtype's rounding. Strides are in elements; the last
// dimension is always contiguous.
#pragma once

#include "common/cuda/dtype.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace fptrain::models::cuda {

using common::cuda::Dtype;

// ---- RMSNorm (models/cuda/rms_norm_kernels.cu) -------------------------------

// Per row of `cols` elements (row stride = cols):
//   with residual: s = residual + update * update_scale, rounded as ATen rounds
//                  `residual + update * scale` (the product, then the sum);
//                  written to sum_out.
//   without:       s = x.
//   rstd = rsqrt(mean(float(s)^2) + eps)           (fp32, written to rstd[row])
//   y    = weight * dtype(float(s) * rstd)         (models/rms_norm.cpp's casts)
//   one_plus_weight (Gemma2RMSNorm, models/gemma_ops.cpp):
//   y    = dtype(float(s) * rstd * (1 + float(weight)))   (fp32 throughout, one rounding)
struct RmsNormFwdArgs {
  Dtype dtype = Dtype::kBFloat16;
  const void* x = nullptr;       // the residual stream (with update) or the input
  const void* update = nullptr;  // nullptr: the plain variant
  const void* weight = nullptr;  // [cols]
  void* sum_out = nullptr;       // with update: [rows, cols]
  void* y = nullptr;             // [rows, cols]
  float* rstd = nullptr;         // [rows], fp32; may be nullptr
  int64_t rows = 0, cols = 0;
  float eps = 1e-6f;
  float update_scale = 1.0f;
  bool one_plus_weight = false;  // Gemma's form
};
void rms_norm_forward(const RmsNormFwdArgs& args, cudaStream_t stream);

// Backward, for the normalised input s (the sum with a residual) and its saved rstd:
//   g     = dtype(grad_y * weight)                          (autograd's rounding)
//   ds    = dtype(g * rstd - s * rstd^3 * mean(g * s))      (fp32 inside)
//   ds    = dtype(ds + grad_sum)                            (when grad_sum is given)
//   grad_x = ds; grad_update = dtype(ds * update_scale)     (when grad_update is given)
//   grad_weight = dtype(sum over rows of grad_y * dtype(s * rstd))   in fp32, in two
//   stages: each block sums its rows into dw_partial[block], a second kernel sums
//   the blocks in index order (deterministic for a device and shape).
// one_plus_weight (Gemma): nothing rounds before the input gradient's cast, as
// autograd differentiates the fp32 chain:
//   g     = float(grad_y) * (1 + float(weight))                 (fp32)
//   grad_weight = dtype(sum over rows of grad_y * (s * rstd))   (fp32 products)
struct RmsNormBwdArgs {
  Dtype dtype = Dtype::kBFloat16;
  const void* s = nullptr;          // [rows, cols]
  const void* weight = nullptr;     // [cols]
  const float* rstd = nullptr;      // [rows]
  const void* grad_y = nullptr;     // [rows, cols]
  const void* grad_sum = nullptr;   // [rows, cols] or nullptr
  void* grad_x = nullptr;           // [rows, cols]
  void* grad_update = nullptr;      // [rows, cols] or nullptr
  float update_scale = 1.0f;
  void* grad_weight = nullptr;      // [cols] or nullptr (no weight gradient)
  float* dw_partial = nullptr;      // [dw_blocks, cols] fp32 workspace (with grad_weight)
  int64_t dw_blocks = 0;            // from rms_norm_backward_blocks
  int64_t rows = 0, cols = 0;
  bool one_plus_weight = false;     // Gemma's form (as in the forward)
};
// The number of blocks the backward runs (= rows of dw_partial) for these
// arguments on the current device: the resident blocks of the whole GPU, at
// most `rows`. Depends only on the device, dtype, cols and alignment.
int64_t rms_norm_backward_blocks(const RmsNormBwdArgs& args);
void rms_norm_backward(const RmsNormBwdArgs& args, cudaStream_t stream);

// The longest row the RMSNorm kernels take: the backward keeps a row's
// weight-gradient partial in shared memory (fp32) when rows exceed 1024 vectors.
int64_t rms_norm_kernel_max_cols();

// ---- rotary embeddings (models/cuda/rotary_kernels.cu) ----------------------

// One tensor to rotate: in [tokens, heads, head_dim] with the given strides,
// out contiguous [tokens, heads, head_dim]. out may equal in when in is contiguous.
struct RotaryTensor {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t heads = 0;
  int64_t stride_token = 0, stride_head = 0;  // of in
};
// transformers' rotate_half convention, with h = head_dim / 2, j < h:
//   forward: out[j]   = dtype(dtype(x[j] * cos[j])     + dtype(-x[j+h] * sin[j]))
//            out[j+h] = dtype(dtype(x[j+h] * cos[j+h]) + dtype(x[j] * sin[j+h]))
//   inverse (the backward, the transposed rotation):
//            out[j]   = dtype(dtype(x[j] * cos[j])     + dtype(x[j+h] * sin[j+h]))
//            out[j+h] = dtype(dtype(x[j+h] * cos[j+h]) + dtype(-x[j] * sin[j]))
// cos/sin: per token rows of head_dim elements in the tensors' dtype
// (RotaryTables, broadcast over heads), row stride table_stride.
struct RotaryArgs {
  Dtype dtype = Dtype::kBFloat16;
  RotaryTensor tensors[2];
  int count = 0;  // 1 or 2 (q and k in one launch)
  const void* cos = nullptr;
  const void* sin = nullptr;
  int64_t table_stride = 0;
  int64_t tokens = 0, head_dim = 0;
  bool inverse = false;
};
void rotary(const RotaryArgs& args, cudaStream_t stream);

// ---- SwiGLU and GELU-tanh gating (models/cuda/swiglu_kernels.cu) -------------

// The activation of the gate, in fp32 as ATen's CUDA kernels write it:
//   kSilu      silu(x) = x / (1 + exp(-x))                                 (Llama, ...)
//   kGeluTanh  gelu(x, approximate='tanh')
//              = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))           (Gemma's gelu_pytorch_tanh)
enum class GateActivation : uint8_t { kSilu, kGeluTanh };

// out = dtype(dtype(act(gate)) * up).
// Rows of `cols` elements; each tensor has its own row stride, so gate and up
// may be the two halves of one [rows, 2 * cols] projection.
struct SwigluFwdArgs {
  Dtype dtype = Dtype::kBFloat16;
  GateActivation activation = GateActivation::kSilu;
  const void* gate = nullptr;
  const void* up = nullptr;
  void* out = nullptr;
  int64_t gate_stride = 0, up_stride = 0, out_stride = 0;
  int64_t rows = 0, cols = 0;
};
void swiglu_forward(const SwigluFwdArgs& args, cudaStream_t stream);

// As autograd differentiates act(gate) * up:
//   grad_up   = dtype(grad * dtype(act(gate)))
//   grad_gate = dtype(act_backward(dtype(grad * up), gate))   (ATen's silu_backward / gelu_backward)
//   silu:      da * sig * (1 + gate * (1 - sig)),  sig = 1 / (1 + exp(-gate))
//   gelu-tanh: da * (0.5 (1 + t) + 0.5 gate (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 gate^2)),
//              t = tanh(sqrt(2/pi) (gate + 0.044715 gate^3))
struct SwigluBwdArgs {
  Dtype dtype = Dtype::kBFloat16;
  GateActivation activation = GateActivation::kSilu;
  const void* grad = nullptr;
  const void* gate = nullptr;
  const void* up = nullptr;
  void* grad_gate = nullptr;
  void* grad_up = nullptr;
  int64_t grad_stride = 0, gate_stride = 0, up_stride = 0, grad_gate_stride = 0, grad_up_stride = 0;
  int64_t rows = 0, cols = 0;
};
void swiglu_backward(const SwigluBwdArgs& args, cudaStream_t stream);

// ---- NF4 quantisation and dequantisation (models/cuda/nf4_kernels.cu) --------

// The first level of bitsandbytes' NF4 (models/nf4.h's quantize_nf4) in one pass: per
// block of 64 weights its absolute maximum, each weight times the maximum's reciprocal
// (the last block, when shorter: divided by it, which was clamped to >= 1e-38),
// clamped to [-1, 1], the index of the nearest level by the midpoints (bucketize). The
// ATen composition's codes and maxima bit for bit. numel a multiple of 8.
struct Nf4QuantArgs {
  Dtype dtype = Dtype::kBFloat16;
  const void* weight = nullptr;  // [numel]
  uint8_t* codes = nullptr;      // [numel / 2], first index in the high nibble
  float* absmax = nullptr;       // [ceil(numel / 64)]
  int64_t numel = 0;
  float levels[16] = {};
};
void nf4_quantize(const Nf4QuantArgs& args, cudaStream_t stream);


// bitsandbytes' NF4 with double-quantised block maxima (models/nf4.h) back to the
// weight's dtype, in one pass: per block of 64 weights
//   absmax = dynamic_map[absmax_code] * absmax_scale[block / 256] + offset   (fp32, unfused)
//   w      = dtype(nf4_level[index] * absmax)                               (fp32 product, one rounding)
// exactly what dequantize_nf4's ATen composition computes. numel a multiple of 8.
struct Nf4DequantArgs {
  Dtype dtype = Dtype::kBFloat16;
  const uint8_t* codes = nullptr;         // [numel / 2], first index in the high nibble
  const uint8_t* absmax_codes = nullptr;  // [numel / 64]
  const float* absmax_scales = nullptr;   // [ceil(numel / 64 / 256)]
  const float* absmax_offset = nullptr;   // [1], on the device
  void* out = nullptr;                    // [numel]
  int64_t numel = 0;
  float dynamic_map[256] = {};            // by value: the launch carries them, nothing to copy first
  float levels[16] = {};
};
void nf4_dequantize(const Nf4DequantArgs& args, cudaStream_t stream);

// ---- cross-entropy with the gradient in place (models/cuda/cross_entropy_kernels.cu)

// Per row of the final logits x (the model dtype, after the divisor and soft-cap),
// as ATen's fp32 log_softmax and autograd form them:
//   m = max x, log_sum = log(sum exp(x - m)), logp = (x - m) - log_sum   (fp32)
//   loss[row] = -logp[target]                                            (fp32)
//   with write_grad, x is overwritten by d loss / d x rounded once:
//   dtype(exp(logp)), and dtype(exp(logp[target]) - 1) at the target.
// A target outside [0, cols) gives a NaN loss. Rows are contiguous, row stride free.
struct CrossEntropyArgs {
  Dtype dtype = Dtype::kBFloat16;
  void* logits = nullptr;           // [rows, cols], row stride row_stride: in logits, out gradient
  const int64_t* targets = nullptr;  // [rows]
  float* loss = nullptr;            // [rows]
  int64_t rows = 0, cols = 0, row_stride = 0;
  bool write_grad = true;
};
void cross_entropy_inplace(const CrossEntropyArgs& args, cudaStream_t stream);

}  // namespace fptrain::models::cuda
