// An open-addressing map from token strings to ids that looks up string_views
// without allocating (the BPE hot path looks up every character of every word).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace fptrain::tokenizer {

class StringIdMap {
 public:
  // `strings[id]` is the token of id (empty strings are not indexed). The
  // vector must outlive the map.
  void build(const std::vector<std::string>* strings) {
    strings_ = strings;
    size_t capacity = 16;
    while (capacity < strings->size() * 2) capacity <<= 1;
    slots_.assign(capacity, -1);
    mask_ = capacity - 1;
    for (size_t id = 0; id < strings->size(); ++id) {
      const std::string& s = (*strings)[id];
      if (s.empty()) continue;
      size_t i = hash(s) & mask_;
      while (slots_[i] >= 0 && (*strings)[slots_[i]] != s) i = (i + 1) & mask_;
      slots_[i] = static_cast<int32_t>(id);  // a duplicate string keeps the last id
    }
  }

  // The id of `s`, or -1.
  int32_t find(std::string_view s) const {
    if (slots_.empty()) return -1;
    size_t i = hash(s) & mask_;
    while (true) {
      const int32_t id = slots_[i];
      if (id < 0) return -1;
      if ((*strings_)[id] == s) return id;
      i = (i + 1) & mask_;
    }
  }

 private:
  static size_t hash(std::string_view s) { return std::hash<std::string_view>{}(s); }
  const std::vector<std::string>* strings_ = nullptr;
  std::vector<int32_t> slots_;
  size_t mask_ = 0;
};

}  // namespace fptrain::tokenizer
