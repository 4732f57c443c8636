#include "trainer/step_profiler.h"

#include "common/files.h"
#include "trainer/log/log.h"

#include <ATen/record_function.h>
#include <c10/cuda/CUDAFunctions.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/version.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <set>
#include <string_view>

namespace fptrain::trainer {
namespace fs = std::filesystem;
namespace prof = torch::autograd::profiler;

namespace {

constexpr const char* kStepMarker = "ProfilerStep#";  // torch.profiler's name for a step's range
constexpr const char* kTraceFile = "profile_trace.json";
constexpr const char* kWindowFile = "profile_window.json";

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

std::pair<prof::ProfilerConfig, std::set<prof::ActivityType>> profiler_setup(bool gpu) {
  std::set<prof::ActivityType> activities = {prof::ActivityType::CPU};
  if (gpu) activities.insert(prof::ActivityType::CUDA);
  return {prof::ProfilerConfig(prof::ProfilerState::KINETO), activities};
}

}  // namespace

// The open range of one step: a RecordFunction, recorded like any op.
struct StepMarker {
  at::RecordFunction fn{at::RecordScope::USER_SCOPE};
  explicit StepMarker(const std::string& name) {
    if (fn.isActive()) fn.before(std::string_view(name));
  }
};

StepProfiler::StepProfiler(int64_t steps, int64_t warmup, fs::path output_dir, DeviceInfo device)
    : steps_(steps), warmup_(warmup), output_dir_(std::move(output_dir)), device_(std::move(device)) {
  if (steps_ <= 0) state_ = State::kDone;
}

StepProfiler::~StepProfiler() {
  if (state_ != State::kRecording) return;
  marker_.reset();
  try {
    prof::disableProfiler();
  } catch (...) {
  }
}

void StepProfiler::begin_step(int64_t completed_steps) {
  if (state_ == State::kDone) return;
  if (first_step_ < 0) first_step_ = completed_steps;
  last_seen_ = completed_steps;
  const int64_t k = completed_steps - first_step_;  // steps this process has done
  try {
    if (state_ == State::kWaiting && k + 1 >= warmup_) {  // during the last warm-up step: CUPTI's set-up
      // Profiling CPU ops, Kineto's probe for GPUs would log an error where there is no driver.
      if (!device_.device.is_cuda()) ::setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
      const auto [config, activities] = profiler_setup(device_.device.is_cuda());
      prof::prepareProfiler(config, activities);
      state_ = State::kPrepared;
    }
    if (state_ == State::kPrepared && k >= warmup_) start_window();
    if (state_ == State::kRecording && !marker_) {
      if (recorded_ == 0) first_recorded_ = completed_steps + 1;
      marker_ = std::make_unique<StepMarker>(kStepMarker + std::to_string(completed_steps + 1));
    }
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

void StepProfiler::start_window() {
  if (device_.device.is_cuda()) c10::cuda::device_synchronize();  // the window starts with an idle GPU
  const auto [config, activities] = profiler_setup(device_.device.is_cuda());
  prof::enableProfiler(config, activities);
  window_start_ = std::chrono::steady_clock::now();
  state_ = State::kRecording;
  log::info("step profile: recording " + std::to_string(steps_) + " step(s) after " + std::to_string(warmup_) +
            " warm-up step(s)");
}

void StepProfiler::end_step(int64_t completed_steps) {
  last_seen_ = completed_steps;
  if (state_ != State::kRecording || !marker_) return;
  marker_.reset();
  ++recorded_;
  last_completed_ = completed_steps;
  if (recorded_ >= steps_) stop_window(/*complete=*/true);
}

void StepProfiler::finish() {
  if (state_ == State::kRecording) {
    marker_.reset();
    stop_window(/*complete=*/false);
  } else if (state_ != State::kDone) {
    log::warn("step profile: none taken: this process ran " +
              std::to_string(first_step_ < 0 ? 0 : last_seen_ - first_step_) +
              " step(s), fewer than logging.profile_warmup (" + std::to_string(warmup_) +
              ") + 1; lower logging.profile_warmup or train longer");
    state_ = State::kDone;
  }
}

void StepProfiler::stop_window(bool complete) {
  std::unique_ptr<prof::ProfilerResult> result;
  try {
    if (device_.device.is_cuda()) c10::cuda::device_synchronize();  // the window's GPU work, all of it
    result = prof::disableProfiler();
  } catch (const std::exception& e) {
    fail(e.what());
    return;
  }
  state_ = State::kDone;
  if (recorded_ == 0) {
    log::warn("step profile: no step completed inside the window; nothing to report");
    return;
  }
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - window_start_).count();
  try {
    result->save((output_dir_ / kTraceFile).string());
    write_window(complete, wall_ms);
  } catch (const std::exception& e) {
    log::warn(std::string("step profile: saving the trace failed: ") + e.what());
    return;
  }
  char per_step[32];
  std::snprintf(per_step, sizeof per_step, "%.1f", wall_ms / static_cast<double>(recorded_));
  log::info("step profile, steps " + std::to_string(first_recorded_) + "-" + std::to_string(last_completed_) +
            " recorded (" + per_step + " ms/step with the profiler on); trace " + (output_dir_ / kTraceFile).string() +
            "; report: python3 benchmarks/train/profile_report.py " + output_dir_.string());
}

// What the report needs beside the trace.
void StepProfiler::write_window(bool complete, double wall_ms) const {
  nlohmann::ordered_json j;
  j["trace"] = kTraceFile;
  j["device"] = device_.name;
  j["date"] = utc_now();
  j["torch"] = TORCH_VERSION;
  j["mode"] = device_.device.is_cuda() ? "gpu" : "cpu";
  j["warmup_steps"] = warmup_;
  j["first_step"] = first_recorded_;
  j["last_step"] = last_completed_;  // steps marked after it were left unfinished
  j["wall_ms"] = wall_ms;
  if (!complete)
    j["note"] = "the run ended after " + std::to_string(recorded_) + " of the " + std::to_string(steps_) +
                " steps asked for (logging.profile_steps)";
  common::write_file_atomically(output_dir_ / kWindowFile, j.dump(2) + "\n");
}

void StepProfiler::fail(const std::string& what) {
  marker_.reset();
  if (state_ == State::kRecording) {
    try {
      prof::disableProfiler();
    } catch (...) {
    }
  }
  state_ = State::kDone;
  log::warn("step profile: the profiler failed (" + what + "); the run goes on without it");
}

}  // namespace fptrain::trainer
