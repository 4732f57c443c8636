// bitsandbytes' 8-bit blockwise quantisation of AdamW moments on tensors: the code books
// (bitsandbytes.functional.create_dynamic_map) and whole-buffer quantisation with the rules
// of the step (optim/blockwise8_math.h), for checkpoints that change between fp32 and 8-bit
// moments and for tests.
#pragma once

#include "optim/blockwise8_math.h"

#include <ATen/ATen.h>

#include <utility>

namespace fptrain::optim::blockwise8 {

// create_dynamic_map(signed, max_exponent_bits=7, total_bits=8) of bitsandbytes.functional:
// 256 increasing fp32 values, [-1, 1] signed or [0, 1] unsigned (CPU tensor, a new copy).
at::Tensor dynamic_map(bool is_signed);
// Both books as AdamW8bit uses them (signed for exp_avg, unsigned for exp_avg_sq), made once.
const CodeBooks& code_books();

// Codes (uint8 [n]) and one absmax per kBlock elements (fp32 [ceil(n / kBlock)], the last
// over the elements present) of a 1-D fp32 tensor, on its device: what the step stores for
// these moments (exp_avg: the signed book and its sign rule; exp_avg_sq: the unsigned book).
std::pair<at::Tensor, at::Tensor> quantize(const at::Tensor& values, bool exp_avg);
// The fp32 values again: book[code] × absmax of the code's block. `first` is the
// position of codes[0] in the blocked buffer (a piece that starts inside a block).
at::Tensor dequantize(const at::Tensor& codes, const at::Tensor& absmax, bool exp_avg, int64_t first = 0);

}  // namespace fptrain::optim::blockwise8
