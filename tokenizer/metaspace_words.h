// Splitting a SentencePiece-style pre-token into words at "▁" (U+2581), so the
// BPE and SentencePiece models can encode and cache one word at a time.
#pragma once

#include <algorithm>
#include <string_view>

namespace fptrain::tokenizer {

inline constexpr std::string_view kMetaspaceMarker = "\xE2\x96\x81";

// True when a vocabulary token holds a "▁" after its start and is not made of
// "▁" alone: such a token spans two words, so encoding word by word is unsafe.
inline bool crosses_metaspace_word(std::string_view token) {
  bool only_markers = true;
  for (size_t i = 0; only_markers && i < token.size(); i += kMetaspaceMarker.size()) {
    only_markers = token.compare(i, kMetaspaceMarker.size(), kMetaspaceMarker) == 0;
  }
  return !only_markers && token.find(kMetaspaceMarker, 1) != std::string_view::npos;
}

// Calls fn(word) for each word of `piece`: a run of "▁" and the characters up
// to the next "▁" after them. The words concatenate back to `piece`.
template <typename Fn>
void for_each_metaspace_word(std::string_view piece, Fn&& fn) {
  size_t begin = 0;
  while (begin < piece.size()) {
    size_t end = begin;
    while (end < piece.size() && piece.compare(end, kMetaspaceMarker.size(), kMetaspaceMarker) == 0) end += kMetaspaceMarker.size();
    end = std::min(piece.find(kMetaspaceMarker, end), piece.size());
    fn(piece.substr(begin, end - begin));
    begin = end;
  }
}

}  // namespace fptrain::tokenizer
