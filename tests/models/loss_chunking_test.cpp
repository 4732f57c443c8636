// The fused loss's chunk policy (models/loss_chunking.h): the in-place kernel's
// chunk is bounded like Liger's (about the micro-batch's 16-bit hidden states),
// floored and capped; the one-chunk rule that avoids the fp32 weight-gradient
// sum; an explicit chunk_tokens wins.
#include "models/loss_chunking.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace fptrain::models {
namespace {

// Liger's fused linear cross-entropy: next_power_of_2(ceil(BT / ceil(V / H))) tokens.
int64_t liger_chunk(int64_t tokens, int64_t hidden, int64_t vocab) {
  const int64_t inc = (vocab + hidden - 1) / hidden;
  const int64_t n = (tokens + inc - 1) / inc;
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

TEST(LossChunking, InplaceChunkIsAboutTheHiddenStatesSize) {
  EXPECT_EQ(inplace_chunk_tokens(5632, 4096, 32000), 640);    // 720.9 -> 640 (Liger: 1024)
  EXPECT_EQ(inplace_chunk_tokens(27136, 4096, 32000), 3456);  // 3473.4 -> 3456 (Liger: 4096)
  EXPECT_EQ(inplace_chunk_tokens(5632, 4096, 128256), 256);   // 179.9 -> the floor (Liger: 256)
  EXPECT_EQ(inplace_chunk_tokens(16384, 2048, 128256), 256);  // Llama-3.2-1B, 16k tokens
}

TEST(LossChunking, InplaceChunkIsFlooredAndCapped) {
  EXPECT_EQ(inplace_chunk_tokens(1, 4096, 32000), kMinInplaceChunk);
  EXPECT_EQ(inplace_chunk_tokens(0, 4096, 32000), kMinInplaceChunk);
  EXPECT_EQ(inplace_chunk_tokens(int64_t{1} << 20, 4096, 32000), default_chunk_tokens(32000));
  EXPECT_EQ(inplace_chunk_tokens(int64_t{1} << 20, 8192, 256000), default_chunk_tokens(256000));
  EXPECT_EQ(inplace_chunk_tokens(100, 64, 96), kMinInplaceChunk);
  EXPECT_EQ(inplace_chunk_tokens(100, 64, int64_t{1} << 30), 1);  // the cap wins over the floor
}

TEST(LossChunking, InplaceChunkHoldsNoMoreThanTheHiddenStatesOrLiger) {
  for (int64_t tokens : {2048, 5632, 8192, 16384, 27136, 65536}) {
    for (int64_t hidden : {2048, 3072, 4096, 8192}) {
      for (int64_t vocab : {32000, 49152, 128256, 152064, 256000}) {
        const int64_t chunk = inplace_chunk_tokens(tokens, hidden, vocab);
        SCOPED_TRACE(std::to_string(tokens) + " x " + std::to_string(hidden) + ", V " + std::to_string(vocab));
        EXPECT_EQ(chunk % 128, 0);
        EXPECT_GE(chunk, kMinInplaceChunk);
        if (chunk > kMinInplaceChunk) EXPECT_LE(chunk * vocab, tokens * hidden);  // 2 bytes each
        if (chunk > kMinInplaceChunk) EXPECT_LE(chunk, liger_chunk(tokens, hidden, vocab));
      }
    }
  }
}

ChunkRequest request(int64_t supervised, bool inplace, bool model_dtype_gemm, int64_t chunk_tokens = 0) {
  ChunkRequest r;
  r.tokens = 5632;
  r.supervised = supervised;
  r.hidden = 4096;
  r.vocab = 32000;
  r.chunk_tokens = chunk_tokens;
  r.inplace_kernel = inplace;
  r.model_dtype_gemm = model_dtype_gemm;
  return r;
}

TEST(LossChunking, PolicyChunkByPath) {
  EXPECT_EQ(choose_chunks(request(5000, true, false)).chunk, 640);
  EXPECT_EQ(choose_chunks(request(5000, false, false)).chunk, 4096);  // ATen path: default_chunk_tokens
  EXPECT_FALSE(choose_chunks(request(5000, true, false)).weight_grad_in_one_gemm);
}

// Without a sink, several chunks need an fp32 [V, H] sum (4 bytes a weight); one
// chunk of S tokens costs S x V at 2 bytes (kernel) or ~8 (ATen): one chunk up to 2H or H/2.
TEST(LossChunking, OneChunkWhileCheaperThanTheFp32Sum) {
  const ChunkChoice kernel = choose_chunks(request(8192, true, true));
  EXPECT_EQ(kernel.chunk, 8192);
  EXPECT_TRUE(kernel.weight_grad_in_one_gemm);
  const ChunkChoice kernel_long = choose_chunks(request(8193, true, true));
  EXPECT_EQ(kernel_long.chunk, 640);
  EXPECT_FALSE(kernel_long.weight_grad_in_one_gemm);
  const ChunkChoice aten = choose_chunks(request(2048, false, true));
  EXPECT_EQ(aten.chunk, 4096);  // default chunk already covers it
  EXPECT_TRUE(aten.weight_grad_in_one_gemm);
  const ChunkChoice short_batch = choose_chunks(request(300, true, true));
  EXPECT_EQ(short_batch.chunk, 640);
  EXPECT_TRUE(short_batch.weight_grad_in_one_gemm);
}

TEST(LossChunking, WithASinkChunksStaySmall) {
  // A sink (model_dtype_gemm false) adds each chunk into its slot: more chunks cost
  // only [V, H] reads and writes, no memory.
  const ChunkChoice c = choose_chunks(request(8000, true, false));
  EXPECT_EQ(c.chunk, 640);
  EXPECT_FALSE(c.weight_grad_in_one_gemm);
}

TEST(LossChunking, ExplicitChunkTokensWin) {
  EXPECT_EQ(choose_chunks(request(5000, true, true, 100)).chunk, 100);
  EXPECT_FALSE(choose_chunks(request(5000, true, true, 100)).weight_grad_in_one_gemm);
  EXPECT_TRUE(choose_chunks(request(100, true, true, 100)).weight_grad_in_one_gemm);
  EXPECT_EQ(choose_chunks(request(5000, false, false, 7)).chunk, 7);
  EXPECT_EQ(choose_chunks(request(5000, true, false, 9000)).chunk, 9000);
}

}  // namespace
}  // namespace fptrain::models
