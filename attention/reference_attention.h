// Backend "reference": plain ATen math attention, one sequence at a time.
#pragma once

#include "attention/varlen_attention.h"

namespace fptrain::attention {

// Same contract as varlen_attention(); inputs already checked by the dispatcher.
// Any device and dtype. Reads the boundaries from spec.cu_seqlens_cpu when given,
// else copies cu_seqlens to the host once.
at::Tensor reference_varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const VarlenSpec& spec);

}  // namespace fptrain::attention
