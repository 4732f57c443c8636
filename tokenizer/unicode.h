// UTF-8 helpers shared by the tokenizers: decoding and encoding code points and
// the character classes Hugging Face's Rust tokenizers use (Rust's char
// predicates), so our splits fall exactly where theirs do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fptrain::tokenizer::unicode {

// Length of the UTF-8 sequence that starts with `lead` (1 for stray bytes).
inline size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at s[i] and advances i. Invalid bytes decode as U+FFFD
// and advance by one, so a loop always terminates.
uint32_t next_code_point(std::string_view s, size_t& i);

void append_utf8(std::string& out, uint32_t cp);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or values > U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_whitespace(uint32_t cp);

// Rust's char::is_ascii_punctuation || Unicode general category P* (tokenizers' is_punc).
bool is_punctuation(uint32_t cp);

// Rust's char::is_ascii_digit.
inline bool is_ascii_digit(uint32_t cp) { return cp >= '0' && cp <= '9'; }

}  // namespace fptrain::tokenizer::unicode
