// optimizer.offload: cpu against the device's AdamW, the optimizer alone on one GPU: for each
// state form, one step (norm + AdamW) on a Llama-shaped bf16 parameter set, then the buckets
// waited for in order as the next forward waits for them. Reports, per form and setting, the
// mean milliseconds until the first bucket and until every bucket is back on the device (on
// the device: the step kernels), the device memory the optimizer added and the host memory
// it keeps. Timed with CUDA events (the host update blocks the waits, and the device update's
// waits make the compute stream wait for its update stream, so the events measure either).
// Gradients: realistic by default (gradient_data.h; the 8-bit host step's speed depends on
// them), --data normal for N(0, 1e-3) as before. --update picks where the offloaded update
// runs (optimizer.offload_update): host (the default here, as before), device, or both (one row
// each, so one run compares them on one machine).
//
//   offload_bench [--shape llama3-1b|llama3-3b|llama2-7b|llama3-8b] [--iters N] [--bucket-mb M]
//                 [--data realistic|normal] [--update host|device|both] [--out DIR]
#include "benchmarks/train/bench_setup.h"
#include "benchmarks/train/gradient_data.h"
#include "optim/adamw.h"

#include <ATen/cuda/CUDAEvent.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace fptrain;

struct Form {
  std::string name;
  bool split;
  optim::Moments moments;
};

// Where the state lives and the update runs; `name` labels the rows ("cpu": the host update, as before).
struct Setting {
  std::string name;
  optim::Offload offload;
  optim::OffloadUpdate update;
};

std::vector<Setting> settings_of(const std::string& update) {
  std::vector<Setting> out = {{"none", optim::Offload::kNone, optim::OffloadUpdate::kHost}};
  if (update == "host" || update == "both") out.push_back({"cpu", optim::Offload::kCpu, optim::OffloadUpdate::kHost});
  if (update == "device" || update == "both")
    out.push_back({"cpu, device update", optim::Offload::kCpu, optim::OffloadUpdate::kDevice});
  if (out.size() == 1) throw std::invalid_argument("--update: expected host, device or both, got '" + update + "'");
  return out;
}

// One form under one setting: mean ms to the first and the last bucket, memory.
nlohmann::ordered_json measure(const models::ModelConfig& config, const Form& f, const Setting& setting, int iters,
                               int64_t bucket_mb, const std::string& data) {
  const bench::BenchParameters bp = bench::bf16_parameters(config, at::kCUDA);
  const int64_t before = bench::device_allocated().current;
  optim::OptimizerSection o;
  o.split_masters = f.split;
  o.moments = f.moments;
  o.offload = setting.offload;
  o.offload_update = setting.update;
  optim::DataParallelSpec dp;
  dp.bucket_elements = bucket_mb << 19;  // bf16
  optim::AdamW opt(bp.names, bp.params, o, optim::FlatLayout::kDefaultAlignment, dp);
  const int64_t device_bytes = bench::device_allocated().current - before;
  double first = 0, last = 0;
  for (int it = 0; it <= iters; ++it) {  // iteration 0 warms up
    for (size_t b = 0; b < opt.flat().layout().buckets().size(); ++b) {  // as a backward leaves them
      const at::Tensor g = opt.flat().gradients().acquire(b);
      g.copy_(bench::gradients(data, g.numel(), g.device()));
    }
    at::cuda::CUDAEvent start(cudaEventDefault), first_ready(cudaEventDefault), all_ready(cudaEventDefault);
    start.record();
    opt.grad_norm(1.0);
    opt.step(1e-5);
    const auto& buckets = opt.flat().layout().buckets();
    for (size_t b = 0; b < buckets.size(); ++b) {
      opt.wait_for_weights(buckets[b].offset + buckets[b].size);
      if (b == 0) first_ready.record();
    }
    all_ready.record();
    all_ready.synchronize();
    if (it == 0) continue;
    first += start.elapsed_time(first_ready) / iters;
    last += start.elapsed_time(all_ready) / iters;
  }
  return {{"form", f.name},
          {"offload", setting.name},
          {"buckets", opt.flat().layout().buckets().size()},
          {"first_bucket_ms", first},
          {"step_ms", last},
          {"device_bytes_added", device_bytes},
          {"host_bytes", opt.host_bytes()},
          {"staging_bytes", opt.staging_bytes()}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape = "llama3-1b", out_dir = ".", data = "realistic", update = "host";
  int iters = 3;
  int64_t bucket_mb = 512;
  // Unknown options are ignored, as they always were here.
  bench::parse_options(argc, argv,
                       {{"--shape", [&](const std::string& v) { shape = v; }},
                        {"--iters", [&](const std::string& v) { iters = std::stoi(v); }},
                        {"--bucket-mb", [&](const std::string& v) { bucket_mb = std::stoll(v); }},
                        {"--data", [&](const std::string& v) { data = v; }},
                        {"--update", [&](const std::string& v) { update = v; }},
                        {"--out", [&](const std::string& v) { out_dir = v; }}});
  const models::ModelConfig config = bench::llama_shape(shape);
  const std::vector<Form> forms = {{"split masters, 8-bit moments", true, optim::Moments::k8bit},
                                   {"split masters, fp32 moments", true, optim::Moments::kFull},
                                   {"fp32 masters, fp32 moments", false, optim::Moments::kFull}};
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::string md = "| form | offload | buckets | first bucket ms | step ms | device GiB added | host GiB |\n"
                   "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n";
  const std::vector<Setting> settings = settings_of(update);
  for (const Form& f : forms)
    for (const Setting& setting : settings) {
      nlohmann::ordered_json r;
      try {
        r = measure(config, f, setting, iters, bucket_mb, data);
      } catch (const std::exception& e) {  // out of device or host memory: the row says so
        r = {{"form", f.name}, {"offload", setting.name}, {"error", e.what()}};
        std::fprintf(stderr, "%s / %s: %s\n", f.name.c_str(), r["offload"].get<std::string>().c_str(), e.what());
        rows.push_back(r);
        continue;
      }
      char line[256];
      std::snprintf(line, sizeof line, "| %s | %s | %zu | %.1f | %.1f | %.2f | %.2f |\n", f.name.c_str(),
                    r["offload"].get<std::string>().c_str(), r["buckets"].get<size_t>(), r["first_bucket_ms"].get<double>(),
                    r["step_ms"].get<double>(), r["device_bytes_added"].get<int64_t>() / 1073741824.0,
                    r["host_bytes"].get<int64_t>() / 1073741824.0);
      md += line;
      std::fputs(line, stdout);
      rows.push_back(r);
    }
  bench::write_json(out_dir, "offload-bench.json",
                    {{"shape", shape}, {"data", data}, {"update", update}, {"rows", rows}});
  std::ofstream(out_dir + "/offload-bench.md") << "offload_bench --shape " << shape << " (mean of " << iters
                                               << " steps, " << data << " gradients)\n\n" << md;
  return 0;
}
