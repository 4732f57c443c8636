#include "trainer/allocator_settings.h"

#include <c10/core/AllocatorConfig.h>

#include <cstdlib>

namespace fptrain::trainer {
namespace {

bool is_set(const char* value) { return value != nullptr && value[0] != '\0'; }

}  // namespace

bool wants_expandable_segments(bool cuda, bool one_process, const char* cuda_alloc_conf, const char* alloc_conf) {
  return cuda && one_process && !is_set(cuda_alloc_conf) && !is_set(alloc_conf);
}

std::string choose_allocator_settings(const at::Device& device, bool one_process) {
  if (!wants_expandable_segments(device.is_cuda(), one_process, std::getenv("PYTORCH_CUDA_ALLOC_CONF"),
                                 std::getenv("PYTORCH_ALLOC_CONF")))
    return "";
  c10::CachingAllocator::setAllocatorSettings("expandable_segments:True");
  return "CUDA allocator: expandable segments (one process; PYTORCH_CUDA_ALLOC_CONF chooses otherwise)";
}

}  // namespace fptrain::trainer
