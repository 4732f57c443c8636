// optimizer.offload_update: device on CUDA: the state stays in pinned host memory and is
// streamed through the device, where the kernel of offload none updates it. It trains as the
// device's AdamW bit for bit (8-bit moments with split masters first, every other form too,
// buckets cut into several pieces or not), with lazy buckets freed under it; the forward reads
// each bucket once it waited for it; a run resumes mid-way across none, host and device
// updates (one checkpoint format); the device keeps only the weights, gradients and staging;
// and a whole training run equals the device's.
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

// Ragged layer-like shapes, 6 buckets of 2^16 elements or more.
const testing::Shapes kShapes = {{"embed", {300, 200}}, {"w1", {200, 333}}, {"b1", {333}},  {"w2", {333, 200}},
                                 {"norm", {200}},       {"w3", {200, 410}}, {"w4", {410, 200}}, {"head", {200, 300}}};

at::Tensor loss(const std::vector<at::Tensor>& p, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const at::Tensor ids = at::randint(0, 300, {64}, gen).to(at::kCUDA);
  const at::Tensor targets = at::randint(0, 300, {64}, gen).to(at::kCUDA);
  // One-hot rows rather than index_select, whose backward adds with atomics (not repeatable).
  const at::Tensor rows = at::one_hot(ids, 300).to(p[0].scalar_type()).mm(p[0]);
  at::Tensor h = at::tanh(rows.mm(p[1]) + p[2]).mm(p[3]) * p[4];
  h = at::tanh(h.mm(p[5])).mm(p[6]);
  return -h.mm(p[7]).to(at::kFloat).log_softmax(1).gather(1, targets.unsqueeze(1)).sum();
}

const Form kInt8Split = {"bf16, split masters, 8-bit moments", at::kBFloat16, true, true, false, Moments::k8bit};
const std::vector<Form> kForms = {
    kInt8Split,
    {"bf16, fp32 masters, 8-bit moments, fp32 sums", at::kBFloat16, true, false, true, Moments::k8bit},
    {"bf16, split masters, 8-bit moments, fp32 sums", at::kBFloat16, true, true, true, Moments::k8bit},
    {"bf16, no masters, 8-bit moments", at::kBFloat16, false, false, false, Moments::k8bit},
    {"bf16, split masters", at::kBFloat16, true, true, false, Moments::kFull},
    {"bf16, fp32 masters, fp32 sums", at::kBFloat16, true, false, true, Moments::kFull},
    {"fp32 model, 8-bit moments", at::kFloat, true, false, false, Moments::k8bit},
};

using testing::Place;
using testing::name_of;

// `chunk`: the device update's piece size (0: the default, one piece per bucket here).
std::unique_ptr<AdamW> make(const Form& f, Place place, GradStorage storage = GradStorage::kAuto, int64_t chunk = 0) {
  const OptimizerSection o = testing::section_at(f, place, 1e-3, storage, chunk);
  DataParallelSpec dp;
  dp.bucket_elements = 1 << 16;
  return std::make_unique<AdamW>(testing::names_of(kShapes), testing::params_of(kShapes, 3, 0.05, f.dtype, at::kCUDA),
                                 o, FlatLayout::kDefaultAlignment, dp);
}

void train(AdamW& opt, const Form& f, int from, int to) { testing::train(opt, loss, f.fp32_sums, 1e-3, from, to); }

