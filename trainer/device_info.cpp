#include "trainer/device_info.h"

#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <thread>

#include <fstream>
#include <stdexcept>
#include <string>

namespace fptrain::trainer {
namespace {

// Dense bf16 peaks (no sparsity) from the vendors' data sheets.
std::optional<double> bf16_peak(const std::string& name) {
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos ||
      name.find("GH200") != std::string::npos)
    return 989e12;
  if (name.find("B200") != std::string::npos) return 2250e12;
  if (name.find("A100") != std::string::npos) return 312e12;
  if (name.find("L40S") != std::string::npos) return 362e12;
  if (name.find("A10") != std::string::npos) return 125e12;
  return std::nullopt;
}

}  // namespace

DeviceInfo resolve_device(const std::string& requested, int64_t cpu_threads) {
  if (cpu_threads > 0) at::set_num_threads(static_cast<int>(cpu_threads));
  DeviceInfo info;
  const bool have_cuda = at::hasCUDA() && at::cuda::device_count() > 0;
  std::string req = requested;
  if (req == "auto") req = have_cuda ? "cuda" : "cpu";
  if (req == "cpu") {
    info.device = at::kCPU;
    info.name = "CPU (" + std::to_string(at::get_num_threads()) + " threads)";
    return info;
  }
  if (!have_cuda) throw std::invalid_argument("device: '" + requested + "' requested but no CUDA GPU is visible");
  int index = 0;
  if (req.rfind("cuda:", 0) == 0) index = std::stoi(req.substr(5));
  if (index >= at::cuda::device_count())
    throw std::invalid_argument("device: '" + requested + "' but only " +
                                std::to_string(at::cuda::device_count()) + " GPU(s) are visible");
  info.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index));
  at::cuda::set_device(index);
  info.name = at::cuda::getDeviceProperties(index)->name;
  info.peak_bf16_flops = bf16_peak(info.name);
  return info;
}

std::string rank_device(const std::string& requested, const distributed::LaunchEnv& env) {
  const bool have_cuda = at::hasCUDA() && at::cuda::device_count() > 0;
  const std::string who = "rank " + std::to_string(env.rank) + " (LOCAL_RANK " + std::to_string(env.local_rank) + ")";
  if (requested == "cpu" || (requested == "auto" && !have_cuda)) return "cpu";
  if (requested != "auto" && requested != "cuda")
    throw std::invalid_argument("device: '" + requested + "' with " + std::to_string(env.world_size) +
                                " ranks: every rank would use that one GPU; use auto or cuda (rank r takes "
                                "cuda:LOCAL_RANK) and choose GPUs with CUDA_VISIBLE_DEVICES");
  if (!have_cuda) throw std::invalid_argument(who + ": device: '" + requested + "' but no CUDA GPU is visible");
  if (env.local_rank >= at::cuda::device_count())
    throw std::invalid_argument(who + ": this node has " + std::to_string(at::cuda::device_count()) +
                                " visible GPU(s), so it can run at most that many ranks (LOCAL_WORLD_SIZE " +
                                std::to_string(env.local_world_size) + "): lower --nproc_per_node");
  return "cuda:" + std::to_string(env.local_rank);
}

int64_t memory_outside_allocator(const at::Device& device) {
  if (!device.is_cuda()) return 0;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  const int64_t reserved = stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].current;
  // Other processes on the same GPU count too; one rank per GPU makes that small.
  return std::max<int64_t>(0, static_cast<int64_t>(total_bytes - free_bytes) - reserved);
}

int64_t memory_available(const at::Device& device) {
  if (!device.is_cuda()) return 0;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  using Agg = c10::CachingAllocator::StatType;
  const int64_t cached = stats.reserved_bytes[static_cast<size_t>(Agg::AGGREGATE)].current -
                         stats.allocated_bytes[static_cast<size_t>(Agg::AGGREGATE)].current;
  return static_cast<int64_t>(free_bytes) + std::max<int64_t>(0, cached);
}

int64_t memory_total(const at::Device& device) {
  if (!device.is_cuda()) return 0;
  return static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
}

MemoryStats memory_stats(const at::Device& device) {
  MemoryStats m;
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    using Agg = c10::CachingAllocator::StatType;
    m.peak_allocated_bytes = stats.allocated_bytes[static_cast<size_t>(Agg::AGGREGATE)].peak;
    m.peak_reserved_bytes = stats.reserved_bytes[static_cast<size_t>(Agg::AGGREGATE)].peak;
  }
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) m.peak_rss_bytes = std::stoll(line.substr(6)) * 1024;  // kB
  return m;
}

int offload_host_threads(int64_t cpu_threads, int local_ranks) {
  if (cpu_threads > 0) return static_cast<int>(cpu_threads);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, local_ranks));
}

}  // namespace fptrain::trainer
