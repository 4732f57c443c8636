// Loading and saving Hugging Face checkpoint folders (see checkpoint.h).
#include "models/checkpoint.h"

#include "models/model_dtype.h"
#include "models/nf4_checkpoint.h"
#include "models/parameter_layout.h"
#include "models/safetensors.h"

#include "common/files.h"
#include "common/json_input.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>

#include <sys/stat.h>
#include <unistd.h>

namespace fptrain::models {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string config_summary(const ModelConfig& c) {
  return c.architecture + " with hidden_size=" + std::to_string(c.hidden_size) +
         ", num_hidden_layers=" + std::to_string(c.num_hidden_layers) +
         ", vocab_size=" + std::to_string(c.vocab_size) + ", tie_word_embeddings=" +
         (c.tie_word_embeddings ? "true" : "false");
}

// Lists names (at most `limit` of them, then a count).
std::string name_list(const std::vector<std::string>& names, size_t limit = 20) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", " : "") + common::cut_text(names[i]);
  if (names.size() > limit) s += ", ... (" + std::to_string(names.size()) + " in all)";
  return s;
}

// The open files of one checkpoint and which file holds which tensor.
struct OpenCheckpoint {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, std::pair<const SafetensorsFile*, const SafetensorsEntry*>> tensors;
};

OpenCheckpoint open_checkpoint(const fs::path& dir) {
  OpenCheckpoint ck;
  auto add_file = [&](const fs::path& path) -> const SafetensorsFile* {
    ck.files.push_back(std::make_unique<SafetensorsFile>(path));
    const SafetensorsFile* f = ck.files.back().get();
    for (const auto& e : f->entries()) {
      auto [it, inserted] = ck.tensors.emplace(e.name, std::make_pair(f, &e));
      if (!inserted)
        throw std::runtime_error(path.string() + ": tensor '" + common::cut_text(e.name) + "' is also in " +
                                 it->second.first->path().string());
    }
    return f;
  };

  const fs::path index_path = dir / kIndexFile;
  if (fs::exists(index_path)) {
    const std::string where = index_path.string();
    json index;
    try {
      index = common::read_json_file(where);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(e.what());  // "<file>: invalid JSON: ..." or "<file>: cannot open"
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      throw std::runtime_error(where + ": key 'weight_map' is missing or not an object");
    // shard file -> the tensor names the index puts there
    std::map<std::string, std::vector<std::string>> shards;
    for (const auto& [name, shard] : index["weight_map"].items()) {
      if (!shard.is_string())
        throw std::runtime_error(where + ": weight_map[" + common::quoted_excerpt(name) + "] = " +
                                 common::json_excerpt(shard) + " is not a file name");
      const std::string file = shard.get<std::string>();
      if (file.empty() || file == "." || file == ".." || fs::path(file).filename().string() != file)
        throw std::runtime_error(where + ": weight_map[" + common::quoted_excerpt(name) + "] = " +
                                 common::quoted_excerpt(file) + " is not a plain file name in the checkpoint folder");
      shards[file].push_back(name);
    }
    for (const auto& [file, names] : shards) {
      const fs::path path = dir / file;
      std::error_code ec;
      if (!fs::exists(path, ec))
        throw std::runtime_error(where + ": shard '" + common::cut_text(file) + "' is missing (it should hold " +
                                 std::to_string(names.size()) + " tensors, e.g. '" + common::cut_text(names.front()) +
                                 "')");
      const SafetensorsFile* f = add_file(path);
      for (const std::string& name : names)
        if (!f->find(name))
          throw std::runtime_error(where + ": maps tensor '" + common::cut_text(name) + "' to shard '" +
                                   common::cut_text(file) + "', which does not contain it");
    }
    return ck;
  }
  const fs::path single = dir / kSingleFile;
  if (!fs::exists(single)) {
    std::string msg = dir.string() + ": no " + kSingleFile + " or " + kIndexFile + " in the checkpoint folder";
    if (fs::exists(dir / "pytorch_model.bin") || fs::exists(dir / "pytorch_model.bin.index.json"))
      msg += " (it holds pickled pytorch_model.bin weights, which fptrain does not read: convert them to "
             "safetensors, e.g. load and save_pretrained them with transformers)";
    throw std::runtime_error(msg);
  }
  add_file(single);
  return ck;
}

// The tensors the checkpoint holds: the parameters, a 4-bit one's projections as their parts.
std::map<std::string, std::vector<int64_t>> expected_checkpoint_tensors(const ModelConfig& c) {
  auto expected = expected_parameter_shapes(c);
  if (!c.bnb_nf4) return expected;
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& [name, shape] : expected) {
    if (!is_projection_weight(name)) {
      out.emplace(name, shape);
      continue;
    }
    for (auto& [part, part_shape] : nf4_checkpoint_parts(name, shape)) out.emplace(part, std::move(part_shape));
  }
  return out;
}

