#include "models/loss_chunking.h"

#include <algorithm>

namespace fptrain::models {

int64_t default_chunk_tokens(int64_t vocab_size) {
  constexpr int64_t kChunkLogitsBytes = int64_t{512} << 20;  // one chunk's fp32 logits
  const int64_t tokens = std::max<int64_t>(1, kChunkLogitsBytes / (4 * std::max<int64_t>(vocab_size, 1)));
  return tokens >= 128 ? tokens / 128 * 128 : tokens;
}

int64_t inplace_chunk_tokens(int64_t tokens, int64_t hidden, int64_t vocab_size) {
  const int64_t like_hidden = std::max<int64_t>(tokens, 0) * std::max<int64_t>(hidden, 0) /
                              std::max<int64_t>(vocab_size, 1);
  const int64_t chunk = std::max(kMinInplaceChunk, like_hidden / 128 * 128);
  return std::min(chunk, default_chunk_tokens(vocab_size));
}

ChunkChoice choose_chunks(const ChunkRequest& r) {
  ChunkChoice c;
  if (r.chunk_tokens > 0) c.chunk = r.chunk_tokens;
  else if (r.inplace_kernel) c.chunk = inplace_chunk_tokens(r.tokens, r.hidden, r.vocab);
  else c.chunk = default_chunk_tokens(r.vocab);
  const int64_t one_chunk_limit = r.inplace_kernel ? 2 * r.hidden : r.hidden / 2;
  if (r.model_dtype_gemm && r.chunk_tokens <= 0 && r.supervised <= one_chunk_limit)
    c.chunk = std::max(c.chunk, r.supervised);
  c.weight_grad_in_one_gemm = r.model_dtype_gemm && r.supervised <= c.chunk;
  return c;
}

}  // namespace fptrain::models
