// Where the time of a training step goes: `logging.profile_steps: N` runs N
// optimizer steps under LibTorch's Kineto profiler after `logging.profile_warmup`
// steps and saves, in the output folder, the raw trace (profile_trace.json,
// Chrome trace format: CUPTI's kernels, memcpys and memsets on a GPU, the CPU
// ops, one "ProfilerStep#N" range per step) and the window
// (profile_window.json: device, steps, wall time, note). The device is
// synchronized at both ends of the window, so its wall time holds all the GPU
// work of its steps and nothing else. benchmarks/train/profile_report.py turns
// the two into the categorised report (profile.json, profile.md).
//
// A failure of the profiler is logged and ends profiling; it never stops the run.
#pragma once

#include "trainer/device_info.h"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace fptrain::trainer {

class StepProfiler {
 public:
  // `steps` 0 makes every call a no-op (profiling off, or a data-parallel rank
  // other than 0). `warmup`: steps of this process before the window.
  StepProfiler(int64_t steps, int64_t warmup, std::filesystem::path output_dir, DeviceInfo device);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // At the start and at the end of every iteration of the training loop, with
  // the optimizer steps completed so far.
  void begin_step(int64_t completed_steps);
  void end_step(int64_t completed_steps);
  // At the end of the run: reports a window the run cut short, or says why
  // there is none.
  void finish();

 private:
  void start_window();
  void stop_window(bool complete);
  void write_window(bool complete, double wall_ms) const;
  void fail(const std::string& what);

  int64_t steps_;
  int64_t warmup_;
  std::filesystem::path output_dir_;
  DeviceInfo device_;
  enum class State { kWaiting, kPrepared, kRecording, kDone } state_ = State::kWaiting;
  int64_t first_step_ = -1;  // completed steps when this process's loop began
  int64_t last_seen_ = 0;    // completed steps at the last call
  int64_t recorded_ = 0;     // steps completed inside the window
  int64_t last_completed_ = 0;
  int64_t first_recorded_ = 0;  // the first step of the window (1-based, as its marker)
  std::chrono::steady_clock::time_point window_start_;
  std::unique_ptr<struct StepMarker> marker_;  // the open "ProfilerStep#N" range
};

}  // namespace fptrain::trainer
