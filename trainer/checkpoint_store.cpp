#include "trainer/checkpoint_store.h"

#include "models/checkpoint.h"
#include "models/safetensors.h"

#include "common/files.h"
#include "common/json_input.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <stdexcept>

namespace fptrain::trainer {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "step-";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kTensorsFile = "training_state.safetensors";
constexpr int kFormatVersion = 1;

const std::vector<std::string> kTokenizerFiles = {"tokenizer.json", "tokenizer.model", "tokenizer_config.json",
                                                  "special_tokens_map.json", "generation_config.json",
                                                  "added_tokens.json", "chat_template.jinja"};

std::optional<int64_t> step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  const std::string digits = name.substr(std::char_traits<char>::length(kPrefix));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::stoll(digits);
}

}  // namespace

nlohmann::json RunCounters::to_json() const {
  return {{"tokens", tokens}, {"supervised_tokens", supervised_tokens}, {"train_seconds", train_seconds}};
}

RunCounters RunCounters::from_json(const nlohmann::json& j) {
  RunCounters c;
  if (!j.is_object()) throw std::runtime_error("counters: expected an object, got " + common::json_excerpt(j));
  auto number = [&](const char* key, bool integer) -> const nlohmann::json* {
    auto it = j.find(key);
    if (it == j.end()) return nullptr;
    if (integer ? !it->is_number_integer() : !it->is_number())
      throw std::runtime_error(std::string("counters.") + key + ": expected " + (integer ? "an integer" : "a number") +
                               ", got " + common::json_excerpt(*it));
    return &*it;
  };
  if (auto v = number("tokens", true)) c.tokens = v->get<int64_t>();
  if (auto v = number("supervised_tokens", true)) c.supervised_tokens = v->get<int64_t>();
  if (auto v = number("train_seconds", false)) c.train_seconds = v->get<double>();
  return c;
}

fs::path checkpoints_dir(const fs::path& output_dir) { return output_dir / "checkpoints"; }

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%s%08lld", kPrefix, static_cast<long long>(step));
  return buf;
}

