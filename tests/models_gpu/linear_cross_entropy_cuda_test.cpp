// The fused lm_head + cross-entropy on CUDA in bf16 against the materialised
// path it replaces. Both are judged against an fp64 computation from the same
// bf16 inputs, and the fused path must be no further from it than twice the
// materialised path's own bf16 error (or below a tenth of bf16's epsilon, 2^-8,
// where the errors are under the type's resolution) — the criterion of the
// decoder's bf16 suite (bf16_parity.h). Why that tolerance: the fused path
// performs the same bf16 roundings (logits, softmax - onehot, the two GEMM
// outputs) plus one more (grad_output is applied to the GEMM outputs, not to
// the fp32 softmax before them: at most 2^-9 relative per element), and sums
// the weight gradient in fp32 instead of inside one GEMM; so its error is of
// the same size as the materialised path's, not equal to it bit for bit.
//
// Also prints, for the next GPU run's log, the peak memory (CUDA caching
// allocator) and the time of loss + backward, fused against materialised, for
// Llama-3.2-1B's head: T = 16384 tokens, H = 2048, V = 128256, bf16.
#include "models/linear_cross_entropy.h"
#include "tests/models_gpu/bf16_parity.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace fptrain::models {
namespace {

using testing::rel_err;

struct Result {
  at::Tensor loss, grad_hidden, grad_weight;
};

Result run(bool fused, const at::Tensor& hidden0, const at::Tensor& weight0, const at::Tensor& targets,
           double divisor, int64_t chunk, double grad_output) {
  const at::Tensor hidden = hidden0.detach().clone().requires_grad_(true);
  const at::Tensor weight = weight0.detach().clone().requires_grad_(true);
  const at::Tensor loss = fused ? linear_cross_entropy(hidden, weight, targets, divisor, chunk)
                                : reference_linear_cross_entropy(hidden, weight, targets, divisor);
  (loss * grad_output).backward();
  return {loss.detach(), hidden.grad(), weight.grad()};
}

// The same computation in fp64 from the same (bf16-rounded) inputs, the
// cross-entropy included.
Result exact(const at::Tensor& hidden0, const at::Tensor& weight0, const at::Tensor& targets, double divisor,
             double grad_output) {
  const at::Tensor hidden = hidden0.detach().to(at::kDouble).requires_grad_(true);
  const at::Tensor weight = weight0.detach().to(at::kDouble).requires_grad_(true);
  const at::Tensor loss = at::cross_entropy_loss(at::linear(hidden, weight) / divisor, targets, {},
                                                 at::Reduction::Sum, kIgnoreIndex);
  (loss * grad_output).backward();
  return {loss.detach(), hidden.grad(), weight.grad()};
}

// Packed examples of `example_tokens` whose first `prompt_tokens` are not
// supervised (instruction data), and the last token of the pack (it predicts
// nothing). prompt_tokens = 0: everything but the last token is supervised.
at::Tensor sft_targets(int64_t T, int64_t V, int64_t example_tokens, int64_t prompt_tokens, const at::Device& device) {
  at::Tensor t = at::randint(V, {T}, at::kLong);
  const at::Tensor position = at::arange(T, at::kLong).remainder(example_tokens);
  t.masked_fill_(position < prompt_tokens, kIgnoreIndex);
  t[T - 1] = kIgnoreIndex;
  return t.to(device);
}

void expect_within(double fused, double reference, const std::string& what) {
  EXPECT_LE(fused, testing::kMaxErrorRatio * reference + testing::kErrorFloor)
      << what << ": fused " << fused << " vs materialised bf16 " << reference << " (both against fp64)";
}

TEST(LinearCrossEntropyCuda, Bf16WithinTwiceTheMaterialisedPathsError) {
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";
  const at::Device cuda(at::kCUDA, 0);
  const int64_t T = 4096, H = 1024, V = 32000;
  at::manual_seed(3);
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(cuda);
  const at::Tensor hidden = at::randn({T, H}, bf16);
  const at::Tensor weight = (0.05 * at::randn({V, H}, at::TensorOptions().device(cuda))).to(at::kBFloat16);
  const at::Tensor targets = sft_targets(T, V, 300, 120, cuda);
  const double count = static_cast<double>((targets != kIgnoreIndex).sum().item<int64_t>());
  for (double divisor : {1.0, 8.0}) {
    const Result want = exact(hidden, weight, targets, divisor, 1.0 / count);
    const Result ref = run(false, hidden, weight, targets, divisor, 0, 1.0 / count);
    const double ref_loss = rel_err(ref.loss, want.loss), ref_gh = rel_err(ref.grad_hidden, want.grad_hidden),
                 ref_gw = rel_err(ref.grad_weight, want.grad_weight);
    for (int64_t chunk : {int64_t{256}, int64_t{1000}, int64_t{0}}) {
      const std::string label = "divisor " + std::to_string(divisor) + ", chunk " + std::to_string(chunk);
      SCOPED_TRACE(label);
      const Result fused = run(true, hidden, weight, targets, divisor, chunk, 1.0 / count);
      ASSERT_EQ(fused.grad_hidden.scalar_type(), at::kBFloat16);
      ASSERT_EQ(fused.grad_weight.scalar_type(), at::kBFloat16);
      const double loss = rel_err(fused.loss, want.loss), gh = rel_err(fused.grad_hidden, want.grad_hidden),
                   gw = rel_err(fused.grad_weight, want.grad_weight);
      expect_within(loss, ref_loss, "loss");
      expect_within(gh, ref_gh, "grad hidden");
      expect_within(gw, ref_gw, "grad weight");
      std::printf("[linear_cross_entropy bf16 cuda %s] max rel err vs fp64: loss %.3g (materialised %.3g), "
                  "grad hidden %.3g (%.3g), grad weight %.3g (%.3g); fused vs materialised: %.3g, %.3g, %.3g\n",
                  label.c_str(), loss, ref_loss, gh, ref_gh, gw, ref_gw, rel_err(fused.loss, ref.loss),
                  rel_err(fused.grad_hidden, ref.grad_hidden), rel_err(fused.grad_weight, ref.grad_weight));
    }
  }
}

TEST(LinearCrossEntropyCuda, NothingSupervised) {
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";
  const at::Device cuda(at::kCUDA, 0);
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(cuda);
  const at::Tensor hidden = at::randn({64, 128}, bf16), weight = at::randn({1000, 128}, bf16);
  const Result r = run(true, hidden, weight, at::full({64}, kIgnoreIndex, at::TensorOptions().dtype(at::kLong).device(cuda)),
                       4.0, 16, 0.5);
  EXPECT_EQ(r.loss.item<float>(), 0.0f);
  EXPECT_EQ(r.grad_hidden.abs().max().item<float>(), 0.0f);
  EXPECT_EQ(r.grad_weight.abs().max().item<float>(), 0.0f);
}

// The decoder in bf16 with either loss path against the fp64 transformers
// reference of tests/models_gpu (the Bf16Parity suite runs the fused default).
TEST(LinearCrossEntropyCuda, DecoderWithEitherLossPathWithinTwiceTransformersError) {
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";
  const auto dir = testing::fixture_dir(FPTRAIN_FIXTURE_DIR);
  for (const std::string name : {"llama", "granite"}) {
    const testing::Golden ref(dir / (name + "-ref.safetensors")), hf(dir / (name + "-hf.safetensors"));
    CausalLM model = testing::load_model(dir / name, at::kBFloat16, at::Device(at::kCUDA, 0),
                                         attention::Backend::kTorchFA2);
    for (bool fused : {true, false}) {
      model.set_loss_options({fused, fused ? 64 : 0});
      const std::string label = name + (fused ? " fused/64" : " materialised");
      SCOPED_TRACE(label);
      testing::check_bf16_parity(model, ref, hf, /*packed=*/true, label);
    }
  }
}

// ---- memory and time for Llama-3.2-1B's head ----

int64_t allocated_bytes(c10::DeviceIndex device, bool peak) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  const auto& s = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return peak ? s.peak : s.current;
}

