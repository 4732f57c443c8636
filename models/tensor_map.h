// The one container for named model tensors, shared by the loader, the saver,
// the initializer and the decoder.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>

namespace fptrain::models {

// Parameters by their Hugging Face names ("model.layers.0.self_attn.q_proj.weight").
// Redeclaring this alias elsewhere with the same type is allowed; include this header instead.
using TensorMap = std::map<std::string, at::Tensor>;

}  // namespace fptrain::models
