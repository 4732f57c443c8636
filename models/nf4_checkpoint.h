// bitsandbytes' serialisation of a 4-bit NF4 weight, as transformers' save_pretrained
// writes a model loaded with load_in_4bit (bnb_4bit_use_double_quant): each
// projection weight "<w>" becomes six tensors,
//   <w>                                    uint8 [ceil(numel / 2), 1]  packed codes
//   <w>.absmax                             uint8 [blocks of 64]        block maxima, 8-bit codes
//   <w>.nested_absmax                      fp32  [ceil(blocks / 256)]  their scales
//   <w>.nested_quant_map                   fp32  [256]                 the dynamic map
//   <w>.quant_map                          fp32  [16]                  the NF4 levels
//   <w>.quant_state.bitsandbytes__nf4      uint8 [n]                   JSON: quant_type, blocksize,
//                                          dtype, shape, nested_blocksize, nested_offset
// which are exactly an Nf4Tensor's fields (models/nf4.h), read without requantising.
#pragma once

#include "models/nf4.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fptrain::models {

// A decoder projection's weight ("model.layers.N.<...>_proj.weight"): what QLoRA quantises.
bool is_projection_weight(const std::string& name);

// The six tensors that store the weight `name` of `shape`; the JSON's length is -1 (any).
std::map<std::string, std::vector<int64_t>> nf4_checkpoint_parts(const std::string& name,
                                                                 const std::vector<int64_t>& shape);
inline constexpr size_t kNf4CheckpointParts = 6;

// {weight name, part suffix ("" for the codes)} when `name` is one of those tensors.
std::optional<std::pair<std::string, std::string>> nf4_part_of(const std::string& name);

// The weight from its parts (by suffix, on any device, as stored), dequantising to
// `dtype`; throws naming the tensor when a part disagrees with the format or `shape`.
Nf4Tensor nf4_from_checkpoint(const std::string& name, const std::map<std::string, at::Tensor>& parts,
                              const std::vector<int64_t>& shape, at::ScalarType dtype);

}  // namespace fptrain::models
