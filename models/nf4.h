// 4-bit NormalFloat weights (QLoRA, Dettmers et al. 2023) in bitsandbytes'
// format, so a base quantised here dequantises to the values bitsandbytes and
// PEFT's QLoRA compute with:
//   - the weight, flattened, in blocks of 64; each value divided by its block's
//     absolute maximum and rounded to the nearest of the 16 NF4 levels (ties to
//     the upper level, as torch.bucketize over the midpoints);
//   - two 4-bit indices per byte, the first in the high nibble;
//   - the block maxima themselves quantised (double quantisation): their mean
//     subtracted, then 8-bit dynamic codes in blocks of 256 with an fp32 scale
//     per block (bitsandbytes' create_dynamic_map(signed=True)).
// 0.127 bits of statistics per weight besides the 4 of the index. Dequantising
// forms code[i] * absmax in fp32 and rounds once to the weight's dtype.
// ATen operations on any device (the reference); on an sm_90 GPU the quantisation's first level and
// the dequantisation are single CUDA kernels (models/cuda/nf4_kernels.cu) with the same results.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace fptrain::models {

inline constexpr int64_t kNf4BlockSize = 64;       // weights per absmax (bitsandbytes' QLoRA default)
inline constexpr int64_t kNf4AbsmaxBlockSize = 256;  // absmax values per fp32 scale (double quantisation)

struct Nf4Tensor {
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kBFloat16;  // what it dequantises to
  at::Tensor codes;                      // uint8 [ceil(numel / 2)]
  at::Tensor absmax_codes;               // uint8 [ceil(numel / 64)]
  at::Tensor absmax_scales;              // fp32 [ceil(blocks / 256)]
  at::Tensor absmax_offset;              // fp32 [] (on the device: no host sync)

  int64_t numel() const;
  int64_t nbytes() const;  // what it holds on the device
};

// The 16 NF4 levels (bitsandbytes' get_4bit_type("nf4")) and the 256 signed
// dynamic 8-bit levels (create_dynamic_map(signed=True)), fp32 on `device`.
at::Tensor nf4_levels(const at::Device& device);
at::Tensor dynamic_map_levels(const at::Device& device);

// Quantises a floating-point weight (any shape, any device); the result lives on its device.
Nf4Tensor quantize_nf4(const at::Tensor& weight);
// The weight again, in q.dtype, shaped q.shape.
at::Tensor dequantize_nf4(const Nf4Tensor& q);

}  // namespace fptrain::models
