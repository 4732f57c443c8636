// Small string tests the standard library gains only in C++20: the one home.
#pragma once

#include <string_view>

namespace fptrain::common {

inline bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace fptrain::common