// The acceptance test: several steps of int8 AdamW with split masters, the state streamed
// through the device, equal the on-device int8 AdamW bit for bit (weights, remainders, codes,
// absmax); every other form too. Pieces of 2^12 elements cut each bucket into 16 or more.
TEST(StreamedOptimizerGpu, TrainsAsTheDeviceAdamWBitForBit) {
  ASSERT_TRUE(at::hasCUDA());
  for (const Form& f : kForms)
    for (const int64_t chunk : {int64_t{0}, int64_t{1} << 12})
      for (const GradStorage storage : {GradStorage::kLazy, GradStorage::kResident}) {
        SCOPED_TRACE(std::string(f.name) + ", chunk " + std::to_string(chunk) +
                     (storage == GradStorage::kLazy ? ", lazy" : ", resident"));
        auto device = make(f, Place::kNone, storage), streamed = make(f, Place::kDevice, storage, chunk);
        ASSERT_NE(streamed->streamed(), nullptr);
        ASSERT_GT(streamed->flat().layout().buckets().size(), 4u);
        train(*device, f, 0, 5);
        train(*streamed, f, 0, 5);
        expect_same(*device, *streamed);
        EXPECT_EQ(streamed->flat().gradients().gathered().count_nonzero().item<int64_t>(), 0);
      }
}

// Lazy buckets are freed by step() while the update stream still reads them: the caching
// allocator must not hand them to the compute stream's next allocations before that
// (record_stream). Garbage written into fresh allocations right after each step must not
// reach the update.
TEST(StreamedOptimizerGpu, FreedGradientBucketsAreNotReusedBeforeTheUpdateReadThem) {
  const Form& f = kInt8Split;
  auto device = make(f, Place::kNone, GradStorage::kLazy), streamed = make(f, Place::kDevice, GradStorage::kLazy);
  train(*device, f, 0, 4);
  for (int s = 0; s < 4; ++s) {
    for (const FlatBucket& b : streamed->flat().layout().buckets()) streamed->wait_for_weights(b.offset + b.size);
    for (int j = 0; j < 2; ++j) loss(streamed->flat().params(), 100 * s + j).backward();
    streamed->grad_norm(0.5);
    streamed->step(1e-3 * (1.0 + 0.1 * s));
    std::vector<at::Tensor> junk;  // the sizes of the freed buckets, written at once
    for (const FlatBucket& b : streamed->flat().layout().buckets())
      junk.push_back(at::full({b.size}, 1e30, streamed->flat().weights().options()));
  }
  streamed->wait_for_all_weights();
  expect_same(*device, *streamed);
}

// Bucket by bucket: right after its wait, a kernel reading bucket k sees the final weights.
TEST(StreamedOptimizerGpu, TheForwardReadsEachBucketOnceWaitedFor) {
  const Form& f = kInt8Split;
  auto device = make(f, Place::kNone), streamed = make(f, Place::kDevice, GradStorage::kAuto, 1 << 12);
  train(*device, f, 0, 4);
  train(*streamed, f, 0, 3);
  testing::launch_step(*streamed, loss, f.fp32_sums, 1e-3, 3);
  for (const FlatBucket& b : streamed->flat().layout().buckets()) {
    streamed->wait_for_weights(b.offset + b.size);
    const at::Tensor seen = streamed->flat().weights().narrow(0, b.offset, b.size).clone();  // on the current stream
    EXPECT_TRUE(at::equal(seen, device->flat().weights().narrow(0, b.offset, b.size))) << "bucket at " << b.offset;
  }
}

std::vector<std::pair<std::string, at::Tensor>> cloned(const std::vector<std::pair<std::string, at::Tensor>>& s) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [k, t] : s) out.emplace_back(k, t.clone());
  return out;
}

// A checkpoint taken mid-run under any setting resumes under any other as the same run, and
// the device update saves what the host update saves, key for key and bit for bit.
TEST(StreamedOptimizerGpu, ResumesMidRunAcrossNoneHostAndDeviceUpdates) {
  const std::vector<Place> places = {Place::kNone, Place::kHost, Place::kDevice};
  for (const Form& f : {kForms[0], kForms[1]}) {
    SCOPED_TRACE(f.name);
    auto straight = make(f, Place::kNone);
    train(*straight, f, 0, 3);
    const auto at3 = cloned(straight->state());
    const at::Tensor weights3 = straight->flat().weights().clone();
    train(*straight, f, 3, 6);
    auto host = make(f, Place::kHost), device = make(f, Place::kDevice, GradStorage::kAuto, 1 << 12);
    train(*host, f, 0, 3);
    train(*device, f, 0, 3);
    expect_same(*host, *device);  // the saved state: one format
    for (const Place first : places)
      for (const Place second : places) {
        if (first == second) continue;
        SCOPED_TRACE(std::string(name_of(first)) + " then " + name_of(second));
        auto a = make(f, first);
        a->flat().weights().copy_(weights3);
        a->load_state(at3, 3);
        train(*a, f, 3, 4);
        const auto at4 = cloned(a->state());
        auto b = make(f, second);
        b->flat().weights().copy_(a->flat().weights());
        b->load_state(at4, 4);
        train(*b, f, 4, 6);
        expect_same(*straight, *b);
      }
  }
}

