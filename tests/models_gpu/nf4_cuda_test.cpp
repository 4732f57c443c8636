// NF4 on the GPU: the quantisation kernel gives the CPU composition's codes and
// maxima, and the dequantisation kernel (models/cuda/nf4_kernels.cu) its values,
// bit for bit (fp32, bf16, fp16; whole blocks and a shorter last one), with both
// kernels' times for a Llama-3-8B MLP projection against the composition's.
#include "models/cuda/fused_ops_cuda.h"
#include "models/nf4.h"

#include <ATen/cuda/CUDAEvent.h>
#include <gtest/gtest.h>

#include <cstdio>

namespace fptrain::models {
namespace {

Nf4Tensor to_cpu(const Nf4Tensor& q) {
  Nf4Tensor c = q;
  c.codes = q.codes.cpu();
  c.absmax_codes = q.absmax_codes.cpu();
  c.absmax_scales = q.absmax_scales.cpu();
  c.absmax_offset = q.absmax_offset.cpu();
  return c;
}

TEST(Nf4Cuda, KernelEqualsTheCompositionBitForBit) {
  if (!cuda::kernels_built() || !cuda::device_supported(at::Device(at::kCUDA, 0))) GTEST_SKIP() << "needs sm_90";
  at::manual_seed(3);
  // Whole blocks; a last block of 24 (7 x 1000 = 109 x 64 + 24), with an all-zero block.
  at::Tensor shorter = at::randn({7, 1000}) * 0.02;
  shorter[2].narrow(0, 0, 200).zero_();
  for (const at::Tensor& base : {at::randn({384, 1000}) * at::linspace(0.01, 2.0, 1000), shorter})
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const at::Tensor w = base.to(dtype);
    const Nf4Tensor on_gpu = quantize_nf4(w.cuda());
    const Nf4Tensor on_cpu = quantize_nf4(w);
    EXPECT_TRUE(at::equal(on_gpu.codes.cpu(), on_cpu.codes)) << dtype;
    EXPECT_TRUE(at::equal(on_gpu.absmax_codes.cpu(), on_cpu.absmax_codes)) << dtype;
    // The maxima's mean (the offset) is a reduction: the GPU's order moves its last bit, and the scales with it.
    EXPECT_TRUE(at::allclose(on_gpu.absmax_scales.cpu(), on_cpu.absmax_scales, 1e-6, 0)) << dtype;
    const at::Tensor kernel = dequantize_nf4(on_gpu).cpu();
    const at::Tensor composition = dequantize_nf4(to_cpu(on_gpu));
    EXPECT_TRUE(at::equal(kernel, composition)) << dtype << ": max difference "
                                                << (kernel.to(at::kFloat) - composition.to(at::kFloat)).abs().max();
  }
}

TEST(Nf4Cuda, KernelTimeForAnEightBillionMlpProjection) {
  if (!cuda::kernels_built() || !cuda::device_supported(at::Device(at::kCUDA, 0))) GTEST_SKIP() << "needs sm_90";
  const Nf4Tensor q = quantize_nf4(at::randn({14336, 4096}, at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16)));
  auto time_ms = [](auto f) {
    for (int i = 0; i < 3; ++i) f();
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record();
    for (int i = 0; i < 20; ++i) f();
    stop.record();
    stop.synchronize();
    return start.elapsed_time(stop) / 20.0;
  };
  const double kernel = time_ms([&] { (void)dequantize_nf4(q); });
  Nf4Tensor odd = q;  // numel not a multiple of 8 is not the kernel's: time the composition on the GPU
  odd.shape = {14336 * 4096 - 4};
  odd.codes = q.codes.narrow(0, 0, q.codes.numel() - 2);
  const double composition = time_ms([&] { (void)dequantize_nf4(odd); });
  const double gb = (q.nbytes() + 2.0 * q.numel()) / 1e9;
  std::printf("NF4 dequantisation of a 14336 x 4096 weight: kernel %.3f ms (%.0f GB/s), ATen composition %.3f ms\n",
              kernel, gb / kernel * 1e3, composition);
  EXPECT_LT(kernel, composition);
  const at::Tensor w = dequantize_nf4(q);
  const double quantize = time_ms([&] { (void)quantize_nf4(w); });
  const at::Tensor odd_w = w.reshape(-1).narrow(0, 0, w.numel() - 4);  // the composition's
  const double quantize_composition = time_ms([&] { (void)quantize_nf4(odd_w); });
  std::printf("NF4 quantisation of the same weight: kernel (+ ATen double quantisation) %.3f ms, ATen composition "
              "%.3f ms\n", quantize, quantize_composition);
  EXPECT_LT(quantize, quantize_composition);
}

}  // namespace
}  // namespace fptrain::models
