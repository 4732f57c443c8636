// The one element-type enum of every CUDA kernel of the project (models/cuda,
// optim/cuda, attention/cuda): kernel argument structs carry it, so they stay
// free of LibTorch. torch_dtype.h maps ATen's scalar types onto it.
#pragma once

namespace fptrain::common::cuda {

enum class Dtype { kFloat32, kBFloat16, kFloat16 };

inline int element_bytes(Dtype d) { return d == Dtype::kFloat32 ? 4 : 2; }

}  // namespace fptrain::common::cuda
