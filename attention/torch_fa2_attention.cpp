// LibTorch's FA2 varlen entry point, at::_flash_attention_forward with
// cumulative sequence lengths. Window convention: FA2 lets query i see keys
// i - window_size_left <= j <= i + window_size_right, so our "window keys
// including itself" is window_size_left = window - 1 (and right = 0, causal).
#include "attention/torch_fa2_attention.h"

#include <optional>
#include <stdexcept>
#include <string>

namespace fptrain::attention {

at::Tensor torch_fa2_varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const VarlenSpec& spec) {
  if (!q.is_cuda()) {
    throw std::invalid_argument("attention backend torch-fa2 needs CUDA tensors; got " +
                                q.device().str() + " (use the reference backend there)");
  }
  if (q.scalar_type() != at::kHalf && q.scalar_type() != at::kBFloat16) {
    throw std::invalid_argument(std::string("attention backend torch-fa2 needs fp16 or bf16; got ") +
                                c10::toString(q.scalar_type()));
  }
  const int64_t head_dim = q.size(2);
  if (head_dim % 8 != 0 || head_dim > 256) {
    throw std::invalid_argument("attention backend torch-fa2 needs head_dim a multiple of 8 and at most "
                                "256; got " + std::to_string(head_dim));
  }
  std::optional<int64_t> window_left, window_right;
  if (spec.window > 0) {
    window_left = spec.window - 1;
    window_right = 0;
  }
  const at::Tensor cu = spec.cu_seqlens.contiguous();
  auto result = at::_flash_attention_forward(
      q.contiguous(), k.contiguous(), v.contiguous(), cu, cu, spec.max_seqlen, spec.max_seqlen,
      /*dropout_p=*/0.0, spec.causal, /*return_debug_mask=*/false, spec.softmax_scale, window_left,
      window_right);
  return std::get<0>(result);
}

}  // namespace fptrain::attention
