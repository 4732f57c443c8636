// The AdamW step with 8-bit blockwise moments (optim/cuda/flat_adamw8bit_kernels.cu):
//  - against the CPU reference (optim/flat_adamw8bit.cpp) bit for bit: fp32, bf16 and fp16
//    weights without masters, bf16/fp16 with fp32 masters, bf16 with split masters; with and
//    without an fp32 accumulator and a clip coefficient; non-finite gradients, a block without
//    gradient, more blocks than the grid (its loop) (a whole AdamW with 8-bit moments on CUDA
//    against one on the CPU: flat_adamw_gpu_test.cpp);
//  - against bitsandbytes' AdamW8bit itself (tests/trainer_gpu/bnb_adamw8bit.py, run here on
//    the GPU) over five steps. Not bit for bit: bitsandbytes builds with --use_fast_math, so
//    its divisions, square roots and bias-correction powers are approximate and subnormals
//    flush to zero, where ours are IEEE-rounded (optim/blockwise8_math.h); its absmax is
//    expected within a few ulp, its weights within a few ulp plus the drift of its approximate
//    bias corrections, and its codes equal except near a midpoint between codes.
#include "models/safetensors.h"
#include "optim/adamw.h"
#include "optim/blockwise8.h"
#include "optim/flat_adamw.h"
#include "tests/trainer/trainer_test_util.h"

#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <limits>

