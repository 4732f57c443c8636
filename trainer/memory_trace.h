// logging.memory_trace_step: N records the CUDA caching allocator's history through
// optimizer step N (c10::cuda::CUDACachingAllocator::recordHistory, a context
// recorder tagging every allocation with the thread's phase, trainer/memory_phase.h,
// the model labelled from outside by trainer/memory_trace_hooks.h) and writes, in
// the output folder, what was alive at the step's peak (trainer/memory_trace_analysis.h):
// memory_trace.json and memory_trace.md. The blocks alive when the step began are
// "before the step" unless named (weights, gradients, optimizer state: name_buffers).
// Out of memory inside the step writes the same of the moment it was raised
// (memory_trace_oom.json / .md). The allocator's history has each allocation's
// requested bytes, so the trace's peak is the allocator's requested-bytes peak;
// the allocated-bytes peak (block sizes, rounded) is written beside it.
//
// The allocator's peak counters restart at the step (its peak is the step's own);
// the run's peak before it is in memory_trace.json. Off on devices other than CUDA
// (a warning says so) and on ranks other than 0.
#pragma once

#include "models/causal_lm.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fptrain::trainer {

class ModelPhaseLabels;

class MemoryTrace {
 public:
  // `step` 0: every call a no-op.
  MemoryTrace(int64_t step, std::filesystem::path output_dir, at::Device device);
  ~MemoryTrace();
  MemoryTrace(const MemoryTrace&) = delete;
  MemoryTrace& operator=(const MemoryTrace&) = delete;

  bool recording() const { return state_ == State::kRecording; }
  // Before the step after `completed_steps`: starts recording when it is the chosen one.
  void begin_step(int64_t completed_steps, models::CausalLM& model);
  // The step's loss: its backward starts as "backward head/loss".
  void label_loss(const at::Tensor& loss) const;
  // Names the blocks holding these tensors' storage now (weights, gradients, ...).
  void name_buffers(const std::vector<std::pair<std::string, at::Tensor>>& buffers) const;
  // After the step: stops recording, writes memory_trace.{json,md}.
  void end_step();
  // Out of memory while recording: writes memory_trace_oom.{json,md}; returns a line for the error.
  std::string out_of_memory();

 private:
  void stop_and_write(const std::string& stem);

  int64_t step_;
  std::filesystem::path output_dir_;
  at::Device device_;
  enum class State { kWaiting, kRecording, kDone } state_ = State::kWaiting;
  std::unique_ptr<ModelPhaseLabels> labels_;
  std::unique_ptr<struct TraceStart> start_;  // what the allocator held when recording began
};

}  // namespace fptrain::trainer
