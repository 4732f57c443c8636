// NF4 on the GPU: quantising there gives the CPU's codes, and the fused
// dequantisation kernel (models/cuda/nf4_kernels.cu) gives the ATen
// composition's values bit for bit (fp32, bf16, fp16), with its time for a
// Llama-3-8B MLP projection against the composition's, printed to the log.
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
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    const at::Tensor w = (at::randn({384, 1000}) * at::linspace(0.01, 2.0, 1000)).to(dtype);
    const Nf4Tensor on_gpu = quantize_nf4(w.cuda());
    const Nf4Tensor on_cpu = quantize_nf4(w);
    EXPECT_TRUE(at::equal(on_gpu.codes.cpu(), on_cpu.codes)) << dtype;
    EXPECT_TRUE(at::equal(on_gpu.absmax_codes.cpu(), on_cpu.absmax_codes)) << dtype;
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
}

}  // namespace
}  // namespace fptrain::models
