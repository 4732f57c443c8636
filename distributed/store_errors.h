// What a failed store operation says, in one line.
#pragma once

#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <stdexcept>
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
  std::string m = c10_error ? c10_error->what_without_backtrace() : e.what();
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* sign : {"connection reset", "broken pipe", "connection refused", "connection closed",
                           "connection was likely closed", "failed to recv", "failed to send"})
    if (m.find(sign) != std::string::npos) return true;
  return false;
}

// Runs a store operation of `rank`; a broken connection to the store becomes one
// clear error (rank 0, its host, is gone), other errors lose their backtrace.
template <class F>
auto with_store(int rank, const std::string& what, F&& op) -> decltype(op()) {
  try {
    return op();
  } catch (const std::exception& e) {
    if (store_connection_lost(e))
      throw std::runtime_error("rank " + std::to_string(rank) + ": lost the store (hosted by rank 0 or torchrun's "
                               "agent) during " + what + ": " + first_line(e) + "; rank 0 or its machine is gone");
    if (dynamic_cast<const c10::Error*>(&e)) throw std::runtime_error("rank " + std::to_string(rank) + ": " + what + ": " + first_line(e));
    throw;
  }
}

}  // namespace fptrain::distributed
