// Argument checks, workspaces and launches for the forward and backward kernels.
#include "attention/cuda/hopper_kernels.h"

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention/cuda/launch.h"
#include "common/cuda/torch_dtype.h"
#include "attention/cuda/tile_sizes.h"

namespace fptrain::attention::cuda {
namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("attention/cuda/hopper_kernels.cpp: " + what);
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const VarlenSpec& spec) {
  if (!q.is_cuda() || !k.is_cuda() || !v.is_cuda()) fail("q, k and v must be CUDA tensors");
  if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3) fail("q, k, v must be [T, H, D]");
  if (q.scalar_type() != at::kBFloat16 && q.scalar_type() != at::kHalf)
    fail("dtype must be bfloat16 or float16, got " + std::string(c10::toString(q.scalar_type())));
  if (k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type()) fail("q, k, v dtypes differ");
  const int64_t d = q.size(2);
  if (d != 64 && d != 128 && d != 256) fail("head dim must be 64, 128 or 256, got " + std::to_string(d));
  if (k.size(2) != d || v.size(2) != d) fail("k/v head dim differs from q's");
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0)) fail("q, k, v must have the same token count");
  if (k.size(1) != v.size(1)) fail("k and v head counts differ");
  if (k.size(1) == 0 || q.size(1) % k.size(1) != 0) fail("Hq must be a multiple of Hkv");
  if (q.size(0) >= (int64_t(1) << 31) / 2) fail("too many tokens for 32-bit positions");
  const at::Tensor& cu = spec.cu_seqlens;
  if (!cu.defined() || cu.scalar_type() != at::kInt || cu.dim() != 1 || cu.size(0) < 1)
    fail("cu_seqlens must be an int32 vector [B+1]");
  if (cu.device() != q.device()) fail("cu_seqlens must be on q's device");
  if (spec.window < 0) fail("window must be >= 0");
  if (!(spec.softcap >= 0.0) || !std::isfinite(spec.softcap)) fail("softcap must be finite and >= 0");
}

VarlenShape make_shape(const at::Tensor& q, const at::Tensor& k, const VarlenSpec& spec, const at::Tensor& cu) {
  VarlenShape s;
  s.cu_seqlens = cu.data_ptr<int>();
  s.batch = int(cu.size(0) - 1);
  s.total_tokens = int(q.size(0));
  s.heads_q = int(q.size(1));
  s.heads_kv = int(k.size(1));
  s.head_dim = int(q.size(2));
  s.causal = spec.causal;
  s.window = spec.causal ? int(spec.window) : 0;  // a window applies to causal attention only
  s.scale = float(spec.softmax_scale);
  s.softcap = float(spec.softcap);
  return s;
}

// Tile list storage: B segments (16-byte aligned at the front), [capacity] tiles, num_tiles,
// the work counter, then the scheduler's scratch.
TileList make_tile_list(at::Tensor& storage, int capacity, int batch, const at::Device& device) {
  const int64_t segment_ints = int64_t(sizeof(Segment) / 4) * batch, tile_ints = 2 * int64_t(capacity);
  storage = at::empty({segment_ints + tile_ints + 2 + tile_list_scratch_ints(batch)},
                      at::TensorOptions().dtype(at::kInt).device(device));
  int* base = storage.data_ptr<int>();
  TileList list;
  list.segments = reinterpret_cast<Segment*>(base);
  list.tiles = reinterpret_cast<Tile*>(base + segment_ints);
  list.num_tiles = base + segment_ints + tile_ints;
  list.next_item = list.num_tiles + 1;
  list.scratch = list.next_item + 1;
  list.capacity = capacity;
  return list;
}

Dtype dtype_of(const at::Tensor& t) { return common::cuda::dtype_of(t.scalar_type(), "attention/cuda"); }

// q, k, v and cu_seqlens after the checks, contiguous; they must live until the launches are enqueued.
struct Inputs {
  at::Tensor q, k, v, cu;
};

Inputs checked_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const VarlenSpec& spec) {
  check_inputs(q, k, v, spec);
  return {q.contiguous(), k.contiguous(), v.contiguous(), spec.cu_seqlens.contiguous()};
}

