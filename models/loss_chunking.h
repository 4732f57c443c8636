// How the fused loss (models/linear_cross_entropy.h) cuts its supervised tokens
// into chunks: pure arithmetic on sizes, free of LibTorch, so the policy is
// tested on its own.
//
// What a chunk of n tokens holds besides the GEMM operands, per logit [n, V]:
//   ATen path (CPU, fp32/fp64, the reference): the logits, their fp32 copy and
//     fp32 log-probabilities, then the gradient: about 10 bytes in 16 bits.
//   in-place kernel (CUDA, 16 bits; models/cuda/cross_entropy_kernels.cu): only
//     the logits, which become their gradient: 2 bytes.
#pragma once

#include <cstdint>

namespace fptrain::models {

// The ATen path's chunk, and every chunk's ceiling: fp32 logits of about
// 512 MiB (1024 tokens for a vocabulary of 128256, 4096 for 32000), rounded
// down to a multiple of 128 tokens when there are that many.
int64_t default_chunk_tokens(int64_t vocab_size);

// The in-place kernel's chunk: its 16-bit logits about as large as the
// micro-batch's hidden states [tokens, hidden] in 16 bits (Liger's bound:
// tokens * hidden / vocab tokens), rounded down to a multiple of 128, at least
// kMinInplaceChunk (a narrower GEMM reads the [V, H] weight for too little
// work), at most default_chunk_tokens(vocab_size).
inline constexpr int64_t kMinInplaceChunk = 256;
int64_t inplace_chunk_tokens(int64_t tokens, int64_t hidden, int64_t vocab_size);

struct ChunkRequest {
  int64_t tokens = 0;      // of the micro-batch, supervised or not (hidden's rows)
  int64_t supervised = 0;  // the rows the loss computes
  int64_t hidden = 0, vocab = 0;
  int64_t chunk_tokens = 0;     // the caller's; <= 0: the policy's
  bool inplace_kernel = false;  // the chunks run the in-place kernel
  // The weight's gradient is returned (no sink) from a CUDA GEMM in 16 bits:
  // one chunk writes it in the model dtype, several need an fp32 [V, H] sum.
  bool model_dtype_gemm = false;
};

struct ChunkChoice {
  int64_t chunk = 1;                     // supervised tokens per chunk
  bool weight_grad_in_one_gemm = false;  // every supervised token in one chunk, model_dtype_gemm
};

// The chunk for `r`. With model_dtype_gemm and the policy's chunk, all the
// supervised tokens run as one chunk while its [S, V] transient costs no more
// than the fp32 [V, H] sum (4 bytes per weight) several chunks would need:
// S <= hidden / 2 on the ATen path (~8 bytes per logit), S <= 2 hidden with
// the kernel (2 bytes per logit).
ChunkChoice choose_chunks(const ChunkRequest& r);

}  // namespace fptrain::models
