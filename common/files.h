// The one home for filesystem operations whose failure modes matter: deleting
// trees, and replacing files and folders so that a reader (or a process killed
// midway) only ever sees the old content or the complete new one.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace fptrain::common {

// strerror(errno) as a string.
std::string errno_text();

// Removes `path` (a file, or a directory recursively; symlinks are not
// followed). A missing path is not an error; any other failure throws
// std::runtime_error naming the path. std::filesystem::remove_all is avoided on
// purpose: in programs linked with LibTorch the symbol can resolve into
// libtorch.so's own copy of libstdc++'s filesystem code, which crashes on
// nested directories.
// It refuses (std::logic_error) what no caller of ours means to delete and a
// wrong path would: "/" and folders directly under it, and a folder holding a
// ".git" (a source checkout) — on 2026-11-25 a test run removed all of /work.
void remove_tree(const std::filesystem::path& path);

// Throws std::logic_error when `path` is one remove_tree refuses to delete
// (remove_tree_atomically and replace_folder check their targets too).
void refuse_catastrophic_removal(const std::filesystem::path& path);

// Removes a directory so that it never exists half-deleted under its own name:
// it is first renamed to a hidden sibling ".<name>.deleting.<pid>", then
// removed. A kill in between leaves only that hidden folder, which
// remove_stale_siblings() (or the next call here) cleans up.
void remove_tree_atomically(const std::filesystem::path& dir);

// Removes the hidden siblings of `target` left by killed writers and deleters
// (".<name>.tmp.*", ".<name>.old.*", ".<name>.deleting.*").
void remove_stale_siblings(const std::filesystem::path& target);

// A hidden sibling of `target` to build new content in: ".<name>.tmp.<pid>".
std::filesystem::path staging_path(const std::filesystem::path& target);

// Writes a file atomically: `write` fills the open descriptor of a staging file
// in the same folder, which is then fsynced and renamed over `path`. On any
// failure the staging file is removed and `path` is left as it was.
void write_file_atomically(const std::filesystem::path& path, const std::function<void(int fd)>& write);
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

// Writes all of `size` bytes to `fd`; throws naming `what` (e.g. the file).
void write_all(int fd, const void* data, size_t size, const std::string& what);

// Moves the finished folder `staged` to `target`, replacing whatever `target`
// held, so that `target` always names either the old or the complete new
// folder: renameat2(RENAME_EXCHANGE) where the filesystem has it, else the old
// folder is moved aside first and removed once the new one is in place.
// It refuses a `target` that remove_tree would refuse to delete.
void replace_folder(const std::filesystem::path& staged, const std::filesystem::path& target);

// A path with a trailing slash normalised away ("out/" names "out").
std::filesystem::path without_trailing_slash(const std::filesystem::path& path);

}  // namespace fptrain::common
