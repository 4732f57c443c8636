// What the CPU and CUDA tests of lazy gradient storage (optim/flat_gradients.h)
// share: a buffer cut into pieces for the norm, and a small model trained by two
// AdamWs, one with lazy buckets and one with one resident buffer.
#pragma once

#include "optim/adamw.h"
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

// A model of odd-sized parameters (none a multiple of the alignment) and an
// objective that leaves parameter "e" without gradient on odd micro-batches.
struct TinyModel {
  std::vector<std::string> names{"embed", "a", "b", "c", "d", "e"};
  std::vector<at::Tensor> params;

  TinyModel(at::ScalarType dtype, const at::Device& device) {
    const std::vector<std::vector<int64_t>> shapes{{37, 5}, {129}, {3, 7, 11}, {1}, {300}, {260}};
    at::manual_seed(3);
    for (const auto& s : shapes)
      params.push_back(at::randn(s, at::TensorOptions().dtype(at::kFloat)).to(device, dtype).requires_grad_(true));
  }

  at::Tensor loss(int64_t micro_batch) const {
    at::Tensor l = at::zeros({}, params[0].options().dtype(at::kFloat));
    for (size_t i = 0; i < params.size(); ++i) {
      if (names[i] == "e" && micro_batch % 2 == 1) continue;  // its bucket: no backward reaches it
      const at::Tensor p = params[i].to(at::kFloat);
      l = l + (p * p * static_cast<double>(i + 1 + micro_batch)).sum() + p.sin().sum();
    }
    return l;
  }
};

struct Trained {
  std::vector<at::Tensor> weights;  // per step, the flat weights
  std::vector<uint32_t> norms;      // per step, the norm's bits
};

// `steps` steps of `micro_batches` micro-batches each (micro-batch indices 1, 3, ... when
// `odd_only`: "e" gets no gradient in the whole step); buckets of `bucket_elements`, closed
// between `gradient_groups` too where given.
inline Trained train(at::ScalarType dtype, const at::Device& device, OptimizerSection o, int64_t bucket_elements,
                     int steps, int micro_batches, bool odd_only = false,
                     const std::vector<int64_t>& gradient_groups = {}) {
  TinyModel m(dtype, device);
  DataParallelSpec dp;
  dp.bucket_elements = bucket_elements;
  dp.gradient_groups = gradient_groups;
  AdamW opt(m.names, m.params, o, FlatLayout::kDefaultAlignment, dp);
  Trained out;
  for (int s = 0; s < steps; ++s) {
    for (int k = 0; k < micro_batches; ++k) {
      m.loss(odd_only ? 2 * k + 1 : s + k).backward();
      if (k + 1 < micro_batches && o.fp32_grad_accumulation) opt.accumulate_gradients();
    }
    out.norms.push_back(bits(opt.grad_norm(o.grad_clip)));
    opt.step(1e-2);
    out.weights.push_back(opt.flat().weights().cpu().clone());
  }
  return out;
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

// Every form of the step, lazy buckets against one resident buffer, on `device`.
inline void expect_lazy_trains_as_resident(const at::Device& device) {
  struct Case {
    const char* name;
    at::ScalarType dtype;
    bool split = false, int8 = false, fp32_sums = false, masters = true;
    double clip = 1.0;
  };
  const std::vector<Case> cases{{"bf16 fp32 masters", at::kBFloat16},
                                {"bf16 split masters", at::kBFloat16, true},
                                {"bf16 8-bit moments", at::kBFloat16, false, true},
                                {"bf16 fp32 sums", at::kBFloat16, false, false, true},
                                {"bf16 no masters, no clipping", at::kBFloat16, false, false, false, false, 0.0},
                                {"fp32", at::kFloat}};
  for (const Case& c : cases) {
    OptimizerSection o;
    o.master_weights = c.masters;
    o.split_masters = c.split;
    o.moments = c.int8 ? Moments::k8bit : Moments::kFull;
    o.fp32_grad_accumulation = c.fp32_sums;
    o.grad_clip = c.clip;
    o.weight_decay = 0.1;
    OptimizerSection lazy = o, resident = o;
    lazy.gradient_storage = GradStorage::kLazy;
    resident.gradient_storage = GradStorage::kResident;
    for (bool odd_only : {false, true}) {
      const auto a = train(c.dtype, device, lazy, 256, 3, 2, odd_only);
      const auto b = train(c.dtype, device, resident, 0, 3, 2, odd_only);
      for (size_t s = 0; s < a.weights.size(); ++s) {
        EXPECT_EQ(a.norms[s], b.norms[s]) << c.name << " step " << s;
        EXPECT_TRUE(a.weights[s].equal(b.weights[s])) << c.name << " step " << s;
      }
    }
  }
}

}  // namespace fptrain::optim::testing
