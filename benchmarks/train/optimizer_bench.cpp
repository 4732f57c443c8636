// One optimizer step on the GPU — clipping by the global norm, AdamW, zeroing the
// gradients — the old way (per-parameter tensors: fp32 gradient accumulators,
// _foreach_norm + stack, at::_fused_adamw_ over lists, a copy per parameter back
// to bf16; a copy of what optim/adamw.cpp did before the flat buffers) against
// the flat buffers (optim/adamw.h: one norm kernel, one AdamW kernel, one
// memset), on a Llama-shaped parameter set in bf16 with fp32 masters.
// Timed with CUDA events; writes JSON and markdown.
//
//   optimizer_bench [--shape llama2-7b|llama3-3b|llama3-1b] [--iters N] [--out DIR]
#include "benchmarks/train/bench_setup.h"
#include "common/byte_units.h"
#include "models/parameter_layout.h"
#include "optim/adamw.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/core/GradMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace fptrain;

// Mean milliseconds per iteration of each named phase, timed with CUDA events.
class PhaseTimer {
 public:
  void time(const std::string& phase, const std::function<void()>& f) {
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record();
    f();
    stop.record();
    pending_.push_back({phase, std::move(start), std::move(stop)});
  }
  // Reads the events (synchronizes) and adds them up.
  void collect() {
    for (auto& p : pending_) {
      p.stop.synchronize();
      ms_[p.phase] += p.start.elapsed_time(p.stop);
      if (std::find(order_.begin(), order_.end(), p.phase) == order_.end()) order_.push_back(p.phase);
    }
    pending_.clear();
  }
  void reset() { ms_.clear(); }
  nlohmann::ordered_json result(int iters) const {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    double total = 0;
    for (const auto& name : order_) {
      j[name] = ms_.at(name) / iters;
      total += ms_.at(name) / iters;
    }
    j["total"] = total;
    return j;
  }

 private:
  struct Pending {
    std::string phase;
    at::cuda::CUDAEvent start, stop;
  };
  std::vector<Pending> pending_;
  std::map<std::string, double> ms_;
  std::vector<std::string> order_;
};

// The old per-parameter AdamW (optim/adamw.cpp before the flat buffers),
// restricted to bf16 weights with fp32 masters, which is what it ran on the GPU.
struct OldAdamW {
  std::vector<at::Tensor> params, grads;  // the model's bf16 weights and their gradients (as backward leaves them)
  std::vector<at::Tensor> weights, accumulators, exp_avg, exp_avg_sq;  // fp32
  at::Tensor step_tensor;

  OldAdamW(const std::vector<models::ParameterInfo>& layout, const at::Device& device) {
    const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(device);
    for (const auto& p : layout) {
      params.push_back(at::randn(p.shape, bf16) * 0.02);
      grads.push_back(at::randn(p.shape, bf16) * 1e-3);
      weights.push_back(params.back().to(at::kFloat));
      accumulators.push_back(at::zeros_like(weights.back()));
      exp_avg.push_back(at::zeros_like(weights.back()));
      exp_avg_sq.push_back(at::zeros_like(weights.back()));
    }
    step_tensor = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  }
  // After each micro-batch's backward: the bf16 gradients added into the fp32 sums.
  void accumulate_gradients() {
    for (size_t i = 0; i < params.size(); ++i) accumulators[i].add_(grads[i]);
  }
  at::Tensor clip_grad_norm(double max_norm) {
    std::vector<at::Tensor> norms = at::_foreach_norm(accumulators, 2);
    at::Tensor total = at::linalg_vector_norm(at::stack(norms), 2).to(at::kFloat);
    at::Tensor coef = at::clamp_max(max_norm / (total + 1e-6), 1.0);
    at::_foreach_mul_(accumulators, coef.to(accumulators[0].scalar_type()));
    return total;
  }
  void adamw(double lr) {
    step_tensor.add_(1);
    std::vector<at::Tensor> steps(weights.size(), step_tensor);
    at::_fused_adamw_(weights, accumulators, exp_avg, exp_avg_sq, {}, steps, lr, 0.9, 0.999, 0.0, 1e-8, false, false);
  }
  void copy_back() {
    for (size_t i = 0; i < params.size(); ++i) params[i].copy_(weights[i]);
  }
  void zero() { at::_foreach_zero_(accumulators); }
};

std::string today() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

double peak_allocated_gib() { return common::gib(static_cast<double>(bench::device_allocated().peak)); }

}  // namespace

