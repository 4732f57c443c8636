// Placeholder until attention/cuda/ provides the kernels (see fptrain_backend.h).
#include "attention/fptrain_backend.h"

#include <stdexcept>

namespace fptrain::attention {

#ifndef FPTRAIN_HAVE_FPTRAIN_KERNELS
bool fptrain_kernels_available() { return false; }

bool fptrain_kernels_support(int64_t, at::ScalarType) { return false; }

at::Tensor fptrain_varlen_attention(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    const VarlenSpec&) {
  throw std::runtime_error("attention backend 'fptrain' is not built yet; use torch-fa2 or reference");
}
#endif

}  // namespace fptrain::attention
