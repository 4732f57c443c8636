// Launch sequence shared by the per-dtype translation units.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "attention/cuda/bwd_dkdv_kernel.cuh"
#include "attention/cuda/bwd_dkdv_split_d.cuh"
#include "attention/cuda/bwd_dq_kernel.cuh"
#include "attention/cuda/bwd_pre_post.cuh"
#include "attention/cuda/fwd_kernel.cuh"
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

// cuTensorMapEncodeTiled through the runtime's driver entry point (no libcuda link needed).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline EncodeTiledFn tensor_map_encoder() {
  static EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found),
               "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (f == nullptr || found != cudaDriverEntryPointSuccess)
      throw std::runtime_error("attention/cuda: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// A packed [T, H, D] tensor as a 3-D tensor map (D, H, T) moved in boxes of one 128-byte line
// (64 16-bit or 32 fp32 elements) x 1 head x rows with the 128-byte swizzle: each box is one
// slab of a SlabTile. Rows past T read as zeros and are dropped on writes.
template <typename T>
CUtensorMap packed_tensor_map(const void* base, int tokens, int heads, int head_dim, int rows) {
  CUtensorMap map;
  constexpr cuuint64_t kElem = sizeof(T);
  const cuuint64_t dims[3] = {cuuint64_t(head_dim), cuuint64_t(heads), cuuint64_t(tokens)};
  const cuuint64_t strides[2] = {cuuint64_t(head_dim) * kElem, cuuint64_t(heads) * head_dim * kElem};
  const cuuint32_t box[3] = {cuuint32_t(128 / kElem), 1, cuuint32_t(rows)};  // one 128-byte line per row
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUtensorMapDataType type = std::is_same_v<T, float>            ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                                       : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = tensor_map_encoder()(&map, type, 3, const_cast<void*>(base), dims, strides, box, elem_strides,
                                          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("attention/cuda: cuTensorMapEncodeTiled failed with error " + std::to_string(int(r)));
  return map;
}

template <typename T, int D, bool kSoftcap>
void run_fwd_typed(FwdParams& p, cudaStream_t stream) {
  using Tr = FwdTraits<D>;
  launch_tile_scheduler(p.shape, TileKind::QueryBlocks, Tr::kBlockM, Tr::kBlockN, pack_max_len(D), p.tiles, stream);
  FwdTensorMaps maps;
  const VarlenShape& s = p.shape;
  maps.q = packed_tensor_map<T>(p.q, s.total_tokens, s.heads_q, D, Tr::kBlockM);
  maps.k = packed_tensor_map<T>(p.k, s.total_tokens, s.heads_kv, D, Tr::kBlockN);
  maps.v = packed_tensor_map<T>(p.v, s.total_tokens, s.heads_kv, D, Tr::kBlockN);
  auto kernel = fwd_kernel<T, D, kSoftcap>;
  set_smem(kernel, Tr::kSmemBytes);
  p.num_ctas = persistent_ctas(kernel, Tr::kThreads, Tr::kSmemBytes, p.tiles.capacity * p.shape.heads_q);
  kernel<<<p.num_ctas, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, maps);
  check_cuda(cudaGetLastError(), "forward kernel launch");
}

template <typename T, int D, bool kSoftcap>
void run_bwd_typed(BwdParams& p, cudaStream_t stream) {
  using Tr = BwdTraits<D>;
  const VarlenShape& s = p.shape;
  const int64_t rows = int64_t(s.total_tokens) * s.heads_q;
  if (!p.deterministic) {
    bwd_dq_route_kernel<D><<<unsigned((s.total_tokens + 255) / 256), 256, 0, stream>>>(p);
    check_cuda(cudaGetLastError(), "backward dQ route kernel launch");
  }
  const int64_t dsum_blocks = (rows * (D / 8) + 255) / 256;
  bwd_dsum_kernel<T, D><<<unsigned(dsum_blocks), 256, 0, stream>>>(p);
  check_cuda(cudaGetLastError(), "backward dsum kernel launch");

  launch_tile_scheduler(s, TileKind::KeyBlocks, Tr::kBlockM, Tr::kBlockN, pack_max_len(D), p.kv_tiles, stream);
  BwdTensorMaps maps;
  maps.q = packed_tensor_map<T>(p.q, s.total_tokens, s.heads_q, D, Tr::kBlockM);
  maps.dout = packed_tensor_map<T>(p.dout, s.total_tokens, s.heads_q, D, Tr::kBlockM);
  maps.k = packed_tensor_map<T>(p.k, s.total_tokens, s.heads_kv, D, Tr::kBlockN);
  maps.v = packed_tensor_map<T>(p.v, s.total_tokens, s.heads_kv, D, Tr::kBlockN);
  if (!p.deterministic) maps.dq = packed_tensor_map<float>(p.dq_accum, s.total_tokens, s.heads_q, D, Tr::kBlockM);
  auto launch_dkdv = [&](auto kernel) {
    set_smem(kernel, Tr::kSmemBytes);
    p.num_ctas_kv = persistent_ctas(kernel, Tr::kThreads, Tr::kSmemBytes, p.kv_tiles.capacity * s.heads_kv);
    kernel<<<p.num_ctas_kv, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, maps);
    check_cuda(cudaGetLastError(), "backward dK/dV kernel launch");
  };
  if (p.deterministic) {
    launch_dkdv(bwd_dkdv_kernel<T, D, false, kSoftcap>);
    using Dq = DqTraits<D>;
    launch_tile_scheduler(s, TileKind::QueryBlocks, Dq::kBlockM, Dq::kBlockN, pack_max_len(D), p.q_tiles, stream);
    auto dq_kernel = bwd_dq_kernel<T, D, kSoftcap>;
    set_smem(dq_kernel, Dq::kSmemBytes);
    p.num_ctas_q = persistent_ctas(dq_kernel, Dq::kThreads, Dq::kSmemBytes, p.q_tiles.capacity * s.heads_q);
    dq_kernel<<<p.num_ctas_q, Dq::kThreads, Dq::kSmemBytes, stream>>>(p);
    check_cuda(cudaGetLastError(), "backward dQ kernel launch");
  } else {
    launch_dkdv(bwd_dkdv_kernel<T, D, true, kSoftcap>);
    const int64_t n4 = rows * D / 4;
    if (n4 > 0) {
      const int64_t per_block = 256 * kConvertPerThread;
      bwd_dq_convert_kernel<T, D><<<unsigned((n4 + per_block - 1) / per_block), 256, 0, stream>>>(p, n4);
      check_cuda(cudaGetLastError(), "backward dQ conversion launch");
    }
  }
}

