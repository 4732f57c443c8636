// What the CPU and CUDA tests of optimizer.offload: cpu (tests/optim/offloaded_adamw_test.cpp,
// tests/trainer_gpu/{offloaded,streamed}_optimizer_gpu_test.cpp) share: a state form, the
// parameters of a small model, the optimizer's settings and where its update runs, the
// trainer's step loop and the comparison of two optimizers. Each test keeps its own shapes and loss.
#pragma once

#include "optim/adamw.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace fptrain::optim::testing {

using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// One state form of the optimizer.
struct Form {
  const char* name;
  at::ScalarType dtype;
  bool masters, split, fp32_sums;
  Moments moments;
};

inline std::vector<std::string> names_of(const Shapes& shapes) {
  std::vector<std::string> out;
  for (const auto& [n, s] : shapes) out.push_back(n);
  return out;
}

// N(0, scale) drawn on the CPU from `seed` (the same values on every device), then `dtype`.
inline std::vector<at::Tensor> params_of(const Shapes& shapes, uint64_t seed, double scale, at::ScalarType dtype,
                                         const at::Device& device) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> out;
  for (const auto& [n, shape] : shapes)
    out.push_back((at::randn(shape, gen) * scale).to(dtype).to(device).requires_grad_(true));
  return out;
}

inline OptimizerSection section_of(const Form& f, Offload offload, double lr) {
  OptimizerSection o;
  o.lr = lr;
  o.weight_decay = 0.01;
  o.master_weights = f.masters;
  o.split_masters = f.split;
  o.fp32_grad_accumulation = f.fp32_sums;
  o.moments = f.moments;
  o.offload = offload;
  return o;
}

// Where an offloaded update runs (none: not offloaded).
enum class Place { kNone, kHost, kDevice };
inline const char* name_of(Place p) { return p == Place::kNone ? "none" : p == Place::kHost ? "host" : "device"; }

// section_of with the update at `place`; `chunk`: the device update's piece size (0: the default).
inline OptimizerSection section_at(const Form& f, Place place, double lr, GradStorage storage, int64_t chunk) {
  OptimizerSection o = section_of(f, place == Place::kNone ? Offload::kNone : Offload::kCpu, lr);
  o.offload_update = place == Place::kDevice ? OffloadUpdate::kDevice : OffloadUpdate::kHost;
  o.stream_chunk = chunk;
  o.gradient_storage = storage;
  return o;
}

using Loss = std::function<at::Tensor(const std::vector<at::Tensor>&, uint64_t)>;

// Step s after its forward's waits: two micro-batches, clipping at 0.5 (it bites), a rate that
// changes with s; the update is launched, not waited for.
inline void launch_step(AdamW& opt, const Loss& loss, bool fp32_sums, double lr, int s) {
  for (int j = 0; j < 2; ++j) {
    loss(opt.flat().params(), 100 * s + j).backward();
    if (j == 0 && fp32_sums) opt.accumulate_gradients();
  }
  opt.grad_norm(0.5);
  opt.step(lr * (1.0 + 0.1 * s));
}

// Steps [from, to) as the trainer takes them: the "forward" waits bucket by bucket as its
// stage hook does, then launch_step.
inline void train(AdamW& opt, const Loss& loss, bool fp32_sums, double lr, int from, int to) {
  for (int s = from; s < to; ++s) {
    for (const FlatBucket& b : opt.flat().layout().buckets()) opt.wait_for_weights(b.offset + b.size);
    launch_step(opt, loss, fp32_sums, lr, s);
  }
  opt.wait_for_all_weights();
}

// The same weights, and every state tensor of `b` equal to `a`'s of that name.
inline void expect_same(const AdamW& a, const AdamW& b) {
  EXPECT_TRUE(at::equal(a.flat().weights(), b.flat().weights())) << "weights";
  std::map<std::string, at::Tensor> want;
  for (const auto& [k, t] : a.state()) want[k] = t.cpu();
  for (const auto& [k, t] : b.state()) {
    ASSERT_TRUE(want.count(k)) << k;
    EXPECT_TRUE(at::equal(t.cpu(), want.at(k))) << k;
  }
}

}  // namespace fptrain::optim::testing
