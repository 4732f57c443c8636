// What the CPU and CUDA tests of gradients cut into pieces share: a buffer cut
// into pieces for the norm.
#pragma once

#include "optim/flat_adamw.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace fptrain::optim::testing {

// `whole` cut at `cuts` (increasing offsets inside it) into pieces that copy their
// elements into fresh tensors; pieces whose index is in `missing` hold no storage
// (their elements of `whole` must be zero).
inline std::vector<flat::GradPiece> cut(const at::Tensor& whole, const std::vector<int64_t>& cuts,
                                        const std::vector<size_t>& missing = {}) {
  std::vector<flat::GradPiece> out;
  int64_t begin = 0;
  std::vector<int64_t> ends = cuts;
  ends.push_back(whole.numel());
  for (size_t k = 0; k < ends.size(); ++k) {
    const int64_t n = ends[k] - begin;
    bool absent = false;
    for (size_t m : missing) absent = absent || m == k;
    out.push_back({absent ? at::Tensor() : whole.narrow(0, begin, n).clone(), begin, n});
    begin = ends[k];
  }
  return out;
}

inline uint32_t bits(const at::Tensor& scalar) {
  const float f = scalar.cpu().item<float>();
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// The norm (and clip coefficient) of `whole` cut at `cuts`, without the pieces in
// `missing`, has the bits of the norm of `whole` as one buffer.
inline void expect_cut_norm_is_whole_norm(const at::Tensor& whole, const at::Tensor& accum,
                                          const std::vector<int64_t>& cuts, const std::vector<size_t>& missing) {
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(whole.device());
  at::Tensor n1 = at::empty({}, opts), c1 = at::empty({}, opts), n2 = at::empty({}, opts), c2 = at::empty({}, opts);
  flat::grad_norm(whole, accum, 1.0, n1, c1);
  flat::grad_norm(cut(whole, cuts, missing), accum, 1.0, n2, c2);
  EXPECT_EQ(bits(n1), bits(n2)) << "cuts " << c10::str(at::IntArrayRef(cuts)) << " norm " << n1.item<float>();
  EXPECT_EQ(bits(c1), bits(c2));
}

// A buffer of several norm chunks (16384 elements each), with zeros where a piece will be missing.
inline at::Tensor random_buffer(int64_t n, at::ScalarType dtype, const at::Device& device, int64_t zero_from = -1,
                                int64_t zero_to = -1) {
  at::manual_seed(11);
  at::Tensor t = (at::randn({n}) * 1e-2).to(dtype);
  if (zero_from >= 0) t.narrow(0, zero_from, zero_to - zero_from).zero_();
  return t.to(device);
}

// Run on the CPU and, in tests/trainer_gpu, on CUDA.
inline void expect_norms_of_cut_buffers(const at::Device& device) {
  const int64_t n = 5 * 16384 + 7 * 128;
  for (at::ScalarType dtype : {at::kBFloat16, at::kFloat, at::kHalf}) {
    const at::Tensor whole = random_buffer(n, dtype, device);
    const at::Tensor accum = random_buffer(n, at::kFloat, device);
    for (const at::Tensor& acc : {at::Tensor(), accum}) {
      expect_cut_norm_is_whole_norm(whole, acc, {}, {});                           // one piece
      expect_cut_norm_is_whole_norm(whole, acc, {128, 16384, 16384 + 256}, {});    // bucket-like cuts
      expect_cut_norm_is_whole_norm(whole, acc, {16, 48, 20000, 70000}, {});       // on multiples of 16 and 8
      std::vector<int64_t> many;                                                   // more pieces than one launch
      for (int64_t c = 256; c < n; c += 1024) many.push_back(c);
      expect_cut_norm_is_whole_norm(whole, acc, many, {});
    }
    // A piece without storage is zeros: the norm of the buffer with zeros there.
    const at::Tensor holed = random_buffer(n, dtype, device, 16384, 3 * 16384);
    for (const at::Tensor& acc : {at::Tensor(), accum})
      expect_cut_norm_is_whole_norm(holed, acc, {128, 16384, 3 * 16384}, {2});
  }
}

}  // namespace fptrain::optim::testing
