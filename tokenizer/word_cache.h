// Per-thread caches of word -> ids for the model stage. Each thread owns its
// caches, so lookups take no lock. Two generations approximate LRU cheaply:
// when the young map fills up it becomes the old one, and old hits move back.
// A thread keeps a model's cache (at most 2 x kCapacity words) until the
// thread ends, even after the model is destroyed.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fptrain::tokenizer {

class WordCache {
 public:
  static constexpr size_t kCapacity = 1 << 16;       // words per generation, thread and model
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
    auto it = young_.find(key_);
    if (it != young_.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return true;
    }
    auto old = old_.find(key_);
    if (old == old_.end()) return false;
    ids.insert(ids.end(), old->second.begin(), old->second.end());
    std::vector<int32_t> value = std::move(old->second);
    old_.erase(old);  // before insert(), which may swap the generations
    insert(std::move(value));
    return true;
  }

  // Stores ids[start:] for the word of the last lookup.
  void store(const std::vector<int32_t>& ids, size_t start) {
    if (key_.size() > kMaxWordBytes) return;
    insert(std::vector<int32_t>(ids.begin() + start, ids.end()));
  }

 private:
  void insert(std::vector<int32_t> value) {
    if (young_.size() >= kCapacity) {
      old_.swap(young_);
      young_.clear();
    }
    young_.emplace(key_, std::move(value));
  }

  std::unordered_map<std::string, std::vector<int32_t>> young_, old_;
  std::string key_;
};

}  // namespace fptrain::tokenizer
