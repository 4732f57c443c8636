// A post-accumulate-grad hook that counts its calls: the gradient sinks' tests check
// it fires once per backward, as the data-parallel reducer expects.
#pragma once

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace fptrain::models::testing {

struct CountingHook : torch::autograd::PostAccumulateGradHook {
  explicit CountingHook(int* count) : count(count) {}
  void operator()(const torch::autograd::Variable&) override { ++*count; }
  int* count;
};

}  // namespace fptrain::models::testing
