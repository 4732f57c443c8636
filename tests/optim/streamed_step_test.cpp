// optimizer.offload_update: device, the parts a CPU can check: how StreamedStep cuts ranges
// into pieces (whole absmax blocks, at most a chunk), what its staging costs, that every
// piece's state goes through the update and back with its own gradients, and that AdamW's
// 8-bit buckets stream as whole blocks. The bits of whole runs: offloaded_adamw_test.cpp.
#include "optim/adamw.h"
#include "optim/blockwise8.h"
#include "optim/streamed_step.h"
#include "tests/optim/offload_test_util.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace fptrain::optim {
namespace {

constexpr int64_t kB = blockwise8::kBlock;

// Codes (a byte per element) and an fp32 absmax per block, as the 8-bit moments keep them.
std::vector<StreamedStep::State> codes_and_absmax(int64_t n) {
  return {{at::zeros({n}, at::kByte), 1}, {at::zeros({n / kB}, at::kFloat), kB}};
}

TEST(StreamedStep, PiecesAreWholeBlocksOfAtMostAChunk) {
  // A chunk of 600 elements streams 512: two whole blocks.
  StreamedStep step({{0, 0, 4 * kB}, {4 * kB, 4 * kB, 3 * kB}}, codes_and_absmax(7 * kB), at::kCPU, 600);
  const auto& p = step.pieces();
  ASSERT_EQ(p.size(), 4u);
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 2 * kB}, {2 * kB, 2 * kB}, {4 * kB, 2 * kB}, {6 * kB, kB}};
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].local, want[i].first) << i;
    EXPECT_EQ(p[i].numel, want[i].second) << i;
    EXPECT_EQ(p[i].local % kB, 0) << i;
  }
  EXPECT_EQ(p[1].range, 0u);
  EXPECT_EQ(p[2].range, 1u);
  // A chunk below one block still streams whole blocks.
  StreamedStep tiny({{0, 0, 2 * kB}}, codes_and_absmax(2 * kB), at::kCPU, 100);
  EXPECT_EQ(tiny.pieces().size(), 2u);
}

TEST(StreamedStep, ARangeThatCutsABlockIsRefused) {
  try {
    StreamedStep step({{0, 0, kB + 128}}, codes_and_absmax(2 * kB), at::kCPU, 1 << 20);
    FAIL() << "expected an error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("cuts a block of 256 elements"), std::string::npos) << e.what();
  }
}

// Two slots, each every state's part of the largest piece: 2 x (512 codes + 2 absmax).
TEST(StreamedStep, StagingIsTwoSlotsOfTheLargestPiece) {
  const auto states = codes_and_absmax(7 * kB);
  StreamedStep step({{0, 0, 4 * kB}, {4 * kB, 4 * kB, 3 * kB}}, states, at::kCPU, 2 * kB);
  EXPECT_EQ(step.device_bytes(), 2 * (2 * kB + 2 * 4));
}

// Each piece's update sees its own gradients and staged state; what it writes reaches the
// host buffers, and each range's zero_after is zeroed after its last piece.
TEST(StreamedStep, EveryPieceGoesThroughTheUpdateAndBack) {
  const int64_t n = 6 * kB;
  const auto states = codes_and_absmax(n);
  StreamedStep step({{0, 0, 4 * kB}, {4 * kB, 4 * kB, 2 * kB}}, states, at::kCPU, kB);
  std::vector<StreamedStep::Input> inputs(2);
  const at::Tensor grads = at::arange(n, at::kFloat), zeroed = at::ones({3});
  inputs[0].grads = grads.narrow(0, 0, 4 * kB);
  inputs[1].grads = grads.narrow(0, 4 * kB, 2 * kB);
  inputs[1].zero_after.push_back(zeroed);
  int calls = 0;
  step.launch(std::move(inputs), [&](const StreamedStep::Piece& p, const at::Tensor& g, const at::Tensor& accum,
                                     const std::vector<at::Tensor>& staged) {
    ++calls;
    EXPECT_FALSE(accum.defined());
    EXPECT_EQ(g[0].item<float>(), static_cast<float>(p.flat));  // its own gradients
    ASSERT_EQ(staged.size(), 2u);
    EXPECT_EQ(staged[0].numel(), p.numel);
    EXPECT_EQ(staged[1].numel(), p.numel / kB);
    EXPECT_EQ(zeroed.sum().item<float>(), 3.0f);  // not before range 1's last piece
    staged[0].fill_(static_cast<int64_t>(p.local / kB + 1));
    staged[1].fill_(static_cast<double>(p.local));
  });
  EXPECT_EQ(calls, 6);
  EXPECT_EQ(zeroed.sum().item<float>(), 0.0f);
  for (int64_t b = 0; b < n / kB; ++b) {
    EXPECT_EQ(states[0].host[b * kB + 7].item<int64_t>(), b + 1) << b;
    EXPECT_EQ(states[1].host[b].item<float>(), static_cast<float>(b * kB)) << b;
  }
}

// AdamW's 8-bit buckets (ragged parameters) stream as whole blocks, and its staging is two
// slots of the largest piece of every state it keeps.
TEST(StreamedStep, AdamWStreamsWholeBlocksOfEveryState) {
  const testing::Shapes shapes = {{"a", {37, 29}}, {"b", {301}}, {"c", {29, 41}}, {"d", {5}}};
  const testing::Form f{"split, 8-bit", at::kBFloat16, true, true, false, Moments::k8bit};
  OptimizerSection o = testing::section_of(f, Offload::kCpu, 1e-3);
  o.offload_update = OffloadUpdate::kDevice;
  o.stream_chunk = 3 * kB;
  DataParallelSpec dp;
  dp.bucket_elements = 1000;
  AdamW opt(testing::names_of(shapes), testing::params_of(shapes, 1, 0.1, f.dtype, at::kCPU), o,
            FlatLayout::kDefaultAlignment, dp);
  ASSERT_NE(opt.streamed(), nullptr);
  int64_t largest = 0, covered = 0;
  for (const StreamedStep::Piece& p : opt.streamed()->pieces()) {
    EXPECT_EQ(p.local % kB, 0);
    EXPECT_EQ(p.numel % kB, 0);
    EXPECT_LE(p.numel, 3 * kB);
    largest = std::max(largest, p.numel);
    covered += p.numel;
  }
  EXPECT_EQ(covered, opt.flat().layout().total());
  // Remainders (2 bytes), two code bytes, two absmax per block.
  EXPECT_EQ(opt.staging_bytes(), 2 * (largest * 4 + largest / kB * 8));
}

TEST(StreamedStep, TheDeviceUpdateNeedsOffload) {
  OptimizerSection o;
  o.offload_update = OffloadUpdate::kDevice;
  const testing::Shapes shapes = {{"a", {4, 4}}};
  try {
    AdamW opt(testing::names_of(shapes), testing::params_of(shapes, 1, 0.1, at::kFloat, at::kCPU), o);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.offload_update: device needs optimizer.offload: cpu"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace fptrain::optim
