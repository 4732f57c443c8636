// The flat-buffer optimizer kernels (trainer/cuda/) against the CPU reference
// path (optim/flat_adamw.cpp) on random data: the AdamW step bit for bit
// (bf16 and fp16 weights with fp32 masters, bf16 with split masters, fp32 weights, bf16 without masters;
// with and without an fp32 accumulator and a clip coefficient; 16-byte aligned
// buffers and misaligned ones with a ragged end), the gradient norm to fp32
// summation error and deterministic, the fp32 accumulation bit for bit; and an
// AdamW over CUDA parameters equal to one over the same parameters on the CPU.
#include "optim/adamw.h"
#include "optim/flat_adamw.h"

#include <c10/core/GradMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>

namespace fptrain::optim {
namespace {

const at::Device kCuda(at::kCUDA, 0);

void require_kernels() {
  ASSERT_TRUE(at::hasCUDA());
  ASSERT_TRUE(flat::cuda_kernels_built()) << "built without FPTRAIN_CUDA: the ATen fallback runs instead";
}

struct Buffers {
  at::Tensor weights, master, exp_avg, exp_avg_sq, grads, accum, coef;
  int64_t offset = 0;  // elements between each buffer's allocation and its start

  // A copy on `d`, each 1-D buffer as far into its allocation as here.
  Buffers to(const at::Device& d) const {
    auto move = [&](const at::Tensor& t) {
      if (!t.defined()) return t;
      if (t.dim() == 0) return t.to(d);
      at::Tensor out = at::empty({t.numel() + offset}, t.options().device(d)).narrow(0, offset, t.numel());
      out.copy_(t);
      return out;
    };
    return {move(weights), move(master), move(exp_avg), move(exp_avg_sq), move(grads), move(accum), move(coef),
            offset};
  }
};

// n elements starting `offset` elements into their allocations (offset 1: not 16-byte aligned).
Buffers random_buffers(at::ScalarType dtype, bool master, bool accum, bool clip, int64_t n, int64_t offset,
                       uint64_t seed, bool split = false) {
  at::manual_seed(seed);
  auto make = [&](at::ScalarType t, double scale, bool positive) {
    at::Tensor x = at::randn({n + offset}) * scale;
    if (positive) x = x.abs();
    return x.to(t).narrow(0, offset, n);
  };
  const at::ScalarType moments = master ? at::kFloat : dtype;
  Buffers b;
  b.offset = offset;
  b.weights = make(dtype, 1.0, false);
  if (master) {  // near the weights, not just their rounding
    b.master = make(at::kFloat, 1e-3, false);
    b.master.add_(b.weights.to(at::kFloat));
  }
  if (split) {  // the same masters as bf16 weights and remainders, every 7th exactly halfway (a tie)
    at::Tensor bits = b.master.view(at::kInt);
    bits.slice(0, 0, n, 7).copy_(at::bitwise_or(at::bitwise_and(bits.slice(0, 0, n, 7), ~0xFFFF), 0x8000));
    at::Tensor remainder = make(at::kShort, 0.0, false);
    flat::split_masters(b.master, b.weights, remainder);
    b.master = remainder;
  }
  b.exp_avg = make(moments, 0.1, false);
  b.exp_avg_sq = make(moments, 0.01, true);
  b.grads = make(dtype, 1.0, false);
  if (accum) b.accum = make(at::kFloat, 1.0, false);
  if (clip) b.coef = at::full({}, 0.37f, at::kFloat);
  return b;
}

void expect_bitwise(const at::Tensor& gpu, const at::Tensor& cpu, const std::string& what) {
  if (!cpu.defined()) return;
  const at::Tensor g = gpu.cpu();
  EXPECT_TRUE(at::equal(g, cpu)) << what << ": "
                                 << (g.to(at::kDouble) - cpu.to(at::kDouble)).abs().max().item<double>()
                                 << " max difference, " << g.ne(cpu).sum().item<int64_t>() << " elements differ";
}

TEST(TrainFlatAdamWGpu, StepEqualsTheCpuReferenceBitForBit) {
  require_kernels();
  struct Variant {
    at::ScalarType dtype;
    bool master;
    bool split = false;  // the masters as bf16 weights + int16 remainders
  };
  const Variant variants[] = {{at::kBFloat16, true},  {at::kHalf, true},
                              {at::kFloat, false},    {at::kBFloat16, false},
                              {at::kBFloat16, true, true}};
  flat::AdamWHyper h;
  h.lr = 3e-3;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.weight_decay = 0.1;
  h.step = 7;
  uint64_t seed = 1;
  for (const Variant& v : variants)
    for (bool accum : {false, true})
      for (bool clip : {false, true})
        for (int64_t offset : {0, 1}) {
          const int64_t n = (1 << 20) + 13;
          const std::string what = std::string(c10::toString(v.dtype)) +
                                   (v.split ? " + split master" : v.master ? " + fp32 master" : "") +
                                   (accum ? ", accumulator" : "") + (clip ? ", clipped" : "") +
                                   (offset ? ", misaligned" : "");
          const Buffers cpu = random_buffers(v.dtype, v.master, accum, clip, n, offset, seed++, v.split);
          const Buffers gpu = cpu.to(kCuda);
          flat::adamw_step(cpu.weights, cpu.master, cpu.exp_avg, cpu.exp_avg_sq, cpu.grads, cpu.accum, cpu.coef, h);
          flat::adamw_step(gpu.weights, gpu.master, gpu.exp_avg, gpu.exp_avg_sq, gpu.grads, gpu.accum, gpu.coef, h);
          expect_bitwise(gpu.weights, cpu.weights, what + ": weights");
          expect_bitwise(gpu.master, cpu.master, what + ": master");
          expect_bitwise(gpu.exp_avg, cpu.exp_avg, what + ": exp_avg");
          expect_bitwise(gpu.exp_avg_sq, cpu.exp_avg_sq, what + ": exp_avg_sq");
        }
}

TEST(TrainFlatAdamWGpu, GradNormMatchesTheCpuAndIsDeterministic) {
  require_kernels();
  for (at::ScalarType dtype : {at::kBFloat16, at::kFloat})
    for (bool accum : {false, true})
      for (int64_t offset : {0, 1}) {
        const int64_t n = (3 << 20) + 5;
        const Buffers cpu = random_buffers(dtype, true, accum, false, n, offset, 40 + offset);
        const Buffers gpu = cpu.to(kCuda);
        auto scalar = [](const at::Device& d) { return at::empty({}, at::TensorOptions().dtype(at::kFloat).device(d)); };
        at::Tensor cn = scalar(at::kCPU), cc = scalar(at::kCPU), gn = scalar(kCuda), gc = scalar(kCuda);
        at::Tensor gn2 = scalar(kCuda), gc2 = scalar(kCuda);
        flat::grad_norm(cpu.grads, cpu.accum, 1.0, cn, cc);
        flat::grad_norm(gpu.grads, gpu.accum, 1.0, gn, gc);
        flat::grad_norm(gpu.grads, gpu.accum, 1.0, gn2, gc2);
        at::Tensor x = cpu.grads.to(at::kDouble);
        if (accum) x = x + cpu.accum.to(at::kDouble);
        const double exact = x.norm().item<double>();
        EXPECT_NEAR(gn.item<double>(), exact, 1e-6 * exact) << c10::toString(dtype) << " accum " << accum;
        EXPECT_NEAR(cn.item<double>(), exact, 1e-6 * exact);
        EXPECT_EQ(gn.item<float>(), gn2.item<float>()) << "the same sum twice";
        EXPECT_EQ(gc.item<float>(), gc2.item<float>());
        // The coefficient is computed on the device from the device norm, as the CPU does from its own.
        EXPECT_FLOAT_EQ(gc.item<float>(), 1.0f / (gn.item<float>() + 1e-6f));
        EXPECT_FLOAT_EQ(cc.item<float>(), 1.0f / (cn.item<float>() + 1e-6f));
      }
  // No clipping below the threshold, and none when max_norm is 0.
  const at::Tensor g = at::full({1000}, 1e-3f, at::TensorOptions().device(kCuda));
  at::Tensor n = at::empty({}, g.options()), c = at::empty({}, g.options());
  flat::grad_norm(g, {}, 1.0, n, c);
  EXPECT_EQ(c.item<float>(), 1.0f);
  flat::grad_norm(g * 1e6, {}, 0.0, n, c);
  EXPECT_EQ(c.item<float>(), 1.0f);
}

// A norm over more pieces than one launch takes (a carried running sum), some pieces
// zeros: the single buffer's bits, and no scratch memory kept afterwards (kept scratch
// would be memory held through the next backward, where the step peaks).
TEST(TrainFlatAdamWGpu, GradNormOverPiecesKeepsNoScratch) {
  require_kernels();
  const int64_t piece = 4099, count = 3 * 32 + 5, n = piece * count;
  const Buffers gpu = random_buffers(at::kBFloat16, true, true, false, n, 0, 77).to(kCuda);
  at::Tensor whole = gpu.grads.clone();
  std::vector<flat::GradPiece> pieces;
  for (int64_t k = 0; k < count; ++k) {
    at::Tensor part = k % 7 == 3 ? at::Tensor() : whole.narrow(0, k * piece, piece).clone();
    if (!part.defined()) whole.narrow(0, k * piece, piece).zero_();
    pieces.push_back({part, k * piece, piece});
  }
  const auto scalar = [] { return at::empty({}, at::TensorOptions().dtype(at::kFloat).device(kCuda)); };
  at::Tensor n1 = scalar(), c1 = scalar(), n2 = scalar(), c2 = scalar();
  const auto allocated = [] {
    c10::cuda::device_synchronize();
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    return stats.allocated_bytes[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)].current;
  };
  const int64_t before = allocated();
  flat::grad_norm(whole, gpu.accum, 1.0, n1, c1);
  flat::grad_norm(pieces, gpu.accum, 1.0, n2, c2);
  EXPECT_EQ(allocated(), before) << "bytes the norm kept after it returned";
  EXPECT_EQ(n1.item<float>(), n2.item<float>()) << "pieces and the whole buffer: the same sums in the same order";
  EXPECT_EQ(c1.item<float>(), c2.item<float>());
}

TEST(TrainFlatAdamWGpu, AccumulateEqualsTheCpuReference) {
  require_kernels();
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf, at::kFloat})
    for (int64_t offset : {0, 1}) {
      const Buffers cpu = random_buffers(dtype, true, true, false, (1 << 18) + 3, offset, 70);
      const Buffers gpu = cpu.to(kCuda);
      flat::accumulate(cpu.accum, cpu.grads);
      flat::accumulate(gpu.accum, gpu.grads);
      expect_bitwise(gpu.accum, cpu.accum, std::string(c10::toString(dtype)) + " accumulator");
      EXPECT_EQ(gpu.grads.count_nonzero().item<int64_t>(), 0);
    }
}