// The fields FwdParams and BwdParams share: the shape and the q, k, v pointers.
template <typename Params>
void set_inputs(Params& p, const Inputs& in, const VarlenSpec& spec) {
  p.shape = make_shape(in.q, in.k, spec, in.cu);
  p.q = in.q.data_ptr();
  p.k = in.k.data_ptr();
  p.v = in.v.data_ptr();
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> attention_forward(const at::Tensor& q_in, const at::Tensor& k_in,
                                                     const at::Tensor& v_in, const VarlenSpec& spec) {
  const Inputs in = checked_inputs(q_in, k_in, v_in, spec);
  const at::Tensor& q = in.q;
  at::Tensor o = at::empty_like(q);
  at::Tensor lse = at::empty({q.size(1), q.size(0)}, q.options().dtype(at::kFloat));
  if (q.size(0) == 0 || in.cu.size(0) < 2) return {o, lse};

  FwdParams p;
  set_inputs(p, in, spec);
  p.o = o.data_ptr();
  p.lse = lse.data_ptr<float>();
  at::Tensor tiles;
  p.tiles = make_tile_list(tiles, tile_capacity(p.shape.total_tokens, p.shape.batch, fwd_block_m(p.shape.head_dim)),
                           p.shape.batch, q.device());
  run_fwd(p, dtype_of(q), at::cuda::getCurrentCUDAStream());
  return {o, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward(
    const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out_in, const at::Tensor& lse, const VarlenSpec& spec, bool deterministic) {
  const Inputs in = checked_inputs(q_in, k_in, v_in, spec);
  const at::Tensor& q = in.q;
  at::Tensor o = out_in.contiguous(), dout = dout_in.to(q.scalar_type()).contiguous();
  if (dout.sizes() != q.sizes() || o.sizes() != q.sizes()) fail("dout and out must have q's shape");
  if (lse.scalar_type() != at::kFloat || lse.dim() != 2 || lse.size(0) != q.size(1) || lse.size(1) != q.size(0))
    fail("lse must be float32 [Hq, T]");
  at::Tensor dq = at::empty_like(q), dk = at::empty_like(in.k), dv = at::empty_like(in.v);
  if (q.size(0) == 0 || in.cu.size(0) < 2) return {dq.zero_(), dk.zero_(), dv.zero_()};

  BwdParams p;
  set_inputs(p, in, spec);
  const int d = p.shape.head_dim;
  p.o = o.data_ptr();
  p.dout = dout.data_ptr();
  at::Tensor lse_c = lse.contiguous();
  p.lse = lse_c.data_ptr<float>();
  at::Tensor dsum = at::empty_like(lse_c);
  p.dsum = dsum.data_ptr<float>();
  at::Tensor dq_accum, dq_route;
  if (!deterministic) {
    // Zeroed by the dsum kernel only where the dK/dV kernel adds into it (see bwd_pre_post.cuh).
    dq_accum = at::empty(q.sizes(), q.options().dtype(at::kFloat));
    p.dq_accum = dq_accum.data_ptr<float>();
    dq_route = at::empty({q.size(0)}, q.options().dtype(at::kByte));
    p.dq_via_buffer = dq_route.data_ptr<unsigned char>();
  }
  p.dq = dq.data_ptr();
  p.dk = dk.data_ptr();
  p.dv = dv.data_ptr();
  p.deterministic = deterministic;
  at::Tensor kv_tiles, q_tiles;
  p.kv_tiles = make_tile_list(kv_tiles, tile_capacity(p.shape.total_tokens, p.shape.batch, bwd_block_n(d)),
                              p.shape.batch, q.device());
  if (deterministic)
    p.q_tiles = make_tile_list(q_tiles, tile_capacity(p.shape.total_tokens, p.shape.batch, dq_block_m(d)),
                               p.shape.batch, q.device());
  run_bwd(p, dtype_of(q), at::cuda::getCurrentCUDAStream());
  return {dq, dk, dv};
}

at::Tensor tile_segments(const at::Tensor& cu_seqlens, int64_t total_tokens) {
  if (!cu_seqlens.is_cuda() || cu_seqlens.scalar_type() != at::kInt || cu_seqlens.dim() != 1 || cu_seqlens.size(0) < 2)
    fail("tile_segments: cu_seqlens must be an int32 CUDA vector [B+1], B >= 1");
  const at::Tensor cu = cu_seqlens.contiguous();
  VarlenShape shape;
  shape.cu_seqlens = cu.data_ptr<int>();
  shape.batch = int(cu.size(0) - 1);
  shape.total_tokens = int(total_tokens);
  at::Tensor storage;
  TileList list = make_tile_list(storage, tile_capacity(shape.total_tokens, shape.batch, fwd_block_m(128)),
                                 shape.batch, cu.device());
  run_tile_scheduler(shape, list, at::cuda::getCurrentCUDAStream());
  // The table is in stream order; its rows cover the B documents (the count is not stored).
  constexpr int64_t kFields = sizeof(Segment) / 4;
  at::Tensor table = storage.narrow(0, 0, kFields * shape.batch).view({shape.batch, kFields}).cpu();
  const auto rows = table.accessor<int, 2>();
  int64_t count = 0, covered = 0;
  while (count < shape.batch && covered < shape.batch) covered += std::max(rows[count++][3], 1);
  return table.narrow(0, 0, count).clone();
}

}  // namespace fptrain::attention::cuda
