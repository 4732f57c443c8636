// Compiled with -ffp-contract=off (optim/CMakeLists.txt): quantisation must round as the
// step does (optim/blockwise8_math.h).
#include "optim/blockwise8.h"

#include "optim/cpu_parallel.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace fptrain::optim::blockwise8 {
namespace {

// create_dynamic_map's defaults, as AdamW8bit calls it (optim/optimizer.py fill_qmap).
constexpr int kMaxExponentBits = 7;
constexpr int kNonSignBits = 7;  // total_bits 8 less the sign

}  // namespace

at::Tensor dynamic_map(bool is_signed) {
  // For each exponent i, the midpoints of a fp32 linspace(0.1, 1) scaled by 10^(i - 6) in fp32,
  // as the Python computes them with torch ops; then 0 and 1, sorted. With 7 exponent bits there
  // are no "additional items" (2^(7 - 7) - 1 = 0), and no gap to fill: 256 values.
  std::vector<float> data;
  for (int i = 0; i < kMaxExponentBits; ++i) {
    const int64_t items = (int64_t{1} << (i + kNonSignBits - kMaxExponentBits + (is_signed ? 0 : 1))) + 1;
    const at::Tensor bounds = at::linspace(0.1, 1.0, items, at::kFloat);
    const at::Tensor means = (bounds.slice(0, 0, items - 1) + bounds.slice(0, 1, items)) / 2.0;
    const at::Tensor scaled = (means * std::pow(10.0, -(kMaxExponentBits - 1) + i)).contiguous();
    const float* p = scaled.data_ptr<float>();
    for (int64_t k = 0; k < scaled.numel(); ++k) {
      data.push_back(p[k]);
      if (is_signed) data.push_back(-p[k]);  // the negated scale gives exactly the negated product
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  if (data.size() != kCodes)
    throw std::logic_error("blockwise8: the dynamic map has " + std::to_string(data.size()) + " values");
  std::sort(data.begin(), data.end());
  return at::tensor(data, at::kFloat);
}

const CodeBooks& code_books() {
  static const CodeBooks books = [] {
    CodeBooks b;
    const at::Tensor m = dynamic_map(true), v = dynamic_map(false);
    std::copy_n(m.data_ptr<float>(), kCodes, b.exp_avg);
    std::copy_n(v.data_ptr<float>(), kCodes, b.exp_avg_sq);
    return b;
  }();
  return books;
}

float CodeLookup::from_order_key(uint32_t key) {
  const uint32_t u = (key >> 31) != 0u ? key & 0x7fffffffu : ~key;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Why the code never decreases as x grows: take x1 < x2. While their comparisons with the
// pivots agree they follow one path; if they end on it, each final choice (upper, pivot or
// lower against a midpoint) is a threshold on x with lower <= pivot <= upper. If they part
// at pivot q (x1 <= book[q] < x2), every code x1 can still end on is <= q (later pivots
// are below q, its last upper is q or below) and every code of x2 is >= q. A NaN compares
// false everywhere: code 0 whichever run it is in; the two runs that mix NaNs with an
// infinity hold one key of it at their inner end, so they too are two pieces.
CodeLookup::CodeLookup(const float* book, bool is_signed)
    : book_(book), is_signed_(is_signed), runs_(size_t{1} << 16) {
  for (uint32_t run = 0; run < (1u << 16); ++run) runs_[run] = run_entry(run);
}

// The run's two codes and where the second starts, by bisection (the codes are monotone in
// the run); a run whose last code is not the one at its step holds two steps, which these
// books have none of (the midpoints of neighbours are more than a run apart).
uint32_t CodeLookup::run_entry(uint32_t run) const {
  auto code_at = [&](uint32_t low) { return nearest_code(book_, from_order_key(run << 16 | low), is_signed_); };
  const uint32_t below = code_at(0), above = code_at(0xffffu);
  if (below == above) return below | below << 8;
  uint32_t lo = 0, hi = 0xffffu;  // code_at(lo) == below, code_at(hi) != below
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    (code_at(mid) == below ? lo : hi) = mid;
  }
  if (code_at(hi) != above)
    throw std::logic_error("blockwise8: run " + std::to_string(run) + " of the code lookup holds two steps");
  return below | above << 8 | hi << 16;
}

const CodeLookup& exp_avg_lookup() {
  static const CodeLookup lookup(code_books().exp_avg, true);
  return lookup;
}

const CodeLookup& exp_avg_sq_lookup() {
  static const CodeLookup lookup(code_books().exp_avg_sq, false);
  return lookup;
}

std::pair<at::Tensor, at::Tensor> quantize(const at::Tensor& values, bool exp_avg) {
  if (values.dim() != 1 || values.scalar_type() != at::kFloat)
    throw std::invalid_argument("blockwise8::quantize: expected a 1-D fp32 tensor");
  const at::Tensor x = values.cpu().contiguous();
  const int64_t n = x.numel(), blocks = (n + kBlock - 1) / kBlock;
  at::Tensor codes = at::empty({n}, x.options().dtype(at::kByte));
  at::Tensor absmax = at::empty({blocks}, x.options());
  const float* src = x.data_ptr<float>();
  uint8_t* c = codes.data_ptr<uint8_t>();
  float* a = absmax.data_ptr<float>();
  const CodeLookup& lookup = exp_avg ? exp_avg_lookup() : exp_avg_sq_lookup();
  at::parallel_for(0, blocks, 64, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
      float top = -FLT_MAX;  // as the step folds it
      for (int64_t i = lo; i < hi; ++i) top = max_abs(top, src[i]);
      a[b] = top;
      for (int64_t i = lo; i < hi; ++i)
        c[i] = exp_avg ? lookup.quantize_signed(src[i], top) : lookup.quantize_unsigned(src[i], top);
    }
  });
  return {codes.to(values.device()), absmax.to(values.device())};
}

at::Tensor dequantize(const at::Tensor& codes, const at::Tensor& absmax, bool exp_avg, int64_t first) {
  if (codes.dim() != 1 || codes.scalar_type() != at::kByte || absmax.scalar_type() != at::kFloat || first < 0 ||
      absmax.numel() < (first + codes.numel() + kBlock - 1) / kBlock)
    throw std::invalid_argument("blockwise8::dequantize: expected uint8 codes and an fp32 absmax per block");
  const at::Tensor c = codes.cpu().contiguous(), a = absmax.cpu().contiguous().reshape({-1});
  at::Tensor out = at::empty({c.numel()}, a.options());
  const uint8_t* cp = c.data_ptr<uint8_t>();
  const float* ap = a.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const float* book = exp_avg ? code_books().exp_avg : code_books().exp_avg_sq;
  for (int64_t i = 0; i < c.numel(); ++i) o[i] = dequantize(book, cp[i], ap[(first + i) / kBlock]);
  return out.to(codes.device());
}

}  // namespace fptrain::optim::blockwise8