int main(int argc, char** argv) {
  std::string shape = "llama2-7b", out_dir;
  int iters = 10;
  const bool known = bench::parse_options(argc, argv,
                                          {{"--shape", [&](const std::string& v) { shape = v; }},
                                           {"--iters", [&](const std::string& v) { iters = std::stoi(v); }},
                                           {"--out", [&](const std::string& v) { out_dir = v; }}});
  if (!known) {
    std::fprintf(stderr, "usage: optimizer_bench [--shape llama2-7b|llama3-3b|llama3-1b] [--iters N] [--out DIR]\n");
    return 2;
  }
  if (!at::hasCUDA()) {
    std::fprintf(stderr, "optimizer_bench needs a CUDA device\n");
    return 1;
  }
  c10::NoGradGuard no_grad;  // the optimizer's own work, outside autograd as in the trainer
  const at::Device device(at::kCUDA, 0);
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  const models::ModelConfig config = bench::llama_shape(shape);
  const std::vector<models::ParameterInfo> layout = models::parameter_layout(config);
  int64_t n = 0;
  for (const auto& p : layout) n += p.numel();
  std::printf("%s: %.3fB parameters in %zu tensors on %s (%.0f GiB)\n", shape.c_str(), n / 1e9, layout.size(),
              prop->name, common::gib(static_cast<double>(prop->totalGlobalMem)));
  const double max_norm = 1.0, lr = 1e-5;
  nlohmann::ordered_json report = {{"shape", shape}, {"num_parameters", n}, {"num_tensors", layout.size()},
                           {"device", prop->name}, {"date", today()}, {"iters", iters}};

  // ---- old: per-parameter tensors ---------------------------------------------
  {
    OldAdamW old(layout, device);
    PhaseTimer timer;
    auto one_step = [&] {
      timer.time("accumulate (1 micro-batch)", [&] { old.accumulate_gradients(); });
      timer.time("clip", [&] { old.clip_grad_norm(max_norm); });
      timer.time("adamw", [&] { old.adamw(lr); });
      timer.time("copy to bf16", [&] { old.copy_back(); });
      timer.time("zero", [&] { old.zero(); });
    };
    for (int i = 0; i < 2; ++i) one_step();
    timer.collect();
    timer.reset();
    for (int i = 0; i < iters; ++i) one_step();
    timer.collect();
    report["old"] = timer.result(iters);
    report["old_peak_allocated_gib"] = peak_allocated_gib();
  }
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);

  // ---- flat buffers --------------------------------------------------------------
  {
    const bench::BenchParameters bp = bench::bf16_parameters(config, device);
    optim::OptimizerSection o;
    o.lr = lr;
    // One buffer that fill() can write (lazy buckets run the same kernels, bucket by bucket).
    o.gradient_storage = optim::GradStorage::kResident;
    optim::AdamW opt(bp.names, bp.params, o);
    const at::Tensor& grads = opt.flat().gradients().buffer();
    PhaseTimer timer;
    auto fill = [&] { grads.normal_(0.0, 1e-3); };  // what backward leaves (untimed)
    auto one_step = [&] {
      fill();
      timer.time("grad norm + clip coefficient", [&] { opt.grad_norm(max_norm); });
      timer.time("adamw + zero grads", [&] { opt.step(lr); });
    };
    for (int i = 0; i < 2; ++i) one_step();
    timer.collect();
    timer.reset();
    for (int i = 0; i < iters; ++i) one_step();
    timer.collect();
    report["flat"] = timer.result(iters);
    report["flat_peak_allocated_gib"] = peak_allocated_gib();  // before the fp32 accumulator below exists

    // The parts on their own: the memset, and the fp32 accumulation of one more micro-batch.
    PhaseTimer parts;
    for (int i = 0; i < iters + 1; ++i) {
      fill();
      parts.time("zero grads (memset)", [&] { opt.zero_grad(); });
      fill();
      parts.time("fp32 accumulation (1 micro-batch)", [&] { opt.accumulate_gradients(); });
      opt.zero_grad();
      if (i == 0) {
        parts.collect();
        parts.reset();
      }
    }
    parts.collect();
    report["flat_parts"] = parts.result(iters);
    report["flat_total_elements"] = opt.flat().layout().total();
    report["flat_with_fp32_accumulator_peak_allocated_gib"] = peak_allocated_gib();
  }

  // Bytes each flat phase must move per step (bf16 weights and grads, fp32 master
  // and moments), and the bandwidth that makes.
  const double elems = report["flat_total_elements"].get<double>();
  const double step_bytes = elems * (2 + 4 + 4 + 4 + 4 + 4 + 4 + 2 + 2);  // + the memset of the grads
  const double norm_bytes = elems * 2;
  const double flat_ms = report["flat"]["total"].get<double>(), old_ms = report["old"]["total"].get<double>();
  report["flat_bandwidth_tb_s"] = (step_bytes + norm_bytes) / (flat_ms * 1e-3) / 1e12;
  report["speedup"] = old_ms / flat_ms;
  std::printf("%s\n", report.dump(2).c_str());

  if (!out_dir.empty()) {
    bench::write_json(out_dir, "optimizer-bench.json", report);
    std::ofstream md(out_dir + "/optimizer-bench.md");
    char line[512];
    std::snprintf(line, sizeof line,
                  "One optimizer step (clip by global norm + AdamW + zero grads), %s shape: %.2fB parameters in %zu "
                  "tensors, bf16 weights + fp32 masters; %s, %s, mean of %d steps (CUDA events)\n\n",
                  shape.c_str(), n / 1e9, layout.size(), prop->name, today().c_str(), iters);
    md << line;
    md << "| path | phase | ms |\n| --- | --- | ---: |\n";
    for (const char* path : {"old", "flat", "flat_parts"})
      for (const auto& [phase, ms] : report[path].items()) {
        if (std::string(path) == "flat_parts" && phase == "total") continue;
        std::snprintf(line, sizeof line, "| %s | %s | %.2f |\n", path, phase.c_str(), ms.get<double>());
        md << line;
      }
    std::snprintf(line, sizeof line,
                  "\nFlat step: %.1fx faster than the per-parameter step; %.2f TB/s effective (%.1f GB moved: "
                  "norm 2 B, AdamW 28 B, memset 2 B per element). Peak allocated: old %.1f GiB (20 B per "
                  "parameter), flat %.1f GiB (16 B), flat with the fp32 accumulator %.1f GiB (20 B). The old total "
                  "counts one micro-batch's fp32 accumulation, which it did for every micro-batch; the flat path "
                  "adds its fp32 accumulation only with optimizer.fp32_grad_accumulation and more than one "
                  "micro-batch.\n",
                  report["speedup"].get<double>(), report["flat_bandwidth_tb_s"].get<double>(),
                  (step_bytes + norm_bytes) / 1e9, report["old_peak_allocated_gib"].get<double>(),
                  report["flat_peak_allocated_gib"].get<double>(),
                  report["flat_with_fp32_accumulator_peak_allocated_gib"].get<double>());
    md << line;
  }
  return 0;
}
