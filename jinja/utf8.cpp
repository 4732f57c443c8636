#include "jinja/utf8.h"

namespace fptrain::jinja::utf8 {

char32_t decode(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t extra = b0 >= 0xF8 ? 0 : b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : b0 >= 0xC0 ? 1 : 0;
  if (extra == 0 || i + extra >= s.size()) {  // ASCII, or a byte that starts nothing
    ++i;
    return b0;
  }
  char32_t cp = b0 & (0x3F >> extra);
  for (size_t k = 1; k <= extra; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {  // truncated sequence: the lead byte stands alone
      ++i;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  i += extra + 1;
  return cp;
}

// The code point that ends at s[end); moves end to its first byte.
static char32_t decode_before(std::string_view s, size_t& end) {
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
    --start;
  size_t i = start;
  const char32_t cp = decode(s, i);
  if (i == end) {
    end = start;
    return cp;
  }
  --end;  // not a well-formed sequence: the last byte alone
  return static_cast<unsigned char>(s[end]);
}

void encode(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    decode(s, i);
    ++n;
  }
  return n;
}

std::vector<size_t> offsets(std::string_view s) {
  std::vector<size_t> out;
  out.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    decode(s, i);
  }
  out.push_back(s.size());
  return out;
}

bool is_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t trailing_space(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t before = end;
    if (!is_space(decode_before(s, before))) break;
    end = before;
  }
  return s.size() - end;
}

size_t leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t next = i;
    if (!is_space(decode(s, next))) break;
    i = next;
  }
  return i;
}

namespace {

bool in(char32_t c, char32_t lo, char32_t hi) { return c >= lo && c <= hi; }

// Blocks of punctuation, symbols, marks and private use: not letters.
bool is_symbol_block(char32_t c) {
  return in(c, 0x300, 0x36F) || c == 0x37E || c == 0x387 || in(c, 0x55A, 0x55F) ||
         c == 0x589 || c == 0x60C || c == 0x61B || c == 0x61F || in(c, 0x66A, 0x66D) ||
         c == 0x6D4 || in(c, 0x2000, 0x2BFF) || in(c, 0x2E00, 0x2E7F) || in(c, 0x3000, 0x3004) ||
         in(c, 0x3008, 0x3020) || in(c, 0xE000, 0xF8FF) || in(c, 0xFE00, 0xFE0F) ||
         in(c, 0xFE30, 0xFE4F) || in(c, 0xFF00, 0xFF0F) || in(c, 0xFF1A, 0xFF20) ||
         in(c, 0xFF3B, 0xFF40) || in(c, 0xFF5B, 0xFF65) || in(c, 0x1F000, 0x1FAFF) ||
         in(c, 0xF0000, 0x10FFFF);
}

// One-to-one case pairs; 0 when c has no simple mapping.
char32_t simple_upper(char32_t c) {
  if (c < 0x80) return in(c, 'a', 'z') ? c - 32 : 0;
  if (in(c, 0xE0, 0xFE) && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (in(c, 0x100, 0x17F)) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x178) return 0;
    const bool even_upper = c <= 0x137 || in(c, 0x14A, 0x177);
    if (even_upper) return (c & 1) ? c - 1 : 0;
    return (c & 1) ? 0 : c - 1;
  }
  if (in(c, 0x3B1, 0x3C9)) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c == 0x3AC) return 0x386;
  if (in(c, 0x3AD, 0x3AF)) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (in(c, 0x3CD, 0x3CE)) return c - 63;
  if (in(c, 0x430, 0x44F)) return c - 32;
  if (in(c, 0x450, 0x45F)) return c - 80;
  if (in(c, 0x460, 0x481) || in(c, 0x48A, 0x4BF) || in(c, 0x4D0, 0x52F)) return (c & 1) ? c - 1 : 0;
  if (in(c, 0x4C1, 0x4CE)) return (c & 1) ? 0 : c - 1;
  if (c == 0x4CF) return 0x4C0;
  if (in(c, 0xFF41, 0xFF5A)) return c - 32;
  return 0;
}

