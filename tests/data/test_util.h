// Helpers shared by the data tests: temporary JSONL files, fixtures, draining a pipeline.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/data_pipeline.h"
#include "tests/data/test_tokenizer.h"

namespace fptrain::data::testing {

inline std::filesystem::path fixture(const std::string& name) {
  return std::filesystem::path(FPTRAIN_FIXTURE_DIR) / name;
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing fixture " + path.string());
  return nlohmann::json::parse(in);
}

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("fptrain_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::filesystem::path write(const std::string& name, const std::string& content) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  std::filesystem::path write_lines(const std::string& name, const std::vector<std::string>& lines) const {
    std::string all;
    for (const auto& l : lines) all += l + "\n";
    return write(name, all);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline DataOptions options_for(const std::vector<std::filesystem::path>& files) {
  DataOptions o;
  for (const auto& f : files) o.files.push_back({f, 1.0, ExampleFormat::kAuto});
  o.shuffle = false;
  o.workers = 0;
  o.max_zero_supervised_fraction = 1.0;
  return o;
}

inline std::shared_ptr<const tokenizer::Tokenizer> byte_tokenizer() { return std::make_shared<ByteTokenizer>(); }

inline std::vector<TrainStep> drain(DataPipeline& p, size_t limit = SIZE_MAX) {
  std::vector<TrainStep> steps;
  while (steps.size() < limit) {
    auto s = p.next_step();
    if (!s) break;
    steps.push_back(std::move(*s));
  }
  return steps;
}

inline std::vector<PackedBatch> all_micro_batches(const std::vector<TrainStep>& steps) {
  std::vector<PackedBatch> out;
  for (const auto& s : steps)
    for (const auto& mb : s.micro_batches) out.push_back(mb);
  return out;
}

inline std::string json_line(const nlohmann::json& j) { return j.dump(); }

// What the pipeline over `o` (with the byte tokenizer) throws when drained; "" if nothing.
inline std::string pipeline_error(const DataOptions& o) {
  try {
    DataPipeline p(o, byte_tokenizer());
    drain(p);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace fptrain::data::testing
