// Reading and writing safetensors files (format in safetensors.h).
#include "models/safetensors.h"

#include "common/files.h"
#include "common/json_input.h"

#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fptrain::models {
namespace {

using nlohmann::json;

// The safetensors library refuses headers above 100 MB; so do we, because a
// larger value means a corrupt length field, not a real header.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct DtypeName {
  const char* name;
  at::ScalarType type;
};

constexpr DtypeName kDtypes[] = {
    {"F64", at::kDouble},         {"F32", at::kFloat},         {"F16", at::kHalf},
    {"BF16", at::kBFloat16},      {"I64", at::kLong},          {"I32", at::kInt},
    {"I16", at::kShort},          {"I8", at::kChar},           {"U8", at::kByte},
    {"BOOL", at::kBool},          {"U16", at::kUInt16},        {"U32", at::kUInt32},
    {"U64", at::kUInt64},         {"F8_E4M3", at::kFloat8_e4m3fn}, {"F8_E5M2", at::kFloat8_e5m2},
};

using common::errno_text;

// Dimensions as read from the file (unsigned: a corrupt 2^64-1 prints as such).
std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i == 16) return s + ", ... (" + std::to_string(shape.size()) + " dimensions)]";
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

// A name from the header for a message, quoted and cut if absurdly long.
std::string quoted_name(const std::string& name) { return "'" + common::cut_text(name) + "'"; }

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

at::ScalarType safetensors_dtype(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return d.type;
  throw std::invalid_argument("unknown safetensors dtype '" + name + "'");
}

std::string safetensors_dtype_name(at::ScalarType dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.type) return d.name;
  throw std::invalid_argument(std::string("no safetensors dtype for ") + c10::toString(dtype));
}

// ---- the mapping ------------------------------------------------------------

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  int fd = -1;  // kept open for pread
  ~Mapping() {
    if (addr) ::munmap(addr, size);
    if (fd >= 0) ::close(fd);
  }
};

namespace {

[[noreturn]] void fail_file(const std::string& file, const std::string& problem) {
  throw std::runtime_error(file + ": " + problem);
}

// The shape of one tensor, read unsigned and counted in 128 bits, so an absurd
// shape is reported as it is written instead of wrapping around; returns its
// element count.
unsigned __int128 read_shape(const json& value, const std::string& file, const std::string& where,
                             SafetensorsEntry& e, std::vector<uint64_t>& dims) {
  if (!value.contains("shape") || !value["shape"].is_array()) fail_file(file, where + "missing or non-list 'shape'");
  for (const json& d : value["shape"]) {
    if (!d.is_number_unsigned())
      fail_file(file, where + "shape " + common::json_excerpt(value["shape"]) + " has a non-integer or negative size");
    dims.push_back(d.get<uint64_t>());
  }
  const auto kMaxDim = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (uint64_t d : dims)
    if (d > kMaxDim) fail_file(file, where + "shape " + shape_text(dims) + " has a dimension above 2^63-1");
  const bool empty = std::find(dims.begin(), dims.end(), uint64_t{0}) != dims.end();
  unsigned __int128 numel = empty ? 0 : 1;
  for (size_t i = 0; !empty && i < dims.size(); ++i) {
    numel *= dims[i];  // < 2^64 * 2^63 before the check: no 128-bit overflow
    if (numel > std::numeric_limits<uint64_t>::max())
      fail_file(file, where + "shape " + shape_text(dims) + ": the element count overflows 64 bits (corrupt shape)");
  }
  for (uint64_t d : dims) e.shape.push_back(static_cast<int64_t>(d));
  return numel;
}

// One tensor's header entry, checked: dtype, shape, and a byte range that
// matches them and lies inside the data section.
SafetensorsEntry read_entry(const std::string& name, const json& value, uint64_t data_size, const std::string& file) {
  const std::string where = "tensor " + quoted_name(name) + ": ";
  if (!value.is_object()) fail_file(file, where + "entry is not an object");
  SafetensorsEntry e;
  e.name = name;
  if (!value.contains("dtype") || !value["dtype"].is_string()) fail_file(file, where + "missing or non-string 'dtype'");
  e.dtype_name = value["dtype"].get<std::string>();
  try {
    e.dtype = safetensors_dtype(e.dtype_name);
  } catch (const std::invalid_argument&) {
    fail_file(file, where + "unknown dtype " + quoted_name(e.dtype_name));
  }
  std::vector<uint64_t> dims;
  const unsigned __int128 numel = read_shape(value, file, where, e, dims);

  const json& offs = value.contains("data_offsets") ? value["data_offsets"] : json();
  if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
    fail_file(file, where + "'data_offsets' must be two non-negative integers, got " + common::json_excerpt(offs));
  e.begin = offs[0].get<uint64_t>();
  e.end = offs[1].get<uint64_t>();
  if (e.end < e.begin) fail_file(file, where + "data_offsets " + range_text(e.begin, e.end) + " end before they begin");

  const unsigned __int128 need = numel * c10::elementSize(e.dtype);
  if (need > std::numeric_limits<uint64_t>::max())
    fail_file(file, where + "shape " + shape_text(dims) + " of " + e.dtype_name +
                        ": the byte size overflows 64 bits (corrupt shape)");
  if (need != e.num_bytes())
    fail_file(file, where + "shape " + shape_text(dims) + " of " + e.dtype_name + " needs " +
                        std::to_string(static_cast<uint64_t>(need)) + " bytes but data_offsets " +
                        range_text(e.begin, e.end) + " span " + std::to_string(e.num_bytes()) +
                        " (dtype or shape does not match the data)");
  if (e.end > data_size)
    fail_file(file, where + "data_offsets " + range_text(e.begin, e.end) + " run past the end of the data section (" +
                        std::to_string(data_size) + " bytes): the file is truncated");
  return e;
}

// Entries sorted by offset; no two may share a byte.
void check_no_overlap(const std::vector<SafetensorsEntry>& entries, const std::string& file) {
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : entries) {
    if (e.num_bytes() == 0) continue;  // empty tensors occupy no bytes
    if (prev && e.begin < prev->end)
      fail_file(file, "tensors " + quoted_name(prev->name) + " " + range_text(prev->begin, prev->end) + " and " +
                          quoted_name(e.name) + " " + range_text(e.begin, e.end) + " have overlapping data_offsets");
    prev = &e;
  }
}

}  // namespace