char32_t simple_lower(char32_t c) {
  if (c < 0x80) return in(c, 'A', 'Z') ? c + 32 : 0;
  if (in(c, 0xC0, 0xDE) && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (in(c, 0x100, 0x17F)) {
    if (c == 0x130 || c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return 0;
    const bool even_upper = c <= 0x137 || in(c, 0x14A, 0x177);
    if (even_upper) return (c & 1) ? 0 : c + 1;
    return (c & 1) ? c + 1 : 0;
  }
  if (in(c, 0x391, 0x3A9) && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (in(c, 0x388, 0x38A)) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (in(c, 0x38E, 0x38F)) return c + 63;
  if (in(c, 0x410, 0x42F)) return c + 32;
  if (in(c, 0x400, 0x40F)) return c + 80;
  if (in(c, 0x460, 0x481) || in(c, 0x48A, 0x4BF) || in(c, 0x4D0, 0x52F)) return (c & 1) ? 0 : c + 1;
  if (in(c, 0x4C1, 0x4CE)) return (c & 1) ? c + 1 : 0;
  if (c == 0x4C0) return 0x4CF;
  if (in(c, 0xFF21, 0xFF3A)) return c + 32;
  return 0;
}

}  // namespace

bool is_digit(char32_t c) {
  return in(c, '0', '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 || in(c, 0x660, 0x669) ||
         in(c, 0x6F0, 0x6F9) || in(c, 0x966, 0x96F) || in(c, 0x9E6, 0x9EF) || c == 0x2070 ||
         in(c, 0x2074, 0x2079) || in(c, 0x2080, 0x2089) || in(c, 0x2460, 0x2468) ||
         in(c, 0xFF10, 0xFF19) || in(c, 0x1D7CE, 0x1D7FF);
}

bool is_alpha(char32_t c) {
  if (c < 0x80) return in(c, 'a', 'z') || in(c, 'A', 'Z');
  if (c < 0x100) return c == 0xAA || c == 0xB5 || c == 0xBA || (c >= 0xC0 && c != 0xD7 && c != 0xF7);
  return !is_space(c) && !is_digit(c) && !is_symbol_block(c);
}

bool is_alnum(char32_t c) { return is_alpha(c) || is_digit(c); }

bool is_word(char32_t c) { return c == '_' || is_alnum(c); }

bool is_printable(char32_t c) {
  if (c < 0x20 || in(c, 0x7F, 0xA0) || c == 0xAD) return false;
  if (c < 0x600) return true;
  return !(in(c, 0x600, 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x1680 ||
           c == 0x180E || in(c, 0x2000, 0x200F) || in(c, 0x2028, 0x202F) ||
           in(c, 0x205F, 0x206F) || c == 0x3000 || in(c, 0xD800, 0xF8FF) || c == 0xFEFF ||
           in(c, 0xFFF9, 0xFFFB) || in(c, 0xE0000, 0xE007F) || c >= 0xF0000);
}

bool is_cased_lower(char32_t c) {
  return simple_upper(c) != 0 || c == 0xDF || c == 0x138 || c == 0x149;
}

bool is_cased_upper(char32_t c) { return simple_lower(c) != 0 || c == 0x130; }

void append_upper(char32_t c, std::string& out) {
  if (c == 0xDF) {
    out += "SS";
  } else if (c == 0x149) {
    encode(0x2BC, out);
    out += 'N';
  } else {
    const char32_t u = simple_upper(c);
    encode(u ? u : c, out);
  }
}

void append_lower(char32_t c, std::string& out) {
  if (c == 0x130) {
    out += 'i';
    encode(0x307, out);
  } else {
    const char32_t l = simple_lower(c);
    encode(l ? l : c, out);
  }
}

std::string upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_upper(decode(s, i), out);
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_lower(decode(s, i), out);
  return out;
}

}  // namespace fptrain::jinja::utf8
