// The advice an out-of-memory during set-up gives (trainer/memory_advice.h): the per-rank
// estimate of weights, gradients and optimizer state, and the settings that need less.
#include "trainer/memory_advice.h"

#include "common/byte_units.h"
#include "optim/adamw.h"
#include "tests/models/llama_shapes.h"
#include "tests/trainer/trainer_test_util.h"

#include <gtest/gtest.h>

namespace fptrain::trainer {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(MemoryAdvice, StateBytesPerRank) {
  const int64_t n = 1000;
  EXPECT_EQ(full_tuning_state_bytes(n, 2, true, 1, true), n * (2 + 2 + 12));   // bf16 + fp32 masters, moments
  EXPECT_EQ(full_tuning_state_bytes(n, 2, false, 1, true), n * (2 + 2 + 4));   // bf16 AdamW
  EXPECT_EQ(full_tuning_state_bytes(n, 2, true, 4, true), n * 4 + n * 12 / 4);  // sharded over 4
  EXPECT_EQ(full_tuning_state_bytes(n, 2, true, 4, false), n * 16);             // replicated
  EXPECT_EQ(full_tuning_state_bytes(n, 4, true, 1, true), n * (4 + 4 + 8));    // fp32 weights take no masters
  EXPECT_EQ(full_tuning_state_bytes(n, 2, true, 1, true, true), n * (2 + 2 + 2 + 8));  // split masters
  // 8-bit moments: a byte each and an fp32 absmax per 256 elements each (1000: 4 blocks).
  const int64_t absmax = 2 * 4 * 4;
  EXPECT_EQ(full_tuning_state_bytes(n, 2, true, 1, true, true, true), n * (2 + 2 + 2 + 2) + absmax);
  EXPECT_EQ(full_tuning_state_bytes(n, 2, true, 1, true, false, true), n * (2 + 2 + 4 + 2) + absmax);
  EXPECT_EQ(full_tuning_state_bytes(n, 2, false, 1, true, false, true), n * (2 + 2 + 2) + absmax);
  EXPECT_EQ(full_tuning_state_bytes(n, 2, true, 4, true, true, true), n * 4 + (n * 4 + absmax) / 4);
}

// Llama-3-8B with fp32 masters on one 80 GB GPU: only split masters with 8-bit moments fit
// (2 + 2 + 2 + 2 bytes per parameter and the absmax: 8.03 bytes; bf16 AdamW fits too).
TEST(MemoryAdvice, SuggestsEightBitMomentsForAnEightBModel) {
  const models::ModelConfig model = models::testing::llama_4096_shape(128256, 14336, 8);  // Llama-3-8B
  TrainConfig config;
  const std::string msg = setup_oom_message("allocating the optimizer state", config, model, 2, 1, 80 * kGiB, "");
  EXPECT_NE(msg.find("8030M parameters"), std::string::npos) << msg;
  EXPECT_NE(msg.find("about 119.66 GiB per rank"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optimizer.master_weights: split (the same training, 2 bytes less per parameter): about "
                     "104.70 GiB\n"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("optimizer.state_dtype: int8 (bitsandbytes' AdamW8bit moments, about 2 bytes per parameter instead "
                     "of 8): about 75.02 GiB\n"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("optimizer.master_weights: split and optimizer.state_dtype: int8 (fp32 masters, 8-bit moments): "
                     "about 60.06 GiB (fits"),
            std::string::npos)
      << msg;
  config.optimizer.split_masters = true;
  config.optimizer.moments = optim::Moments::k8bit;
  const std::string now = setup_oom_message("allocating the optimizer state", config, model, 2, 1, 80 * kGiB, "");
  EXPECT_NE(now.find("about 60.06 GiB per rank"), std::string::npos) << now;
  EXPECT_EQ(now.find("optimizer.state_dtype: int8"), std::string::npos) << now;
}

// optimizer.offload: cpu leaves the weights and gradients on the device (Llama-3-8B: 4 bytes
// per parameter, 29.9 GiB, fits) and puts the state and a weight copy in host memory; once
// offloaded, the state settings move no device memory and are not offered.
TEST(MemoryAdvice, OffloadKeepsOnlyWeightsAndGradientsOnTheDevice) {
  const int64_t n = 1000;
  const OffloadedBytes one = offloaded_state_bytes(n, 2, true, 1, true);
  EXPECT_EQ(one.device, n * 4);
  EXPECT_EQ(one.host, n * 12 + n * 2);  // fp32 masters and moments, the bf16 copy
  const OffloadedBytes four = offloaded_state_bytes(n, 2, true, 4, true, true);
  EXPECT_EQ(four.device, n * 4);
  EXPECT_EQ(four.host, (n * 10 + n * 2) / 4);  // each rank its shard
  const models::ModelConfig model = models::testing::llama_4096_shape(128256, 14336, 8);
  TrainConfig config;
  const std::string msg = setup_oom_message("allocating the optimizer state", config, model, 2, 1, 80 * kGiB, "");
  const OffloadedBytes off = offloaded_state_bytes(model.num_parameters(), 2, true, 1, true);
  EXPECT_NE(msg.find("optimizer.offload: cpu (masters and moments in pinned host memory: about " +
                     common::gib_text(off.host) + " of host memory per rank; the same training): about " +
                     common::gib_text(off.device) + " (fits"),
            std::string::npos)
      << msg;
  config.optimizer.offload = optim::Offload::kCpu;
  const std::string now = setup_oom_message("allocating the optimizer state", config, model, 2, 1, 80 * kGiB, "");
  EXPECT_NE(now.find("about " + common::gib_text(off.device) + " per rank for weights, gradients (the optimizer "
                     "state is in host memory)"),
            std::string::npos)
      << now;
  EXPECT_EQ(now.find("optimizer.master_weights: split"), std::string::npos) << now;
}

// optimizer.offload_update: device adds its two staging slots to the device's part: the
// estimate is what AdamW allocates for a piece of that size, in every state form; the piece is
// a bucket (a rank's slice when sharded), at most optim::kStreamChunk elements.
TEST(MemoryAdvice, TheDeviceUpdateCountsItsStaging) {
  const int64_t piece = 4 * 256;
  EXPECT_EQ(offload_staging_bytes(piece, 2, true, true, true), 2 * (piece * 4 + piece / 256 * 8));
  EXPECT_EQ(offload_staging_bytes(piece, 2, true, false, false), 2 * piece * 12);
  EXPECT_EQ(offload_staging_bytes(piece, 2, false, false, false), 2 * piece * 4);
  struct Case {
    at::ScalarType dtype;
    bool masters, split;
    optim::Moments moments;
  };
  for (const Case& c : {Case{at::kBFloat16, true, true, optim::Moments::k8bit},
                        Case{at::kBFloat16, true, false, optim::Moments::k8bit},
                        Case{at::kBFloat16, true, false, optim::Moments::kFull},
                        Case{at::kBFloat16, false, false, optim::Moments::kFull},
                        Case{at::kFloat, true, false, optim::Moments::k8bit}}) {
    optim::OptimizerSection o;
    o.master_weights = c.masters;
    o.split_masters = c.split;
    o.moments = c.moments;
    o.offload = optim::Offload::kCpu;
    o.offload_update = optim::OffloadUpdate::kDevice;
    o.stream_chunk = piece;
    optim::DataParallelSpec dp;
    dp.bucket_elements = 3 * piece;
    std::vector<at::Tensor> params = {at::zeros({64, 80}, c.dtype).requires_grad_(),
                                      at::zeros({700}, c.dtype).requires_grad_()};
    optim::AdamW opt({"a", "b"}, params, o, optim::FlatLayout::kDefaultAlignment, dp);
    const int64_t bytes = c.dtype == at::kFloat ? 4 : 2;
    EXPECT_EQ(opt.staging_bytes(),
              offload_staging_bytes(piece, bytes, c.masters, c.split, c.moments == optim::Moments::k8bit))
        << c.masters << c.split << static_cast<int>(c.moments);
  }
  TrainConfig config;  // auto buckets: 64 MiB in one process, 512 MiB with several ranks
  EXPECT_EQ(offload_piece_elements(config, 2, 1), optim::kStreamChunk);
  EXPECT_EQ(offload_piece_elements(config, 2, 16), (int64_t{512} << 19) / 16);
  config.distributed.bucket_mb = 8;
  EXPECT_EQ(offload_piece_elements(config, 2, 1), int64_t{8} << 19);
  config.distributed.bucket_mb = 1024;
  EXPECT_EQ(offload_piece_elements(config, 2, 1), optim::kStreamChunk);

  const models::ModelConfig model = models::testing::llama_4096_shape(128256, 14336, 8);
  config.optimizer.offload = optim::Offload::kCpu;
  config.optimizer.offload_update = optim::OffloadUpdate::kDevice;
  config.optimizer.split_masters = true;
  config.optimizer.moments = optim::Moments::k8bit;
  const int64_t device = model.num_parameters() * 4 + offload_staging_bytes(optim::kStreamChunk, 2, true, true, true);
  const std::string now = setup_oom_message("allocating the optimizer state", config, model, 2, 1, 80 * kGiB, "");
  EXPECT_NE(now.find("about " + common::gib_text(device) + " per rank for weights, gradients and the device "
                     "update's staging (the optimizer state is in host memory)"),
            std::string::npos)
      << now;
}

// A Llama-2-7B shape with fp32 masters on one 80 GB GPU: 100.41 GiB, what fptrain's set-up measured
// on one H200 (benchmarks/packing/results/7b_1gpu_h200_2026-11-23/logs: "device memory after
// set-up: 100.41 GiB"); bf16 AdamW or two ranks fit before activations.
TEST(MemoryAdvice, NamesTheSettingsThatFit) {
  const models::ModelConfig model = models::testing::llama_4096_shape(32000, 11008, 32);  // Llama-2-7B
  TrainConfig config;
  const std::string msg = setup_oom_message("allocating the optimizer state", config, model, 2, 1, 80 * kGiB,
                                            "CUDA out of memory.");
  EXPECT_NE(msg.find("out of memory while allocating the optimizer state"), std::string::npos) << msg;
  EXPECT_NE(msg.find("6738M parameters"), std::string::npos) << msg;
  EXPECT_NE(msg.find("about 100.41 GiB per rank"), std::string::npos) << msg;
  EXPECT_NE(msg.find("optimizer.master_weights: false (bf16 AdamW): about 50.21 GiB (fits"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 GPUs with the optimizer state sharded (torchrun --nproc_per_node 2): about 62.76 GiB (fits"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("adapter.type: qlora"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDA out of memory."), std::string::npos) << msg;

  config.adapter.type = AdapterType::kLora;  // a frozen base that does not fit: QLoRA is the way
  const std::string lora = setup_oom_message("loading the model", config, model, 2, 1, 8 * kGiB, "");
  EXPECT_NE(lora.find("The frozen base alone takes about 12.55 GiB in 16 bits"), std::string::npos) << lora;
  // 4.13 bits per projection weight, the embeddings and head in bf16 (the 70B of
  // benchmarks/train: 560 projections in 32.89 GiB).
  EXPECT_NE(lora.find("use adapter.type: qlora (about 3.60 GiB)"), std::string::npos) << lora;
  config.adapter.type = AdapterType::kQlora;
  const std::string qlora = setup_oom_message("loading the model", config, model, 2, 1, 2 * kGiB, "");
  EXPECT_NE(qlora.find("The 4-bit base takes about 3.60 GiB: it needs a GPU with more memory"), std::string::npos)
      << qlora;
}

}  // namespace
}  // namespace fptrain::trainer
