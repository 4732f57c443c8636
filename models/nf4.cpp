#include "models/nf4.h"

#include "models/cuda/fused_ops_cuda.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <stdexcept>
#include <string>
#include <utility>

namespace fptrain::models {
namespace {

// bitsandbytes' NF4 levels: quantiles of N(0, 1) with an exact zero (functional.get_4bit_type).
constexpr float kNf4[16] = {-1.0f,
                            -0.6961928009986877f,
                            -0.5250730514526367f,
                            -0.39491748809814453f,
                            -0.28444138169288635f,
                            -0.18477343022823334f,
                            -0.09105003625154495f,
                            0.0f,
                            0.07958029955625534f,
                            0.16093020141124725f,
                            0.24611230194568634f,
                            0.33791524171829224f,
                            0.44070982933044434f,
                            0.5626170039176941f,
                            0.7229568362236023f,
                            1.0f};

// create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), with the same
// ATen operations (linspace and the fp32 products) so the levels are the same bits.
at::Tensor make_dynamic_map() {
  constexpr int kExponentBits = 7, kNonSignBits = 7;
  std::vector<double> data;
  auto add = [&](int64_t items, int exponent) {
    const at::Tensor b = at::linspace(0.1, 1.0, items, at::kFloat);
    const at::Tensor means = (b.narrow(0, 0, items - 1) + b.narrow(0, 1, items - 1)) / 2.0;
    const double scale = std::pow(10.0, -(kExponentBits - 1) + exponent);
    const at::Tensor pos = means * scale, neg = means * -scale;
    for (int64_t i = 0; i < items - 1; ++i) data.push_back(pos[i].item<float>());
    for (int64_t i = 0; i < items - 1; ++i) data.push_back(neg[i].item<float>());
  };
  for (int i = 0; i < kExponentBits; ++i) add((int64_t{1} << (i + kNonSignBits - kExponentBits)) + 1, i);
  // 2^(7 - 7) - 1 = 0 additional items: nothing more before 0 and 1.
  data.push_back(0.0);
  data.push_back(1.0);
  while (data.size() < 256) data.push_back(0.0);
  std::sort(data.begin(), data.end());
  std::vector<float> f(data.begin(), data.end());
  return at::tensor(f, at::kFloat);
}

// A CPU table on `device`, copied once per device: a copy from host memory on every
// dequantisation would wait for the stream. The cache is never destroyed (device
// memory must not be freed after the CUDA runtime is gone at exit).
at::Tensor on_device(const at::Tensor& table, const at::Device& device) {
  if (device.is_cpu()) return table;
  static std::mutex mutex;
  static auto* copies = new std::map<std::pair<const void*, std::string>, at::Tensor>();
  const std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& copy = (*copies)[{table.data_ptr(), device.str()}];
  if (!copy.defined()) copy = table.to(device);
  return copy;
}

// Nearest level by the midpoints (torch.bucketize, right=False: a value on a midpoint takes the upper level).
at::Tensor nearest_level(const at::Tensor& scaled, const at::Tensor& levels) {
  const int64_t n = levels.size(0);
  const at::Tensor mid = (levels.narrow(0, 0, n - 1) + levels.narrow(0, 1, n - 1)) / 2;
  return at::bucketize(scaled, mid, /*out_int32=*/true).to(at::kByte);
}

struct Blockwise {
  at::Tensor codes;   // uint8, one per value
  at::Tensor absmax;  // fp32, one per block
};

// bitsandbytes' blockwise quantisation (backends/default/ops.py quantize_4bit / quantize_blockwise):
// absmax per block, values times its reciprocal, clamped to [-1, 1], nearest level.
Blockwise quantize_blockwise(const at::Tensor& flat, int64_t block, const at::Tensor& levels) {
  const int64_t n = flat.numel(), full = n - n % block;
  at::Tensor absmax = flat.narrow(0, 0, full).view({full / block, block}).abs().amax(1);
  // x * (1 / absmax) as bitsandbytes writes it (Python's 1.0 / t is reciprocal(t) * 1.0).
  at::Tensor scaled = at::clamp(flat.narrow(0, 0, full).view({full / block, block}) *
                                    at::reciprocal(absmax.clamp_min(1e-38)).unsqueeze(1),
                                -1, 1).reshape(-1);
  if (full < n) {
    const at::Tensor rest = flat.narrow(0, full, n - full);
    const at::Tensor am = rest.abs().amax().clamp_min(1e-38);
    absmax = at::cat({absmax, am.unsqueeze(0)});
    scaled = at::cat({scaled, at::clamp(rest / am, -1, 1)});
  }
  return {nearest_level(scaled, levels), absmax};
}

// levels[codes] * absmax of each value's block, fp32.
at::Tensor dequantize_blockwise(const at::Tensor& codes, const at::Tensor& absmax, int64_t block,
                                const at::Tensor& levels) {
  const int64_t n = codes.numel(), full = n - n % block;
  const at::Tensor values = levels.index_select(0, codes.to(at::kInt));
  at::Tensor out = (values.narrow(0, 0, full).view({full / block, block}) *
                    absmax.narrow(0, 0, full / block).unsqueeze(1)).reshape(-1);
  if (full < n) out = at::cat({out, values.narrow(0, full, n - full) * absmax[full / block]});
  return out;
}

}  // namespace

int64_t Nf4Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Nf4Tensor::nbytes() const {
  return codes.nbytes() + absmax_codes.nbytes() + absmax_scales.nbytes() + absmax_offset.nbytes();
}

at::Tensor nf4_levels(const at::Device& device) {
  static const at::Tensor levels = at::tensor(std::vector<float>(std::begin(kNf4), std::end(kNf4)), at::kFloat);
  return on_device(levels, device);
}

at::Tensor dynamic_map_levels(const at::Device& device) {
  static const at::Tensor levels = make_dynamic_map();
  return on_device(levels, device);
}

Nf4Tensor quantize_nf4(const at::Tensor& weight) {
  if (!at::isFloatingType(weight.scalar_type()) || weight.numel() == 0)
    throw std::invalid_argument("quantize_nf4: a non-empty floating-point weight expected");
  Nf4Tensor q;
  q.shape = weight.sizes().vec();
  q.dtype = weight.scalar_type();
  const at::Device device = weight.device();
  Blockwise b;
  if (device.is_cuda() && weight.numel() % 8 == 0 && cuda::kernels_built() && cuda::device_supported(device)) {
    // One pass on an sm_90 GPU (models/cuda/nf4_kernels.cu): the same codes and maxima.
    std::tie(q.codes, b.absmax) = cuda::nf4_quantize(weight, nf4_levels(at::kCPU));
  } else {
    b = quantize_blockwise(weight.reshape(-1).to(at::kFloat), kNf4BlockSize, nf4_levels(device));
    at::Tensor idx = b.codes;
    // An odd count is padded with the level of 0.0 (bitsandbytes pads the scaled values with zero).
    constexpr int kZeroLevel = 7;
    if (idx.numel() % 2) idx = at::cat({idx, at::full({1}, kZeroLevel, idx.options())});
    const at::Tensor pairs = idx.view({-1, 2});
    q.codes = at::bitwise_or(at::bitwise_left_shift(pairs.select(1, 0), 4), pairs.select(1, 1)).contiguous();
  }
  // Double quantisation of the block maxima.
  q.absmax_offset = b.absmax.mean();
  Blockwise s = quantize_blockwise(b.absmax - q.absmax_offset, kNf4AbsmaxBlockSize, dynamic_map_levels(device));
  q.absmax_codes = s.codes;
  q.absmax_scales = s.absmax;
  return q;
}

at::Tensor dequantize_nf4(const Nf4Tensor& q) {
  const at::Device device = q.codes.device();
  // On an sm_90 GPU one fused pass (models/cuda/nf4_kernels.cu), the same values.
  if (device.is_cuda() && q.numel() % 8 == 0 && cuda::kernels_built() && cuda::device_supported(device)) {
    return cuda::nf4_dequantize(q.codes, q.absmax_codes, q.absmax_scales, q.absmax_offset,
                                dynamic_map_levels(at::kCPU), nf4_levels(at::kCPU), q.numel(), q.dtype)
        .view(q.shape);
  }
  const at::Tensor absmax =
      dequantize_blockwise(q.absmax_codes, q.absmax_scales, kNf4AbsmaxBlockSize, dynamic_map_levels(device)) +
      q.absmax_offset;
  const at::Tensor idx = at::stack({at::bitwise_right_shift(q.codes, 4), at::bitwise_and(q.codes, 0xF)}, 1)
                             .reshape(-1)
                             .narrow(0, 0, q.numel());
  return dequantize_blockwise(idx, absmax, kNf4BlockSize, nf4_levels(device)).to(q.dtype).view(q.shape);
}

}  // namespace fptrain::models
