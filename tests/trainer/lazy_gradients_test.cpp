// Gradients cut into pieces on the CPU: the norm of a buffer cut into pieces is
// the one-buffer norm bit for bit.
#include "tests/trainer/lazy_gradients_util.h"

#include <gtest/gtest.h>

namespace fptrain::optim {
namespace {

using testing::expect_cut_norm_is_whole_norm;
using testing::random_buffer;

TEST(TrainLazyGradients, NormOfACutBufferIsTheOneBufferNorm) {
  testing::expect_norms_of_cut_buffers(at::Device(at::kCPU));
  // On the CPU the cut may fall anywhere (the lanes follow the logical index).
  const at::Tensor whole = random_buffer(3 * 16384 + 5, at::kBFloat16, at::Device(at::kCPU));
  expect_cut_norm_is_whole_norm(whole, at::Tensor(), {5, 17, 16390, 40001}, {});
}

}  // namespace
}  // namespace fptrain::optim