// Checks the checkpoint against the config; one error lists every problem.
void check_against_config(const OpenCheckpoint& ck, const ModelConfig& c, const fs::path& dir) {
  const auto expected = expected_checkpoint_tensors(c);
  std::vector<std::string> missing, unexpected, problems;
  for (const auto& [name, shape] : expected)
    if (!ck.tensors.count(name)) missing.push_back(name);
  for (const auto& [name, loc] : ck.tensors) {
    if (is_ignorable_checkpoint_tensor(name, c)) continue;
    auto it = expected.find(name);
    if (it == expected.end()) {
      unexpected.push_back(name);
      continue;
    }
    const SafetensorsEntry& e = *loc.second;
    const std::string file = loc.first->path().filename().string();
    const bool any_length = it->second == std::vector<int64_t>{-1} && e.shape.size() == 1;
    if (e.shape != it->second && !any_length)
      problems.push_back("tensor '" + name + "' in " + file + " has shape " + c10::str(at::IntArrayRef(e.shape)) +
                         " but the config implies " + c10::str(at::IntArrayRef(it->second)));
    if (!at::isFloatingType(e.dtype) && !(c.bnb_nf4 && nf4_part_of(name)))  // parts: checked as they load
      problems.push_back("tensor '" + name + "' in " + file + " has dtype " + e.dtype_name +
                         ", not a floating-point type");
  }
  if (missing.empty() && unexpected.empty() && problems.empty()) return;
  std::string msg = dir.string() + ": the checkpoint does not match its config (" + config_summary(c) + ")";
  if (!missing.empty()) msg += "\n  missing tensors: " + name_list(missing);
  if (!unexpected.empty()) msg += "\n  unexpected tensors: " + name_list(unexpected);
  for (const auto& p : problems) msg += "\n  " + p;
  throw std::runtime_error(msg);
}

// Copies file bytes to a device through two pinned buffers, so the CPU fills
// one while the DMA engine drains the other.
class PinnedUploader {
 public:
  PinnedUploader(at::Device device, const LoadOptions& options)
      : device_(device), chunk_(options.staging_bytes), reader_(options.reader), guard_(device.type()) {
    if (chunk_ <= 0) throw std::invalid_argument("LoadOptions::staging_bytes must be positive");
    for (int i = 0; i < 2; ++i) {
      buffers_[i] = at::empty({chunk_}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      events_[i] = std::make_unique<c10::Event>(device.type());
    }
  }

  // Returns a device tensor holding the entry's data, in the file's dtype. It
  // is allocated in that dtype and shape and filled through a byte view: a
  // tensor returned as a view of a byte buffer would keep that buffer alive as
  // its autograd base even after the trainer moves the parameter into its flat
  // buffer (Tensor::set_data), holding a second copy of every weight.
  at::Tensor upload(const SafetensorsFile& file, const SafetensorsEntry& e) {
    const int64_t n = static_cast<int64_t>(e.num_bytes());
    at::Tensor out = at::empty(e.shape, at::TensorOptions().dtype(e.dtype).device(device_));
    const at::Tensor raw = out.reshape({-1}).view(at::kByte);
    const c10::Stream stream = guard_.getStream(device_);
    for (int64_t off = 0; off < n; off += chunk_) {
      const int64_t len = std::min(chunk_, n - off);
      const int k = next_;
      next_ ^= 1;
      events_[k]->synchronize();  // the previous copy out of this buffer is done
      file.copy_bytes(e, off, len, buffers_[k].data_ptr(), reader_);
      raw.narrow(0, off, len).copy_(buffers_[k].narrow(0, 0, len), /*non_blocking=*/true);
      events_[k]->record(stream);
    }
    return out;
  }

  void finish() {
    for (auto& ev : events_) ev->synchronize();
  }

 private:
  at::Device device_;
  int64_t chunk_;
  ByteReader reader_;
  c10::impl::VirtualGuardImpl guard_;
  at::Tensor buffers_[2];
  std::unique_ptr<c10::Event> events_[2];
  int next_ = 0;
};

// A 4-bit checkpoint's projections: their parts, gathered as they arrive in file
// order; each projection goes to LoadOptions::keep_quantized once all are read.
class QuantizedParts {
 public:
  QuantizedParts(const ModelConfig& config, at::ScalarType dtype, const LoadOptions& options)
      : shapes_(expected_parameter_shapes(config)), dtype_(dtype), options_(options) {}

