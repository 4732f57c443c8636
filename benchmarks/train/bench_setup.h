// What the optimizer benchmarks (optimizer_bench, offload_bench, host_step_bench) set up
// alike: the Llama parameter shapes, their bf16 parameters, "--name value" options, the
// device's allocated bytes and the JSON file they write.
#pragma once

#include "models/model_config.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace fptrain::bench {

// The parameter shapes of a published Llama model (only what models::parameter_layout reads):
// llama2-7b, llama3-8b, llama3-3b, llama3-1b.
models::ModelConfig llama_shape(const std::string& shape);

// The model's parameters in layout order: bf16, N(0, 0.02), requiring gradients.
struct BenchParameters {
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
};
BenchParameters bf16_parameters(const models::ModelConfig& config, const at::Device& device);

// Hands each "--name value" pair to its setter. False when a name has no setter or the last
// one no value (the caller decides whether that is an error: some benchmarks ignore it).
using OptionSetters = std::map<std::string, std::function<void(const std::string&)>>;
bool parse_options(int argc, char** argv, const OptionSetters& setters);

// Bytes the caching allocator holds for tensors on CUDA device 0: now and at the peak.
struct DeviceAllocated {
  int64_t current, peak;
};
DeviceAllocated device_allocated();

// `report` as indented JSON into dir/file.
void write_json(const std::string& dir, const std::string& file, const nlohmann::ordered_json& report);

}  // namespace fptrain::bench
