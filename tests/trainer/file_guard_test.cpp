// The deletion helpers every checkpoint, staging folder and test scratch folder
// goes through refuse what a wrong path would make them delete: "/" and the
// folders right under it, and a source checkout (on 2026-11-25 a test run
// removed all of /work, the checkout with it; the cause was not found).
#include "common/files.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

namespace fptrain::common {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("fptrain_file_guard_" + std::to_string(::getpid()) + "_" + name);
}

TEST(FileGuard, TopLevelFoldersAreRefused) {
  for (const char* p : {"/", "/work", "/work/", "/tmp/../work", "/tmp"})
    EXPECT_THROW(remove_tree(p), std::logic_error) << p;
  EXPECT_THROW(replace_folder(scratch("staged"), "/work"), std::logic_error);
  // Checked before anything is moved (a missing path is refused all the same).
  EXPECT_THROW(remove_tree_atomically("/fptrain_no_such_folder"), std::logic_error);
  EXPECT_THROW(remove_tree_atomically("/fptrain_no_such_folder/"), std::logic_error);
}

TEST(FileGuard, ASourceCheckoutIsRefusedAndOrdinaryFoldersGo) {
  const fs::path repo = scratch("repo");
  fs::create_directories(repo / ".git");
  fs::create_directories(repo / "a" / "b");
  std::ofstream(repo / "a" / "b" / "f") << "x";
  EXPECT_THROW(remove_tree(repo), std::logic_error);
  EXPECT_TRUE(fs::exists(repo / "a" / "b" / "f"));
  remove_tree(repo / "a");  // inside a checkout: an ordinary folder
  EXPECT_FALSE(fs::exists(repo / "a"));
  fs::remove(repo / ".git");
  remove_tree(repo);
  EXPECT_FALSE(fs::exists(repo));
}

}  // namespace
}  // namespace fptrain::common
