// One JSONL file, read line by line and never held in memory: a first pass
// streams it once to record where each non-blank line starts (16 bytes per
// line); lines are then read on demand with pread, from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fptrain::data {

class JsonlFile {
 public:
  explicit JsonlFile(std::filesystem::path path);  // throws naming the file
  ~JsonlFile();
  JsonlFile(const JsonlFile&) = delete;
  JsonlFile& operator=(const JsonlFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  // Non-blank lines; blank ones (whitespace only) are not examples.
  size_t num_lines() const { return lines_.size(); }
  int64_t blank_lines() const { return blank_lines_; }

  // Text of non-blank line i (without the newline or a trailing \r).
  std::string read_line(size_t i) const;
  // 1-based line number in the file, for messages.
  int64_t line_number(size_t i) const { return lines_[i].line_number; }

 private:
  struct Line {
    uint64_t offset;
    uint32_t length;
    uint32_t line_number;
  };
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  int64_t blank_lines_ = 0;
  std::vector<Line> lines_;
};

}  // namespace fptrain::data
