// Entry point of our own CUDA varlen flash-attention kernels for Hopper (backend "hopper").
#pragma once

#include "attention/varlen_attention.h"

namespace fptrain::attention {

// True when this build contains the kernels and the current CUDA device can run them (sm_90).
bool hopper_kernels_available();

// True when the kernels are available and handle this head dim and dtype
// (64, 128 or 256; bf16 or fp16). Automatic backend choice asks this, not the above.
bool hopper_kernels_support(int64_t head_dim, at::ScalarType dtype);

// Differentiable varlen attention through our kernels; same contract as varlen_attention().
at::Tensor hopper_varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const VarlenSpec& spec);

// Activation checkpointing's replay (varlen_attention.h): the forward without
// autograd, returning the output and filling record; the replayed forward.
at::Tensor hopper_varlen_attention_recorded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const VarlenSpec& spec, AttentionRecord& record);
at::Tensor hopper_varlen_attention_replayed(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const VarlenSpec& spec, const AttentionRecord& record);

}  // namespace fptrain::attention
