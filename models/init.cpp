#include "models/init.h"

#include "models/model_dtype.h"
#include "models/parameter_layout.h"

#include "common/json_input.h"
#include "common/strings.h"

#include <ATen/CPUGeneratorImpl.h>

#include <stdexcept>

namespace fptrain::models {
namespace {


double initializer_range(const ModelConfig& config) {
  const auto& raw = config.raw;
  if (!raw.is_object() || !raw.contains("initializer_range") || raw["initializer_range"].is_null()) return 0.02;
  if (!raw["initializer_range"].is_number())
    throw std::runtime_error("config key 'initializer_range' (value " + common::json_excerpt(raw["initializer_range"]) +
                             "): expected a number");
  const double std = raw["initializer_range"].get<double>();
  return std > 0 ? std : 0.02;  // transformers: `initializer_range or 0.02`
}

}  // namespace

TensorMap init_parameters(const ModelConfig& config, uint64_t seed, at::ScalarType dtype) {
  dtype_name(dtype);  // rejects non-model dtypes
  const double std = initializer_range(config);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto shapes = expected_parameter_shapes(config);
  TensorMap out;
  for (const std::string& name : parameter_names_in_model_order(config)) {
    const auto& shape = shapes.at(name);
    at::Tensor t;
    if (common::ends_with(name, "layernorm.weight") || name == "model.norm.weight") {
      t = at::ones(shape, at::kFloat);
    } else if (common::ends_with(name, ".bias")) {
      t = at::zeros(shape, at::kFloat);
    } else {
      t = at::empty(shape, at::kFloat);
      t.normal_(0.0, std, gen);
      if (name == "model.embed_tokens.weight" && config.pad_token_id) t[*config.pad_token_id].zero_();
    }
    out.emplace(name, t.to(dtype));
  }
  return out;
}

}  // namespace fptrain::models
