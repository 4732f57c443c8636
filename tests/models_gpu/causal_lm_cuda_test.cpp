// The decoder on CUDA against transformers on CUDA. In bf16, for every attention
// backend this build has, errors against an fp64 transformers reference must be
// no worse than about twice transformers' own bf16 errors (printed for the
// record); fp32 and fp16 run too.
#include "tests/models_gpu/bf16_parity.h"

#include "attention/hopper_backend.h"
#include "models/model_config.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fptrain::models {
namespace {

std::vector<attention::Backend> cuda_backends(const ModelConfig& config) {
  const int64_t head_dim = config.head_dim;
  std::vector<attention::Backend> out{attention::Backend::kReference};
  if (config.attn_logit_softcap > 0)  // soft-capped scores: not in torch-fa2
    std::printf("attention logit soft-capping: torch-fa2 has none, not compared\n");
  else
    out.push_back(attention::Backend::kTorchFA2);
  if (attention::hopper_kernels_support(head_dim, at::kBFloat16)) {
    out.push_back(attention::Backend::kHopper);
  } else {
    std::printf("attention backend hopper: no kernels for head dim %lld in this build/device, not compared\n",
                static_cast<long long>(head_dim));
  }
  return out;
}

class Bf16Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Bf16Parity, WithinTwiceTransformersOwnBf16Error) {
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";
  const std::string name = GetParam();
  const auto dir = testing::fixture_dir(FPTRAIN_FIXTURE_DIR);
  const testing::Golden ref(dir / (name + "-ref.safetensors")), hf(dir / (name + "-hf.safetensors"));
  for (attention::Backend backend : cuda_backends(load_model_config(dir / name / "config.json"))) {
    CausalLM model = testing::load_model(dir / name, at::kBFloat16, at::Device(at::kCUDA, 0), backend);
    for (bool packed : {false, true}) {
      const std::string label =
          name + " " + std::string(attention::backend_name(backend)) + (packed ? " packed" : " 1-by-1");
      SCOPED_TRACE(label);
      testing::check_bf16_parity(model, ref, hf, packed, label);
    }
  }
}

// fp32 and fp16 weights on CUDA: fp32 (reference attention) must be close to
// the fp64 reference (TF32 is off by default); fp16 (torch-fa2) close to 16-bit
// rounding, with finite gradients.
TEST_P(Bf16Parity, Fp32AndFp16AlsoRunOnCuda) {
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";
  const std::string name = GetParam();
  const auto dir = testing::fixture_dir(FPTRAIN_FIXTURE_DIR);
  const testing::Golden ref(dir / (name + "-ref.safetensors"));
  const testing::Packed p = testing::pack(ref.examples(), at::Device(at::kCUDA, 0));
  std::vector<at::Tensor> ref_logits;
  for (int i = 0; i < ref.num_examples(); ++i) ref_logits.push_back(ref.logits(i));
  const struct {
    at::ScalarType dtype;
    attention::Backend backend;
    double max_err;
  } runs[] = {{at::kFloat, attention::Backend::kReference, 1e-4}, {at::kHalf, attention::Backend::kTorchFA2, 2e-2}};
  const bool capped = load_model_config(dir / name / "config.json").attn_logit_softcap > 0;
  for (auto r : runs) {
    if (capped) r.backend = attention::Backend::kReference;
    CausalLM model = testing::load_model(dir / name, r.dtype, at::Device(at::kCUDA, 0), r.backend);
    const LossOutput loss = model.loss(p.input, p.labels);
    loss.loss_sum.backward();
    const double err = testing::rel_err(model.logits(p.input), at::cat(ref_logits));
    EXPECT_LT(err, r.max_err) << c10::toString(r.dtype);
    for (const auto& [pname, param] : model.parameters()) {
      ASSERT_TRUE(param.grad().defined()) << pname;
      EXPECT_TRUE(at::isfinite(param.grad()).all().item<bool>()) << pname;
    }
    std::printf("[%s %s %s packed] logits rel err vs fp64 transformers: %.3g\n", c10::toString(r.dtype),
                name.c_str(), std::string(attention::backend_name(r.backend)).c_str(), err);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, Bf16Parity, ::testing::Values("llama", "mistral", "granite", "qwen2", "qwen3", "phi3", "gemma2",
                                           "gemma2_hd256", "gemma3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace fptrain::models
