// Rotary embeddings on q and k in one launch, forward and inverse
// (models/cuda/fused_kernels.h). One block per token: its threads take the
// (head, vector) items of every head of q and then of k; an item is VEC
// elements j of the first half of a head and the VEC elements j + head_dim/2
// they pair with, so one thread reads and writes both (in-place safe). The
// token's cos/sin rows are shared by all its heads (L1). 16-byte vectors when
// head_dim/2, the strides and the pointers allow, single elements otherwise.
#include "models/cuda/kernel_utils.cuh"

#include <algorithm>

namespace fptrain::models::cuda {
namespace {

constexpr int kMaxThreads = 256;

template <typename T, int VEC, bool kInverse>
__global__ void __launch_bounds__(kMaxThreads) rotary_kernel(const RotaryArgs a) {
  const int64_t t = blockIdx.x;
  const int half = static_cast<int>(a.head_dim / 2);
  const int vectors = half / VEC;  // per head
  const int heads0 = static_cast<int>(a.tensors[0].heads);
  const int heads = heads0 + (a.count > 1 ? static_cast<int>(a.tensors[1].heads) : 0);
  const T* cos = static_cast<const T*>(a.cos) + t * a.table_stride;
  const T* sin = static_cast<const T*>(a.sin) + t * a.table_stride;

  for (int item = threadIdx.x; item < heads * vectors; item += blockDim.x) {
    const int head_all = item / vectors;
    const int j = (item - head_all * vectors) * VEC;
    const bool second = head_all >= heads0;
    const int h = second ? head_all - heads0 : head_all;
    const RotaryTensor& x = second ? a.tensors[1] : a.tensors[0];
    const T* in = static_cast<const T*>(x.in) + t * x.stride_token + h * x.stride_head;
    T* out = static_cast<T*>(x.out) + (t * x.heads + h) * a.head_dim;

    float x1[VEC], x2[VEC], c1[VEC], c2[VEC], s1[VEC], s2[VEC], o1[VEC], o2[VEC];
    load_vec<T, VEC>(in + j, x1);
    load_vec<T, VEC>(in + j + half, x2);
    load_vec<T, VEC>(cos + j, c1);
    load_vec<T, VEC>(cos + j + half, c2);
    load_vec<T, VEC>(sin + j, s1);
    load_vec<T, VEC>(sin + j + half, s2);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      // x * cos + rotate_half(x) * sin with rotate_half(x) = [-x2, x1]: each
      // product rounds to the dtype, then their sum (three ATen ops).
      // Inverse (the transposed rotation, the backward): [x2, -x1] against the
      // sin entries of the other half.
      const float a1 = round_to<T>(mul_rn(x1[k], c1[k]));
      const float a2 = round_to<T>(mul_rn(x2[k], c2[k]));
      const float b1 = kInverse ? round_to<T>(mul_rn(x2[k], s2[k])) : round_to<T>(mul_rn(-x2[k], s1[k]));
      const float b2 = kInverse ? round_to<T>(mul_rn(-x1[k], s1[k])) : round_to<T>(mul_rn(x1[k], s2[k]));
      o1[k] = add_rn(a1, b1);
      o2[k] = add_rn(a2, b2);
    }
    store_vec<T, VEC>(out + j, o1);
    store_vec<T, VEC>(out + j + half, o2);
  }
}

bool vector_ok(const RotaryArgs& a, int vec) {
  const int64_t half = a.head_dim / 2;
  bool ok = half % vec == 0 && a.table_stride % vec == 0 && aligned16(a.cos) && aligned16(a.sin);
  for (int i = 0; i < a.count; ++i) {
    const RotaryTensor& x = a.tensors[i];
    ok = ok && x.stride_token % vec == 0 && x.stride_head % vec == 0 && aligned16(x.in) && aligned16(x.out);
  }
  return ok;
}

}  // namespace

void rotary(const RotaryArgs& a, cudaStream_t stream) {
  if (a.count < 1 || a.count > 2 || a.head_dim % 2 != 0) {
    throw std::invalid_argument("models/cuda rotary: 1 or 2 tensors with an even head_dim");
  }
  if (a.tokens == 0) return;
  int64_t heads = 0;
  for (int i = 0; i < a.count; ++i) heads += a.tensors[i].heads;
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const int vec = vector_ok(a, V) ? V : 1;
    const int64_t items = heads * (a.head_dim / 2 / vec);
    const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, ceil_div(items, 32) * 32));
    const auto grid = static_cast<unsigned>(a.tokens);
    if (vec == V) {
      if (a.inverse) rotary_kernel<T, V, true><<<grid, threads, 0, stream>>>(a);
      else rotary_kernel<T, V, false><<<grid, threads, 0, stream>>>(a);
    } else {
      if (a.inverse) rotary_kernel<T, 1, true><<<grid, threads, 0, stream>>>(a);
      else rotary_kernel<T, 1, false><<<grid, threads, 0, stream>>>(a);
    }
  });
  check_cuda(cudaGetLastError(), "rotary launch");
}

}  // namespace fptrain::models::cuda
