#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "common/json_input.h"
#include "tokenizer/metaspace_words.h"
#include "tokenizer/unicode.h"
#include "tokenizer/word_cache.h"

namespace fptrain::tokenizer {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

size_t mix(uint64_t key) { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20); }

// A symbol of the word being merged; merged-away symbols get len 0.
struct Symbol {
  int32_t id;
  int32_t prev, next;
  uint32_t len;
};

struct PendingMerge {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};

// Min-heap order: lowest rank first, then leftmost position.
struct LaterMerge {
  bool operator()(const PendingMerge& a, const PendingMerge& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

BpeModel::BpeModel(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options, const std::string& file)
    : vocab_(std::move(vocab)), options_(std::move(options)), instance_(WordCache::new_owner()) {
  ids_.build(&vocab_);
  ascii_ids_.assign(128, -1);
  for (int c = 0; c < 128; ++c) ascii_ids_[c] = ids_.find(std::string(1, static_cast<char>(c)));
  static const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const std::string token = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
    byte_ids_[b] = ids_.find(token);
  }
  if (options_.unk_token) unk_id_ = ids_.find(*options_.unk_token);
  split_at_metaspace_ = ids_.find(kMetaspaceMarker) >= 0 &&
                        std::none_of(vocab_.begin(), vocab_.end(),
                                     [](const std::string& t) { return crosses_metaspace_word(t); });

  size_t capacity = 16;
  while (capacity < merges.size() * 2) capacity <<= 1;
  merge_keys_.assign(capacity, ~uint64_t{0});
  merge_values_.assign(capacity, {0, 0});
  merge_mask_ = capacity - 1;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const int32_t a = ids_.find(left), b = ids_.find(right), merged = ids_.find(left + right);
    if (a < 0 || b < 0 || merged < 0) {
      throw std::runtime_error(file + ": merge " + std::to_string(rank) + " ('" + common::cut_text(left) + "', '" +
                               common::cut_text(right) + "') uses a token missing from the vocabulary");
    }
    const uint64_t key = pair_key(a, b);
    size_t i = mix(key) & merge_mask_;
    while (merge_keys_[i] != ~uint64_t{0} && merge_keys_[i] != key) i = (i + 1) & merge_mask_;
    merge_keys_[i] = key;  // a repeated pair keeps its last rank, as tokenizers' map does
    merge_values_[i] = {static_cast<int32_t>(rank), merged};
  }
}

const BpeModel::MergeValue* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  size_t i = mix(key) & merge_mask_;
  while (true) {
    const uint64_t k = merge_keys_[i];
    if (k == key) return &merge_values_[i];
    if (k == ~uint64_t{0}) return nullptr;
    i = (i + 1) & merge_mask_;
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& ids) const {
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<PendingMerge> heap;
  symbols.clear();
  auto push = [&](int32_t id, size_t len) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, static_cast<uint32_t>(len)});
  };

  // Characters (or their bytes, or the unknown token) as initial symbols.
  int32_t pending_unk_len = 0;
  for (size_t i = 0; i < word.size();) {
    const auto lead = static_cast<unsigned char>(word[i]);
    const size_t len = std::min(unicode::sequence_length(lead), word.size() - i);
    const int32_t id = lead < 0x80 ? ascii_ids_[lead] : ids_.find(word.substr(i, len));
    if (id >= 0) {
      if (pending_unk_len) push(unk_id_, pending_unk_len);
      pending_unk_len = 0;
      push(id, len);
    } else {
      bool done = false;
      if (options_.byte_fallback) {
        done = true;
        for (size_t k = 0; k < len; ++k) done = done && byte_ids_[static_cast<unsigned char>(word[i + k])] >= 0;
        if (done) {
          for (size_t k = 0; k < len; ++k) push(byte_ids_[static_cast<unsigned char>(word[i + k])], 1);
        }
      }
      if (!done && options_.unk_token) {
        if (unk_id_ < 0) {
          throw std::runtime_error("BPE unk_token '" + common::cut_text(*options_.unk_token) +
                                   "' is not in the vocabulary");
        }
        if (pending_unk_len && !options_.fuse_unk) {
          push(unk_id_, pending_unk_len);
          pending_unk_len = 0;
        }
        pending_unk_len += static_cast<int32_t>(len);
      }
      // Without byte fallback or an unk token the character is dropped, as in tokenizers.
    }
    i += len;
  }
  if (pending_unk_len) push(unk_id_, pending_unk_len);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  heap.clear();
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeValue* m = find_merge(symbols[i].id, symbols[i + 1].id)) {
      heap.push_back({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), LaterMerge{});
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), LaterMerge{});
    const PendingMerge top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    const int32_t right_pos = left.next;
    const Symbol right = symbols[right_pos];
    // Skip entries made stale by an earlier merge.
    const MergeValue* current = find_merge(left.id, right.id);
    if (!current || current->new_id != top.new_id) continue;

    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    symbols[right_pos].len = 0;
    if (right.next >= 0) symbols[right.next].prev = top.pos;

    if (left.prev >= 0) {
      if (const MergeValue* m = find_merge(symbols[left.prev].id, left.id)) {
        heap.push_back({m->rank, left.prev, m->new_id});
        std::push_heap(heap.begin(), heap.end(), LaterMerge{});
      }
    }
    if (left.next >= 0) {
      if (const MergeValue* m = find_merge(left.id, symbols[left.next].id)) {
        heap.push_back({m->rank, top.pos, m->new_id});
        std::push_heap(heap.begin(), heap.end(), LaterMerge{});
      }
    }
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids.push_back(symbols[i].id);
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    const int32_t id = ids_.find(piece);
    if (id >= 0) {
      ids.push_back(id);
      return;
    }
  }
  if (!split_at_metaspace_) {
    tokenize_word(piece, ids);
    return;
  }
  for_each_metaspace_word(piece, [&](std::string_view word) { tokenize_word(word, ids); });
}

void BpeModel::tokenize_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.size() > WordCache::kMaxWordBytes) {
    merge_word(word, ids);
    return;
  }
  WordCache& cache = WordCache::for_thread(instance_);
  if (cache.lookup(word, ids)) return;
  const size_t start = ids.size();
  merge_word(word, ids);
  cache.store(ids, start);
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const int32_t id = ids_.find(token);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= static_cast<int32_t>(vocab_.size()) || vocab_[id].empty()) return nullptr;
  return &vocab_[id];
}

}  // namespace fptrain::tokenizer
