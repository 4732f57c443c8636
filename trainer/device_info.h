// What the run executes on: device choice, its bf16 peak (for MFU) and peak memory.
#pragma once

#include "distributed/launch_env.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>

namespace fptrain::trainer {

struct DeviceInfo {
  at::Device device = at::kCPU;
  std::string name;                       // "NVIDIA H100 80GB HBM3" or "CPU (16 threads)"
  std::optional<double> peak_bf16_flops;  // dense bf16 tensor-core peak; unknown for CPUs
};

// "auto" picks cuda when LibTorch sees a GPU, else cpu. "cuda" without a GPU is an error.
// cpu_threads > 0 sets LibTorch's intra-op thread count first.
DeviceInfo resolve_device(const std::string& requested, int64_t cpu_threads = 0);

// The intra-op threads of an offloaded optimizer's host update: cpu_threads when set, else
// this machine's cores shared among its `local_ranks` processes.
int offload_host_threads(int64_t cpu_threads, int local_ranks);
// The device a data-parallel rank asks for: cuda:LOCAL_RANK where GPUs are
// (`device: auto` or `cuda`), else the CPU. Throws for more ranks on a node than
// GPUs, or for `device: cuda:N`, which every rank would share.
std::string rank_device(const std::string& requested, const distributed::LaunchEnv& env);

struct MemoryStats {
  int64_t peak_allocated_bytes = 0;  // CUDA caching allocator (0 on CPU)
  int64_t peak_reserved_bytes = 0;
  int64_t peak_rss_bytes = 0;        // host process high-water mark
};
MemoryStats memory_stats(const at::Device& device);
// Device memory in use by this process outside the caching allocator (CUDA
// context, NCCL's buffers, cuBLAS workspaces): used - reserved. 0 on the CPU.
int64_t memory_outside_allocator(const at::Device& device);
// Device memory a new allocation can still get: free on the device plus what the
// caching allocator holds unused. 0 on the CPU.
int64_t memory_available(const at::Device& device);
// The device's whole memory (0 on the CPU).
int64_t memory_total(const at::Device& device);

}  // namespace fptrain::trainer
