// Fresh parameters for training from scratch, initialised as transformers does.
#pragma once

#include "models/model_config.h"
#include "models/tensor_map.h"

#include <ATen/ATen.h>

#include <cstdint>

namespace fptrain::models {

// Every parameter of expected_parameter_shapes(config), on the CPU in `dtype`:
// linear and embedding weights ~ N(0, initializer_range) (config.json's value,
// 0.02 when absent or 0), the pad token's embedding row zero, RMSNorm weights 1,
// biases 0. Drawn in fp32 from a CPU generator seeded with `seed`, in model
// order, so the result depends only on (config, seed).
TensorMap init_parameters(const ModelConfig& config, uint64_t seed, at::ScalarType dtype = at::kFloat);

}  // namespace fptrain::models
