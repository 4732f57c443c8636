// Where the time of a training step goes: `logging.profile_steps: N` runs N
// optimizer steps under LibTorch's Kineto profiler after `logging.profile_warmup`
// steps and writes <output_dir>/profile.json and profile.md.
//
// On a GPU every kernel, memcpy and memset of the window (CUPTI) is put in a
// category (classify_activity: its name first, then the ATen ops that launched
// it), and per step the report gives the GPU time of each category, kernel
// counts, the wall time, the GPU's idle time (wall minus the union of GPU
// activity: host gaps and synchronizations), the host time spent waiting in
// cuda*Synchronize and cudaMemcpy*, the 15 costliest kernels and the ops behind
// other_elementwise. On the CPU (or where Kineto
// records no GPU activity) the same report is made of the CPU ops' self time
// on the training thread. The device is synchronized at both ends of the window,
// so its wall time holds all the GPU work of its steps and nothing else.
//
// A failure of the profiler is logged and ends profiling; it never stops the run.
#pragma once

#include "trainer/device_info.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fptrain::trainer {

enum class StepCategory {
  kGemm,
  kAttention,
  kNorm,
  kRope,
  kActivation,
  kLoss,
  kOtherElementwise,
  kOptimizer,
  kClipping,
  kNccl,
  kMemcpy,
  kMemset,
  kOther,
};
inline constexpr size_t kNumStepCategories = static_cast<size_t>(StepCategory::kOther) + 1;

// "gemm", "attention", "norm", "rope", "activation", "loss", "other_elementwise",
// "optimizer", "clipping", "nccl", "memcpy", "memset", "other".
const char* category_name(StepCategory c);

// The category of one GPU activity or CPU op. `name`: the kernel's name as
// CUPTI reports it ("Memcpy HtoD (Pinned -> Device)", "Memset (Device)" for
// memory operations), or the op's own name for a CPU op. `op_chain`: the ops
// around it, innermost first — for a kernel, the op that launched it and that
// op's enclosing ops (for a CPU op, the op itself first); for work of the
// backward pass the forward op that made its autograd node may follow, with
// its own enclosing ops. Pure.
//
//   1. by the name: nccl*, Memcpy, Memset, our attention kernels
//      (fptrain::attention::), flash / fmha / cudnn sdpa kernels, our optimizer
//      kernels (adamw_step_kernel, accumulate_kernel: optimizer; grad_norm_kernel:
//      clipping), cuBLAS / cutlass / nvjet / xmma GEMM kernels;
//   2. by the ops, innermost first, the first that names a category: loss
//      (cross_entropy, log_softmax, nll_loss), clipping (clip, grad_norm),
//      optimizer (optimizer, adam), attention (attention, attn, sdpa, softmax),
//      norm (rms_norm, layer_norm, rsqrt, pow, mean), rope (rotary, rope, neg,
//      cos, sin), activation (silu, gelu, relu, sigmoid, tanh, swiglu), nccl
//      (nccl, c10d, all_reduce, all_gather, reduce_scatter); autograd nodes count
//      as their op (SiluBackward0 is silu). A GEMM op (mm, addmm, bmm, matmul,
//      linear, ...) names gemm only as the launching op itself;
//   3. else other_elementwise for ATen's work (an op launched it, or an
//      at::native kernel), other for the rest.
//
// Generic ops (mul, add, cat, copies and casts) name nothing: the products and
// sums of RMSNorm, RoPE and SwiGLU are other_elementwise unless an enclosing
// scope (RECORD_FUNCTION "fptrain::rms_norm", ...) names their block.
StepCategory classify_activity(std::string_view name, const std::vector<std::string>& op_chain);

// The length of the union of the intervals [start, end) clipped to [lo, hi). Pure.
int64_t union_length(std::vector<std::pair<int64_t, int64_t>> intervals, int64_t lo, int64_t hi);

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
  std::string marker_name_;
  std::unique_ptr<struct StepMarker> marker_;  // the open "ProfilerStep#N" range
};

}  // namespace fptrain::trainer
