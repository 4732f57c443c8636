// Dispatch on dtype; the heavy instantiations live in launch_bf16.cu / launch_fp16.cu so
// they compile in parallel.
#include "attention/cuda/launch.h"

#include <stdexcept>
#include <string>

namespace fptrain::attention::cuda {

void run_fwd_bf16(FwdParams& p, cudaStream_t stream);
void run_fwd_fp16(FwdParams& p, cudaStream_t stream);
void run_bwd_bf16(BwdParams& p, cudaStream_t stream);
void run_bwd_fp16(BwdParams& p, cudaStream_t stream);

void run_fwd(FwdParams& p, Dtype dtype, cudaStream_t stream) {
  if (dtype == Dtype::kBFloat16) run_fwd_bf16(p, stream);
  else run_fwd_fp16(p, stream);
}

void run_bwd(BwdParams& p, Dtype dtype, cudaStream_t stream) {
  if (dtype == Dtype::kBFloat16) run_bwd_bf16(p, stream);
  else run_bwd_fp16(p, stream);
}

}  // namespace fptrain::attention::cuda