  // `part`: nf4_part_of the tensor's name.
  void take(const std::pair<std::string, std::string>& part, at::Tensor t, TensorMap& out) {
    const auto& [weight, suffix] = part;
    auto& parts = pending_[weight];
    parts.emplace(suffix, std::move(t));
    if (parts.size() < kNf4CheckpointParts) return;
    out.emplace(weight, options_.keep_quantized(weight, nf4_from_checkpoint(weight, parts, shapes_.at(weight), dtype_)));
    pending_.erase(weight);
  }

 private:
  std::map<std::string, std::vector<int64_t>> shapes_;
  at::ScalarType dtype_;
  const LoadOptions& options_;
  std::map<std::string, std::map<std::string, at::Tensor>> pending_;
};

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

TensorMap load_pretrained_weights(const fs::path& model_dir, const ModelConfig& config, at::ScalarType dtype,
                                  at::Device device) {
  return load_pretrained_weights(model_dir, config, dtype, device, LoadOptions{});
}

TensorMap load_pretrained_weights(const fs::path& model_dir, const ModelConfig& config, at::ScalarType dtype,
                                  at::Device device, const LoadOptions& options) {
  dtype_name(dtype);  // rejects non-model dtypes early
  if (config.bnb_nf4 && !options.keep_quantized)
    throw std::runtime_error(model_dir.string() + ": a 4-bit checkpoint (bitsandbytes NF4, quantization_config): its "
                             "projections stay 4-bit and frozen, so only adapters train on it: set adapter.type: "
                             "qlora, or use the original bf16/fp32 checkpoint");
  OpenCheckpoint ck = open_checkpoint(model_dir);
  check_against_config(ck, config, model_dir);
  for (const auto& f : ck.files) f->advise_sequential();

  // Read in file/offset order so the disk sees sequential reads.
  std::vector<std::pair<const SafetensorsFile*, const SafetensorsEntry*>> order;
  const auto expected = expected_checkpoint_tensors(config);
  for (const auto& [name, loc] : ck.tensors)
    if (expected.count(name)) order.push_back(loc);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first->path() < b.first->path() : a.second->begin < b.second->begin;
  });

  TensorMap out;
  std::optional<QuantizedParts> parts;
  if (config.bnb_nf4) parts.emplace(config, dtype, options);
  auto part_of = [&](const std::string& name) { return parts ? nf4_part_of(name) : std::nullopt; };
  if (device.is_cpu()) {
    for (const auto& [file, e] : order) {
      const auto part = part_of(e->name);
      const bool raw = part.has_value();  // kept as stored
      at::Tensor dst = at::empty(e->shape, at::TensorOptions().dtype(raw ? e->dtype : dtype));
      if (raw || e->dtype == dtype) {
        file->copy_bytes(*e, 0, e->num_bytes(), dst.data_ptr(), options.reader);
      } else {
        dst.copy_(file->view(*e));  // one pass from the mapping, converting on the way
      }
      if (raw) {
        parts->take(*part, std::move(dst), out);
        continue;
      }
      out.emplace(e->name, options.keep ? options.keep(e->name, dst) : std::move(dst));
    }
    return out;
  }
  PinnedUploader uploader(device, options);
  for (const auto& [file, e] : order) {
    at::Tensor t = uploader.upload(*file, *e);
    if (const auto part = part_of(e->name)) {
      parts->take(*part, std::move(t), out);
      continue;
    }
    at::Tensor converted = t.scalar_type() == dtype ? t : t.to(dtype);  // converts on the device
    out.emplace(e->name, options.keep ? options.keep(e->name, converted) : std::move(converted));
  }
  uploader.finish();
  return out;
}

