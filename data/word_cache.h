// Per-thread caches of word -> ids for the model stage. Each thread owns its
// caches, so lookups take no lock; a cache that reaches its capacity is
// cleared (frequent words come back at once).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fptrain::data {

class WordCache {
 public:
  static constexpr size_t kCapacity = 1 << 16;       // words per thread and model
  static constexpr size_t kMaxWordBytes = 256;       // longer words are not cached

  // A fresh key for one model instance (ids are never reused).
  static uint64_t new_owner() {
    static std::atomic<uint64_t> next{1};
    return next++;
  }

  // This thread's cache for `owner`.
  static WordCache& for_thread(uint64_t owner) {
    thread_local std::unordered_map<uint64_t, WordCache> caches;
    thread_local uint64_t last_owner = 0;
    thread_local WordCache* last = nullptr;
    if (last && last_owner == owner) return *last;
    last = &caches[owner];
    last_owner = owner;
    return *last;
  }

  // Appends the cached ids of `word` to `ids`; false when not cached.
  bool lookup(std::string_view word, std::vector<int32_t>& ids) {
    key_.assign(word.data(), word.size());
    auto it = words_.find(key_);
    if (it == words_.end()) return false;
    ids.insert(ids.end(), it->second.begin(), it->second.end());
    return true;
  }

  // Stores ids[start:] for the word of the last lookup.
  void store(const std::vector<int32_t>& ids, size_t start) {
    if (key_.size() > kMaxWordBytes) return;
    if (words_.size() >= kCapacity) words_.clear();
    words_.emplace(key_, std::vector<int32_t>(ids.begin() + start, ids.end()));
  }

 private:
  std::unordered_map<std::string, std::vector<int32_t>> words_;
  std::string key_;
};

}  // namespace fptrain::data