// The whole optimizer: three steps of two micro-batches (summed in fp32) of an
// AdamW over bf16 CUDA parameters equal those of one over the same CPU
// parameters, bit for bit. (No clipping here: the GPU's norm may differ from the
// CPU's in the last bit, which the coefficient would carry into every element.) For one
// optimizer form: fp32 moments with fp32 masters (the default), or 8-bit moments with split
// masters (optimizer.state_dtype: int8).
void cuda_adamw_equals_cpu_adamw(const OptimizerSection& o) {
  const std::vector<std::string> names = {"a", "b", "c"};
  const std::vector<std::vector<int64_t>> shapes = {{257, 33}, {1000}, {7, 9}};
  std::vector<at::Tensor> cpu_params, gpu_params;
  at::manual_seed(5);
  for (const auto& s : shapes) {
    cpu_params.push_back(at::randn(s).to(at::kBFloat16).requires_grad_(true));
    gpu_params.push_back(cpu_params.back().detach().to(kCuda).requires_grad_(true));
  }
  AdamW cpu(names, cpu_params, o), gpu(names, gpu_params, o);
  for (int step = 0; step < 3; ++step) {
    for (int mb = 0; mb < 2; ++mb) {
      at::manual_seed(100 + 2 * step + mb);
      std::vector<at::Tensor> grads;
      for (const auto& s : shapes) grads.push_back(at::randn(s).to(at::kBFloat16) * 3);
      {
        c10::NoGradGuard no_grad;
        for (size_t i = 0; i < grads.size(); ++i) {
          cpu_params[i].grad().add_(grads[i]);  // as AccumulateGrad does, into the views
          gpu_params[i].grad().add_(grads[i].to(kCuda));
        }
      }
      if (mb == 0) {
        cpu.accumulate_gradients();
        gpu.accumulate_gradients();
      }
    }
    const float cn = cpu.grad_norm(0.0).item<float>(), gn = gpu.grad_norm(0.0).item<float>();
    EXPECT_NEAR(gn, cn, 1e-6 * cn);
    cpu.step(1e-2);
    gpu.step(1e-2);
  }
  const auto cs = cpu.state(), gs = gpu.state();
  ASSERT_EQ(cs.size(), gs.size());
  for (size_t i = 0; i < cs.size(); ++i) expect_bitwise(gs[i].second, cs[i].second, cs[i].first);
  for (size_t i = 0; i < names.size(); ++i) expect_bitwise(gpu_params[i].detach(), cpu_params[i].detach(), names[i]);
}

TEST(TrainFlatAdamWGpu, AdamWOnCudaEqualsAdamWOnCpu) {
  require_kernels();
  OptimizerSection fp32;
  fp32.weight_decay = 0.1;
  fp32.gradient_storage = GradStorage::kResident;  // .grad views exist before any backward: the test adds into them
  OptimizerSection int8 = fp32;
  int8.split_masters = true;
  int8.moments = Moments::k8bit;
  for (const auto& [name, o] : {std::pair{"fp32 moments", fp32}, std::pair{"8-bit moments, split masters", int8}}) {
    SCOPED_TRACE(name);
    cuda_adamw_equals_cpu_adamw(o);
  }
}

}  // namespace
}  // namespace fptrain::optim
