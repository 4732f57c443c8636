// UTF-8 code points and the Python character classes the interpreter needs.
// Python strings index, count and slice by code point, and str.strip(),
// str.split() and the lexer's \s use Unicode whitespace, so these helpers
// work on code points. Text is expected to be valid UTF-8; a stray byte is
// treated as one code point of its own, never as an error.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fptrain::jinja::utf8 {

// The code point at s[i]; advances i past it.
char32_t decode(std::string_view s, size_t& i);
void encode(char32_t cp, std::string& out);

bool is_ascii(std::string_view s);
size_t length(std::string_view s);
// Byte offsets of every code point, plus s.size() at the end.
std::vector<size_t> offsets(std::string_view s);

// Python's str.isspace() (also what the regex \s matches in the lexer).
bool is_space(char32_t c);
// The byte length of the whitespace that ends `s` / starts `s`.
size_t trailing_space(std::string_view s);
size_t leading_space(std::string_view s);

// Approximations of Python's Unicode classes: exact for ASCII and Latin-1,
// script-level elsewhere (letters of any script are letters).
bool is_alpha(char32_t c);
bool is_digit(char32_t c);
bool is_alnum(char32_t c);
bool is_word(char32_t c);       // the regex \w
bool is_printable(char32_t c);  // str.isprintable(), used by repr()
bool is_cased_lower(char32_t c);
bool is_cased_upper(char32_t c);

// Case mapping for Latin, Greek and Cyrillic (other scripts are unchanged),
// with Python's one-to-many special cases (e.g. "ß".upper() == "SS").
void append_upper(char32_t c, std::string& out);
void append_lower(char32_t c, std::string& out);
std::string upper(std::string_view s);
std::string lower(std::string_view s);

}  // namespace fptrain::jinja::utf8
