// The low-rank update of a projection (LoRA, Hu et al. 2021; PEFT's lora.Linear):
//
//   out = y + scale * (dropout(x) @ A^T) @ B^T      y = the frozen base's x @ W^T (+ bias)
//
// as one autograd Function. The forward adds the product to y in the GEMM's
// epilogue (addmm: no [T, out] temporary for the update) and keeps only the
// small [T, r] product x A^T for the backward besides x (which the base
// projection's consumers keep anyway). The backward passes dy through to the
// base and forms the adapter's gradients with the scale applied to the [r]-wide
// factors, never to a [T, out] tensor:
//   dB = scale * dy^T (x A^T)     d(xA) = scale * dy B     dA = d(xA)^T x     dx = d(xA) A
#pragma once

#include <ATen/ATen.h>

namespace fptrain::models {

struct LoraWeights {
  at::Tensor a;  // [r, in]  lora_A
  at::Tensor b;  // [out, r] lora_B
};

// y [T, out] (the base projection's output), x [T, in]; dropout in [0, 1): PEFT's
// nn.Dropout on the adapter's input only (training mode; the mask is kept for the backward).
at::Tensor lora_add(const at::Tensor& y, const at::Tensor& x, const LoraWeights& w, double scale, double dropout);

}  // namespace fptrain::models