struct Measurement {
  double mean_ms = 0, min_ms = std::numeric_limits<double>::infinity();
  double peak_gib = 0;  // above what was allocated before the loss (inputs, targets)
  at::Tensor loss;
};

Measurement measure(bool fused, int64_t chunk, const at::Tensor& hidden, const at::Tensor& weight,
                    const at::Tensor& targets, double count, int iterations) {
  const c10::DeviceIndex device = hidden.device().index();
  Measurement m;
  for (int i = 0; i <= iterations; ++i) {  // the first is a warm-up
    const at::Tensor h = hidden.detach().requires_grad_(true), w = weight.detach().requires_grad_(true);
    c10::cuda::device_synchronize();
    const int64_t before = allocated_bytes(device, false);
    c10::cuda::CUDACachingAllocator::resetPeakStats(device);
    const auto start = std::chrono::steady_clock::now();
    const at::Tensor loss =
        fused ? linear_cross_entropy(h, w, targets, 1.0, chunk) : reference_linear_cross_entropy(h, w, targets);
    (loss / count).backward();
    c10::cuda::device_synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const double peak = static_cast<double>(allocated_bytes(device, true) - before) / (1 << 30);
    m.loss = loss.detach();
    if (i == 0) continue;
    m.mean_ms += ms / iterations;
    m.min_ms = std::min(m.min_ms, ms);
    m.peak_gib = std::max(m.peak_gib, peak);
  }
  return m;
}

