// The ATen side of the flat-buffer kernels: the current stream, the scratch
// buffers of the norm kernel, dtype mapping. Compiled only with FPTRAIN_CUDA;
// flat_adamw_cuda_stub.cpp stands in without it.
#include "optim/cuda/flat_adamw_cuda.h"

#include "common/cuda/torch_dtype.h"
#include "optim/blockwise8.h"
#include "optim/cuda/flat_adamw_kernels.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <stdexcept>

namespace fptrain::optim::cuda {
namespace {

Dtype dtype_of(at::ScalarType s) { return common::cuda::dtype_of(s, "optim/cuda"); }
Dtype dtype_of(const at::Tensor& t) { return dtype_of(t.scalar_type()); }

template <typename T>
T* ptr_or_null(const at::Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// The last-block reduction's kNormMaxBlocks partial sums and zeroed counter, and the
// threads' running sums for norms of more pieces than one launch takes (1 MiB). Taken
// from the caching allocator for each call, on its stream, rather than kept: a kept
// scratch is memory the step holds through every backward, where the peak is.
struct NormScratch {
  at::Tensor partials;
  at::Tensor counter;
  at::Tensor carry;
};

NormScratch norm_scratch(const at::Device& device, bool carry) {
  const auto opts = at::TensorOptions().device(device);
  NormScratch s;
  s.partials = at::empty({kNormMaxBlocks}, opts.dtype(at::kFloat));
  s.counter = at::zeros({1}, opts.dtype(at::kInt));
  if (carry) s.carry = at::empty({kNormCarryFloats}, opts.dtype(at::kFloat));
  return s;
}

}  // namespace

bool kernels_built() { return true; }

void grad_norm(const std::vector<flat::GradPiece>& pieces, at::ScalarType dtype, int64_t n, const at::Tensor& accum,
               double max_norm, const at::Tensor& norm, const at::Tensor& coef) {
  const c10::cuda::CUDAGuard guard(norm.device());
  const bool carry = pieces.size() > static_cast<size_t>(kNormMaxPieces);
  const NormScratch scratch = norm_scratch(norm.device(), carry);
  std::vector<NormPiece> table;
  for (const flat::GradPiece& p : pieces)
    table.push_back({p.grads.defined() ? p.grads.data_ptr() : nullptr, p.offset, p.offset + p.numel});
  NormArgs a;
  a.dtype = dtype_of(dtype);
  a.pieces = table.data();
  a.pieces_count = static_cast<int>(table.size());
  a.accum = ptr_or_null<const float>(accum);
  a.n = n;
  a.max_norm = static_cast<float>(max_norm);
  a.norm = norm.data_ptr<float>();
  a.coef = coef.data_ptr<float>();
  a.partials = scratch.partials.data_ptr<float>();
  a.counter = reinterpret_cast<unsigned*>(scratch.counter.data_ptr<int>());
  a.carry = carry ? scratch.carry.data_ptr<float>() : nullptr;
  flat_grad_norm(a, at::cuda::getCurrentCUDAStream());
}

void adamw_step(const at::Tensor& weights, const at::Tensor& master, const at::Tensor& exp_avg,
                const at::Tensor& exp_avg_sq, const at::Tensor& grads, const at::Tensor& accum,
                const at::Tensor& coef, const flat::AdamWScalars& scalars) {
  const c10::cuda::CUDAGuard guard(weights.device());
  StepArgs a;
  a.dtype = dtype_of(weights);
  a.weights = weights.data_ptr();
  const bool split = master.defined() && master.scalar_type() == at::kShort;
  a.master = split ? nullptr : ptr_or_null<float>(master);
  a.remainder = split ? reinterpret_cast<uint16_t*>(master.data_ptr<int16_t>()) : nullptr;
  a.exp_avg = exp_avg.data_ptr();
  a.exp_avg_sq = exp_avg_sq.data_ptr();
  a.grads = grads.data_ptr();
  a.accum = ptr_or_null<const float>(accum);
  a.coef = ptr_or_null<const float>(coef);
  a.n = weights.numel();
  a.scalars = scalars;
  flat_adamw_step(a, at::cuda::getCurrentCUDAStream());
}

void adamw8bit_step(const at::Tensor& weights, const at::Tensor& master, const flat::Moments8bit& moments,
                    const at::Tensor& grads, const at::Tensor& accum, const at::Tensor& coef,
                    const blockwise8::Scalars& scalars) {
  const c10::cuda::CUDAGuard guard(weights.device());
  Step8Args a;
  a.dtype = dtype_of(weights);
  a.weights = weights.data_ptr();
  const bool split = master.defined() && master.scalar_type() == at::kShort;
  a.master = split ? nullptr : ptr_or_null<float>(master);
  a.remainder = split ? reinterpret_cast<uint16_t*>(master.data_ptr<int16_t>()) : nullptr;
  a.exp_avg = moments.exp_avg.data_ptr<uint8_t>();
  a.exp_avg_sq = moments.exp_avg_sq.data_ptr<uint8_t>();
  a.exp_avg_absmax = moments.exp_avg_absmax.data_ptr<float>();
  a.exp_avg_sq_absmax = moments.exp_avg_sq_absmax.data_ptr<float>();
  a.grads = grads.data_ptr();
  a.accum = ptr_or_null<const float>(accum);
  a.coef = ptr_or_null<const float>(coef);
  a.n = weights.numel();
  a.scalars = scalars;
  a.books = blockwise8::code_books();
  flat_adamw8bit_step(a, at::cuda::getCurrentCUDAStream());
}

void accumulate(const at::Tensor& accum, const at::Tensor& grads) {
  const c10::cuda::CUDAGuard guard(grads.device());
  flat_accumulate(accum.data_ptr<float>(), grads.data_ptr(), dtype_of(grads), grads.numel(),
                  at::cuda::getCurrentCUDAStream());
}

}  // namespace fptrain::optim::cuda
