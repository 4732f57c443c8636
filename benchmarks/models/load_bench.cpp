// Times fptrain's checkpoint loading next to the floor set by the disk: reading
// the same files' bytes and nothing else.
//
//   load_bench --checkpoint DIR [--device cuda] [--dtype bfloat16] [--repeats 2] [--json FILE]
//
// Each repeat runs cold (page cache dropped with /proc/sys/vm/drop_caches when
// allowed, and the files' pages evicted with posix_fadvise(DONTNEED) in any
// case; the fraction still resident is measured with mincore and reported) and
// then warm. fptrain loads with both byte readers (pread and mmap; * marks the
// default). Every loaded tensor is checked against a plain CPU read, so the
// timing never measures a load that produced wrong data.
#include "models/checkpoint.h"
#include "models/model_config.h"
#include "models/safetensors.h"

#include <ATen/ATen.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;
using fptrain::models::ByteReader;
using fptrain::models::SafetensorsFile;
using nlohmann::json;

namespace {

struct Args {
  fs::path checkpoint;
  std::string device = "cuda";
  std::string dtype = "bfloat16";
  int repeats = 2;
  fs::path json_out;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + k);
      return argv[++i];
    };
    if (k == "--checkpoint") a.checkpoint = value();
    else if (k == "--device") a.device = value();
    else if (k == "--dtype") a.dtype = value();
    else if (k == "--repeats") a.repeats = std::stoi(value());
    else if (k == "--json") a.json_out = value();
    else throw std::invalid_argument("unknown argument " + k);
  }
  if (a.checkpoint.empty()) throw std::invalid_argument("--checkpoint DIR is required");
  return a;
}

std::vector<fs::path> weight_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  if (files.empty()) throw std::runtime_error(dir.string() + ": no .safetensors files");
  return files;
}

uint64_t total_bytes(const std::vector<fs::path>& files) {
  uint64_t n = 0;
  for (const auto& f : files) n += fs::file_size(f);
  return n;
}

// Evicts the files from the page cache; returns whether the global drop worked.
bool make_cold(const std::vector<fs::path>& files) {
  ::sync();
  bool dropped = false;
  if (FILE* f = std::fopen("/proc/sys/vm/drop_caches", "w")) {
    dropped = std::fputs("3\n", f) >= 0;
    dropped = (std::fclose(f) == 0) && dropped;
  }
  for (const auto& p : files) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  return dropped;
}

// Fraction of the files' pages in the page cache right now.
double resident_fraction(const std::vector<fs::path>& files) {
  const long page = ::sysconf(_SC_PAGESIZE);
  uint64_t resident = 0, pages = 0;
  for (const auto& p : files) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) continue;
    const size_t size = fs::file_size(p);
    void* addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (addr == MAP_FAILED) continue;
    std::vector<unsigned char> vec((size + page - 1) / page);
    if (::mincore(addr, size, vec.data()) == 0)
      for (unsigned char v : vec) resident += v & 1;
    pages += vec.size();
    ::munmap(addr, size);
  }
  return pages ? static_cast<double>(resident) / pages : 0.0;
}

// The floor: read every byte once with large sequential reads, nothing else.
void read_bytes_only(const std::vector<fs::path>& files, std::vector<char>& buf) {
  uint64_t sum = 0;
  for (const auto& p : files) {
    const int fd = ::open(p.c_str(), O_RDONLY);
    if (fd < 0) throw std::runtime_error(p.string() + ": cannot open");
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) sum += static_cast<unsigned char>(buf[n - 1]);
    ::close(fd);
    if (n < 0) throw std::runtime_error(p.string() + ": read failed");
  }
  if (sum == 1) std::fprintf(stderr, " ");  // keeps the reads observable
}

