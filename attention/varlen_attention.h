// Variable-length (packed) attention: the one interface the models call.
//
// Sequences are concatenated along the token axis with no padding. Their
// boundaries come from the batcher as cu_seqlens; nothing here infers them.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <string_view>

#include "common/enum_names.h"

namespace fptrain::attention {

enum class Backend {
  kReference,  // per-sequence math attention in ATen; any device, differentiable
  kTorchFA2,   // LibTorch's bundled FlashAttention-2 varlen (CUDA only)
  kHopper,     // our own kernels for Hopper (CUDA sm_90a); "fptrain" is accepted as its old name
};

Backend parse_backend(std::string_view name);  // "reference" | "torch-fa2" | "hopper" (alias "fptrain")
std::string_view backend_name(Backend backend);

struct VarlenSpec {
  at::Tensor cu_seqlens;   // int32 [B+1] on q's device: 0 = c0 <= c1 <= ... <= cB = T
  int64_t max_seqlen = 0;  // max_i (c[i+1] - c[i])
  bool causal = true;
  // 0: unlimited. Otherwise query i sees keys j with i - window < j <= i
  // (Hugging Face's sliding_window semantics: `window` keys including itself).
  int64_t window = 0;
  double softmax_scale = 1.0;
  // > 0: scores become softcap * tanh(scores / softcap) before the mask and the
  // softmax (Gemma 2's attn_logit_softcapping); the reference and hopper backends have it.
  double softcap = 0.0;
  // Optional host (CPU) copy of cu_seqlens. The reference backend needs the
  // boundaries on the host; passing them here spares it a device-to-host copy,
  // and lets the dispatcher validate them without a sync.
  at::Tensor cu_seqlens_cpu;
  // Set by a caller that has run validate_cu_seqlens on these boundaries
  // already (the model does, once per forward pass): the dispatcher then skips
  // the per-call host check. Direct callers leave it false.
  bool boundaries_validated = false;
};

// q [T, Hq, D], k and v [T, Hkv, D] with Hq % Hkv == 0 (GQA). Returns [T, Hq, D]
// in q's dtype. Differentiable with respect to q, k and v.
at::Tensor varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const VarlenSpec& spec, Backend backend);

// Replay for activation checkpointing. A checkpointed layer runs its forward
// twice: once without autograd, keeping only its input, and again in the
// backward to rebuild the graph. The attention's backward needs only q, k, v
// (which the recomputation rebuilds anyway, for their weights' gradients), the
// output and its logsumexp: a layer that keeps those two from the first pass
// need not run the attention's forward again.
struct AttentionRecord {
  at::Tensor out;  // [T, Hq, D]
  at::Tensor lse;  // the backend's softmax statistics; undefined: this backend cannot replay
  bool replayable() const { return out.defined() && lse.defined(); }
};

// Without autograd (call under no_grad): the attention's output, and in
// `record` what a replay needs where the backend can replay (hopper); with other
// backends the record stays empty and the recomputation runs the forward again.
at::Tensor varlen_attention_recorded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const VarlenSpec& spec, Backend backend, AttentionRecord& record);

// Differentiable with respect to q, k and v: returns record.out without
// computing it; the backward is the backend's own, on these q, k, v and the
// recorded output and statistics (the same bits as a recomputation's). Needs
// record.replayable().
at::Tensor varlen_attention_replayed(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const VarlenSpec& spec, Backend backend, const AttentionRecord& record);

// The one rule for boundaries, everywhere: a host (CPU) int32 cu_seqlens that
// starts at 0, is non-decreasing (an empty sequence is allowed: it contributes
// nothing), ends at total_tokens, and whose largest step is max_seqlen. Throws
// std::invalid_argument naming the first violation.
void validate_cu_seqlens(const at::Tensor& cu_seqlens_cpu, int64_t total_tokens,
                         int64_t max_seqlen);

}  // namespace fptrain::attention

namespace fptrain::common {
template <>
struct EnumNames<attention::Backend> {
  static constexpr std::array<EnumEntry<attention::Backend>, 4> table = {
      {{attention::Backend::kReference, "reference"},
       {attention::Backend::kTorchFA2, "torch-fa2"},
       {attention::Backend::kHopper, "hopper"},
       {attention::Backend::kHopper, "fptrain", /*alias=*/true}}};
};
}  // namespace fptrain::common