// Head-dim and softcap dispatch for element type T; launch_bf16.cu and launch_fp16.cu
// instantiate it for one type each, so the two heavy translation units compile in parallel.
template <typename T, bool kSoftcap>
void run_fwd_capped(FwdParams& p, cudaStream_t stream) {
  if (p.shape.head_dim == 256) run_fwd_typed<T, 256, kSoftcap>(p, stream);
  else if (p.shape.head_dim == 128) run_fwd_typed<T, 128, kSoftcap>(p, stream);
  else run_fwd_typed<T, 64, kSoftcap>(p, stream);
}

template <typename T, bool kSoftcap>
void run_bwd_capped(BwdParams& p, cudaStream_t stream) {
  if (p.shape.head_dim == 256) run_bwd_typed<T, 256, kSoftcap>(p, stream);
  else if (p.shape.head_dim == 128) run_bwd_typed<T, 128, kSoftcap>(p, stream);
  else run_bwd_typed<T, 64, kSoftcap>(p, stream);
}

template <typename T>
void run_fwd_for_dtype(FwdParams& p, cudaStream_t stream) {
  if (p.shape.softcap > 0.f) run_fwd_capped<T, true>(p, stream);
  else run_fwd_capped<T, false>(p, stream);
}

template <typename T>
void run_bwd_for_dtype(BwdParams& p, cudaStream_t stream) {
  if (p.shape.softcap > 0.f) run_bwd_capped<T, true>(p, stream);
  else run_bwd_capped<T, false>(p, stream);
}

}  // namespace fptrain::attention::cuda
