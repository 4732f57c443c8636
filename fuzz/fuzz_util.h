// What the fuzz harnesses share: the input as text, a scratch folder of this
// process for readers that take a folder, and splitting one input into several
// files at marker lines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>

#include <unistd.h>

#include "common/files.h"

namespace fptrain::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A folder of this process under $TMPDIR (else /tmp), removed at exit. The
// path is never destroyed: the exit handler that removes the folder runs after
// function-local statics registered later are gone.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path* const dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto* d = new std::filesystem::path(std::filesystem::path(tmp && *tmp ? tmp : "/tmp") /
                                        ("fptrain-fuzz-" + std::to_string(::getpid())));
    common::remove_tree(*d);
    std::filesystem::create_directories(*d);
    std::atexit([] { common::remove_tree(scratch_dir()); });
    return d;
  }();
  return *dir;
}

// Writes `bytes` to `path`, or removes the file when `bytes` is absent.
inline void put_file(const std::filesystem::path& path, const std::string* bytes) {
  if (!bytes) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return;
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
}

// Splits an input into files: the lines before the first marker line belong
// to `first`; a line "#file:<name>" starts the file <name>. The seed corpora
// are written this way, so that mutations keep exercising several files. The
// caller writes only the names it knows.
inline std::map<std::string, std::string> split_files(std::string_view input, const std::string& first) {
  static constexpr std::string_view kMarker = "#file:";
  std::map<std::string, std::string> files;
  std::string* current = &files[first];
  size_t pos = 0;
  while (pos < input.size()) {
    const size_t eol = input.find('\n', pos);
    const size_t end = eol == std::string_view::npos ? input.size() : eol + 1;
    const std::string_view line = input.substr(pos, end - pos);
    if (line.substr(0, kMarker.size()) == kMarker) {
      std::string_view name = line.substr(kMarker.size());
      if (!name.empty() && name.back() == '\n') name.remove_suffix(1);
      current = &files[std::string(name)];
    } else {
      current->append(line);
    }
    pos = end;
  }
  return files;
}

}  // namespace fptrain::fuzz
