// Backend "hopper" in a build without CUDA (FPTRAIN_CUDA=OFF; CMake links this file instead
// of attention/cuda/'s others): the backend reports itself unavailable (see hopper_backend.h).
#include "attention/hopper_backend.h"

#include <stdexcept>

namespace fptrain::attention {

bool hopper_kernels_available() { return false; }

bool hopper_kernels_support(int64_t, at::ScalarType) { return false; }

at::Tensor hopper_varlen_attention(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const VarlenSpec&) {
  throw std::runtime_error(
      "attention backend 'hopper' is not in this build (built without CUDA); use torch-fa2 or reference");
}
at::Tensor hopper_varlen_attention_recorded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const VarlenSpec& spec, AttentionRecord&) {
  return hopper_varlen_attention(q, k, v, spec);
}

at::Tensor hopper_varlen_attention_replayed(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const VarlenSpec& spec, const AttentionRecord&) {
  return hopper_varlen_attention(q, k, v, spec);
}
}  // namespace fptrain::attention
