// SwiGLU, forward and backward (models/cuda/fused_kernels.h): out =
// act(gate) * up, and both input gradients in one pass; act is silu, or
// Gemma's gelu(approximate='tanh') (a policy type, one kernel per activation).
// Block (row, chunk of columns): grid.x walks the rows, grid.y the chunks of
// blockDim.x vectors.
// 16-byte vectors when the row length, the row strides and the pointers allow,
// single elements otherwise. Row strides are free, so gate and up may be the
// two halves of one [rows, 2 * cols] projection.
#include "models/cuda/kernel_utils.cuh"

#include <algorithm>
#include <cmath>

namespace fptrain::models::cuda {
namespace {

constexpr int kThreads = 256;

// The activations as ATen's CUDA kernels write them (fp32 opmath, the same
// operation order): value(x), and backward(da, x) = da * d value / dx.
struct Silu {
  static __device__ __forceinline__ float value(float x) { return x / (1.0f + expf(-x)); }
  static __device__ __forceinline__ float backward(float da, float x) {  // silu_backward
    const float sig = 1.0f / (1.0f + expf(-x));
    return da * sig * (1.0f + x * (1.0f - sig));
  }
};

struct GeluTanh {
  // sqrt(2/pi) and the cubic's coefficient, rounded to fp32 as ATen's constants are.
  static constexpr float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  static constexpr float kKappa = 0.044715f;
  static __device__ __forceinline__ float value(float x) {
    const float inner = kBeta * (x + kKappa * (x * x * x));
    return 0.5f * x * (1.0f + tanhf(inner));
  }
  static __device__ __forceinline__ float backward(float da, float x) {  // gelu_backward, 'tanh'
    const float x_sq = x * x;
    const float t = tanhf(kBeta * (x + kKappa * (x_sq * x)));
    const float left_derivative = 0.5f * (1.0f + t);
    const float right_derivative = 0.5f * x * (1.0f - t * t) * (kBeta * (1.0f + 3.0f * kKappa * x_sq));
    return da * (left_derivative + right_derivative);
  }
};

template <typename T, int VEC, typename Act>
__global__ void __launch_bounds__(kThreads) swiglu_fwd_kernel(const SwigluFwdArgs a) {
  const int64_t row = blockIdx.x;
  const int64_t c = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * VEC;
  if (c >= a.cols) return;
  float g[VEC], u[VEC], out[VEC];
  load_vec<T, VEC>(static_cast<const T*>(a.gate) + row * a.gate_stride + c, g);
  load_vec<T, VEC>(static_cast<const T*>(a.up) + row * a.up_stride + c, u);
#pragma unroll
  for (int k = 0; k < VEC; ++k) out[k] = mul_rn(round_to<T>(Act::value(g[k])), u[k]);  // act rounds, then the product
  store_vec<T, VEC>(static_cast<T*>(a.out) + row * a.out_stride + c, out);
}

template <typename T, int VEC, typename Act>
__global__ void __launch_bounds__(kThreads) swiglu_bwd_kernel(const SwigluBwdArgs a) {
  const int64_t row = blockIdx.x;
  const int64_t c = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * VEC;
  if (c >= a.cols) return;
  float dy[VEC], g[VEC], u[VEC], dg[VEC], du[VEC];
  load_vec<T, VEC>(static_cast<const T*>(a.grad) + row * a.grad_stride + c, dy);
  load_vec<T, VEC>(static_cast<const T*>(a.gate) + row * a.gate_stride + c, g);
  load_vec<T, VEC>(static_cast<const T*>(a.up) + row * a.up_stride + c, u);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    // autograd of act(gate) * up: grad_up = grad * act(gate) (the rounded
    // activation autograd saved), grad of the activation = grad * up rounded,
    // then the activation's backward.
    du[k] = mul_rn(dy[k], round_to<T>(Act::value(g[k])));
    dg[k] = Act::backward(round_to<T>(mul_rn(dy[k], u[k])), g[k]);
  }
  store_vec<T, VEC>(static_cast<T*>(a.grad_gate) + row * a.grad_gate_stride + c, dg);
  store_vec<T, VEC>(static_cast<T*>(a.grad_up) + row * a.grad_up_stride + c, du);
}

dim3 grid_for(int64_t rows, int64_t cols, int vec, int* threads) {
  const int64_t vectors = ceil_div(cols, vec);
  *threads = static_cast<int>(std::min<int64_t>(kThreads, ceil_div(vectors, 32) * 32));
  return dim3(static_cast<unsigned>(rows), static_cast<unsigned>(ceil_div(vectors, *threads)));
}

bool rows_ok(const void* p, int64_t stride, int vec) { return aligned16(p) && stride % vec == 0; }

// Calls f(Act{}) for the activation.
template <typename F>
void dispatch_activation(GateActivation act, F&& f) {
  switch (act) {
    case GateActivation::kSilu: return f(Silu{});
    case GateActivation::kGeluTanh: return f(GeluTanh{});
  }
  throw std::invalid_argument("models/cuda swiglu: unknown activation");
}

}  // namespace

void swiglu_forward(const SwigluFwdArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return;
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const bool vector = a.cols % V == 0 && rows_ok(a.gate, a.gate_stride, V) && rows_ok(a.up, a.up_stride, V) &&
                        rows_ok(a.out, a.out_stride, V);
    int threads = 0;
    const dim3 grid = grid_for(a.rows, a.cols, vector ? V : 1, &threads);
    dispatch_activation(a.activation, [&](auto act) {
      using Act = decltype(act);
      if (vector) swiglu_fwd_kernel<T, V, Act><<<grid, threads, 0, stream>>>(a);
      else swiglu_fwd_kernel<T, 1, Act><<<grid, threads, 0, stream>>>(a);
    });
  });
  check_cuda(cudaGetLastError(), "swiglu forward launch");
}

void swiglu_backward(const SwigluBwdArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return;
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const bool vector = a.cols % V == 0 && rows_ok(a.grad, a.grad_stride, V) &&
                        rows_ok(a.gate, a.gate_stride, V) && rows_ok(a.up, a.up_stride, V) &&
                        rows_ok(a.grad_gate, a.grad_gate_stride, V) && rows_ok(a.grad_up, a.grad_up_stride, V);
    int threads = 0;
    const dim3 grid = grid_for(a.rows, a.cols, vector ? V : 1, &threads);
    dispatch_activation(a.activation, [&](auto act) {
      using Act = decltype(act);
      if (vector) swiglu_bwd_kernel<T, V, Act><<<grid, threads, 0, stream>>>(a);
      else swiglu_bwd_kernel<T, 1, Act><<<grid, threads, 0, stream>>>(a);
    });
  });
  check_cuda(cudaGetLastError(), "swiglu backward launch");
}

}  // namespace fptrain::models::cuda
