// optimizer.offload: cpu on CUDA: the host update (the CPU reference step, which equals the
// kernels bit for bit) trains as the device's AdamW bit for bit in every state form, with
// the forward reading each bucket once it waited for it and not before; the optimizer
// state leaves the device (pinned host memory); and a whole training run equals the
// device's.
#include "optim/adamw.h"
#include "tests/optim/offload_test_util.h"
#include "tests/trainer/trainer_test_util.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <gtest/gtest.h>

namespace fptrain::optim {
namespace {

using testing::expect_same;
using testing::Form;

// Layer-like shapes: 7 buckets of 2^16 elements, ragged ends.
const testing::Shapes kShapes = {
    {"embed", {300, 200}}, {"w1", {200, 333}}, {"b1", {333}}, {"w2", {333, 200}}, {"norm", {200}},
    {"w3", {200, 410}},    {"w4", {410, 200}}, {"head", {200, 300}}};

std::vector<std::string> names() { return testing::names_of(kShapes); }

std::vector<at::Tensor> params_like(at::ScalarType dtype) { return testing::params_of(kShapes, 3, 0.05, dtype, at::kCUDA); }

at::Tensor loss(const std::vector<at::Tensor>& p, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const at::Tensor ids = at::randint(0, 300, {64}, gen).to(at::kCUDA), targets = at::randint(0, 300, {64}, gen).to(at::kCUDA);
  // One-hot rows rather than index_select, whose backward adds with atomics (not repeatable).
  const at::Tensor rows = at::one_hot(ids, 300).to(p[0].scalar_type()).mm(p[0]);
  at::Tensor h = at::tanh(rows.mm(p[1]) + p[2]).mm(p[3]) * p[4];
  h = at::tanh(h.mm(p[5])).mm(p[6]);
  return -h.mm(p[7]).to(at::kFloat).log_softmax(1).gather(1, targets.unsqueeze(1)).sum();
}

const std::vector<Form> kForms = {
    {"bf16, fp32 masters", at::kBFloat16, true, false, false, Moments::kFull},
    {"bf16, fp32 masters, fp32 sums", at::kBFloat16, true, false, true, Moments::kFull},
    {"bf16, split masters", at::kBFloat16, true, true, false, Moments::kFull},
    {"bf16, split masters, 8-bit moments", at::kBFloat16, true, true, false, Moments::k8bit},
    {"bf16, fp32 masters, 8-bit moments, fp32 sums", at::kBFloat16, true, false, true, Moments::k8bit},
    {"bf16, no masters", at::kBFloat16, false, false, false, Moments::kFull},
    {"bf16, no masters, 8-bit moments", at::kBFloat16, false, false, false, Moments::k8bit},
    {"fp32 model", at::kFloat, true, false, false, Moments::kFull},
};

std::unique_ptr<AdamW> make(const Form& f, Offload offload) {
  const OptimizerSection o = testing::section_of(f, offload, 1e-3);
  DataParallelSpec dp;
  dp.bucket_elements = 1 << 16;
  return std::make_unique<AdamW>(names(), params_like(f.dtype), o, FlatLayout::kDefaultAlignment, dp);
}

void train(AdamW& opt, const Form& f, int from, int to) { testing::train(opt, loss, f.fp32_sums, 1e-3, from, to); }

TEST(OffloadedOptimizerGpu, TrainsAsTheDeviceAdamWBitForBitInEveryForm) {
  ASSERT_TRUE(at::hasCUDA());
  for (const Form& f : kForms) {
    SCOPED_TRACE(f.name);
    auto device = make(f, Offload::kNone), host = make(f, Offload::kCpu);
    ASSERT_GT(host->flat().layout().buckets().size(), 4u);
    train(*device, f, 0, 4);
    train(*host, f, 0, 4);
    expect_same(*device, *host);
    EXPECT_EQ(host->flat().gradients().gathered().count_nonzero().item<int64_t>(), 0);  // freed after their copy
  }
}

// Bucket by bucket: right after its wait, a kernel reading bucket k sees the final weights.
TEST(OffloadedOptimizerGpu, TheForwardReadsEachBucketOnceWaitedFor) {
  const Form& f = kForms[2];
  auto device = make(f, Offload::kNone), host = make(f, Offload::kCpu);
  train(*device, f, 0, 4);
  train(*host, f, 0, 3);
  // Step 4 (as train() takes it) launched, then the buckets read one wait at a time.
  testing::launch_step(*host, loss, f.fp32_sums, 1e-3, 3);
  for (const FlatBucket& b : host->flat().layout().buckets()) {
    host->wait_for_weights(b.offset + b.size);
    const at::Tensor seen = host->flat().weights().narrow(0, b.offset, b.size).clone();  // on the current stream
    EXPECT_TRUE(at::equal(seen, device->flat().weights().narrow(0, b.offset, b.size))) << "bucket at " << b.offset;
  }
}

// The state is pinned host memory; the device holds the weights, gradients and a scalar.
TEST(OffloadedOptimizerGpu, TheOptimizerStateLeavesTheDevice) {
  const Form& f = kForms[0];
  auto allocated = [] {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
  };
  for (const Offload offload : {Offload::kNone, Offload::kCpu}) {
    std::vector<at::Tensor> params = params_like(f.dtype);
    const int64_t before = allocated();
    {
      OptimizerSection o;
      o.offload = offload;
      DataParallelSpec dp;
      dp.bucket_elements = 1 << 16;
      AdamW opt(names(), params, o, FlatLayout::kDefaultAlignment, dp);
      const int64_t flat = opt.flat().weights().nbytes() + opt.flat().gradients().bytes();
      const int64_t added = allocated() - before;  // the flat buffers less the parameters' old storage
      if (offload == Offload::kCpu) {
        EXPECT_TRUE(opt.master().is_cpu() && opt.master().is_pinned());
        EXPECT_TRUE(opt.exp_avg().is_cpu() && opt.exp_avg_sq().is_pinned());
        EXPECT_LE(added, flat + (1 << 20)) << "device bytes beyond the weights and gradients";
        EXPECT_GE(opt.host_bytes(), opt.master_bytes() + opt.moment_bytes());
      } else {
        // The parameters' old blocks are freed as they move into the weight buffer, each rounded by the
        // caching allocator: allow the same 1 MiB as above.
        EXPECT_GE(added + (1 << 20), opt.master_bytes() + opt.moment_bytes());
      }
    }
  }
}

// A whole run on CUDA (reference attention, deterministic): the same losses, norms and model.
TEST(OffloadedOptimizerGpu, ATrainingRunEqualsTheDeviceOptimizersBitForBit) {
  using namespace fptrain::trainer::testing;
  TempDir dir;
  const std::string extra =
      "batching:\n  examples_per_micro_batch: 4\n  grad_accumulation: 2\n"
      "optimizer:\n  lr: 2.0e-3\n  grad_clip: 0.5\n  master_weights: split\n"
      "training:\n  max_steps: 6\n  deterministic: true\n"
      "logging:\n  log_interval: 1\n";
  for (const std::string name : {"none", "cpu"}) {
    const std::string cfg = dir.write(name + ".yaml", base_config(dir / name, "tokens.jsonl", extra));
    const CommandResult r =
        run_fptrain({"train", cfg, "--set", "device=cuda", "--set", "model.dtype=bfloat16", "--set",
                     "model.path=" + fixture("llama64").string(), "--set", "optimizer.offload=" + name});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  trainer::testing::expect_same_training(dir / "none", dir / "cpu", 6);
}

}  // namespace
}  // namespace fptrain::optim
