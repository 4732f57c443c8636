// bf16 instantiations of the forward and backward launch sequences.
#include "attention/cuda/launch_template.cuh"

namespace fptrain::attention::cuda {

void run_fwd_bf16(FwdParams& p, cudaStream_t stream) { run_fwd_for_dtype<__nv_bfloat16>(p, stream); }
void run_bwd_bf16(BwdParams& p, cudaStream_t stream) { run_bwd_for_dtype<__nv_bfloat16>(p, stream); }

}  // namespace fptrain::attention::cuda
