#include "common/files.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

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

fs::path without_trailing_slash(const fs::path& path) {
  fs::path p = path.lexically_normal();
  if (p.filename().empty() && p.has_parent_path()) p = p.parent_path();
  return p;
}

void refuse_catastrophic_removal(const fs::path& path) {
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec).lexically_normal();
  int named = 0;
  for (const auto& part : abs) named += !part.empty() && part != abs.root_path() && part != "/";
  const bool checkout = fs::exists(abs / ".git", ec);
  if (named < 2 || checkout)
    throw std::logic_error(path.string() + ": refusing to delete " +
                           (checkout ? std::string("a source checkout") : std::string("a top-level folder")) +
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
