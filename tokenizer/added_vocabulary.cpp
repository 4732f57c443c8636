#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace fptrain::tokenizer {
namespace {

// Rust regex \w on one character (Unicode word character).
bool is_word_char(uint32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  static const Regex word("^\\w$");
  std::string s;
  unicode::append_utf8(s, cp);
  return word.matches(s);
}

uint32_t last_code_point(std::string_view s) {
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return unicode::next_code_point(s, start);
}

uint32_t first_code_point(std::string_view s) {
  size_t i = 0;
  return unicode::next_code_point(s, i);
}

// Start of the whitespace run that ends `s` (s.size() when none).
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t next = start;
    if (!unicode::is_whitespace(unicode::next_code_point(s, next))) break;
    end = start;
  }
  return end;
}

// Length of the whitespace run that starts `s`.
size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t next = i;
    if (!unicode::is_whitespace(unicode::next_code_point(s, next))) break;
    i = next;
  }
  return i;
}

}  // namespace

AddedVocabulary::AddedVocabulary() = default;
AddedVocabulary::~AddedVocabulary() = default;
AddedVocabulary::AddedVocabulary(AddedVocabulary&&) noexcept = default;
AddedVocabulary& AddedVocabulary::operator=(AddedVocabulary&&) noexcept = default;

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t token) {
  if (nodes.empty()) nodes.emplace_back();
  int32_t node = 0;
  for (unsigned char c : pattern) {
    auto& next = nodes[node].next;
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t{-1}),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it != next.end() && it->first == c) {
      node = it->second;
    } else {
      const auto child = static_cast<int32_t>(nodes.size());
      next.insert(it, {c, child});
      nodes.emplace_back();  // may reallocate: `next` is not used after this
      node = child;
    }
  }
  nodes[node].token = token;
}

int32_t AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos, size_t& length) const {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const auto& next = nodes[node].next;
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t{-1}),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it == next.end() || it->first != c) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = nodes[node].token;
      length = i + 1 - pos;
    }
  }
  return best;
}

void AddedVocabulary::add(const AddedToken& token, const Normalizer* normalizer) {
  if (token.content.empty()) return;
  std::string form = token.content;
  if (token.normalized && normalizer) normalizer->normalize(form);
  auto it = by_content_.find(token.content);
  if (it != by_content_.end()) {
    by_id_.erase(tokens_[it->second].id);
    tokens_[it->second] = token;
    match_forms_[it->second] = form;
    by_id_[token.id] = it->second;
  } else {
    by_content_[token.content] = tokens_.size();
    by_id_[token.id] = tokens_.size();
    tokens_.push_back(token);
    match_forms_.push_back(form);
  }
  rebuild();
}

void AddedVocabulary::rebuild() {
  for (int s = 0; s < 2; ++s) {
    sets_[s].nodes.clear();
    sets_[s].nodes.emplace_back();
    has_set_[s] = false;
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const int s = tokens_[i].normalized ? 1 : 0;
    sets_[s].insert(match_forms_[i], static_cast<int32_t>(i));
    has_set_[s] = true;
  }
  for (int s = 0; s < 2; ++s) {
    std::fill(std::begin(can_start_[s]), std::end(can_start_[s]), false);
    for (const auto& [c, child] : sets_[s].nodes[0].next) can_start_[s][c] = true;
  }
}

void AddedVocabulary::split(std::string_view text, bool normalized_set, std::vector<TextSegment>& out) const {
  if (text.empty()) return;
  const int s = normalized_set ? 1 : 0;
  if (!has_set_[s]) {
    out.push_back({0, text.size(), -1});
    return;
  }
  const Trie& trie = sets_[s];
  const bool* can_start = can_start_[s];

  size_t start_offset = 0;  // end of the last emitted segment
  size_t pos = 0;
  while (pos < text.size()) {
    if (!can_start[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t length = 0;
    const int32_t index = trie.longest_at(text, pos, length);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos, stop = pos + length;
    pos = stop;  // the matcher resumes after the raw match, kept or not
    if (token.single_word) {
      const bool start_ok = start == 0 || !is_word_char(last_code_point(text.substr(0, start)));
      const bool stop_ok = stop == text.size() || !is_word_char(first_code_point(text.substr(stop)));
      if (!start_ok || !stop_ok) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token.id});
    start_offset = stop;
    pos = std::max(pos, stop);
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::vector<std::string> AddedVocabulary::special_contents() const {
  std::vector<std::string> out;
  for (const auto& t : tokens_)
    if (t.special) out.push_back(t.content);
  return out;
}

const std::string* AddedVocabulary::decoded_form(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &match_forms_[it->second];
}

int32_t AddedVocabulary::max_id() const {
  int32_t m = -1;
  for (const auto& t : tokens_) m = std::max(m, t.id);
  return m;
}

}  // namespace fptrain::tokenizer
