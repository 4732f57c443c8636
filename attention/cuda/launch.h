// Host entry points of the CUDA kernels (implemented per dtype in launch_*.cu).
#pragma once

#include <cuda_runtime.h>

#include "attention/cuda/params.h"
#include "common/cuda/check.h"

namespace fptrain::attention::cuda {

// Builds the tile list and runs the forward kernel. Tile buffers must be allocated
// (tile_capacity with fwd_block_m) by the caller.
void run_fwd(FwdParams& params, Dtype dtype, cudaStream_t stream);

// Runs the backward: rowsum(dO*O), the dK/dV kernel (with atomic dQ unless
// params.deterministic), then either the fp32->dtype dQ conversion or the dQ kernel.
// dq_accum must be zeroed by the caller in the atomic mode.
void run_bwd(BwdParams& params, Dtype dtype, cudaStream_t stream);

// Runs the tile scheduler alone, with the forward's block sizes (tests read its segments).
void run_tile_scheduler(const VarlenShape& shape, TileList list, cudaStream_t stream);

using common::cuda::check_cuda;

}  // namespace fptrain::attention::cuda
