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

#include <functional>
#include <vector>

namespace fptrain::models {

struct LoraWeights {
  at::Tensor a;  // [r, in]  lora_A
  at::Tensor b;  // [out, r] lora_B
};

// y [T, out] (the base projection's output), x [T, in]; dropout in [0, 1): PEFT's
// nn.Dropout on the adapter's input only (training mode; the mask is kept for the backward).
at::Tensor lora_add(const at::Tensor& y, const at::Tensor& x, const LoraWeights& w, double scale, double dropout);

// Several projections that read the same x (q, k, v; gate, up), each with its adapter
// and a frozen base:  y_i = x W_i^T (+ b_i) + scale * (x A_i^T) B_i^T,  as one Function:
// one GEMM for every A (x [A_1; ...; A_n]^T), each update added in its product's epilogue;
// the backward sums the input gradient in one buffer (dy_1 W_1, then every other dy_i W_i
// and the adapters' d(xA) [A_1; ...; A_n] added by the GEMMs' epilogues: no separate adds)
// and forms every dA with one GEMM. The base's weights come from `weight` (the parameter,
// or a dequantised NF4 weight) in the forward and again in the backward; the Function keeps
// only x and x [A_1; ...]^T. No dropout (with dropout each projection draws its own mask:
// lora_add per projection).
struct LoraGroupMember {
  std::function<at::Tensor()> weight;  // W_i [out_i, in], frozen
  at::Tensor bias;                     // frozen, or undefined
  LoraWeights lora;
};
std::vector<at::Tensor> lora_group(const at::Tensor& x, const std::vector<LoraGroupMember>& members, double scale);

}  // namespace fptrain::models
