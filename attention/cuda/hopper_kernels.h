// ATen-level wrappers of our CUDA kernels (no autograd): what the autograd function,
// the GPU tests and the benchmark call.
#pragma once

#include <ATen/ATen.h>

#include <tuple>

#include "attention/varlen_attention.h"

namespace fptrain::attention::cuda {

// Returns O [T, Hq, D] (q's dtype) and LSE [Hq, T] (fp32, natural log). D: 64, 128 or 256.
std::tuple<at::Tensor, at::Tensor> attention_forward(const at::Tensor& q, const at::Tensor& k,
                                                     const at::Tensor& v, const VarlenSpec& spec);

// Returns dQ, dK, dV. deterministic: no atomics (a separate dQ pass), bit-identical runs.
// D: 64, 128 or 256.
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const VarlenSpec& spec, bool deterministic);

// How the tile scheduler cuts the stream given by cu_seqlens (int32 [B+1] on the GPU, T
// tokens) into segments: int32 [S, 8] on the CPU, rows {start, length, first document,
// documents, document starts (4 words of a 128-bit mask)}, in stream order. For tests and reports; the kernels build them on the device.
at::Tensor tile_segments(const at::Tensor& cu_seqlens, int64_t total_tokens);

}  // namespace fptrain::attention::cuda
