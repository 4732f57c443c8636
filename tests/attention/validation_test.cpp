// Bad boundaries and bad tensors are rejected with a message naming the problem.
#include "attention/varlen_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace fptrain::attention {
namespace {

// Runs f, expects std::invalid_argument whose message contains `needle`.
void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << needle << "'";
    return;
  }
  ADD_FAILURE() << "no std::invalid_argument (expected one mentioning '" << needle << "')";
}

at::Tensor cu(std::vector<int32_t> values) { return at::tensor(values, at::kInt); }

TEST(ValidateCuSeqlens, AcceptsWellFormedBoundaries) {
  EXPECT_NO_THROW(validate_cu_seqlens(cu({0, 3, 3, 8}), 8, 5));
  EXPECT_NO_THROW(validate_cu_seqlens(cu({0, 1}), 1, 1));
  EXPECT_NO_THROW(validate_cu_seqlens(cu({0}), 0, 0));
}

TEST(ValidateCuSeqlens, NamesEachViolation) {
  expect_error([] { validate_cu_seqlens(cu({1, 3, 8}), 8, 5); }, "must start at 0; cu_seqlens[0] = 1");
  expect_error([] { validate_cu_seqlens(cu({0, 5, 4, 8}), 8, 5); },
               "non-decreasing; cu_seqlens[2] = 4 < cu_seqlens[1] = 5");
  expect_error([] { validate_cu_seqlens(cu({0, 3, 7}), 8, 4); },
               "must end at the token count 8; cu_seqlens[2] = 7");
  expect_error([] { validate_cu_seqlens(cu({0, 3, 8}), 8, 4); },
               "max_seqlen is 4 but the longest sequence has 5 tokens");
  expect_error([] { validate_cu_seqlens(at::tensor({0, 3, 8}, at::kLong), 8, 5); }, "must be int32");
  expect_error([] { validate_cu_seqlens(at::zeros({0}, at::kInt), 0, 0); }, "B+1 >= 1");
  expect_error([] { validate_cu_seqlens(at::zeros({2, 2}, at::kInt), 0, 0); }, "1-D");
  expect_error([] { validate_cu_seqlens(at::Tensor(), 0, 0); }, "missing");
}

struct Inputs {
  at::Tensor q = at::randn({8, 4, 8}), k = at::randn({8, 2, 8}), v = at::randn({8, 2, 8});
  VarlenSpec spec;
  Inputs() {
    spec.cu_seqlens = cu({0, 3, 8});
    spec.max_seqlen = 5;
  }
  void run() const { varlen_attention(q, k, v, spec, Backend::kReference); }
};

TEST(VarlenAttention, RejectsBadBoundaries) {
  Inputs in;
  in.spec.cu_seqlens = cu({0, 3, 9});
  expect_error([&] { in.run(); }, "must end at the token count 8");
  in.spec.cu_seqlens = cu({0, 3, 8}).to(at::kLong);
  expect_error([&] { in.run(); }, "cu_seqlens must be int32");
  in.spec.cu_seqlens = at::Tensor();
  expect_error([&] { in.run(); }, "cu_seqlens is missing");
  in.spec.cu_seqlens = cu({0, 3, 8});
  in.spec.max_seqlen = 3;
  expect_error([&] { in.run(); }, "max_seqlen is 3 but the longest sequence has 5");
  in.spec.max_seqlen = 5;
  in.spec.cu_seqlens_cpu = cu({0, 8});
  expect_error([&] { in.run(); }, "cu_seqlens_cpu has 2 entries but cu_seqlens has 3");
  in.spec.cu_seqlens_cpu = cu({0, 4, 8});
  expect_error([&] { in.run(); }, "max_seqlen is 5 but the longest sequence has 4");
}

TEST(VarlenAttention, RejectsBadTensors) {
  {
    Inputs in;
    in.k = at::randn({8, 3, 8});
    in.v = at::randn({8, 3, 8});
    expect_error([&] { in.run(); }, "query heads (4) must be a multiple of key/value heads (3)");
  }
  {
    Inputs in;
    in.q = at::randn({8, 32});
    expect_error([&] { in.run(); }, "must be [T, heads, head_dim]");
  }
  {
    Inputs in;
    in.v = at::randn({8, 2, 4});
    expect_error([&] { in.run(); }, "differ in shape");
  }
  {
    Inputs in;
    in.k = at::randn({7, 2, 8});
    in.v = at::randn({7, 2, 8});
    expect_error([&] { in.run(); }, "q has 8 tokens but k and v have 7");
  }
  {
    Inputs in;
    in.k = in.k.to(at::kDouble);
    expect_error([&] { in.run(); }, "must share a dtype");
  }
  {
    Inputs in;
    in.q = at::ones({8, 4, 8}, at::kInt);
    in.k = at::ones({8, 2, 8}, at::kInt);
    in.v = at::ones({8, 2, 8}, at::kInt);
    expect_error([&] { in.run(); }, "floating point");
  }
  {
    Inputs in;
    in.spec.causal = false;
    in.spec.window = 4;
    expect_error([&] { in.run(); }, "sliding window needs causal");
  }
  {
    Inputs in;
    in.spec.softmax_scale = 0.0;
    expect_error([&] { in.run(); }, "softmax_scale must be finite and positive");
  }
}

TEST(VarlenAttention, TorchFa2NeedsCuda) {
  Inputs in;
  expect_error([&] { varlen_attention(in.q, in.k, in.v, in.spec, Backend::kTorchFA2); },
               "torch-fa2 needs CUDA tensors");
}

// Soft-capped scores (Gemma 2): the reference and our kernels compute them (the kernels'
// values: tests/attention_gpu); torch-fa2 has none and refuses, naming it.
TEST(VarlenAttention, TorchFa2RefusesSoftCaps) {
  Inputs in;
  in.spec.softcap = 50.0;
  expect_error([&] { varlen_attention(in.q, in.k, in.v, in.spec, Backend::kTorchFA2); }, "no logit soft-capping");
  EXPECT_EQ(varlen_attention(in.q, in.k, in.v, in.spec, Backend::kReference).sizes(), in.q.sizes());
  for (double bad : {-1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    in.spec.softcap = bad;
    expect_error([&] { varlen_attention(in.q, in.k, in.v, in.spec, Backend::kReference); },
                 "softcap must be finite and >= 0");
  }
}

TEST(VarlenAttention, BackendNamesRoundTrip) {
  for (Backend b : {Backend::kReference, Backend::kTorchFA2, Backend::kHopper}) {
    EXPECT_EQ(parse_backend(backend_name(b)), b);
  }
  expect_error([] { parse_backend("flash"); }, "unknown attention backend 'flash'");
}

TEST(VarlenAttention, HopperBackendKeepsItsOldNameAsAlias) {
  EXPECT_EQ(backend_name(Backend::kHopper), "hopper");
  EXPECT_EQ(parse_backend("fptrain"), Backend::kHopper);
  expect_error([] { parse_backend("flash"); }, "expected hopper (alias fptrain), torch-fa2, reference");
}

}  // namespace
}  // namespace fptrain::attention
