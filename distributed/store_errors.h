// What a failed store operation says, in one line.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <string>

namespace fptrain::distributed {

// The message without LibTorch's backtrace, cut to one line.
inline std::string first_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string m = c10_error ? c10_error->what_without_backtrace() : e.what();
  const size_t nl = m.find('\n');
  if (nl != std::string::npos) m.resize(nl);
  if (m.size() > 300) m = m.substr(0, 300) + "...";
  return m;
}

// The connection to the store broke (its host is gone), as opposed to a wait that timed out.
inline bool store_connection_lost(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  const std::string m = c10_error ? c10_error->what_without_backtrace() : e.what();
  for (const char* sign : {"Connection reset", "Broken pipe", "Connection refused", "Connection closed", "failed to recv"})
    if (m.find(sign) != std::string::npos) return true;
  return false;
}

}  // namespace fptrain::distributed
