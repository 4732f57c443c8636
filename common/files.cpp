#include "common/files.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace fptrain::common {
namespace fs = std::filesystem;
namespace {

int remove_entry(const char* path, const struct stat*, int type, struct FTW*) {
  const int rc = (type == FTW_DP) ? ::rmdir(path) : ::unlink(path);
  return rc == 0 || errno == ENOENT ? 0 : -1;
}

std::string hidden_sibling(const fs::path& target, const std::string& kind) {
  return "." + target.filename().string() + "." + kind + "." + std::to_string(::getpid());
}

void sync_folder(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // durability is best effort here; the rename itself succeeded
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string errno_text() { return std::strerror(errno); }

// String operations only (as refuse_catastrophic_removal): the result names
// what deletions and replacements act on.
fs::path without_trailing_slash(const fs::path& path) {
  std::string text = path.string();
  while (text.size() > 1 && text.back() == '/') text.pop_back();
  return fs::path(text);
}

// Plain strings and POSIX calls only: in programs linked with LibTorch some
// std::filesystem operations resolve into libtorch.so's copy and misbehave
// (see remove_tree).
void refuse_catastrophic_removal(const fs::path& path) {
  std::string text = path.string();
  if (text.empty() || text[0] != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd) == nullptr) return;  // no working directory to resolve against: not judged
    text = std::string(cwd) + "/" + text;
  }
  std::vector<std::string> parts;  // the path's components with "." and ".." resolved lexically
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find('/', start), text.size());
    const std::string part = text.substr(start, end - start);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    start = end + 1;
  }
  std::string normal;
  for (const auto& part : parts) normal += "/" + part;
  struct stat st {};
  const bool checkout = ::lstat((normal + "/.git").c_str(), &st) == 0;
  if (parts.size() < 2 || checkout)
    throw std::logic_error(path.string() + ": refusing to delete " +
                           std::string(checkout ? "a source checkout" : "a top-level folder") +
                           " (a wrong path reached a deletion)");
}

void remove_tree(const fs::path& path) {
  refuse_catastrophic_removal(path);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // nothing there
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      throw std::runtime_error(path.string() + ": cannot delete: " + errno_text());
    return;
  }
  if (::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
    throw std::runtime_error(path.string() + ": cannot delete: " + errno_text());
}

void remove_tree_atomically(const fs::path& dir) {
  const fs::path target = without_trailing_slash(dir);
  refuse_catastrophic_removal(target);  // before it is moved aside
  struct stat st {};
  if (::lstat(target.c_str(), &st) != 0) return;
  const fs::path doomed = target.parent_path() / hidden_sibling(target, "deleting");
  remove_tree(doomed);
  if (::rename(target.c_str(), doomed.c_str()) != 0)
    throw std::runtime_error(target.string() + ": cannot move aside for deletion: " + errno_text());
  sync_folder(target.parent_path());
  remove_tree(doomed);
}

void remove_stale_siblings(const fs::path& target_in) {
  const fs::path target = without_trailing_slash(target_in);
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) return;
  const std::string stem = "." + target.filename().string() + ".";
  for (const auto& e : fs::directory_iterator(parent)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(stem, 0) != 0) continue;
    const std::string kind = name.substr(stem.size(), name.find('.', stem.size()) - stem.size());
    if (kind == "tmp" || kind == "old" || kind == "deleting") remove_tree(e.path());
  }
}

fs::path staging_path(const fs::path& target_in) {
  const fs::path target = without_trailing_slash(target_in);
  return target.parent_path() / hidden_sibling(target, "tmp");
}

void write_all(int fd, const void* data, size_t size, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(what + ": write failed: " + errno_text());
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void write_file_atomically(const fs::path& path, const std::function<void(int fd)>& write) {
  const fs::path tmp = staging_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(tmp.string() + ": cannot create: " + errno_text());
  try {
    write(fd);
    if (::fsync(fd) != 0) throw std::runtime_error(path.string() + ": fsync failed: " + errno_text());
    if (::close(fd) != 0) throw std::runtime_error(path.string() + ": close failed: " + errno_text());
  } catch (...) {
    ::close(fd);  // harmless if already closed: the descriptor is not reused in between
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw std::runtime_error(path.string() + ": cannot move the finished file into place: " + why);
  }
}

void write_file_atomically(const fs::path& path, std::string_view bytes) {
  write_file_atomically(path, [&](int fd) { write_all(fd, bytes.data(), bytes.size(), path.string()); });
}

void replace_folder(const fs::path& staged, const fs::path& target_in) {
  const fs::path target = without_trailing_slash(target_in);
  refuse_catastrophic_removal(target);  // its previous content is deleted
  struct stat st {};
  if (::lstat(target.c_str(), &st) != 0) {
    if (::rename(staged.c_str(), target.c_str()) != 0) {
      const std::string why = errno_text();
      throw std::runtime_error(target.string() + ": cannot move the new folder into place: " + why);
    }
    sync_folder(target.parent_path());
    return;
  }
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    sync_folder(target.parent_path());
    remove_tree(staged);  // now holds the previous content
    return;
  }
  const fs::path old = target.parent_path() / hidden_sibling(target, "old");
  remove_tree(old);
  if (::rename(target.c_str(), old.c_str()) != 0)
    throw std::runtime_error(target.string() + ": cannot move the previous folder aside: " + errno_text());
  if (::rename(staged.c_str(), target.c_str()) != 0) {
    const std::string why = errno_text();
    ::rename(old.c_str(), target.c_str());
    throw std::runtime_error(target.string() + ": cannot move the new folder into place: " + why);
  }
  sync_folder(target.parent_path());
  remove_tree(old);
}

}  // namespace fptrain::common
