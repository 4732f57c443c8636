// Backend "torch-fa2": the FlashAttention-2 varlen kernels bundled with LibTorch.
#pragma once

#include "attention/varlen_attention.h"

namespace fptrain::attention {

// Same contract as varlen_attention(); CUDA, fp16/bf16, head_dim a multiple of 8
// up to 256. Differentiable (LibTorch registers the backward of
// _flash_attention_forward). GQA is native: k and v are not expanded.
at::Tensor torch_fa2_varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const VarlenSpec& spec);

}  // namespace fptrain::attention
