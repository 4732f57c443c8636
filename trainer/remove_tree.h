// Deletes a directory tree. std::filesystem::remove_all is avoided on purpose:
// in programs linked with LibTorch the symbol can resolve into libtorch.so's
// own copy of libstdc++'s filesystem code, which crashes on nested directories.
#pragma once

#include <filesystem>

namespace fptrain::trainer {

// Removes `path` (file or directory, recursively; symlinks are not followed).
// A missing path is not an error; other failures throw std::runtime_error.
void remove_tree(const std::filesystem::path& path);

}  // namespace fptrain::trainer
