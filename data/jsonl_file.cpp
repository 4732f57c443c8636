#include "data/jsonl_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace fptrain::data {
namespace {

bool is_blank(const char* s, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
  return true;
}

std::runtime_error io_error(const std::filesystem::path& path, const std::string& what) {
  return std::runtime_error(path.string() + ": " + what + ": " + std::strerror(errno));
}

}  // namespace

JsonlFile::JsonlFile(std::filesystem::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw io_error(path_, "cannot open data file");
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw io_error(path_, "cannot stat");
  file_size_ = static_cast<uint64_t>(st.st_size);

  // One streaming pass in 1 MiB chunks; a line may span chunks, so only its
  // start offset and whether it is blank so far are carried over.
  std::vector<char> buf(1 << 20);
  uint64_t chunk_start = 0, line_start = 0;
  uint32_t line_number = 1;
  bool blank_so_far = true;
  auto finish_line = [&](uint64_t end) {  // end: offset of '\n' or EOF
    uint64_t length = end - line_start;
    if (blank_so_far) {
      if (length > 0 || end < file_size_) ++blank_lines_;
    } else {
      if (length >= (1ull << 32)) throw std::runtime_error(path_.string() + ":" +
                                                           std::to_string(line_number) +
                                                           ": line longer than 4 GiB");
      lines_.push_back({line_start, static_cast<uint32_t>(length), line_number});
    }
    ++line_number;
    line_start = end + 1;
    blank_so_far = true;
  };
  while (true) {
    const ssize_t got = ::read(fd_, buf.data(), buf.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      throw io_error(path_, "read failed");
    }
    if (got == 0) break;
    const char* p = buf.data();
    const char* end = p + got;
    while (p < end) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
      const char* stop = nl ? nl : end;
      if (blank_so_far && !is_blank(p, stop - p)) blank_so_far = false;
      if (!nl) break;
      finish_line(chunk_start + (nl - buf.data()));
      p = nl + 1;
    }
    chunk_start += got;
  }
  if (line_start < chunk_start) finish_line(chunk_start);
  file_size_ = chunk_start;
}

JsonlFile::~JsonlFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string JsonlFile::read_line(size_t i) const {
  const Line& line = lines_.at(i);
  std::string text(line.length, '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t got = ::pread(fd_, text.data() + done, text.size() - done, line.offset + done);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw io_error(path_, "read of line " + std::to_string(line.line_number) + " failed");
    }
    if (got == 0)
      throw std::runtime_error(path_.string() + ":" + std::to_string(line.line_number) +
                               ": file shrank while training (it must not change during a run)");
    done += static_cast<size_t>(got);
  }
  if (!text.empty() && text.back() == '\r') text.pop_back();
  return text;
}

}  // namespace fptrain::data