void synchronize(const at::Device& device) {
  if (device.is_cuda()) c10::impl::VirtualGuardImpl(device.type()).synchronizeDevice(device.index() < 0 ? 0 : device.index());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Compares every loaded tensor with a plain CPU read of the file.
void verify(const fptrain::models::TensorMap& loaded, const fs::path& dir, at::ScalarType dtype) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  for (const auto& p : weight_files(dir)) files.push_back(std::make_unique<SafetensorsFile>(p));
  for (const auto& [name, t] : loaded) {
    bool found = false;
    for (const auto& f : files)
      if (f->find(name)) {
        found = true;
        if (!at::equal(t.cpu(), f->read(name).to(dtype)))
          throw std::runtime_error("verification failed: " + name + " differs from a CPU read");
      }
    if (!found) throw std::runtime_error("verification failed: " + name + " is in no file");
  }
}

std::string today() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    const at::Device device(args.device);
    const at::ScalarType dtype = fptrain::models::dtype_from_name(args.dtype);
    const auto config = fptrain::models::load_model_config(args.checkpoint / "config.json");
    const auto files = weight_files(args.checkpoint);
    const uint64_t bytes = total_bytes(files);
    const double gb = bytes / 1e9;
    std::printf("checkpoint %s: %zu files, %.2f GB, %.2f B parameters, %s -> %s %s\n",
                args.checkpoint.c_str(), files.size(), gb, config.num_parameters() / 1e9, config.dtype.c_str(),
                args.device.c_str(), args.dtype.c_str());

    if (device.is_cuda()) {  // context creation and allocator warm-up are not load time
      at::ones({1}, at::TensorOptions().device(device)).sum().item<float>();
    }

    json runs = json::array();
    auto record = [&](const std::string& what, const std::string& cache, double resident_before, double s) {
      runs.push_back({{"what", what}, {"cache", cache}, {"resident_before", resident_before}, {"seconds", s},
                      {"gb_per_s", gb / s}});
      std::printf("  %-42s %-5s (%5.1f%% cached before) %8.3f s  %6.2f GB/s\n", what.c_str(), cache.c_str(),
                  100 * resident_before, s, gb / s);
      std::fflush(stdout);
    };

    std::vector<char> buffer(64 << 20);
    bool dropped_everything = true;
    for (int r = 0; r < args.repeats; ++r) {
      for (const bool cold : {true, false}) {
        const std::string cache = cold ? "cold" : "warm";
        if (cold) dropped_everything = make_cold(files) && dropped_everything;
        double before = resident_fraction(files);
        auto t0 = std::chrono::steady_clock::now();
        read_bytes_only(files, buffer);
        record("read bytes only", cache, before, seconds_since(t0));

        for (const auto reader : {ByteReader::kPread, ByteReader::kMmap}) {
          const bool is_default = reader == fptrain::models::LoadOptions{}.reader;
          fptrain::models::LoadOptions options;
          options.reader = reader;
          if (cold) make_cold(files);
          before = resident_fraction(files);
          t0 = std::chrono::steady_clock::now();
          auto params = fptrain::models::load_pretrained_weights(args.checkpoint, config, dtype, device, options);
          synchronize(device);
          const double s = seconds_since(t0);
          record(std::string("fptrain load_pretrained_weights") + (reader == ByteReader::kPread ? " (pread)" : " (mmap)") +
                     (is_default ? " *" : ""),
                 cache, before, s);
          if (r == 0 && !cold) verify(params, args.checkpoint, dtype);
        }
      }
    }

    json result = {{"benchmark", "checkpoint loading"},
                   {"date", today()},
                   {"device", args.device},
                   {"checkpoint",
                    {{"path", args.checkpoint.string()},
                     {"files", files.size()},
                     {"bytes", bytes},
                     {"parameters", config.num_parameters()},
                     {"stored_dtype", config.dtype}}},
                   {"target_dtype", args.dtype},
                   {"page_cache_dropped", dropped_everything},
                   {"runs", runs}};
    if (!args.json_out.empty()) std::ofstream(args.json_out) << result.dump(2) << "\n";
    if (!dropped_everything)
      std::printf("note: /proc/sys/vm/drop_caches was not writable; cold runs rely on posix_fadvise eviction "
                  "(see resident_before)\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "load_bench: %s\n", e.what());
    return 1;
  }
}