namespace fptrain::optim {
namespace {

using blockwise8::kBlock;

const at::Device kCuda(at::kCUDA, 0);

void require_kernels() {
  ASSERT_TRUE(at::hasCUDA());
  ASSERT_TRUE(flat::cuda_kernels_built()) << "built without FPTRAIN_CUDA";
}

void expect_bitwise(const at::Tensor& gpu, const at::Tensor& cpu, const std::string& what) {
  if (!cpu.defined()) return;
  const at::Tensor g = gpu.cpu();
  EXPECT_TRUE(at::equal(g, cpu)) << what << ": " << g.ne(cpu).sum().item<int64_t>() << " elements differ";
}

struct Buffers {
  at::Tensor weights, master, grads, accum, coef;
  flat::Moments8bit q;
  Buffers to(const at::Device& d) const {
    auto mv = [&](const at::Tensor& t) { return t.defined() ? t.to(d) : t; };
    return {mv(weights), mv(master), mv(grads), mv(accum), mv(coef),
            {mv(q.exp_avg), mv(q.exp_avg_sq), mv(q.exp_avg_absmax), mv(q.exp_avg_sq_absmax)}};
  }
};

enum class Masters { kNone, kFp32, kSplit };

// Weights near 1, state as after some steps (random codes, positive absmax), gradients over
// seven decades with a block of zeros and a NaN and an inf.
Buffers random_buffers(at::ScalarType dtype, Masters masters, bool accum, bool clip, int64_t n, uint64_t seed) {
  at::manual_seed(seed);
  Buffers b;
  const at::Tensor w = at::randn({n});
  b.weights = w.to(dtype);
  if (masters == Masters::kFp32) b.master = w + at::randn({n}) * 1e-3;
  if (masters == Masters::kSplit) {
    b.master = at::empty({n}, at::kShort);
    flat::split_masters(w + at::randn({n}) * 1e-3, b.weights, b.master);
  }
  b.q = {at::randint(0, 256, {n}, at::kByte), at::randint(0, 256, {n}, at::kByte),
         at::rand({n / kBlock}) * 0.1, at::rand({n / kBlock}) * 0.01};
  at::Tensor g = at::randn({n}) * at::pow(10.0, at::randint(-6, 1, {n}).to(at::kFloat));
  g.narrow(0, 5 * kBlock, kBlock).zero_();
  g[17] = std::numeric_limits<float>::quiet_NaN();
  g[kBlock * 9 + 4] = std::numeric_limits<float>::infinity();
  b.grads = g.to(dtype);
  if (accum) b.accum = at::randn({n}) * 0.1;
  if (clip) b.coef = at::full({}, 0.37f, at::kFloat);
  return b;
}

void step(const Buffers& b, int64_t t) {
  flat::AdamWHyper h;
  h.lr = 1e-3 * t;
  h.weight_decay = 0.01;
  h.step = t;
  flat::adamw8bit_step(b.weights, b.master, b.q, b.grads, b.accum, b.coef, h);
}

TEST(TrainFlatAdamW8bitGpu, StepEqualsTheCpuReferenceBitForBit) {
  require_kernels();
  const int64_t n = kBlock * 1500;  // more blocks than the kernel's grid: its loop runs
  struct Form {
    at::ScalarType dtype;
    Masters masters;
  };
  for (const Form f : {Form{at::kFloat, Masters::kNone}, Form{at::kBFloat16, Masters::kNone},
                       Form{at::kHalf, Masters::kNone}, Form{at::kBFloat16, Masters::kFp32},
                       Form{at::kHalf, Masters::kFp32}, Form{at::kBFloat16, Masters::kSplit}})
    for (const bool accum : {false, true})
      for (const bool clip : {false, true}) {
        SCOPED_TRACE(std::string(c10::toString(f.dtype)) + " masters " + std::to_string(static_cast<int>(f.masters)) +
                     (accum ? " accum" : "") + (clip ? " clip" : ""));
        const Buffers cpu = random_buffers(f.dtype, f.masters, accum, clip, n, 3), gpu = cpu.to(kCuda);
        for (int64_t t = 1; t <= 3; ++t) {
          step(cpu, t);
          step(gpu, t);
        }
        expect_bitwise(gpu.weights, cpu.weights, "weights");
        expect_bitwise(gpu.master, cpu.master, "masters");
        expect_bitwise(gpu.q.exp_avg, cpu.q.exp_avg, "exp_avg codes");
        expect_bitwise(gpu.q.exp_avg_sq, cpu.q.exp_avg_sq, "exp_avg_sq codes");
        expect_bitwise(gpu.q.exp_avg_absmax, cpu.q.exp_avg_absmax, "exp_avg absmax");
        expect_bitwise(gpu.q.exp_avg_sq_absmax, cpu.q.exp_avg_sq_absmax, "exp_avg_sq absmax");
      }
}

// Units in the last place between two fp32 tensors of finite values (bit patterns ordered).
at::Tensor ulps(const at::Tensor& a, const at::Tensor& b) {
  auto ordered = [](const at::Tensor& x) {
    const at::Tensor i = x.to(at::kFloat).contiguous().view(at::kInt).to(at::kLong);
    return at::where(i.lt(0), -(i.bitwise_and(0x7fffffff)), i);
  };
  return (ordered(a) - ordered(b)).abs();
}

// bitsandbytes computes 1 - beta^t with __powf (ex2.approx of lg2.approx: ~1.6e-7 absolute
// error in the power), so its sqrt(1 - beta2^t) at beta2 0.999, t 1 is off by ~6e-5 relative and
// every element's step with it; ours is correctly rounded. 1e-3 of lr per step bounds that drift
// with margin and still catches a misplaced eps, bias correction or decay (each O(lr) or more).
constexpr double kBiasCorrectionDrift = 1e-3;
// A code may move by more than one where the signed map is dense (near zero): bitsandbytes
// divides by absmax with __fdividef and its absmax itself may differ by a few ulp.
constexpr int kMaxCodeSteps = 3;

TEST(TrainFlatAdamW8bitGpu, FollowsBitsandbytesAdamW8bit) {
  require_kernels();
  trainer::testing::TempDir dir;
  const std::string cmd = std::string(FPTRAIN_PYTHON) + " " + FPTRAIN_SOURCE_DIR +
                          "/tests/trainer_gpu/bnb_adamw8bit.py --out " + dir.path().string();
  const int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "bitsandbytes with CUDA is not available";
  ASSERT_EQ(rc, 0) << cmd;
  const models::SafetensorsFile file(dir.path() / "bnb_adamw8bit.safetensors");
  auto get = [&](const std::string& name) {
    const models::SafetensorsEntry* e = file.find(name);
    if (!e) throw std::runtime_error("missing " + name);
    return file.view(*e).clone();
  };
  const at::Tensor hyper = get("hyper");
  for (const std::string name : {"fp32_whole", "fp32_ragged", "bf16_whole"}) {
    SCOPED_TRACE(name);
    const at::Tensor p0 = get(name + "_p0");
    const int64_t n = p0.numel(), padded = (n + kBlock - 1) / kBlock * kBlock, blocks = padded / kBlock;
    // Our flat buffer: the tensor and zero padding to whole blocks, as the layout pads it.
    auto padded_copy = [&](const at::Tensor& t) {
      return at::cat({t, at::zeros({padded - n}, t.options())}).to(kCuda);
    };
    const at::Tensor w = padded_copy(p0);
    flat::Moments8bit q{at::zeros({padded}, at::TensorOptions(kCuda).dtype(at::kByte)),
                        at::zeros({padded}, at::TensorOptions(kCuda).dtype(at::kByte)),
                        at::zeros({blocks}, at::TensorOptions(kCuda).dtype(at::kFloat)),
                        at::zeros({blocks}, at::TensorOptions(kCuda).dtype(at::kFloat))};
    for (int s = 0; s < 5; ++s) {
      SCOPED_TRACE("step " + std::to_string(s + 1));
      flat::AdamWHyper h;
      h.lr = hyper[0].item<double>();
      h.beta1 = hyper[1].item<double>();
      h.beta2 = hyper[2].item<double>();
      h.eps = hyper[3].item<double>();
      h.weight_decay = hyper[4].item<double>();
      h.step = s + 1;
      flat::adamw8bit_step(w, {}, q, padded_copy(get(name + "_g" + std::to_string(s))), {}, {}, h);
      const std::string p = name + "_" + std::to_string(s) + "_";
      const at::Tensor want_w = get(p + "p").to(at::kFloat), got_w = w.narrow(0, 0, n).cpu().to(at::kFloat);
      for (const std::string k : {"1", "2"}) {
        const at::Tensor want_c = get(p + "state" + k).to(at::kInt);
        const at::Tensor got_c = (k == "1" ? q.exp_avg : q.exp_avg_sq).narrow(0, 0, n).cpu().to(at::kInt);
        const at::Tensor diff = (want_c - got_c).abs();
        EXPECT_LE(diff.max().item<int>(), kMaxCodeSteps) << "state" << k;
        EXPECT_GE(diff.eq(0).to(at::kDouble).mean().item<double>(), 0.999) << "state" << k;
        const at::Tensor got_a = (k == "1" ? q.exp_avg_absmax : q.exp_avg_sq_absmax).cpu();
        EXPECT_LE(ulps(got_a, get(p + "absmax" + k)).max().item<int64_t>(), 64) << "absmax" << k;
      }
      // The weights: bf16 equal nearly everywhere; fp32 within 8 ulp plus the drift of the bias
      // corrections (kBiasCorrectionDrift of lr per step so far). Where a code went the other way
      // at a midpoint the update differs more, by up to the whole step where exp_avg_sq's code is
      // 0 on one side (8-bit AdamW's large steps for values below the map's smallest code).
      const bool bf16 = name.rfind("bf16", 0) == 0;
      const at::Tensor u = ulps(got_w, want_w);
      const at::Tensor drift = (got_w - want_w).abs().to(at::kDouble);
      const at::Tensor close = bf16 ? u.eq(0) : u.le(8).logical_or(drift.le(kBiasCorrectionDrift * h.lr * (s + 1)));
      EXPECT_GE(close.to(at::kDouble).mean().item<double>(), 0.999)
          << "max ulps " << u.max().item<int64_t>() << ", max |dw| " << drift.max().item<double>();
    }
  }
}

}  // namespace
}  // namespace fptrain::optim
