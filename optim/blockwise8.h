// bitsandbytes' 8-bit blockwise quantisation of AdamW moments on tensors: the code books
// (bitsandbytes.functional.create_dynamic_map) and whole-buffer quantisation with the rules
// of the step (optim/blockwise8_math.h), for checkpoints that change between fp32 and 8-bit
// moments and for tests.
#pragma once

#include "optim/blockwise8_math.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace fptrain::optim::blockwise8 {

// create_dynamic_map(signed, max_exponent_bits=7, total_bits=8) of bitsandbytes.functional:
// 256 increasing fp32 values, [-1, 1] signed or [0, 1] unsigned (CPU tensor, a new copy).
at::Tensor dynamic_map(bool is_signed);
// Both books as AdamW8bit uses them (signed for exp_avg, unsigned for exp_avg_sq), made once.
const CodeBooks& code_books();

// nearest_code() by table, for the CPU step (the search's seven data-dependent steps were
// three quarters of its time, 2026-11-27). The search is a bisection whose every decision
// is a comparison of x, so its code never decreases as x grows (blockwise8.cpp): each run
// of 2^16 consecutive floats (in value order) holds at most one step of the code in these
// books (the constructor checks), so one 32-bit entry per run gives every code in it
// without a branch: the code below the step, the code from it on, and where it is. (Runs
// with a step were searched before: 15% of the codes of N(0, 1e-3) gradients, which
// halved the step's rate, host_step_bench.) The same code for every float, NaN included.
class CodeLookup {
 public:
  CodeLookup(const float* book, bool is_signed);
  uint8_t nearest(float x) const {
    const uint32_t key = order_key(x), entry = runs_[key >> 16];
    return static_cast<uint8_t>((key & 0xffffu) >= (entry >> 16) ? entry >> 8 : entry);
  }
  // Whether x's run holds a step of the code (benchmarks count how often their data does).
  bool in_step_run(float x) const { return (runs_[order_key(x) >> 16] >> 16) != 0u; }
  // Moments as the step stores them: exp_avg with its sign kept, exp_avg_sq as is.
  uint8_t quantize_signed(float m, float absmax) const { return keep_sign(book_, nearest(f_div(m, absmax)), m); }
  uint8_t quantize_unsigned(float v, float absmax) const { return nearest(f_div(v, absmax)); }

  // Float bits mapped so that unsigned order is value order (-0 just below +0; NaNs at the ends).
  static uint32_t order_key(float x) {
    const uint32_t u = f_bits(x);
    return (u >> 31) != 0u ? ~u : u | 0x80000000u;
  }
  static float from_order_key(uint32_t key);

 private:
  uint32_t run_entry(uint32_t run) const;

  const float* book_;
  bool is_signed_;
  // Per run of 2^16 keys: bits 0-7 the code below the step, 8-15 the code from it on,
  // 16-31 the step's low key bits (0: no step, both codes the same).
  std::vector<uint32_t> runs_;
};
// The lookups of code_books(), made once.
const CodeLookup& exp_avg_lookup();
const CodeLookup& exp_avg_sq_lookup();

// Codes (uint8 [n]) and one absmax per kBlock elements (fp32 [ceil(n / kBlock)], the last
// over the elements present) of a 1-D fp32 tensor, on its device: what the step stores for
// these moments (exp_avg: the signed book and its sign rule; exp_avg_sq: the unsigned book).
std::pair<at::Tensor, at::Tensor> quantize(const at::Tensor& values, bool exp_avg);
// The fp32 values again: book[code] × absmax of the code's block. `first` is the
// position of codes[0] in the blocked buffer (a piece that starts inside a block).
at::Tensor dequantize(const at::Tensor& codes, const at::Tensor& absmax, bool exp_avg, int64_t first = 0);

}  // namespace fptrain::optim::blockwise8
