// Byte counts as people read them: the one home of GiB conversions and text.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace fptrain::common {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

inline double gib(double bytes) { return bytes / kBytesPerGiB; }

// "12.34 GiB" from 1 GiB up, else "56.7 MiB".
inline std::string gib_text(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= kBytesPerGiB) std::snprintf(buf, sizeof buf, "%.2f GiB", gib(b));
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
  return buf;
}

}  // namespace fptrain::common
