// fp16 instantiations of the forward and backward launch sequences.
#include "attention/cuda/launch_template.cuh"

namespace fptrain::attention::cuda {

void run_fwd_fp16(FwdParams& p, cudaStream_t stream) { run_fwd_for_dtype<__half>(p, stream); }
void run_bwd_fp16(BwdParams& p, cudaStream_t stream) { run_bwd_for_dtype<__half>(p, stream); }

}  // namespace fptrain::attention::cuda
