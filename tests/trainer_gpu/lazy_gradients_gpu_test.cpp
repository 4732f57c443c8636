// Gradients cut into pieces on CUDA: the norm kernel over a buffer cut into
// pieces (more than one launch takes, too) is the one-buffer norm bit for bit.
#include "tests/trainer/lazy_gradients_util.h"

#include <gtest/gtest.h>

namespace fptrain::optim {
namespace {

const at::Device kCuda(at::kCUDA, 0);

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

}  // namespace
}  // namespace fptrain::optim
