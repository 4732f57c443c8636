// Launch sequence shared by the per-dtype translation units.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "attention/cuda/bwd_dkdv_kernel.cuh"
#include "attention/cuda/bwd_dq_kernel.cuh"
#include "attention/cuda/bwd_pre_post.cuh"
#include "attention/cuda/fwd_wgmma_kernel.cuh"
#include "attention/cuda/launch.h"
#include "attention/cuda/tile_scheduler.cuh"

namespace fptrain::attention::cuda {

// Persistent grid: as many CTAs as fit on the device at once, never more than items.
template <typename Kernel>
int persistent_ctas(Kernel kernel, int threads, int smem_bytes, int max_items) {
  int device = 0, sms = 0, per_sm = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes),
             "occupancy");
  int ctas = sms * (per_sm > 0 ? per_sm : 1);
  return ctas < max_items ? ctas : (max_items > 0 ? max_items : 1);
}

template <typename Kernel>
void set_smem(Kernel kernel, int bytes) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
             "cudaFuncSetAttribute(max dynamic shared memory)");
}

template <typename T, int D>
void run_fwd_typed(FwdParams& p, cudaStream_t stream) {
  using Tr = FwdTraits<D>;
  launch_tile_scheduler(p.shape, TileKind::QueryBlocks, Tr::kBlockM, Tr::kBlockN, p.tiles, stream);
  auto kernel = fwd_kernel<T, D>;
  set_smem(kernel, Tr::kSmemBytes);
  p.num_ctas = persistent_ctas(kernel, Tr::kThreads, Tr::kSmemBytes, p.tiles.capacity * p.shape.heads_q);
  kernel<<<p.num_ctas, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
  check_cuda(cudaGetLastError(), "forward kernel launch");
}

template <typename T, int D>
void run_bwd_typed(BwdParams& p, cudaStream_t stream) {
  using Tr = BwdTraits<D>;
  const int64_t rows = int64_t(p.shape.total_tokens) * p.shape.heads_q;
  const int64_t dsum_blocks = (rows * (D / 8) + 255) / 256;
  bwd_dsum_kernel<T, D><<<unsigned(dsum_blocks), 256, 0, stream>>>(p);
  check_cuda(cudaGetLastError(), "backward dsum kernel launch");

  launch_tile_scheduler(p.shape, TileKind::KeyBlocks, Tr::kBlockM, Tr::kBlockN, p.kv_tiles, stream);
  if (p.deterministic) {
    auto kernel = bwd_dkdv_kernel<T, D, false>;
    set_smem(kernel, Tr::kSmemBytes);
    p.num_ctas_kv = persistent_ctas(kernel, Tr::kThreads, Tr::kSmemBytes, p.kv_tiles.capacity * p.shape.heads_kv);
    kernel<<<p.num_ctas_kv, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
    check_cuda(cudaGetLastError(), "backward dK/dV kernel launch");

    using Dq = DqTraits<D>;
    launch_tile_scheduler(p.shape, TileKind::QueryBlocks, Dq::kBlockM, Dq::kBlockN, p.q_tiles, stream);
    auto dq_kernel = bwd_dq_kernel<T, D>;
    set_smem(dq_kernel, Dq::kSmemBytes);
    p.num_ctas_q = persistent_ctas(dq_kernel, Dq::kThreads, Dq::kSmemBytes, p.q_tiles.capacity * p.shape.heads_q);
    dq_kernel<<<p.num_ctas_q, Dq::kThreads, Dq::kSmemBytes, stream>>>(p);
    check_cuda(cudaGetLastError(), "backward dQ kernel launch");
  } else {
    auto kernel = bwd_dkdv_kernel<T, D, true>;
    set_smem(kernel, Tr::kSmemBytes);
    p.num_ctas_kv = persistent_ctas(kernel, Tr::kThreads, Tr::kSmemBytes, p.kv_tiles.capacity * p.shape.heads_kv);
    kernel<<<p.num_ctas_kv, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
    check_cuda(cudaGetLastError(), "backward dK/dV/dQ kernel launch");
    const int64_t n4 = rows * D / 4;
    if (n4 > 0) {
      bwd_dq_convert_kernel<T><<<unsigned((n4 + 255) / 256), 256, 0, stream>>>(p, n4);
      check_cuda(cudaGetLastError(), "backward dQ conversion launch");
    }
  }
}

}  // namespace fptrain::attention::cuda
