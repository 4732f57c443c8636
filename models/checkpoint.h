// Hugging Face checkpoints on disk: a folder with config.json and the weights as
// model.safetensors, or as shards listed in model.safetensors.index.json.
#pragma once

#include "models/model_config.h"
#include "models/model_dtype.h"
#include "models/nf4.h"
#include "models/parameter_layout.h"
#include "models/safetensors.h"
#include "models/tensor_map.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace fptrain::models {

// Loads the weights of the checkpoint in `model_dir` (model.safetensors or
// model.safetensors.index.json + shards). Checks that every expected tensor is
// present with the expected shape and that nothing else is (rotary inv_freq
// buffers and, with tied embeddings, lm_head.weight are ignored); one error lists
// all missing, unexpected and misshapen tensors. Each tensor is converted to
// `dtype` and placed on `device` with one copy out of the file: on the CPU
// straight into the result (or one converting pass from the mapping); to CUDA
// through two pinned staging buffers that overlap reading with the transfer,
// converting on the GPU. The result holds exactly the names of
// expected_parameter_shapes(), as contiguous tensors owned by nobody else. A 4-bit
// checkpoint's projections are stored as bitsandbytes' parts instead (checked the same
// way) and go to LoadOptions::keep_quantized.
TensorMap load_pretrained_weights(const std::filesystem::path& model_dir, const ModelConfig& config,
                                  at::ScalarType dtype, at::Device device = at::kCPU);

// How the loader moves bytes; the defaults are the measured best (benchmarks/models).
struct LoadOptions {
  ByteReader reader = ByteReader::kPread;  // file -> host memory
  int64_t staging_bytes = 64ll << 20;     // each of the two pinned buffers (CUDA)
  // What the result keeps of each tensor once it is on the device in the target
  // dtype (null: the tensor). Called in loading order, one tensor at a time, so a
  // conversion here (QLoRA's quantisation) never holds the whole model at once.
  std::function<at::Tensor(const std::string& name, const at::Tensor& tensor)> keep;
  // What the result keeps of each projection of a 4-bit checkpoint (ModelConfig::bnb_nf4),
  // read as stored (models/nf4_checkpoint.h) and dequantising to the target dtype. Such a
  // checkpoint loads only with it (QLoRA).
  std::function<at::Tensor(const std::string& name, Nf4Tensor weight)> keep_quantized;
};
TensorMap load_pretrained_weights(const std::filesystem::path& model_dir, const ModelConfig& config,
                                  at::ScalarType dtype, at::Device device, const LoadOptions& options);

// Writes config.json (with dtype set to `dtype`) and the weights, cast to `dtype`,
// as model.safetensors or, when they exceed max_shard_bytes, as
// model-0000i-of-0000n.safetensors + model.safetensors.index.json, exactly as
// transformers names them. lm_head.weight is not written when tied. The folder
// is assembled under a temporary name next to `dir` and renamed into place, so
// `dir` is either the old checkpoint or the complete new one; whatever `dir`
// held before is replaced.
void save_pretrained(const std::filesystem::path& dir, const ModelConfig& config, const TensorMap& params,
                     at::ScalarType dtype, int64_t max_shard_bytes = 5'000'000'000);

}  // namespace fptrain::models
