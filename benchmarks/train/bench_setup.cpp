#include "benchmarks/train/bench_setup.h"

#include "models/parameter_layout.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <fstream>
#include <stdexcept>

namespace fptrain::bench {

models::ModelConfig llama_shape(const std::string& shape) {
  models::ModelConfig c;
  auto set = [&](int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv, bool tied) {
    c.vocab_size = vocab;
    c.hidden_size = hidden;
    c.intermediate_size = inter;
    c.num_hidden_layers = layers;
    c.num_attention_heads = heads;
    c.num_key_value_heads = kv;
    c.head_dim = hidden / heads;
    c.tie_word_embeddings = tied;
  };
  if (shape == "llama2-7b") set(32000, 4096, 11008, 32, 32, 32, false);
  else if (shape == "llama3-8b") set(128256, 4096, 14336, 32, 32, 8, false);
  else if (shape == "llama3-3b") set(128256, 3072, 8192, 28, 24, 8, true);
  else if (shape == "llama3-1b") set(128256, 2048, 8192, 16, 32, 8, true);
  else throw std::invalid_argument("unknown --shape " + shape + " (llama2-7b, llama3-8b, llama3-3b, llama3-1b)");
  return c;
}

BenchParameters bf16_parameters(const models::ModelConfig& config, const at::Device& device) {
  BenchParameters out;
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(device);
  for (const auto& p : models::parameter_layout(config)) {
    out.names.push_back(p.name);
    // Drawn in bf16: no fp32 copy of a tensor raises the peak that optimizer_bench reports.
    out.params.push_back((at::randn(p.shape, bf16) * 0.02).requires_grad_(true));
  }
  return out;
}

bool parse_options(int argc, char** argv, const OptionSetters& setters) {
  bool known = argc % 2 == 1;  // argv[0], then pairs
  for (int i = 1; i + 1 < argc; i += 2) {
    const auto it = setters.find(argv[i]);
    if (it == setters.end()) known = false;
    else it->second(argv[i + 1]);
  }
  return known;
}

DeviceAllocated device_allocated() {
  const auto& bytes = c10::cuda::CUDACachingAllocator::getDeviceStats(0)
                          .allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return {bytes.current, bytes.peak};
}

void write_json(const std::string& dir, const std::string& file, const nlohmann::ordered_json& report) {
  std::ofstream(dir + "/" + file) << report.dump(2) << "\n";
}

}  // namespace fptrain::bench