// Opens and maps the file read-only; returns its size.
uint64_t SafetensorsFile::map_file(const std::string& file) {
  mapping_ = std::make_shared<Mapping>();
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_file(file, "cannot open: " + errno_text());
  mapping_->fd = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail_file(file, "cannot stat: " + errno_text());
  if (!S_ISREG(st.st_mode)) fail_file(file, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8)
    fail_file(file, "truncated: the file has " + std::to_string(size) +
                        " bytes, fewer than the 8-byte header length field");
  mapping_->addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapping_->addr == MAP_FAILED) {
    mapping_->addr = nullptr;
    fail_file(file, "cannot mmap: " + errno_text());
  }
  mapping_->size = size;
  return size;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  const std::string file = path.string();
  const uint64_t size = map_file(file);
  const auto* bytes = static_cast<const uint8_t*>(mapping_->addr);
  const uint64_t header_len = read_le64(bytes);
  if (header_len > size - 8)
    fail_file(file, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                        std::to_string(size) + " bytes): the file is truncated or not safetensors");
  if (header_len > kMaxHeaderBytes)
    fail_file(file, "header length " + std::to_string(header_len) + " exceeds the 100 MB limit: corrupt length field");
  data_start_ = 8 + header_len;

  json header;
  try {
    header = common::parse_json(std::string_view(reinterpret_cast<const char*>(bytes + 8), header_len),
                                file + ": header");
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());  // "<file>: header: invalid JSON: ..."
  }
  if (!header.is_object()) fail_file(file, "the header is not a JSON object");
  for (const auto& [name, value] : header.items()) {
    if (name != "__metadata__") {
      entries_.push_back(read_entry(name, value, size - data_start_, file));
    } else if (!value.is_null()) {
      if (!value.is_object()) fail_file(file, "__metadata__ is not an object");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) fail_file(file, "__metadata__ value for " + quoted_name(k) + " is not a string");
        metadata_[k] = v.get<std::string>();
      }
    }
  }
  std::sort(entries_.begin(), entries_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_no_overlap(entries_, file);
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

uint64_t SafetensorsFile::file_size() const { return mapping_->size; }

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const SafetensorsEntry& SafetensorsFile::at(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (!e) throw std::runtime_error(path_.string() + ": no tensor named '" + name + "'");
  return *e;
}

const uint8_t* SafetensorsFile::data(const SafetensorsEntry& entry) const {
  return static_cast<const uint8_t*>(mapping_->addr) + data_start_ + entry.begin;
}

at::Tensor SafetensorsFile::view(const SafetensorsEntry& entry) const {
  auto* ptr = const_cast<uint8_t*>(data(entry));
  const size_t item = c10::elementSize(entry.dtype);
  // Headers are not always padded, so a tensor may start misaligned; give an
  // owned (aligned) copy then rather than a view kernels may mishandle.
  if (reinterpret_cast<uintptr_t>(ptr) % item != 0) return read(entry.name);
  std::shared_ptr<Mapping> keep = mapping_;
  return at::from_blob(
      ptr, entry.shape, [keep](void*) mutable { keep.reset(); },
      at::TensorOptions().dtype(entry.dtype).device(at::kCPU));
}

at::Tensor SafetensorsFile::read(const std::string& name) const {
  const SafetensorsEntry& e = at(name);
  at::Tensor out = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
  if (e.num_bytes()) std::memcpy(out.data_ptr(), data(e), e.num_bytes());
  return out;
}

void SafetensorsFile::advise_sequential() const {
  ::madvise(mapping_->addr, mapping_->size, MADV_SEQUENTIAL);
  ::posix_fadvise(mapping_->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
}

void SafetensorsFile::copy_bytes(const SafetensorsEntry& entry, uint64_t offset, uint64_t length, void* dst,
                                 ByteReader reader) const {
  if (offset + length > entry.num_bytes())
    throw std::out_of_range(path_.string() + ": tensor '" + entry.name + "': byte range past its end");
  auto* out = static_cast<uint8_t*>(dst);
  const uint64_t start = data_start_ + entry.begin + offset;
  // Several threads keep several disk reads in flight; 4 MB pieces keep each large.
  constexpr int64_t kPiece = 4 << 20;
  at::parallel_for(0, static_cast<int64_t>(length), kPiece, [&](int64_t b, int64_t e) {
    if (reader == ByteReader::kMmap) {
      std::memcpy(out + b, static_cast<const uint8_t*>(mapping_->addr) + start + b, static_cast<size_t>(e - b));
      return;
    }
    int64_t done = b;
    while (done < e) {
      const ssize_t n = ::pread(mapping_->fd, out + done, static_cast<size_t>(e - done),
                                static_cast<off_t>(start + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        throw std::runtime_error(path_.string() + ": tensor '" + entry.name + "': read failed: " +
                                 (n == 0 ? std::string("unexpected end of file") : errno_text()));
      done += n;
    }
  });
}

TensorMap read_safetensors(const std::filesystem::path& path) {
  SafetensorsFile file(path);
  TensorMap out;
  for (const auto& e : file.entries()) out.emplace(e.name, file.read(e.name));
  return out;
}

// ---- writing ----------------------------------------------------------------

void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string file = path.string();
  json header = json::object();
  json meta = json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  if (!meta.contains("format")) meta["format"] = "pt";
  header["__metadata__"] = meta;

  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") throw std::invalid_argument(file + ": '__metadata__' is not a tensor name");
    if (!t.defined()) throw std::invalid_argument(file + ": tensor '" + name + "' is undefined");
    std::string dtype;
    try {
      dtype = safetensors_dtype_name(t.scalar_type());
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(file + ": tensor '" + name + "': " + e.what());
    }
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  common::write_file_atomically(path, [&](int fd) {
    common::write_all(fd, len, 8, file);
    common::write_all(fd, text.data(), text.size(), file);
    for (const auto& [name, t] : tensors) {
      const at::Tensor cpu = t.detach().to(at::kCPU).contiguous();
      if (cpu.numel()) common::write_all(fd, cpu.data_ptr(), cpu.numel() * cpu.element_size(), file);
    }
  });
}

}  // namespace fptrain::models
