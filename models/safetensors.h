// The safetensors file format: an 8-byte little-endian header length N, N bytes
// of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {..}},
// then the data section that the offsets index.
//
// SafetensorsFile maps a file read-only and validates all of its header before
// anything is read, so a corrupt or truncated file fails with a message naming
// the file, the tensor and the exact problem instead of crashing later.
#pragma once

#include "models/tensor_map.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace fptrain::models {

struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::string dtype_name;      // as spelled in the file ("BF16")
  std::vector<int64_t> shape;
  uint64_t begin = 0;          // byte offsets relative to the data section
  uint64_t end = 0;
  uint64_t num_bytes() const { return end - begin; }
};

// "F32" <-> at::kFloat etc. Throws std::invalid_argument for names or types
// safetensors (or fptrain) does not know.
at::ScalarType safetensors_dtype(const std::string& name);
std::string safetensors_dtype_name(at::ScalarType dtype);

enum class ByteReader { kPread, kMmap };

class SafetensorsFile {
 public:
  // Maps and validates `path`; throws std::runtime_error on any problem.
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return path_; }
  uint64_t file_size() const;
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // by offset
  const SafetensorsEntry* find(const std::string& name) const;             // nullptr if absent
  const SafetensorsEntry& at(const std::string& name) const;                // throws if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's bytes inside the mapping.
  const uint8_t* data(const SafetensorsEntry& entry) const;

  // A CPU tensor aliasing the mapping, read-only by contract. It keeps the
  // mapping alive by itself (it holds a reference), so it may outlive this
  // object. Use it as the source of one copy (to another dtype or device);
  // writing into it is undefined.
  at::Tensor view(const SafetensorsEntry& entry) const;

  // An owned CPU copy, independent of the file.
  at::Tensor read(const std::string& name) const;

  // Copies bytes [offset, offset + length) of the entry's data into `dst` (host
  // memory) with several threads, through the mapping or with pread. pread
  // avoids a page fault per page and suits cold files; both are one copy.
  void copy_bytes(const SafetensorsEntry& entry, uint64_t offset, uint64_t length, void* dst,
                  ByteReader reader = ByteReader::kPread) const;

  // Hints the kernel to read the file ahead (sequential access).
  void advise_sequential() const;

 private:
  struct Mapping;
  uint64_t map_file(const std::string& file);  // sets mapping_; returns the file's size
  std::filesystem::path path_;
  std::shared_ptr<Mapping> mapping_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_start_ = 0;
};

// Reads every tensor of a file into owned CPU tensors (copies out of the
// mapping, so the result does not depend on the file staying unchanged).
TensorMap read_safetensors(const std::filesystem::path& path);

// Writes `tensors` (any device, any layout) as a safetensors file that the
// safetensors / transformers libraries load: header padded with spaces to a
// multiple of 8 bytes, tensors in name order, "__metadata__" holding `metadata`
// plus "format": "pt" unless given. Written to a temporary file in the same
// folder, flushed to disk, then renamed over `path`, so readers never see a
// half-written file.
void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace fptrain::models
