// The CPU optimizer loops' two speed switches.
//
// Threads: at::parallel_for, with a build check. ATen's parallel_for is an inline template
// that spreads work over threads only in code compiled with OpenMP (INTRA_OP_PARALLEL);
// otherwise every loop runs on one thread whatever at::set_num_threads says.
// CMakeLists.txt compiles every LibTorch user with it.
//
// FMA: the build targets baseline x86-64, where std::fma is a call into libm (and the
// loops stay scalar). parallel_for_fma() compiles its body twice, once inside a function
// for CPUs with AVX2 and FMA (one fused instruction, vector loops) and once for the rest,
// and picks by cpu_fma() at run time. The body and what it calls must inline into both
// (FPTRAIN_CPU_BODY, FPTRAIN_CPU_LAMBDA). The same IEEE operations either way: the same bits.
#pragma once

#include <ATen/Parallel.h>

#include <atomic>

#ifndef INTRA_OP_PARALLEL
#error "fptrain: compile with OpenMP (CMakeLists.txt, fptrain_torch): at::parallel_for would run on one thread"
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define FPTRAIN_CPU_BODY inline __attribute__((always_inline))
#define FPTRAIN_CPU_LAMBDA __attribute__((always_inline))
#define FPTRAIN_CPU_FMA __attribute__((target("avx2,fma")))
#else
#define FPTRAIN_CPU_BODY inline
#define FPTRAIN_CPU_LAMBDA
#define FPTRAIN_CPU_FMA
#endif

namespace fptrain::optim {

// Test seam: -1 follows the CPU, 0 forces the baseline bodies, 1 the FMA ones.
inline std::atomic<int>& cpu_fma_override() {
  static std::atomic<int> value{-1};
  return value;
}

inline bool cpu_fma() {
  const int forced = cpu_fma_override().load();
  if (forced >= 0) return forced == 1;
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

template <typename Body>
FPTRAIN_CPU_FMA void run_body_fma(const Body& body, int64_t begin, int64_t end) {
  body(begin, end);
}

template <typename Body>
void run_body_baseline(const Body& body, int64_t begin, int64_t end) {
  body(begin, end);
}

// at::parallel_for with `body` (an FPTRAIN_CPU_LAMBDA) compiled for this CPU's FMA or not.
template <typename Body>
void parallel_for_fma(int64_t begin, int64_t end, int64_t grain, const Body& body) {
  const bool fma = cpu_fma();
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    if (fma) run_body_fma(body, b, e);
    else run_body_baseline(body, b, e);
  });
}

}  // namespace fptrain::optim
