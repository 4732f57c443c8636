// optimizer.offload: cpu on the CPU, where host and device are the same memory and the
// copies are host copies, so the whole path runs: an offloaded AdamW, its update on the host
// or streamed through the "device" (optimizer.offload_update), trains bit for bit as one on
// the device in every state form (fp32 / split / no masters, full / 8-bit moments, fp32
// gradient sums, clipping), bucket by bucket with each bucket's weights final once waited
// for, resumes across offload none <-> host update <-> device update, and a failing host
// update is an error on the training thread, not a hang.
#include "optim/adamw.h"
#include "tests/optim/offload_test_util.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace fptrain::optim {
namespace {

using testing::Form;

// Ragged shapes (not multiples of 256): blocks and buckets end in padding.
const testing::Shapes kShapes = {
    {"embed", {40, 24}}, {"w1", {24, 48}}, {"b1", {48}}, {"w2", {48, 24}}, {"norm", {24}}, {"head", {24, 40}}};

// A small network using every parameter: the summed token losses of a batch drawn from `seed`.
at::Tensor loss(const std::vector<at::Tensor>& p, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const at::Tensor ids = at::randint(0, 40, {6}, gen), targets = at::randint(0, 40, {6}, gen);
  const at::Tensor h = at::tanh(p[0].index_select(0, ids).mm(p[1]) + p[2]);
  const at::Tensor logits = (h.mm(p[3]) * p[4]).mm(p[5]);
  return -logits.to(at::kFloat).log_softmax(1).gather(1, targets.unsqueeze(1)).sum();
}

const std::vector<Form> kForms = {
    {"fp32 model", at::kFloat, true, false, false, Moments::kFull},
    {"fp32 model, 8-bit moments", at::kFloat, true, false, false, Moments::k8bit},
    {"bf16, fp32 masters", at::kBFloat16, true, false, false, Moments::kFull},
    {"bf16, fp32 masters, fp32 sums", at::kBFloat16, true, false, true, Moments::kFull},
    {"bf16, split masters", at::kBFloat16, true, true, false, Moments::kFull},
    {"bf16, split masters, 8-bit moments, fp32 sums", at::kBFloat16, true, true, true, Moments::k8bit},
    {"bf16, fp32 masters, 8-bit moments", at::kBFloat16, true, false, false, Moments::k8bit},
    {"bf16, no masters", at::kBFloat16, false, false, false, Moments::kFull},
    {"bf16, no masters, 8-bit moments", at::kBFloat16, false, false, false, Moments::k8bit},
};

using testing::Place;
using testing::name_of;

// `chunk`: the device update's piece size (0: the default, one piece per bucket here).
std::unique_ptr<AdamW> make(const Form& f, Place place, GradStorage storage = GradStorage::kAuto, int64_t chunk = 0) {
  const OptimizerSection o = testing::section_at(f, place, 1e-2, storage, chunk);
  DataParallelSpec dp;
  dp.bucket_elements = 512;  // several buckets of this small model
  return std::make_unique<AdamW>(testing::names_of(kShapes), testing::params_of(kShapes, 7, 0.3, f.dtype, at::kCPU),
                                 o, FlatLayout::kDefaultAlignment, dp);
}

// The first norms are ~10: the clipping at 0.5 bites.
void train(AdamW& opt, bool fp32_sums, int from, int to) { testing::train(opt, loss, fp32_sums, 1e-2, from, to); }

// The shared comparison, and as many state tensors on both sides.
void expect_same(const AdamW& a, const AdamW& b) {
  testing::expect_same(a, b);
  std::map<std::string, at::Tensor> want;
  for (const auto& [k, t] : a.state()) want[k] = t;
  ASSERT_EQ(b.state().size(), want.size());
}

std::vector<std::pair<std::string, at::Tensor>> cloned(const std::vector<std::pair<std::string, at::Tensor>>& s) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [k, t] : s) out.emplace_back(k, t.clone());
  return out;
}

// Lazy gradients (freed by the step while their copies or updates hold them) and a resident
// buffer (zeroed after its copy or update). The device update cuts each bucket into pieces of
// 256 elements, one block.
TEST(OffloadedAdamW, TrainsAsOnTheDeviceBitForBitInEveryForm) {
  for (const Place place : {Place::kHost, Place::kDevice})
    for (const Form& f : kForms)
      for (const GradStorage storage : {GradStorage::kLazy, GradStorage::kResident}) {
        SCOPED_TRACE(std::string(f.name) + (storage == GradStorage::kLazy ? ", lazy, " : ", resident, ") +
                     name_of(place));
        auto device = make(f, Place::kNone, storage), host = make(f, place, storage, 256);
        ASSERT_TRUE(host->offloaded());
        ASSERT_FALSE(device->offloaded());
        ASSERT_GT(host->flat().layout().buckets().size(), 2u);
        if (place == Place::kDevice) {
          ASSERT_EQ(host->offload(), nullptr);
          ASSERT_GT(host->streamed()->pieces().size(), host->flat().layout().buckets().size());
          EXPECT_EQ(host->host_bytes(), host->master_bytes() + host->moment_bytes());  // no copies on the host
          EXPECT_GT(host->staging_bytes(), 0);
        } else {
          EXPECT_GT(host->host_bytes(), host->master_bytes() + host->moment_bytes());
          EXPECT_EQ(host->staging_bytes(), 0);
        }
        EXPECT_EQ(device->host_bytes(), 0);
        train(*device, f.fp32_sums, 0, 4);
        train(*host, f.fp32_sums, 0, 4);
        expect_same(*device, *host);
        // The gradients were freed or zeroed after their copy, as zero_grad() does it.
        EXPECT_EQ(host->flat().gradients().gathered().count_nonzero().item<int64_t>(), 0);
        if (storage == GradStorage::kLazy) EXPECT_EQ(host->flat().gradients().allocated_bytes(), 0);
      }
}