TEST(LinearCrossEntropyCuda, MemoryAndTimeLlama1BHead) {
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";
  const at::Device cuda(at::kCUDA, 0);
  const int64_t T = 16384, H = 2048, V = 128256;
  at::manual_seed(17);
  const at::Tensor hidden = at::randn({T, H}, at::TensorOptions().dtype(at::kBFloat16).device(cuda));
  const at::Tensor weight = (0.02 * at::randn({V, H}, at::TensorOptions().device(cuda))).to(at::kBFloat16);
  const struct {
    const char* name;
    int64_t prompt_tokens;  // of each 1024-token example
  } patterns[] = {{"all supervised", 0}, {"instruction data, 40% prompt", 410}};
  for (const auto& p : patterns) {
    const at::Tensor targets = sft_targets(T, V, 1024, p.prompt_tokens, cuda);
    const double count = static_cast<double>((targets != kIgnoreIndex).sum().item<int64_t>());
    const Measurement ref = measure(false, 0, hidden, weight, targets, count, 3);
    c10::cuda::CUDACachingAllocator::emptyCache();
    std::vector<int64_t> chunks = {0, default_chunk_tokens(V)};  // 0: choose_chunks (the in-place kernel's)
    if (p.prompt_tokens == 0) chunks.insert(chunks.end(), {2048, 4096, 8192});
    for (int64_t chunk : chunks) {
      const Measurement fused = measure(true, chunk, hidden, weight, targets, count, 3);
      const double loss_err = rel_err(fused.loss, ref.loss);
      std::printf("[linear_cross_entropy memory/time T=%lld H=%lld V=%lld bf16, %s (%.0f supervised)] loss+backward: "
                  "materialised peak %.2f GiB, %.1f ms (min %.1f); fused (chunk %lld) peak %.2f GiB, %.1f ms "
                  "(min %.1f); max rel err fused vs materialised loss %.3g\n",
                  static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(V), p.name, count,
                  ref.peak_gib, ref.mean_ms, ref.min_ms, static_cast<long long>(chunk), fused.peak_gib, fused.mean_ms,
                  fused.min_ms, loss_err);
      EXPECT_LT(loss_err, 1e-2);
      if (chunk <= default_chunk_tokens(V)) EXPECT_LT(fused.peak_gib, ref.peak_gib / 4) << p.name;
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
}

}  // namespace
}  // namespace fptrain::models
