// The optimizer's part in data parallelism as the trainer decides it (trainer/data_parallel.h):
// in one process, buckets of 64 MiB of the model dtype that also close between backward ops.
#include "trainer/data_parallel.h"

#include "models/parameter_layout.h"

#include <gtest/gtest.h>

namespace fptrain::trainer {
namespace {

TEST(TrainDataParallelSpec, OneProcessBucketsCloseBetweenBackwardOps) {
  const std::vector<std::string> names = {"model.embed_tokens.weight",
                                          "model.layers.0.self_attn.q_proj.weight",
                                          "model.layers.0.self_attn.k_proj.weight",
                                          "model.layers.0.self_attn.v_proj.weight",
                                          "model.layers.0.self_attn.o_proj.weight"};
  TrainConfig config;
  const optim::DataParallelSpec dp = data_parallel_spec(nullptr, config, at::kBFloat16, names);
  EXPECT_EQ(dp.comm, nullptr);
  EXPECT_FALSE(dp.shard);
  EXPECT_EQ(dp.bucket_elements, kOneProcessBucketMb << 19);
  EXPECT_EQ(dp.gradient_groups, (std::vector<int64_t>{0, 1, 1, 1, 2}));
  EXPECT_EQ(dp.gradient_groups, models::backward_op_groups(names));
  config.distributed.bucket_mb = 8;
  EXPECT_EQ(data_parallel_spec(nullptr, config, at::kFloat, names).bucket_elements, int64_t{8} << 18);
}

}  // namespace
}  // namespace fptrain::trainer