std::vector<fs::path> list_checkpoints(const fs::path& output_dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  const fs::path dir = checkpoints_dir(output_dir);
  if (!fs::is_directory(dir)) return {};
  for (const auto& e : fs::directory_iterator(dir)) {
    auto step = step_of(e.path());
    if (step && fs::is_regular_file(e.path() / kStateFile)) found.emplace_back(*step, e.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::optional<fs::path> latest_checkpoint(const fs::path& output_dir) {
  auto all = list_checkpoints(output_dir);
  if (all.empty()) return std::nullopt;
  return all.back();
}

std::string shard_file_name(int rank) { return "training_state.rank" + std::to_string(rank) + ".safetensors"; }

fs::path prepare_checkpoint(const fs::path& output_dir, int64_t step) {
  const fs::path root = checkpoints_dir(output_dir);
  fs::create_directories(root);
  const fs::path final_dir = root / checkpoint_name(step);
  common::remove_stale_siblings(final_dir);
  const fs::path staging = common::staging_path(final_dir);  // hidden: never listed as a checkpoint
  fs::create_directories(staging);
  return staging;
}

void write_shard_state(const fs::path& staging, int rank, const TrainingState& state) {
  models::TensorMap tensors;
  for (const auto& [k, t] : state.optimizer) tensors["optimizer." + k] = t;
  for (const auto& [k, t] : state.rng) tensors["rng." + k] = t;
  models::write_safetensors(staging / shard_file_name(rank), tensors,
                            {{"fptrain_step", std::to_string(state.step)}, {"fptrain_rank", std::to_string(rank)}});
}

void copy_tokenizer_files(const fs::path& from, const fs::path& to) {
  for (const auto& f : kTokenizerFiles)
    if (fs::is_regular_file(from / f)) fs::copy_file(from / f, to / f, fs::copy_options::overwrite_existing);
}

ModelWriter hf_model_writer(const models::ModelConfig& config, const models::TensorMap& params,
                            at::ScalarType model_dtype) {
  return [&config, &params, model_dtype](const fs::path& dir) {
    // save_pretrained replaces its target folder as a whole, and `dir` may already hold the
    // ranks' shard files: it writes into a subfolder whose files move up.
    const fs::path model_dir = dir / "model";
    models::save_pretrained(model_dir, config, params, model_dtype);
    for (const auto& e : fs::directory_iterator(model_dir)) fs::rename(e.path(), dir / e.path().filename());
    fs::remove(model_dir);
  };
}

fs::path commit_checkpoint(const fs::path& staging, const fs::path& output_dir, const ModelWriter& write_model,
                           const fs::path& tokenizer_dir, const TrainingState& state) {
  const fs::path final_dir = checkpoints_dir(output_dir) / checkpoint_name(state.step);
  try {
    // The model (or its adapters), then the tokenizer files and the training part.
    write_model(staging);
    copy_tokenizer_files(tokenizer_dir, staging);
    if (!state.optimizer.empty()) {
      models::TensorMap tensors;
      for (const auto& [k, t] : state.optimizer) tensors["optimizer." + k] = t;
      for (const auto& [k, t] : state.rng) tensors["rng." + k] = t;
      models::write_safetensors(staging / kTensorsFile, tensors, {{"fptrain_step", std::to_string(state.step)}});
    }
    common::write_file_atomically(staging / "config.yaml", state.config_yaml);
    nlohmann::json meta = {{"format_version", kFormatVersion},
                           {"step", state.step},
                           {"total_steps", state.total_steps},
                           {"optimizer_shards", state.optimizer_shards},
                           {"world_size", state.world_size},
                           {"data_cursor", nlohmann::json::parse(state.data_cursor)},
                           {"counters", state.counters.to_json()}};
    common::write_file_atomically(staging / kStateFile, meta.dump(2));
    common::replace_folder(staging, final_dir);
  } catch (...) {
    common::remove_tree(staging);
    throw;
  }
  return final_dir;
}

fs::path save_checkpoint(const fs::path& output_dir, const ModelWriter& write_model, const fs::path& tokenizer_dir,
                         const TrainingState& state) {
  return commit_checkpoint(prepare_checkpoint(output_dir, state.step), output_dir, write_model, tokenizer_dir, state);
}

TrainingState load_training_state(const fs::path& dir, int rank, int world_size) {
  const fs::path meta_path = dir / kStateFile;
  std::ifstream in(meta_path, std::ios::binary);
  if (!in) throw std::runtime_error(meta_path.string() + ": missing; not a complete fptrain checkpoint");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  nlohmann::json meta;
  try {
    meta = common::parse_json(text, meta_path.string());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());  // "<file>: invalid JSON: ..."
  }
  TrainingState s;
  // A field of trainer_state.json; errors name the file and the key.
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!meta.is_object() || !meta.contains(key))
      throw std::runtime_error(meta_path.string() + ": key '" + key + "' is missing");
    return meta.at(key);
  };
  auto integer = [&](const char* key) {
    const nlohmann::json& v = field(key);
    if (!v.is_number_integer())
      throw std::runtime_error(meta_path.string() + ": key '" + key + "': expected an integer, got " +
                               common::json_excerpt(v));
    return v.get<int64_t>();
  };
  if (integer("format_version") != kFormatVersion)
    throw std::runtime_error(meta_path.string() + ": unsupported format_version " +
                             common::json_excerpt(field("format_version")));
  s.step = integer("step");
  s.total_steps = integer("total_steps");
  s.data_cursor = field("data_cursor").dump();
  try {
    s.counters = RunCounters::from_json(meta.value("counters", nlohmann::json::object()));
  } catch (const std::exception& e) {
    throw std::runtime_error(meta_path.string() + ": " + e.what());
  }
  std::ifstream yaml(dir / "config.yaml");
  if (yaml) s.config_yaml.assign(std::istreambuf_iterator<char>(yaml), {});
  if (meta.contains("optimizer_shards")) s.optimizer_shards = integer("optimizer_shards");
  if (meta.contains("world_size")) s.world_size = integer("world_size");
  if (s.optimizer_shards < 1)
    throw std::runtime_error(meta_path.string() + ": key 'optimizer_shards' must be >= 1");
  std::vector<fs::path> files;
  if (s.optimizer_shards == 1) {
    files.push_back(dir / kTensorsFile);
  } else if (s.optimizer_shards == world_size) {
    files.push_back(dir / shard_file_name(rank));
  } else {
    for (int r = 0; r < s.optimizer_shards; ++r) files.push_back(dir / shard_file_name(r));
  }
  s.tensors_file = files.front();
  for (const fs::path& f : files) {
    if (!fs::is_regular_file(f))
      throw std::runtime_error(f.string() + ": missing; the checkpoint is incomplete (its optimizer "
                               "state and RNG states are needed to resume)");
    const bool own_rng = f == files.front();  // this rank's (same sharding), or rank 0's / the only file
    // Views of the mapped file, not copies: resharding opens every rank's file but copies out only
    // the pieces this rank owns, so a rank never holds the whole optimizer state in host memory.
    const models::SafetensorsFile file(f);
    for (const models::SafetensorsEntry& e : file.entries()) {
      if (e.name.rfind("optimizer.", 0) == 0) s.optimizer.emplace_back(e.name.substr(10), file.view(e));
      else if (e.name.rfind("rng.", 0) == 0 && own_rng) s.rng.emplace_back(e.name.substr(4), file.view(e));
    }
  }
  if (s.optimizer.empty())
    throw std::runtime_error(s.tensors_file.string() + ": holds no optimizer state (no 'optimizer.*' tensors); "
                             "the checkpoint is incomplete or was not written by fptrain");
  return s;
}

