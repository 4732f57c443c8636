// Fuzz target safetensors_header: the input is a whole .safetensors file (8-byte
// header length, JSON header, data). SafetensorsFile must accept it or throw
// std::runtime_error naming the problem; for an accepted file every tensor must
// be readable, as a copy and as a view of the mapping.
#include "models/safetensors.h"
#include "fuzz/fuzz_util.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

using namespace fptrain;

namespace {

// A memory-backed file, rewritten for every input (no disk traffic).
const std::string& memory_file(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("fptrain-fuzz-safetensors", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0 || ::ftruncate(fd, 0) != 0) std::abort();
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = memory_file(data, size);
  try {
    const models::SafetensorsFile file(path);
    for (const auto& entry : file.entries()) {
      const at::Tensor copy = file.read(entry.name);
      const at::Tensor view = file.view(entry);
      if (copy.numel() != view.numel() || static_cast<uint64_t>(copy.nbytes()) != entry.num_bytes()) std::abort();
      if (entry.num_bytes() && std::memcmp(copy.data_ptr(), file.data(entry), entry.num_bytes()) != 0) std::abort();
    }
  } catch (const std::runtime_error&) {
  }
  return 0;
}