void save_pretrained(const fs::path& dir, const ModelConfig& config, const TensorMap& params, at::ScalarType dtype,
                     int64_t max_shard_bytes) {
  if (max_shard_bytes <= 0) throw std::invalid_argument("save_pretrained: max_shard_bytes must be positive");
  const std::string dtype_str = dtype_name(dtype);

  // The parameters must be exactly the model's (lm_head may be present when tied).
  const auto expected = parameter_layout(config);
  std::vector<std::string> missing, unexpected, problems;
  std::set<std::string> expected_names;
  for (const ParameterInfo& p : expected) {
    expected_names.insert(p.name);
    auto it = params.find(p.name);
    if (it == params.end()) {
      missing.push_back(p.name);
    } else if (it->second.sizes().vec() != p.shape) {
      problems.push_back("'" + p.name + "' has shape " + c10::str(at::IntArrayRef(it->second.sizes())) + ", expected " +
                         c10::str(at::IntArrayRef(p.shape)));
    }
  }
  for (const auto& [name, t] : params)
    if (!expected_names.count(name) && !is_ignorable_checkpoint_tensor(name, config)) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !problems.empty()) {
    std::string msg = dir.string() + ": cannot save: the parameters do not match the config (" +
                      config_summary(config) + ")";
    if (!missing.empty()) msg += "\n  missing tensors: " + name_list(missing);
    if (!unexpected.empty()) msg += "\n  unexpected tensors: " + name_list(unexpected);
    for (const auto& p : problems) msg += "\n  " + p;
    throw std::runtime_error(msg);
  }

  // Fill shards in model order; a tensor larger than the limit gets its own.
  const int64_t item = c10::elementSize(dtype);
  std::vector<std::vector<std::string>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0, total_params = 0;
  for (const ParameterInfo& p : expected) {
    const int64_t numel = p.numel();
    const int64_t bytes = numel * item;
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(p.name);
    shard_bytes += bytes;
    total_bytes += bytes;
    total_params += numel;
  }

  const fs::path target = common::without_trailing_slash(fs::absolute(dir));
  fs::create_directories(target.parent_path());
  common::remove_stale_siblings(target);  // leftovers of saves killed midway
  const fs::path tmp = common::staging_path(target);
  fs::create_directories(tmp);
  try {
    ModelConfig saved = config;
    saved.dtype = dtype_str;
    common::write_file_atomically(tmp / "config.json", model_config_to_json(saved).dump(2) + "\n");

    json weight_map = json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string file = shards.size() == 1 ? kSingleFile : shard_name(i, shards.size());
      TensorMap shard;  // converted one shard at a time to bound host memory
      for (const std::string& name : shards[i]) {
        shard.emplace(name, params.at(name).detach().to(at::kCPU, dtype).contiguous());
        weight_map[name] = file;
      }
      write_safetensors(tmp / file, shard, {{"format", "pt"}});
    }
    if (shards.size() > 1) {
      json index = {{"metadata", {{"total_size", total_bytes}, {"total_parameters", total_params}}},
                    {"weight_map", weight_map}};
      common::write_file_atomically(tmp / kIndexFile, index.dump(2) + "\n");
    }
    common::replace_folder(tmp, target);
  } catch (...) {
    common::remove_tree(tmp);
    throw;
  }
}

}  // namespace fptrain::models
