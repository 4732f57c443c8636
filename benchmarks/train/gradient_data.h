// Gradients for the optimizer benchmarks (host_step_bench.cpp, offload_bench.cpp), bf16 on a device.
//
// "normal": N(0, 1e-3) everywhere, what offload_bench and optimizer_bench fill. Every 256-block
// then has the same narrow spread, unlike a model's gradients.
// "realistic": what a backward leaves, as far as the 8-bit step can tell: rows of 2048 with
// their own scale (10^U(-9, -3): layers and tokens differ by many decades), within a row a
// log-normal spread (sigma 0.75 decades) times a normal; 10% of rows all zero (embedding rows
// of tokens absent from the batch); 1 in 4096 elements +-1e-19, whose g^2 (1 - beta2) is
// subnormal.
#pragma once

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

namespace fptrain::bench {

constexpr int64_t kGradRow = 2048;

inline at::Tensor realistic_gradients(int64_t n, const at::Device& device) {
  const int64_t rows = (n + kGradRow - 1) / kGradRow;
  const auto f32 = at::TensorOptions().device(device);
  const at::Tensor row_log10 = at::empty({rows, 1}, f32).uniform_(-9.0, -3.0);
  const at::Tensor row_live = (at::rand({rows, 1}, f32) >= 0.1).to(at::kFloat);
  at::Tensor g = at::randn({rows, kGradRow}, f32) * at::pow(10.0, row_log10 + 0.75 * at::randn({rows, kGradRow}, f32));
  g = (g * row_live).reshape({-1}).narrow(0, 0, n).contiguous();
  const at::Tensor tiny = at::rand({n}, f32) < 1.0 / 4096;
  g = at::where(tiny, at::sign(g) * 1e-19, g);  // sign 0 in zero rows: stays 0
  return g.to(at::kBFloat16);
}

inline at::Tensor gradients(const std::string& kind, int64_t n, const at::Device& device = at::kCPU) {
  if (kind == "normal") return (at::randn({n}, at::TensorOptions().device(device)) * 1e-3).to(at::kBFloat16);
  if (kind == "realistic") return realistic_gradients(n, device);
  // Every g^2 (1 - beta2) subnormal: what the step costs where the CPU slows down for them.
  if (kind == "subnormal") return (at::randn({n}, at::TensorOptions().device(device)) * 1e-20).to(at::kBFloat16);
  throw std::invalid_argument("unknown gradient data " + kind + " (normal, realistic, subnormal)");
}

}  // namespace fptrain::bench