// Each bucket is final as soon as it is waited for, before the later ones are.
TEST(OffloadedAdamW, EachBucketIsFinalOnceWaitedFor) {
  const Form f = kForms[4];  // split masters
  for (const Place place : {Place::kHost, Place::kDevice}) {
    SCOPED_TRACE(name_of(place));
    auto device = make(f, Place::kNone), host = make(f, place);
    train(*device, false, 0, 2);
    train(*host, false, 0, 1);
    testing::launch_step(*host, loss, f.fp32_sums, 1e-2, 1);
    for (const FlatBucket& b : host->flat().layout().buckets()) {
      host->wait_for_weights(b.offset + b.size);
      EXPECT_TRUE(at::equal(host->flat().weights().narrow(0, b.offset, b.size),
                            device->flat().weights().narrow(0, b.offset, b.size)))
          << "bucket at " << b.offset;
    }
  }
}

// A checkpoint of any setting resumes under any other as the same run: the saved state is
// one format whether the update ran on the host or on the device.
TEST(OffloadedAdamW, ResumesAcrossOffloadNoneHostAndDeviceUpdates) {
  const std::vector<Place> places = {Place::kNone, Place::kHost, Place::kDevice};
  for (const Form& f : {kForms[2], kForms[5], kForms[6]}) {
    SCOPED_TRACE(f.name);
    auto straight = make(f, Place::kNone);
    train(*straight, f.fp32_sums, 0, 3);
    const auto at3 = cloned(straight->state());
    const at::Tensor weights3 = straight->flat().weights().clone();
    train(*straight, f.fp32_sums, 3, 6);
    for (const Place first : places)
      for (const Place second : places) {
        if (first == second) continue;
        SCOPED_TRACE(std::string(name_of(first)) + " then " + name_of(second));
        auto a = make(f, first);
        a->flat().weights().copy_(weights3);
        a->load_state(at3, 3);
        train(*a, f.fp32_sums, 3, 4);
        const auto at4 = cloned(a->state());
        auto b = make(f, second);
        b->flat().weights().copy_(a->flat().weights());
        b->load_state(at4, 4);
        train(*b, f.fp32_sums, 4, 6);
        expect_same(*straight, *b);
      }
  }
}

// A host update that throws: the next wait reports it (no hang), and so does every later one.
TEST(OffloadedAdamW, AFailingHostUpdateIsReportedNotAHang) {
  auto opt = make(kForms[2], Place::kHost);
  train(*opt, false, 0, 1);
  opt->offload()->fail_at_for_testing(1);
  loss(opt->flat().params(), 5).backward();
  opt->grad_norm(0.5);
  opt->step(1e-2);
  try {
    opt->wait_for_all_weights();
    FAIL() << "expected the failure";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer.offload: the host update of the optimizer failed"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("failure injected at range 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(opt->wait_for_all_weights(), std::runtime_error);
  EXPECT_THROW(opt->grad_norm(0.5), std::runtime_error);
}  // the destructor ends the worker

// The host update runs on the thread count it was given, whatever the process's intra-op
// setting (a GPU host once ran the whole 8B update on one core).
TEST(OffloadedStep, TheHostUpdateRunsOnItsOwnThreadCount) {
  const int before = at::get_num_threads();
  at::set_num_threads(1);
  const at::Tensor weights = at::zeros({1 << 16});
  OffloadedStep step({{0, 0, 1 << 16}}, weights, 1 << 16, /*threads=*/3);
  EXPECT_EQ(step.threads(), 3);
  std::atomic<int> seen{0};
  std::mutex mutex;
  std::set<std::thread::id> workers;  // the threads at::parallel_for really ran on
  OffloadedStep::Input in;
  in.grads = at::ones({1 << 16});
  std::vector<OffloadedStep::Input> inputs;
  inputs.push_back(std::move(in));
  step.launch(std::move(inputs), at::Tensor(), [&](size_t, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
    seen = at::get_num_threads();
    at::parallel_for(0, 3, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // no thread takes two tasks
      std::lock_guard<std::mutex> lock(mutex);
      workers.insert(std::this_thread::get_id());
    });
  });
  step.wait_host();
  EXPECT_EQ(seen.load(), 3);
  // Not one: code compiled without OpenMP runs ATen's inline parallel_for serially.
  EXPECT_EQ(workers.size(), 3u);
  at::set_num_threads(before);
}

}  // namespace
}  // namespace fptrain::optim
