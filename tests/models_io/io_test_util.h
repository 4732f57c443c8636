// Shared helpers of the model I/O tests: fixture paths, JSON, scratch folders,
// and running the Python reference checks.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fptrain::models::testing {

namespace fs = std::filesystem;

inline fs::path fixture(const std::string& name) { return fs::path(FPTRAIN_FIXTURE_DIR) / name; }

inline nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string() + " (run tests/models_io/make_fixtures.py)");
  return nlohmann::json::parse(in);
}

inline void write_json(const fs::path& path, const nlohmann::json& doc) {
  std::ofstream(path) << doc.dump(2);
}

inline std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// std::filesystem's remove_all crashes when linked with the torch wheel (its
// libtorch.so exports a broken copy), so folders are removed with nftw.
inline void remove_tree(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  ::nftw(
      path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p) == 0 ? 0 : -1; },
      16, FTW_DEPTH | FTW_PHYS);
}

// A fresh folder under the build tree, removed when the test ends.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::path(FPTRAIN_FIXTURE_DIR) / "scratch" /
            (std::string(info->test_suite_name()) + "." + info->name() + "." + tag + "." +
             std::to_string(::getpid()));
    remove_tree(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    if (!::testing::Test::HasFailure()) remove_tree(path_);  // keep evidence on failure
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

// Runs a Python script from this folder with FPTRAIN_PYTHON; returns its exit
// status (0 = the reference check passed).
inline int run_python(const std::string& script, const std::string& args) {
  const std::string cmd = std::string("\"") + FPTRAIN_PYTHON + "\" \"" + FPTRAIN_SOURCE_DIR +
                          "/tests/models_io/" + script + "\" " + args;
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

inline std::string quoted(const fs::path& p) { return "\"" + p.string() + "\""; }

// Asserts that `fn` throws an exception of type E whose message contains every
// string of `needles`.
template <typename E = std::runtime_error, typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception mentioning '" << *needles.begin() << "'";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

}  // namespace fptrain::models::testing
