#include "models/rope.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace fptrain::models {
namespace {

// theta ** -(2i / dim), written as transformers writes it: 1 / theta ** (2i / dim).
at::Tensor default_inv_freq(double theta, int64_t head_dim) {
  const at::Tensor exponent = at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / head_dim;
  return at::reciprocal(at::pow(theta, exponent));
}

// Llama 3.1: long wavelengths are divided by `factor`, short ones kept, the
// band between them interpolated.
at::Tensor llama3_inv_freq(const RopeConfig& rope, int64_t head_dim) {
  const at::Tensor inv_freq = default_inv_freq(rope.theta, head_dim);
  const double old_context = static_cast<double>(rope.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / rope.low_freq_factor;
  const double high_freq_wavelen = old_context / rope.high_freq_factor;

  const at::Tensor wavelen = at::reciprocal(inv_freq) * (2 * M_PI);
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / rope.factor, inv_freq);
  const at::Tensor smooth = (at::reciprocal(wavelen) * old_context - rope.low_freq_factor) /
                            (rope.high_freq_factor - rope.low_freq_factor);
  const at::Tensor smoothed = at::rsub(smooth, 1) * scaled / rope.factor + smooth * scaled;
  const at::Tensor is_medium =
      at::logical_not(wavelen < high_freq_wavelen) * at::logical_not(wavelen > low_freq_wavelen);
  return at::where(is_medium, smoothed, scaled);
}

// LongRoPE (Phi-3): 1 / (factor_i * theta ** (2i / dim)), as transformers writes it.
at::Tensor longrope_inv_freq(const RopeConfig& rope, int64_t head_dim, bool long_context) {
  const std::vector<double>& factors = long_context ? rope.long_factor : rope.short_factor;
  if (static_cast<int64_t>(factors.size()) != head_dim / 2)
    throw std::invalid_argument("rope: longrope needs head_dim / 2 = " + std::to_string(head_dim / 2) + " factors");
  const at::Tensor ext = at::tensor(factors, at::kDouble).to(at::kFloat);
  const at::Tensor exponent = at::arange(0, head_dim, 2, at::kLong).to(at::kFloat) / head_dim;
  return at::reciprocal(ext * at::pow(rope.theta, exponent));
}

}  // namespace

at::Tensor rope_inv_freq(const RopeConfig& rope, int64_t head_dim, bool long_context) {
  if (rope.rotary_dim > 0) head_dim = rope.rotary_dim;  // partial: the rotated dimensions' frequencies
  if (head_dim <= 0 || head_dim % 2 != 0) {
    throw std::invalid_argument("rope: head_dim must be positive and even; got " + std::to_string(head_dim));
  }
  switch (rope.type) {
    case RopeType::kDefault: return default_inv_freq(rope.theta, head_dim);
    case RopeType::kLinear: return default_inv_freq(rope.theta, head_dim) / rope.factor;
    case RopeType::kLlama3: return llama3_inv_freq(rope, head_dim);
    case RopeType::kLongRope: return longrope_inv_freq(rope, head_dim, long_context);
  }
  throw std::invalid_argument("rope: unknown rope type");
}

RotaryTables rotary_tables(const at::Tensor& inv_freq, const at::Tensor& position_ids,
                           at::ScalarType dtype, double scale) {
  const at::Tensor freqs = position_ids.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [T, D/2]
  const at::Tensor angles = at::cat({freqs, freqs}, -1).unsqueeze(1);              // [T, 1, D]
  if (scale == 1.0) return {angles.cos().to(dtype), angles.sin().to(dtype)};
  return {(angles.cos() * scale).to(dtype), (angles.sin() * scale).to(dtype)};
}

at::Tensor apply_rotary(const at::Tensor& x, const RotaryTables& tables) {
  const int64_t rotary = tables.cos.size(-1);
  if (rotary < x.size(-1)) {  // partial: rotate the first dimensions, pass the rest (transformers' Phi3)
    const at::Tensor passed = x.narrow(-1, rotary, x.size(-1) - rotary);
    return at::cat({apply_rotary(x.narrow(-1, 0, rotary), tables), passed}, -1);
  }
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * tables.cos + rotated * tables.sin;
}

}  // namespace fptrain::models
