// Lazy gradient storage (optim/flat_gradients.h) on CUDA: the norm kernel over a
// buffer cut into pieces (more than one launch takes, too) is the one-buffer norm
// bit for bit; lazy buckets train as one resident buffer bit for bit; the
// allocator's bytes drop by the gradients after the step.
#include "tests/trainer/lazy_gradients_util.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>

namespace fptrain::optim {
namespace {

const at::Device kCuda(at::kCUDA, 0);

int64_t allocated_bytes() {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
}

TEST(TrainGpuLazyGradients, NormOfACutBufferIsTheOneBufferNorm) {
  ASSERT_TRUE(flat::cuda_kernels_built());
  testing::expect_norms_of_cut_buffers(kCuda);
  // Large enough for every one of the kernel's 1024 blocks, cut as a 7B's buckets would be.
  const int64_t n = 1024 * 256 * 8 * 3 + 128 * 5;
  const at::Tensor whole = testing::random_buffer(n, at::kBFloat16, kCuda);
  std::vector<int64_t> cuts;
  for (int64_t c = 128 * 1000; c < n; c += 128 * 1777) cuts.push_back(c);
  testing::expect_cut_norm_is_whole_norm(whole, at::Tensor(), cuts, {});
  testing::expect_cut_norm_is_whole_norm(whole, testing::random_buffer(n, at::kFloat, kCuda), cuts, {});
}

TEST(TrainGpuLazyGradients, LazyBucketsTrainAsOneResidentBuffer) {
  ASSERT_TRUE(flat::cuda_kernels_built());
  testing::expect_lazy_trains_as_resident(kCuda);
}

TEST(TrainGpuLazyGradients, AllocatedBytesDropByTheGradientsAfterTheStep) {
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  for (int i = 0; i < 8; ++i) {
    names.push_back("w" + std::to_string(i));
    const at::Tensor w = at::randn({1024, 1024}, at::TensorOptions().device(kCuda)) * 0.02;
    params.push_back(w.to(at::kBFloat16).requires_grad_(true));
  }
  DataParallelSpec dp;
  dp.bucket_elements = 2 * 1024 * 1024;  // 4 buckets of 2 parameters
  AdamW opt(names, params, OptimizerSection{}, FlatLayout::kDefaultAlignment, dp);
  const int64_t grads = opt.flat().gradients().bytes();
  ASSERT_EQ(grads, 8 * 1024 * 1024 * 2);
  c10::cuda::device_synchronize();
  const int64_t before = allocated_bytes();
  at::Tensor loss = at::zeros({}, at::TensorOptions().device(kCuda));
  for (const at::Tensor& p : params) loss = loss + p.to(at::kFloat).square().sum();
  loss.backward();
  loss = at::Tensor();
  c10::cuda::device_synchronize();
  EXPECT_GE(allocated_bytes() - before, grads) << "the backward allocated the buckets";
  opt.grad_norm(1.0);
  opt.step(1e-3);
  c10::cuda::device_synchronize();
  // The norm's scalars and the kernel's scratch may stay.
  EXPECT_LE(allocated_bytes(), before + (1 << 20)) << "the step freed the gradients";
  EXPECT_EQ(opt.flat().gradients().allocated_bytes(), 0);
}

}  // namespace
}  // namespace fptrain::optim
