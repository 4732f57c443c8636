// What the step is doing, as a label per thread, for the memory trace
// (trainer/memory_trace.h): a *stage* ("forward L3", "backward L3", "recompute L3",
// "optimizer") and an *op* within it ("attention", "mlp", "norm"), set by RAII scopes
// at the places that matter and read by the allocator's context recorder on the
// thread that allocates. Plain strings, no LibTorch: a scope costs a string copy,
// and nothing reads the label unless a trace records.
#pragma once

#include <string>

namespace fptrain::trainer::memory_phase {

const std::string& stage();
const std::string& op();
void set_stage(std::string stage);  // also clears the op: a new stage starts with none
void set_op(std::string op);
// "stage op" ("forward L3 attention"), "stage" without an op, "other" with neither.
std::string tag();
// Stages that autograd's backward sets (hooks in memory_trace_hooks.h): a block run
// again from there is an activation checkpoint's recomputation.
bool in_backward();

// The stage for a scope; the previous stage and op come back at its end.
class StageScope {
 public:
  explicit StageScope(std::string stage);
  ~StageScope();
  StageScope(const StageScope&) = delete;
  StageScope& operator=(const StageScope&) = delete;

 private:
  std::string stage_, op_;
};

// The op for a scope; the previous op comes back at its end.
class OpScope {
 public:
  explicit OpScope(const char* op);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  std::string op_;
};

}  // namespace fptrain::trainer::memory_phase
