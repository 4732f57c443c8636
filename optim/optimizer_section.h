// The optimizer: section of a run's configuration (trainer/config.h parses it
// from YAML): AdamW's hyper-parameters and how its state is kept.
#pragma once

#include "common/enum_names.h"

#include <cstdint>

namespace fptrain::optim {

// The device update's pieces (optimizer.offload_update: device): at most 2^25 elements, so its
// two staging slots take 2 x 2^25 x (state bytes per element) of device memory, 258 MiB with
// split masters and 8-bit moments, whatever the largest bucket (an 8B's embedding: 525M).
constexpr int64_t kStreamChunk = int64_t{1} << 25;

// How AdamW keeps exp_avg and exp_avg_sq: full (fp32 with master weights, else the model
// dtype), or 8-bit blockwise as bitsandbytes' AdamW8bit keeps them (a uint8 code per
// element and an fp32 absmax per 256: 2 bytes per parameter instead of 8; its arithmetic,
// optim/blockwise8_math.h).
enum class Moments { kFull, k8bit };

// Where the gradients live (optim/flat_gradients.h): lazy = per bucket, allocated when the
// backward first reaches the bucket and freed after the step (no gradient memory during the
// forward); resident = one buffer for the whole run (a fixed address, which the copy-engine
// collectives need); auto = lazy unless the copy engines take the gradients.
enum class GradStorage { kAuto, kLazy, kResident };

// Where AdamW's state lives and its update runs: on the training device, or in pinned host
// memory with the update on host threads, overlapped with the next step's forward
// (optim/offloaded_step.h); the device keeps the weights and gradients only.
enum class Offload { kNone, kCpu };

// Where an offloaded update runs (optimizer.offload: cpu): host = on host threads
// (optim/offloaded_step.h: the gradients come to the host, the new weights go back);
// device = the host only stores the state, each bucket's state is streamed to the device,
// updated there by the kernel of offload none and streamed back (optim/streamed_step.h);
// auto = device with 8-bit moments, whose host step is compute-bound, else host
// (resolved_offload_update).
enum class OffloadUpdate { kAuto, kHost, kDevice };

struct OptimizerSection {
  double lr = 2e-5;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // fp32 master weights and moments next to low-precision model weights; false = pure model dtype.
  bool master_weights = true;
  // With master weights and a bf16 model: each master kept as the model's bf16 weight and
  // a 16-bit remainder (optim/flat_adamw_math.h) instead of an fp32 copy: 2 bytes less per
  // parameter, the same bits (YAML: master_weights: split).
  bool split_masters = false;
  // With master weights: sum the micro-batches' gradients in fp32 (one more pass per
  // micro-batch and 4 bytes per parameter) instead of in the model dtype, in place.
  bool fp32_grad_accumulation = false;
  double grad_clip = 1.0;  // global L2 norm; 0 disables clipping
  Moments moments = Moments::kFull;  // YAML: state_dtype: auto | int8
  GradStorage gradient_storage = GradStorage::kAuto;  // YAML: gradient_storage: auto | lazy | resident
  Offload offload = Offload::kNone;  // YAML: offload: none | cpu
  OffloadUpdate offload_update = OffloadUpdate::kAuto;  // YAML: offload_update: auto | host | device
  // Not a YAML key: the device update's most elements per streamed piece (0: kStreamChunk);
  // tests make it small to cut buckets into several pieces.
  int64_t stream_chunk = 0;
  // Not a YAML key: the offloaded update's intra-op threads (0: this process's intra-op
  // count). The trainer sets it from cpu_threads, else the cores per rank of the node.
  int host_threads = 0;
};

// Where the offloaded update runs once `auto` is resolved. With 8-bit moments the host step is
// compute-bound (a Llama-3-8B, split masters, H200 host, 2026-11-27: 9,169 ms a step on 32 host
// threads against 818 ms with the state streamed through the device, bit for bit the same); with
// fp32 moments the device update streams 3x the bytes and the host step is memory-bound (~1.8 s
// for 8B on 64 threads), so the host keeps it.
inline OffloadUpdate resolved_offload_update(const OptimizerSection& o) {
  if (o.offload_update != OffloadUpdate::kAuto) return o.offload_update;
  return o.moments == Moments::k8bit ? OffloadUpdate::kDevice : OffloadUpdate::kHost;
}

}  // namespace fptrain::optim

namespace fptrain::common {
template <>
struct EnumNames<optim::Moments> {
  static constexpr std::array<EnumEntry<optim::Moments>, 2> table = {
      {{optim::Moments::kFull, "auto"}, {optim::Moments::k8bit, "int8"}}};
};
template <>
struct EnumNames<optim::GradStorage> {
  static constexpr std::array<EnumEntry<optim::GradStorage>, 3> table = {{{optim::GradStorage::kAuto, "auto"},
                                                                          {optim::GradStorage::kLazy, "lazy"},
                                                                          {optim::GradStorage::kResident, "resident"}}};
};
template <>
struct EnumNames<optim::OffloadUpdate> {
  static constexpr std::array<EnumEntry<optim::OffloadUpdate>, 3> table = {{{optim::OffloadUpdate::kAuto, "auto"},
                                                                          {optim::OffloadUpdate::kHost, "host"},
                                                                          {optim::OffloadUpdate::kDevice, "device"}}};
};
template <>
struct EnumNames<optim::Offload> {
  static constexpr std::array<EnumEntry<optim::Offload>, 2> table = {
      {{optim::Offload::kNone, "none"}, {optim::Offload::kCpu, "cpu"}}};
};
}  // namespace fptrain::common
