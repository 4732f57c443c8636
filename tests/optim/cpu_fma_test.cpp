// The CPU steps' two compilations of each loop body (optim/cpu_parallel.h): the one for CPUs
// with AVX2 and FMA and the baseline one give the same bits, for every weight and master form
// of both steps. The goldens of blockwise8_test.cpp and flat_optimizer_test.cpp check the
// values themselves (on whichever body this CPU picks).
#include "optim/cpu_parallel.h"
#include "optim/flat_adamw.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fptrain::optim {
namespace {

bool cpu_has_fma() {
  const int before = cpu_fma_override().exchange(-1);
  const bool has = cpu_fma();
  cpu_fma_override() = before;
  return has;
}

struct Buffers {
  at::Tensor weights, master, m, v, grads, accum;
  flat::Moments8bit q;
};

// Random state after a few steps' worth of moments; grads with a NaN and a zero block.
Buffers make(at::ScalarType dtype, const std::string& masters, bool eight_bit, int64_t n) {
  at::manual_seed(3);
  Buffers b;
  const at::Tensor w = at::randn({n}) * 0.05;
  b.weights = w.to(dtype);
  if (masters == "fp32") b.master = w.clone();
  if (masters == "split") {
    b.master = at::empty({n}, at::kShort);
    flat::split_masters(w, b.weights, b.master);
  }
  const at::ScalarType moment = masters == "none" ? dtype : at::kFloat;
  b.m = (at::randn({n}) * 1e-3).to(moment);
  b.v = (at::rand({n}) * 1e-6).to(moment);
  b.grads = (at::randn({n}) * 1e-2).to(dtype);
  b.grads[5] = NAN;
  b.grads.narrow(0, 512, 256).zero_();
  b.accum = at::randn({n}) * 1e-2;
  if (eight_bit)
    b.q = {at::randint(256, {n}, at::kByte), at::randint(256, {n}, at::kByte), at::rand({n / 256}) * 1e-2,
           at::rand({n / 256}) * 1e-5};
  return b;
}

std::vector<at::Tensor> run(int fma, at::ScalarType dtype, const std::string& masters, bool eight_bit) {
  cpu_fma_override() = fma;
  Buffers b = make(dtype, masters, eight_bit, 4096);
  flat::AdamWHyper h;
  h.lr = 1e-3;
  h.weight_decay = 0.1;
  h.step = 3;
  const at::Tensor coef = at::full({}, 0.7f, at::kFloat);
  for (const bool with_accum : {false, true}) {
    const at::Tensor accum = with_accum ? b.accum : at::Tensor();
    if (eight_bit) flat::adamw8bit_step(b.weights, b.master, b.q, b.grads, accum, coef, h);
    else flat::adamw_step(b.weights, b.master, b.m, b.v, b.grads, accum, coef, h);
  }
  cpu_fma_override() = -1;
  std::vector<at::Tensor> out = {b.weights};
  if (b.master.defined()) out.push_back(b.master);
  if (eight_bit) out.insert(out.end(), {b.q.exp_avg, b.q.exp_avg_sq, b.q.exp_avg_absmax, b.q.exp_avg_sq_absmax});
  else out.insert(out.end(), {b.m, b.v});
  return out;
}

TEST(CpuFma, BothBodiesOfBothStepsGiveTheSameBits) {
  if (!cpu_has_fma()) GTEST_SKIP() << "this CPU has no AVX2 + FMA: only the baseline bodies run here";
  struct Form {
    at::ScalarType dtype;
    const char* masters;
  };
  for (const bool eight_bit : {false, true})
    for (const Form f : {Form{at::kFloat, "none"}, Form{at::kBFloat16, "none"}, Form{at::kBFloat16, "fp32"},
                         Form{at::kBFloat16, "split"}, Form{at::kHalf, "fp32"}}) {
      SCOPED_TRACE(std::string(eight_bit ? "8-bit " : "fp32 moments ") + c10::toString(f.dtype) + " masters " +
                   f.masters);
      const std::vector<at::Tensor> base = run(0, f.dtype, f.masters, eight_bit);
      const std::vector<at::Tensor> fma = run(1, f.dtype, f.masters, eight_bit);
      ASSERT_EQ(base.size(), fma.size());
      for (size_t i = 0; i < base.size(); ++i) {
        const at::Tensor a = base[i].contiguous().view(at::kByte), b = fma[i].contiguous().view(at::kByte);
        EXPECT_TRUE(at::equal(a, b)) << "buffer " << i << " differs";
      }
    }
}

}  // namespace
}  // namespace fptrain::optim