// The state is pinned host memory; the device holds the weights, gradients and the two
// staging slots (what staging_bytes() reports).
TEST(StreamedOptimizerGpu, TheDeviceKeepsOnlyWeightsGradientsAndStaging) {
  auto allocated = [] { return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current; };
  for (const int64_t chunk : {int64_t{0}, int64_t{1} << 12}) {
    std::vector<at::Tensor> params = testing::params_of(kShapes, 3, 0.05, at::kBFloat16, at::kCUDA);
    const int64_t before = allocated();
    OptimizerSection o = testing::section_of(kInt8Split, Offload::kCpu, 1e-3);
    o.offload_update = OffloadUpdate::kDevice;
    o.stream_chunk = chunk;
    DataParallelSpec dp;
    dp.bucket_elements = 1 << 16;
    AdamW opt(testing::names_of(kShapes), params, o, FlatLayout::kDefaultAlignment, dp);
    EXPECT_TRUE(opt.master().is_cpu() && opt.master().is_pinned());
    EXPECT_TRUE(opt.exp_avg().is_pinned() && opt.exp_avg_sq_absmax().is_pinned());
    EXPECT_EQ(opt.host_bytes(), opt.master_bytes() + opt.moment_bytes());  // no host copies
    int64_t largest = 0;
    for (const StreamedStep::Piece& p : opt.streamed()->pieces()) largest = std::max(largest, p.numel);
    EXPECT_EQ(opt.staging_bytes(), 2 * (largest * 4 + largest / 256 * 8));
    const int64_t flat = opt.flat().weights().nbytes() + opt.flat().gradients().bytes();
    EXPECT_LE(allocated() - before, flat + opt.staging_bytes() + (1 << 20));
    EXPECT_GE(allocated() - before + (1 << 20), opt.staging_bytes());
  }
}

// A whole run on CUDA (reference attention, deterministic): the same losses, norms and model
// as offload none, and the same checkpoint.
TEST(StreamedOptimizerGpu, ATrainingRunEqualsTheDeviceOptimizersBitForBit) {
  using namespace fptrain::trainer::testing;
  TempDir dir;
  const std::string extra =
      "batching:\n  examples_per_micro_batch: 4\n  grad_accumulation: 2\n"
      "optimizer:\n  lr: 2.0e-3\n  grad_clip: 0.5\n  master_weights: split\n  state_dtype: int8\n"
      "training:\n  max_steps: 6\n  deterministic: true\n"
      "logging:\n  log_interval: 1\n";
  for (const std::string name : {"none", "device"}) {
    const std::string cfg = dir.write(name + ".yaml", base_config(dir / name, "tokens.jsonl", extra));
    std::vector<std::string> args = {"train", cfg, "--set", "device=cuda", "--set", "model.dtype=bfloat16", "--set",
                                     "model.path=" + fixture("llama64").string()};
    if (name == "device")
      for (const char* s : {"optimizer.offload=cpu", "optimizer.offload_update=device"}) {
        args.push_back("--set");
        args.push_back(s);
      }
    const CommandResult r = run_fptrain(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    if (name == "device")
      EXPECT_NE(r.output.find("updates it on the device (optimizer.offload_update: device)"), std::string::npos)
          << r.output;
  }
  trainer::testing::expect_same_training(dir / "none", dir / "device", 6);
}

}  // namespace
}  // namespace fptrain::optim