void prune_checkpoints(const fs::path& output_dir, int64_t keep_last) {
  const fs::path root = checkpoints_dir(output_dir);
  if (!fs::is_directory(root)) return;
  // Moved aside before deletion: a folder named step-* is always complete.
  auto all = list_checkpoints(output_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i) common::remove_tree_atomically(all[i]);
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".step-", 0) == 0) common::remove_tree(e.path());  // leftovers of killed saves and deletions
  }
}

std::vector<std::pair<std::string, at::Tensor>> capture_rng_states() {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back("cpu", at::detail::getDefaultCPUGenerator().get_state());
  if (at::hasCUDA()) {
    auto& ctx = at::globalContext();
    for (c10::DeviceIndex i = 0; i < static_cast<c10::DeviceIndex>(at::getNumGPUs()); ++i)
      out.emplace_back("cuda:" + std::to_string(i), ctx.defaultGenerator(at::Device(at::kCUDA, i)).get_state());
  }
  return out;
}

void restore_rng_states(const std::vector<std::pair<std::string, at::Tensor>>& states) {
  auto& ctx = at::globalContext();
  for (const auto& [name, state] : states) {
    if (name == "cpu") {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(state);
    } else if (name.rfind("cuda:", 0) == 0 && at::hasCUDA()) {
      const int idx = std::stoi(name.substr(5));
      if (idx < static_cast<int>(at::getNumGPUs()))
      {
        at::Generator gen = ctx.defaultGenerator(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(idx)));
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(state);
      }
    }
  }
}

std::optional<fs::path> resolve_resume(const TrainConfig& config) {
  if (config.resume == "none") {
    // Starting over next to older checkpoints would mix two runs (and pruning would drop the new ones).
    if (auto latest = latest_checkpoint(config.output_dir))
      throw std::invalid_argument(config.source + ": resume: none, but " + config.output_dir +
                                  " holds checkpoints (latest " + latest->filename().string() +
                                  "); use resume: auto to continue them, or another output_dir");
    return std::nullopt;
  }
  if (config.resume == "auto") return latest_checkpoint(config.output_dir);
  const fs::path p = config.resume;
  if (!fs::is_directory(p))
    throw std::invalid_argument(config.source + ": resume: '" + config.resume +
                                "' is not auto, none or an existing checkpoint folder");
  return p;
}

}  // namespace fptrain::trainer
