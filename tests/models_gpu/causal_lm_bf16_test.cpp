// The decoder in bf16 on CUDA against transformers on CUDA, for every attention
// backend this build has: errors against an fp64 transformers reference must be
// no worse than about twice transformers' own bf16 errors (printed for the record).
#include "tests/models_gpu/bf16_parity.h"

#include "attention/fptrain_backend.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fptrain::models {
namespace {

std::vector<attention::Backend> cuda_backends() {
  std::vector<attention::Backend> out{attention::Backend::Reference, attention::Backend::TorchFA2};
  if (attention::fptrain_kernels_available()) {
    out.push_back(attention::Backend::Fptrain);
  } else {
    std::printf("attention backend fptrain: kernels not available in this build/device, not compared\n");
  }
  return out;
}

class Bf16Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Bf16Parity, WithinTwiceTransformersOwnBf16Error) {
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";
  const std::string name = GetParam();
  const auto dir = testing::fixture_dir(FPTRAIN_FIXTURE_DIR);
  const testing::Golden ref(dir / (name + "-ref.safetensors")), hf(dir / (name + "-hf.safetensors"));
  for (attention::Backend backend : cuda_backends()) {
    CausalLM model = testing::load_model(dir / name, at::kBFloat16, at::Device(at::kCUDA, 0), backend);
    for (bool packed : {false, true}) {
      const std::string label =
          name + " " + std::string(attention::backend_name(backend)) + (packed ? " packed" : " 1-by-1");
      SCOPED_TRACE(label);
      testing::check_bf16_parity(model, ref, hf, packed, label);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Bf16Parity, ::testing::Values("llama", "mistral", "granite"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace fptrain::models
