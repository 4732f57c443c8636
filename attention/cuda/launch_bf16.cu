// bf16 instantiations of the forward and backward launch sequences.
#include "attention/cuda/launch_template.cuh"

namespace fptrain::attention::cuda {

void run_fwd_bf16(FwdParams& p, cudaStream_t stream) {
  if (p.shape.head_dim == 128) run_fwd_typed<__nv_bfloat16, 128>(p, stream);
  else run_fwd_typed<__nv_bfloat16, 64>(p, stream);
}

void run_bwd_bf16(BwdParams& p, cudaStream_t stream) {
  if (p.shape.head_dim == 128) run_bwd_typed<__nv_bfloat16, 128>(p, stream);
  else run_bwd_typed<__nv_bfloat16, 64>(p, stream);
}

}  // namespace fptrain::attention::cuda
